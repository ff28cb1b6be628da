//! `herdsman-bench compare`: herdsman, HAProxy and nginx side by side in front of each server (the
//! bench's own backend, a real nginx). For each worker count, every proxy is started with that
//! count in front of each server, and they take turns under wrk, round after round, at every
//! connection count; then the idle-connection sweep; then the results file and its plots. Every
//! process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings`     — the options, the full and the short defaults
//! - `pass`         — one worker count's pass: the targets started, warmed up, and their rounds
//! - `measure`      — one measured wrk run: CPU, memory, wrk's report, server connections opened
//! - `idle`         — the idle sweep: the same load with N idle keep-alive clients held open
//! - `idle_clients` — the processes that hold the idle clients, and the handle on them
//! - `plots`        — the PNG plots beside the results file
//! - `targets`      — which rows to measure: installing peers, building herdsman, their versions
//! - `report`       — the medians, spreads, ratios, goals and the Markdown results file

mod idle;
pub mod idle_clients;
mod measure;
mod pass;
mod plots;
mod report;
mod settings;
mod targets;

pub use settings::CompareArgs;

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::kit::process::{free_port, raise_descriptor_limit, Supervised};
use crate::kit::progress::Progress;
use crate::kit::proxies::{Plan, Target};
use crate::kit::scratch::ScratchDir;
use crate::kit::servers::Server;
use crate::kit::{environment, tools};
use pass::Pass;
use report::idle::IdleSweep;
use report::{goals, Session, SERVER_ALONE_LABEL};
use settings::Settings;

/// Planned seconds a wrk run costs beyond its duration (start-up, reading /proc and the server's
/// counts, the drain).
const RUN_OVERHEAD_SECONDS: f64 = 1.0;

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace)?;
    let descriptor_limit = raise_descriptor_limit()?;
    let mut session = Session {
        command: environment::locked_reproduce_command(),
        labels: vec![SERVER_ALONE_LABEL.to_string()],
        servers: settings.servers.clone(),
        workers: settings.workers.clone(),
        seconds: settings.seconds,
        rounds: settings.rounds,
        warmup_seconds: settings.warmup,
        connections: settings.connections.clone(),
        ..Session::default()
    };
    let sizing = Sizing {
        settings: &settings,
        descriptor_limit,
    };
    sizing.check()?;

    let (targets, not_run) = targets::resolve_targets(&args, &workspace, &mut session)?;
    session.not_run = not_run;
    let wrk_path = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    targets::record_versions(&mut session, &wrk_path, &targets);

    let load_at_start = environment::load_average();
    let busy_at_start = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy_at_start);
    let scratch = ScratchDir::create()?;
    let mut servers = start_servers(&settings, scratch.path(), descriptor_limit, &mut session)?;

    let mut progress = Progress::new(planned_runs(&settings, targets.len()));
    eprintln!(
        "measuring {} target(s) + the server alone in front of {} server(s) with {} worker \
         count(s), {} connection count(s), {} round(s) of {} s runs{}",
        targets.len(),
        settings.servers.len(),
        settings.workers.len(),
        settings.connections.len(),
        settings.rounds,
        settings.seconds,
        if settings.idle.is_empty() {
            String::new()
        } else {
            format!(", then idle counts {:?}", settings.idle)
        }
    );
    for &workers in &settings.workers {
        let plan = |workers, port, server_port| sizing.main_plan(workers, port, server_port);
        let mut running =
            pass::start_targets(&targets, &servers, workers, plan, &scratch, &mut session);
        let mut pass = Pass {
            wrk: &wrk_path,
            settings: &settings,
            workers,
            servers: &mut servers,
        };
        pass.warm_up(&mut running, &mut session);
        pass.run_rounds(&mut running, &mut session, &mut progress)?;
    }
    if !settings.idle.is_empty() {
        let server = servers
            .iter()
            .find(|s| s.kind == settings.idle_server())
            .context("the idle sweep's server")?;
        let mut sweep = IdleSweep {
            counts: settings.idle.clone(),
            workers: settings.idle_workers(),
            server: server.kind.written().to_string(),
            connections: settings.idle_load_connections(),
            seconds: settings.seconds,
            rounds: settings.rounds,
            labels: targets.iter().map(|t| t.label.clone()).collect(),
            ..IdleSweep::default()
        };
        let idle_plan = |port| sizing.idle_plan(port, server.port);
        idle::sweep(
            &wrk_path,
            &targets,
            (idle_plan, server.port),
            &scratch,
            &mut sweep,
            &mut progress,
        );
        session.idle = Some(sweep);
    }

    drop(servers);
    let machine = &mut session.machine;
    machine.push((
        "CPUs busy with other work in the second before the first run".into(),
        busy_at_start.map_or("unknown".into(), |b| format!("{:.0}%", b * 100.0)),
    ));
    machine.push((
        "load average (1, 5, 15 min) at start / end".into(),
        format!("{load_at_start} / {}", environment::load_average()),
    ));
    machine.push(environment::descriptor_limit_line(descriptor_limit));
    session.date = tools::version_line(Path::new("date"), &["-u", "+%Y-%m-%d %H:%M UTC"]);
    write_results(&mut session, &settings.out)?;
    eprint!("{}", goals::summary(&goals::evaluate(&session)));
    Ok(())
}

/// Starts every server asked for, each kept for the whole comparison, and records the
/// configurations that are files.
fn start_servers(
    settings: &Settings,
    dir: &Path,
    descriptor_limit: u64,
    session: &mut Session,
) -> anyhow::Result<Vec<Server>> {
    let mut servers = Vec::new();
    for &kind in &settings.servers {
        let server = Server::start(kind, dir, descriptor_limit)
            .with_context(|| format!("starting the {}", kind.written()))?;
        eprintln!(
            "{} on 127.0.0.1:{} (pid {})",
            kind.written(),
            server.port,
            server.process.pid()
        );
        if let Some((file, text)) = &server.config {
            session.server_configs.push((
                kind.written().to_string(),
                file.to_string(),
                text.clone(),
            ));
        }
        servers.push(server);
    }
    Ok(servers)
}

/// How the proxies are sized. The main passes' proxies and the idle sweep's are separate
/// processes, so each plan need only fit the open-files limit on its own: the largest load in the
/// first, the idle clients and the sweep's small load in the second.
struct Sizing<'a> {
    settings: &'a Settings,
    descriptor_limit: u64,
}

impl Sizing<'_> {
    /// A proxy of the main passes: room for the largest wrk load, client and server side.
    fn main_plan(&self, workers: u32, port: u16, server_port: u16) -> Plan {
        self.plan(
            workers,
            port,
            server_port,
            self.settings.most_connections(),
            0,
        )
    }

    /// A proxy of the idle sweep: the most idle clients, beside the sweep's load.
    fn idle_plan(&self, port: u16, server_port: u16) -> Plan {
        let s = self.settings;
        self.plan(
            s.idle_workers(),
            port,
            server_port,
            s.idle_load_connections(),
            s.most_idle(),
        )
    }

    fn plan(&self, workers: u32, port: u16, server_port: u16, active: u32, idle: u32) -> Plan {
        Plan {
            workers,
            port,
            backend_port: server_port,
            backend_idle: active.max(64),
            client_connections: active + idle,
            descriptor_limit: self.descriptor_limit,
        }
    }

    /// Fails, before anything starts, when a plan needs more open files than a process may have.
    fn check(&self) -> anyhow::Result<()> {
        let limit = self.descriptor_limit;
        let main = self.main_plan(1, 0, 0).descriptors_needed();
        if main > limit {
            bail!(
                "the largest --connections needs about {main} open files per proxy process (a \
                 client and a server connection each), and processes here may open {limit}: ask \
                 for fewer"
            );
        }
        let idle = self.idle_plan(0, 0).descriptors_needed();
        if !self.settings.idle.is_empty() && idle > limit {
            bail!(
                "the largest --idle plus the sweep's load need about {idle} open files per proxy \
                 process, and processes here may open {limit}: ask for fewer"
            );
        }
        Ok(())
    }
}

/// The plots, then the results file that shows them.
fn write_results(session: &mut Session, out: &Path) -> anyhow::Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    session.plots = plots::write(session, out);
    std::fs::write(out, report::render(session))
        .with_context(|| format!("writing {}", out.display()))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

/// The planned seconds of every run to come, in order: each worker pass, then the idle sweep.
fn planned_runs(settings: &Settings, targets: usize) -> Vec<f64> {
    let main = settings.workers.len()
        * settings.rounds as usize
        * settings.connections.len()
        * settings.servers.len()
        * (targets + 1);
    let idle = settings.rounds as usize * targets;
    std::iter::repeat_n(main_run_seconds(settings), main)
        .chain(settings.idle.iter().flat_map(|&count| {
            std::iter::repeat_n(idle::planned_seconds(settings.seconds, count), idle)
        }))
        .collect()
}

fn main_run_seconds(settings: &Settings) -> f64 {
    f64::from(settings.seconds) + RUN_OVERHEAD_SECONDS
}

/// Writes the target's config into `dir`, starts it and waits for an answer. Returns the process,
/// its port, and the config (file name, text).
fn start_target(
    target: &Target,
    plan: impl Fn(u16) -> Plan,
    dir: &Path,
) -> anyhow::Result<(Supervised, u16, (&'static str, String))> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let (file, text) = target.config(plan(port), dir);
    let process = target.start(file, &text, port, dir)?;
    Ok((process, port, (file, text)))
}

/// A directory name for a row label such as "herdsman (balanced)": no spaces or brackets, which
/// some proxies' config files would need quoted.
fn dir_name(label: &str) -> String {
    let name: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.trim_matches('_').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::servers::ServerKind;

    #[test]
    fn labels_become_plain_directory_names() {
        assert_eq!(dir_name("herdsman (balanced)"), "herdsman__balanced");
        assert_eq!(dir_name("nginx"), "nginx");
    }

    fn settings() -> Settings {
        Settings {
            servers: vec![ServerKind::Own, ServerKind::Nginx],
            workers: vec![1, 2],
            connections: vec![50, 200, 1000, 5000],
            seconds: 2,
            rounds: 1,
            warmup: 0,
            idle: vec![0, 1000],
            out: "x.md".into(),
        }
    }

    #[test]
    fn every_case_is_planned_once() {
        let plan = planned_runs(&settings(), 3);
        // 2 worker counts × 4 connection counts × 2 servers × (3 targets + the server alone),
        // then 3 × 2 idle runs.
        assert_eq!(plan.len(), 64 + 6);
        assert_eq!(plan[0], 3.0);
        assert!(plan[64..].iter().all(|&s| s > 3.0));
    }

    #[test]
    fn the_main_passes_and_the_idle_sweep_each_fit_the_open_files_limit() {
        let full = Settings {
            idle: vec![0, 1000, 5000, 15_000],
            ..settings()
        };
        let sizing = Sizing {
            settings: &full,
            descriptor_limit: 20_000,
        };
        // 5,000 clients and as many server connections; 15,000 idle clients beside 50 active.
        let main = sizing.main_plan(2, 4100, 4200);
        assert_eq!((main.client_connections, main.backend_idle), (5000, 5000));
        assert_eq!(main.descriptors_needed(), 10_100);
        let idle = sizing.idle_plan(4100, 4200);
        assert_eq!(
            (idle.workers, idle.client_connections, idle.backend_idle),
            (1, 15_050, 64)
        );
        assert!(sizing.check().is_ok());
        let too_many = Settings {
            idle: vec![0, 19_900],
            ..settings()
        };
        let sizing = Sizing {
            settings: &too_many,
            descriptor_limit: 20_000,
        };
        assert!(sizing.check().unwrap_err().to_string().contains("--idle"));
    }
}
