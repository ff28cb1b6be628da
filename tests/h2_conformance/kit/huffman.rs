//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B), from its code lengths alone: the code is
//! canonical (codes of one length are consecutive, in symbol order, and shorter codes come
//! first), so the lengths give every code, and a decoder needs no tree.

/// Bits in each symbol's code, for bytes 0 to 255 (Appendix B); the end-of-string symbol, 256,
/// takes [`EOS_BITS`].
const LENGTHS: [u8; 256] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0..
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 16..
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, // 32..
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, // 48..
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, // 64..
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, // 80..
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, // 96..
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, // 112..
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 128..
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 144..
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 160..
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 176..
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 192..
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 208..
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 224..
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 240..
];

/// The end-of-string symbol's length: its code is thirty 1 bits.
const EOS_BITS: u8 = 30;

/// Every symbol's (code, length), the end-of-string symbol last.
fn codes() -> Vec<(u32, u8)> {
    let mut order: Vec<usize> = (0..=256).collect();
    let length = |symbol: usize| LENGTHS.get(symbol).copied().unwrap_or(EOS_BITS);
    order.sort_by_key(|&symbol| (length(symbol), symbol));
    let mut codes = vec![(0, 0); 257];
    let (mut code, mut previous) = (0u32, length(order[0]));
    for (i, &symbol) in order.iter().enumerate() {
        if i > 0 {
            code = (code + 1) << (length(symbol) - previous);
        }
        previous = length(symbol);
        codes[symbol] = (code, previous);
    }
    codes
}

/// `text` Huffman-coded, the last byte padded with the most significant bits of EOS (1 bits).
pub fn encode(text: &[u8]) -> Vec<u8> {
    let codes = codes();
    let mut bits = Bits::default();
    for &byte in text {
        let (code, length) = codes[usize::from(byte)];
        bits.push(code, length);
    }
    bits.finish(true)
}

/// `symbols` (256 is EOS) coded, then padded with `pad_ones` 1 bits and zero bits to the byte
/// boundary: for the decoding errors §5.2 names.
pub fn encode_raw(symbols: &[usize], pad_ones: u8) -> Vec<u8> {
    let codes = codes();
    let mut bits = Bits::default();
    for &symbol in symbols {
        let (code, length) = codes[symbol];
        bits.push(code, length);
    }
    for _ in 0..pad_ones {
        bits.push(1, 1);
    }
    bits.finish(false)
}

/// Decodes a Huffman-coded string; `None` for what §5.2 calls a decoding error (EOS in the
/// string, padding longer than 7 bits or not the most significant bits of EOS).
pub fn decode(bytes: &[u8]) -> Option<Vec<u8>> {
    let codes = codes();
    let mut out = Vec::new();
    let (mut code, mut length) = (0u32, 0u8);
    for byte in bytes {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            length += 1;
            if let Some(symbol) = codes.iter().position(|&c| c == (code, length)) {
                if symbol == 256 {
                    return None;
                }
                out.push(symbol as u8);
                (code, length) = (0, 0);
            } else if length >= EOS_BITS {
                return None;
            }
        }
    }
    // What is left must be padding: fewer than 8 bits, all 1.
    (length < 8 && code == (1 << length) - 1).then_some(out)
}

/// Bits written most significant first.
#[derive(Default)]
struct Bits {
    bytes: Vec<u8>,
    current: u8,
    used: u8,
}

impl Bits {
    fn push(&mut self, code: u32, length: u8) {
        for shift in (0..length).rev() {
            self.current = (self.current << 1) | ((code >> shift) & 1) as u8;
            self.used += 1;
            if self.used == 8 {
                self.bytes.push(self.current);
                (self.current, self.used) = (0, 0);
            }
        }
    }

    /// The bytes, the last filled with 1 bits (`ones`) or 0 bits.
    fn finish(mut self, ones: bool) -> Vec<u8> {
        if self.used > 0 {
            let free = 8 - self.used;
            let fill = if ones { (1u8 << free) - 1 } else { 0 };
            self.bytes.push((self.current << free) | fill);
        }
        self.bytes
    }
}

#[test]
fn the_code_matches_the_examples_of_appendix_c() {
    // C.4.1 and C.4.3: "www.example.com" and "custom-value".
    let www = [
        0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
    ];
    assert_eq!(encode(b"www.example.com"), www);
    assert_eq!(decode(&www).as_deref(), Some(&b"www.example.com"[..]));
    let custom = [0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf];
    assert_eq!(encode(b"custom-value"), custom);
    assert_eq!(decode(&encode_raw(&[256], 0)), None, "EOS is an error");
}
