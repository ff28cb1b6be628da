//! The legitimate clients: h2load (nghttp2's) with 50 HTTP/2 connections, one request in flight on
//! each, for a fixed time, every request's status and time written to its log file; the
//! requests/s and p99 are computed here from that log (h2load's own summary has no percentiles).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::kit::process::run_with_timeout;
use crate::kit::stats::percentile_of;

/// What the legitimate clients got over one period.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Legit {
    /// Requests answered 2xx.
    pub answered: u64,
    /// Requests that failed or were answered otherwise.
    pub failed: u64,
    pub per_second: f64,
    /// The 99th percentile of the answered requests' times, milliseconds.
    pub p99_ms: f64,
}

/// Runs h2load with `clients` connections against 127.0.0.1:`port` for `seconds`, its log in
/// `log`.
pub fn run(
    h2load: &Path,
    port: u16,
    clients: u32,
    seconds: u32,
    log: &Path,
) -> anyhow::Result<Legit> {
    // h2load appends to its log: each period starts from none.
    match std::fs::remove_file(log) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", log.display()))
        }
        _ => {}
    }
    let mut command = Command::new(h2load);
    command
        .arg(format!("-c{clients}"))
        .args(["-t1", "-m1"])
        .arg(format!("-D{seconds}"))
        .arg(format!("--log-file={}", log.display()))
        .arg(format!("http://127.0.0.1:{port}/"));
    let limit = Duration::from_secs(u64::from(seconds) + 30);
    let output = run_with_timeout(command, limit)?;
    if !output.status.success() {
        bail!(
            "h2load failed ({}): {} {}",
            output.status,
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    parse_log(&text, f64::from(seconds))
}

/// Reads h2load's log: per request, tab-separated, its start (µs since the epoch), its status
/// (-1 for a failed stream) and its time (µs).
fn parse_log(text: &str, seconds: f64) -> anyhow::Result<Legit> {
    let mut times = Vec::new();
    let mut failed = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let columns: Vec<&str> = line.split('\t').collect();
        let (Some(status), Some(micros)) = (columns.get(1), columns.get(2)) else {
            bail!("an h2load log line without status and time: {line:?}");
        };
        let status: i64 = status
            .trim()
            .parse()
            .with_context(|| format!("status in {line:?}"))?;
        let micros: f64 = micros
            .trim()
            .parse()
            .with_context(|| format!("time in {line:?}"))?;
        if (200..300).contains(&status) {
            times.push(micros / 1000.0);
        } else {
            failed += 1;
        }
    }
    if times.is_empty() {
        bail!("h2load answered no request ({failed} failed)");
    }
    Ok(Legit {
        answered: times.len() as u64,
        failed,
        per_second: times.len() as f64 / seconds,
        p99_ms: percentile_of(&times, 99.0).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_gives_the_rate_and_p99_of_the_answered() {
        let mut log = String::new();
        for i in 1..=100 {
            log.push_str(&format!("1700000000000000\t200\t{}\n", i * 1000));
        }
        log.push_str("1700000000000000\t-1\t5000000\n");
        let legit = parse_log(&log, 2.0).unwrap();
        assert_eq!((legit.answered, legit.failed), (100, 1));
        assert_eq!(legit.per_second, 50.0);
        assert!((99.0..=100.0).contains(&legit.p99_ms), "{}", legit.p99_ms);
    }
}
