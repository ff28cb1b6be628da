//! The progress line the benchmarks print on stderr after each run: which run of how many, and
//! about how long the rest will take, estimated from how long the runs so far took against their
//! plan.

use std::time::{Duration, Instant};

/// Runs planned and done. Each run has a planned cost in seconds (its wrk duration plus its
/// set-up); the time left is the planned cost still to come, scaled by how the real time so far
/// compares with the plan so far.
pub struct Progress {
    started: Instant,
    runs_total: usize,
    runs_done: usize,
    planned_total: f64,
    planned_done: f64,
}

impl Progress {
    /// `plan`: the planned seconds of every run to come.
    pub fn new(plan: impl IntoIterator<Item = f64>) -> Progress {
        let plan: Vec<f64> = plan.into_iter().collect();
        Progress {
            started: Instant::now(),
            runs_total: plan.len(),
            runs_done: 0,
            planned_total: plan.iter().sum(),
            planned_done: 0.0,
        }
    }

    /// Counts a run of `planned` seconds as done and returns "run k of n, ~ETA left".
    pub fn step(&mut self, planned: f64) -> String {
        self.runs_done += 1;
        self.planned_done += planned;
        let left = time_left(
            self.started.elapsed(),
            self.planned_done,
            self.planned_total,
        );
        format!(
            "run {} of {}, ~{} left",
            self.runs_done,
            self.runs_total,
            short_duration(left)
        )
    }

    /// Counts a run of `planned` seconds as done and says so on stderr: "[run k of n, ~ETA left]
    /// WHICH: WHAT" (which run, what it measured).
    pub fn report(&mut self, planned: f64, which: &str, what: &str) {
        eprintln!("[{}] {which}: {what}", self.step(planned));
    }

    /// Counts a run that will not happen (its target failed): it is no longer to come.
    pub fn skip(&mut self, planned: f64) {
        self.runs_total = self.runs_total.saturating_sub(1);
        self.planned_total -= planned;
    }
}

/// The real time still to come if the rest runs at the pace the runs so far kept against their
/// plan.
fn time_left(elapsed: Duration, planned_done: f64, planned_total: f64) -> Duration {
    if planned_done <= 0.0 {
        return Duration::from_secs_f64(planned_total.max(0.0));
    }
    let pace = elapsed.as_secs_f64() / planned_done;
    Duration::from_secs_f64(((planned_total - planned_done) * pace).max(0.0))
}

/// "45s", "3m05s", "1h02m".
fn short_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        0..=59 => format!("{seconds}s"),
        60..=3599 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_follows_the_pace_so_far() {
        // Half the plan done in twice the planned time: the other half takes twice as long too.
        let left = time_left(Duration::from_secs(20), 10.0, 20.0);
        assert_eq!(left, Duration::from_secs(20));
        assert_eq!(
            time_left(Duration::ZERO, 0.0, 30.0),
            Duration::from_secs(30)
        );
        assert_eq!(
            time_left(Duration::from_secs(5), 10.0, 10.0),
            Duration::ZERO
        );
    }

    #[test]
    fn runs_are_counted_and_skipped() {
        let mut progress = Progress::new([1.0, 1.0, 1.0]);
        assert!(progress.step(1.0).starts_with("run 1 of 3, ~"));
        progress.skip(1.0);
        assert!(progress.step(1.0).starts_with("run 2 of 2, ~0s left"));
    }

    #[test]
    fn durations_read_short() {
        assert_eq!(short_duration(Duration::from_secs(45)), "45s");
        assert_eq!(short_duration(Duration::from_secs(185)), "3m05s");
        assert_eq!(short_duration(Duration::from_secs(3720)), "1h02m");
    }
}
