//! Fuzzes the HTTP/1.1 head herdsman writes for an HTTP/2 stream's request
//! (`http2::request_head`), field by field as HPACK would give them: never a panic, and either
//! a refusal naming why or a head that herdsman's own HTTP/1.1 parser reads, under its default
//! limit, with the method, target and host the pseudo-fields gave, and the body framed as said
//! (its length, chunked, or none).
#![no_main]

use herdsman::http1::{header_slots, parse_request, Body, HeadError};
use herdsman::http2::request_head::{BodyFraming, RequestHead};
use libfuzzer_sys::fuzz_target;

/// herdsman's default `max_header_bytes`.
const MAX_HEAD: usize = 65536;

fuzz_target!(|input: &[u8]| {
    let Some((&flags, text)) = input.split_first() else {
        return;
    };
    let ended = flags & 1 == 1;
    let mut head = RequestHead::default();
    head.begin();
    let (mut method, mut path, mut authority, mut host) = (None, None, None, None);
    for line in text.split(|&b| b == b'\n') {
        // A name may start with ':' (a pseudo-field); the value follows the next ':'.
        let from = usize::from(line.first() == Some(&b':'));
        let Some(colon) = line[from..].iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..from + colon], &line[from + colon + 1..]);
        match name {
            b":method" => method = method.or(Some(value)),
            b":path" => path = path.or(Some(value)),
            b":authority" => authority = authority.or(Some(value)),
            b"host" => host = host.or(Some(value)),
            _ => {}
        }
        head.field(name, value);
    }
    let Ok(framing) = head.finish(ended) else {
        return;
    };
    let out = &head.out;
    let mut headers = header_slots();
    let request = match parse_request(out, &mut headers, MAX_HEAD) {
        Ok(Some(request)) => request,
        // More fields, or longer, than herdsman takes: refused as too large, as the same fields
        // over HTTP/1.1 would be.
        Err(HeadError::TooLarge) => return,
        other => panic!("{other:?} for {:?}", String::from_utf8_lossy(out)),
    };
    assert_eq!(request.head_len, out.len(), "the head is all there is");
    let method = method.expect("a head was written, so it had a method");
    if framing != BodyFraming::Tunnel {
        assert_eq!(request.method_text.as_bytes(), method);
    }
    if method != b"CONNECT" {
        assert_eq!(request.target.as_bytes(), path.expect("and a path"));
    }
    assert_eq!(request.host, authority.or(host));
    // herdsman's parser reads a length of 0 as no body.
    match framing {
        // A tunnel's bytes follow a head without a body of its own.
        BodyFraming::None | BodyFraming::Length(0) | BodyFraming::Tunnel => {
            assert_eq!(request.body, Body::None)
        }
        BodyFraming::Length(length) => assert_eq!(request.body, Body::Length(length)),
        BodyFraming::Chunked => assert_eq!(request.body, Body::Chunked),
    }
});
