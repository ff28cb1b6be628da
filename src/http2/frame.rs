//! HTTP/2's frames on the wire (RFC 9113 §4 and §6): the 9-byte header, the types, flags, error
//! codes and settings, and the writers of every frame herdsman sends a client. Each writer
//! appends to the connection's outgoing bytes, so that all the frames one turn makes go out in
//! one write.

/// Bytes of a frame header (§4.1).
pub const HEADER_LEN: usize = 9;

/// The connection preface a client starts with (§3.4), before its first SETTINGS.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The smallest SETTINGS_MAX_FRAME_SIZE and the largest (§6.5.2).
pub const MIN_MAX_FRAME_SIZE: u32 = 1 << 14;
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;

/// The largest flow-control window (§6.9.1), and the one every window starts with (§6.9.2).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
pub const DEFAULT_WINDOW: u32 = 65_535;

/// Frame types (§6).
pub mod kind {
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
}

/// Frame flags (§6).
pub mod flag {
    /// DATA and HEADERS: the sender's last frame on the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS and PING: an acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS and CONTINUATION: the field block is whole.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA and HEADERS: a pad length byte leads the payload.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: the 5 bytes of a priority lead the field block.
    pub const PRIORITY: u8 = 0x20;
}

/// Error codes (§7).
pub mod code {
    pub const NO_ERROR: u32 = 0x0;
    pub const PROTOCOL_ERROR: u32 = 0x1;
    pub const INTERNAL_ERROR: u32 = 0x2;
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    pub const SETTINGS_TIMEOUT: u32 = 0x4;
    pub const STREAM_CLOSED: u32 = 0x5;
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    pub const REFUSED_STREAM: u32 = 0x7;
    pub const CANCEL: u32 = 0x8;
    pub const COMPRESSION_ERROR: u32 = 0x9;
    pub const CONNECT_ERROR: u32 = 0xa;
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
    pub const INADEQUATE_SECURITY: u32 = 0xc;
    pub const HTTP_1_1_REQUIRED: u32 = 0xd;

    /// The code's name as RFC 9113 spells it, for logs.
    pub fn name(code: u32) -> &'static str {
        crate::stats::http2::CODES
            .get(code as usize)
            .copied()
            .unwrap_or("UNKNOWN")
    }
}

/// Setting identifiers (§6.5.2, RFC 8441 §3).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
}

/// A connection error (RFC 9113 §5.4.1): GOAWAY with `code`, then the close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnError {
    pub code: u32,
    /// What the peer did, for the log.
    pub reason: &'static str,
}

/// A connection error, as an `Err`.
pub fn fail<T>(code: u32, reason: &'static str) -> Result<T, ConnError> {
    Err(ConnError { code, reason })
}

/// A GOAWAY's checks (§6.8): on stream 0, at least 8 bytes; the last stream it names.
pub fn goaway_last_stream(header: FrameHeader, payload: &[u8]) -> Result<u32, ConnError> {
    if header.stream != 0 {
        return fail(code::PROTOCOL_ERROR, "GOAWAY on a stream");
    }
    if payload.len() < 8 {
        return fail(code::FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes");
    }
    Ok(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff)
}

/// A DATA or HEADERS frame's payload without its padding (§6.1, §6.2).
pub fn unpadded(header: FrameHeader, payload: &[u8]) -> Result<&[u8], ConnError> {
    if !header.has(flag::PADDED) {
        return Ok(payload);
    }
    let Some((&pad, rest)) = payload.split_first() else {
        return fail(
            code::FRAME_SIZE_ERROR,
            "a padded frame without its pad length",
        );
    };
    if usize::from(pad) > rest.len() {
        return fail(code::PROTOCOL_ERROR, "padding longer than the frame");
    }
    Ok(&rest[..rest.len() - usize::from(pad)])
}

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The payload's length.
    pub length: u32,
    pub kind: u8,
    pub flags: u8,
    /// The stream (the reserved bit cleared).
    pub stream: u32,
}

impl FrameHeader {
    /// Reads the header at the front of `bytes` (at least `HEADER_LEN` of them).
    #[inline]
    pub fn parse(bytes: &[u8]) -> FrameHeader {
        FrameHeader {
            length: u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]),
            kind: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
        }
    }

    #[inline]
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Appends a frame header.
#[inline]
pub fn put_header(out: &mut Vec<u8>, length: usize, kind: u8, flags: u8, stream: u32) {
    let length = (length as u32).to_be_bytes();
    let stream = stream.to_be_bytes();
    out.extend_from_slice(&[
        length[1], length[2], length[3], kind, flags, stream[0], stream[1], stream[2], stream[3],
    ]);
}

/// Appends a SETTINGS frame with `settings` (identifier, value).
pub fn put_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    put_header(out, settings.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn put_ping(out: &mut Vec<u8>, ack: bool, payload: [u8; 8]) {
    put_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&payload);
}

pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, error: u32) {
    put_header(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
}

pub fn put_reset(out: &mut Vec<u8>, stream: u32, error: u32) {
    put_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&error.to_be_bytes());
}

pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends DATA frames carrying `data` (each at most `max_frame` bytes; one empty frame for no
/// data), the last with END_STREAM when `end`.
pub fn put_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end: bool, max_frame: usize) {
    let mut pieces = data.chunks(max_frame.max(1)).peekable();
    if pieces.peek().is_none() {
        put_header(
            out,
            0,
            kind::DATA,
            if end { flag::END_STREAM } else { 0 },
            stream,
        );
        return;
    }
    while let Some(piece) = pieces.next() {
        let last = pieces.peek().is_none();
        let flags = if end && last { flag::END_STREAM } else { 0 };
        put_header(out, piece.len(), kind::DATA, flags, stream);
        out.extend_from_slice(piece);
    }
}

/// Turns the field block already appended to `out` from `block_start` on into a HEADERS frame
/// and as many CONTINUATION frames as `max_frame` requires, their headers inserted in place.
/// The block is written first, so that its length is known without a copy of its own.
pub fn frame_field_block(
    out: &mut Vec<u8>,
    block_start: usize,
    stream: u32,
    end_stream: bool,
    max_frame: usize,
) {
    let block_len = out.len() - block_start;
    let max_frame = max_frame.max(1);
    let end = if end_stream { flag::END_STREAM } else { 0 };
    if block_len <= max_frame {
        let mut header = Vec::with_capacity(HEADER_LEN);
        put_header(
            &mut header,
            block_len,
            kind::HEADERS,
            end | flag::END_HEADERS,
            stream,
        );
        out.splice(block_start..block_start, header);
        return;
    }
    // Rare (a head larger than a frame): the block is split into a new buffer.
    let block = out.split_off(block_start);
    let mut pieces = block.chunks(max_frame).peekable();
    let mut first = true;
    while let Some(piece) = pieces.next() {
        let last = pieces.peek().is_none();
        let (kind, mut flags) = match first {
            true => (kind::HEADERS, end),
            false => (kind::CONTINUATION, 0),
        };
        if last {
            flags |= flag::END_HEADERS;
        }
        put_header(out, piece.len(), kind, flags, stream);
        out.extend_from_slice(piece);
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_as_written_with_the_reserved_bit_cleared() {
        let mut out = Vec::new();
        put_header(&mut out, 0x01_02_03, kind::HEADERS, 0x25, 0x8000_0007);
        assert_eq!(out, [1, 2, 3, 1, 0x25, 0x80, 0, 0, 7]);
        let header = FrameHeader::parse(&out);
        assert_eq!(header.length, 0x01_02_03);
        assert_eq!(header.stream, 7);
        assert!(header.has(flag::END_HEADERS) && header.has(flag::PRIORITY));
    }

    #[test]
    fn data_is_cut_at_the_frame_size_and_only_the_last_piece_ends_the_stream() {
        let mut out = Vec::new();
        put_data(&mut out, 3, &[7u8; 10], true, 4);
        let mut at = 0;
        let mut seen = Vec::new();
        while at < out.len() {
            let header = FrameHeader::parse(&out[at..]);
            seen.push((header.length, header.has(flag::END_STREAM)));
            at += HEADER_LEN + header.length as usize;
        }
        assert_eq!(seen, [(4, false), (4, false), (2, true)]);
        out.clear();
        put_data(&mut out, 3, &[], true, 4);
        assert_eq!(out, [0, 0, 0, 0, 1, 0, 0, 0, 3]);
    }

    #[test]
    fn a_field_block_larger_than_a_frame_goes_on_in_continuations() {
        let mut out = b"before".to_vec();
        out.extend_from_slice(&[9u8; 10]);
        frame_field_block(&mut out, 6, 5, true, 4);
        assert_eq!(&out[..6], b"before");
        let mut at = 6;
        let mut seen = Vec::new();
        while at < out.len() {
            let header = FrameHeader::parse(&out[at..]);
            seen.push((header.kind, header.flags, header.length));
            at += HEADER_LEN + header.length as usize;
        }
        assert_eq!(
            seen,
            [
                (kind::HEADERS, flag::END_STREAM, 4),
                (kind::CONTINUATION, 0, 4),
                (kind::CONTINUATION, flag::END_HEADERS, 2),
            ]
        );
        let mut small = Vec::new();
        small.extend_from_slice(&[1, 2, 3]);
        frame_field_block(&mut small, 0, 1, false, 16_384);
        assert_eq!(small, [0, 0, 3, 1, 4, 0, 0, 0, 1, 1, 2, 3]);
    }
}
