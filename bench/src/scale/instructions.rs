//! herdsman's own work per request, counted by callgrind: the figure that does not move with the
//! machine's noise (bench/scripts/instructions-per-request.sh counts the same way). herdsman runs
//! under valgrind with one route and with the most routes; for each host, callgrind counts only
//! while wrk asks for it, and the count is dumped and divided by the requests wrk completed. It
//! counts user-space instructions: the kernel's work per request (about 80% of the CPU) is the same
//! whatever the host, so a difference here is the whole difference.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::configs::{herdsman_routes, Names};
use super::report::InstructionRun;
use super::settings::{Host, Settings};
use crate::kit::process::{probe, run_with_timeout, Supervised};
use crate::kit::proxies::Plan;
use crate::kit::stack::listener_and_admin_ports;
use crate::kit::tools;
use crate::kit::wrk::{self, Load};

/// How long herdsman under valgrind may take to start (about 3 s with 100,000 routes here).
const START_LIMIT: Duration = Duration::from_secs(120);

/// Seconds of wrk per host while callgrind counts, and connections: valgrind runs herdsman some
/// twenty times slower, so this still counts some 15,000 requests.
pub const COUNTED_SECONDS: u32 = 3;

/// valgrind and callgrind_control, when both are installed.
pub fn tools_present() -> Option<(PathBuf, PathBuf)> {
    Some((
        tools::find_program("valgrind")?,
        tools::find_program("callgrind_control")?,
    ))
}

/// Instructions per request of `herdsman` with one route and with the most, for every host.
pub fn measure(
    settings: &Settings,
    herdsman: &Path,
    wrk_path: &Path,
    backend_port: u16,
    scratch: &Path,
) -> anyhow::Result<Vec<InstructionRun>> {
    let Some((valgrind, control)) = tools_present() else {
        bail!("valgrind is not installed (Debian package valgrind)");
    };
    let mut runs = Vec::new();
    for routes in [1, settings.most_routes()] {
        let dir = scratch.join(format!("callgrind-{routes}"));
        std::fs::create_dir_all(&dir)?;
        let (port, admin_port) = listener_and_admin_ports()?;
        let plan = Plan::herdsman_alone(1, port, backend_port);
        let config = dir.join("herdsman.toml");
        std::fs::write(
            &config,
            herdsman_routes(plan, routes, admin_port, Names::Measured),
        )?;
        let out = dir.join("callgrind.out");
        let mut command = Command::new(&valgrind);
        command
            .arg("--tool=callgrind")
            .arg("--instr-atstart=no")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(herdsman)
            .arg("run")
            .arg("-c")
            .arg(&config)
            .current_dir(&dir);
        let mut process =
            Supervised::spawn("herdsman (callgrind)", command, &dir.join("output.log"))?;
        wait_serving(&mut process, port)?;
        let warm_up = Load {
            connections: 10,
            seconds: 2,
        };
        wrk::run_with_headers(
            wrk_path,
            port,
            warm_up,
            &[&format!("Host: {}", Host::First.name(routes))],
        )?;
        for (dumps, host) in Host::ALL.into_iter().enumerate() {
            let pid = process.pid().to_string();
            callgrind_control(&control, &["-z", &pid])?;
            callgrind_control(&control, &["-i", "on", &pid])?;
            let load = Load {
                connections: settings.connections,
                seconds: COUNTED_SECONDS,
            };
            let report = wrk::run_with_headers(
                wrk_path,
                port,
                load,
                &[&format!("Host: {}", host.name(routes))],
            )?;
            callgrind_control(&control, &["-i", "off", &pid])?;
            callgrind_control(&control, &["-d", &pid])?;
            process.check_running()?;
            let dump = PathBuf::from(format!("{}.{}", out.display(), dumps + 1));
            let instructions = totals(&dump)?;
            let run = InstructionRun {
                routes,
                host,
                requests: report.requests,
                instructions,
            };
            eprintln!(
                "callgrind: {routes} routes, {host} host: {} requests, {:.0} instructions each",
                report.requests,
                run.per_request()
            );
            runs.push(run);
        }
    }
    Ok(runs)
}

/// Waits until herdsman under valgrind answers, or fails with the reason.
fn wait_serving(process: &mut Supervised, port: u16) -> anyhow::Result<()> {
    let started = Instant::now();
    while probe(port).is_err() {
        if let Some(reason) = process.exit_reason() {
            bail!("{reason}; its log ends: {}", process.log_tail(5));
        }
        if started.elapsed() > START_LIMIT {
            bail!(
                "not serving after {START_LIMIT:?}; its log ends: {}",
                process.log_tail(5)
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn callgrind_control(control: &Path, args: &[&str]) -> anyhow::Result<()> {
    let mut command = Command::new(control);
    command.args(args);
    let output = run_with_timeout(command, Duration::from_secs(60))?;
    if !output.status.success() {
        bail!(
            "callgrind_control {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// The instructions a callgrind dump counted: its `totals:` line (or `summary:`).
fn totals(dump: &Path) -> anyhow::Result<u64> {
    // A dump is written by valgrind's process after callgrind_control returns; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(dump).unwrap_or_default();
        if let Some(count) = parse_totals(&text) {
            return Ok(count);
        }
        if Instant::now() > deadline {
            bail!("no totals in {}", dump.display());
        }
        thread::sleep(Duration::from_millis(100));
    }
}

fn parse_totals(text: &str) -> Option<u64> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    field("totals:").or_else(|| field("summary:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dump_s_total_is_read() {
        assert_eq!(
            parse_totals("events: Ir\nfl=x\ntotals: 233434954\n"),
            Some(233_434_954)
        );
        assert_eq!(parse_totals("summary: 12 3\n"), Some(12));
        assert_eq!(parse_totals("summary: 0\ntotals: 7\n"), Some(7));
        assert_eq!(parse_totals("events: Ir\n"), None);
    }
}
