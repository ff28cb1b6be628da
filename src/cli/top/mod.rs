//! `herdsman top`: a running herdsman's workers and servers, in the spirit of `prstat -mL` — CPU
//! and run-queue wait per worker thread, connections, accepts and requests per second; state,
//! requests and errors per second and p99 per server. Every figure is the difference between
//! two samples of the admin API's cumulative counters (`GET /api/workers`, `GET /api/pools`)
//! divided by the wall time between them.
//!
//! This file runs the command; `sample` takes the samples (with `ctl`'s client, options and error
//! messages); `tables` turns two samples into the rows both views show; `screen` is the live
//! terminal view (ratatui), and `--once` prints the same rows as plain text for scripts.

mod sample;
mod screen;
mod tables;

use std::io::{self, IsTerminal, Write};
use std::time::Duration;

use clap::Args;

use crate::cli::ctl::client::{AdminAddress, CtlError};
use sample::Sample;
use tables::Tables;

pub use screen::TopError;

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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::ctl::client::DEFAULT_ADMIN;
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
        assert_eq!(args.target.admin, DEFAULT_ADMIN);
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
