//! Fuzzes the HPACK decoder (`http2::hpack`) over a connection's blocks: the table never passes
//! its maximum and its memory after `shrink_to_fit` is exactly its bytes and records; a decoder
//! shrunk before each block decodes it alike; every field decoded, written again by the
//! stateless encoder, decodes (by a fresh decoder) to the same bytes.
//!
//! Input: a byte for the initial maximum (× 32), then blocks, each a length byte and its bytes;
//! a length of 255 is instead a new acknowledged maximum (the next byte × 32).
#![no_main]

use herdsman::http2::hpack::{self, DecodeError, Decoder};
use libfuzzer_sys::fuzz_target;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn decode(decoder: &mut Decoder, block: &[u8]) -> (Result<(), DecodeError<()>>, Fields) {
    let mut fields = Vec::new();
    let result = decoder.decode(block, &mut Vec::new(), |name, value| {
        fields.push((name.to_vec(), value.to_vec()));
        Ok(())
    });
    (result, fields)
}

/// The table's bytes and records, as `heap_bytes` must count them once shrunk.
fn exact_heap(decoder: &Decoder) -> usize {
    decoder
        .table_entries()
        .map(|(name, value)| name.len() + value.len() + 12)
        .sum()
}

fuzz_target!(|input: &[u8]| {
    let Some((&first, mut rest)) = input.split_first() else {
        return;
    };
    let mut max = usize::from(first) * 32;
    let mut decoder = Decoder::new(max);
    while let Some((&length, tail)) = rest.split_first() {
        if length == 255 {
            let Some((&setting, tail)) = tail.split_first() else {
                return;
            };
            max = usize::from(setting) * 32;
            decoder.set_max_table_size(max);
            rest = tail;
            continue;
        }
        let (block, next) = tail.split_at(usize::from(length).min(tail.len()));
        rest = next;

        let mut shrunk = decoder.clone();
        shrunk.shrink_to_fit();
        assert_eq!(shrunk.heap_bytes(), exact_heap(&shrunk));
        let (result, fields) = decode(&mut decoder, block);
        assert_eq!(decode(&mut shrunk, block), (result.clone(), fields.clone()));
        assert!(decoder.table_entries().eq(shrunk.table_entries()));

        let size: usize = decoder
            .table_entries()
            .map(|(name, value)| name.len() + value.len() + 32)
            .sum();
        assert_eq!(decoder.table_size(), size);
        assert!(size <= decoder.table_limit() && decoder.table_limit() <= max);
        if result.is_err() {
            // A compression error ends the connection: its decoder is done.
            return;
        }

        // HTTP/2 names are lowercase (the encoder asserts it): others the caller refuses.
        let fields: Fields = fields
            .into_iter()
            .filter(|(name, _)| !name.iter().any(u8::is_ascii_uppercase))
            .collect();
        let mut again = Vec::new();
        for (i, (name, value)) in fields.iter().enumerate() {
            match i % 3 {
                0 => hpack::encode_field(&mut again, name, value),
                1 => hpack::encode_field_never_indexed(&mut again, name, value),
                _ => hpack::encode_field_huffman(&mut again, name, value),
            }
        }
        let mut fresh = Decoder::new(0);
        assert_eq!(decode(&mut fresh, &again), (Ok(()), fields));
        assert_eq!(fresh.heap_bytes(), 0);
    }
});
