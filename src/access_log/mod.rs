//! Access logs: a line per request, per listener that has `access_log`, in nginx's `combined`
//! format (with herdsman's fields after it) or as JSON, written without a lock, an allocation or
//! a system call per request, and reopened by path on SIGUSR1.
//!
//! The path of a line:
//!
//! 1. `capture` — while a request head is parsed (`proxy::exchange::read_request`), and only on a
//!    listener with a log, its method, target, version, Host, Referer and User-Agent are copied
//!    into the connection's [`CapturedRequest`]: the head leaves the read buffer before the
//!    response comes back.
//! 2. `format` — when the exchange ends, the worker writes the line into its own buffer for that
//!    file ([`WorkerAccessLog`]), with the time from a per-worker clock that formats the date once
//!    a second (`clock`).
//! 3. `buffers` — a buffer goes to the writer when it holds [`HAND_OVER_AT`] bytes, or when the
//!    worker's flush task finds it [`FLUSH_AFTER`] after its first line, over a bounded channel
//!    that a worker never waits on: when the writer is [`MOST_OUTSTANDING`] buffers behind, the
//!    lines are dropped and counted, and the writer warns about them at most once a second.
//! 4. `writer` — one thread for the process, `herdsman-log`, owns the files and writes each
//!    buffer with one `write`. SIGUSR1 has it open every file again by path between two buffers,
//!    so each line lands once, in the old file or the new one.

mod buffers;
mod capture;
mod clock;
mod format;
mod writer;

pub use buffers::{WorkerAccessLog, FLUSH_AFTER, HAND_OVER_AT};
pub use capture::CapturedRequest;
pub use clock::LogTime;
pub use format::{Buffered, Entry, Tls};
pub use writer::{AccessLogWriter, LogFiles, LogSink, MOST_OUTSTANDING};
