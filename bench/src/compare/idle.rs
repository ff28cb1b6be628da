//! The idle sweep, in the shape of the libevent benchmark that compared poll with event ports: the
//! same active load with 0, 1,000, 5,000, 15,000 … idle keep-alive client connections held open,
//! per proxy — does throughput hold, and what does each idle connection cost in memory?
//!
//! Every (proxy, idle count) starts the proxy afresh, so that memory an earlier count freed but
//! kept cannot be reused by the next and hide its cost. Rounds rotate the proxies' order, as the
//! main comparison does; a run that fails is recorded and the sweep goes on.

use std::path::Path;

use anyhow::Context;

use super::idle_clients::IdleClients;
use super::measure::{figures_line, measure};
use super::report::idle::{IdleFailure, IdleRun, IdleSweep, SETTLE, WARMUP_SECONDS};
use super::{dir_name, start_target};
use crate::kit::paired::turn_order;
use crate::kit::procstat;
use crate::kit::progress::Progress;
use crate::kit::proxies::{Plan, Target};
use crate::kit::scratch::ScratchDir;
use crate::kit::wrk::{self, Load};

/// Connections being opened at once, over all holder processes, at most; also at most the active
/// load's, so opening never needs more buffers than the warm-up already made.
const OPENING_CONCURRENCY: u32 = 32;

/// Idle connections opened per second, roughly, for the progress estimate.
const OPENED_PER_SECOND: f64 = 5000.0;

/// Planned seconds of one idle run: start, warm-up, opening, settling, the load.
pub fn planned_seconds(seconds: u32, idle: u32) -> f64 {
    1.0 + f64::from(WARMUP_SECONDS)
        + f64::from(idle) / OPENED_PER_SECOND
        + SETTLE.as_secs_f64()
        + f64::from(seconds)
        + super::RUN_OVERHEAD_SECONDS
}

/// Runs every (proxy, idle count) once per round into `sweep`, whose setup is filled in, each
/// proxy planned by `plan(port)` in front of the server on `server_port`.
pub fn sweep(
    wrk: &Path,
    targets: &[Target],
    (plan, server_port): (impl Fn(u16) -> Plan, u16),
    scratch: &ScratchDir,
    sweep: &mut IdleSweep,
    progress: &mut Progress,
) {
    let load = Load {
        connections: sweep.connections,
        seconds: sweep.seconds,
    };
    for round in 1..=sweep.rounds {
        for index in turn_order(targets.len(), round) {
            let target = &targets[index];
            for &idle in &sweep.counts.clone() {
                let dir = scratch
                    .path()
                    .join(format!("idle-{}-{idle}-r{round}", dir_name(&target.label)));
                let result = idle_run(wrk, target, (&plan, server_port), (idle, load), &dir);
                let done = progress.step(planned_seconds(sweep.seconds, idle));
                match result {
                    Ok((figures, mut run)) => {
                        eprintln!(
                            "[{done}] idle {idle}, round {round}/{}: {:<16} {figures}  held {} closed {}  RSS {:.1} → {:.1} MiB",
                            sweep.rounds,
                            target.label,
                            run.held,
                            run.closed,
                            run.rss_before_kib as f64 / 1024.0,
                            run.rss_open_kib as f64 / 1024.0,
                        );
                        run.round = round;
                        sweep.runs.push(run);
                    }
                    Err(e) => {
                        eprintln!(
                            "[{done}] idle {idle}, round {round}: {}: FAILED: {e:#}",
                            target.label
                        );
                        sweep.failures.push(IdleFailure {
                            round,
                            label: target.label.clone(),
                            idle,
                            reason: format!("{e:#}"),
                        });
                    }
                }
            }
        }
    }
}

/// One proxy, freshly started, with `idle` idle clients: warm-up, memory before, open the idle
/// clients, settle, memory and held connections, the load, then whether any idle client was
/// closed. Returns the run (round 0, for the caller to set) and its progress figures.
fn idle_run(
    wrk_path: &Path,
    target: &Target,
    (plan, server_port): (impl Fn(u16) -> Plan, u16),
    (idle, load): (u32, Load),
    dir: &Path,
) -> anyhow::Result<(String, IdleRun)> {
    let (mut process, port, _) = start_target(target, plan, dir)?;
    let warm_up = Load {
        seconds: WARMUP_SECONDS,
        ..load
    };
    wrk::run(wrk_path, port, warm_up).context("the warm-up")?;
    let pid = process.pid();
    let rss_before_kib = procstat::tree_rss_kib(pid)?;
    let clients = if idle > 0 {
        let concurrency = OPENING_CONCURRENCY.min(load.connections);
        Some(IdleClients::open(port, idle, concurrency, dir)?)
    } else {
        None
    };
    std::thread::sleep(SETTLE);
    let rss_open_kib = procstat::tree_rss_kib(pid)?;
    let held = procstat::established_on_port(port)?;
    let measured = measure(wrk_path, &mut process, port, load, server_port)?;
    let rss_after_load_kib = procstat::tree_rss_kib(pid)?;
    let closed = match clients {
        Some(clients) => clients.close()?,
        None => 0,
    };
    Ok((
        figures_line(&measured),
        IdleRun {
            round: 0,
            label: target.label.clone(),
            idle,
            held,
            closed,
            rss_before_kib,
            rss_open_kib,
            rss_after_load_kib,
            wrk: measured.wrk,
            cpu_us_per_request: measured.cpu_us_per_request,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn larger_idle_counts_are_planned_longer() {
        assert_eq!(planned_seconds(10, 0), 14.0);
        assert_eq!(planned_seconds(10, 15_000), 17.0);
    }
}
