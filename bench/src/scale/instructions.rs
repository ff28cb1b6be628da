//! herdsman's own work per request, counted by callgrind: the figure that does not move with the
//! machine's noise (bench/scripts/instructions-per-request.sh counts the same way). herdsman runs
//! under valgrind with one route and with the most routes; for each host, callgrind counts only
//! while wrk asks for it, and the count is dumped and divided by the requests wrk completed. It
//! counts user-space instructions: the kernel's work per request (about 80% of the CPU) is the same
//! whatever the host, so a difference here is the whole difference.

use std::ffi::OsStr;
use std::path::Path;

use anyhow::bail;

use super::configs::{herdsman_routes, Names};
use super::report::InstructionRun;
use super::settings::{Host, Settings};
use crate::kit::callgrind::{Callgrind, START_LIMIT};
use crate::kit::process::probe;
use crate::kit::proxies::Plan;
use crate::kit::stack::listener_and_admin_ports;
use crate::kit::wrk::{self, Load};

/// Seconds of wrk per host while callgrind counts, and connections: valgrind runs herdsman some
/// twenty times slower, so this still counts some 15,000 requests.
pub const COUNTED_SECONDS: u32 = 3;

/// Instructions per request of `herdsman` with one route and with the most, for every host.
pub fn measure(
    settings: &Settings,
    herdsman: &Path,
    wrk_path: &Path,
    backend_port: u16,
    scratch: &Path,
) -> anyhow::Result<Vec<InstructionRun>> {
    let Some(callgrind) = Callgrind::find() else {
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
        let args = [OsStr::new("run"), OsStr::new("-c"), config.as_os_str()];
        let mut counted = callgrind.start("herdsman (callgrind)", herdsman, &args, &dir)?;
        counted
            .process
            .wait_until_answering(port, START_LIMIT, probe)?;
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
        for host in Host::ALL {
            let load = Load {
                connections: settings.connections,
                seconds: COUNTED_SECONDS,
            };
            let host_header = format!("Host: {}", host.name(routes));
            let (instructions, report) =
                counted.count(|| wrk::run_with_headers(wrk_path, port, load, &[&host_header]))?;
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
