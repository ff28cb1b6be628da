//! `herdsman-bench observability`: what metrics scraping and access logs cost. herdsman (release
//! build of this workspace, `compare`'s configuration, the admin API on loopback) in front of the
//! fast backend serves `wrk -t1 -c50` in rounds, per worker count, in two conditions: **off** (no
//! access log, nobody scrapes the admin API) and **on** (an access log in `combined` on the
//! listener, and `/metrics` scraped every second); with `--json`, a third with the log in JSON.
//! Each run has a fresh herdsman, since the conditions differ in configuration. It reports
//! requests/s, p50, p99 and herdsman's CPU per request per condition, on ÷ off against the issue's
//! 95% target, the access log's lines against wrk's requests (counted once herdsman has stopped
//! gracefully) and the scrapes. Every process it starts is stopped when it returns.
//!
//! Layout:
//! - `settings`  — the options, the full and the short defaults, the order of the conditions
//! - `condition` — off, on, json: what each configures and whether it is scraped
//! - `stack`     — herdsman's configuration per condition; starting it and stopping it gracefully
//! - `scraper`   — the thread that GETs `/metrics` every second, and what it got
//! - `logfile`   — counting the access log's lines and bytes, and matching them with wrk's count
//! - `report`    — the figures, the verdict, the summary, the results file and its plot

mod condition;
mod logfile;
mod report;
mod scraper;
mod settings;
mod stack;

pub use settings::ObservabilityArgs;

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::cpu::{CpuClock, Measured};
use crate::kit::logfile::LogCount;
use crate::kit::process::free_port;
use crate::kit::progress::Progress;
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::wrk::{self, Load};
use crate::kit::{backend, environment, procstat, tools};
use condition::Condition;
use logfile::LogTally;
use report::{ObservedRun, Session};
use scraper::Scraper;
use settings::Settings;
use stack::Herdsman;

/// Unrecorded load on each fresh herdsman before its run, so that first-run effects (and the
/// first `/metrics` answer) stay out of the figures.
pub const WARMUP_SECONDS: u32 = 1;

/// From the end of the warm-up to the line count before the run: longer than herdsman holds a
/// line in a worker's buffer (100 ms), so that every warm-up line is in the file and none of them
/// is counted as the run's. Every condition waits as long.
const SETTLE: Duration = Duration::from_millis(500);

/// Planned seconds a run costs beyond its wrk duration, for the progress line: starting herdsman,
/// the warm-up, settling, stopping it.
const OVERHEAD_SECONDS: f64 = 2.0;

pub fn run(args: ObservabilityArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let herdsman = tools::herdsman_binary(&workspace, args.output.no_build)?;
    let wrk_path = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = crate::kit::environment::machine_lines(&herdsman, busy);
    setup.push(("wrk".into(), tools::version_line(&wrk_path, &["-v"])));
    let mut session = Session {
        facts: RunFacts::new(setup),
        settings: settings.clone(),
        configs: Vec::new(),
        runs: Vec::new(),
        failure: None,
    };
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    eprintln!(
        "observability: {} round(s) of {} s runs per worker count ({}), conditions {}, wrk -c{}",
        settings.rounds,
        settings.seconds,
        settings
            .workers
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        settings
            .conditions
            .iter()
            .map(Condition::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        settings.connections
    );
    let outcome = measure(
        &settings,
        &herdsman,
        &wrk_path,
        scratch.path(),
        &mut session,
    );
    results::finish(
        "observability",
        &settings.out,
        started,
        &mut session,
        outcome,
    )
}

/// Every run: per worker count, per round, every condition in that round's order, each against a
/// herdsman of its own; one backend serves them all.
fn measure(
    settings: &Settings,
    program: &Path,
    wrk_path: &Path,
    scratch: &Path,
    session: &mut Session,
) -> anyhow::Result<()> {
    let backend_port = free_port()?;
    let mut backend = backend::start(backend_port, scratch)?;
    eprintln!(
        "backend on 127.0.0.1:{backend_port} (pid {})",
        backend.pid()
    );
    let runs = settings.workers.len() * settings.rounds as usize * settings.conditions.len();
    let planned = f64::from(settings.seconds + WARMUP_SECONDS) + OVERHEAD_SECONDS;
    let mut progress = Progress::new(std::iter::repeat_n(planned, runs));
    for &workers in &settings.workers {
        for round in 1..=settings.rounds {
            for condition in settings.order(round) {
                let dir = scratch.join(format!("{workers}w-round{round}-{condition}"));
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let run = measure_one(
                    settings,
                    program,
                    wrk_path,
                    BackendAt {
                        port: backend_port,
                        pid: backend.pid(),
                    },
                    (workers, round, condition),
                    &dir,
                    session,
                )
                .with_context(|| {
                    format!("{workers} worker(s), round {round}, condition {condition}")
                })?;
                backend.check_running()?;
                progress.report(
                    planned,
                    &format!("{workers} worker(s), round {round}/{}", settings.rounds),
                    &report::progress_line(&run),
                );
                session.runs.push(run);
            }
        }
    }
    Ok(())
}

/// Where one run's herdsman forwards to.
#[derive(Debug, Clone, Copy)]
struct BackendAt {
    port: u16,
    pid: u32,
}

/// Starts herdsman for `condition`, warms it up, measures one wrk run (scraping meanwhile when
/// the condition does), stops herdsman gracefully and counts its access log.
fn measure_one(
    settings: &Settings,
    program: &Path,
    wrk_path: &Path,
    backend: BackendAt,
    (workers, round, condition): (u32, u32, Condition),
    dir: &Path,
    session: &mut Session,
) -> anyhow::Result<ObservedRun> {
    let mut herdsman = Herdsman::start(program, workers, backend.port, condition, dir)?;
    if !session.configs.iter().any(|(c, _)| *c == condition) {
        session.configs.push((condition, herdsman.config.clone()));
    }
    let load = Load {
        connections: settings.connections,
        seconds: settings.seconds,
    };
    let warm_up = load.for_seconds(WARMUP_SECONDS);
    let scraper = start_scraper(condition, &herdsman)?;
    wrk::run(wrk_path, herdsman.port, warm_up).context("the warm-up")?;
    if let Some(scraper) = scraper {
        // The warm-up's scrapes are not counted; the run's are.
        scraper.finish()?;
    }
    thread::sleep(SETTLE);
    let log_before = herdsman
        .access_log
        .as_deref()
        .map(LogCount::of)
        .transpose()?;

    let pid = herdsman.pid();
    let processes = Measured {
        herdsman: pid,
        backend: backend.pid,
        slow_clients: &[],
    };
    let cpu_before = procstat::tree_cpu_time(pid)?;
    let clock = CpuClock::start(&processes);
    let scraper = start_scraper(condition, &herdsman)?;
    let report = wrk::run(wrk_path, herdsman.port, load)?;
    let scrapes = scraper.map(Scraper::finish).transpose()?;
    let cpu = clock.stop(&processes);
    let cpu_after = procstat::tree_cpu_time(pid)?;
    herdsman.check_alive()?;
    if report.requests == 0 {
        bail!("no request completed");
    }
    herdsman.stop_gracefully()?;
    let log = match (&herdsman.access_log, log_before) {
        (Some(path), Some(before)) => Some(LogTally {
            written: LogCount::of(path)?.since(before),
            requests: report.requests,
            in_flight: u64::from(settings.connections),
        }),
        _ => None,
    };
    Ok(ObservedRun {
        workers,
        round,
        condition,
        cpu_us_per_request: (cpu_after - cpu_before).as_secs_f64() * 1e6 / report.requests as f64,
        wrk: report,
        cpu,
        own_cpu: cpu.this_program,
        scrapes,
        log,
    })
}

/// A scraper of `herdsman`'s metrics, in the conditions that scrape.
fn start_scraper(condition: Condition, herdsman: &Herdsman) -> anyhow::Result<Option<Scraper>> {
    condition
        .scraped()
        .then(|| Scraper::start(herdsman.admin_port))
        .transpose()
}
