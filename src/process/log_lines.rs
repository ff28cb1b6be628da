//! herdsman's own log (errors and events, on stderr): the subscriber the binary starts, in text or
//! JSON, each line naming the process that wrote it. During a binary upgrade the old and the new
//! process write to the same stderr; without the pid, "stopped" from the old one and "listening"
//! from the new one could not be told apart.

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{LogFormat, LogLevel};

/// Starts the log at `level` (`RUST_LOG`, when set, wins) in `format`, on stderr, colours only on
/// a terminal.
pub fn start(level: LogLevel, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.name()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .event_format(WithPid::text(tracing_subscriber::fmt::format()))
            .init(),
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .event_format(WithPid::json(tracing_subscriber::fmt::format().json()))
            .init(),
    }
}

/// An event format that names the process: `herdsman[PID] ` before a text line, `"pid":PID` as
/// a JSON line's first field. The pid is read once (a process keeps its own).
pub struct WithPid<E> {
    inner: E,
    pid: u32,
    json: bool,
}

impl<E> WithPid<E> {
    /// Before each line of `inner`'s text.
    pub fn text(inner: E) -> WithPid<E> {
        WithPid {
            inner,
            pid: std::process::id(),
            json: false,
        }
    }

    /// Inside each of `inner`'s JSON objects.
    pub fn json(inner: E) -> WithPid<E> {
        WithPid {
            json: true,
            ..WithPid::text(inner)
        }
    }
}

impl<S, N, E> FormatEvent<S, N> for WithPid<E>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    E: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if !self.json {
            write!(writer, "herdsman[{}] ", self.pid)?;
            return self.inner.format_event(ctx, writer, event);
        }
        // The object is made whole first so that the pid can go inside it: a log line is not on
        // the request path (per request, the access log is).
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(fields) => write!(writer, "{{\"pid\":{},{fields}", self.pid),
            None => writer.write_str(&line),
        }
    }
}
