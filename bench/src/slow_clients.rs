//! `herdsman-bench slow-clients` (issue 23): do slow clients reach the servers? Behind each proxy
//! sits a server like gunicorn's sync workers (8 threads, one connection each from accept to
//! close); 1,000 slow uploads and 1,000 slow readers are attached, and the other clients' (wrk's)
//! requests/s and p99 are measured, for herdsman with its buffering defaults, nginx with its own,
//! and herdsman with buffering off (the control, which must lose), each against its own baseline
//! without slow clients, in interleaved rounds. Every run has a fresh server and proxy. Every
//! process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults, the chosen answer size
//! - `server`   — the sync server (the hidden `sync-server` subcommand) and starting it
//! - `kinds`    — the slow uploads and readers (the hidden `slow-clients-holder` subcommand)
//! - `rows`     — herdsman, nginx and the control: their configurations, one run's stack
//! - `report`   — the figures, the summary, the results file and its plot

pub mod kinds;
mod report;
mod rows;
pub mod server;
mod settings;

pub use settings::SlowClientsArgs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::cpu::{CpuClock, Measured};
use crate::kit::markdown::thousands;
use crate::kit::paired::{turn_order, without_and_with};
use crate::kit::process::raise_descriptor_limit;
use crate::kit::progress::Progress;
use crate::kit::proxies::SPARE_DESCRIPTORS;
use crate::kit::results;
use crate::kit::scratch::ScratchDir;
use crate::kit::wrk::{self, Load};
use crate::kit::{environment, procstat, tools};
use kinds::SlowClients;
use report::{Run, Session};
use rows::{Row, Stack};
use settings::Settings;

/// Unrecorded load on each fresh stack before its run.
const WARMUP_SECONDS: u32 = 1;

/// How long a holder may go on beyond settling and its wrk run before it stops by itself.
const HOLD_MARGIN: Duration = Duration::from_secs(60);

/// Planned seconds a run costs beyond its wrk duration, for the progress line: starting and
/// stopping the stack and the warm-up; with slow clients, also opening and closing them.
const OVERHEAD_WITHOUT: f64 = 2.5;
const OVERHEAD_WITH: f64 = 5.0;

/// Free space the scratch directory must keep beyond the slow readers' answers, which a
/// buffering proxy may write there whole.
const DISK_MARGIN: u64 = 1 << 30;

/// What the runs are made with: the programs the rows run, wrk, the open files a process may
/// have, and the scratch directory.
struct Means {
    herdsman: Option<PathBuf>,
    nginx: Option<PathBuf>,
    wrk: PathBuf,
    descriptor_limit: u64,
    scratch: ScratchDir,
}

impl Means {
    fn program(&self, row: Row) -> anyhow::Result<&Path> {
        let program = match row {
            Row::Nginx => &self.nginx,
            Row::Herdsman | Row::Control => &self.herdsman,
        };
        program.as_deref().context("no program for the row")
    }
}

pub fn run(args: SlowClientsArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace);
    let descriptor_limit = raise_descriptor_limit()?;
    // Every connection, and a temporary file per slow reader's answer in a buffering proxy.
    let needed = settings.proxy_connections() + u64::from(settings.readers + SPARE_DESCRIPTORS);
    if needed > descriptor_limit {
        bail!(
            "the slow clients and wrk's connections need about {needed} open files in a proxy, \
             and processes here may open {descriptor_limit}: ask for fewer"
        );
    }
    let any = |wanted: &[Row]| settings.rows.iter().any(|r| wanted.contains(r));
    let means = Means {
        herdsman: any(&[Row::Herdsman, Row::Control])
            .then(|| tools::herdsman_binary(&workspace, args.output.no_build))
            .transpose()?,
        nginx: any(&[Row::Nginx])
            .then(|| tools::ensure_installed(&[&tools::NGINX]).map(|mut p| p.remove(0)))
            .transpose()?,
        wrk: tools::ensure_installed(&[&tools::WRK])?.remove(0),
        descriptor_limit,
        scratch: ScratchDir::create()?,
    };
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = match &means.herdsman {
        Some(herdsman) => environment::machine_lines(herdsman, busy),
        None => Vec::new(),
    };
    if let Some(nginx) = &means.nginx {
        setup.push(("nginx".into(), tools::version_line(nginx, &["-v"])));
    }
    setup.push(("wrk".into(), tools::version_line(&means.wrk, &["-v"])));
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let scratch = means.scratch.path();
    let free = free_bytes(scratch)?;
    if settings.answers_bytes() + DISK_MARGIN > free {
        bail!(
            "{} slow readers of {} bytes each may put {} bytes in a proxy's temporary files, and \
             {} has {free} bytes free: ask for fewer or smaller",
            settings.readers,
            settings.answer_bytes,
            settings.answers_bytes(),
            scratch.display()
        );
    }
    let mut session = Session::new(setup, settings.clone());
    let started = Instant::now();
    eprintln!(
        "slow-clients: {} round(s) of {} s runs per row ({}), without and with {} slow uploads + \
         {} slow readers (answers of {} bytes), wrk -c{}",
        settings.rounds,
        settings.seconds,
        Row::names(&settings.rows),
        settings.uploads,
        settings.readers,
        thousands(settings.answer_bytes as f64),
        settings.connections
    );
    let outcome = measure(&settings, &means, &mut session);
    results::finish(
        "slow-clients",
        &settings.out,
        started,
        &mut session,
        outcome,
    )
}

/// Every round: the rows in turn, each without and with the slow clients, each run on a fresh
/// stack in a directory of its own.
fn measure(settings: &Settings, means: &Means, session: &mut Session) -> anyhow::Result<()> {
    let mut progress = Progress::new(planned_runs(settings));
    for round in 1..=settings.rounds {
        for index in turn_order(settings.rows.len(), round) {
            let row = settings.rows[index];
            for with in without_and_with(round) {
                let name = format!(
                    "round{round}-{row:?}-{}",
                    if with { "with" } else { "without" }
                );
                let dir = means.scratch.path().join(name.to_lowercase());
                std::fs::create_dir_all(&dir)?;
                let program = means.program(row)?;
                let mut stack = Stack::start(row, program, settings, means.descriptor_limit, &dir)
                    .with_context(|| format!("starting {row} for round {round}"))?;
                if !session.configs.iter().any(|(r, _)| *r == row) {
                    session.configs.push((row, stack.config.clone()));
                }
                let run = measure_one(settings, &means.wrk, &mut stack, row, round, with, &dir)
                    .with_context(|| {
                        format!(
                            "round {round}, {row}, {}",
                            if with { "with slow clients" } else { "without" }
                        )
                    })?;
                drop(stack);
                let which = format!("round {round}/{}", settings.rounds);
                let planned = planned_seconds(settings, with);
                progress.report(planned, &which, &run.progress_line());
                session.runs.push(run);
            }
        }
    }
    Ok(())
}

/// One run on a fresh stack: the warm-up, the slow clients opened and settled when `with`, the
/// wrk run beside them, then what the proxy held and what the slow clients saw.
fn measure_one(
    settings: &Settings,
    wrk_path: &Path,
    stack: &mut Stack,
    row: Row,
    round: u32,
    with: bool,
    dir: &Path,
) -> anyhow::Result<Run> {
    let load = Load {
        connections: settings.connections,
        seconds: settings.seconds,
    };
    let warm_up = load.for_seconds(WARMUP_SECONDS);
    wrk::run(wrk_path, stack.port, warm_up).context("the warm-up")?;
    let clients = if with {
        let settle = Duration::from_secs(u64::from(settings.settle));
        let hold = settle + Duration::from_secs(u64::from(settings.seconds)) + HOLD_MARGIN;
        let pace = settings.pace;
        let (uploads, readers) = (settings.uploads, settings.readers);
        let clients = SlowClients::open(stack.port, uploads, readers, pace, hold, dir)?;
        std::thread::sleep(settle);
        Some(clients)
    } else {
        None
    };
    let slow_pids = clients.as_ref().map(SlowClients::pids).unwrap_or_default();
    let proxy = stack.proxy.pid();
    let processes = Measured {
        herdsman: proxy,
        backend: stack.server.pid(),
        slow_clients: &slow_pids,
    };
    let clock = CpuClock::start(&processes);
    let report = wrk::run(wrk_path, stack.port, load)?;
    let cpu = clock.stop(&processes);
    let rss_kib = procstat::tree_rss_kib(proxy)?;
    let unlinked = procstat::tree_unlinked_files(proxy);
    let metrics = stack
        .buffering_metrics()
        .context("reading herdsman's /metrics")?;
    let slow = clients.map(SlowClients::close).transpose()?;
    stack.check_alive()?;
    Ok(Run {
        round,
        row,
        wrk: report,
        rss_kib,
        unlinked,
        cpu,
        slow,
        metrics,
    })
}

/// Bytes free for an unprivileged user on the file system holding `dir`.
fn free_bytes(dir: &Path) -> anyhow::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: statvfs is a struct of plain integers, for which all zeros is a value.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes only into the struct passed to it; the path is NUL-terminated.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", dir.display()));
    }
    Ok(stat.f_bavail * stat.f_frsize)
}

/// The planned seconds of every run, in order.
fn planned_runs(settings: &Settings) -> Vec<f64> {
    (1..=settings.rounds)
        .flat_map(|round| {
            settings
                .rows
                .iter()
                .flat_map(move |_| without_and_with(round))
        })
        .map(|with| planned_seconds(settings, with))
        .collect()
}

/// The planned seconds of one run, without or with the slow clients.
fn planned_seconds(settings: &Settings, with: bool) -> f64 {
    f64::from(settings.seconds + WARMUP_SECONDS)
        + if with {
            OVERHEAD_WITH + f64::from(settings.settle)
        } else {
            OVERHEAD_WITHOUT
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_has_every_run_of_every_row() {
        let settings = settings::resolve(&[]);
        let plan = planned_runs(&settings);
        assert_eq!(plan.len(), 3 * 3 * 2);
        assert_eq!(plan[0], 13.5);
        assert_eq!(plan[1], 21.0);
        // Round 2 has with first.
        assert_eq!(plan[6], 21.0);
    }

    #[test]
    fn the_scratch_directory_has_free_space() {
        assert!(free_bytes(&std::env::temp_dir()).unwrap() > 0);
    }
}
