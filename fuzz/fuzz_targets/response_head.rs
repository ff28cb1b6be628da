//! Fuzzes the response head parser and the head herdsman writes to the client from it: never a
//! panic, and a final response that parses is either refused as too large once herdsman's own
//! fields are added or written into a head that parses again, under the same limits, as the
//! client will read it — the same status, the body framed as herdsman relays it (chunked passed
//! on, or decoded for an HTTP/1.0 client and ended by the close; a compressed one chunked), and
//! a close announced when herdsman closes.
#![no_main]

use herdsman::http1::forward::{write_response_head, ClientFraming, OwnFields};
use herdsman::http1::{header_slots, parse_response, Body, HeadError, Method};
use libfuzzer_sys::fuzz_target;

/// herdsman's limit on a response head (`proxy::respond`'s `MAX_RESPONSE_HEAD`).
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

fuzz_target!(|input: &[u8]| {
    // The first byte says what the request was and what the client asked for.
    let Some((&facts, data)) = input.split_first() else {
        return;
    };
    let method = match facts & 3 {
        0 => Method::Get,
        1 => Method::Head,
        2 => Method::Post,
        _ => Method::Options,
    };
    let client_http10 = facts & 4 != 0;
    let client_keeps_alive = facts & 8 != 0;
    let own = OwnFields {
        set_cookie: if facts & 16 != 0 {
            b"Set-Cookie: s=a.b; Path=/; HttpOnly\r\n"
        } else {
            b""
        },
        hsts: if facts & 32 != 0 {
            b"Strict-Transport-Security: max-age=31536000\r\n"
        } else {
            b""
        },
    };
    let mut headers = header_slots();
    let Ok(Some(response)) = parse_response(data, &mut headers, method, MAX_RESPONSE_HEAD) else {
        return;
    };
    assert!(response.head_len <= data.len());
    if response.is_interim() || response.code == 101 {
        return;
    }
    // As `proxy::respond` decides it; an answer with a body may be compressed (`compress::`).
    let compressed = facts & 64 != 0 && !matches!(response.body, Body::None | Body::Length(0));
    let dechunk = (compressed || response.body == Body::Chunked) && client_http10;
    let close = !client_keeps_alive || response.body == Body::UntilClose || dechunk;
    let framing = ClientFraming {
        close,
        http10_keep_alive: client_http10 && !close,
        dechunk,
        content_coding: compressed.then_some("gzip"),
    };
    let mut out = Vec::new();
    // Refused (502) when herdsman's own fields would take it past the limits.
    match write_response_head(&response, framing, &own, MAX_RESPONSE_HEAD, &mut out) {
        Err(HeadError::TooLarge) => return,
        Err(other) => panic!("writing refused a head otherwise: {other:?}"),
        Ok(()) => {}
    }
    let mut again = header_slots();
    let reparsed = parse_response(&out, &mut again, method, MAX_RESPONSE_HEAD)
        .expect("the client's head parses")
        .expect("the client's head is complete");
    assert_eq!(reparsed.head_len, out.len());
    assert_eq!(reparsed.code, response.code);
    let expected = match (dechunk, compressed) {
        (true, _) => Body::UntilClose,
        (false, true) => Body::Chunked,
        (false, false) => response.body,
    };
    assert_eq!(
        reparsed.body,
        expected,
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    if close {
        assert!(
            !reparsed.keep_alive,
            "a close not announced: {:?}",
            String::from_utf8_lossy(&out)
        );
    }
});
