//! `herdsman-bench compare`: herdsman, HAProxy and nginx side by side in front of one backend. For
//! each worker count, every proxy is started with that count and they take turns under wrk, round
//! after round, at every connection count; then the idle-connection sweep; then the results file
//! and its plots. Every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings`     — the options, the full and the short defaults
//! - `idle`         — the idle sweep: the same load with N idle keep-alive clients held open
//! - `idle_clients` — the processes that hold the idle clients, and the handle on them
//! - `plots`        — the PNG plots beside the results file
//! - `targets`      — which rows to measure: installing peers, building herdsman, their versions
//! - `report`       — the medians, spreads, ratios, goals and the Markdown results file

mod idle;
pub mod idle_clients;
mod plots;
mod report;
mod settings;
mod targets;

pub use settings::CompareArgs;

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::kit::markdown::{thousands, worker_count};
use crate::kit::paired::turn_order;
use crate::kit::process::{free_port, raise_descriptor_limit, Supervised};
use crate::kit::progress::Progress;
use crate::kit::proxies::{Plan, Target};
use crate::kit::scratch::ScratchDir;
use crate::kit::wrk::{self, Load};
use crate::kit::{backend, environment, procstat, tools};
use report::idle::IdleSweep;
use report::{goals, Run, Session, BACKEND_LABEL};
use settings::Settings;

/// Planned seconds a wrk run costs beyond its duration (start-up, reading /proc, the drain).
const RUN_OVERHEAD_SECONDS: f64 = 1.0;

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace)?;
    let descriptor_limit = raise_descriptor_limit()?;
    let mut session = Session {
        command: environment::locked_reproduce_command(),
        labels: vec![BACKEND_LABEL.to_string()],
        workers: settings.workers.clone(),
        seconds: settings.seconds,
        rounds: settings.rounds,
        warmup_seconds: settings.warmup,
        connections: settings.connections.clone(),
        ..Session::default()
    };
    let backend_port = free_port()?;
    let plan = |workers, port| Plan {
        workers,
        port,
        backend_port,
        backend_idle: settings.most_connections().max(64),
        client_connections: settings.most_connections() + settings.most_idle(),
        descriptor_limit,
    };
    let needed = plan(1, 0).descriptors_needed();
    if needed > descriptor_limit {
        bail!(
            "the largest --idle plus the largest --connections need about {needed} open files per \
             proxy process, and processes here may open {descriptor_limit}: ask for fewer"
        );
    }

    let (targets, not_run) = targets::resolve_targets(&args, &workspace, &mut session)?;
    session.not_run = not_run;
    let wrk_path = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    targets::record_versions(&mut session, &wrk_path, &targets);

    let load_at_start = environment::load_average();
    let busy_at_start = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy_at_start);
    let scratch = ScratchDir::create()?;
    let mut backend = backend::start(backend_port, scratch.path())?;
    eprintln!(
        "backend on 127.0.0.1:{backend_port} (pid {})",
        backend.pid()
    );

    let mut progress = Progress::new(planned_runs(&settings, targets.len()));
    eprintln!(
        "measuring {} target(s) + backend alone with {} worker count(s), {} connection count(s), \
         {} round(s) of {} s runs{}",
        targets.len(),
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
        let mut pass = Pass {
            wrk: &wrk_path,
            settings: &settings,
            workers,
            backend: &mut backend,
            backend_port,
        };
        let mut running = start_targets(&targets, workers, plan, &scratch, &mut session);
        pass.warm_up(&mut running, &mut session);
        pass.run_rounds(&mut running, &mut session, &mut progress)?;
    }
    if !settings.idle.is_empty() {
        let mut sweep = IdleSweep {
            counts: settings.idle.clone(),
            workers: settings.idle_workers(),
            connections: settings.idle_load_connections(),
            seconds: settings.seconds,
            rounds: settings.rounds,
            labels: targets.iter().map(|t| t.label.clone()).collect(),
            ..IdleSweep::default()
        };
        let idle_plan = |port| plan(settings.idle_workers(), port);
        idle::sweep(
            &wrk_path,
            &targets,
            idle_plan,
            &scratch,
            &mut sweep,
            &mut progress,
        );
        session.idle = Some(sweep);
    }

    drop(backend);
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

/// A target during one worker pass: its process while it runs; None once it failed (to start, or
/// later), its remaining turns then being skipped.
struct Running {
    target: Target,
    process: Option<Supervised>,
    port: u16,
}

/// Starts every target for one worker pass and records its configuration; one that cannot start
/// is recorded as not run (for this worker count) and keeps its place in the turns.
fn start_targets(
    targets: &[Target],
    workers: u32,
    plan: impl Fn(u32, u16) -> Plan,
    scratch: &ScratchDir,
    session: &mut Session,
) -> Vec<Running> {
    targets
        .iter()
        .map(|target| {
            let dir = scratch
                .path()
                .join(format!("{}-{workers}w", dir_name(&target.label)));
            match start_target(target, |port| plan(workers, port), &dir) {
                Ok((process, port, (file, text))) => {
                    let label = format!("{}, {}", target.label, worker_count(workers));
                    session.configs.push((label, file.to_string(), text));
                    Running {
                        target: target.clone(),
                        process: Some(process),
                        port,
                    }
                }
                Err(e) => {
                    session.not_run.push((
                        target.label.clone(),
                        format!("with {}: {e:#}", worker_count(workers)),
                    ));
                    Running {
                        target: target.clone(),
                        process: None,
                        port: 0,
                    }
                }
            }
        })
        .collect()
}

/// One worker count's turn: the backend and the targets started for it.
struct Pass<'a> {
    wrk: &'a Path,
    settings: &'a Settings,
    workers: u32,
    backend: &'a mut Supervised,
    backend_port: u16,
}

impl Pass<'_> {
    /// Unrecorded load, so first-run effects (page faults, cold caches, pool growth) stay out of
    /// round 1.
    fn warm_up(&self, running: &mut [Running], session: &mut Session) {
        if self.settings.warmup == 0 {
            return;
        }
        let load = Load {
            connections: self.settings.connections[0],
            seconds: self.settings.warmup,
        };
        for target in running.iter_mut().filter(|t| t.process.is_some()) {
            if let Err(e) = wrk::run(self.wrk, target.port, load) {
                let reason = format!(
                    "with {}: failed the warm-up: {e:#}",
                    worker_count(self.workers)
                );
                session.not_run.push((target.target.label.clone(), reason));
                target.process = None;
            }
        }
    }

    /// Round after round, each connection count, the backend alone then every target in turn (the
    /// order rotating by one each round, so no target always runs first or right after another). A
    /// target that fails is recorded and stopped so it cannot disturb the others; a backend that
    /// fails ends the comparison.
    fn run_rounds(
        &mut self,
        running: &mut [Running],
        session: &mut Session,
        progress: &mut Progress,
    ) -> anyhow::Result<()> {
        let planned = main_run_seconds(self.settings);
        for round in 1..=self.settings.rounds {
            for &connections in &self.settings.connections {
                let load = Load {
                    connections,
                    seconds: self.settings.seconds,
                };
                let case = Case {
                    round,
                    workers: self.workers,
                    connections,
                };
                let backend = measure(self.wrk, self.backend, self.backend_port, load)
                    .context("measuring the backend alone")?;
                record(
                    session,
                    case,
                    BACKEND_LABEL,
                    backend,
                    &progress.step(planned),
                );
                for index in turn_order(running.len(), round) {
                    let target = &mut running[index];
                    let Some(process) = target.process.as_mut() else {
                        progress.skip(planned);
                        continue;
                    };
                    let label = target.target.label.clone();
                    match measure(self.wrk, process, target.port, load) {
                        Ok(m) => record(session, case, &label, m, &progress.step(planned)),
                        Err(e) => {
                            progress.skip(planned);
                            let reason = format!(
                                "stopped with {}, round {round}, c={connections}: {e:#}",
                                worker_count(self.workers)
                            );
                            eprintln!("{label}: {reason}");
                            session.not_run.push((label, reason));
                            target.process = None;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Which run of the main comparison a measurement is.
#[derive(Debug, Clone, Copy)]
struct Case {
    round: u32,
    workers: u32,
    connections: u32,
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

/// What one wrk run cost the measured process tree.
struct Measured {
    wrk: wrk::WrkReport,
    cpu_us_per_request: f64,
    peak_rss_kib: u64,
}

fn measure(
    wrk_path: &Path,
    process: &mut Supervised,
    port: u16,
    load: Load,
) -> anyhow::Result<Measured> {
    let pid = process.pid();
    let before = procstat::tree_cpu_time(pid)?;
    let report = wrk::run(wrk_path, port, load)?;
    let after = procstat::tree_cpu_time(pid)?;
    process.check_running()?;
    if report.requests == 0 {
        bail!("no request completed");
    }
    Ok(Measured {
        cpu_us_per_request: (after - before).as_secs_f64() * 1e6 / report.requests as f64,
        peak_rss_kib: procstat::tree_peak_rss_kib(pid)?,
        wrk: report,
    })
}

/// The figures of one run on one line, for the progress output.
fn figures_line(m: &Measured) -> String {
    format!(
        "{:>9} req/s  p50 {:>6.0} µs  p99 {:>6.0} µs  max {:>7.0} µs  {:>6.2} CPU-µs/req  errors {}",
        thousands(m.wrk.requests_per_sec),
        m.wrk.p50_us,
        m.wrk.p99_us,
        m.wrk.max_us,
        m.cpu_us_per_request,
        m.wrk.socket_errors + m.wrk.bad_status,
    )
}

fn record(session: &mut Session, case: Case, label: &str, m: Measured, progress: &str) {
    eprintln!(
        "[{progress}] {}, round {}/{}, c={}: {label:<16} {}  peak {:.1} MiB",
        worker_count(case.workers),
        case.round,
        session.rounds,
        case.connections,
        figures_line(&m),
        m.peak_rss_kib as f64 / 1024.0,
    );
    session.runs.push(Run {
        round: case.round,
        workers: case.workers,
        label: label.to_string(),
        connections: case.connections,
        wrk: m.wrk,
        cpu_us_per_request: m.cpu_us_per_request,
        peak_rss_kib: m.peak_rss_kib,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_become_plain_directory_names() {
        assert_eq!(dir_name("herdsman (balanced)"), "herdsman__balanced");
        assert_eq!(dir_name("nginx"), "nginx");
    }

    #[test]
    fn every_case_is_planned_once() {
        let settings = Settings {
            workers: vec![1, 2],
            connections: vec![50, 200, 1000],
            seconds: 2,
            rounds: 1,
            warmup: 0,
            idle: vec![0, 1000],
            out: "x.md".into(),
        };
        let plan = planned_runs(&settings, 3);
        // 2 worker counts × 3 connection counts × (3 targets + the backend), then 3 × 2 idle runs.
        assert_eq!(plan.len(), 24 + 6);
        assert_eq!(plan[0], 3.0);
        assert!(plan[24..].iter().all(|&s| s > 3.0));
    }
}
