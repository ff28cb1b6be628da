//! The route part of `scale`: every proxy started with every route count at once (each start
//! timed, its memory read), then rounds in which each of them serves the first route's host, the
//! last route's and an unknown one under wrk, its CPU per request read from /proc; last, herdsman
//! with the most routes reloaded again and again under load, each reload timed.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::configs::{self, herdsman_routes, Names};
use super::report::{Instance, Reload, ReloadLoad, RouteRun, Session};
use super::settings::{Host, Settings};
use crate::kit::admin_api;
use crate::kit::markdown::thousands;
use crate::kit::paired::turn_order;
use crate::kit::process::{probe, Supervised};
use crate::kit::procstat;
use crate::kit::progress::Progress;
use crate::kit::proxies::{Plan, ProxyKind, Target};
use crate::kit::stack::listener_and_admin_ports;
use crate::kit::wrk::{self, Load};

/// How long a proxy may take to start with its routes: nginx with 100,000 server blocks is slow.
const START_LIMIT: Duration = Duration::from_secs(300);

/// How often a starting proxy is asked whether it serves: the resolution of the start times.
const START_POLL: Duration = Duration::from_millis(5);

/// A proxy running with one route count.
struct Running {
    proxy: ProxyKind,
    routes: u32,
    port: u16,
    /// herdsman's admin API; 0 for the others.
    admin_port: u16,
    process: Supervised,
    plan: Plan,
    dir: std::path::PathBuf,
}

/// Everything the route part needs from the run.
pub struct RouteBench<'a> {
    pub settings: &'a Settings,
    pub wrk: &'a Path,
    /// By proxy, the program to run.
    pub programs: &'a [(ProxyKind, std::path::PathBuf)],
    pub backend_port: u16,
    pub descriptor_limit: u64,
    pub scratch: &'a Path,
}

impl RouteBench<'_> {
    /// The whole route part, into `session`.
    pub fn measure(&self, session: &mut Session) -> anyhow::Result<()> {
        let mut running = Vec::new();
        for &routes in &self.settings.routes {
            for &(proxy, ref program) in self.programs {
                let started = self
                    .start(proxy, program, routes)
                    .with_context(|| format!("starting {proxy} with {routes} routes"))?;
                let instance = started.0;
                eprintln!(
                    "{proxy} with {} routes: serving after {:.0} ms, RSS {:.1} MiB",
                    thousands(f64::from(routes)),
                    instance.start.as_secs_f64() * 1e3,
                    instance.rss_kib as f64 / 1024.0
                );
                session.instances.push(instance);
                running.push(started.1);
            }
        }
        let warm_up = Load {
            connections: self.settings.connections,
            seconds: 1,
        };
        for one in &mut running {
            wrk::run_with_headers(
                self.wrk,
                one.port,
                warm_up,
                &[&host_header(Host::First, one.routes)],
            )?;
            one.process.check_running()?;
        }
        self.rounds(&mut running, session)?;
        for one in &running {
            if let Some(instance) = session
                .instances
                .iter_mut()
                .find(|i| i.proxy == one.proxy && i.routes == one.routes)
            {
                instance.rss_after_kib = procstat::tree_rss_kib(one.process.pid()).unwrap_or(0);
            }
        }
        let most = self.settings.most_routes();
        if let Some(herdsman) = running
            .iter_mut()
            .find(|r| r.proxy == ProxyKind::Herdsman && r.routes == most)
        {
            self.reloads(herdsman, session)?;
        }
        Ok(())
    }

    /// Starts `proxy` with `routes` routes; returns when it serves, with its start time and memory.
    fn start(
        &self,
        proxy: ProxyKind,
        program: &Path,
        routes: u32,
    ) -> anyhow::Result<(Instance, Running)> {
        let dir = self.scratch.join(format!("{proxy}-{routes}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (port, admin_port) = listener_and_admin_ports()?;
        let plan = self.plan(port);
        let files = configs::route_files(proxy, plan, routes, admin_port, &dir);
        if let Some((name, text)) = &files.extra {
            std::fs::write(dir.join(name), text)?;
        }
        let config = dir.join(files.config.0);
        std::fs::write(&config, &files.config.1)
            .with_context(|| format!("writing {}", config.display()))?;
        let target = Target {
            label: proxy.to_string(),
            kind: proxy,
            program: program.to_path_buf(),
            intake: None,
        };
        let started = Instant::now();
        let mut process = Supervised::spawn(
            &target.label,
            target.command(&config, &dir),
            &dir.join("output.log"),
        )?;
        loop {
            if let Some(reason) = process.exit_reason() {
                bail!("{reason}; its log ends: {}", process.log_tail(5));
            }
            if probe(port).is_ok() {
                break;
            }
            if started.elapsed() > START_LIMIT {
                bail!(
                    "not serving after {START_LIMIT:?}; its log ends: {}",
                    process.log_tail(5)
                );
            }
            thread::sleep(START_POLL);
        }
        let start = started.elapsed();
        let admin_port = if proxy == ProxyKind::Herdsman {
            admin_api::wait_for_admin(&mut process, admin_port)?;
            admin_port
        } else {
            0
        };
        let rss_kib = procstat::tree_rss_kib(process.pid())?;
        Ok((
            Instance {
                proxy,
                routes,
                start,
                rss_kib,
                rss_after_kib: 0,
            },
            Running {
                proxy,
                routes,
                port,
                admin_port,
                process,
                plan,
                dir,
            },
        ))
    }

    /// compare's plan for one worker in front of the backend, with room for wrk's connections.
    fn plan(&self, port: u16) -> Plan {
        Plan {
            workers: 1,
            port,
            backend_port: self.backend_port,
            backend_idle: 64,
            client_connections: self.settings.connections,
            descriptor_limit: self.descriptor_limit,
        }
    }

    /// Every round: every running proxy, each host, in an order that turns from round to round.
    fn rounds(&self, running: &mut [Running], session: &mut Session) -> anyhow::Result<()> {
        let settings = self.settings;
        let runs = settings.rounds as usize * running.len() * Host::ALL.len();
        let mut progress =
            Progress::new(std::iter::repeat_n(f64::from(settings.seconds) + 0.3, runs));
        let load = Load {
            connections: settings.connections,
            seconds: settings.seconds,
        };
        for round in 1..=settings.rounds {
            for index in turn_order(running.len(), round) {
                let one = &mut running[index];
                for host_index in turn_order(Host::ALL.len(), round) {
                    let host = Host::ALL[host_index];
                    let run = measure_one(self.wrk, one, host, load, round)?;
                    progress.report(
                        f64::from(settings.seconds) + 0.3,
                        &format!("round {round}/{}", settings.rounds),
                        &format!(
                            "{:<8} {:>7} routes, {host:<7} host: {:>7} req/s, {:.2} CPU-µs/req",
                            one.proxy.to_string(),
                            thousands(f64::from(one.routes)),
                            thousands(run.wrk.requests_per_sec),
                            run.cpu_us()
                        ),
                    );
                    session.runs.push(run);
                }
            }
        }
        Ok(())
    }

    /// herdsman with the most routes, reloaded `changes` times by `POST /api/reload` while wrk
    /// asks for the last route's host; each reload alternates the routes' names, so each one
    /// compiles a new index.
    fn reloads(&self, herdsman: &mut Running, session: &mut Session) -> anyhow::Result<()> {
        let changes = self.settings.changes;
        let pid = herdsman.process.pid();
        let rss_before = procstat::tree_rss_kib(pid)?;
        let pace = Duration::from_secs(1);
        let load = Load {
            connections: self.settings.connections,
            seconds: changes + 1,
        };
        let (wrk_path, port) = (self.wrk.to_path_buf(), herdsman.port);
        let header = host_header(Host::Last, herdsman.routes);
        let loaded =
            thread::spawn(move || wrk::run_with_headers(&wrk_path, port, load, &[&header]));
        let config = herdsman.dir.join("herdsman.toml");
        let mut reloads = Vec::new();
        for index in 0..changes {
            let names = if index % 2 == 0 {
                Names::Renamed
            } else {
                Names::Measured
            };
            let text = herdsman_routes(herdsman.plan, herdsman.routes, herdsman.admin_port, names);
            std::fs::write(&config, text)?;
            let began = Instant::now();
            let (status, took) = admin_api::change(herdsman.admin_port, "POST", "/api/reload", "")?;
            herdsman.process.check_running()?;
            let rss_kib = procstat::tree_rss_kib(pid)?;
            eprintln!(
                "reload {}/{changes} of {} routes: {status} after {:.0} ms, RSS {:.1} MiB",
                index + 1,
                thousands(f64::from(herdsman.routes)),
                took.as_secs_f64() * 1e3,
                rss_kib as f64 / 1024.0
            );
            reloads.push(Reload {
                status,
                took,
                rss_kib,
            });
            thread::sleep(pace.saturating_sub(began.elapsed()));
        }
        let report = loaded
            .join()
            .map_err(|_| anyhow::anyhow!("the wrk thread panicked"))??;
        session.reload_load = Some(ReloadLoad {
            routes: herdsman.routes,
            rss_before_kib: rss_before,
            peak_rss_kib: procstat::tree_peak_rss_kib(pid)?,
            wrk: report,
        });
        session.reloads = reloads;
        Ok(())
    }
}

/// The `Host` header of requests for `host` in a config of `routes` routes.
fn host_header(host: Host, routes: u32) -> String {
    format!("Host: {}", host.name(routes))
}

/// One wrk run against `one` for `host`, with the proxy's CPU over it.
fn measure_one(
    wrk_path: &Path,
    one: &mut Running,
    host: Host,
    load: Load,
    round: u32,
) -> anyhow::Result<RouteRun> {
    let header = host_header(host, one.routes);
    let (cpu, report) = wrk::run_costing(wrk_path, one.port, load, &[&header], one.process.pid())?;
    one.process.check_running()?;
    if report.requests == 0 {
        bail!(
            "{} with {} routes answered no request for {host}",
            one.proxy,
            one.routes
        );
    }
    Ok(RouteRun {
        round,
        proxy: one.proxy,
        routes: one.routes,
        host,
        cpu,
        wrk: report,
    })
}
