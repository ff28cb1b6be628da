//! Shared integration-test infrastructure: programmable mock servers, a raw HTTP/1.1 connection
//! (used by both the test clients and the mocks), and helpers that start herdsman in-process or
//! as the binary. Every socket read is bounded by a timeout so a proxy bug fails, never hangs.
//!
//! One module a job: `heads` (reading heads and responses), `raw` (the connection), `sync`
//! (latches and polling), `mock` (backends), `one_at_a_time` (a server like gunicorn's sync workers), `body` (deterministic content), `h2` (HTTP/2 clients: curl and raw frames), `h2_stream` (an HTTP/2 stream held in flight), `start` (herdsman in
//! this process), `binary` (the herdsman binary), `pools` (what the tests of pools share), `tls` (a test CA, certificates and a TLS client) and `pebble` (Let's Encrypt's test CA, started by a test); all
//! re-exported here, so a test writes `use common::*;`.
#![allow(dead_code)]

mod binary;
mod body;
mod h2;
mod h2_stream;
mod heads;
mod mock;
mod one_at_a_time;
mod pebble;
mod pools;
mod raw;
mod start;
mod sync;
mod tls;

use std::time::Duration;

// Each test binary uses some of these and `dead_code` is allowed above; a re-export it does
// not use would be reported as an unused import.
#[allow(unused_imports)]
pub use self::{
    binary::*, body::*, h2::*, h2_stream::*, heads::*, mock::*, one_at_a_time::*, pebble::*,
    pools::*, raw::*, start::*, sync::*, tls::*,
};

/// Every read and write a test makes gives up after this long.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
