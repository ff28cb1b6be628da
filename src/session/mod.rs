//! One client connection's protocol, from its first byte to its close: the TLS handshake on a
//! TLS listener (`handshake`) and HTTP/1 (`h1`). The worker hands each connection here; the
//! exchanges it carries are the proxy's (a 101's tunnel too, as the end of its exchange).

mod connection;
mod h1;
pub mod h2;
mod handshake;

pub use h1::{serve, PARK_AFTER};
