//! HPACK (RFC 7541) for the cases: a field-block builder that writes each representation on
//! request (and bytes no encoder would write), and a decoder for herdsman's responses that keeps
//! the connection's dynamic table as herdsman's encoder fills it.

use std::collections::VecDeque;

use super::huffman;

/// The static table (Appendix A), index 1 first.
pub const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Static-table indexes the cases name.
pub const METHOD_GET: usize = 2;
pub const PATH_ROOT: usize = 4;
pub const SCHEME_HTTP: usize = 6;

/// The representations of §6, by the first byte's pattern and its integer's prefix bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Literal {
    /// §6.2.1: with incremental indexing (`01`, 6-bit index).
    Indexed,
    /// §6.2.2: without indexing (`0000`, 4-bit index).
    WithoutIndexing,
    /// §6.2.3: never indexed (`0001`, 4-bit index).
    NeverIndexed,
}

impl Literal {
    fn pattern(self) -> (u8, u8) {
        match self {
            Literal::Indexed => (0x40, 6),
            Literal::WithoutIndexing => (0x00, 4),
            Literal::NeverIndexed => (0x10, 4),
        }
    }
}

/// A field block, written one representation at a time.
#[derive(Debug, Clone, Default)]
pub struct Block {
    pub bytes: Vec<u8>,
}

impl Block {
    pub fn new() -> Block {
        Block::default()
    }

    /// The pseudo-header fields of a request for `path` with `method`, `:scheme http` and
    /// `:authority` (the names indexed, the values literal, nothing added to the table).
    pub fn request(method: &str, path: &str) -> Block {
        Block::new()
            .field(":method", method)
            .field(":scheme", "http")
            .field(":path", path)
            .field(":authority", "conformance.test")
    }

    /// GET `path`.
    pub fn get(path: &str) -> Block {
        Block::request("GET", path)
    }

    /// §6.1: an indexed field.
    pub fn indexed(mut self, index: usize) -> Block {
        integer(&mut self.bytes, 0x80, 7, index);
        self
    }

    /// `name: value` without indexing, the name indexed when the static table has it: the
    /// plain way to say a field.
    pub fn field(self, name: &str, value: &str) -> Block {
        match static_name(name) {
            Some(index) => self.literal_name(Literal::WithoutIndexing, index, value, false),
            None => self.literal(Literal::WithoutIndexing, name, value, false),
        }
    }

    /// A literal field with an indexed name (§6.2): `index` names it.
    pub fn literal_name(
        mut self,
        kind: Literal,
        index: usize,
        value: &str,
        huffman: bool,
    ) -> Block {
        let (pattern, bits) = kind.pattern();
        integer(&mut self.bytes, pattern, bits, index);
        string(&mut self.bytes, value.as_bytes(), huffman);
        self
    }

    /// A literal field with a literal name (§6.2, index 0).
    pub fn literal(mut self, kind: Literal, name: &str, value: &str, huffman: bool) -> Block {
        let (pattern, bits) = kind.pattern();
        integer(&mut self.bytes, pattern, bits, 0);
        string(&mut self.bytes, name.as_bytes(), huffman);
        string(&mut self.bytes, value.as_bytes(), huffman);
        self
    }

    /// A literal field without indexing whose name and value are raw bytes, valid or not.
    pub fn literal_bytes(mut self, name: &[u8], value: &[u8]) -> Block {
        self.bytes.push(0x00);
        string(&mut self.bytes, name, false);
        string(&mut self.bytes, value, false);
        self
    }

    /// §6.3: a dynamic table size update.
    pub fn size_update(mut self, size: usize) -> Block {
        integer(&mut self.bytes, 0x20, 5, size);
        self
    }

    /// Bytes as they are.
    pub fn raw(mut self, bytes: &[u8]) -> Block {
        self.bytes.extend_from_slice(bytes);
        self
    }

    /// A size update in front of what is written so far.
    pub fn after_size_update(self, size: usize) -> Block {
        let mut front = Block::new().size_update(size);
        front.bytes.extend_from_slice(&self.bytes);
        front
    }
}

/// The static-table index naming `name`, if any.
fn static_name(name: &str) -> Option<usize> {
    STATIC_TABLE
        .iter()
        .position(|(n, _)| *n == name)
        .map(|i| i + 1)
}

/// §5.1: `value` with an `bits`-bit prefix, the rest of the first byte `pattern`.
pub fn integer(out: &mut Vec<u8>, pattern: u8, bits: u8, value: usize) {
    let max = (1usize << bits) - 1;
    if value < max {
        out.push(pattern | value as u8);
        return;
    }
    out.push(pattern | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// §5.2: a string literal, Huffman-coded or not.
pub fn string(out: &mut Vec<u8>, text: &[u8], huffman: bool) {
    if huffman {
        let coded = huffman::encode(text);
        integer(out, 0x80, 7, coded.len());
        out.extend_from_slice(&coded);
    } else {
        integer(out, 0x00, 7, text.len());
        out.extend_from_slice(text);
    }
}

/// Decodes herdsman's field blocks, keeping the dynamic table within the client's
/// SETTINGS_HEADER_TABLE_SIZE (4,096 octets unless the client's SETTINGS said otherwise).
pub struct Decoder {
    table: VecDeque<(String, String)>,
    size: usize,
    /// The table's size, as herdsman's last size update set it.
    max: usize,
    /// What the client allows (its SETTINGS_HEADER_TABLE_SIZE).
    limit: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max: 4096,
            limit: 4096,
        }
    }
}

impl Decoder {
    /// The client's SETTINGS_HEADER_TABLE_SIZE is `limit`: herdsman's encoder may keep no more.
    pub fn allow(&mut self, limit: usize) {
        self.limit = limit;
        self.max = self.max.min(limit);
        self.evict(0);
    }

    /// The fields of `block`; panics (failing the case) on bytes herdsman should not have sent.
    pub fn decode(&mut self, block: &[u8]) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        let mut at = 0;
        while at < block.len() {
            let first = block[at];
            if first & 0x80 != 0 {
                let index = read_integer(block, &mut at, 7);
                fields.push(self.entry(index));
            } else if first & 0xe0 == 0x20 {
                self.max = read_integer(block, &mut at, 5);
                assert!(
                    self.max <= self.limit,
                    "herdsman's table size update to {} is above the client's {}",
                    self.max,
                    self.limit
                );
                self.evict(0);
            } else {
                let (bits, indexing) = if first & 0xc0 == 0x40 {
                    (6, true)
                } else {
                    (4, false)
                };
                let index = read_integer(block, &mut at, bits);
                let name = match index {
                    0 => read_string(block, &mut at),
                    index => self.entry(index).0,
                };
                let value = read_string(block, &mut at);
                if indexing {
                    self.insert(name.clone(), value.clone());
                }
                fields.push((name, value));
            }
        }
        fields
    }

    fn entry(&self, index: usize) -> (String, String) {
        match index {
            1..=61 => {
                let (name, value) = STATIC_TABLE[index - 1];
                (name.to_string(), value.to_string())
            }
            _ => {
                self.table.get(index - 62).cloned().unwrap_or_else(|| {
                    panic!("herdsman sent HPACK index {index}, not in its table")
                })
            }
        }
    }

    fn insert(&mut self, name: String, value: String) {
        let size = 32 + name.len() + value.len();
        self.evict(size);
        if size <= self.max {
            self.size += size;
            self.table.push_front((name, value));
        }
    }

    /// Evicts entries until `room` more octets fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some((name, value)) = self.table.pop_back() else {
                break;
            };
            self.size -= 32 + name.len() + value.len();
        }
    }
}

fn read_integer(block: &[u8], at: &mut usize, bits: u8) -> usize {
    let max = (1usize << bits) - 1;
    let mut value = usize::from(block[*at]) & max;
    *at += 1;
    if value < max {
        return value;
    }
    let mut shift = 0;
    loop {
        let byte = block[*at];
        *at += 1;
        value += usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return value;
        }
    }
}

fn read_string(block: &[u8], at: &mut usize) -> String {
    let coded = block[*at] & 0x80 != 0;
    let length = read_integer(block, at, 7);
    let bytes = &block[*at..*at + length];
    *at += length;
    let text = if coded {
        huffman::decode(bytes).expect("herdsman's Huffman code decodes")
    } else {
        bytes.to_vec()
    };
    String::from_utf8(text).expect("herdsman's fields are text")
}
