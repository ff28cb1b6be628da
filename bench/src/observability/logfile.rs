//! The access log's side of a run: how many lines and bytes herdsman wrote while wrk ran, and
//! whether every request wrk completed has its line.
//!
//! Counted from the file itself: once before the wrk run (after the warm-up's lines have been
//! flushed, herdsman then being idle) and once after herdsman has stopped gracefully (when every
//! buffered line is written); the run's lines are the difference.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

use anyhow::Context;

/// Lines and bytes in an access log file at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogCount {
    pub lines: u64,
    pub bytes: u64,
}

impl LogCount {
    /// Counts the complete lines of `path` (every line herdsman writes ends with `\n`); a file
    /// that does not exist yet has none.
    pub fn of(path: &Path) -> anyhow::Result<LogCount> {
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(LogCount::default()),
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        let mut count = LogCount::default();
        // A run writes tens of MB: counted in chunks, not read whole.
        let mut chunk = vec![0u8; 1 << 16];
        loop {
            let read = file
                .read(&mut chunk)
                .with_context(|| format!("reading {}", path.display()))?;
            if read == 0 {
                return Ok(count);
            }
            count.bytes += read as u64;
            count.lines += chunk[..read].iter().filter(|&&b| b == b'\n').count() as u64;
        }
    }

    /// What was written between `earlier` and this count.
    pub fn since(self, earlier: LogCount) -> LogCount {
        LogCount {
            lines: self.lines.saturating_sub(earlier.lines),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

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
    fn lines_and_bytes_are_counted_and_a_missing_file_has_none() {
        let dir = std::env::temp_dir().join(format!("obs-logfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        assert_eq!(LogCount::of(&path).unwrap(), LogCount::default());
        let line = "127.0.0.1 - - [x] \"GET / HTTP/1.1\" 200 19 \"-\" \"-\"\n";
        std::fs::write(&path, line.repeat(70_000)).unwrap();
        let count = LogCount::of(&path).unwrap();
        assert_eq!(count.lines, 70_000);
        assert_eq!(count.bytes, 70_000 * line.len() as u64);
        let earlier = LogCount {
            lines: 1000,
            bytes: 1000 * line.len() as u64,
        };
        assert_eq!(count.since(earlier).lines, 69_000);
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
