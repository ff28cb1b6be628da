//! The access log's side of a run: how many lines and bytes herdsman wrote while wrk ran, and
//! whether every request wrk completed has its line.
//!
//! Counted from the file itself: once before the wrk run (after the warm-up's lines have been
//! flushed, herdsman then being idle) and once after herdsman has stopped gracefully (when every
//! buffered line is written); the run's lines are the difference.

use crate::kit::logfile::LogCount;

/// The access log against wrk in one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogTally {
    /// Lines and bytes written during the wrk run (and its end, up to herdsman's stop).
    pub written: LogCount,
    /// Requests wrk completed.
    pub requests: u64,
    /// Requests that may have been in flight when wrk stopped: one per connection. herdsman
    /// logs them (it answered; wrk had gone), wrk does not count them.
    pub in_flight: u64,
}

impl LogTally {
    /// Lines minus requests: 0 to `in_flight` when every completed request has its line.
    pub fn difference(&self) -> i64 {
        self.written.lines as i64 - self.requests as i64
    }

    /// True when every request wrk completed has its line, and there is no line beyond those of
    /// the requests still in flight at the end.
    pub fn matched(&self) -> bool {
        (0..=self.in_flight as i64).contains(&self.difference())
    }

    /// Bytes of log per line (per request logged).
    pub fn bytes_per_line(&self) -> f64 {
        self.written.bytes as f64 / self.written.lines.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_requests_in_flight_may_add_lines() {
        let tally = |lines| LogTally {
            written: LogCount {
                lines,
                bytes: lines * 100,
            },
            requests: 1000,
            in_flight: 50,
        };
        assert!(tally(1000).matched());
        assert!(tally(1050).matched());
        assert!(!tally(1051).matched());
        assert!(!tally(999).matched(), "a lost line");
        assert_eq!(tally(999).difference(), -1);
        assert_eq!(tally(1050).bytes_per_line(), 100.0);
    }
}
