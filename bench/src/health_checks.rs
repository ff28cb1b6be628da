//! `herdsman-bench health-checks` (issue 24): active health checks of 10,000 servers at a 1 s
//! interval. herdsman (release build of this workspace) gets one pool of that many servers, each
//! at a loopback address of its own on one port, all reaching one server inside this program,
//! which notes every check: when, and for which address. Measured per run: checks received per
//! second, whether every server was checked, how the checks spread over each 10 ms (against all
//! at one instant), the checker's CPU (its thread from /proc, and its metric) and herdsman's per
//! second and per check, state changes, snapshots published, descriptors and TIME_WAIT; in three
//! scenarios: HTTP checks all passing; HTTP checks of 1% of the servers failing at a time, a new
//! 1% every five intervals; TCP checks (which herdsman closes first) all passing. Every process
//! it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults, the scenarios
//! - `server`   — the one server every address reaches, which answers and notes each check
//! - `herdsman` — its configuration, starting it, and reading its CPU, metrics and log
//! - `report`   — the figures, the summary, the results file and its plot

mod herdsman;
mod report;
mod server;
mod settings;

pub use settings::HealthChecksArgs;

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::kit::markdown::thousands;
use crate::kit::paired::turn_order;
use crate::kit::process::raise_descriptor_limit;
use crate::kit::progress::Progress;
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::{environment, procstat, tools};
use herdsman::{config_shown, Herdsman};
use report::{Run, Session};
use server::HealthServer;
use settings::{Scenario, Settings};

/// How often herdsman's descriptors are counted during the window.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Planned seconds a run costs beyond its window, for the progress line: starting herdsman with
/// its many servers, the two scrapes, stopping it.
const OVERHEAD_SECONDS: f64 = 3.0;

pub fn run(args: HealthChecksArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let program = match &args.herdsman {
        Some(path) => path.clone(),
        None => tools::herdsman_binary(&workspace, args.output.no_build)?,
    };
    // herdsman inherits it: a check in flight holds a descriptor.
    let descriptor_limit = raise_descriptor_limit()?;
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&program, busy);
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let mut session = Session {
        facts: RunFacts::new(setup),
        settings: settings.clone(),
        config: None,
        runs: Vec::new(),
        failure: None,
    };
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    eprintln!(
        "health-checks: {} servers checked every {:?}, {} round(s) of {} s per scenario",
        thousands(f64::from(settings.servers)),
        settings.interval,
        settings.rounds,
        settings.seconds
    );
    let outcome = measure(&settings, &program, scratch.path(), &mut session);
    results::finish(
        "health-checks",
        &settings.out,
        started,
        &mut session,
        outcome,
    )
}

/// Every round: both scenarios, in an order that turns from round to round.
fn measure(
    settings: &Settings,
    program: &Path,
    scratch: &Path,
    session: &mut Session,
) -> anyhow::Result<()> {
    let planned = settings.warm_up().as_secs_f64() + f64::from(settings.seconds) + OVERHEAD_SECONDS;
    let runs = settings.rounds as usize * settings.scenarios.len();
    let mut progress = Progress::new(std::iter::repeat_n(planned, runs));
    for round in 1..=settings.rounds {
        for index in turn_order(settings.scenarios.len(), round) {
            let scenario = settings.scenarios[index];
            let dir = scratch.join(format!("round{round}-{scenario}"));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let run = measure_one(settings, program, round, scenario, &dir, session)
                .with_context(|| format!("round {round}, {scenario}"))?;
            let line = format!(
                "{scenario}: {} checks/s, {} of {} servers checked, busiest 10 ms {:.2} × the \
                 mean, herdsman {:.3} CPUs",
                thousands(run.probes_per_second()),
                thousands(f64::from(run.probed_servers)),
                thousands(f64::from(settings.servers)),
                run.busiest_over_mean(),
                run.process_share()
            );
            progress.report(
                planned,
                &format!("round {round}/{}", settings.rounds),
                &line,
            );
            session.runs.push(run);
        }
    }
    Ok(())
}

/// One run: a fresh server and herdsman, the warm-up, then the window, with the failing set
/// turning in the `changing` scenario.
fn measure_one(
    settings: &Settings,
    program: &Path,
    round: u32,
    scenario: Scenario,
    dir: &Path,
    session: &mut Session,
) -> anyhow::Result<Run> {
    let server = HealthServer::start(settings.servers)?;
    let mut herdsman = Herdsman::start(program, settings, scenario, server.port, dir)?;
    if session.config.is_none() {
        session.config = Some(config_shown(&herdsman.config, settings.servers));
    }
    let failing = Failing::new(settings, scenario);
    failing.turn(&server);
    thread::sleep(settings.warm_up());
    herdsman.check_alive()?;

    // The scrapes stay outside the window: answering /metrics is not the checks' cost.
    let scraped_before = herdsman.scrape()?;
    let before = herdsman.read()?;
    let from_us = server.now_us();
    let from_arrival = server.arrival_count();
    let window = Duration::from_secs(u64::from(settings.seconds));
    let mut peak_descriptors = 0;
    while before.at.elapsed() < window {
        peak_descriptors = peak_descriptors.max(procstat::descriptors_of(&[herdsman.pid()]));
        failing.turn(&server);
        herdsman.check_alive()?;
        thread::sleep(SAMPLE_EVERY.min(window.saturating_sub(before.at.elapsed())));
    }
    let after = herdsman.read()?;
    let to_us = server.now_us();
    let time_wait = procstat::time_wait_on_port(server.port)?;
    let scraped_after = herdsman.scrape()?;
    herdsman.check_alive()?;

    let mut arrivals = server.arrivals_from(from_arrival);
    arrivals.retain(|arrival| (from_us..to_us).contains(&arrival.at_us));
    let (probed_servers, fewest, most) = report::per_server(&arrivals, settings.servers);
    let difference = |later: Option<f64>, earlier: Option<f64>| Some(later? - earlier?);
    Ok(Run {
        round,
        scenario,
        seconds: (after.at - before.at).as_secs_f64(),
        probes: arrivals.len(),
        probed_servers,
        fewest,
        most,
        bins: report::bins(&arrivals, from_us, to_us),
        process: after.process.since(before.process),
        checker: after.checker.zip(before.checker).map(|(a, b)| a.since(b)),
        checker_metric: difference(
            scraped_after.checker_seconds,
            scraped_before.checker_seconds,
        ),
        snapshots: difference(scraped_after.generation, scraped_before.generation),
        downs: after.downs - before.downs,
        ups: after.ups - before.ups,
        peak_descriptors,
        time_wait,
        scrape: scraped_before.took.max(scraped_after.took),
    })
}

/// Which servers' checks fail, in the `changing` scenario: `settings.failing` addresses in a row,
/// the next ones every rotation (none in `steady`).
struct Failing {
    started: Instant,
    rotation: Duration,
    count: u32,
    servers: u32,
}

impl Failing {
    fn new(settings: &Settings, scenario: Scenario) -> Failing {
        Failing {
            started: Instant::now(),
            rotation: settings.rotation(),
            count: match scenario {
                Scenario::Steady | Scenario::Tcp => 0,
                Scenario::Changing => settings.failing,
            },
            servers: settings.servers,
        }
    }

    /// Sets the server's failing addresses for now.
    fn turn(&self, server: &HealthServer) {
        if self.count == 0 {
            return;
        }
        let turns = (self.started.elapsed().as_secs_f64() / self.rotation.as_secs_f64()) as u32;
        let first = turns.wrapping_mul(self.count);
        let failing: Vec<u32> = (0..self.count)
            .map(|i| (first.wrapping_add(i)) % self.servers)
            .collect();
        server.set_failing(&failing);
    }
}
