//! The head a stored response keeps, and the head a hit sends from it: the server's status line
//! and end-to-end fields are kept once, as bytes; a hit adds its own `Age`, framing and
//! connection fields, so serving one parses nothing.

use crate::http1::forward::{is_hop_by_hop, write_status_line};
use crate::http1::Response;

/// Appends to `out` the head to keep for `response`: its status line (as HTTP/1.1) and its
/// end-to-end fields, without the fields that framed its body (`Content-Length`,
/// `Transfer-Encoding`: a hit frames the body it holds), `Age` (a hit says its own) and
/// `Set-Cookie` (one client's cookie is never handed to another), and without the blank line.
pub fn stored_head(response: &Response<'_, '_>, out: &mut Vec<u8>) {
    write_status_line(response, out);
    for field in response.headers {
        let name = field.name;
        if is_hop_by_hop(name, &response.connection)
            || ["content-length", "transfer-encoding", "age", "set-cookie"]
                .iter()
                .any(|dropped| name.eq_ignore_ascii_case(dropped))
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(field.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// Removes from the head in `head` every field line whose name is one of `names` (lower case).
pub fn remove_fields(head: &mut Vec<u8>, names: &[&str]) {
    let mut kept = Vec::with_capacity(head.len());
    for line in head.split_inclusive(|&byte| byte == b'\n') {
        if !names.iter().any(|name| is_named(line, name)) {
            kept.extend_from_slice(line);
        }
    }
    *head = kept;
}

/// The line is a field named `name` (lower case).
pub fn is_named(line: &[u8], name: &str) -> bool {
    line.len() > name.len()
        && line[name.len()] == b':'
        && line[..name.len()].eq_ignore_ascii_case(name.as_bytes())
}

/// How a hit's head ends the client's connection, as for a proxied response.
#[derive(Debug, Clone, Copy, Default)]
pub struct HitFraming {
    /// The connection closes after this response.
    pub close: bool,
    /// An HTTP/1.0 client asked to keep it.
    pub http10_keep_alive: bool,
}

/// How a hit's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitBody {
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`: the length is not known yet (a flight's chunked answer).
    Chunked,
    /// No framing field: a 304, or a body the connection's close ends.
    Unframed,
}

/// Appends the head a hit sends: the stored head, `Age`, the body's framing, herdsman's own
/// `Strict-Transport-Security` line (`hsts`, which then replaces the server's), a
/// `Cache-Status` line when given, and the connection field.
pub fn write_hit_head(
    stored: &[u8],
    age: u64,
    body: HitBody,
    hsts: &[u8],
    cache_status: &[u8],
    framing: HitFraming,
    out: &mut Vec<u8>,
) {
    if hsts.is_empty() {
        out.extend_from_slice(stored);
    } else {
        for line in stored.split_inclusive(|&byte| byte == b'\n') {
            let named =
                line.len() > 26 && line[..26].eq_ignore_ascii_case(b"strict-transport-security:");
            if !named {
                out.extend_from_slice(line);
            }
        }
    }
    let mut number = itoa_buffer();
    out.extend_from_slice(b"Age: ");
    out.extend_from_slice(decimal(age, &mut number));
    out.extend_from_slice(b"\r\n");
    match body {
        HitBody::Length(length) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(decimal(length, &mut number));
            out.extend_from_slice(b"\r\n");
        }
        HitBody::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        HitBody::Unframed => {}
    }
    out.extend_from_slice(hsts);
    out.extend_from_slice(cache_status);
    if framing.close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if framing.http10_keep_alive {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

fn itoa_buffer() -> [u8; 20] {
    [0; 20]
}

/// `value` in decimal, written at the end of `buffer`.
fn decimal(mut value: u64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buffer[at..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::{header_slots, parse_response, Method};

    fn kept(head: &[u8]) -> Vec<u8> {
        let mut slots = header_slots();
        let response = parse_response(head, &mut slots, Method::Get, 8192)
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        stored_head(&response, &mut out);
        out
    }

    #[test]
    fn the_stored_head_keeps_end_to_end_fields_only() {
        let head = b"HTTP/1.0 200 Fine\r\nContent-Type: text/plain\r\nConnection: x-secret, keep-alive\r\n\
            X-Secret: 1\r\nKeep-Alive: timeout=5\r\nAge: 40\r\nSet-Cookie: id=1\r\nETag: \"a\"\r\n\
            Content-Length: 5\r\n\r\nhello";
        assert_eq!(
            kept(head),
            b"HTTP/1.1 200 Fine\r\nContent-Type: text/plain\r\nETag: \"a\"\r\n"
        );
    }

    #[test]
    fn a_hit_says_its_age_length_and_connection() {
        let stored = b"HTTP/1.1 200 OK\r\nStrict-Transport-Security: max-age=1\r\nETag: \"a\"\r\n";
        let mut out = Vec::new();
        write_hit_head(
            stored,
            0,
            HitBody::Length(12_345),
            b"",
            b"",
            HitFraming::default(),
            &mut out,
        );
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nStrict-Transport-Security: max-age=1\r\nETag: \"a\"\r\nAge: 0\r\nContent-Length: 12345\r\n\r\n"
        );
        out.clear();
        let framing = HitFraming {
            close: true,
            http10_keep_alive: false,
        };
        let hsts = b"Strict-Transport-Security: max-age=63072000\r\n";
        let status = b"Cache-Status: herdsman; hit; ttl=5\r\n";
        write_hit_head(
            stored,
            77,
            HitBody::Unframed,
            hsts,
            status,
            framing,
            &mut out,
        );
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nETag: \"a\"\r\nAge: 77\r\nStrict-Transport-Security: max-age=63072000\r\nCache-Status: herdsman; hit; ttl=5\r\nConnection: close\r\n\r\n"
        );
    }
}
