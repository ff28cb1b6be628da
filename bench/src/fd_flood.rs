//! `herdsman-bench fd-flood` (issue 49): what an attacker with nothing but idle connections does
//! to each proxy's clients when there are more of them than the proxy may open files. Each proxy
//! in turn (herdsman, HAProxy, nginx), as a user first runs it (`configs`: shipped defaults, one
//! worker), limited to `--descriptor-limit` open files (this machine's 20,000 by default), in
//! front of the fast backend. Beside it the whole time, this program's own closed-loop clients
//! (`kit::load`): 50 keep-alive clients, connected before the flood as clients the proxy already
//! serves, and 50 clients that make a new connection for every request, as new visitors do; and a
//! prober that asks the proxy's status page twice a second (2 s to answer) while counting the
//! proxy's open files. After `before` seconds, holder processes (`kit::silent`) open 21,000
//! connections that never send a byte, each opened again at once when the proxy closes it; after
//! `during` seconds they let go, and `after` seconds more are measured. Reported per proxy:
//! requests/s, p50 and p99 of both groups before, during and after, every request that failed and
//! how, whether the status page answered, the proxy's open files at the peak, what the flood's
//! connections met, and the time from the flood's end until both groups are back to 90% of their
//! rate before. Every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults
//! - `configs`  — the three proxies' configurations as shipped, and starting one with its limit
//! - `report`   — the figures per phase, the targets, the results file and its plot

mod configs;
mod report;
mod settings;

pub use settings::FdFloodArgs;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::load::{Load, Shape, Tally};
use crate::kit::periodic::Periodic;
use crate::kit::process::{free_port, probe_path, raise_descriptor_limit};
use crate::kit::proxies::{self, Target};
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::silent::SilentClients;
use crate::kit::{backend, environment, procstat, tools};
use configs::Ports;
use report::{Probe, ProxyRun, Session, Timeline};
use settings::{Settings, WARM_UP_SECONDS};

/// The flood's first connects are spread over this long (21,000 at about 10,000 a second).
const FLOOD_SPREAD: Duration = Duration::from_secs(2);

/// How long a holder may go on beyond its planned hold before it stops by itself.
const HOLD_MARGIN: Duration = Duration::from_secs(90);

/// How often the prober asks the status page and counts the proxy's open files.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// Descriptors this program needs beyond its clients (the prober, logs, pipes): the check that the
/// clients fit under its own limit leaves this much.
const OWN_SPARE: u64 = 100;

pub fn run(args: FdFloodArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let own_limit = raise_descriptor_limit()?;
    let settings = Settings::resolve(&args, &workspace, own_limit);
    if u64::from(settings.clients) * 2 + OWN_SPARE > own_limit {
        bail!(
            "{} clients of each kind need more open files than this program may have ({own_limit})",
            settings.clients
        );
    }
    if settings.descriptor_limit > own_limit {
        bail!(
            "a proxy may not have more open files ({}) than this program may give it ({own_limit})",
            settings.descriptor_limit
        );
    }
    let herdsman = match &args.herdsman {
        Some(path) => path.clone(),
        None => tools::herdsman_binary(&workspace, args.output.no_build)?,
    };
    // Each peer installed if missing, before the machine's load is looked at.
    let targets = proxies::targets(&settings.proxies, &herdsman)?;
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&herdsman, busy);
    setup.extend(proxies::peer_version_lines(&targets));
    setup.push(environment::descriptor_limit_line(own_limit));
    let mut session = Session::new(RunFacts::new(setup), settings.clone());
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    eprintln!(
        "fd-flood: {} with {} open files each; {} silent connections for {} s, beside {} \
         keep-alive clients and {} with a new connection per request",
        settings
            .proxies
            .iter()
            .map(|k| k.written())
            .collect::<Vec<_>>()
            .join(", "),
        settings.descriptor_limit,
        settings.flood,
        settings.during,
        settings.clients,
        settings.clients
    );
    let outcome = (|| {
        for target in &targets {
            let dir = scratch.path().join(&target.label);
            std::fs::create_dir_all(&dir)?;
            let run = flood_one(&settings, target, &dir)
                .with_context(|| format!("flooding {}", target.kind.written()))?;
            eprintln!("{}", report::progress_line(&run));
            session.runs.push(run);
        }
        Ok(())
    })();
    results::finish("fd-flood", &settings.out, started, &mut session, outcome)
}

/// One proxy's whole run: started with its limit, the clients and the prober started, the flood
/// opened, held and let go, everything stopped and counted.
fn flood_one(settings: &Settings, target: &Target, dir: &Path) -> anyhow::Result<ProxyRun> {
    let listener = free_port()?;
    let admin = distinct_port(&[listener])?;
    let ports = Ports {
        listener,
        admin,
        backend: distinct_port(&[listener, admin])?,
    };
    let backend = backend::start(ports.backend, dir)?;
    let (mut proxy, config) = configs::start(target, ports, settings.descriptor_limit, dir)
        .with_context(|| format!("starting {}", target.kind.written()))?;
    let proxy_pid = proxy.pid();
    let admin_path = configs::admin_path(target.kind);
    probe_path(ports.admin, admin_path)
        .with_context(|| format!("{}'s status page before the run", target.kind.written()))?;

    let keep_alive = Shape {
        retry_idle_close: true,
        keep_latencies: true,
        ..Shape::default()
    };
    let new_connection = Shape {
        new_connection_each: true,
        ..keep_alive
    };
    let kept = Load::start_shaped(ports.listener, settings.clients, keep_alive)?;
    let began = kept.began;
    let fresh = Load::start_shaped(ports.listener, settings.clients, new_connection)?;
    let prober = Periodic::start("fd-flood-prober", PROBE_EVERY, Vec::new(), move |probes| {
        probes.push(probe(began, proxy_pid, ports.admin, admin_path));
    })?;
    let since = |at: Instant| at.duration_since(began).as_secs_f64();

    std::thread::sleep(Duration::from_secs(u64::from(
        WARM_UP_SECONDS + settings.before,
    )));
    let flood_start = Instant::now();
    let hold = FLOOD_SPREAD + Duration::from_secs(u64::from(settings.during)) + HOLD_MARGIN;
    let flood = SilentClients::open(ports.listener, settings.flood, FLOOD_SPREAD, hold, dir)
        .context("opening the flood")?;
    let flood_ready = Instant::now();
    std::thread::sleep(Duration::from_secs(u64::from(settings.during)));
    let flood_end = Instant::now();
    let flood_tally = flood.close().context("letting the flood go")?;
    let released = Instant::now();
    std::thread::sleep(Duration::from_secs(u64::from(settings.after)));
    let end = Instant::now();

    let probes = prober.finish()?;
    let kept_tally = kept.finish()?;
    let fresh_shift = fresh.began.duration_since(began);
    let mut fresh_tally = fresh.finish()?;
    shift(&mut fresh_tally, fresh_shift);
    proxy
        .check_running()
        .with_context(|| format!("{} after the flood", target.kind.written()))?;
    drop(proxy);
    drop(backend);
    Ok(ProxyRun {
        kind: target.kind,
        config: config.replace(&dir.display().to_string(), "SCRATCH"),
        timeline: Timeline {
            before_start: f64::from(WARM_UP_SECONDS),
            flood_start: since(flood_start),
            flood_ready: since(flood_ready),
            flood_end: since(flood_end),
            released: since(released),
            end: since(end),
        },
        keep_alive: kept_tally,
        new_connections: fresh_tally,
        probes,
        flood: flood_tally,
    })
}

/// A free port other than `taken`.
fn distinct_port(taken: &[u16]) -> anyhow::Result<u16> {
    loop {
        let port = free_port()?;
        if !taken.contains(&port) {
            return Ok(port);
        }
    }
}

/// Moves a load's times, counted from its own start, onto the run's clock, which began `by`
/// earlier.
fn shift(tally: &mut Tally, by: Duration) {
    for latency in &mut tally.latencies {
        latency.at += by;
    }
    for failure in &mut tally.failures {
        failure.at += by;
    }
}

/// The proxy's open files now, then one GET of its status page.
fn probe(began: Instant, pid: u32, admin_port: u16, path: &str) -> Probe {
    let at = began.elapsed().as_secs_f64();
    let descriptors = procstat::descriptors_of(&procstat::process_tree(pid));
    let asked = Instant::now();
    let answer = probe_path(admin_port, path)
        .map(|()| asked.elapsed())
        .map_err(|e| format!("{e:#}"));
    Probe {
        at,
        descriptors,
        answer,
    }
}
