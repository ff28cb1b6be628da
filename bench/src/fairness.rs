//! `herdsman-bench fairness`: how evenly each intake mode spreads connections over herdsman's
//! workers, and what accepting them costs in wake-ups. For each mode, one herdsman (8 workers by
//! default) in front of the fast backend takes a storm of connect-and-close clients, then short
//! (one request) and long-lived (keep-alive) connections at each count; `/api/workers` is read
//! before, during and after.
//!
//! Layout:
//! - `client` — the hidden `fairness-client` subcommand: one client process
//! - `stats`  — a share of a count that may be nothing
//! - `report` — the table, the results file and the plot

pub mod client;
mod report;
mod stats;

use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::kit::process::{split_evenly, Supervised};
use crate::kit::proxies::IntakeMode;
use crate::kit::scratch::ScratchDir;
use crate::kit::stack::{self, Stack};
use crate::kit::workers_api::{self, Snapshot, WorkerCounters};
use crate::kit::{environment, tools};
use client::Mix;

/// Options of `fairness`.
#[derive(Debug, clap::Args)]
pub struct FairnessArgs {
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
    /// Client connection counts, comma-separated; each runs the short and the long-lived mix.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000",
          value_parser = clap::value_parser!(u32).range(1..=15_000))]
    pub connections: Vec<u32>,
    /// Client processes the connections are spread over (each stays far under 20,000 files).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub client_processes: u32,
    /// Connections in the storm (sequential connect-and-close, no request; 0: no storm).
    #[arg(long, default_value_t = 1000)]
    pub storm: u32,
    /// Pause between two storm connections, in µs, so that each finds the workers asleep.
    #[arg(long, default_value_t = 1000)]
    pub storm_gap_us: u64,
    /// How long long-lived connections stay open once all are open (ms).
    #[arg(long, default_value_t = 2000)]
    pub hold_ms: u64,
    /// The results file; the plot goes beside it with a .png extension.
    /// Default: bench/results/fairness.md in the workspace.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Use the existing target/release/herdsman without running cargo build first.
    #[arg(long)]
    pub no_build: bool,
}

/// What one run (a mode × mix × count) measured.
#[derive(Debug, Clone)]
pub struct Run {
    pub mode: IntakeMode,
    /// "storm", "short" or "long".
    pub mix: &'static str,
    pub connections: u32,
    /// Client exchanges that completed and failed (storm: connections made).
    pub ok: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    /// Counters added during the run (gauges as at the end).
    pub delta: Snapshot,
    /// Per worker, the most active connections seen in any poll during the run.
    pub peak_active: Vec<u64>,
    /// Long-lived: per worker, active connections once every client said all its were open.
    pub all_open_active: Option<Vec<u64>>,
}

impl Run {
    /// The per-worker figure whose spread matters: served connections for storm and short, active
    /// connections while all are open for long-lived.
    pub fn spread_values(&self) -> Vec<u64> {
        match &self.all_open_active {
            Some(active) => active.clone(),
            None => self.delta.per_worker(WorkerCounters::served),
        }
    }

    pub fn accepted(&self) -> u64 {
        self.delta.total(|w| w.accepted)
    }
}

pub fn run(args: FairnessArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| workspace.join("bench/results/fairness.md"));
    let herdsman = if args.no_build {
        tools::default_herdsman(&workspace)
    } else {
        tools::build_herdsman(&workspace)?
    };
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut session = report::Session::new(&args, &herdsman, busy);
    let scratch = ScratchDir::create()?;
    let started = Instant::now();

    let failures = stack::each_mode(&args.modes, scratch.path(), |mode, dir| {
        run_mode(&herdsman, mode, &args, dir, &mut session)
    })?;
    session.failures.extend(failures);
    session.facts.end(started);
    crate::kit::results::write_results(
        "fairness",
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

/// One herdsman in `mode`: the storm, then each count's short and long-lived mix.
fn run_mode(
    herdsman: &Path,
    mode: IntakeMode,
    args: &FairnessArgs,
    dir: &Path,
    session: &mut report::Session,
) -> anyhow::Result<()> {
    let mut stack = Stack::start(herdsman, mode, args.workers, dir)?;
    let record = |run: anyhow::Result<Run>, session: &mut report::Session| match run {
        Ok(run) => {
            eprintln!("{}", report::progress_line(&run));
            session.runs.push(run);
        }
        Err(e) => {
            eprintln!("{}: FAILED: {e:#}", mode.label());
            session
                .failures
                .push((mode.label().to_string(), format!("{e:#}")));
        }
    };
    if args.storm > 0 {
        let run = storm(
            &mut stack,
            mode,
            args.storm,
            Duration::from_micros(args.storm_gap_us),
        );
        record(run, session);
    }
    for &connections in &args.connections {
        for mix in [Mix::Short, Mix::Long] {
            let run = with_clients(&mut stack, mode, mix, connections, args, dir);
            record(run, session);
            stack.check_alive()?;
        }
    }
    Ok(())
}

/// Sequential connect-and-close clients, no request, against an otherwise idle herdsman.
fn storm(
    stack: &mut Stack,
    mode: IntakeMode,
    connections: u32,
    gap: Duration,
) -> anyhow::Result<Run> {
    settle(stack)?;
    let before = workers_api::read_workers(stack.admin_port)?;
    let (mut ok, mut failed, mut first_error) = (0, 0, None);
    for _ in 0..connections {
        match TcpStream::connect((Ipv4Addr::LOCALHOST, stack.port)) {
            Ok(stream) => {
                drop(stream);
                ok += 1;
            }
            Err(e) => {
                failed += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
        std::thread::sleep(gap);
    }
    // Let herdsman take the last connections and its workers fall asleep before reading.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = workers_api::read_workers(stack.admin_port)?;
    while before.delta(&after).total(|w| w.accepted) < ok && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        after = workers_api::read_workers(stack.admin_port)?;
    }
    std::thread::sleep(Duration::from_millis(100));
    let after = workers_api::read_workers(stack.admin_port)?;
    Ok(Run {
        mode,
        mix: "storm",
        connections,
        ok,
        failed,
        first_error,
        delta: before.delta(&after),
        peak_active: Vec::new(),
        all_open_active: None,
    })
}

/// Waits (bounded) until herdsman holds no connection, so one run's leftovers do not count in the
/// next.
fn settle(stack: &mut Stack) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = workers_api::read_workers(stack.admin_port)?;
        if now.total(|w| w.active + w.pending_handoffs) == 0 || Instant::now() >= deadline {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The short or long-lived mix, spread over the client processes.
fn with_clients(
    stack: &mut Stack,
    mode: IntakeMode,
    mix: Mix,
    connections: u32,
    args: &FairnessArgs,
    dir: &Path,
) -> anyhow::Result<Run> {
    settle(stack)?;
    let before = workers_api::read_workers(stack.admin_port)?;
    let processes = args.client_processes.min(connections).max(1);
    let mix_label = match mix {
        Mix::Short => "short",
        Mix::Long => "long",
    };
    let mut clients = Vec::new();
    for (index, share) in split_evenly(connections, processes).into_iter().enumerate() {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg("fairness-client")
            .arg("--port")
            .arg(stack.port.to_string())
            .arg("--mix")
            .arg(mix_label)
            .arg("--connections")
            .arg(share.to_string())
            .arg("--hold-ms")
            .arg(args.hold_ms.to_string());
        let log = dir.join(format!("client-{mix_label}-{connections}-{index}.log"));
        clients.push(Supervised::spawn("fairness-client", command, &log)?);
    }

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut peak_active = vec![0; before.workers.len()];
    let mut all_open_active = None;
    loop {
        let now = workers_api::read_workers(stack.admin_port)?;
        for (peak, worker) in peak_active.iter_mut().zip(&now.workers) {
            *peak = (*peak).max(worker.active);
        }
        if mix == Mix::Long
            && all_open_active.is_none()
            && clients.iter().all(|client| client.said("ready").is_some())
        {
            // Read again now that every client has said so: this poll may predate the last one.
            let open = workers_api::read_workers(stack.admin_port)?;
            all_open_active = Some(open.per_worker(|w| w.active));
        }
        let exited: Vec<Option<String>> = clients.iter_mut().map(|c| c.exit_reason()).collect();
        if exited.iter().all(Option::is_some) {
            break;
        }
        if Instant::now() >= deadline {
            bail!("the clients did not finish within 120 s");
        }
        stack.check_alive()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    settle(stack)?;
    let after = workers_api::read_workers(stack.admin_port)?;

    let (mut ok, mut failed, mut first_error) = (0, 0, None);
    for client in &clients {
        match client.said("done") {
            Some(line) => {
                let (o, f) = client::parse_tally(&line).unwrap_or((0, 0));
                ok += o;
                failed += f;
                if let Some((_, e)) = line.split_once("first-error: ") {
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
            None => {
                failed += 1;
                first_error.get_or_insert_with(|| {
                    format!("a client ended without a tally: {}", client.log_tail(3))
                });
            }
        }
    }
    Ok(Run {
        mode,
        mix: mix_label,
        connections,
        ok,
        failed,
        first_error,
        delta: before.delta(&after),
        peak_active,
        all_open_active,
    })
}
