//! `herdsman-bench tls` (issue 16): what terminating TLS costs each proxy. herdsman, HAProxy and
//! nginx, each with one and with two workers, serving the same ECDSA P-256 and RSA-2048
//! certificates (made with openssl at the start) in front of the one fast backend: full TLS 1.3
//! handshakes per CPU-second with either key (h2load), resumed ones (`openssl s_time -reuse`, every
//! resumption seen per connection), keep-alive requests over TLS (wrk: requests/s, p99, CPU per
//! request), CPU-seconds per GiB of 1 MiB answers, and resident memory per idle TLS connection
//! with 10,000 held by a client process of this program. Rounds interleave the proxies so that a
//! drift falls on all; every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings`      — the options, the full and the short defaults
//! - `handshakes`    — h2load batches (full) and s_time processes (resumed), counted and costed
//! - `holder`        — the `tls-holder` process of idle TLS connections, both ends
//! - `runs`          — what each run measured and the figure it gives
//! - `report`        — the targets, the tables, the results file and its plot

mod handshakes;
pub mod holder;
mod report;
mod runs;
mod settings;

pub use settings::TlsArgs;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustls::ClientConfig;

use crate::kit::backend;
use crate::kit::certificates::{self, Certificates, KeyType};
use crate::kit::environment;
use crate::kit::paired::turn_order;
use crate::kit::process::{free_port, raise_descriptor_limit, Supervised};
use crate::kit::procstat;
use crate::kit::progress::Progress;
use crate::kit::proxies::{self, Plan, ProxyKind, Target, TlsListener};
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::tls_client::{self, KEEP_ALIVE_GET};
use crate::kit::tls_metrics;
use crate::kit::tools;
use crate::kit::wrk::{self, Load};
use handshakes::S_TIME_REQUEST;
use report::Session;
use runs::{HandshakeFigure, HandshakeRun, IdleRun, Transfer, TransferRun};
use settings::Settings;

/// How long a proxy that has just taken its idle connections is left before its memory is read:
/// long enough for a worker to finish with the last of them.
const SETTLE: Duration = Duration::from_millis(500);

pub fn run(args: TlsArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let herdsman = match &args.herdsman {
        Some(path) => path.clone(),
        None => tools::herdsman_binary_in_target_dir(&workspace, args.output.no_build)?,
    };
    let targets = proxies::targets(&settings.proxies, &herdsman)?;
    let clients = tools::TlsClients::ensure_installed()?;
    let (wrk, h2load, openssl) = (&clients.wrk, &clients.h2load, &clients.openssl);
    let descriptor_limit = raise_descriptor_limit()?;
    let plan = Plan {
        workers: 1,
        port: 0,
        backend_port: 0,
        backend_idle: settings.connections.max(settings.batch).max(64),
        client_connections: settings.client_connections(),
        descriptor_limit,
    };
    if plan.descriptors_needed() > descriptor_limit {
        bail!(
            "{} idle connections need {} descriptors in the proxy, more than the {descriptor_limit} \
             a process may open here: ask for fewer with --idle",
            settings.idle,
            plan.descriptors_needed()
        );
    }
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&herdsman, busy);
    setup.extend(proxies::peer_version_lines(&targets));
    setup.extend(clients.version_lines());
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let mut session = Session::new(RunFacts::new(setup), settings.clone());
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    let outcome = (|| {
        let certificates = certificates::make(openssl, scratch.path())?;
        session.certificate_commands = certificates.commands.clone();
        let pinned =
            tls_client::read_certificates(&[&certificates.ecdsa.chain, &certificates.rsa.chain])?;
        let client = tls_client::client_config(pinned, false)?;
        let backend_port = free_port()?;
        let _backend = backend::start(backend_port, scratch.path())?;
        let bench = Bench {
            settings: &settings,
            wrk,
            h2load,
            openssl,
            scratch: scratch.path(),
            certificates: &certificates,
            client: &client,
            plan: Plan {
                backend_port,
                ..plan
            },
        };
        for &workers in &settings.workers {
            bench.measure_active(&targets, workers, &mut session)?;
        }
        for &workers in &settings.workers {
            bench.measure_idle(&targets, workers, &mut session)?;
        }
        Ok(())
    })();
    results::finish("tls", &settings.out, started, &mut session, outcome)
}

struct Bench<'a> {
    settings: &'a Settings,
    wrk: &'a Path,
    h2load: &'a Path,
    openssl: &'a Path,
    scratch: &'a Path,
    certificates: &'a Certificates,
    /// The bench's own client, for the probes: pinned to the two certificates, no resumption.
    client: &'a Arc<ClientConfig>,
    /// Every proxy's plan but for its worker count.
    plan: Plan,
}

/// A proxy started for one worker count, serving each certificate on a port of its own.
struct Running {
    proxy: ProxyKind,
    ecdsa_port: u16,
    rsa_port: u16,
    /// herdsman's admin API, for its own handshake counts.
    admin_port: Option<u16>,
    dir: PathBuf,
    process: Supervised,
}

impl Running {
    fn port(&self, key: KeyType) -> u16 {
        match key {
            KeyType::Ecdsa => self.ecdsa_port,
            KeyType::Rsa => self.rsa_port,
        }
    }
}

/// The figures measured against running proxies, in the order each round takes them.
#[derive(Debug, Clone, Copy)]
enum Active {
    Handshakes(HandshakeFigure),
    Transfer(Transfer),
}

const ACTIVE: [Active; 5] = [
    Active::Handshakes(HandshakeFigure::Full(KeyType::Ecdsa)),
    Active::Handshakes(HandshakeFigure::Full(KeyType::Rsa)),
    Active::Handshakes(HandshakeFigure::Resumed),
    Active::Transfer(Transfer::Small),
    Active::Transfer(Transfer::Big),
];

impl Bench<'_> {
    /// Listeners on two fresh ports, the ECDSA certificate on the first, the RSA one on the other.
    fn listeners(&self) -> anyhow::Result<[TlsListener; 2]> {
        let ecdsa_port = free_port()?;
        let mut rsa_port = free_port()?;
        while rsa_port == ecdsa_port {
            rsa_port = free_port()?;
        }
        Ok([
            TlsListener {
                port: ecdsa_port,
                certificate: self.certificates.ecdsa.clone(),
                http2: false,
            },
            TlsListener {
                port: rsa_port,
                certificate: self.certificates.rsa.clone(),
                http2: false,
            },
        ])
    }

    /// Starts `target` with `workers` workers and TLS on `listeners` (and herdsman's admin API on
    /// `admin_port`), in `dir`, and waits until the first listener answers over TLS.
    fn start(
        &self,
        target: &Target,
        workers: u32,
        listeners: &[TlsListener],
        admin_port: Option<u16>,
        dir: &Path,
    ) -> anyhow::Result<(Supervised, String)> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let plan = Plan {
            workers,
            ..self.plan
        };
        let (file, text) = target.tls_config(plan, listeners, admin_port, dir);
        let client = self.client;
        let process = target
            .start_checked(file, &text, listeners[0].port, dir, |port| {
                tls_client::probe_with(client, port, KEEP_ALIVE_GET)
            })
            .with_context(|| format!("starting {} with {workers} workers", target.label))?;
        Ok((process, text))
    }

    /// Every proxy with `workers` workers: started together, checked, warmed, then measured in
    /// turns for every figure of every round.
    fn measure_active(
        &self,
        targets: &[Target],
        workers: u32,
        session: &mut Session,
    ) -> anyhow::Result<()> {
        let settings = self.settings;
        let mut running = Vec::new();
        for target in targets {
            let dir = self.scratch.join(format!("{}-{workers}", target.label));
            let listeners = self.listeners()?;
            let admin_port = match target.kind {
                ProxyKind::Herdsman => Some(distinct_port(&listeners)?),
                _ => None,
            };
            let (process, text) = self.start(target, workers, &listeners, admin_port, &dir)?;
            if session.configs.iter().all(|(p, _)| *p != target.kind) {
                let shown = text.replace(&self.scratch.display().to_string(), "SCRATCH");
                session.configs.push((target.kind, shown));
            }
            let one = Running {
                proxy: target.kind,
                ecdsa_port: listeners[0].port,
                rsa_port: listeners[1].port,
                admin_port,
                dir,
                process,
            };
            // What the clients will ask, answered 2xx on each listener: s_time's HTTP/1.0 request
            // (no Host) too, since s_time itself does not look at the answer.
            for (port, request) in [
                (one.rsa_port, KEEP_ALIVE_GET),
                (one.ecdsa_port, S_TIME_REQUEST),
            ] {
                tls_client::probe_with(self.client, port, request).with_context(|| {
                    format!(
                        "{} on 127.0.0.1:{port}, {:?}",
                        one.proxy,
                        String::from_utf8_lossy(request)
                    )
                })?;
            }
            running.push(one);
        }
        for one in &mut running {
            self.warm_up(one)?;
        }
        let planned = f64::from(settings.seconds) + 0.5;
        let mut progress = Progress::new(std::iter::repeat_n(
            planned,
            settings.rounds as usize * running.len() * ACTIVE.len(),
        ));
        for round in 1..=settings.rounds {
            for figure in ACTIVE {
                for index in turn_order(running.len(), round) {
                    let one = &mut running[index];
                    let said = match figure {
                        Active::Handshakes(figure) => {
                            let run = self.handshakes(one, figure, round, workers)?;
                            let said = format!(
                                "{}: {} handshakes per CPU-second",
                                figure.written(),
                                crate::kit::markdown::thousands(run.per_cpu_second())
                            );
                            session.handshakes.push(run);
                            said
                        }
                        Active::Transfer(transfer) => {
                            let run = self.transfer(one, transfer, round, workers)?;
                            let said = match transfer {
                                Transfer::Small => format!(
                                    "keep-alive: {:.0} req/s, {:.2} CPU-µs/req",
                                    run.wrk.requests_per_sec,
                                    run.cpu_us()
                                ),
                                Transfer::Big => {
                                    format!("1 MiB answers: {:.3} CPU-s/GiB", run.cpu_per_gib())
                                }
                            };
                            session.transfers.push(run);
                            said
                        }
                    };
                    one.process.check_running()?;
                    progress.report(
                        planned,
                        &format!("{workers} worker(s), round {round}/{}", settings.rounds),
                        &format!("{:<8} {said}", one.proxy.to_string()),
                    );
                }
            }
        }
        Ok(())
    }

    /// A batch of full handshakes on each listener and, in a full run, keep-alive load: so that no
    /// proxy's first round pays for its start.
    fn warm_up(&self, one: &mut Running) -> anyhow::Result<()> {
        for key in KeyType::ALL {
            handshakes::full(
                self.h2load,
                one.port(key),
                self.settings.batch,
                0,
                one.process.pid(),
            )
            .with_context(|| format!("warming {} up", one.proxy))?;
        }
        if self.settings.warm_up > 0 {
            let load = Load {
                connections: self.settings.connections,
                seconds: self.settings.warm_up,
            };
            wrk::run_url(self.wrk, &https_url(one.ecdsa_port, "/"), load, &[])?;
        }
        one.process.check_running()
    }

    fn handshakes(
        &self,
        one: &Running,
        figure: HandshakeFigure,
        round: u32,
        workers: u32,
    ) -> anyhow::Result<HandshakeRun> {
        let settings = self.settings;
        let port = one.port(figure.key());
        let pid = one.process.pid();
        let before = one.admin_port.map(handshakes_counted).transpose()?;
        let counted = match figure {
            HandshakeFigure::Full(_) => {
                handshakes::full(self.h2load, port, settings.batch, settings.seconds, pid)?
            }
            HandshakeFigure::Resumed => handshakes::resumed(
                self.openssl,
                port,
                settings.resuming_clients,
                settings.seconds,
                pid,
                &one.dir,
            )?,
        };
        let server = match (one.admin_port, before) {
            (Some(admin_port), Some(before)) => Some(handshakes_counted(admin_port)?.since(before)),
            _ => None,
        };
        Ok(HandshakeRun {
            round,
            workers,
            proxy: one.proxy,
            figure,
            counted,
            server,
        })
    }

    fn transfer(
        &self,
        one: &Running,
        transfer: Transfer,
        round: u32,
        workers: u32,
    ) -> anyhow::Result<TransferRun> {
        let connections = match transfer {
            Transfer::Small => self.settings.connections,
            Transfer::Big => self.settings.big_connections,
        };
        let load = Load {
            connections,
            seconds: self.settings.seconds,
        };
        let url = https_url(one.ecdsa_port, transfer.path());
        let (cpu, report) = wrk::run_url_costing(self.wrk, &url, load, one.process.pid())?;
        if report.requests == 0 {
            bail!("{} answered no request on {url}", one.proxy);
        }
        Ok(TransferRun {
            round,
            workers,
            proxy: one.proxy,
            transfer,
            cpu,
            wrk: report,
        })
    }

    /// Every proxy with `workers` workers, started afresh once per round, in turns, holding the
    /// idle TLS connections.
    fn measure_idle(
        &self,
        targets: &[Target],
        workers: u32,
        session: &mut Session,
    ) -> anyhow::Result<()> {
        let settings = self.settings;
        let planned = 3.0 + f64::from(settings.idle) / 2_000.0;
        let mut progress = Progress::new(std::iter::repeat_n(
            planned,
            settings.rounds as usize * targets.len(),
        ));
        for round in 1..=settings.rounds {
            for index in turn_order(targets.len(), round) {
                let target = &targets[index];
                let run = self
                    .hold(target, workers, round)
                    .with_context(|| format!("holding idle TLS connections to {}", target.label))?;
                progress.report(
                    planned,
                    &format!(
                        "{workers} worker(s), idle round {round}/{}",
                        settings.rounds
                    ),
                    &format!(
                        "{:<8} {:.0} bytes per idle TLS connection",
                        target.label,
                        run.bytes_per_connection()
                    ),
                );
                session.idle.push(run);
            }
        }
        Ok(())
    }

    /// One fresh proxy holding `settings.idle` TLS connections on its ECDSA listener.
    fn hold(&self, target: &Target, workers: u32, round: u32) -> anyhow::Result<IdleRun> {
        let dir = self
            .scratch
            .join(format!("{}-{workers}-idle-{round}", target.label));
        let listeners = [self.listeners()?[0].clone()];
        let port = listeners[0].port;
        let (mut process, _) = self.start(target, workers, &listeners, None, &dir)?;
        let pid = process.pid();
        let rss_before_kib = procstat::tree_rss_kib(pid)?;
        let held = holder::hold(
            port,
            self.settings.idle,
            &[self.certificates.ecdsa.chain.as_path()],
            &dir.join("tls-holder.log"),
        )?;
        std::thread::sleep(SETTLE);
        process.check_running()?;
        let rss_after_kib = procstat::tree_rss_kib(pid)?;
        let report = held.report;
        let closed = held.finish()?;
        Ok(IdleRun {
            round,
            workers,
            proxy: target.kind,
            rss_before_kib,
            rss_after_kib,
            held: report,
            closed,
        })
    }
}

/// A free port on 127.0.0.1 that is none of `listeners`'.
fn distinct_port(listeners: &[TlsListener]) -> anyhow::Result<u16> {
    loop {
        let port = free_port()?;
        if listeners.iter().all(|l| l.port != port) {
            return Ok(port);
        }
    }
}

/// herdsman's own count of the handshakes it completed so far, summed over its workers.
fn handshakes_counted(admin_port: u16) -> anyhow::Result<tls_metrics::HandshakeCounts> {
    Ok(tls_metrics::read(admin_port)?.handshakes())
}

fn https_url(port: u16, path: &str) -> String {
    format!("https://127.0.0.1:{port}{path}")
}
