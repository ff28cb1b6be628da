//! A worker's side of the access logs: lines written into a buffer per file, owned by the worker
//! (no lock, no system call per request), and handed to the writer whole.

use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::clock::LogClock;
use super::format::{write_combined, write_json, Entry};
use super::writer::{Batch, LogSink};
use crate::config::{AccessLogConfig, AccessLogFormat};

/// A buffer goes to the writer once it holds this much: one `write` per 32 KiB (about 150
/// lines) keeps the writer's system calls few, and a buffer small enough that a worker's
/// outstanding lines stay a small part of its memory.
pub const HAND_OVER_AT: usize = 32 * 1024;

/// Room a buffer starts with: the hand-over size and a long line more, so that it rarely grows.
const BUFFER_CAPACITY: usize = HAND_OVER_AT + 8 * 1024;

/// A worker's flush task hands over what its buffers hold this long after a line went into an
/// empty one, so that a quiet proxy's lines reach the file within a fraction of a second.
pub const FLUSH_AFTER: Duration = Duration::from_millis(100);

/// Lines waiting for the writer, for one file.
struct Pending {
    path: Arc<Path>,
    /// Whole lines; empty with no memory once handed over (the next line takes a new buffer).
    bytes: Vec<u8>,
    lines: u64,
}

/// A worker's access log lines, one buffer per file, and its clock.
pub struct WorkerAccessLog {
    /// `None`: lines are counted nowhere and dropped (a worker without a writer, in tests).
    sink: Option<LogSink>,
    pending: RefCell<Vec<Pending>>,
    clock: RefCell<LogClock>,
    /// A line went into an empty buffer: the flush task starts its wait.
    lines_waiting: Notify,
}

impl WorkerAccessLog {
    pub fn new(sink: Option<LogSink>) -> WorkerAccessLog {
        WorkerAccessLog {
            sink,
            pending: RefCell::new(Vec::new()),
            clock: RefCell::new(LogClock::default()),
            lines_waiting: Notify::new(),
        }
    }

    /// Writes `entry`'s line for the log `log`, and hands the buffer over if that filled it.
    pub fn write(&self, log: &AccessLogConfig, entry: &Entry) {
        let time = self.clock.borrow_mut().now();
        let mut pending = self.pending.borrow_mut();
        // The same Arc in the usual case; comparing paths as bytes, not `Path`'s component by
        // component equality (which parses both paths on every line).
        let same_file = |p: &Pending| {
            Arc::ptr_eq(&p.path, &log.path) || p.path.as_os_str() == log.path.as_os_str()
        };
        let index = match pending.iter().position(same_file) {
            Some(index) => index,
            None => {
                pending.push(Pending {
                    path: Arc::clone(&log.path),
                    bytes: Vec::new(),
                    lines: 0,
                });
                pending.len() - 1
            }
        };
        let buffer = &mut pending[index];
        if buffer.bytes.capacity() == 0 {
            buffer.bytes = Vec::with_capacity(BUFFER_CAPACITY);
        }
        let was_empty = buffer.lines == 0;
        match log.format {
            AccessLogFormat::Combined => write_combined(&mut buffer.bytes, &time, entry),
            AccessLogFormat::Json => write_json(&mut buffer.bytes, &time, entry),
        }
        buffer.lines += 1;
        if buffer.bytes.len() >= HAND_OVER_AT {
            self.hand_over(buffer, false);
        } else if was_empty {
            self.lines_waiting.notify_one();
        }
    }

    /// Completes when a line has gone into an empty buffer since the last call.
    pub async fn lines_waiting(&self) {
        self.lines_waiting.notified().await;
    }

    /// Hands every buffer that holds lines to the writer, without waiting.
    pub fn flush(&self) {
        self.flush_all(false);
    }

    /// Hands every buffer to the writer, waiting for room if it is behind: for a worker that is
    /// stopping, whose lines would otherwise be lost.
    pub fn flush_waiting(&self) {
        self.flush_all(true);
    }

    fn flush_all(&self, wait: bool) {
        let mut pending = self.pending.borrow_mut();
        for buffer in pending.iter_mut() {
            self.hand_over(buffer, wait);
        }
        // Files no longer logged to (a reload changed the path) are forgotten here; the others
        // come back with their next line.
        pending.clear();
    }

    fn hand_over(&self, buffer: &mut Pending, wait: bool) {
        if buffer.lines == 0 {
            return;
        }
        let batch = Batch {
            path: Arc::clone(&buffer.path),
            bytes: std::mem::take(&mut buffer.bytes),
            lines: std::mem::take(&mut buffer.lines),
        };
        let Some(sink) = &self.sink else {
            return;
        };
        if wait {
            sink.hand_over_waiting(batch);
        } else if let Some(refused) = sink.hand_over(batch) {
            // Dropped and counted; the memory serves the next lines.
            buffer.bytes = refused;
        }
    }
}

impl Drop for WorkerAccessLog {
    /// A worker whose event loop panicked loses its connections, not the lines it had written.
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access_log::capture::tests::captured;
    use crate::access_log::writer::{AccessLogWriter, LogFiles};

    #[test]
    fn lines_reach_the_file_when_a_buffer_fills_or_is_flushed() {
        let dir = std::env::temp_dir().join(format!("herdsman-buffers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path: Arc<Path> = Arc::from(dir.join("web.log"));
        let _ = std::fs::remove_file(&path);
        let writer = AccessLogWriter::start(LogFiles::new(), Default::default()).unwrap();
        let log = WorkerAccessLog::new(writer.sink());
        let config = AccessLogConfig {
            path: Arc::clone(&path),
            format: AccessLogFormat::Json,
        };
        let request = captured(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
        let entry = Entry {
            client: b"127.0.0.1",
            request: &request,
            status: Some(204),
            body_bytes: 0,
            pool: Some("app"),
            server: Some("a"),
            upstream: None,
            total: Duration::from_millis(1),
            sticky: false,
            buffered: Default::default(),
            received: 0,
            ended: "done",
            cache: None,
            rule: None,
            request_id: None,
            tls: None,
        };
        // Enough lines to fill a buffer at least once, then a partial one.
        let lines = HAND_OVER_AT / 150 + 40;
        for _ in 0..lines {
            log.write(&config, &entry);
        }
        log.flush_waiting();
        drop(log);
        writer.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), lines);
        for line in text.lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(value["status"], 204);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
