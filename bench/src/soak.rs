//! `herdsman-bench soak`: herdsman soaked as an operator soaks a proxy before trusting it. Three
//! single-process nginx servers behind it, 200 keep-alive client connections sending `GET /` as
//! fast as it answers (this program's own client, which classifies every failure), and every 7 s
//! one of these in turn: a server stopped gracefully and started again, drain then ready, a reload
//! that changes the balance algorithm, a log rotation, a server killed and started again, a binary
//! upgrade, maintenance then ready. It reports requests, failures by status and by cause, client
//! connections closed without an answer, the proxy's memory and descriptors second by second
//! (following the new process after an upgrade), access log lines against requests answered, and a
//! timeline of the chaos with the failures near each event. `--peer haproxy` soaks HAProxy after
//! herdsman through the same kind of servers and chaos. `--short` is the same in 27 s; `--chaos`
//! picks the events, which is how the failover tests run one kind alone (or `kill-all`).
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults
//! - `servers`  — the three nginx servers: start, graceful stop, kill, start again
//! - `plan`     — what both proxies are configured from: ports, servers, idle timeouts, balance
//! - `proxy`    — the proxy under test behind the verbs the chaos uses
//! - `herdsman` — herdsman's configuration and chaos: ctl, SIGHUP, rename and USR1, upgrade
//! - `haproxy`  — HAProxy's equivalent configuration and chaos: runtime API, master-worker reload
//! - `chaos`    — the kinds of event, their schedule, running it into a timeline
//! - the load: keep-alive connections that classify every failed request (`kit::load`)
//! - `sampler`  — once a second: the proxy's processes' memory and descriptors, herdsman's counters
//! - `report`   — the figures, the targets, the summary, the results file and its plot

mod chaos;
mod haproxy;
mod herdsman;
mod plan;
mod proxy;
mod report;
mod sampler;
mod servers;
mod settings;

pub use settings::SoakArgs;

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::kit::load::Load;
use crate::kit::logfile::LogCount;
use crate::kit::process::raise_descriptor_limit;
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::stack::listener_and_admin_ports;
use crate::kit::{environment, tools};
use plan::Plan;
use proxy::{Proxy, Which};
use report::{IdleAfter, ProxyRun, Session};
use sampler::{Footprint, Sampler};
use servers::Servers;
use settings::{Peer, Settings};

/// After the proxy starts, before the baseline: the idle server connection of the readiness probe
/// has been closed (`backend_idle`), plus this.
const SETTLE_MARGIN: Duration = Duration::from_millis(250);

/// Readings, 100 ms apart, whose least is the baseline: a health check's connection open at one
/// of them is not counted.
const BASELINE_READINGS: usize = 4;

/// Once the load has stopped, how long descriptors may take to come back to their baseline,
/// beyond the client and backend idle timeouts.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// The programs a soak runs.
struct Programs {
    herdsman: PathBuf,
    nginx: PathBuf,
    haproxy: Option<PathBuf>,
}

pub fn run(args: SoakArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let herdsman = tools::herdsman_binary(&workspace, args.output.no_build)?;
    let mut wanted = vec![&tools::NGINX];
    if settings.peer == Some(Peer::Haproxy) {
        wanted.push(&tools::HAPROXY);
    }
    let mut found = tools::ensure_installed(&wanted)?.into_iter();
    let programs = Programs {
        herdsman,
        nginx: found.next().context("nginx")?,
        haproxy: found.next(),
    };
    let descriptor_limit = raise_descriptor_limit()?;
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&programs.herdsman, busy);
    setup.push((
        "nginx (the servers)".into(),
        tools::version_line(&programs.nginx, &["-v"]),
    ));
    if let Some(haproxy) = &programs.haproxy {
        setup.push(("haproxy".into(), tools::version_line(haproxy, &["-v"])));
    }
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let mut session = Session {
        facts: RunFacts::new(setup),
        settings: settings.clone(),
        server_config: String::new(),
        runs: Vec::new(),
        failure: None,
    };
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    let mut outcome = Ok(());
    let mut order = vec![Which::Herdsman];
    if settings.peer == Some(Peer::Haproxy) {
        order.push(Which::Haproxy);
    }
    for which in order {
        let dir = scratch.path().join(which.label());
        eprintln!(
            "soak: {} for {} s, {} connections, {} worker(s), an event every {} s ({})",
            which.label(),
            settings.seconds,
            settings.connections,
            settings.workers,
            settings.every,
            settings
                .chaos
                .iter()
                .map(|k| k.label())
                .collect::<Vec<_>>()
                .join(", ")
        );
        match soak_one(which, &settings, &programs, &dir, &mut session) {
            Ok(run) => {
                eprintln!("{}", report::progress_line(&run));
                session.runs.push(run);
            }
            Err(e) => {
                outcome = Err(e.context(format!("soaking {}", which.label())));
                break;
            }
        }
    }
    if args.keep_files {
        let kept = scratch.keep()?;
        eprintln!(
            "soak: kept the configurations and logs in {}",
            kept.display()
        );
    }
    results::finish("soak", &settings.out, started, &mut session, outcome)
}

/// One proxy's soak, with servers of its own, in `dir`.
fn soak_one(
    which: Which,
    settings: &Settings,
    programs: &Programs,
    dir: &Path,
    session: &mut Session,
) -> anyhow::Result<ProxyRun> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut servers = Servers::start(&programs.nginx, &dir.join("servers"))?;
    if session.server_config.is_empty() {
        session.server_config = servers.config_of_first();
    }
    let (port, admin_port) = listener_and_admin_ports()?;
    let proxy_dir = dir.join("proxy");
    std::fs::create_dir_all(&proxy_dir)?;
    let plan = Plan {
        workers: settings.workers,
        port,
        admin_port,
        servers: servers.addresses(),
        idle: settings.idle,
        retry_budget_floor: settings.retry_budget_floor,
        dir: proxy_dir.clone(),
    };
    let mut proxy = match which {
        Which::Herdsman => Proxy::Herdsman(herdsman::Herdsman::start(&programs.herdsman, plan)?),
        Which::Haproxy => {
            let program = programs.haproxy.as_deref().context("haproxy")?;
            Proxy::Haproxy(haproxy::Haproxy::start(program, plan)?)
        }
    };
    let idle = settings.idle_in_force();
    thread::sleep(Duration::from_secs(u64::from(idle.backend_seconds)) + SETTLE_MARGIN);
    let group = proxy.group();
    let baseline = Footprint::least_of(group, BASELINE_READINGS, Duration::from_millis(100));
    let log_before = access_log_count(&proxy, &proxy_dir)?;

    let load = Load::start(proxy.port(), settings.connections)?;
    let (began, began_wall) = (load.began, load.began_wall);
    let sampler = Sampler::start(group, proxy.admin_port(), began)?;
    let steps = chaos::schedule(
        &settings.chaos,
        settings.seconds,
        settings.every,
        servers.len(),
    );
    let live = std::sync::Arc::clone(&load.live);
    let timeline = chaos::run(&steps, began, &mut servers, &mut proxy, |done| {
        eprintln!("{}", report::step_line(done, &live));
    });
    let end = began + Duration::from_secs(u64::from(settings.seconds));
    if let Some(left) = end.checked_duration_since(Instant::now()) {
        thread::sleep(left);
    }
    let tally = load.finish()?;
    let load_ended = began.elapsed();
    let limit =
        Duration::from_secs(u64::from(idle.client_seconds + idle.backend_seconds)) + IDLE_MARGIN;
    let after = wait_until_idle(group, baseline.descriptors, limit);
    let samples = sampler.finish()?;
    proxy.check_alive()?;
    servers.check_running()?;
    proxy.stop()?;
    let log = match (log_before, access_log_count(&proxy, &proxy_dir)?) {
        (Some(before), Some(after)) => Some(after.since(before)),
        _ => None,
    };
    Ok(ProxyRun {
        label: which.label(),
        config: proxy.config(),
        baseline,
        tally,
        load_ended,
        samples,
        timeline,
        idle: after,
        log,
        proxy_log: std::fs::read_to_string(proxy.log_path()).unwrap_or_default(),
        began_wall,
    })
}

/// herdsman's access log lines so far, over the log and its rotated files; None for HAProxy.
fn access_log_count(proxy: &Proxy, dir: &Path) -> anyhow::Result<Option<LogCount>> {
    if !matches!(proxy, Proxy::Herdsman(_)) {
        return Ok(None);
    }
    let mut total = LogCount::default();
    for file in herdsman::access_log_files(dir) {
        let count = LogCount::of(&file)?;
        total.lines += count.lines;
        total.bytes += count.bytes;
    }
    Ok(Some(total))
}

/// Waits, at most `limit`, until the group holds no more descriptors than `baseline`; returns
/// what it holds then and how long that took.
fn wait_until_idle(group: u32, baseline: u64, limit: Duration) -> IdleAfter {
    let started = Instant::now();
    loop {
        let footprint = Footprint::of_group(group);
        if footprint.descriptors <= baseline || started.elapsed() >= limit {
            return IdleAfter {
                footprint,
                waited: started.elapsed(),
                limit,
            };
        }
        thread::sleep(Duration::from_millis(100));
    }
}
