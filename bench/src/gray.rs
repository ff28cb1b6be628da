//! `herdsman-bench gray` (issue 39, "Balancing that sees a slow server"): what one sick server of
//! three costs each balancing method. Three servers run in this program (the kit's backend, each
//! counting the requests it gets); the last is sick in each case but two: 50 ms late, 200 ms
//! late, 200 ms late then recovered mid-run, failing fast with 500s; and, as references, all
//! healthy, and the sick server removed from the pool (two servers). The rows: herdsman once per
//! balancing method (`--herdsman-methods`, its release build with its defaults otherwise),
//! HAProxy's `leastconn` and `roundrobin`, nginx's `least_conn` and `random two least_conn`.
//!
//! Per worker count every row is started twice (in front of the three servers, and of the two
//! healthy ones), warmed up, then measured round after round: each case, each connection count,
//! every row in turn under wrk. Per run: requests/s, p50/p99, errors and answers of 400 or more,
//! the sick server's share of the requests (counted at the servers), the proxy's CPU per request
//! (user and kernel apart); for the recovering case the share second by second and how long after
//! the recovery the server had its share back. Then issue 39's targets are judged for the first
//! herdsman method and the results written with a plot of the recovering case. Everything on
//! 127.0.0.1; every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings`   — the options, the full and the short defaults, the plan
//! - `scenario`   — the cases: what the sick server does
//! - `servers`    — the three servers and their counts
//! - `timeline`   — the recovering case's counts over time, and the recovery
//! - `contenders` — the rows, their configurations, and starting them
//! - `report`     — the targets, the tables, the results file and its plot

mod contenders;
mod report;
mod scenario;
mod servers;
mod settings;
mod timeline;

pub use settings::GrayArgs;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::backend::Answering;
use crate::kit::environment;
use crate::kit::markdown::worker_count;
use crate::kit::paired::turn_order;
use crate::kit::process::raise_descriptor_limit;
use crate::kit::progress::Progress;
use crate::kit::proxies;
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::tools;
use crate::kit::wrk::{self, Load};
use contenders::{Contender, Instance};
use report::{GrayRun, Session};
use scenario::{Scenario, RUN_ORDER};
use servers::{Served, Servers};
use settings::{Settings, RUN_OVERHEAD_SECONDS};
use timeline::Recording;

/// After wrk ends, before the servers' counts are read: the requests the proxy forwarded last
/// reach a server (and are counted there, as their heads come in) within it.
const COUNT_SETTLE: Duration = Duration::from_millis(100);

pub fn run(args: GrayArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace)?;
    let herdsman = tools::herdsman_binary_in_target_dir(&workspace, args.output.no_build)?;
    let contenders = contenders::resolve(&settings.herdsman_methods, &herdsman)?;
    let wrk = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    let descriptor_limit = raise_descriptor_limit()?;
    let plan = settings.plan(1, 0, 0, descriptor_limit);
    let own = settings.own_descriptors(2 * contenders.len());
    if plan.descriptors_needed().max(own) > descriptor_limit {
        bail!(
            "{} connections need about {} open files in a process, and processes here may open \
             {descriptor_limit}: ask for fewer",
            settings.most_connections(),
            plan.descriptors_needed().max(own)
        );
    }
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&herdsman, busy);
    let targets: Vec<_> = contenders.iter().map(|c| c.target.clone()).collect();
    let mut peers = proxies::peer_version_lines(&targets);
    peers.dedup();
    setup.extend(peers);
    setup.push(("wrk".into(), tools::version_line(&wrk, &["-v"])));
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let names = contenders.iter().map(|c| c.name().to_string()).collect();
    let mut session = Session::new(RunFacts::new(setup), settings.clone(), names);
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    let outcome = (|| {
        let servers = Servers::start().context("starting the servers")?;
        let mut bench = Bench {
            settings: &settings,
            wrk: &wrk,
            servers: &servers,
            scratch: scratch.path(),
            descriptor_limit,
            progress: Progress::new(settings.planned_steps(contenders.len())),
        };
        for &workers in &settings.workers {
            bench.pass(&contenders, workers, &mut session)?;
        }
        Ok(())
    })();
    results::finish("gray", &settings.out, started, &mut session, outcome)
}

/// What every worker count's pass shares.
struct Bench<'a> {
    settings: &'a Settings,
    wrk: &'a Path,
    servers: &'a Servers,
    scratch: &'a Path,
    descriptor_limit: u64,
    progress: Progress,
}

/// A row's two proxies for one worker count.
struct Running {
    /// Its index in the session's rows.
    row: usize,
    /// In front of the three servers.
    three: Instance,
    /// In front of the two healthy ones.
    two: Instance,
}

impl Bench<'_> {
    /// Every row started with `workers` (twice), warmed up, then round after round of every case.
    fn pass(
        &mut self,
        contenders: &[Contender],
        workers: u32,
        session: &mut Session,
    ) -> anyhow::Result<()> {
        self.servers.set_sick(Answering::AtOnce);
        let mut running = Vec::new();
        for (row, contender) in contenders.iter().enumerate() {
            let plan = |port| {
                self.settings.plan(
                    workers,
                    port,
                    self.servers.ports()[0],
                    self.descriptor_limit,
                )
            };
            let mut start = |servers: &[u16], pool: &str, name: &str| {
                let dir = self.scratch.join(format!("{row}-{workers}w-{name}"));
                contender.start(
                    plan,
                    servers,
                    pool,
                    &dir,
                    &mut session.configs,
                    self.scratch,
                )
            };
            let three = start(self.servers.ports(), "three servers", "three")?;
            let two = start(self.servers.healthy_ports(), "two servers", "two")?;
            running.push(Running { row, three, two });
        }
        for one in &mut running {
            self.warm_up(one, workers, session)?;
        }
        for round in 1..=self.settings.rounds {
            for scenario in RUN_ORDER {
                for &connections in &self.settings.connections {
                    if !self.settings.runs(scenario, connections) {
                        continue;
                    }
                    for index in turn_order(running.len(), round) {
                        let turn = Turn {
                            round,
                            scenario,
                            connections,
                            workers,
                        };
                        let run = self.take_turn(&mut running[index], turn, session)?;
                        session.runs.push(run);
                    }
                }
            }
        }
        Ok(())
    }

    /// `warm_up_seconds` of load on both of a row's proxies, every server healthy; a proxy that
    /// answers none of it with 2xx is misconfigured, and ends the run.
    fn warm_up(
        &mut self,
        one: &mut Running,
        workers: u32,
        session: &Session,
    ) -> anyhow::Result<()> {
        let seconds = self.settings.warm_up_seconds;
        if seconds == 0 {
            return Ok(());
        }
        let load = Load {
            connections: self.settings.connections[0],
            seconds,
        };
        let name = &session.rows[one.row];
        for instance in [&mut one.three, &mut one.two] {
            let report = wrk::run_url(self.wrk, &url(instance.port), load, &[])
                .with_context(|| format!("warming {name} up"))?;
            instance
                .process
                .check_running()
                .with_context(|| format!("{name} during its warm-up"))?;
            if report.requests == 0 || report.bad_status == report.requests {
                bail!(
                    "{name} answered none of its warm-up's {} requests with 2xx; its log: {}",
                    report.requests,
                    instance.process.log_tail(5)
                );
            }
            self.progress.report(
                f64::from(seconds) + RUN_OVERHEAD_SECONDS,
                &format!("warm-up, {}", worker_count(workers)),
                &format!("{name}: {:.0} requests/s", report.requests_per_sec),
            );
        }
        Ok(())
    }

    /// One row's measured run of one case.
    fn take_turn(
        &mut self,
        one: &mut Running,
        turn: Turn,
        session: &Session,
    ) -> anyhow::Result<GrayRun> {
        let Turn {
            round,
            scenario,
            connections,
            workers,
        } = turn;
        let name = &session.rows[one.row];
        let instance = match scenario.has_sick_server() {
            true => &mut one.three,
            false => &mut one.two,
        };
        let seconds = self.settings.seconds_of(scenario);
        let load = Load {
            connections,
            seconds,
        };
        self.servers.set_sick(scenario.sick_answering());
        let before = self.servers.counts();
        let recording = match scenario {
            Scenario::Recovering => Some(Recording::start(
                self.servers.reader(),
                self.servers.sick_conduct(),
                Duration::from_secs(u64::from(self.settings.sick_seconds)),
            )?),
            _ => None,
        };
        let measured =
            wrk::run_url_costing(self.wrk, &url(instance.port), load, instance.process.pid());
        std::thread::sleep(COUNT_SETTLE);
        let timeline = recording.map(Recording::finish).transpose()?;
        let (cpu, report) =
            measured.with_context(|| format!("measuring {name}, {}", turn.text()))?;
        let served = Served::between(before, self.servers.counts());
        instance
            .process
            .check_running()
            .with_context(|| format!("{name} after {}", turn.text()))?;
        let run = GrayRun {
            round,
            workers,
            connections,
            scenario,
            row: one.row,
            seconds,
            cpu,
            wrk: report,
            served,
            timeline,
        };
        self.progress.report(
            f64::from(seconds) + RUN_OVERHEAD_SECONDS,
            &format!("{}, round {round}/{}", turn.text(), self.settings.rounds),
            &run.progress_text(name),
        );
        Ok(run)
    }
}

/// Which run a turn is.
#[derive(Debug, Clone, Copy)]
struct Turn {
    round: u32,
    scenario: Scenario,
    connections: u32,
    workers: u32,
}

impl Turn {
    /// "one server 200 ms late, 50 connections, 1 worker".
    fn text(&self) -> String {
        format!(
            "{}, {} connections, {}",
            self.scenario.text(),
            self.connections,
            worker_count(self.workers)
        )
    }
}

/// Where wrk asks a proxy on `port`.
fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/")
}
