//! HTTP/1.1 per RFC 9112: request and response heads (parsed with `httparse`, then validated for
//! framing), the chunked body decoder, the heads herdsman writes when it forwards or answers, and
//! the protocols a request's Upgrade may carry on to a server.
//!
//! Framing is where proxies get smuggled through, so this module refuses ambiguity rather than
//! guessing: a request with both Content-Length and Transfer-Encoding, differing lengths, a
//! coding other than chunked, or a malformed chunk is an error, never forwarded; a repeated
//! Content-Length, an absolute-form target and a trailer field that must not be one are
//! rewritten to the one form every server reads alike.

pub mod chunked;
pub mod error_response;
pub mod forward;
pub mod head;
pub mod keep_alive;
pub mod relay;
mod tokens;
pub mod upgrade;

/// Most header fields accepted in one head; more is answered like an oversized head (431).
pub const MAX_HEADERS: usize = 128;

/// Room for a head's fields, left uninitialised: httparse writes only the fields it finds, so a
/// parse does not first zero 4 KiB of slots (about 250 instructions a head, measured with
/// callgrind in bench/results/optimisation.md).
pub type HeaderSlots<'b> = [std::mem::MaybeUninit<httparse::Header<'b>>; MAX_HEADERS];

/// Fresh, uninitialised `HeaderSlots`.
pub fn header_slots<'b>() -> HeaderSlots<'b> {
    [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS]
}

pub use head::{
    parse_request, parse_response, Body, GrpcCall, HeadError, Method, Request, Response,
};
