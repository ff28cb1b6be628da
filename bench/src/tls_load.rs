//! `herdsman-bench tls-load` (issue 16, "Bad input and faults"): does bad TLS load cost the other
//! clients only what the issue allows? herdsman alone (release build of this workspace), two
//! workers, `intake = "balanced"`, one TLS listener with the ECDSA P-256 certificate (made with
//! openssl at the start), in front of the fast backend, with its admin API for its own counts.
//! Two measurements, each in paired rounds (without, then with, in an order that turns):
//!
//! 1. **Silent connections**: wrk's keep-alive requests over TLS without and with 1,000
//!    connections that open and never send a ClientHello, held by a holder process of this
//!    program that opens each again as soon as herdsman closes it at `[timeouts] tls_handshake`;
//!    requests/s with ÷ without against the 90%, the timeouts counted by herdsman and
//!    seen by the holder, and herdsman's resident bytes per silent connection.
//! 2. **Handshake storm**: wrk's established keep-alive TLS connections without and with a storm
//!    of new full handshakes on the same listener (a holder process of this program: rustls
//!    clients that each handshake, close and start again); per worker, the handshakes herdsman
//!    made and its thread's CPU time, their coefficient of variation across workers against the
//!    issue's 5%, and the established connections' p99 and requests/s.
//!
//! Every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults
//! - `holder`   — the hidden `tls-load-holder`: the storm's handshakes (the silent connections are
//!   `kit::silent`'s)
//! - `storm`    — the workers' handshakes and CPU over a window, and their spread
//! - `report`   — what each run measured, the targets, the results file and its plot

pub mod holder;
mod report;
mod settings;
mod storm;

pub use settings::TlsLoadArgs;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustls::ClientConfig;

use crate::kit::certificates::{self, Certificates};
use crate::kit::cpu::{CpuClock, Measured};
use crate::kit::paired::without_and_with;
use crate::kit::process::{raise_descriptor_limit, Supervised};
use crate::kit::progress::Progress;
use crate::kit::proxies::{self, Plan, ProxyKind, Target, TlsListener};
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::silent::SilentClients;
use crate::kit::stack::listener_and_admin_ports;
use crate::kit::tls_client::{self, KEEP_ALIVE_GET};
use crate::kit::wrk::{self, Load};
use crate::kit::{backend, environment, h2load, procstat, tls_metrics, tools, workers_api};
use holder::Storm;
use report::{with_word, Session, SilentRun, SilentSide, StormRun};
use settings::Settings;
use storm::{read_workers, PerWorker};

/// From "every silent connection has connected once" to the wrk run: herdsman has accepted them
/// all and started their handshakes.
const SETTLE_WITH: Duration = Duration::from_secs(1);

/// After the silent connections are gone, before the next run: herdsman sees them close.
const SETTLE_AFTER: Duration = Duration::from_secs(1);

/// From the storm's start (every client has connected once) to the window: it is under way.
const STORM_LEAD: Duration = Duration::from_millis(500);

/// h2load's clients in the one batch of the warm-up, each a full handshake and a request.
const WARM_UP_BATCH: u32 = 100;

/// How long a holder may go on beyond its run before it stops by itself.
const HOLD_MARGIN: Duration = Duration::from_secs(60);

pub fn run(args: TlsLoadArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let descriptor_limit = raise_descriptor_limit()?;
    if settings.herdsman_descriptors() > descriptor_limit {
        bail!(
            "{} silent and {} wrk connections need about {} open files in herdsman, and processes \
             here may open {descriptor_limit}: ask for fewer",
            settings.silent,
            settings.connections,
            settings.herdsman_descriptors()
        );
    }
    let herdsman = match &args.herdsman {
        Some(path) => path.clone(),
        None => tools::herdsman_binary_in_target_dir(&workspace, args.output.no_build)?,
    };
    let clients = tools::TlsClients::ensure_installed()?;
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&herdsman, busy);
    setup.extend(clients.version_lines());
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let mut session = Session::new(RunFacts::new(setup), settings.clone());
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    eprintln!(
        "tls-load: {} round(s) of {} s runs, herdsman with {} workers: without and with {} silent \
         connections (tls_handshake {} s), then without and with a storm of {} handshaking clients",
        settings.rounds,
        settings.seconds,
        settings.workers,
        settings.silent,
        settings.handshake_timeout(),
        settings.storm_clients
    );
    let outcome = (|| {
        let certificates = certificates::make(&clients.openssl, scratch.path())?;
        let mut bench = Bench::start(
            &settings,
            &herdsman,
            &certificates,
            [&clients.wrk, &clients.h2load],
            scratch.path(),
        )?;
        session.config = bench
            .config
            .replace(&scratch.path().display().to_string(), "SCRATCH");
        bench.warm_up()?;
        session.rss_baseline_kib = procstat::tree_rss_kib(bench.herdsman.pid())?;
        bench.measure(&mut session)
    })();
    results::finish("tls-load", &settings.out, started, &mut session, outcome)
}

/// herdsman and the backend, running, and what the runs need.
struct Bench<'a> {
    settings: &'a Settings,
    wrk: &'a Path,
    h2load: &'a Path,
    scratch: &'a Path,
    port: u16,
    admin_port: u16,
    config: String,
    /// The certificate herdsman presents (PEM), which the storm's clients pin.
    certificate: PathBuf,
    /// Declared before the backend so that herdsman stops first.
    herdsman: Supervised,
    backend: Supervised,
}

/// herdsman's TLS configuration (`kit::proxies`), in the balanced intake, with `tls_handshake`
/// when one is given.
fn config(
    plan: Plan,
    listener: &TlsListener,
    admin_port: u16,
    tls_handshake: Option<u32>,
) -> String {
    let base = proxies::herdsman_tls_config(plan, std::slice::from_ref(listener), Some(admin_port));
    let timeout = tls_handshake.map_or(String::new(), |seconds| {
        format!(
            "# Lowered from herdsman's default (10s) so that a short run sees the silent\n\
             # connections timed out and opened again.\n\
             tls_handshake = \"{seconds}s\"\n"
        )
    });
    base.replacen(
        "\n[timeouts]\n",
        &format!("intake = \"balanced\"\n\n[timeouts]\n{timeout}"),
        1,
    )
}

impl<'a> Bench<'a> {
    fn start(
        settings: &'a Settings,
        program: &Path,
        certificates: &Certificates,
        [wrk, h2load]: [&'a Path; 2],
        scratch: &'a Path,
    ) -> anyhow::Result<Bench<'a>> {
        let backend_port = crate::kit::process::free_port()?;
        let backend = backend::start(backend_port, scratch)?;
        let (port, admin_port) = listener_and_admin_ports()?;
        // herdsman alone, with the idle server connections its own default keeps.
        let plan = Plan::herdsman_alone(settings.workers, port, backend_port);
        let listener = TlsListener {
            port,
            certificate: certificates.ecdsa.clone(),
            http2: false,
        };
        let config = config(plan, &listener, admin_port, settings.tls_handshake);
        let pinned = tls_client::read_certificates(&[&certificates.ecdsa.chain])?;
        let client: Arc<ClientConfig> = tls_client::client_config(pinned, false)?;
        let target = Target {
            label: "herdsman".into(),
            kind: ProxyKind::Herdsman,
            program: program.to_path_buf(),
            intake: None,
        };
        let dir = scratch.join("herdsman");
        std::fs::create_dir_all(&dir)?;
        let mut herdsman = target
            .start_checked("herdsman.toml", &config, port, &dir, |port| {
                tls_client::probe_with(&client, port, KEEP_ALIVE_GET)
            })
            .context("starting herdsman")?;
        crate::kit::admin_api::wait_for_admin(&mut herdsman, admin_port)?;
        eprintln!(
            "backend on 127.0.0.1:{backend_port} (pid {}), herdsman TLS on 127.0.0.1:{port} \
             (pid {})",
            backend.pid(),
            herdsman.pid()
        );
        Ok(Bench {
            settings,
            wrk,
            h2load,
            scratch,
            port,
            admin_port,
            config,
            certificate: certificates.ecdsa.chain.clone(),
            herdsman,
            backend,
        })
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        self.herdsman.check_running()?;
        self.backend.check_running()
    }

    /// One batch of handshakes by an outside client (h2load, on OpenSSL) and, in a full run,
    /// keep-alive load: so that the first round does not pay for herdsman's start.
    fn warm_up(&mut self) -> anyhow::Result<()> {
        h2load::batches(self.h2load, self.port, WARM_UP_BATCH, || false)
            .context("warming up with handshakes")?;
        if self.settings.warm_up > 0 {
            let load = Load {
                connections: self.settings.connections,
                seconds: self.settings.warm_up,
            };
            wrk::run_url(self.wrk, &self.url(), load, &[]).context("the warm-up")?;
        }
        self.check_alive()
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/", self.port)
    }

    /// Every round of the silent connections, then every round of the storm.
    fn measure(&mut self, session: &mut Session) -> anyhow::Result<()> {
        let s = self.settings;
        let mut progress = Progress::new(planned_runs(s));
        for round in 1..=s.rounds {
            for with in without_and_with(round) {
                let run = self
                    .silent_run(round, with)
                    .with_context(|| format!("silent round {round}, {}", with_word(with)))?;
                progress.report(
                    planned_silent(s, with),
                    &format!("silent round {round}/{}", s.rounds),
                    &report::silent_progress(&run),
                );
                session.silent.push(run);
            }
        }
        for round in 1..=s.rounds {
            for with in without_and_with(round) {
                let run = self
                    .storm_run(round, with)
                    .with_context(|| format!("storm round {round}, {}", with_word(with)))?;
                progress.report(
                    planned_storm(s, with),
                    &format!("storm round {round}/{}", s.rounds),
                    &report::storm_progress(&run),
                );
                session.storm.push(run);
            }
        }
        Ok(())
    }

    /// herdsman, the backend and `holders`, for where the CPU went.
    fn processes<'p>(&self, holders: &'p [u32]) -> Measured<'p> {
        Measured {
            herdsman: self.herdsman.pid(),
            backend: self.backend.pid(),
            slow_clients: holders,
        }
    }

    /// wrk's keep-alive TLS load with `connections`: its report and herdsman's CPU meanwhile.
    fn wrk_run(&mut self, connections: u32) -> anyhow::Result<(procstat::CpuTime, wrk::WrkReport)> {
        let load = self.settings.load(connections);
        let (cpu, report) = wrk::run_url_costing(self.wrk, &self.url(), load, self.herdsman.pid())?;
        self.check_alive()?;
        if report.requests == 0 {
            bail!("herdsman answered no request on {}", self.url());
        }
        Ok((cpu, report))
    }

    /// One wrk run without, or with the silent connections held.
    fn silent_run(&mut self, round: u32, with: bool) -> anyhow::Result<SilentRun> {
        let s = self.settings;
        if !with {
            let processes = self.processes(&[]);
            let clock = CpuClock::start(&processes);
            let (cpu, wrk) = self.wrk_run(s.connections)?;
            return Ok(SilentRun {
                round,
                cpu,
                wrk,
                machine: clock.stop(&processes),
                side: None,
            });
        }
        let dir = self.scratch.join(format!("silent-{round}"));
        std::fs::create_dir_all(&dir)?;
        // The first connects spread over the timeout, so that herdsman's timeouts, and the
        // holder's connects again, come evenly rather than all at once.
        let spread = Duration::from_secs(u64::from(s.handshake_timeout()));
        let hold = spread + SETTLE_WITH + Duration::from_secs(u64::from(s.seconds)) + HOLD_MARGIN;
        let before = tls_metrics::read(self.admin_port)?;
        let opened = Instant::now();
        let clients = SilentClients::open(self.port, s.silent, spread, hold, &dir)?;
        std::thread::sleep(SETTLE_WITH);
        let rss_kib = procstat::tree_rss_kib(self.herdsman.pid())?;
        let established = procstat::established_on_port(self.port)?;
        let at_start = tls_metrics::read(self.admin_port)?;
        let holders = clients.pids();
        let processes = self.processes(&holders);
        let clock = CpuClock::start(&processes);
        let (cpu, wrk) = self.wrk_run(s.connections)?;
        let machine = clock.stop(&processes);
        let at_end = tls_metrics::read(self.admin_port)?;
        let held_seconds = opened.elapsed().as_secs_f64();
        let tally = clients.close()?;
        let timeouts_since = |earlier: &tls_metrics::TlsMetrics| {
            at_end
                .failed("timeout")
                .saturating_sub(earlier.failed("timeout"))
        };
        std::thread::sleep(SETTLE_AFTER);
        self.check_alive()?;
        Ok(SilentRun {
            round,
            cpu,
            wrk,
            machine,
            side: Some(SilentSide {
                timeouts: timeouts_since(&before),
                timeouts_during_wrk: timeouts_since(&at_start),
                in_progress: at_start.in_progress(),
                in_progress_after: at_end.in_progress(),
                tally,
                held_seconds,
                established,
                rss_kib,
            }),
        })
    }

    /// One wrk run of the established connections, without or with the storm beside it, and what
    /// herdsman's workers did over it.
    fn storm_run(&mut self, round: u32, with: bool) -> anyhow::Result<StormRun> {
        let s = self.settings;
        let (pid, admin_port) = (self.herdsman.pid(), self.admin_port);
        let storm = match with {
            true => {
                let dir = self.scratch.join(format!("storm-{round}"));
                std::fs::create_dir_all(&dir)?;
                let hold = STORM_LEAD + Duration::from_secs(u64::from(s.seconds)) + HOLD_MARGIN;
                let storm =
                    Storm::start(self.port, s.storm_clients, &self.certificate, hold, &dir)?;
                std::thread::sleep(STORM_LEAD);
                Some(storm)
            }
            false => None,
        };
        let holders = storm.as_ref().map(Storm::pids).unwrap_or_default();
        let processes = self.processes(&holders);
        let clock = CpuClock::start(&processes);
        let measured = (|| {
            let before = read_workers(pid, admin_port, s.workers)?;
            // Each worker's open connections halfway through: how the established ones (and
            // the storm's of the moment) were spread.
            let halfway = Duration::from_secs(u64::from(s.seconds)) / 2;
            let midway = std::thread::spawn(move || {
                std::thread::sleep(halfway);
                workers_api::read_workers(admin_port)
            });
            let (cpu, wrk) = self.wrk_run(s.storm_connections)?;
            let after = read_workers(pid, admin_port, s.workers)?;
            let midway = midway
                .join()
                .map_err(|_| anyhow::anyhow!("the midway reading panicked"))??;
            let mut workers = PerWorker::between(&before, &after);
            workers.open_midway = midway.per_worker(|w| w.active);
            anyhow::Ok((cpu, wrk, workers))
        })();
        let machine = clock.stop(&processes);
        // Stopped whatever the window came to, so that the storm does not outlive the run.
        let storm = storm.map(Storm::stop).transpose()?;
        let (cpu, wrk, workers) = measured?;
        self.check_alive()?;
        Ok(StormRun {
            round,
            cpu,
            wrk,
            machine,
            workers,
            storm,
        })
    }
}

/// The planned seconds of every run, in order.
fn planned_runs(s: &Settings) -> Vec<f64> {
    let silent = (1..=s.rounds)
        .flat_map(without_and_with)
        .map(|with| planned_silent(s, with));
    let storm = (1..=s.rounds)
        .flat_map(without_and_with)
        .map(|with| planned_storm(s, with));
    silent.chain(storm).collect()
}

/// A silent run's planned seconds: wrk's, and with them the spread-out opening and settling.
fn planned_silent(s: &Settings, with: bool) -> f64 {
    let extra = if with {
        f64::from(s.handshake_timeout()) + 3.5
    } else {
        0.5
    };
    f64::from(s.seconds) + extra
}

/// A storm run's planned seconds: wrk's, and with it the storm's start, lead and end.
fn planned_storm(s: &Settings, with: bool) -> f64 {
    f64::from(s.seconds) + if with { 2.0 } else { 0.5 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::proxies::TlsCertificate;

    #[test]
    fn the_config_is_kit_s_tls_one_balanced_with_the_timeout_asked_for() {
        let plan = Plan::herdsman_alone(2, 4100, 4200);
        let listener = TlsListener {
            port: 4100,
            certificate: TlsCertificate {
                chain: "/s/ecdsa.pem".into(),
                key: "/s/ecdsa.key".into(),
                combined: "/s/ecdsa.combined.pem".into(),
            },
            http2: false,
        };
        let text = config(plan, &listener, 4300, Some(2));
        assert!(
            text.starts_with("workers = 2\nintake = \"balanced\"\n\n[timeouts]\n"),
            "{text}"
        );
        assert!(text.contains("\ntls_handshake = \"2s\"\n"), "{text}");
        assert!(text.contains("bind = \"127.0.0.1:4300\""), "{text}");
        let default = config(plan, &listener, 4300, None);
        assert!(!default.contains("tls_handshake"), "{default}");
        let without: String = text
            .lines()
            .filter(|l| {
                !l.starts_with('#') && !l.starts_with("tls_handshake") && !l.starts_with("intake")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            without,
            proxies::herdsman_tls_config(plan, &[listener], Some(4300))
        );
    }

    #[test]
    fn the_plan_has_every_run() {
        let s = Settings::resolve(
            &crate::kit::settings::parse_args::<TlsLoadArgs>("tls-load", &[]).unwrap(),
            Path::new("/w"),
        );
        let plan = planned_runs(&s);
        assert_eq!(plan.len(), 24);
        assert_eq!((plan[0], plan[1]), (20.5, 33.5));
        assert_eq!((plan[12], plan[13]), (20.5, 22.0));
    }
}
