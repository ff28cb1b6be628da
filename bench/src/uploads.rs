//! `herdsman-bench uploads` (issue 51): what an upload costs through each proxy. herdsman with its
//! defaults, HAProxy (which streams a body to the server as it arrives) and nginx (which reads it
//! whole first, its body size limit lifted), each with the same worker count in front of one nginx
//! server that answers an upload once its body has all arrived; wrk posts bodies of each size on
//! keep-alive connections. Per run: the proxy's CPU per upload (user and kernel apart),
//! uploads/s, p50 and p99, errors; in interleaved rounds, judged against the targets.
//! Several herdsman builds can be rows side by side (`--herdsman-bin LABEL=PATH`: a before and an
//! after). Every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults, each case's run length
//! - `report`   — the targets, the tables, the results file and its plot

mod report;
mod settings;

pub use settings::UploadsArgs;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use crate::kit::environment;
use crate::kit::markdown::worker_count;
use crate::kit::paired::turn_order;
use crate::kit::process::{free_port, raise_descriptor_limit, Supervised};
use crate::kit::progress::Progress;
use crate::kit::proxies::{self, ProxyKind, Target};
use crate::kit::quiet;
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::servers::Server;
use crate::kit::tools;
use crate::kit::wrk::{self, Load};
use report::{Case, Row, Session, UploadRun};
use settings::{script_name, size_text, Settings};

/// The path every upload is posted to (the server answers any).
pub const UPLOAD_PATH: &str = "/upload";

/// Seconds of unrecorded uploads each proxy takes once started, so that first-run effects (page
/// faults, pools and buffers growing) stay out of round 1.
const WARM_UP_SECONDS: u32 = 1;

/// The longest the machine is given to settle before a run.
const SETTLE_MOST: Duration = Duration::from_secs(15);

pub fn run(args: UploadsArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace)?;
    let targets = resolve_targets(&args, &settings, &workspace)?;
    let wrk = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    let descriptor_limit = raise_descriptor_limit()?;
    let needed = settings
        .plan(1, 0, 0, descriptor_limit)
        .descriptors_needed();
    if needed > descriptor_limit {
        bail!(
            "the largest --connections needs about {needed} open files per proxy process (a \
             client and a server connection each), and processes here may open \
             {descriptor_limit}: ask for fewer"
        );
    }
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let setup = setup_lines(&targets, &wrk, busy, descriptor_limit);
    let rows = targets.iter().map(Row::of).collect();
    let mut session = Session::new(RunFacts::new(setup), settings.clone(), rows);
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    let outcome = (|| {
        let server = Server::start_for_uploads(scratch.path(), descriptor_limit)
            .context("starting the nginx server")?;
        if let Some((file, text)) = &server.config {
            session
                .configs
                .record("the nginx server", file, text, scratch.path());
        }
        let mut scripts = HashMap::new();
        for &size in &settings.sizes {
            let script = scratch.path().join(script_name(size));
            std::fs::write(&script, wrk::upload_script(size))
                .with_context(|| format!("writing {}", script.display()))?;
            scripts.insert(size, script);
        }
        let mut bench = Uploads {
            settings: &settings,
            wrk: &wrk,
            scratch: scratch.path(),
            server,
            scripts,
            descriptor_limit,
            progress: Progress::new(settings.planned_runs(targets.len())),
        };
        for &workers in &settings.workers {
            bench.measure(&targets, workers, &mut session)?;
        }
        Ok(())
    })();
    results::finish("uploads", &settings.out, started, &mut session, outcome)
}

/// The rows, in the order of --proxies: herdsman once per build asked for (a build that cannot
/// be had ends the run, since a before-and-after without one says nothing), each peer installed
/// if missing.
fn resolve_targets(
    args: &UploadsArgs,
    settings: &Settings,
    workspace: &Path,
) -> anyhow::Result<Vec<Target>> {
    let mut targets = Vec::new();
    for &kind in &settings.proxies {
        if kind != ProxyKind::Herdsman {
            // A peer's row: the herdsman path is for herdsman rows only.
            targets.extend(proxies::targets(&[kind], Path::new(""))?);
            continue;
        }
        let builds = tools::herdsman_builds(&args.herdsman_bins, workspace, args.output.no_build)?;
        for (label, program) in builds {
            let program = program.map_err(|reason| anyhow!("herdsman row {label:?}: {reason}"))?;
            targets.push(Target {
                label,
                kind,
                program,
                intake: None,
            });
        }
    }
    Ok(targets)
}

/// Versions of every row and of wrk, the machine, and the open-files limit.
fn setup_lines(
    targets: &[Target],
    wrk: &Path,
    busy: Option<f64>,
    descriptor_limit: u64,
) -> Vec<(String, String)> {
    let herdsman: Vec<&Target> = targets
        .iter()
        .filter(|t| t.kind == ProxyKind::Herdsman)
        .collect();
    let mut setup: Vec<(String, String)> = herdsman
        .iter()
        .map(|t| environment::herdsman_line(&t.label, &t.program))
        .collect();
    if let Some(first) = herdsman.first() {
        // rustc, the kernel, the CPUs and how busy they were; its herdsman line is above.
        setup.extend(
            environment::machine_lines(&first.program, busy)
                .into_iter()
                .skip(1),
        );
    }
    setup.extend(proxies::peer_version_lines(targets));
    setup.push(("wrk".into(), tools::version_line(wrk, &["-v"])));
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    setup
}

/// What every worker count's pass shares: the server, the scripts, the progress line.
struct Uploads<'a> {
    settings: &'a Settings,
    wrk: &'a Path,
    scratch: &'a Path,
    server: Server,
    /// Each size's wrk script.
    scripts: HashMap<u64, PathBuf>,
    descriptor_limit: u64,
    progress: Progress,
}

/// A row's proxy started for one worker count.
struct Running {
    /// Its index in the session's rows.
    row: usize,
    port: u16,
    process: Supervised,
}

impl Uploads<'_> {
    /// Every row with `workers` workers: started together in front of the server, warmed up, then
    /// round after round, each size and connection count, every row in turn.
    fn measure(
        &mut self,
        targets: &[Target],
        workers: u32,
        session: &mut Session,
    ) -> anyhow::Result<()> {
        let mut running = Vec::new();
        for (row, target) in targets.iter().enumerate() {
            // Numbered rather than named after the label, which --herdsman-bin lets be anything.
            let dir = self
                .scratch
                .join(format!("{row}-{}-{workers}w", target.kind));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let port = free_port()?;
            let plan = self
                .settings
                .plan(workers, port, self.server.port, self.descriptor_limit);
            let (file, text) = target.upload_config(plan, &dir);
            let process = target
                .start(file, &text, port, &dir)
                .with_context(|| format!("starting {} with {workers} workers", target.label))?;
            let title = format!("{}, {}", session.rows[row].name, worker_count(workers));
            session.configs.record(&title, file, &text, self.scratch);
            running.push(Running { row, port, process });
        }
        for one in &mut running {
            self.warm_up(one, session)?;
        }
        let settings = self.settings;
        for round in 1..=settings.rounds {
            for &size in &settings.sizes {
                for &connections in &settings.connections {
                    let case = Case {
                        size,
                        connections,
                        workers,
                    };
                    for index in turn_order(running.len(), round) {
                        let run = self.take_turn(&mut running[index], case, round, session)?;
                        session.runs.push(run);
                    }
                }
            }
        }
        Ok(())
    }

    /// `WARM_UP_SECONDS` of the smallest uploads on the first connection count; a row that
    /// refuses every one of them is misconfigured, and ends the run.
    fn warm_up(&self, one: &mut Running, session: &Session) -> anyhow::Result<()> {
        let size = self.settings.sizes.iter().copied().min().unwrap_or(1);
        let load = Load {
            connections: self.settings.connections[0],
            seconds: WARM_UP_SECONDS,
        };
        let args = load.script_args(
            &url(one.port),
            &self.scripts[&size],
            Settings::timeout(WARM_UP_SECONDS),
        );
        let name = &session.rows[one.row].name;
        let report = wrk::run_script(self.wrk, args, WARM_UP_SECONDS)
            .with_context(|| format!("warming {name} up"))?;
        one.process
            .check_running()
            .with_context(|| format!("{name} during its warm-up"))?;
        if report.requests > 0 && report.bad_status == report.requests {
            bail!(
                "{name} refused every upload of its warm-up ({} answers of 400 or more; its \
                 log: {})",
                report.bad_status,
                one.process.log_tail(5)
            );
        }
        Ok(())
    }

    /// One row's measured run of `case` in `round`.
    fn take_turn(
        &mut self,
        one: &mut Running,
        case: Case,
        round: u32,
        session: &Session,
    ) -> anyhow::Result<UploadRun> {
        let settings = self.settings;
        let seconds = settings.seconds(case.size, case.connections);
        let load = Load {
            connections: case.connections,
            seconds,
        };
        let args = load.script_args(
            &url(one.port),
            &self.scripts[&case.size],
            Settings::timeout(seconds),
        );
        let name = &session.rows[one.row].name;
        // Whatever the run before left the kernel to do (nginx's temporary files written back)
        // is done before this one starts: with three rows in turn, each always follows the same
        // one, so the work would fall on one row every round.
        let (_, quiet) = quiet::settle(SETTLE_MOST);
        if !quiet {
            eprintln!("note: the machine was still busy after {SETTLE_MOST:?} of settling before {name}'s run");
        }
        let (cpu, report) = wrk::run_script_costing(self.wrk, args, seconds, one.process.pid())
            .with_context(|| format!("measuring {name}, {}", case.text()))?;
        one.process
            .check_running()
            .with_context(|| format!("{name} after {}", case.text()))?;
        self.server
            .process
            .check_running()
            .with_context(|| format!("the nginx server after {name}, {}", case.text()))?;
        let run = UploadRun {
            round,
            case,
            row: one.row,
            seconds,
            cpu,
            wrk: report,
        };
        self.progress.report(
            settings.planned_seconds(case.size, case.connections),
            &format!(
                "{}, c={}, {}, round {round}/{}",
                size_text(case.size),
                case.connections,
                worker_count(case.workers),
                settings.rounds
            ),
            &run.progress_text(name),
        );
        Ok(run)
    }
}

/// Where wrk posts to a proxy on `port`.
fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}{UPLOAD_PATH}")
}
