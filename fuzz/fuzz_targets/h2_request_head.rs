//! Fuzzes the HTTP/1.1 head herdsman writes for an HTTP/2 stream's request
//! (`http2::request_head`): from any head the `h2` crate could hand over (a method, a
//! `:path` and `:authority` that `http` accepts, fields HPACK could carry, without those RFC 9113
//! §8.2.2 forbids, which the crate refuses first), never a panic, and either a refusal naming why
//! or a head that herdsman's own HTTP/1.1 parser reads, under its default limit, with the same
//! method, target and host, and the body framed as said (its length, chunked, or none).
#![no_main]

use herdsman::http1::{header_slots, parse_request, Body, HeadError};
use herdsman::http2::request_head::{write_request_head, BodyFraming};
use http::header::{HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

/// herdsman's default `max_header_bytes`.
const MAX_HEAD: usize = 65536;

/// Fields the h2 crate refuses in a request before herdsman sees it.
fn refused_by_h2(name: &HeaderName, value: &HeaderValue) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    ) || (name.as_str() == "te" && value != "trailers")
}

fuzz_target!(|input: &[u8]| {
    let Some((&flags, text)) = input.split_first() else {
        return;
    };
    let ended = flags & 1 == 1;
    let mut lines = text.split(|&b| b == b'\n');
    let first = lines.next().unwrap_or_default();
    let mut words = first.splitn(2, |&b| b == b' ');
    let (Some(method), Some(uri)) = (words.next(), words.next()) else {
        return;
    };
    let Ok(request) = http::Request::builder().method(method).uri(uri).body(()) else {
        return;
    };
    let (mut parts, ()) = request.into_parts();
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(&line[colon + 1..]),
        ) else {
            continue;
        };
        if !refused_by_h2(&name, &value) {
            parts.headers.append(name, value);
        }
    }
    let mut out = Vec::new();
    let Ok(framing) = write_request_head(&parts, ended, &mut out) else {
        return;
    };
    let mut headers = header_slots();
    let request = match parse_request(&out, &mut headers, MAX_HEAD) {
        Ok(Some(request)) => request,
        // More fields, or longer, than herdsman takes: refused as too large, as the same fields
        // over HTTP/1.1 would be.
        Err(HeadError::TooLarge) => return,
        // A field value HTTP/1.1 cannot carry whole (leading or trailing space HPACK kept): the
        // exchange answers 400, as it would the same bytes over HTTP/1.1.
        Err(HeadError::Invalid(_)) => return,
        other => panic!("{other:?} for {:?}", String::from_utf8_lossy(&out)),
    };
    assert_eq!(request.head_len, out.len(), "the head is all there is");
    assert_eq!(request.method_text, parts.method.as_str());
    if parts.method != http::Method::CONNECT {
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        assert_eq!(request.target, target);
    }
    // A Host field's value as HTTP/1.1 reads it: without the spaces around it, which HPACK
    // keeps.
    let host = parts
        .uri
        .authority()
        .map(|a| a.as_str().as_bytes())
        .or_else(|| parts.headers.get("host").map(|h| h.as_bytes().trim_ascii()));
    assert_eq!(request.host, host);
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
