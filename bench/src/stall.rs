//! `herdsman-bench stall`: what new connections suffer while one worker is blocked. For each intake
//! mode, a fault-injection build of herdsman takes a steady open-loop stream of new connections
//! (connect, `GET /`, first byte, read to EOF); in the middle, `GET /__herdsman/stall` blocks the
//! worker that serves it for 500 ms. Connect-to-first-byte latency is compared between the stall
//! window and the rest of the run.
//!
//! Layout:
//! - `load`   — the connection stream, the stall request, and spotting the stalled worker
//! - `report` — percentiles per window, the table, the results file and the plot

mod load;
mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::kit::proxies::IntakeMode;
use crate::kit::scratch::ScratchDir;
use crate::kit::stack::{self, Stack};
use crate::kit::{environment, tools};

/// Options of `stall`.
#[derive(Debug, clap::Args)]
pub struct StallArgs {
    /// Intake modes, comma-separated, in the order they run.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "balanced,reuseport,exclusive,shared"
    )]
    pub modes: Vec<IntakeMode>,
    /// herdsman's worker threads.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// New connections per second.
    #[arg(long, default_value_t = 800, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub rate: u32,
    /// Length of one run, in ms.
    #[arg(long, default_value_t = 3000)]
    pub run_ms: u64,
    /// When in the run the stall request is sent, in ms.
    #[arg(long, default_value_t = 1000)]
    pub stall_at_ms: u64,
    /// Runs per mode, each with one stall; the figures pool them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// The results file; the plot goes beside it with a .png extension.
    /// Default: bench/results/stall.md in the workspace.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Use the existing target/fault-injection/release/herdsman without building it first.
    #[arg(long)]
    pub no_build: bool,
}

pub fn run(args: StallArgs) -> anyhow::Result<()> {
    if args.stall_at_ms + 600 > args.run_ms {
        bail!("--run-ms must leave at least 600 ms after --stall-at-ms for the stall to end");
    }
    let workspace = tools::workspace_root()?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| workspace.join("bench/results/stall.md"));
    let herdsman = fault_injection_build(&workspace, args.no_build)?;
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut session = report::Session::new(&args, &herdsman, busy);
    let scratch = ScratchDir::create()?;
    let started = Instant::now();

    let failures = stack::each_mode(&args.modes, scratch.path(), |mode, dir| {
        let mut stack = Stack::start(&herdsman, mode, args.workers, dir)?;
        for round in 1..=args.rounds {
            let run = load::run(&stack, mode, round, &args)?;
            eprintln!("{}", report::progress_line(&run));
            session.runs.push(run);
            stack.check_alive()?;
        }
        Ok(())
    })?;
    session.failures.extend(failures);
    session.facts.end(started);
    crate::kit::results::write_results(
        "stall",
        &out,
        &session.table(),
        session.facts.elapsed,
        |path| session.plot(path),
        |plot| session.render(plot),
    )?;
    if session.runs.is_empty() {
        bail!("every run failed");
    }
    Ok(())
}

/// herdsman built with `--features fault-injection` into its own target directory, so the normal
/// release binary is left alone.
fn fault_injection_build(workspace: &Path, no_build: bool) -> anyhow::Result<PathBuf> {
    let target = workspace.join("target/fault-injection");
    let binary = target.join("release/herdsman");
    if !no_build {
        return crate::kit::tools::build_herdsman_into(workspace, &target, &["fault-injection"]);
    }
    if !binary.exists() {
        bail!(
            "{} is missing; build it without --no-build",
            binary.display()
        );
    }
    Ok(binary)
}
