//! `herdsman-bench h2` (issue 37): HTTP/2 to clients. h2load against herdsman, HAProxy 2.6 and
//! nginx 1.22 in front of the same HTTP/1.1 backend (the kit's), over TLS (h2 by ALPN, the
//! kit's ECDSA certificate) and over h2c (prior knowledge), each with one and with two workers,
//! under 50 connections × 10 streams and 10 connections × 100 streams: requests/s, p99 (from
//! h2load's per-request log), CPU-µs per request of the proxy's processes (user and kernel
//! apart) and their resident memory under load. Rounds interleave the proxies so that a drift
//! falls on all; every process it starts is stopped when it returns, on success or error.
//!
//! gRPC cells (HTTP/2 to servers too) are a `Traffic` of their own beside these, measured by the
//! same rounds and reported in a section of their own: unary calls by h2load over h2c to each
//! proxy (50 connections × 10 calls in flight), forwarded over h2c to the bench's own gRPC server
//! (`kit::grpc_server`, its own process) — herdsman's pool `protocol = "h2c"`, HAProxy's
//! `server … proto h2`, nginx's `grpc_pass`. Before any call is timed, one call through each proxy
//! must come back whole (200, the message echoed, `grpc-status: 0` in the trailers), and after
//! each run the server must have answered at least the calls h2load counted as 2xx.
//!
//! herdsman runs with the defaults a user gets but for what turns HTTP/2 on where it is off by
//! default: `h2c = true` on a cleartext listener (a TLS listener offers h2 by ALPN by default),
//! and, for gRPC, `protocol = "h2c"` on the pool.
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
use crate::kit::grpc_server;
use crate::kit::h2load::{self, Asking, StreamLoad};
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
use settings::{Settings, Traffic, Transport};

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
        let grpc = if settings.grpc {
            Some(GrpcServer::start(scratch.path())?)
        } else {
            None
        };
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
            grpc: grpc.as_ref(),
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

/// The gRPC cells' server and what h2load sends it.
struct GrpcServer {
    process: Supervised,
    port: u16,
    /// Each call: the request message's file and gRPC's header fields.
    asking: Asking,
}

impl GrpcServer {
    /// Writes the request message into `scratch` and starts the server there, on a port of its
    /// own; it answers a call before this returns.
    fn start(scratch: &Path) -> anyhow::Result<GrpcServer> {
        let message = scratch.join("grpc-request.bin");
        std::fs::write(&message, grpc_server::request_message())
            .with_context(|| format!("writing {}", message.display()))?;
        let port = free_port()?;
        let process = grpc_server::start(port, scratch).context("starting the gRPC server")?;
        Ok(GrpcServer {
            process,
            port,
            asking: Asking {
                body: Some(message),
                headers: grpc_server::CALL_HEADERS.map(String::from).to_vec(),
            },
        })
    }
}

struct Bench<'a> {
    settings: &'a Settings,
    h2load: &'a Path,
    scratch: &'a Path,
    certificates: &'a Certificates,
    /// The backend's process, whose CPU is told apart from the others' in each run.
    backend: u32,
    /// The gRPC cells' server, when they are measured.
    grpc: Option<&'a GrpcServer>,
    /// Every proxy's plan but for its worker count, port and (for gRPC) server port.
    plan: Plan,
}

/// A proxy started for one worker count and one traffic.
struct Running {
    proxy: ProxyKind,
    traffic: Traffic,
    port: u16,
    process: Supervised,
}

impl Running {
    fn url(&self) -> String {
        self.traffic.url(self.port)
    }
}

impl Bench<'_> {
    /// The gRPC cells' server; only asked for when they are measured.
    fn grpc(&self) -> anyhow::Result<&GrpcServer> {
        self.grpc
            .context("a gRPC cell without the gRPC server started")
    }

    /// What each request of `traffic` asks: a GET, or a gRPC call.
    fn asking(&self, traffic: Traffic) -> anyhow::Result<Asking> {
        Ok(match traffic {
            Traffic::Requests(_) => Asking::default(),
            Traffic::Grpc => self.grpc()?.asking.clone(),
        })
    }

    /// Starts `target` with `workers` workers for `traffic` on a fresh port, in a directory of its
    /// own, and waits until it answers there over HTTP/2: h2load's GET answered 2xx, or a whole
    /// gRPC call checked field by field. Returns it and its configuration.
    fn start(
        &self,
        target: &Target,
        workers: u32,
        traffic: Traffic,
    ) -> anyhow::Result<(Running, String)> {
        let dir = self
            .scratch
            .join(format!("{}-{workers}-{traffic}", target.label));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = free_port()?;
        let plan = Plan {
            workers,
            port,
            ..self.plan
        };
        let (file, text) = match traffic {
            Traffic::Grpc => target.grpc_config(
                Plan {
                    backend_port: self.grpc()?.port,
                    ..plan
                },
                &dir,
            ),
            Traffic::Requests(Transport::H2c) => target.h2c_config(plan, &dir),
            Traffic::Requests(Transport::Tls) => target.tls_config(
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
            .start_checked(file, &text, port, &dir, |port| match traffic {
                Traffic::Grpc => grpc_server::call(port),
                Traffic::Requests(transport) => {
                    h2load::probe(h2load, &transport.url(port), transport.protocol())
                }
            })
            .with_context(|| {
                format!(
                    "starting {} with {workers} workers for {traffic}",
                    target.label
                )
            })?;
        let running = Running {
            proxy: target.kind,
            traffic,
            port,
            process,
        };
        Ok((running, text))
    }

    /// Every proxy with `workers` workers, for every traffic: started together, warmed, then
    /// measured in turns in every cell of every round.
    fn measure(
        &self,
        targets: &[Target],
        workers: u32,
        session: &mut Session,
    ) -> anyhow::Result<()> {
        let settings = self.settings;
        let traffics = settings.traffics();
        let mut running: Vec<Running> = Vec::new();
        for &traffic in &traffics {
            for target in targets {
                let (one, text) = self.start(target, workers, traffic)?;
                let shown = text.replace(&self.scratch.display().to_string(), "SCRATCH");
                session.keep_config(target.kind, traffic, shown);
                running.push(one);
            }
        }
        if settings.warm_up > 0 {
            for one in &mut running {
                for load in Settings::loads(one.traffic, settings.warm_up) {
                    self.load(one.traffic, &one.url(), one.port, load)
                        .with_context(|| format!("warming {} up", one.proxy))?;
                }
            }
        }
        let planned = f64::from(settings.seconds) + 0.5;
        let cells: usize = traffics.iter().map(|traffic| traffic.loads().len()).sum();
        let mut progress = Progress::new(std::iter::repeat_n(
            planned,
            settings.rounds as usize * cells * targets.len(),
        ));
        for round in 1..=settings.rounds {
            for &traffic in &traffics {
                for load in Settings::loads(traffic, settings.seconds) {
                    let cell = Cell {
                        workers,
                        traffic,
                        load,
                    };
                    let here: Vec<usize> = (0..running.len())
                        .filter(|&i| running[i].traffic == traffic)
                        .collect();
                    for turn in turn_order(here.len(), round) {
                        let one = &mut running[here[turn]];
                        let run = self.run(one, cell, round)?;
                        let (rate_unit, per) = cell.units();
                        progress.report(
                            planned,
                            &format!("round {round}/{}, {}", settings.rounds, cell.written()),
                            &format!(
                                "{:<8} {} {rate_unit}, p99 {:.2} ms, {:.2} CPU-µs/{per}",
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

    /// `load` of `traffic`'s requests against `url` (a proxy's `port`) once: h2load's own
    /// report, its log kept beside the proxy's port until read.
    fn load(
        &self,
        traffic: Traffic,
        url: &str,
        port: u16,
        load: StreamLoad,
    ) -> anyhow::Result<h2load::StreamReport> {
        let log = self.scratch.join(format!("h2load-{port}.log"));
        h2load::stream_load(self.h2load, url, load, &self.asking(traffic)?, &log)
    }

    /// The calls the gRPC server has answered so far, for a gRPC cell; None for the others.
    fn calls_answered(&self, cell: Cell) -> anyhow::Result<Option<u64>> {
        match cell.traffic {
            Traffic::Grpc => Ok(Some(grpc_server::calls_answered(self.grpc()?.port)?)),
            Traffic::Requests(_) => Ok(None),
        }
    }

    /// One measured run of `cell`'s load against `one`: the proxy's CPU around it, its memory
    /// halfway through.
    fn run(&self, one: &mut Running, cell: Cell, round: u32) -> anyhow::Result<H2Run> {
        let pid = one.process.pid();
        let server = match cell.traffic {
            Traffic::Grpc => self.grpc()?.process.pid(),
            Traffic::Requests(_) => self.backend,
        };
        let measured = Measured {
            herdsman: pid,
            backend: server,
            slow_clients: &[],
        };
        let calls_before = self.calls_answered(cell)?;
        let clock = CpuClock::start(&measured);
        let before = procstat::tree_cpu(pid)?;
        let halfway = Duration::from_secs(u64::from(cell.load.seconds)) / 2;
        let (url, port) = (one.url(), one.port);
        let (report, rss_kib) = std::thread::scope(|scope| {
            let loading = scope.spawn(|| self.load(cell.traffic, &url, port, cell.load));
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
        let protocol = cell.traffic.transport().protocol();
        if report.protocol.as_deref() != Some(protocol) {
            bail!(
                "{} agreed {:?} with h2load, not {protocol}",
                one.proxy,
                report.protocol,
            );
        }
        if report.answered == 0 {
            bail!("{} answered no request on {}", one.proxy, one.url());
        }
        // A 2xx that did not come from the gRPC server (an error the proxy made up in a 200, as
        // gRPC writes errors) would count as a call: the server's own count must cover them.
        if let (Some(before), Some(after)) = (calls_before, self.calls_answered(cell)?) {
            let served = after - before;
            if served < report.answered {
                bail!(
                    "{} answered {} calls 2xx on {}, but the gRPC server answered only {served}",
                    one.proxy,
                    report.answered,
                    one.url()
                );
            }
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
