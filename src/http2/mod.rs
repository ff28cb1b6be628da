//! HTTP/2 messages and herdsman's HTTP/1.1 bytes (RFC 9113 §8): the exchange speaks HTTP/1.1
//! bytes on both sides, and this room maps between them and HTTP/2's heads, DATA and trailers.
//! On the client side (`session::h2`), a stream's request head is written in HTTP/1.1 form
//! (`request_head`) and the exchange's response read back into HTTP/2 pieces (`response`). On
//! the server side (`servers`), the exchange's request read into HTTP/2 pieces and the server's
//! response written back as HTTP/1.1 bytes, over connections each worker multiplexes.

pub mod body;
// HPACK (RFC 7541) for herdsman's own HTTP/2 connections: compact decoder table, stateless encoder.
pub mod hpack;
// The frames on the wire; public for the fuzz targets (fuzz/), as the two below.
pub mod frame;
pub mod request_head;
pub mod response;
pub mod servers;
