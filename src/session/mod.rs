//! One client connection's protocol, from its first byte to its close: the TLS handshake on a
//! TLS listener (`handshake`), HTTP/1 (`h1`), and the bytes both ways that follow a switch of
//! protocols (`pipe`). The worker hands each
//! connection here; the exchanges it carries are the proxy's.

mod connection;
mod h1;
mod handshake;
mod pipe;

pub use h1::{serve, PARK_AFTER};
