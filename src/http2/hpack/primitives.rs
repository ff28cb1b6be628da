//! HPACK's primitive types (RFC 7541 §5): integers with an N-bit prefix, read and written, and
//! string literals read off a header block (the decoder turns Huffman ones into bytes).

use super::HpackError;

/// The largest integer read: 2^32 - 1. Every HPACK integer is an index, a length or a table
/// size, none of which can meaningfully pass it, and the bound keeps the arithmetic in a u64.
const LARGEST: u64 = u32::MAX as u64;

/// A header block being read, front to back.
pub(super) struct Reader<'a> {
    block: &'a [u8],
    at: usize,
}

/// A string literal as the block holds it (§5.2).
pub(super) struct RawString<'a> {
    pub huffman: bool,
    pub bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(block: &'a [u8]) -> Reader<'a> {
        Reader { block, at: 0 }
    }

    /// The next byte, not taken.
    pub fn peek(&self) -> Option<u8> {
        self.block.get(self.at).copied()
    }

    /// An integer whose first byte (present: the caller peeked it) has a `prefix_bits`-bit
    /// prefix (§5.1). Continuation bytes past what 32 bits need, even zeros, are refused: a
    /// block could otherwise pad an integer without end.
    pub fn integer(&mut self, prefix_bits: u32) -> Result<usize, HpackError> {
        let all_ones = u8::MAX >> (8 - prefix_bits);
        let prefix = self.block[self.at] & all_ones;
        self.at += 1;
        if prefix < all_ones {
            return Ok(usize::from(prefix));
        }
        let mut value = u64::from(all_ones);
        let mut shift = 0;
        loop {
            let &byte = self
                .block
                .get(self.at)
                .ok_or(HpackError::IntegerTruncated)?;
            self.at += 1;
            value += u64::from(byte & 0x7f) << shift;
            if value > LARGEST {
                return Err(HpackError::IntegerOverflow);
            }
            if byte & 0x80 == 0 {
                return Ok(value as usize);
            }
            shift += 7;
            if shift > 28 {
                return Err(HpackError::IntegerOverflow);
            }
        }
    }

    /// A string literal: the H bit, a 7-bit-prefix length, then that many bytes.
    pub fn string(&mut self) -> Result<RawString<'a>, HpackError> {
        let first = self.peek().ok_or(HpackError::StringTruncated)?;
        let length = self.integer(7)?;
        let bytes = self
            .block
            .get(self.at..)
            .and_then(|rest| rest.get(..length))
            .ok_or(HpackError::StringTruncated)?;
        self.at += length;
        Ok(RawString {
            huffman: first & 0x80 != 0,
            bytes,
        })
    }
}

/// Appends `value` as an integer with a `prefix_bits`-bit prefix, the bits above the prefix in
/// the first byte set to `flags` (§5.1).
pub fn write_integer(out: &mut Vec<u8>, flags: u8, prefix_bits: u32, value: usize) {
    let all_ones = (1usize << prefix_bits) - 1;
    if value < all_ones {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | all_ones as u8);
    let mut rest = value - all_ones;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8], prefix_bits: u32) -> Result<(usize, usize), HpackError> {
        let mut reader = Reader::new(bytes);
        reader.integer(prefix_bits).map(|value| (value, reader.at))
    }

    #[test]
    fn the_integers_of_appendix_c1_and_their_limits() {
        // C.1.1 to C.1.3: 10 and 1337 on 5 bits, 42 on 8, each read to its last byte.
        assert_eq!(read(&[0xea], 5), Ok((10, 1)));
        assert_eq!(read(&[0x1f, 0x9a, 0x0a], 5), Ok((1337, 3)));
        assert_eq!(read(&[42], 8), Ok((42, 1)));
        let mut out = Vec::new();
        write_integer(&mut out, 0xe0, 5, 1337);
        assert_eq!(out, [0xff, 0x9a, 0x0a]);
        // The largest value, written and read back; one more overflows.
        for prefix_bits in 1..=8 {
            for value in [
                0,
                1,
                30,
                31,
                127,
                128,
                255,
                16_383,
                16_384,
                u32::MAX as usize,
            ] {
                let mut out = Vec::new();
                write_integer(&mut out, 0, prefix_bits, value);
                assert_eq!(read(&out, prefix_bits), Ok((value, out.len())), "{value}");
            }
        }
        // 2^32 - 1 on 5 bits is 31 + 0xffffffe0: continuation bytes e0 ff ff ff 0f.
        assert_eq!(
            read(&[0x1f, 0xe0, 0xff, 0xff, 0xff, 0x0f], 5),
            Ok((u32::MAX as usize, 6))
        );
        assert_eq!(
            read(&[0x1f, 0xe1, 0xff, 0xff, 0xff, 0x0f], 5),
            Err(HpackError::IntegerOverflow)
        );
        // Zero continuation bytes past 32 bits' worth: refused, not read forever.
        assert_eq!(
            read(&[0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00], 5),
            Err(HpackError::IntegerOverflow)
        );
        assert_eq!(read(&[0x1f], 5), Err(HpackError::IntegerTruncated));
        assert_eq!(read(&[0x1f, 0x9a], 5), Err(HpackError::IntegerTruncated));
    }

    #[test]
    fn a_string_longer_than_the_block_is_truncated() {
        assert!(matches!(
            Reader::new(&[0x03, b'a', b'b']).string(),
            Err(HpackError::StringTruncated)
        ));
        assert!(matches!(
            Reader::new(&[0x7f]).string(),
            Err(HpackError::IntegerTruncated)
        ));
        let string = Reader::new(&[0x82, 0x64, 0x02, 0xff]).string().unwrap();
        assert!(string.huffman);
        assert_eq!(string.bytes, [0x64, 0x02]);
    }
}
