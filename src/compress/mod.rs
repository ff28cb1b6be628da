//! Response compression, a room beside the cache: which algorithm a request's client takes
//! (`negotiate.rs`: `Accept-Encoding` with its q-values against the route's order), whether an
//! answer is compressed and how its head changes (`decide.rs`), the encoders (`encoder.rs`:
//! zstd, brotli, gzip, each flushed at every piece so a stream's events leave at once) and the
//! writer that sits between the body relay and the client (`sink.rs`: the compressed bytes
//! framed as chunks). Only `proxy/` calls it; it imports `config`, `http1` and `stats`.
//!
//! Request bodies are never decompressed or compressed: only answers are.

pub mod decide;
pub mod encoder;
pub mod negotiate;
pub mod sink;

pub use decide::{answer_compression, Compressing};
pub use encoder::Encoder;
pub use negotiate::{negotiate, Offered};
pub use sink::CompressingSink;
