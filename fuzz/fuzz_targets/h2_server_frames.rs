//! Fuzzes an HTTP/2 connection to a server (`http2::servers::connection::State`) with any frames
//! a server could send after herdsman opened three streams (a GET, a HEAD, a POST still
//! sending): never a panic; what each stream gives the exchange is an HTTP/1.1 response head
//! herdsman's own parser reads back whole (nothing the server sends becomes a line of its own),
//! its body framed as that head says; and every byte herdsman would send is whole frames on
//! streams it opened.
#![no_main]

use herdsman::http1::{header_slots, parse_response, Body, Method};
use herdsman::http2::frame::PREFACE;
use herdsman::http2::hpack::{encode_field, encode_indexed};
use herdsman::http2::servers::connection::{ConnectionSettings, Phase, State};
use libfuzzer_sys::fuzz_target;

#[path = "shared/frames.rs"]
mod frames;
use frames::whole_frames;

fuzz_target!(|input: &[u8]| {
    let settings = ConnectionSettings {
        stream_window: 65_535,
        connection_window: 1 << 20,
        idle: std::time::Duration::from_secs(60),
    };
    let mut state = State::new(settings, 100);
    let mut block = Vec::new();
    encode_indexed(&mut block, 2);
    encode_indexed(&mut block, 6);
    encode_field(&mut block, b":authority", b"fuzz.test");
    encode_indexed(&mut block, 4);
    let get = state.open_stream(&block, true, false).unwrap();
    let head = state.open_stream(&block, true, true).unwrap();
    let post = state.open_stream(&block, false, false).unwrap();
    let mut input = input;
    while let Ok(n) = state.read_frame(input) {
        if n == 0 {
            break;
        }
        input = &input[n..];
    }
    for (id, method) in [
        (get, Method::Get),
        (head, Method::Head),
        (post, Method::Post),
    ] {
        let Some(stream) = state.streams.get(&id) else {
            continue;
        };
        if stream.phase == Phase::AwaitingHead || stream.failed.is_some() {
            continue;
        }
        let mut slots = header_slots();
        let response = parse_response(&stream.input, &mut slots, method, 1 << 20)
            .unwrap_or_else(|error| {
                panic!("{error:?} in {:?}", String::from_utf8_lossy(&stream.input))
            })
            .unwrap_or_else(|| {
                panic!(
                    "a partial head: {:?}",
                    String::from_utf8_lossy(&stream.input)
                )
            });
        let body = &stream.input[response.head_len..];
        match response.body {
            Body::None => assert!(body.is_empty(), "a body after a bodiless head"),
            Body::Length(length) => assert!(
                body.len() as u64 <= length,
                "more than its length: {:?}",
                String::from_utf8_lossy(&stream.input)
            ),
            Body::Chunked => {}
            Body::UntilClose => panic!("a response without framing"),
        }
    }
    let out = state
        .out
        .strip_prefix(PREFACE)
        .expect("the client preface first");
    for header in whole_frames(out) {
        assert!(
            header.stream <= post,
            "a frame on a stream herdsman never opened: {header:?}"
        );
    }
});
