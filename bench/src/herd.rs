//! `herdsman-bench herd`: the 1999 Linux accept() "thundering herd" experiment on today's kernel,
//! without herdsman. M threads wait on 127.0.0.1 in each of four ways, a client connects K times one
//! at a time, and the table says what each connection cost the waiters (threads × method, as the
//! 1999 report's did).
//!
//! Layout:
//! - `waiters` — the four ways of waiting, the per-thread counters, and a bounded shutdown
//! - `tasks`   — the waiters' context switches, CPU time and sleep state from /proc/self/task
//! - `measure` — one run: warm-up, K connections from an idle herd, figures
//! - `report`  — the tables, the results file and the plot

mod measure;
mod report;
mod tasks;
mod waiters;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::quiet::machine_jiffies;
use crate::kit::{environment, procstat, tools};
use report::Session;
use tasks::CpuSource;
use waiters::Method;

/// Options of `herd`.
#[derive(Debug, clap::Args)]
pub struct HerdArgs {
    /// Numbers of waiting threads, comma-separated; each is a run per method.
    #[arg(long, value_delimiter = ',', default_value = "100,200,400,600,800,1000",
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub threads: Vec<u32>,
    /// Ways of waiting, comma-separated, in the order they run at each thread count.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "accept,epoll,epoll-exclusive,reuseport"
    )]
    pub methods: Vec<Method>,
    /// Connections counted per run (after 5 uncounted warm-up ones).
    #[arg(long, default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub connections: u32,
    /// Cap on connections × threads per run, so that large herds get fewer connections (the
    /// herd's cost grows with both); 0: no cap. The default keeps the default run near a minute.
    #[arg(long, default_value_t = 400_000)]
    pub budget: u64,
    /// Rounds; each runs every (threads, method) once, and the tables show the median and spread.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// The results file; the plot goes beside it with a .png extension.
    /// Default: bench/results/herd.md in the workspace.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Connections for a run of `threads` waiters: `requested`, cut so that connections × threads
/// stays within `budget` (0: no cap), but never below 100 connections (or `requested` if fewer).
pub fn connections_for(threads: u32, requested: u32, budget: u64) -> u32 {
    if budget == 0 {
        return requested;
    }
    let capped = (budget / u64::from(threads.max(1))).min(u64::from(requested)) as u32;
    capped.max(requested.min(100))
}

pub fn run(args: HerdArgs) -> anyhow::Result<()> {
    let out = match &args.out {
        Some(out) => out.clone(),
        None => tools::workspace_root()?.join("bench/results/herd.md"),
    };
    let largest = args.threads.iter().copied().max().unwrap_or(0) as usize;
    check_descriptor_room(&args.methods, largest)?;
    let cpu_source = CpuSource::detect();

    let busy = environment::busy_share(Duration::from_secs(1));
    if let Some(busy) = busy.filter(|&b| b > 0.10) {
        eprintln!(
            "note: {:.0}% of the CPUs were busy with other work before the start",
            busy * 100.0
        );
    }
    let mut session = Session::new(&args, cpu_source, busy);

    let total = args.rounds as usize * args.threads.len() * args.methods.len();
    let started = Instant::now();
    let other_work = OtherWork::start();
    let mut done = 0;
    for round in 1..=args.rounds {
        for &threads in &args.threads {
            let connections = connections_for(threads, args.connections, args.budget);
            for &method in &args.methods {
                done += 1;
                let label = method.label();
                let prefix = format!(
                    "[{done:>2}/{total}] round {round}, {label:<15} {threads:>4} threads, \
                     {connections} connections:"
                );
                match measure::run(
                    method,
                    threads as usize,
                    connections as usize,
                    round,
                    cpu_source,
                ) {
                    Ok(figures) => {
                        eprintln!("{prefix} {}", report::progress_line(&figures));
                        session.runs.push(figures);
                    }
                    Err(e) => {
                        eprintln!("{prefix} FAILED: {e:#}");
                        session.failures.push(report::Failure {
                            method,
                            threads: threads as usize,
                            round,
                            error: format!("{e:#}"),
                        });
                    }
                }
            }
        }
    }
    session.elapsed = started.elapsed();
    session.busy_during = other_work.and_then(|w| w.share());
    if let Some(busy) = session.busy_during.filter(|&b| b > 0.10) {
        eprintln!(
            "note: other processes kept {:.0}% of the CPUs busy during the runs; CPU and settle \
             times are noisier than context-switch counts",
            busy * 100.0
        );
    }

    print!("{}", session.tables_text());
    let plot = out.with_extension("png");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let plotted = report::plot(&session, &plot);
    if let Err(e) = &plotted {
        eprintln!("herd: no plot: {e:#}");
    }
    let markdown = session.render(plotted.is_ok().then_some(plot.as_path()));
    std::fs::write(&out, markdown).with_context(|| format!("writing {}", out.display()))?;
    eprintln!(
        "wrote {}{} in {:.0} s",
        out.display(),
        if plotted.is_ok() {
            format!(" and {}", plot.display())
        } else {
            String::new()
        },
        session.elapsed.as_secs_f64()
    );
    if session.runs.is_empty() {
        bail!("every run failed");
    }
    Ok(())
}

/// Fails early, with the figures, when the largest herd would not fit under the open-file limit.
fn check_descriptor_room(methods: &[Method], threads: usize) -> anyhow::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: passes a live rlimit for the kernel to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Ok(()); // unknown: let the run say what failed
    }
    // Per thread: its stat file; per method: its sockets and epolls; and a margin for the client,
    // stdio and /proc reads.
    let needed = methods
        .iter()
        .map(|m| m.descriptors(threads) + threads + 64)
        .max()
        .unwrap_or(0);
    if needed as u64 > limit.rlim_cur {
        bail!(
            "{threads} threads need about {needed} open files, over this process's limit of {}; \
             use fewer --threads",
            limit.rlim_cur
        );
    }
    Ok(())
}

/// The share of all CPUs that other processes kept busy over an interval: the machine's busy
/// time (/proc/stat) minus this process's own CPU time, over the machine's total. It says how far
/// to trust this run's CPU and settle times.
struct OtherWork {
    machine: (u64, u64),
    own: Duration,
}

impl OtherWork {
    fn start() -> Option<OtherWork> {
        Some(OtherWork {
            machine: machine_jiffies()?,
            own: procstat::tree_cpu_time(std::process::id()).ok()?,
        })
    }

    fn share(&self) -> Option<f64> {
        let (total, busy) = machine_jiffies()?;
        let own = procstat::tree_cpu_time(std::process::id()).ok()? - self.own;
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let total = total.checked_sub(self.machine.0)? as f64 / ticks;
        let busy = busy.checked_sub(self.machine.1)? as f64 / ticks;
        (total > 0.0).then(|| ((busy - own.as_secs_f64()) / total).clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_herds_get_fewer_connections_within_the_budget() {
        assert_eq!(connections_for(100, 1000, 400_000), 1000);
        assert_eq!(connections_for(400, 1000, 400_000), 1000);
        assert_eq!(connections_for(800, 1000, 400_000), 500);
        assert_eq!(connections_for(1000, 1000, 400_000), 400);
        assert_eq!(connections_for(5000, 1000, 400_000), 100);
        assert_eq!(connections_for(5000, 50, 400_000), 50);
        assert_eq!(connections_for(1000, 1000, 0), 1000);
    }
}
