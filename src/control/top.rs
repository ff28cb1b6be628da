//! `herdsman top`: a running herdsman's workers and servers, in the spirit of `prstat -mL` — CPU
//! and run-queue wait per worker thread, connections, accepts and requests per second; state,
//! requests and errors per second and p99 per server. Every figure is the difference between
//! two samples of the admin API's cumulative counters (`GET /api/workers`, `GET /api/pools`)
//! divided by the wall time between them.
//!
//! This file takes the samples (with `ctl`'s client, options and error messages) and runs the
//! command; `tables` turns two samples into the rows both views show; `screen` is the live
//! terminal view (ratatui), and `--once` prints the same rows as plain text for scripts.

mod screen;
mod tables;

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Deserialize;

use crate::control::ctl::{self, AdminAddress, CtlError, PoolsReply};

pub use tables::{Table, Tables};

/// The shortest `--interval`: shorter spans count too few events for steady rates, and the
/// kernel charges CPU time in ticks (10 ms at the usual 100 Hz).
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The longest `--interval`.
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// `herdsman top [--admin ADDR] [--once] [--interval SECONDS]`.
#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub target: AdminAddress,
    /// Print one interval's figures as plain text and exit, instead of the live view.
    #[arg(long)]
    pub once: bool,
    /// Seconds between samples: the span each figure is measured over, e.g. 0.5.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = parse_interval)]
    pub interval: Duration,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds, e.g. 1 or 0.5"))?;
    let (min, max) = (MIN_INTERVAL.as_secs_f64(), MAX_INTERVAL.as_secs_f64());
    if !(min..=max).contains(&seconds) {
        return Err(format!(
            "{text} s is out of range: use {min} to {max} seconds"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Why `top` stopped short.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// The admin API could not be asked, or refused: `ctl`'s messages.
    #[error(transparent)]
    Admin(#[from] CtlError),
    #[error("the live view needs a terminal; for plain text, use --once")]
    NotATerminal,
    #[error("the terminal: {0}")]
    Terminal(#[from] io::Error),
}

/// Runs `herdsman top` against the admin API at `args.target.admin`, sending `token` if there is
/// one: the live view until a key quits it, or with `--once` one interval printed to stdout.
pub fn run(args: &TopArgs, token: Option<&str>) -> Result<(), TopError> {
    let admin = &args.target.endpoint()?;
    if args.once {
        let text = once(admin, token, args.interval)?;
        // Written, not print!: a reader that stops early (`| head`) is not a crash.
        let _ = io::stdout().write_all(text.as_bytes());
        return Ok(());
    }
    if !io::stdout().is_terminal() {
        return Err(TopError::NotATerminal);
    }
    screen::run(admin, token, args.interval)
}

/// Two samples `interval` apart, as the plain text `--once` prints.
pub fn once(admin: &str, token: Option<&str>, interval: Duration) -> Result<String, CtlError> {
    let earlier = Sample::take(admin, token)?;
    std::thread::sleep(interval.saturating_sub(earlier.taken_at.elapsed()));
    let later = Sample::take(admin, token)?;
    Ok(Tables::between(&earlier, &later).plain_text())
}

/// What the admin API said at one moment: every counter since herdsman started.
#[derive(Debug)]
pub struct Sample {
    /// When it was asked: just before the first of its two requests (each takes a millisecond
    /// or so on loopback, the same in every sample, so the span between samples is right).
    pub taken_at: Instant,
    pub workers: WorkersReply,
    pub pools: PoolsReply,
}

impl Sample {
    pub fn take(admin: &str, token: Option<&str>) -> Result<Sample, CtlError> {
        let taken_at = Instant::now();
        Ok(Sample {
            taken_at,
            workers: ctl::get_json(admin, token, "/api/workers")?,
            pools: ctl::get_json(admin, token, "/api/pools")?,
        })
    }
}

/// `GET /api/workers`, as far as `top` reads it (unknown fields ignored). Its own small types,
/// not `stats::WorkerReport`, because that report's /proc parts (`stats::procfs`) are written,
/// never read back.
#[derive(Debug, Deserialize)]
pub struct WorkersReply {
    /// The process; a different one in the next sample (a binary upgrade) starts from zero.
    pub pid: u32,
    pub intake: String,
    pub workers: Vec<WorkerFigures>,
    /// The network namespace's listen-queue counters; `None` where herdsman cannot read them.
    pub listen_queue: Option<ListenQueueFigures>,
}

/// One worker's counters since start, and its connections now.
#[derive(Debug, Default, Deserialize)]
pub struct WorkerFigures {
    pub worker: usize,
    /// Connections taken from a listening socket.
    pub accepted: u64,
    /// Client connections it owns now.
    pub active: u32,
    /// Requests finished, answered or not.
    pub requests: u64,
    /// Absent from herdsman before it read /proc for CPU: none.
    #[serde(default)]
    pub cpu: CpuFigures,
}

/// A worker thread's CPU time and run-queue wait since it started, in seconds.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct CpuFigures {
    pub user_seconds: f64,
    pub system_seconds: f64,
    /// `None` where the kernel keeps no scheduler statistics.
    pub run_queue_wait_seconds: Option<f64>,
}

/// The kernel's counts of connections lost before accept() (see `stats::procfs`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct ListenQueueFigures {
    pub overflows: u64,
    pub drops: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        top: TopArgs,
    }

    fn parse(args: &[&str]) -> Result<TopArgs, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("top").chain(args.iter().copied()))
            .map(|wrapper| wrapper.top)
    }

    #[test]
    fn options_default_like_ctl() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.target.admin, ctl::DEFAULT_ADMIN);
        assert!(!args.once);
        assert_eq!(args.interval, Duration::from_secs(1));
        let args = parse(&["--once", "--interval", "0.5", "--admin", "10.0.0.1:9"]).unwrap();
        assert!(args.once);
        assert_eq!(args.interval, Duration::from_millis(500));
        assert_eq!(args.target.admin, "10.0.0.1:9");
    }

    #[test]
    fn intervals_are_seconds_in_range() {
        for bad in ["0", "-1", "0.01", "7200", "soon", "NaN", "inf"] {
            let error = parse(&["--interval", bad]).unwrap_err().to_string();
            assert!(error.contains(bad), "{bad}: {error}");
        }
    }
}
