//! What a server behind the proxies has accepted and answered, read from the server itself at
//! `STATUS_PATH` on its own port: nginx's `stub_status` text, which herdsman-bench's own backend
//! answers in the same shape (its counters are here too). Counted at the server, the connections a
//! proxy opened are the same figure whichever proxy opened them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;

use crate::kit::admin_api;

/// The path both servers answer with their counts (nginx: `location = … { stub_status; }`).
pub const STATUS_PATH: &str = "/__bench/status";

/// One reading of a server's totals since it started. Each reading counts itself: its own
/// connection among `accepted` and its own request among `requests`, as nginx's stub_status does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerCounts {
    /// Connections the server has accepted.
    pub accepted: u64,
    /// Requests the server has answered (nginx: read).
    pub requests: u64,
}

/// What a server accepted and answered between two readings, neither reading's own connection
/// and request counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Between {
    pub accepted: u64,
    pub requests: u64,
}

impl ServerCounts {
    /// What the server accepted and answered after `earlier` up to this reading; this reading's
    /// own connection and request are taken off (`earlier`'s are already in it).
    pub fn since(self, earlier: ServerCounts) -> Between {
        Between {
            accepted: self.accepted.saturating_sub(earlier.accepted + 1),
            requests: self.requests.saturating_sub(earlier.requests + 1),
        }
    }
}

/// Reads the counts of the server on 127.0.0.1:`port`, on a connection of its own.
pub fn read(port: u16) -> anyhow::Result<ServerCounts> {
    let body = admin_api::get(port, STATUS_PATH)
        .with_context(|| format!("reading the counts of the server on port {port}"))?;
    parse(&String::from_utf8_lossy(&body))
}

/// Reads stub_status's text: the three numbers (accepts, handled, requests) on the line after
/// `server accepts handled requests`.
pub fn parse(text: &str) -> anyhow::Result<ServerCounts> {
    let numbers: Vec<u64> = text
        .lines()
        .skip_while(|line| line.trim() != "server accepts handled requests")
        .nth(1)
        .with_context(|| format!("no `server accepts handled requests` line in {text:?}"))?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("the counts in {text:?}"))?;
    match numbers[..] {
        [accepted, _handled, requests] => Ok(ServerCounts { accepted, requests }),
        _ => anyhow::bail!("expected three counts in {text:?}"),
    }
}

/// The own backend's counters, shared by its connections. Relaxed atomics: each is a count read
/// on its own (by the status answer, or by `gray` from another thread of its process), and the
/// backend runs on one thread.
#[derive(Debug, Default)]
pub struct Counters {
    accepted: AtomicU64,
    requests: AtomicU64,
    open: AtomicU64,
}

impl Counters {
    /// A connection was accepted; it counts as open until the guard returned is dropped.
    pub fn accepted(self: &Arc<Self>) -> OpenConnection {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(Arc::clone(self))
    }

    /// `count` more requests were answered.
    pub fn answered(&self, count: u64) {
        self.requests.fetch_add(count, Ordering::Relaxed);
    }

    /// Requests answered (or, for a late answer, under way) so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The counts as nginx's stub_status writes them (reading, writing and waiting are not kept).
    pub fn status_text(&self) -> String {
        let accepted = self.accepted.load(Ordering::Relaxed);
        format!(
            "Active connections: {} \nserver accepts handled requests\n {accepted} {accepted} {} \n\
             Reading: 0 Writing: 0 Waiting: 0 \n",
            self.open.load(Ordering::Relaxed),
            self.requests.load(Ordering::Relaxed)
        )
    }
}

/// An open connection of the own backend, with the counters it adds to: no longer counted as
/// open once dropped.
pub struct OpenConnection(Arc<Counters>);

impl OpenConnection {
    pub fn counters(&self) -> &Counters {
        &self.0
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nginx 1.22's stub_status, as nginx-light answers it.
    const NGINX: &str = "Active connections: 291 \nserver accepts handled requests\n \
                         16630948 16630948 31070465 \nReading: 6 Writing: 179 Waiting: 106 \n";

    #[test]
    fn nginx_stub_status_is_read() {
        assert_eq!(
            parse(NGINX).unwrap(),
            ServerCounts {
                accepted: 16_630_948,
                requests: 31_070_465
            }
        );
        assert!(parse("Active connections: 1\n").is_err());
        assert!(parse("server accepts handled requests\n 1 2\n").is_err());
    }

    #[test]
    fn the_own_backend_answers_in_the_same_shape() {
        let counters = Arc::new(Counters::default());
        let first = counters.accepted();
        let second = counters.accepted();
        counters.answered(5);
        drop(first);
        let text = counters.status_text();
        assert!(text.starts_with("Active connections: 1 \n"), "{text}");
        assert_eq!(
            parse(&text).unwrap(),
            ServerCounts {
                accepted: 2,
                requests: 5
            }
        );
        drop(second);
    }

    #[test]
    fn a_reading_does_not_count_itself() {
        let before = ServerCounts {
            accepted: 10,
            requests: 100,
        };
        // Three connections and 50 requests from the load, then the second reading's own.
        let after = ServerCounts {
            accepted: 14,
            requests: 151,
        };
        assert_eq!(
            after.since(before),
            Between {
                accepted: 3,
                requests: 50
            }
        );
        assert_eq!(before.since(before), Between::default());
    }
}
