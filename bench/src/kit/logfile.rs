//! Counting an access log's lines and bytes, as the file stands: how the benchmarks match a log
//! with the requests their clients completed.

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
}
