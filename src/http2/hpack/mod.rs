//! HPACK (RFC 7541), the header compression of HTTP/2, for herdsman's own client-side
//! connections: a [`Decoder`] per connection whose dynamic table is stored compactly (one byte
//! buffer and 12 bytes an entry, nothing until the first insertion), and a stateless encoder for
//! responses and for requests to HTTP/2 servers (literals without indexing: no encoder table to
//! keep). It imports nothing from the
//! rest of the crate.
//!
//! `decoder.rs` decodes a block and keeps the table's limits, `table.rs` is the dynamic table,
//! `encoder.rs` writes response fields, `huffman.rs` the Huffman code, `static_table.rs`
//! Appendix A, `primitives.rs` integers and string literals.

mod decoder;
mod encoder;
pub mod huffman;
mod primitives;
mod static_table;
mod table;

pub use decoder::Decoder;
pub use encoder::{
    encode_field, encode_field_huffman, encode_field_never_indexed, encode_indexed, encode_status,
};
// For whoever writes blocks by hand (benchmarks, attack tests): §5.1's integer.
pub use primitives::write_integer;

/// Why a header block cannot be decoded: each is a connection error COMPRESSION_ERROR (RFC 9113
/// §4.3). A plain value — no allocation, no formatting until displayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("index 0")]
    IndexZero,
    #[error("an index beyond the static and dynamic tables")]
    IndexTooLarge,
    #[error("an integer larger than 2^32 - 1")]
    IntegerOverflow,
    #[error("the block ends inside an integer")]
    IntegerTruncated,
    #[error("a string longer than the rest of the block")]
    StringTruncated,
    #[error("the Huffman end-of-string symbol inside a string")]
    HuffmanEos,
    #[error("Huffman padding longer than 7 bits")]
    HuffmanPaddingTooLong,
    #[error("Huffman padding that is not all 1 bits")]
    HuffmanPaddingNotOnes,
    #[error("a dynamic table size update above the maximum in force")]
    SizeUpdateTooLarge,
    #[error("a dynamic table size update after the start of the block")]
    SizeUpdateNotAtStart,
    #[error("more than two dynamic table size updates")]
    TooManySizeUpdates,
    #[error("no dynamic table size update after the table's maximum was lowered")]
    SizeUpdateMissing,
}

/// Why [`Decoder::decode`] stopped: the block's compression, or the caller's own refusal of a
/// field (its callback's error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError<E> {
    #[error("HPACK: {0}")]
    Compression(HpackError),
    #[error("{0}")]
    Field(E),
}

impl<E> From<HpackError> for DecodeError<E> {
    fn from(error: HpackError) -> DecodeError<E> {
        DecodeError::Compression(error)
    }
}

#[cfg(test)]
mod tests;
