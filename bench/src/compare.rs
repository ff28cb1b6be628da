//! `herdsman-bench compare`: herdsman, HAProxy and nginx side by side in front of one backend,
//! taking turns under wrk, round after round; then the results file. Every process it starts is
//! stopped when it returns, on success or error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::process::{free_port, Supervised};
use crate::proxies::{IntakeMode, Plan, ProxyKind, Target};
use crate::report::{self, Run, Session, BACKEND_LABEL};
use crate::scratch::ScratchDir;
use crate::wrk::{self, Load};
use crate::{environment, procstat, targets, tools};

/// Options of `compare`; the defaults are BENCHMARKING.md's headline setup.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Which proxies to measure, in this order.
    #[arg(long, value_delimiter = ',', default_value = "herdsman,haproxy,nginx")]
    pub proxies: Vec<ProxyKind>,
    /// A herdsman binary to measure, as PATH or LABEL=PATH; repeat to compare builds (e.g.
    /// allocators) as extra rows. Default: this workspace's target/release/herdsman, built first.
    #[arg(long = "herdsman-bin", value_name = "[LABEL=]PATH")]
    pub herdsman_bins: Vec<String>,
    /// herdsman intake modes, comma-separated: each herdsman binary is measured once per mode, as
    /// rows labelled "herdsman (MODE)", with `intake = "MODE"` in its config; with several modes
    /// including reuseport, each mode ÷ reuseport is reported too. Default: herdsman's own default,
    /// one row labelled "herdsman".
    #[arg(long, value_delimiter = ',', value_name = "MODE[,MODE…]")]
    pub intake: Vec<IntakeMode>,
    /// Worker processes / threads for every proxy.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// wrk connection counts, comma-separated; each is a separate set of runs.
    #[arg(long, value_delimiter = ',', default_value = "50",
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: Vec<u32>,
    /// Seconds per wrk run ("10" or "10s").
    #[arg(long, default_value = "10", value_parser = parse_seconds)]
    pub duration: u32,
    /// Rounds; in each, every target runs once per connection count.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Seconds of unrecorded load per target before the first round (0: none).
    #[arg(long, default_value = "1", value_parser = parse_seconds)]
    pub warmup: u32,
    /// The results file. Default: bench/results/compare.md in the workspace.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Use the existing target/release/herdsman without running cargo build first.
    #[arg(long)]
    pub no_build: bool,
}

fn parse_seconds(text: &str) -> Result<u32, String> {
    let number = text.strip_suffix('s').unwrap_or(text);
    match number.parse::<u32>() {
        Ok(n) if (1..=3600).contains(&n) || (n == 0 && text.starts_with('0')) => Ok(n),
        _ => Err(format!(
            "expected whole seconds such as 10 or 10s, got {text:?}"
        )),
    }
}

/// A target that started and answered, with where it listens.
struct Running {
    target: Target,
    process: Supervised,
    port: u16,
}

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| workspace.join("bench/results/compare.md"));
    let mut session = Session {
        command: environment::reproduce_command(),
        labels: vec![BACKEND_LABEL.to_string()],
        workers: args.workers,
        seconds: args.duration,
        rounds: args.rounds,
        warmup_seconds: args.warmup,
        connections: args.connections.clone(),
        ..Session::default()
    };
    if args.duration == 0 {
        bail!("--duration must be at least 1 second");
    }

    let (targets, not_run) = targets::resolve_targets(&args, &workspace, &mut session)?;
    session.not_run = not_run;
    let wrk_path = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    environment::record_versions(&mut session, &wrk_path, &targets);

    let load_at_start = environment::load_average();
    let busy_at_start = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy_at_start);
    let scratch = ScratchDir::create()?;
    let backend_port = free_port()?;
    let mut backend = start_backend(backend_port, scratch.path())?;
    let plan = |port| Plan {
        workers: args.workers,
        port,
        backend_port,
        backend_idle: args.connections.iter().copied().max().unwrap_or(0).max(64),
    };

    let mut running = Vec::new();
    for target in targets {
        match start_target(&target, plan, scratch.path(), &mut session) {
            Ok((process, port)) => running.push(Running {
                target,
                process,
                port,
            }),
            Err(e) => session
                .not_run
                .push((target.label.clone(), format!("{e:#}"))),
        }
    }

    let per_round = (running.len() + 1) * args.connections.len();
    let total_seconds = u64::from(args.rounds) * per_round as u64 * u64::from(args.duration + 1)
        + running.len() as u64 * u64::from(args.warmup);
    eprintln!(
        "measuring {} target(s) + backend alone: {} round(s) × {} run(s) of {} s, about {} s",
        running.len(),
        args.rounds,
        per_round,
        args.duration,
        total_seconds
    );
    warm_up(&wrk_path, &mut running, &args, &mut session);

    run_rounds(
        &wrk_path,
        (&mut backend, backend_port),
        &mut running,
        &args,
        &mut session,
    )?;

    drop(running);
    drop(backend);
    session.machine.push((
        "CPUs busy with other work in the second before the first run".into(),
        busy_at_start.map_or("unknown".into(), |b| format!("{:.0}%", b * 100.0)),
    ));
    session.machine.push((
        "load average (1, 5, 15 min) at start / end".into(),
        format!("{load_at_start} / {}", environment::load_average()),
    ));
    session.date = tools::version_line(Path::new("date"), &["-u", "+%Y-%m-%d %H:%M UTC"]);
    write_report(&session, &out)
}

/// Round after round, each connection count, the backend alone then every target in turn (the
/// order rotating by one each round, so no target always runs first or right after another). A
/// target that fails is recorded and dropped (and so stopped) so it cannot disturb the others; a
/// backend that fails ends the comparison.
fn run_rounds(
    wrk_path: &Path,
    (backend, backend_port): (&mut Supervised, u16),
    running: &mut Vec<Running>,
    args: &CompareArgs,
    session: &mut Session,
) -> anyhow::Result<()> {
    for round in 1..=args.rounds {
        for &connections in &args.connections {
            let load = Load {
                connections,
                seconds: args.duration,
            };
            let run = measure(wrk_path, backend, backend_port, load)
                .context("measuring the backend alone")?;
            record(session, round, BACKEND_LABEL, connections, run);
            let mut failed = Vec::new();
            for index in turn_order(running.len(), round) {
                let target = &mut running[index];
                match measure(wrk_path, &mut target.process, target.port, load) {
                    Ok(run) => record(session, round, &target.target.label, connections, run),
                    Err(e) => {
                        let reason = format!("stopped in round {round} at c={connections}: {e:#}");
                        eprintln!("{}: {reason}", target.target.label);
                        session.not_run.push((target.target.label.clone(), reason));
                        failed.push(index);
                    }
                }
            }
            failed.sort_unstable();
            for index in failed.into_iter().rev() {
                running.remove(index);
            }
        }
    }
    Ok(())
}

/// The order targets take their turns in `round` (from 1): 0, 1, … n−1 rotated by round − 1.
fn turn_order(targets: usize, round: u32) -> impl Iterator<Item = usize> {
    let shift = (round as usize).saturating_sub(1);
    (0..targets).map(move |turn| (turn + shift) % targets)
}

fn write_report(session: &Session, out: &Path) -> anyhow::Result<()> {
    let markdown = report::render(session);
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(out, &markdown).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn start_backend(port: u16, scratch: &Path) -> anyhow::Result<Supervised> {
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command
        .arg("backend")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"));
    let mut backend = Supervised::spawn("backend", command, &scratch.join("backend.log"))?;
    backend.wait_until_serving(port, Duration::from_secs(10))?;
    eprintln!("backend on 127.0.0.1:{port} (pid {})", backend.pid());
    Ok(backend)
}

/// Writes the target's config into its own directory, starts it and waits for an answer.
fn start_target(
    target: &Target,
    plan: impl Fn(u16) -> Plan,
    scratch: &Path,
    session: &mut Session,
) -> anyhow::Result<(Supervised, u16)> {
    let dir = scratch.join(dir_name(&target.label));
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let (file, text) = target.config(plan(port), &dir);
    let config = dir.join(file);
    std::fs::write(&config, &text)?;
    session
        .configs
        .push((target.label.clone(), file.to_string(), text));
    let command = target.command(&config, &dir);
    let mut process = Supervised::spawn(&target.label, command, &dir.join("output.log"))?;
    process.wait_until_serving(port, Duration::from_secs(15))?;
    eprintln!(
        "{} on 127.0.0.1:{port} (pid {})",
        target.label,
        process.pid()
    );
    Ok((process, port))
}

/// A directory name for a row label such as "herdsman (balanced)": no spaces or brackets, which
/// some proxies' config files would need quoted.
fn dir_name(label: &str) -> String {
    let name: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.trim_matches('_').to_string()
}

/// Unrecorded load, so first-run effects (page faults, cold caches, pool growth) stay out of round 1.
fn warm_up(wrk: &Path, running: &mut Vec<Running>, args: &CompareArgs, session: &mut Session) {
    if args.warmup == 0 {
        return;
    }
    let load = Load {
        connections: args.connections[0],
        seconds: args.warmup,
    };
    running.retain(|target| match wrk::run(wrk, target.port, load) {
        Ok(_) => true,
        Err(e) => {
            let reason = format!("failed the warm-up: {e:#}");
            session.not_run.push((target.target.label.clone(), reason));
            false
        }
    });
}

/// What one wrk run cost the measured process tree.
struct Measured {
    wrk: wrk::WrkReport,
    cpu_us_per_request: f64,
    peak_rss_kib: u64,
}

fn measure(
    wrk_path: &Path,
    process: &mut Supervised,
    port: u16,
    load: Load,
) -> anyhow::Result<Measured> {
    let pid = process.pid();
    let before = procstat::tree_cpu_time(pid)?;
    let report = wrk::run(wrk_path, port, load)?;
    let after = procstat::tree_cpu_time(pid)?;
    if let Some(reason) = process.exit_reason() {
        bail!("{reason}");
    }
    if report.requests == 0 {
        bail!("no request completed");
    }
    Ok(Measured {
        cpu_us_per_request: (after - before).as_secs_f64() * 1e6 / report.requests as f64,
        peak_rss_kib: procstat::tree_peak_rss_kib(pid)?,
        wrk: report,
    })
}

fn record(session: &mut Session, round: u32, label: &str, connections: u32, m: Measured) {
    eprintln!(
        "round {round}/{} c={connections} {label:<20} {:>9} req/s  p50 {:>6.0} µs  p99 {:>6.0} µs  {:>6.2} CPU-µs/req  {:>6.1} MiB  errors {}",
        session.rounds,
        report::thousands(m.wrk.requests_per_sec),
        m.wrk.p50_us,
        m.wrk.p99_us,
        m.cpu_us_per_request,
        m.peak_rss_kib as f64 / 1024.0,
        m.wrk.socket_errors + m.wrk.bad_status,
    );
    session.runs.push(Run {
        round,
        label: label.to_string(),
        connections,
        wrk: m.wrk,
        cpu_us_per_request: m.cpu_us_per_request,
        peak_rss_kib: m.peak_rss_kib,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        compare: CompareArgs,
    }

    fn parse(args: &[&str]) -> Result<CompareArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("compare").chain(args.iter().copied()))
            .map(|cli| cli.compare)
    }

    #[test]
    fn intake_defaults_to_herdsman_own_default() {
        let args = parse(&[]).unwrap();
        assert!(args.intake.is_empty());
        assert_eq!(args.connections, vec![50]);
    }

    #[test]
    fn intake_takes_a_comma_separated_list_of_modes() {
        let args = parse(&["--intake", "balanced,reuseport"]).unwrap();
        assert_eq!(
            args.intake,
            vec![IntakeMode::Balanced, IntakeMode::Reuseport]
        );
        let args = parse(&["--intake", "shared", "--intake", "exclusive"]).unwrap();
        assert_eq!(args.intake, vec![IntakeMode::Shared, IntakeMode::Exclusive]);
        assert!(parse(&["--intake", "fair"]).is_err());
        assert!(parse(&["--intake", "balanced,"]).is_err());
    }

    #[test]
    fn turns_rotate_round_by_round() {
        let order = |n, round| turn_order(n, round).collect::<Vec<_>>();
        assert_eq!(order(3, 1), vec![0, 1, 2]);
        assert_eq!(order(3, 2), vec![1, 2, 0]);
        assert_eq!(order(3, 4), vec![0, 1, 2]);
        assert_eq!(order(2, 2), vec![1, 0]);
        assert!(order(0, 2).is_empty());
    }

    #[test]
    fn labels_become_plain_directory_names() {
        assert_eq!(dir_name("herdsman (balanced)"), "herdsman__balanced");
        assert_eq!(dir_name("nginx"), "nginx");
    }

    #[test]
    fn seconds_accept_an_optional_suffix() {
        assert_eq!(parse_seconds("10"), Ok(10));
        assert_eq!(parse_seconds("5s"), Ok(5));
        assert_eq!(parse_seconds("0"), Ok(0));
        assert!(parse_seconds("1m").is_err());
        assert!(parse_seconds("").is_err());
    }
}
