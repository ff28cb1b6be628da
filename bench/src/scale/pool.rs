//! The pool part of `scale`: herdsman in front of one pool of many servers (10,000), once with
//! least-conn and once with round-robin, each with a backend of its own on 0.0.0.0 that every
//! server's loopback address reaches; both warmed until they hold a connection to every server,
//! then measured in turns under wrk. Then, on each, servers added to the pool and removed again
//! through the admin API one at a time, with no load and under wrk, each change timed to its
//! answer.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::configs::herdsman_pool;
use super::report::{Change, ChangeKind, PoolInstance, PoolRun, Session};
use super::settings::{Balance, Settings};
use crate::kit::admin_api;
use crate::kit::backend;
use crate::kit::loopback::address;
use crate::kit::markdown::thousands;
use crate::kit::paired::turn_order;
use crate::kit::process::{free_port, Supervised};
use crate::kit::procstat;
use crate::kit::progress::Progress;
use crate::kit::proxies::start_herdsman;
use crate::kit::stack::listener_and_admin_ports;
use crate::kit::wrk::{self, Load};

/// The algorithms compared over the pool.
const BALANCES: [Balance; 2] = [Balance::LeastConn, Balance::RoundRobin];

/// The pause between two changes under load.
const CHANGE_PACE: Duration = Duration::from_millis(200);

/// herdsman with the large pool, and the backend behind it.
struct Running {
    balance: Balance,
    port: u16,
    admin_port: u16,
    backend_port: u16,
    /// Declared before the backend, so that herdsman stops first.
    herdsman: Supervised,
    _backend: Supervised,
}

/// Everything the pool part needs from the run.
pub struct PoolBench<'a> {
    pub settings: &'a Settings,
    pub wrk: &'a Path,
    pub herdsman: &'a Path,
    pub scratch: &'a Path,
}

impl PoolBench<'_> {
    /// The whole pool part, into `session`.
    pub fn measure(&self, session: &mut Session) -> anyhow::Result<()> {
        let mut running = Vec::new();
        for balance in BALANCES {
            let (instance, one) = self
                .start(balance)
                .with_context(|| format!("starting herdsman with {balance}"))?;
            session.pool_instances.push(instance);
            running.push(one);
        }
        // Until every server has been asked at least once: herdsman then holds a connection to
        // each, as it would in service, and the runs measure reuse rather than connecting.
        let servers = self.settings.servers;
        let warm_up = Load {
            connections: self.settings.connections,
            seconds: (servers / 2_000).clamp(2, 10),
        };
        for one in &mut running {
            wrk::run(self.wrk, one.port, warm_up)?;
            one.herdsman.check_running()?;
        }
        self.rounds(&mut running, session)?;
        for one in &mut running {
            self.changes(one, session)?;
        }
        Ok(())
    }

    fn start(&self, balance: Balance) -> anyhow::Result<(PoolInstance, Running)> {
        let dir = self.scratch.join(format!("pool-{balance}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let backend_port = free_port()?;
        let backend = backend::start_for_every_address(backend_port, &dir)?;
        let (port, admin_port) = listener_and_admin_ports()?;
        let servers = self.settings.servers;
        let config = herdsman_pool(balance, servers, port, admin_port, backend_port);
        let started = Instant::now();
        let mut herdsman = start_herdsman(self.herdsman, &config, port, &dir)?;
        let start = started.elapsed();
        admin_api::wait_for_admin(&mut herdsman, admin_port)?;
        let rss_kib = procstat::tree_rss_kib(herdsman.pid())?;
        eprintln!(
            "herdsman, {balance} over {} servers: serving after {:.0} ms, RSS {:.1} MiB",
            thousands(f64::from(servers)),
            start.as_secs_f64() * 1e3,
            rss_kib as f64 / 1024.0
        );
        Ok((
            PoolInstance {
                balance,
                start,
                rss_kib,
            },
            Running {
                balance,
                port,
                admin_port,
                backend_port,
                herdsman,
                _backend: backend,
            },
        ))
    }

    /// Every round: each algorithm once, in an order that turns.
    fn rounds(&self, running: &mut [Running], session: &mut Session) -> anyhow::Result<()> {
        let settings = self.settings;
        let planned = f64::from(settings.seconds) + 0.3;
        let runs = settings.rounds as usize * running.len();
        let mut progress = Progress::new(std::iter::repeat_n(planned, runs));
        let load = Load {
            connections: settings.connections,
            seconds: settings.seconds,
        };
        for round in 1..=settings.rounds {
            for index in turn_order(running.len(), round) {
                let one = &mut running[index];
                let (cpu, report) =
                    wrk::run_costing(self.wrk, one.port, load, &[], one.herdsman.pid())?;
                one.herdsman.check_running()?;
                if report.requests == 0 {
                    bail!("herdsman with {} answered no request", one.balance);
                }
                let run = PoolRun {
                    round,
                    balance: one.balance,
                    cpu,
                    wrk: report,
                };
                progress.report(
                    planned,
                    &format!("round {round}/{}", settings.rounds),
                    &format!(
                        "{:<11} over {} servers: {:>7} req/s, {:.2} CPU-µs/req",
                        one.balance.to_string(),
                        thousands(f64::from(settings.servers)),
                        thousands(run.wrk.requests_per_sec),
                        run.cpu_us()
                    ),
                );
                session.pool_runs.push(run);
            }
        }
        Ok(())
    }

    /// `changes` servers added and removed one at a time with no load, then as many under wrk.
    fn changes(&self, one: &mut Running, session: &mut Session) -> anyhow::Result<()> {
        let changes = self.settings.changes;
        let pid = one.herdsman.pid();
        let rss_before = procstat::tree_rss_kib(pid)?;
        for index in 0..changes {
            let made = add_and_remove(one, index, self.settings.servers, false)?;
            session.changes.extend(made);
        }
        let seconds = (CHANGE_PACE * changes * 2).as_secs() as u32 + 2;
        let load = Load {
            connections: self.settings.connections,
            seconds,
        };
        let (wrk_path, port) = (PathBuf::from(self.wrk), one.port);
        let loaded = thread::spawn(move || wrk::run(&wrk_path, port, load));
        thread::sleep(Duration::from_millis(500));
        for index in changes..changes * 2 {
            let made = add_and_remove(one, index, self.settings.servers, true)?;
            session.changes.extend(made);
        }
        let report = loaded
            .join()
            .map_err(|_| anyhow::anyhow!("the wrk thread panicked"))??;
        one.herdsman.check_running()?;
        session.change_loads.push((one.balance, report));
        session
            .change_memory
            .push((one.balance, rss_before, procstat::tree_rss_kib(pid)?));
        Ok(())
    }
}

/// Adds server `extra{index}` (at the address after the pool's) and removes it, each timed; paced
/// under load so that wrk's requests fall between and during the changes.
fn add_and_remove(
    one: &mut Running,
    index: u32,
    servers: u32,
    under_load: bool,
) -> anyhow::Result<[Change; 2]> {
    let name = format!("extra{index}");
    let body = format!(
        "{{\"name\":\"{name}\",\"addr\":\"{}:{}\"}}",
        address(servers + index),
        one.backend_port
    );
    let (added, add_took) =
        admin_api::change(one.admin_port, "POST", "/api/pools/large/servers", &body)?;
    if under_load {
        thread::sleep(CHANGE_PACE);
    }
    let path = format!("/api/pools/large/servers/{name}");
    let (removed, remove_took) = admin_api::change(one.admin_port, "DELETE", &path, "")?;
    if under_load {
        thread::sleep(CHANGE_PACE);
    }
    one.herdsman.check_running()?;
    if added != 201 || removed != 200 {
        bail!("adding {name} answered {added}, removing it {removed}");
    }
    let change = |kind, took| Change {
        balance: one.balance,
        kind,
        under_load,
        took,
    };
    Ok([
        change(ChangeKind::Add, add_took),
        change(ChangeKind::Remove, remove_took),
    ])
}
