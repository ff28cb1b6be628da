//! `herdsman-bench scale` (issue 24): routing and balancing that do not grow with the
//! configuration. herdsman, HAProxy and nginx each with 1 to 100,000 host routes: CPU per request
//! for the first route's host, the last's and an unknown one, start time and memory per route;
//! herdsman's reloads of the most routes under load; least-conn against round-robin over a pool of
//! 10,000 servers; servers added to and removed from that pool through the admin API, each change
//! timed. Every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults, the hosts asked for
//! - `configs`  — each proxy's configuration with N routes, and herdsman's with the large pool
//! - `routes`   — the route part: starts, rounds, reloads
//! - `instructions` — herdsman's own instructions per request for each host, under callgrind
//! - `pool`     — the pool part: the two algorithms in turns, then the changes
//! - `report`   — the targets, the tables, the results file and its plot

mod configs;
mod instructions;
mod pool;
mod report;
mod routes;
mod settings;

pub use settings::ScaleArgs;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::kit::backend;
use crate::kit::process::{free_port, raise_descriptor_limit};
use crate::kit::proxies::{Plan, ProxyKind};
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::{environment, tools};
use configs::{herdsman_pool, shown};
use pool::PoolBench;
use report::Session;
use routes::RouteBench;
use settings::{Balance, Part, Settings};

pub fn run(args: ScaleArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let herdsman = match &args.herdsman {
        Some(path) => path.clone(),
        None => tools::herdsman_binary(&workspace, args.output.no_build)?,
    };
    let mut programs: Vec<(ProxyKind, PathBuf)> = Vec::new();
    for &proxy in &settings.proxies {
        let program = match proxy {
            ProxyKind::Herdsman => herdsman.clone(),
            ProxyKind::Haproxy => tools::ensure_installed(&[&tools::HAPROXY])?.remove(0),
            ProxyKind::Nginx => tools::ensure_installed(&[&tools::NGINX])?.remove(0),
        };
        programs.push((proxy, program));
    }
    let wrk = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    // Every proxy inherits it; the pool part holds a connection to each of its servers.
    let descriptor_limit = raise_descriptor_limit()?;
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&herdsman, busy);
    for (proxy, program) in &programs {
        if *proxy != ProxyKind::Herdsman {
            setup.push((
                proxy.written().into(),
                tools::version_line(program, &["-v"]),
            ));
        }
    }
    setup.push(("wrk".into(), tools::version_line(&wrk, &["-v"])));
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let mut session = Session::new(RunFacts::new(setup), settings.clone());
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    eprintln!(
        "scale: {} proxies × route counts {:?}, {} round(s) of {} s per host; then a pool of {} \
         servers",
        programs.len(),
        settings.routes,
        settings.rounds,
        settings.seconds,
        settings.servers
    );
    let outcome = (|| {
        let backend_port = free_port()?;
        let backend = backend::start(backend_port, scratch.path())?;
        let plan = Plan::herdsman_alone(1, 8080, backend_port);
        for (proxy, _) in &programs {
            session.configs.push((
                format!("{}'s configuration", proxy.written()),
                shown(*proxy, plan, settings.most_routes(), scratch.path()),
            ));
        }
        session.configs.push((
            "herdsman's configuration with the large pool".into(),
            format!(
                "{}# … {} servers in all\n",
                herdsman_pool(Balance::LeastConn, 2, 8080, 9900, 9000),
                settings.servers
            ),
        ));
        if settings.parts.contains(&Part::Routes) {
            RouteBench {
                settings: &settings,
                wrk: &wrk,
                programs: &programs,
                backend_port,
                descriptor_limit,
                scratch: scratch.path(),
            }
            .measure(&mut session)?;
            if settings.instructions {
                match instructions::measure(
                    &settings,
                    &herdsman,
                    &wrk,
                    backend_port,
                    scratch.path(),
                ) {
                    Ok(runs) => session.instructions = runs,
                    Err(e) => {
                        eprintln!("scale: no instruction counts: {e:#}");
                        session.instructions_missing = Some(format!("{e:#}"));
                    }
                }
            }
        }
        drop(backend);
        if !settings.parts.contains(&Part::Pool) {
            return Ok(());
        }
        PoolBench {
            settings: &settings,
            wrk: &wrk,
            herdsman: &herdsman,
            scratch: scratch.path(),
        }
        .measure(&mut session)
    })();
    results::finish("scale", &settings.out, started, &mut session, outcome)
}
