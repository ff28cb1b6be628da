//! The machine's own business between runs: its CPUs' busy time (/proc/stat), and waiting for it
//! to go quiet before a measured run — dirty pages written out and the CPUs idle — so that no run
//! inherits the previous one's work (nginx buffering uploads to disk leaves gigabytes for the
//! kernel to write back, and in a rotation of three sides each always follows the same one).

use std::time::{Duration, Instant};

/// Under this share of all CPUs busy over a sample, the machine is quiet.
const QUIET_SHARE: f64 = 0.10;

/// The sample the share is measured over.
const SAMPLE: Duration = Duration::from_millis(200);

/// Writes dirty pages out (sync(2)), then waits until the CPUs are quiet over a sample, for at
/// most `most`. Returns how long it took, and whether the machine went quiet within it.
pub fn settle(most: Duration) -> (Duration, bool) {
    let start = Instant::now();
    // SAFETY: sync has no preconditions; it returns once the writeback it starts is done.
    unsafe { libc::sync() };
    loop {
        let Some(before) = machine_jiffies() else {
            return (start.elapsed(), false);
        };
        std::thread::sleep(SAMPLE);
        let quiet = machine_jiffies().is_some_and(|after| busy_share(before, after) < QUIET_SHARE);
        if quiet || start.elapsed() >= most {
            return (start.elapsed(), quiet);
        }
    }
}

/// The share of the CPUs busy between two readings of [`machine_jiffies`].
fn busy_share((all_before, busy_before): (u64, u64), (all, busy): (u64, u64)) -> f64 {
    let all = all.saturating_sub(all_before);
    let busy = busy.saturating_sub(busy_before);
    if all == 0 {
        return 1.0;
    }
    busy as f64 / all as f64
}

/// (all, busy) jiffies summed over the CPUs, from /proc/stat.
pub fn machine_jiffies() -> Option<(u64, u64)> {
    parse_cpu_line(std::fs::read_to_string("/proc/stat").ok()?.lines().next()?)
}

/// (all, busy) from the `cpu` line of /proc/stat: busy is all but idle and iowait. Guest time is
/// already counted in user time, so it is left out of both.
fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let fields: Vec<u64> = line
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let all: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4)?;
    Some((all, all - idle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_is_all_but_idle_and_iowait() {
        let line = "cpu  100 5 50 800 20 3 2 0 7 0";
        assert_eq!(parse_cpu_line(line), Some((980, 160)));
        assert_eq!(parse_cpu_line("cpu0 1 2 3 4 5"), None);
    }

    #[test]
    fn the_share_is_of_the_time_between_readings() {
        assert_eq!(busy_share((1000, 100), (2000, 150)), 0.05);
        assert_eq!(busy_share((1000, 100), (1000, 100)), 1.0);
    }
}
