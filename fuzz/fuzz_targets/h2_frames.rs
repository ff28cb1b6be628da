//! Fuzzes an HTTP/2 client connection's protocol state (`session::h2::Connection`) with any
//! frames a client could send (after the preface, skipped when the input starts with it): never
//! a panic, the streams open never more than the limit announced, and every byte herdsman would
//! send is whole frames — each header's length matching its payload, each stream it names one
//! the client named (opened, or named in a frame that opens nothing: a PRIORITY of the wrong
//! length on an idle stream is that stream's error, §6.3).
#![no_main]

use herdsman::config::Http2Limits;
use herdsman::http2::frame::{FrameHeader, HEADER_LEN, PREFACE};
use herdsman::session::h2::{Connection, Step};
use libfuzzer_sys::fuzz_target;
use tokio::time::Instant;

#[path = "shared/frames.rs"]
mod frames;
use frames::whole_frames;

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
    // The highest stream any frame the client sent named.
    let mut named = 0u32;
    while !input.is_empty() {
        if input.len() >= HEADER_LEN {
            named = named.max(FrameHeader::parse(input).stream);
        }
        match connection.read_frame(input, now) {
            Ok(Step::NeedMore) | Err(_) => break,
            Ok(Step::Read(n)) => input = &input[n..],
            Ok(Step::Opened(n, stream)) => {
                input = &input[n..];
                assert!(stream.id % 2 == 1, "{stream:?}");
            }
        }
        assert!(connection.open_streams() <= 4);
    }
    for header in whole_frames(&connection.out) {
        assert!(
            header.stream <= named.max(connection.last_stream()),
            "a frame on a stream the client never named: {header:?}"
        );
    }
});
