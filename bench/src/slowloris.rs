//! `herdsman-bench slowloris`: does a slow client cost only its own connection? herdsman (release
//! build of this workspace) in front of the fast backend serves `wrk -t1 -c50` in rounds, once
//! without and once with 1,000 slow connections open (a quarter each: a head that never ends, a
//! body that never ends, a reader that barely reads, an upload reset midway and started again),
//! and reports the other clients' requests/s, p50 and p99 both ways, their ratio against the
//! issue's 90% target, and how many slow connections herdsman still held at the end. Every process
//! it starts is stopped when it returns, on success or error. `--kinds` opens only some kinds;
//! `--memory-only` skips wrk and measures herdsman's RSS per slow connection, kind by kind.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults
//! - `stack`    — the backend and herdsman (compare's configuration, a longer header timeout)
//! - `kinds`    — the four kinds of slow connection and what each saw of herdsman
//! - `clients`  — the hidden `slowloris-holder` holder processes, and the handle on them
//! - `report`   — the figures, the summary, the results file and its plot
//! - `memory`   — `--memory-only`: RSS per slow connection, per kind

pub mod clients;
mod kinds;
mod memory;
mod report;
mod settings;
mod stack;

pub use settings::SlowlorisArgs;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::cpu::{CpuClock, Measured};
use crate::kit::paired::without_and_with;
use crate::kit::process::raise_descriptor_limit;
use crate::kit::progress::Progress;
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::stack::Stack;
use crate::kit::wrk::{self, Load};
use crate::kit::{environment, procstat, tools};
use clients::SlowClients;
use report::{Session, SlowRun, SlowSide};
use settings::Settings;

/// Unrecorded load before the first round, so that first-run effects stay out of round 1.
pub const WARMUP_SECONDS: u32 = 1;

/// From "all slow connections have made their first connect" to the wrk run: herdsman accepts
/// them all, the slow heads and bodies have sent their first bytes, and the slow readers' answers
/// have filled every buffer on the way.
pub const SETTLE_WITH: Duration = Duration::from_secs(2);

/// After the slow connections are gone, before the next run: herdsman closes its side of them.
const SETTLE_AFTER: Duration = Duration::from_secs(1);

/// How long a holder may go on beyond settling and its wrk run before it stops by itself.
const HOLD_MARGIN: Duration = Duration::from_secs(60);

/// Planned seconds a run costs beyond its wrk duration, for the progress line: without, with.
const OVERHEAD_WITHOUT: f64 = 0.5;
const OVERHEAD_WITH: f64 = 6.0;

pub fn run(args: SlowlorisArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let descriptor_limit = raise_descriptor_limit()?;
    if settings.herdsman_descriptors() > descriptor_limit {
        bail!(
            "{} slow and {} wrk connections need about {} open files in herdsman, and processes \
             here may open {descriptor_limit}: ask for fewer",
            settings.slow,
            settings.connections,
            settings.herdsman_descriptors()
        );
    }
    let herdsman = tools::herdsman_binary(&workspace, args.output.no_build)?;
    let wrk_path = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = crate::kit::environment::machine_lines(&herdsman, busy);
    setup.push(("wrk".into(), tools::version_line(&wrk_path, &["-v"])));
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let client_header_seconds = stack::client_header_seconds(settings.seconds);
    if settings.memory_only {
        let scratch = ScratchDir::create()?;
        return memory::run(
            &settings,
            &herdsman,
            &wrk_path,
            client_header_seconds,
            scratch.path(),
        );
    }
    let mut session = Session {
        facts: RunFacts::new(setup),
        settings: settings.clone(),
        client_header_seconds,
        config: String::new(),
        runs: Vec::new(),
        failure: None,
    };
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    eprintln!(
        "slowloris: {} round(s) of {} s runs, without and with {} slow connections, herdsman with \
         {} worker(s), wrk -c{}",
        settings.rounds, settings.seconds, settings.slow, settings.workers, settings.connections
    );
    let outcome = stack::start(
        &herdsman,
        settings.workers,
        client_header_seconds,
        scratch.path(),
    )
    .and_then(|mut stack| {
        session.config = stack.config.clone();
        measure(
            &settings,
            &wrk_path,
            &mut stack,
            scratch.path(),
            &mut session,
        )
    });
    results::finish("slowloris", &settings.out, started, &mut session, outcome)
}

/// The warm-up, then every round: without and with, in alternating order.
fn measure(
    settings: &Settings,
    wrk_path: &Path,
    stack: &mut Stack,
    scratch: &Path,
    session: &mut Session,
) -> anyhow::Result<()> {
    let load = Load {
        connections: settings.connections,
        seconds: settings.seconds,
    };
    let warm_up = load.for_seconds(WARMUP_SECONDS);
    wrk::run(wrk_path, stack.port, warm_up).context("the warm-up")?;
    let mut progress = Progress::new(planned_runs(settings));
    for round in 1..=settings.rounds {
        for with_slow in without_and_with(round) {
            let run = if with_slow {
                let dir = scratch.join(format!("round-{round}"));
                std::fs::create_dir_all(&dir)?;
                measure_with(settings, wrk_path, stack, load, round, &dir)
                    .with_context(|| format!("round {round}, with slow connections"))?
            } else {
                measure_one(wrk_path, stack, load, round, 0, &[])
                    .with_context(|| format!("round {round}, without slow connections"))?
            };
            progress.report(
                planned_seconds(settings, with_slow),
                &format!("round {round}/{}", settings.rounds),
                &report::progress_line(&run),
            );
            session.runs.push(run);
        }
    }
    Ok(())
}

/// One wrk run against herdsman as it stands, with where the CPU went meanwhile (`slow_clients`:
/// the holder processes, if any).
fn measure_one(
    wrk_path: &Path,
    stack: &mut Stack,
    load: Load,
    round: u32,
    slow: u32,
    slow_clients: &[u32],
) -> anyhow::Result<SlowRun> {
    let pid = stack.herdsman.pid();
    let rss_kib = procstat::tree_rss_kib(pid)?;
    let processes = Measured {
        herdsman: pid,
        backend: stack.backend.pid(),
        slow_clients,
    };
    let before = procstat::tree_cpu_time(pid)?;
    let clock = CpuClock::start(&processes);
    let report = wrk::run(wrk_path, stack.port, load)?;
    let cpu = clock.stop(&processes);
    let after = procstat::tree_cpu_time(pid)?;
    stack.check_alive()?;
    if report.requests == 0 {
        bail!("no request completed");
    }
    Ok(SlowRun {
        round,
        slow,
        cpu_us_per_request: (after - before).as_secs_f64() * 1e6 / report.requests as f64,
        rss_kib,
        cpu,
        wrk: report,
        slow_side: None,
    })
}

/// Opens the slow connections, lets them settle, runs wrk beside them, and has the holders count
/// what they saw; then lets herdsman close its side before the next run.
fn measure_with(
    settings: &Settings,
    wrk_path: &Path,
    stack: &mut Stack,
    load: Load,
    round: u32,
    dir: &Path,
) -> anyhow::Result<SlowRun> {
    let hold = SETTLE_WITH + Duration::from_secs(u64::from(settings.seconds)) + HOLD_MARGIN;
    let rss_before_open_kib = procstat::tree_rss_kib(stack.herdsman.pid())?;
    let clients = SlowClients::open(stack.port, settings.slow, &settings.kinds, hold, dir)?;
    let pids = clients.pids();
    let processes = Measured {
        herdsman: stack.herdsman.pid(),
        backend: stack.backend.pid(),
        slow_clients: &pids,
    };
    let clock = CpuClock::start(&processes);
    std::thread::sleep(SETTLE_WITH);
    let holding = clock.stop(&processes);
    let established_before = procstat::established_on_port(stack.port)?;
    let mut run = measure_one(wrk_path, stack, load, round, settings.slow, &pids)?;
    let established_after = procstat::established_on_port(stack.port)?;
    let tallies = clients.close()?;
    run.slow_side = Some(SlowSide {
        tallies,
        established_before,
        established_after,
        rss_before_open_kib,
        holding,
    });
    std::thread::sleep(SETTLE_AFTER);
    stack.check_alive()?;
    Ok(run)
}

/// The planned seconds of every run, in order.
fn planned_runs(settings: &Settings) -> Vec<f64> {
    (1..=settings.rounds)
        .flat_map(without_and_with)
        .map(|with| planned_seconds(settings, with))
        .collect()
}

/// The planned seconds of one run, without or with the slow connections.
fn planned_seconds(settings: &Settings, with: bool) -> f64 {
    f64::from(settings.seconds)
        + if with {
            OVERHEAD_WITH
        } else {
            OVERHEAD_WITHOUT
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_plan_has_every_run() {
        let settings = Settings {
            slow: 1000,
            workers: 2,
            connections: 50,
            seconds: 10,
            rounds: 3,
            out: PathBuf::from("x.md"),
            kinds: kinds::Kind::ALL.to_vec(),
            memory_only: false,
        };
        let plan = planned_runs(&settings);
        assert_eq!(plan.len(), 6);
        assert_eq!(plan[0], 10.5);
        assert_eq!(plan[1], 16.0);
        let mut progress = Progress::new(plan);
        assert!(progress.step(10.5).starts_with("run 1 of 6, ~"));
    }
}
