//! herdsman's HTTP/2 conformance suite: raw frames sent to herdsman over real sockets, and the
//! exact answer RFC 9113 (HTTP/2) and RFC 7541 (HPACK) require checked — the connection error
//! and its code, the stream error and its code and stream, or the response the server gave.
//! The cases follow the sections of the RFCs (as h2spec's do: its `http2`, `hpack` and `generic`
//! groups, and more of §8), one module a group of sections; each runs over h2c and over TLS
//! (`kit::cases!`). Run: `cargo test --test h2_conformance` (or a section: `... s8_3`).

#[path = "../common/mod.rs"]
mod common;
mod kit;

mod continuation;
mod data;
mod flow_control;
mod frames;
mod goaway;
mod headers;
mod hpack;
mod http_semantics;
mod ping;
mod preface;
mod priority;
mod rst_stream;
mod settings;
mod streams;
