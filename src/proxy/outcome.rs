//! How an exchange went, as far as the counters and the access log need it.

use std::time::Duration;

use crate::transport::Moment;

use super::failure::Failure;
use crate::access_log::Buffered;
use crate::stats::cache::CacheOutcome;
use crate::stats::traffic::Ending;
use crate::upstream::{Pool, Server, Snapshot};

/// How an exchange went, as far as the counters and the access log need it.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// When its first bytes were at hand.
    pub started: Moment,
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
    /// Which bodies went through `[buffering]`, and which of those reached a temporary file.
    pub buffered: Buffered,
    /// Request body bytes received from the client (after a 101: through the tunnel).
    pub received: u64,
    /// How it ended, as the access log says it: `done`, a failure's word, or a tunnel's end.
    pub ended: &'static str,
    /// What the cache did, for a pool that caches.
    pub cache: Option<CacheOutcome>,
    /// The rule that answered the request instead of a server, if one did.
    pub rule: Option<Rule>,
}

/// A rule that answers a request instead of a server, as the access log's `rule` field names
/// it. One byte in what an exchange keeps (a `&str` cost every request 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A rate limit's 429.
    RateLimit,
    /// A route's `[route.redirect]`.
    Redirect,
    /// A route's `[route.respond]`.
    Respond,
    /// A listener's or route's `access` refused the client (403, or closed).
    Deny,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::RateLimit => "rate_limit",
            Rule::Redirect => "redirect",
            Rule::Respond => "respond",
            Rule::Deny => "deny",
        }
    }
}

impl Outcome {
    pub(super) fn new() -> Outcome {
        Outcome {
            started: Moment::now(),
            request: true,
            pool: None,
            server: None,
            ending: Ending::Unanswered,
            response_started: false,
            upstream: None,
            body_bytes: 0,
            sticky: false,
            buffered: Buffered::default(),
            received: 0,
            ended: "done",
            cache: None,
            rule: None,
        }
    }

    /// It failed with `failure`; `mid_body`: while the request body was still coming. An
    /// access rule's refusal is the rule's answer (`rule=deny`).
    pub(super) fn failed(&mut self, failure: Failure, mid_body: bool) {
        self.ended = failure.ended(mid_body, self.response_started);
        if matches!(failure, Failure::Forbidden | Failure::Refused) {
            self.rule = Some(Rule::Deny);
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
