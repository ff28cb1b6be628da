//! `herdsman-bench cache` (issue 38, "Speed and the herd"): herdsman's cache against Varnish,
//! nginx's `proxy_cache` and HAProxy's cache, each configured equivalently in front of one origin
//! that says how long its answers may be kept and counts the requests that reach it.
//!
//! Per worker count, every cache is started and then measured in two parts:
//! - **hits**: wrk, 50 keep-alive connections, on a 1 KiB and a 64 KiB object stored by a warm-up
//!   (the origin's count during each run shows that none reached it), every cache in turn, round
//!   after round, beside herdsman's own listener on a pool without a cache (a *proxied* request
//!   of the same object, in the same process): requests/s, p50/p99, CPU per request from /proc
//!   (user and kernel apart);
//! - **the stampede**: `--clients` connections opened, then one request each released at once
//!   for an object the origin takes 500 ms to make: fresh (the reference: every answer a hit),
//!   just expired (`max-age=1`), and just expired with `stale-while-revalidate=30`: the requests
//!   that reached the origin per expiry and the clients' p50/p99/max.
//!
//! Then the targets are judged and the results written. The hit ratio is `cache-replay`'s.
//! Every process it starts is stopped when it returns, on success or error.
//!
//! `cache-disk` (the `disk` submodule) measures herdsman's disk tier in front of the same origin.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults, the plan
//! - `origin`   — the origin server, on a thread of this program
//! - `caches`   — the four caches' configurations, and starting them
//! - `stampede` — the clients released at once on one expiry
//! - `report`   — the targets, the tables, the results file and its plot
//! - `disk`     — `cache-disk`: memory hits beside disk reads, and the hit ratio across a binary
//!   upgrade with `[cache.disk]` and without

mod caches;
pub mod disk;
mod origin;
mod report;
mod settings;
mod stampede;

pub use settings::CacheArgs;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::environment;
use crate::kit::markdown::worker_count;
use crate::kit::paired::turn_order;
use crate::kit::process::{free_port, raise_descriptor_limit};
use crate::kit::progress::Progress;
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::tools;
use crate::kit::wrk::{self, Load};
use caches::{CacheTarget, Cacher, Running};
use origin::{object_path, Freshness, Origin};
use report::{ExpiryRun, HitRun, NotRun, Row, Session};
use settings::{Settings, CONNECTIONS, SIZES, WARM_UP_SECONDS};

/// The stampedes, in the order run and reported.
pub const STAMPEDES: [Freshness; 3] = [
    Freshness::Fresh,
    Freshness::Expiring,
    Freshness::StaleWhileRevalidate,
];

/// After a hits run, before the origin's count is read.
const ORIGIN_SETTLE: Duration = Duration::from_millis(200);

pub fn run(args: CacheArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace)?;
    let (targets, not_run) = resolve_targets(&settings, &workspace, args.output.no_build)?;
    if targets.is_empty() {
        bail!("no cache to measure: {not_run:?}");
    }
    let wrk = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    let descriptor_limit = raise_descriptor_limit()?;
    let needed = settings
        .plan(1, 0, 0, descriptor_limit)
        .descriptors_needed()
        .max(settings.own_descriptors());
    if needed > descriptor_limit {
        bail!(
            "--clients {} needs about {needed} open files in a process, and processes here may \
             open {descriptor_limit}: ask for fewer",
            settings.clients
        );
    }
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let setup = setup_lines(&targets, &wrk, busy, descriptor_limit);
    let mut session = Session::new(RunFacts::new(setup), settings.clone(), &targets, not_run);
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    let outcome = (|| {
        let origin = Origin::start()?;
        let mut bench = Bench {
            settings: &settings,
            wrk: &wrk,
            origin: &origin,
            progress: Progress::new(settings.planned_steps()),
        };
        for &workers in &settings.workers {
            let mut running = Vec::new();
            for target in &targets {
                let dir = scratch.path().join(format!("{}-{workers}w", target.cacher));
                let plan = settings.plan(workers, free_port()?, origin.port, descriptor_limit);
                let (one, (file, text)) = target.start(plan, &dir).with_context(|| {
                    format!(
                        "starting {} with {}",
                        target.cacher.written(),
                        worker_count(workers)
                    )
                })?;
                let title = format!("{}, {}", target.cacher.written(), worker_count(workers));
                session.configs.record(&title, &file, &text, scratch.path());
                running.push(one);
            }
            bench.hits(&mut running, workers, &mut session)?;
            bench.stampedes(&mut running, workers, &mut session)?;
        }
        Ok(())
    })();
    results::finish("cache", &settings.out, started, &mut session, outcome)
}

/// The caches asked for, each with its program (herdsman built first unless `no_build`), and
/// those that cannot run, with why (a peer not installed where it cannot be installed).
fn resolve_targets(
    settings: &Settings,
    workspace: &Path,
    no_build: bool,
) -> anyhow::Result<(Vec<CacheTarget>, NotRun)> {
    let mut targets = Vec::new();
    let mut not_run = Vec::new();
    for &cacher in &settings.caches {
        let program = match cacher {
            Cacher::Herdsman => Ok(tools::herdsman_binary(workspace, no_build)?),
            peer => peer.peer_program(),
        };
        match program {
            Ok(program) => targets.push(CacheTarget { cacher, program }),
            Err(e) => {
                eprintln!("note: {} is not measured: {e:#}", cacher.written());
                not_run.push((cacher.written().to_string(), format!("{e:#}")));
            }
        }
    }
    Ok((targets, not_run))
}

/// Versions of every cache and of wrk, the machine, and the open-files limit.
fn setup_lines(
    targets: &[CacheTarget],
    wrk: &Path,
    busy: Option<f64>,
    descriptor_limit: u64,
) -> Vec<(String, String)> {
    let mut setup: Vec<(String, String)> = targets
        .iter()
        .map(|t| t.cacher.version_line(&t.program))
        .collect();
    setup.extend(environment::machine_lines_without_herdsman(busy));
    setup.push(("wrk".into(), tools::version_line(wrk, &["-v"])));
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    setup
}

/// What every worker count's pass shares.
struct Bench<'a> {
    settings: &'a Settings,
    wrk: &'a Path,
    origin: &'a Origin,
    progress: Progress,
}

impl Bench<'_> {
    /// Each object stored and warmed in every cache, then round after round of every row in turn.
    fn hits(
        &mut self,
        running: &mut [Running],
        workers: u32,
        session: &mut Session,
    ) -> anyhow::Result<()> {
        for one in running.iter_mut() {
            for size in SIZES {
                let load = Load {
                    connections: CONNECTIONS,
                    seconds: WARM_UP_SECONDS,
                };
                let report = wrk::run_url(self.wrk, &url(one.port, size), load, &[])
                    .with_context(|| format!("warming {} up", one.cacher.written()))?;
                one.process
                    .check_running()
                    .with_context(|| format!("{} during its warm-up", one.cacher.written()))?;
                if report.bad_status > 0 || report.requests == 0 {
                    bail!(
                        "{} answered {} of {} warm-up requests with 400 or more; its log: {}",
                        one.cacher.written(),
                        report.bad_status,
                        report.requests,
                        one.process.log_tail(5)
                    );
                }
                self.progress.report(
                    f64::from(WARM_UP_SECONDS) + settings::RUN_OVERHEAD_SECONDS,
                    &format!("warm-up, {}", worker_count(workers)),
                    &format!("{} {}", one.cacher.written(), report::size_text(size)),
                );
            }
        }
        let rows = rows(running);
        for round in 1..=self.settings.rounds {
            for size in SIZES {
                for index in turn_order(rows.len(), round) {
                    let (row, at) = rows[index];
                    let run = self.hit_run(&mut running[at], row, size, workers, round)?;
                    self.progress.report(
                        f64::from(self.settings.duration) + settings::RUN_OVERHEAD_SECONDS,
                        &format!(
                            "{}, {}, round {round}/{}",
                            report::size_text(size),
                            worker_count(workers),
                            self.settings.rounds
                        ),
                        &run.progress_text(),
                    );
                    session.hits.push(run);
                }
            }
        }
        Ok(())
    }

    /// One wrk run of `row` (a cache, or herdsman's proxied listener) on the object of `size`.
    fn hit_run(
        &mut self,
        one: &mut Running,
        row: Row,
        size: usize,
        workers: u32,
        round: u32,
    ) -> anyhow::Result<HitRun> {
        let port = match row {
            Row::Proxied => one.proxied_port.context("herdsman's proxied listener")?,
            Row::Cache(_) => one.port,
        };
        let load = Load {
            connections: CONNECTIONS,
            seconds: self.settings.duration,
        };
        let path = object_path(size);
        let before = self.origin.requests_for(&path);
        let (cpu, report) =
            wrk::run_url_costing(self.wrk, &url(port, size), load, one.process.pid())
                .with_context(|| format!("measuring {}", row.name()))?;
        // Requests the row had under way when wrk stopped reach the origin just after: counted
        // with it, not with the next row's run.
        std::thread::sleep(ORIGIN_SETTLE);
        let origin_requests = self.origin.requests_for(&path) - before;
        one.process
            .check_running()
            .with_context(|| format!("{} after its run", row.name()))?;
        Ok(HitRun {
            round,
            size,
            workers,
            row,
            cpu,
            wrk: report,
            origin_requests,
        })
    }

    /// Every stampede, `expiries` times each, every cache in turn.
    fn stampedes(
        &mut self,
        running: &mut [Running],
        workers: u32,
        session: &mut Session,
    ) -> anyhow::Result<()> {
        let clients = self.settings.clients as usize;
        for freshness in STAMPEDES {
            for expiry in 1..=self.settings.expiries {
                for index in turn_order(running.len(), expiry) {
                    let one = &mut running[index];
                    let tag = format!("{}-{workers}w-{expiry}", one.cacher);
                    let outcome = stampede::expiry(self.origin, one.port, freshness, &tag, clients)
                        .with_context(|| {
                            format!(
                                "{}'s stampede ({})",
                                one.cacher.written(),
                                freshness.path_word()
                            )
                        })?;
                    one.process
                        .check_running()
                        .with_context(|| format!("{} after its stampede", one.cacher.written()))?;
                    let run = ExpiryRun {
                        freshness,
                        workers,
                        expiry,
                        cacher: one.cacher,
                        outcome,
                    };
                    self.progress.report(
                        settings::EXPIRY_SECONDS,
                        &format!(
                            "stampede {}, {}, expiry {expiry}/{}",
                            report::freshness_text(freshness),
                            worker_count(workers),
                            self.settings.expiries
                        ),
                        &run.progress_text(),
                    );
                    session.expiries.push(run);
                }
            }
        }
        Ok(())
    }
}

/// The rows of a pass, each with the index of the running cache it measures: every cache, and
/// after herdsman its proxied listener.
fn rows(running: &[Running]) -> Vec<(Row, usize)> {
    let mut rows = Vec::new();
    for (at, one) in running.iter().enumerate() {
        rows.push((Row::Cache(one.cacher), at));
        if one.proxied_port.is_some() {
            rows.push((Row::Proxied, at));
        }
    }
    rows
}

/// Where wrk asks a cache on `port` for the object of `size`.
fn url(port: u16, size: usize) -> String {
    format!("http://127.0.0.1:{port}{}", object_path(size))
}
