//! One exchange: read and check a request head, route it, pick a server, forward the request
//! (again, where that is safe), and answer the client — with the server's response or with an
//! error of herdsman's. The session that runs the connection calls [`serve_one`] per request.
//!
//! A request is either forwarded whole or answered by herdsman with an error. When it may go
//! again after a failure is a property of the failure and of what reached the server
//! (`replay.rs`).

mod answered_here;
mod attempt;
mod background;
mod cached;
mod client;
mod compressed;
mod context;
mod downstream;
mod exchange;
mod facts;
mod failure;
mod header_rules;
mod hit;
mod outcome;
mod replay;
mod request_body;
mod respond;
mod server_connection;
mod spooled;
mod tunnel;

pub use client::Client;
pub use context::{ProcessShared, ProxyContext};
pub use downstream::{BodySource, Downstream};
pub use exchange::serve_one;
pub use failure::Failure;
pub use outcome::{Outcome, Rule};

use crate::transport::Stream;

/// What happens to the client connection after an exchange.
#[derive(Debug)]
pub enum Next {
    KeepAlive,
    /// Close after the answer. `linger`: the client may still be sending (a next request it
    /// meant to send on a connection it asked to keep, a body not read to its end), so the close
    /// first reads and discards for a moment, lest unread bytes make the kernel reset the
    /// connection under the answer in flight. Otherwise, as nginx decides for its lingering
    /// close, nothing more can come and the connection closes at once: no shutdown, no wait for
    /// the client's FIN, no read of it.
    Close {
        linger: bool,
    },
    /// Close with a reset, dropping what the kernel still holds for the client (one too slow
    /// for its answer).
    Reset,
}

/// How an exchange left the connection, for [`serve_one`]: its next step, or, after a 101, a
/// tunnel to run first (whose end the access log line waits for).
enum Exchanged {
    Next(Next),
    /// The server switched protocols: bytes go both ways between the client and this server
    /// connection from now on.
    Switched(Stream),
}

impl From<Next> for Exchanged {
    fn from(next: Next) -> Exchanged {
        Exchanged::Next(next)
    }
}
