//! How an exchange went, as far as the counters and the access log need it.

use std::time::Duration;

use tokio::time::Instant;

use crate::access_log::Buffered;
use crate::stats::traffic::Ending;
use crate::upstream::{Pool, Server, Snapshot};

/// How an exchange went, as far as the counters and the access log need it.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// When its first bytes were at hand.
    pub started: Instant,
    /// A request head began to arrive (else the client only closed the connection).
    pub request: bool,
    /// The pool the request was routed to, and the server that answered it or was last tried
    /// (indexes into the snapshot).
    pub pool: Option<usize>,
    pub server: Option<usize>,
    pub ending: Ending,
    /// The response head reached the client.
    pub response_started: bool,
    /// From sending the request to a server until the response head arrived (the server's
    /// time, with connecting; over all attempts).
    pub upstream: Option<Duration>,
    /// Body bytes sent to the client.
    pub body_bytes: u64,
    /// The request named its server with a sticky cookie, or the response gave it one.
    pub sticky: bool,
    /// Which bodies went through `[buffering]`.
    pub buffered: Buffered,
}

impl Outcome {
    pub(super) fn new() -> Outcome {
        Outcome {
            started: Instant::now(),
            request: true,
            pool: None,
            server: None,
            ending: Ending::Unanswered,
            response_started: false,
            upstream: None,
            body_bytes: 0,
            sticky: false,
            buffered: Buffered::default(),
        }
    }

    /// The pool and the server it names, in `snapshot` (the one the exchange ran on).
    pub fn routed<'s>(&self, snapshot: &'s Snapshot) -> (Option<&'s Pool>, Option<&'s Server>) {
        let pool = self.pool.map(|index| &snapshot.pools[index]);
        let server = pool
            .zip(self.server)
            .map(|(pool, index)| &pool.servers[index]);
        (pool, server)
    }
}
