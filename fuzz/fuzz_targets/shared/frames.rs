//! For the HTTP/2 fuzz targets: what herdsman would send, read back as frames.

use herdsman::http2::frame::{FrameHeader, HEADER_LEN};

/// The headers of the frames `out` is made of, in order; panics unless it is whole frames, each
/// header's length matching the payload after it.
pub fn whole_frames(out: &[u8]) -> Vec<FrameHeader> {
    let mut headers = Vec::new();
    let mut at = 0;
    while at < out.len() {
        assert!(out.len() - at >= HEADER_LEN, "a partial frame header");
        let header = FrameHeader::parse(&out[at..]);
        at += HEADER_LEN + header.length as usize;
        assert!(
            at <= out.len(),
            "a frame longer than what follows: {header:?}"
        );
        headers.push(header);
    }
    headers
}
