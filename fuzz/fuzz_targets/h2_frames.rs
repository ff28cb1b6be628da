//! Fuzzes an HTTP/2 client connection's protocol state (`session::h2::Connection`) with any
//! frames a client could send (after the preface, skipped when the input starts with it): never
//! a panic, the streams open never more than the limit announced, and every byte herdsman would
//! send is whole frames — each header's length matching its payload, each stream it names one
//! the client opened.
#![no_main]

use herdsman::config::Http2Limits;
use herdsman::http2::frame::{FrameHeader, HEADER_LEN, PREFACE};
use herdsman::session::h2::{Connection, Step};
use libfuzzer_sys::fuzz_target;
use tokio::time::Instant;

fuzz_target!(|input: &[u8]| {
    let limits = Http2Limits {
        max_concurrent_streams: 4,
        frame_burst: 20,
        frames_per_stream: 2,
        reset_burst: 5,
        ..Http2Limits::default()
    };
    let now = Instant::now();
    let mut connection = Connection::new(limits, 16_384, now);
    let mut input = input.strip_prefix(PREFACE).unwrap_or(input);
    let mut opened = 0u32;
    while !input.is_empty() {
        match connection.read_frame(input, now) {
            Ok(Step::NeedMore) | Err(_) => break,
            Ok(Step::Read(n)) => input = &input[n..],
            Ok(Step::Opened(n, stream)) => {
                input = &input[n..];
                assert!(stream.id % 2 == 1, "{stream:?}");
                opened = opened.max(stream.id);
            }
        }
        assert!(connection.open_streams() <= 4);
    }
    let out = &connection.out;
    let mut at = 0;
    while at < out.len() {
        assert!(out.len() - at >= HEADER_LEN, "a partial frame header");
        let header = FrameHeader::parse(&out[at..]);
        at += HEADER_LEN + header.length as usize;
        assert!(at <= out.len(), "a frame longer than what follows: {header:?}");
        assert!(
            header.stream == 0 || header.stream <= connection.last_stream(),
            "a frame on a stream the client never named: {header:?}"
        );
    }
    let _ = opened;
});
