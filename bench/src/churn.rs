//! `herdsman-bench churn` (issue 25): what a new connection costs. herdsman, HAProxy and nginx,
//! each with one and with two workers, in front of the one fast backend (connections to it kept),
//! driven by wrk with a new connection for every request (`Connection: close`); the proxies'
//! CPU per request (user and system apart) and requests/s over interleaved rounds; and, with one
//! worker, system calls per connection counted by `strace -c` over connections made one after
//! another. Every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults
//! - `syscalls` — strace attached to a proxy while connections are made one at a time
//! - `report`   — the targets, the tables, the results file and its plot

mod report;
mod settings;
mod syscalls;

pub use settings::ChurnArgs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::backend;
use crate::kit::environment;
use crate::kit::paired::turn_order;
use crate::kit::process::{free_port, raise_descriptor_limit, Supervised};
use crate::kit::progress::Progress;
use crate::kit::proxies::{self, Plan, ProxyKind, Target};
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::tools::{self, Tool};
use crate::kit::wrk::{self, Load};
use report::{ChurnRun, Session};
use settings::Settings;

const STRACE: Tool = Tool {
    name: "strace",
    package: "strace",
};

/// The header that makes every request the last of its connection.
const CLOSE: &str = "Connection: close";

pub fn run(args: ChurnArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let herdsman = match &args.herdsman {
        Some(path) => path.clone(),
        None => tools::herdsman_binary(&workspace, args.output.no_build)?,
    };
    let targets = proxies::targets(&settings.proxies, &herdsman)?;
    let wrk = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    let strace = match settings.serial {
        0 => None,
        _ => Some(tools::ensure_installed(&[&STRACE])?.remove(0)),
    };
    let descriptor_limit = raise_descriptor_limit()?;
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&herdsman, busy);
    for target in &targets {
        if target.kind != ProxyKind::Herdsman {
            setup.push((
                target.label.clone(),
                tools::version_line(&target.program, &["-v"]),
            ));
        }
    }
    setup.push(("wrk".into(), tools::version_line(&wrk, &["-v"])));
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let mut session = Session::new(RunFacts::new(setup), settings.clone());
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    let outcome = (|| {
        let backend_port = free_port()?;
        let _backend = backend::start(backend_port, scratch.path())?;
        let bench = Churn {
            settings: &settings,
            wrk: &wrk,
            strace: strace.as_deref(),
            scratch: scratch.path(),
            plan: Plan {
                workers: 1,
                port: 0,
                backend_port,
                backend_idle: settings.connections.max(64),
                client_connections: settings.connections,
                descriptor_limit,
            },
        };
        for &workers in &settings.workers {
            bench.measure(&targets, workers, &mut session)?;
        }
        Ok(())
    })();
    results::finish("churn", &settings.out, started, &mut session, outcome)
}

struct Churn<'a> {
    settings: &'a Settings,
    wrk: &'a Path,
    strace: Option<&'a Path>,
    scratch: &'a Path,
    /// Every proxy's plan but for its worker count and port.
    plan: Plan,
}

/// A proxy started for one worker count.
struct Running {
    proxy: ProxyKind,
    port: u16,
    dir: PathBuf,
    process: Supervised,
}

impl Churn<'_> {
    /// Every proxy with `workers` workers: started together, warmed, measured in turns over the
    /// rounds; with one worker, their system calls counted.
    fn measure(
        &self,
        targets: &[Target],
        workers: u32,
        session: &mut Session,
    ) -> anyhow::Result<()> {
        let mut running = Vec::new();
        for target in targets {
            let dir = self.scratch.join(format!("{}-{workers}", target.label));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let port = free_port()?;
            let plan = Plan {
                workers,
                port,
                ..self.plan
            };
            let (file, text) = target.config(plan, &dir);
            let process = target
                .start(file, &text, port, &dir)
                .with_context(|| format!("starting {} with {workers} workers", target.label))?;
            running.push(Running {
                proxy: target.kind,
                port,
                dir,
                process,
            });
        }
        let settings = self.settings;
        let warm_up = Load {
            connections: settings.connections,
            seconds: 1,
        };
        for one in &mut running {
            wrk::run_with_headers(self.wrk, one.port, warm_up, &[CLOSE])?;
            one.process.check_running()?;
        }
        let planned = f64::from(settings.seconds) + 0.3;
        let mut progress = Progress::new(std::iter::repeat_n(
            planned,
            settings.rounds as usize * running.len(),
        ));
        let load = Load {
            connections: settings.connections,
            seconds: settings.seconds,
        };
        for round in 1..=settings.rounds {
            for index in turn_order(running.len(), round) {
                let one = &mut running[index];
                let (cpu, report) =
                    wrk::run_costing(self.wrk, one.port, load, &[CLOSE], one.process.pid())?;
                one.process.check_running()?;
                if report.requests == 0 {
                    bail!("{} answered no request", one.proxy);
                }
                let run = ChurnRun {
                    round,
                    workers,
                    proxy: one.proxy,
                    cpu,
                    wrk: report,
                };
                progress.report(
                    planned,
                    &format!("{workers} worker(s), round {round}/{}", settings.rounds),
                    &format!(
                        "{:<8} {:>7.0} req/s, {:.2} CPU-µs/req",
                        one.proxy.to_string(),
                        run.wrk.requests_per_sec,
                        run.cpu_us()
                    ),
                );
                session.runs.push(run);
            }
        }
        if let (Some(strace), 1) = (self.strace, workers) {
            for one in &running {
                let count =
                    syscalls::count(strace, &one.process, one.port, settings.serial, &one.dir)
                        .with_context(|| format!("counting {}'s system calls", one.proxy))?;
                eprintln!(
                    "{}: {:.1} system calls per connection",
                    one.proxy,
                    count.per_connection(count.total())
                );
                session.syscalls.push((one.proxy, count));
            }
        }
        Ok(())
    }
}
