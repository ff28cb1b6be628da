//! The connection's state fed a server's frames by hand.

use super::*;
use crate::http2::frame::{flag, kind, FrameHeader, HEADER_LEN};
use crate::http2::hpack::{encode_field, encode_indexed, encode_status};

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_header(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

/// A response head's block: `:status`, then `fields`.
fn head(status: u16, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    encode_status(&mut block, status);
    block.extend(head_fields(fields));
    block
}

/// A block of `fields` alone (trailers).
fn head_fields(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in fields {
        encode_field(&mut block, name.as_bytes(), value.as_bytes());
    }
    block
}

/// A stream window of 64 KiB − 1, a connection window of 1 MiB.
fn settings() -> ConnectionSettings {
    ConnectionSettings {
        stream_window: 65_535,
        connection_window: 1 << 20,
        idle: std::time::Duration::from_secs(60),
    }
}

/// A connection whose server said SETTINGS, with `streams` GETs opened (1, 3, 5, …).
fn connection(streams: usize) -> State {
    let mut state = State::new(settings(), 100);
    feed(&mut state, &frame(kind::SETTINGS, 0, 0, &[])).unwrap();
    let mut request = Vec::new();
    encode_indexed(&mut request, 2);
    for _ in 0..streams {
        state.open_stream(&request, true, false).unwrap();
    }
    state.out.clear();
    state
}

fn feed(state: &mut State, mut bytes: &[u8]) -> Result<(), ConnError> {
    while !bytes.is_empty() {
        let n = state.read_frame(bytes)?;
        assert!(n > 0, "a partial frame");
        bytes = &bytes[n..];
    }
    Ok(())
}

fn input(state: &State, id: u32) -> String {
    String::from_utf8_lossy(&state.streams[&id].input).into_owned()
}

/// The frames in `out`, as (type, stream, payload).
fn sent(state: &State) -> Vec<(u8, u32, Vec<u8>)> {
    let (mut frames, mut at) = (Vec::new(), 0);
    while at < state.out.len() {
        let header = FrameHeader::parse(&state.out[at..]);
        let payload = &state.out[at + HEADER_LEN..at + HEADER_LEN + header.length as usize];
        frames.push((header.kind, header.stream, payload.to_vec()));
        at += HEADER_LEN + header.length as usize;
    }
    frames
}

#[test]
fn a_grpc_response_becomes_a_chunked_http1_response_with_its_trailers() {
    let mut state = connection(1);
    let mut bytes = frame(
        kind::HEADERS,
        flag::END_HEADERS,
        1,
        &head(200, &[("content-type", "application/grpc")]),
    );
    bytes.extend(frame(kind::DATA, 0, 1, b"\0\0\0\0\x02hi"));
    bytes.extend(frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &head_fields(&[("grpc-status", "0")]),
    ));
    feed(&mut state, &bytes).unwrap();
    assert_eq!(
        input(&state, 1),
        "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ntransfer-encoding: chunked\r\n\
         \r\n7\r\n\0\0\0\0\x02hi\r\n0\r\ngrpc-status: 0\r\n\r\n"
    );
    assert_eq!(state.streams[&1].phase, Phase::Done);
}

#[test]
fn data_beyond_the_content_length_resets_the_stream_and_never_reaches_the_exchange() {
    let mut state = connection(1);
    let mut bytes = frame(
        kind::HEADERS,
        flag::END_HEADERS,
        1,
        &head(200, &[("content-length", "5")]),
    );
    // The first frame takes the whole length; the second is past it.
    bytes.extend(frame(kind::DATA, 0, 1, b"hello"));
    bytes.extend(frame(kind::DATA, flag::END_STREAM, 1, b"extra"));
    feed(&mut state, &bytes).unwrap();
    assert_eq!(
        input(&state, 1),
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
    );
    assert_eq!(state.streams[&1].failed, Some(Failed::RESET));
    let reset = (
        kind::RST_STREAM,
        1,
        code::PROTOCOL_ERROR.to_be_bytes().to_vec(),
    );
    assert!(sent(&state).contains(&reset), "{:?}", sent(&state));
}

#[test]
fn the_window_the_exchange_read_goes_back_to_the_server() {
    let mut state = connection(1);
    let mut bytes = frame(kind::HEADERS, flag::END_HEADERS, 1, &head(200, &[]));
    bytes.extend(frame(kind::DATA, 0, 1, &[b'x'; 16_384]));
    bytes.extend(frame(kind::DATA, 0, 1, &[b'y'; 16_384]));
    feed(&mut state, &bytes).unwrap();
    assert!(
        sent(&state).is_empty(),
        "nothing read yet, nothing given back"
    );
    let stream = state.streams.get_mut(&1).unwrap();
    stream.at = stream.input.len();
    state.consumed(1);
    let updates: Vec<_> = sent(&state)
        .into_iter()
        .filter(|(kind, _, _)| *kind == kind::WINDOW_UPDATE)
        .map(|(_, stream, payload)| (stream, u32::from_be_bytes(payload.try_into().unwrap())))
        .collect();
    assert_eq!(
        updates,
        [(1, 32_768)],
        "half the stream's window, read (the connection's is 1 MiB)"
    );
    // More than the window announced is a stream error, not memory.
    let too_much = frame(kind::DATA, 0, 1, &[b'z'; 16_384]);
    for _ in 0..4 {
        let _ = feed(&mut state, &too_much);
    }
    assert_eq!(state.streams[&1].failed, Some(Failed::RESET));
}

#[test]
fn a_goaway_or_a_refusal_leaves_the_streams_the_server_never_took_free_to_go_elsewhere() {
    let mut state = connection(3);
    let mut goaway = Vec::new();
    goaway.extend_from_slice(&1u32.to_be_bytes());
    goaway.extend_from_slice(&code::NO_ERROR.to_be_bytes());
    feed(&mut state, &frame(kind::GOAWAY, 0, 0, &goaway)).unwrap();
    assert_eq!(state.streams[&1].failed, None, "stream 1 is still served");
    assert_eq!(state.streams[&3].failed, Some(Failed::UNPROCESSED));
    assert_eq!(state.streams[&5].failed, Some(Failed::UNPROCESSED));
    assert!(!state.takes_a_stream());
    let mut state = connection(2);
    let refused = code::REFUSED_STREAM.to_be_bytes();
    let cancel = code::CANCEL.to_be_bytes();
    feed(&mut state, &frame(kind::RST_STREAM, 0, 1, &refused)).unwrap();
    feed(&mut state, &frame(kind::RST_STREAM, 0, 3, &cancel)).unwrap();
    assert_eq!(state.streams[&1].failed, Some(Failed::UNPROCESSED));
    assert_eq!(state.streams[&3].failed, Some(Failed::RESET));
}

#[test]
fn what_a_server_may_not_send_ends_the_connection_with_the_code_the_rfc_names() {
    let push = frame(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]);
    let idle_headers = frame(kind::HEADERS, flag::END_HEADERS, 9, &head(200, &[]));
    let bad_hpack = frame(kind::HEADERS, flag::END_HEADERS, 1, &[0xff, 0xff, 0xff]);
    let interleaved = [
        frame(kind::HEADERS, 0, 1, &[0x88]),
        frame(kind::PING, 0, 0, &[0; 8]),
    ]
    .concat();
    for (bytes, expected) in [
        (push, code::PROTOCOL_ERROR),
        (idle_headers, code::PROTOCOL_ERROR),
        (bad_hpack, code::COMPRESSION_ERROR),
        (interleaved, code::PROTOCOL_ERROR),
    ] {
        let mut state = connection(1);
        assert_eq!(feed(&mut state, &bytes).map_err(|e| e.code), Err(expected));
    }
    let mut state = State::new(settings(), 100);
    let first = feed(&mut state, &frame(kind::PING, 0, 0, &[0; 8]));
    assert_eq!(
        first.map_err(|e| e.code),
        Err(code::PROTOCOL_ERROR),
        "SETTINGS first"
    );
}
