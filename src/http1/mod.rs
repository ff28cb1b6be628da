//! HTTP/1.1 per RFC 9112: request and response heads (parsed with `httparse`, then validated for
//! framing), the chunked body decoder, and the heads herdsman writes when it forwards or answers.
//!
//! Framing is where proxies get smuggled through, so this module refuses ambiguity rather than
//! guessing: a request with both Content-Length and Transfer-Encoding, differing lengths, a
//! coding other than chunked last, or a malformed chunk is an error, never forwarded.

pub mod chunked;
pub mod error_response;
pub mod forward;
pub mod head;
mod tokens;

/// Most header fields accepted in one head; more is answered like an oversized head (431).
pub const MAX_HEADERS: usize = 128;

pub use head::{parse_request, parse_response, Body, HeadError, Method, Request, Response};
