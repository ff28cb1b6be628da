//! `herdsman-bench h2` (issue 37): HTTP/2 to clients. h2load against herdsman, HAProxy 2.6 and
//! nginx 1.22 in front of the same HTTP/1.1 backend (the kit's), over TLS (h2 by ALPN, the
//! kit's ECDSA certificate) and over h2c (prior knowledge), each with one and with two workers,
//! under 50 connections × 10 streams and 10 connections × 100 streams: requests/s, p99 (from
//! h2load's per-request log), CPU-µs per request of the proxy's processes (user and kernel
//! apart) and their resident memory under load. Rounds interleave the proxies so that a drift
//! falls on all; every process it starts is stopped when it returns, on success or error.
//!
//! herdsman runs with the defaults a user gets but for the two keys that turn HTTP/2 on, which are
//! off by default while it is being built: `h2c = true` on the cleartext listener, `http2 = true`
//! on the TLS one.
//!
//! gRPC cells (HTTP/2 to servers) are left for when herdsman speaks HTTP/2 to servers: they will
//! be a `Cell` kind of their own beside these, measured by the same rounds and reported in a
//! section of their own.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults, the transports and loads
//! - `runs`     — what each run measured and the figures it gives
//! - `report`   — the targets, the tables, the results file and its plot

mod report;
mod runs;
mod settings;

pub use settings::H2Args;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::backend;
use crate::kit::certificates::{self, Certificates};
use crate::kit::cpu::{CpuClock, Measured};
use crate::kit::environment;
use crate::kit::h2load::{self, StreamLoad};
use crate::kit::markdown::thousands;
use crate::kit::paired::turn_order;
use crate::kit::process::{free_port, raise_descriptor_limit, Supervised};
use crate::kit::procstat;
use crate::kit::progress::Progress;
use crate::kit::proxies::{self, Plan, ProxyKind, Target, TlsListener};
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::tools;
use report::Session;
use runs::{Cell, H2Run};
use settings::{Settings, Transport};

pub fn run(args: H2Args) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let herdsman = match &args.herdsman {
        Some(path) => path.clone(),
        None => tools::herdsman_binary_in_target_dir(&workspace, args.output.no_build)?,
    };
    let targets = proxies::targets(&settings.proxies, &herdsman)?;
    let found = tools::ensure_installed(&[&tools::H2LOAD, &tools::OPENSSL])?;
    let [h2load, openssl] = <[PathBuf; 2]>::try_from(found)
        .map_err(|_| anyhow::anyhow!("two client programs expected"))?;
    let descriptor_limit = raise_descriptor_limit()?;
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&herdsman, busy);
    setup.extend(proxies::peer_version_lines(&targets));
    setup.push((
        "h2load".into(),
        tools::version_line(&h2load, &["--version"]),
    ));
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let mut session = Session::new(RunFacts::new(setup), settings.clone());
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    let outcome = (|| {
        let certificates = certificates::make(&openssl, scratch.path())?;
        let backend_port = free_port()?;
        let backend = backend::start(backend_port, scratch.path())?;
        // Each stream in flight holds a server connection of its own (the backend speaks
        // HTTP/1.1). HAProxy's socket cap is reckoned from `maxconn` (two per connection), and
        // past it every stream it cannot connect for is answered 503 ("not enough free
        // sockets"): room for a client and a server connection per stream in flight, as
        // herdsman and nginx have without being told.
        let client_connections = settings.client_connections() + settings.streams_in_flight();
        let bench = Bench {
            settings: &settings,
            h2load: &h2load,
            scratch: scratch.path(),
            certificates: &certificates,
            backend: backend.pid(),
            plan: Plan {
                workers: 1,
                port: 0,
                backend_port,
                // A backend connection per stream in flight at most.
                backend_idle: settings.streams_in_flight().max(64),
                client_connections,
                descriptor_limit,
            },
        };
        for &workers in &settings.workers {
            bench.measure(&targets, workers, &mut session)?;
        }
        Ok(())
    })();
    results::finish("h2", &settings.out, started, &mut session, outcome)
}

struct Bench<'a> {
    settings: &'a Settings,
    h2load: &'a Path,
    scratch: &'a Path,
    certificates: &'a Certificates,
    /// The backend's process, whose CPU is told apart from the others' in each run.
    backend: u32,
    /// Every proxy's plan but for its worker count and port.
    plan: Plan,
}

/// A proxy started for one worker count and one transport.
struct Running {
    proxy: ProxyKind,
    transport: Transport,
    port: u16,
    process: Supervised,
}

impl Running {
    fn url(&self) -> String {
        self.transport.url(self.port)
    }
}

impl Bench<'_> {
    /// Starts `target` with `workers` workers speaking HTTP/2 over `transport` on a fresh port, in
    /// a directory of its own, and waits until h2load is answered there over HTTP/2. Returns it
    /// and its configuration.
    fn start(
        &self,
        target: &Target,
        workers: u32,
        transport: Transport,
    ) -> anyhow::Result<(Running, String)> {
        let dir = self
            .scratch
            .join(format!("{}-{workers}-{transport}", target.label));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = free_port()?;
        let plan = Plan {
            workers,
            port,
            ..self.plan
        };
        let (file, text) = match transport {
            Transport::H2c => target.h2c_config(plan, &dir),
            Transport::Tls => target.tls_config(
                plan,
                &[TlsListener {
                    port,
                    certificate: self.certificates.ecdsa.clone(),
                    http2: true,
                }],
                None,
                &dir,
            ),
        };
        let h2load = self.h2load;
        let process = target
            .start_checked(file, &text, port, &dir, |port| {
                h2load::probe(h2load, &transport.url(port), transport.protocol())
            })
            .with_context(|| format!("starting {} with {workers} workers", target.label))?;
        let running = Running {
            proxy: target.kind,
            transport,
            port,
            process,
        };
        Ok((running, text))
    }

    /// Every proxy with `workers` workers, for every transport: started together, warmed, then
    /// measured in turns in every cell of every round.
    fn measure(
        &self,
        targets: &[Target],
        workers: u32,
        session: &mut Session,
    ) -> anyhow::Result<()> {
        let settings = self.settings;
        let mut running: Vec<Running> = Vec::new();
        for &transport in &settings.transports {
            for target in targets {
                let (one, text) = self.start(target, workers, transport)?;
                let shown = text.replace(&self.scratch.display().to_string(), "SCRATCH");
                session.keep_config(target.kind, transport, shown);
                running.push(one);
            }
        }
        if settings.warm_up > 0 {
            for one in &mut running {
                for load in settings.loads(settings.warm_up) {
                    self.load(&one.url(), one.port, load)
                        .with_context(|| format!("warming {} up", one.proxy))?;
                }
            }
        }
        let planned = f64::from(settings.seconds) + 0.5;
        let cells = settings.transports.len() * settings.loads(0).count();
        let mut progress = Progress::new(std::iter::repeat_n(
            planned,
            settings.rounds as usize * cells * targets.len(),
        ));
        for round in 1..=settings.rounds {
            for &transport in &settings.transports {
                for load in settings.loads(settings.seconds) {
                    let cell = Cell {
                        workers,
                        transport,
                        load,
                    };
                    let here: Vec<usize> = (0..running.len())
                        .filter(|&i| running[i].transport == transport)
                        .collect();
                    for turn in turn_order(here.len(), round) {
                        let one = &mut running[here[turn]];
                        let run = self.run(one, cell, round)?;
                        progress.report(
                            planned,
                            &format!("round {round}/{}, {}", settings.rounds, cell.written()),
                            &format!(
                                "{:<8} {} req/s, p99 {:.2} ms, {:.2} CPU-µs/req",
                                one.proxy.to_string(),
                                thousands(run.requests_per_sec()),
                                run.p99_ms(),
                                run.cpu_us()
                            ),
                        );
                        session.runs.push(run);
                    }
                }
            }
        }
        Ok(())
    }

    /// `load` against `url` (a proxy's `port`) once: h2load's own report, its log kept beside
    /// the proxy's port until read.
    fn load(&self, url: &str, port: u16, load: StreamLoad) -> anyhow::Result<h2load::StreamReport> {
        let log = self.scratch.join(format!("h2load-{port}.log"));
        h2load::stream_load(self.h2load, url, load, &log)
    }

    /// One measured run of `cell`'s load against `one`: the proxy's CPU around it, its memory
    /// halfway through.
    fn run(&self, one: &mut Running, cell: Cell, round: u32) -> anyhow::Result<H2Run> {
        let pid = one.process.pid();
        let measured = Measured {
            herdsman: pid,
            backend: self.backend,
            slow_clients: &[],
        };
        let clock = CpuClock::start(&measured);
        let before = procstat::tree_cpu(pid)?;
        let halfway = Duration::from_secs(u64::from(cell.load.seconds)) / 2;
        let (url, port) = (one.url(), one.port);
        let (report, rss_kib) = std::thread::scope(|scope| {
            let loading = scope.spawn(|| self.load(&url, port, cell.load));
            std::thread::sleep(halfway);
            let rss_kib = procstat::tree_rss_kib(pid);
            let report = loading
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the h2load thread panicked")));
            (report, rss_kib)
        });
        let report = report?;
        let cpu = procstat::tree_cpu(pid)?.since(before);
        let split = clock.stop(&measured);
        one.process.check_running()?;
        if report.protocol.as_deref() != Some(cell.transport.protocol()) {
            bail!(
                "{} agreed {:?} with h2load, not {}",
                one.proxy,
                report.protocol,
                cell.transport.protocol()
            );
        }
        if report.answered == 0 {
            bail!("{} answered no request on {}", one.proxy, one.url());
        }
        Ok(H2Run {
            round,
            cell,
            proxy: one.proxy,
            cpu,
            report,
            rss_kib: rss_kib?,
            other_cpus: split.other,
        })
    }
}
