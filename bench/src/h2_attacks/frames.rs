//! The attacks' frames, written by hand (an attacker does not use a library that behaves): each
//! attack is the bytes that open its connection and the frames it then sends one after another.

/// The client's preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types (RFC 9113 §6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// The name of an HTTP/2 error code (RFC 9113 §7).
pub fn code_name(code: u32) -> String {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    NAMES
        .get(code as usize)
        .map_or_else(|| format!("0x{code:x}"), |name| (*name).to_string())
}

/// One frame's bytes.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    bytes.push(kind);
    bytes.push(flags);
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// An HPACK integer (RFC 7541 §5.1): `value` with an `n`-bit prefix, `flags` in the first byte's
/// other bits.
pub fn hpack_int(flags: u8, n: u32, value: usize, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// The HPACK block of `GET path` for the attack's host, `attack` (which herdsman routes to the
/// attack's own backend): static-table fields and literals without indexing.
pub fn get_block(method: u8, path: &str) -> Vec<u8> {
    let mut block = vec![method, 0x86];
    block.push(0x04);
    hpack_int(0, 7, path.len(), &mut block);
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 6]);
    block.extend_from_slice(b"attack");
    block
}

/// `:method GET` and `POST` (static-table indices).
pub const GET: u8 = 0x82;
pub const POST: u8 = 0x83;

/// A frame as the proxy sent it.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub payload: Vec<u8>,
}

impl Frame {
    /// A GOAWAY's error code, or a RST_STREAM's.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            GOAWAY => 4,
            RST_STREAM => 0,
            _ => return None,
        };
        let code = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes(code.try_into().ok()?))
    }
}

/// Splits `bytes` into the frames they hold whole; returns how many bytes those took.
pub fn parse_frames(bytes: &[u8], into: &mut Vec<Frame>) -> usize {
    let mut at = 0;
    while bytes.len() - at >= 9 {
        let head = &bytes[at..at + 9];
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        if bytes.len() - at - 9 < length {
            break;
        }
        into.push(Frame {
            kind: head[3],
            payload: bytes[at + 9..at + 9 + length].to_vec(),
        });
        at += 9 + length;
    }
    at
}

/// How many frames `bytes` (whole frames) hold.
pub fn count_frames(bytes: &[u8]) -> usize {
    let mut frames = Vec::new();
    parse_frames(bytes, &mut frames);
    frames.len()
}
