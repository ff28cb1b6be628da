//! What an exchange keeps of a request once its head has been consumed: the little the response
//! and the retries need (method, version, framing, upgrade, the pool and server chosen, the
//! timeouts and buffering), copied out of the head while it was at hand.

use crate::config::{Algorithm, ExchangeTimeouts, RouteBuffering};
use crate::http1::{Body, Method};
use crate::upstream::choice::Choice;

/// What is kept of a request once its head has been consumed.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts {
    pub method: Method,
    pub minor_version: u8,
    pub body: Body,
    pub keep_alive: bool,
    /// The client waits for `100 Continue` before it sends the body.
    pub expect_continue: bool,
    /// herdsman sent the client its `100 Continue` (it read the body itself): the server's is
    /// not relayed again.
    pub continue_sent: bool,
    /// The request's Upgrade went on to the server (it offered a protocol its listener allows),
    /// so a 101 may answer it; a 101 to any other request is a bad response.
    pub upgrade: bool,
    /// The pool and server chosen for it, while its head was at hand.
    pub choice: Choice,
    /// Its exchange timeouts: its route's, or `[timeouts]`'s.
    pub timeouts: ExchangeTimeouts,
    /// The buffering its route allows.
    pub buffering: RouteBuffering,
    /// A gRPC call: never buffered, a `grpc-timeout` bounds it (in `timeouts.request`), and
    /// herdsman's own errors reach it as gRPC statuses.
    pub grpc: bool,
    /// It came over TLS: a sticky cookie set in its response is `Secure`.
    pub secure: bool,
    /// The algorithm its answer may be compressed with (`compress::negotiate`): its route
    /// compresses, its client takes one, and nothing about the request rules it out.
    pub compress: Option<Algorithm>,
    /// herdsman answered it itself with this status (a redirect to HTTPS), the response in the
    /// client's scratch space; no pool or server is involved.
    pub answered_here: Option<u16>,
    /// The rule that answered it, for the access log's `rule` field.
    pub rule: Option<super::outcome::Rule>,
}
