//! HTTP/2 frames as bytes (RFC 9113 §4.1, §6): the numbers the cases speak in, and an encoder
//! that writes whatever a case asks for, valid or not.

/// Frame types (§6, §11.2).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

/// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

/// Error codes (§7).
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const STREAM_CLOSED: u32 = 0x5;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;

/// SETTINGS parameters (§6.5.2).
pub const HEADER_TABLE_SIZE: u16 = 0x1;
pub const ENABLE_PUSH: u16 = 0x2;
pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const MAX_FRAME_SIZE: u16 = 0x5;

/// The largest frame payload a peer may send before SETTINGS_MAX_FRAME_SIZE says otherwise.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 16_384;

/// The client connection preface (§3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One frame as read: its header's fields and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY frame.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            RST_STREAM => 0,
            GOAWAY => 4,
            _ => return None,
        };
        let bytes = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes(bytes.try_into().unwrap()))
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A frame's bytes: header (the length taken from `payload`) and payload.
pub fn encode(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(9 + payload.len());
    bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    bytes.extend_from_slice(&[kind, flags]);
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// A SETTINGS payload of `pairs`.
pub fn settings_payload(pairs: &[(u16, u32)]) -> Vec<u8> {
    pairs
        .iter()
        .flat_map(|(id, value)| {
            let mut pair = id.to_be_bytes().to_vec();
            pair.extend_from_slice(&value.to_be_bytes());
            pair
        })
        .collect()
}

/// A PRIORITY payload (also a HEADERS frame's priority fields): dependency, exclusive flag and
/// weight (the wire's weight, one less than the priority's).
pub fn priority_payload(dependency: u32, exclusive: bool, weight: u8) -> Vec<u8> {
    let mut payload = (dependency | if exclusive { 1 << 31 } else { 0 })
        .to_be_bytes()
        .to_vec();
    payload.push(weight);
    payload
}

/// `content` padded (PADDED flag): its pad length byte in front, `padding` zero bytes after.
pub fn padded(content: &[u8], padding: u8) -> Vec<u8> {
    let mut payload = vec![padding];
    payload.extend_from_slice(content);
    payload.extend(std::iter::repeat_n(0, usize::from(padding)));
    payload
}
