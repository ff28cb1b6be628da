//! herdsman: a load-balancing HTTP/1.1 reverse proxy.
//!
//! # Layout
//!
//! The design of record, with the import rule between these modules, is `ARCHITECTURE.md`.
//!
//! - [`config`]: TOML → raw serde structs → validated, immutable [`Config`].
//! - [`access_log`]: a line per request, per listener, formatted into per-worker buffers and
//!   written by one thread that reopens the files on SIGUSR1.
//! - [`server`]: the running proxy: binds listeners, starts workers, stops them gracefully.
//! - [`admin`]: the admin listener (`/api/workers`, `/api/pools`, `/api/reload`, `/metrics`, the
//!   stats page) on its own thread: connections, routes, whom it answers, the pool routes.
//! - [`process`]: the process's life seen from outside: signals, systemd notifications, the
//!   binary upgrade, the drain of a process that stops or handed over, the kernel's listen-queue
//!   losses.
//! - [`acme`]: certificates herdsman obtains and renews itself (RFC 8555), a thread of its own
//!   beside the workers that orders, stores and installs them.
//! - [`discovery`]: pools that follow the fleet (DNS, Consul): what a source's answers add up
//!   to, beside the health checks.
//! - [`health_check`]: the active health checks, a thread beside the workers that probes servers
//!   and reports to the registry.
//! - [`worker`]: one OS thread with a current-thread tokio runtime; owns its connections from
//!   accept to close, parks the quiet ones, runs the request path's housekeeping.
//! - [`intake`]: listening sockets, the accept loop (which hands each connection to the worker's
//!   dispatch) and the hand-off between workers.
//! - [`session`]: one client connection's protocol: HTTP/1 (`h1`), bytes both ways after a 101.
//! - [`proxy`]: one exchange: read and check a head, route, pick, forward (again where the replay
//!   rules allow), answer.
//! - [`rules`]: the operator's rules on a request beyond its host and path (a route's `when`),
//!   beside the exchange, which calls in.
//! - [`cache`]: the shared cache of responses (RFC 9111): what may be stored and for how long,
//!   and the process's store, beside the exchange.
//! - [`rate_limit`]: limits on requests per client, field, cookie or route (GCRA in a table
//!   every worker shares without a lock, or in Redis for several instances), beside the
//!   exchange, which asks it once per request.
//! - [`compress`]: answers compressed (zstd, brotli, gzip) by the client's `Accept-Encoding`,
//!   streamed and flushed per piece, beside the exchange.
//! - [`http1`]: request/response heads (httparse), body framing, header rewriting, the body relay
//!   (RFC 9112).
//! - [`transport`]: the byte stream a connection runs on (an enum of transports), buffers and
//!   their free lists, server connections that reset when abandoned.
//! - [`upstream`]: pools of servers, the published snapshot, the choice of pool and server
//!   (routes, test tokens, signed sticky cookies, balancing, consistent hashing), idle
//!   connections, and the registry of pools changed at run time and by reload
//!   (`upstream::registry`).
//! - [`stats`]: per-worker counters and loads, and what /proc says about the threads.
//! - [`demo`]: the embedded demo (three backends in-process) behind `herdsman demo`.
//!
//! `herdsman ctl` and `herdsman top` are the binary's (`src/cli/`), not the library's: they
//! reach a running herdsman through its admin API, as any client would.
//!
//! Request path rule: nothing a worker does per request takes a lock shared with other workers.
//! Shared facts are either immutable snapshots or single atomics (see `upstream::balance`).

pub mod access_log;
pub mod acme;
pub mod admin;
pub mod cache;
pub mod compress;
pub mod config;
pub mod demo;
pub mod discovery;
pub mod health_check;
pub mod http1;
pub mod http2;
pub mod intake;
pub mod process;
pub mod proxy;
pub mod rate_limit;
pub mod rules;
pub mod server;
pub mod session;
pub mod stats;
pub mod transport;
pub mod upstream;
pub mod worker;

pub use config::Config;
pub use server::{Server, StartError};
