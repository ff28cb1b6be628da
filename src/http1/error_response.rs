//! The short plain-text responses herdsman sends when it answers a request itself.

use std::io::Write;

/// The reason phrase for the statuses herdsman produces.
pub fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// Appends a complete response: `<status> <reason>: <detail>` as the body, then the connection
/// is closed (every error herdsman answers itself ends the connection, so a client that sent
/// something unexpected cannot have the rest of its bytes read as a new request). The answer to
/// a HEAD request has the same head and no body (RFC 9110 §9.3.2).
pub fn write_error_response(status: u16, detail: &str, head_only: bool, out: &mut Vec<u8>) {
    let reason = reason(status);
    let body_len = 3 + 1 + reason.len() + 2 + detail.len() + 1;
    // 503 is for now: no server may take the request, or all are busy. Say when to come back.
    let retry_after = if status == 503 {
        "Retry-After: 1\r\n"
    } else {
        ""
    };
    let _ = write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {body_len}\r\n{retry_after}Connection: close\r\n\r\n"
    );
    if !head_only {
        let _ = writeln!(out, "{status} {reason}: {detail}");
    }
}

/// The gRPC status for a status herdsman answers with itself, as gRPC maps HTTP statuses
/// (`doc/http-grpc-status-mapping.md`), except that herdsman's own 504 is a deadline that passed.
fn grpc_status(status: u16) -> u8 {
    match status {
        // INTERNAL
        400 | 505 => 13,
        // DEADLINE_EXCEEDED
        408 | 504 => 4,
        // RESOURCE_EXHAUSTED
        413 | 431 => 8,
        // UNIMPLEMENTED
        501 => 12,
        // UNAVAILABLE
        502 | 503 => 14,
        // UNKNOWN
        _ => 2,
    }
}

/// Appends the answer a gRPC client gets instead of [`write_error_response`]'s: a trailers-only
/// response (RFC-style `200`, `grpc-status` and `grpc-message` in the head, no body), its
/// message saying what the HTTP answer would have (percent-encoded as gRPC requires). The
/// connection is closed as after any error herdsman answers itself.
pub fn write_grpc_error(status: u16, detail: &str, out: &mut Vec<u8>) {
    let reason = reason(status);
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ngrpc-status: {}\r\n\
         grpc-message: ",
        grpc_status(status)
    );
    for byte in format!("{status} {reason}: {detail}").bytes() {
        match byte {
            b' '..=b'~' if byte != b'%' => out.push(byte),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out.extend_from_slice(b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
}

/// Appends a `308 Permanent Redirect` to the same host (without its port) and target over HTTPS
/// on `port` (left out when 443): what a cleartext listener with `redirect_https` answers. The
/// host and target were checked by the head's parse (no byte that could end a field). 308, not
/// 301: the method and body are kept (RFC 9110 §15.4.9). The connection stays open unless
/// `close`.
pub fn write_https_redirect(
    host: &[u8],
    target: &str,
    port: u16,
    head_only: bool,
    close: bool,
    out: &mut Vec<u8>,
) {
    let host = host_without_port(host);
    out.extend_from_slice(b"HTTP/1.1 308 Permanent Redirect\r\nLocation: https://");
    out.extend_from_slice(host);
    if port != 443 {
        let _ = write!(out, ":{port}");
    }
    // An absolute-form target's path, or "/" for `*` (OPTIONS) and a target without one.
    match target.as_bytes().first() {
        Some(b'/') => out.extend_from_slice(target.as_bytes()),
        _ => out.push(b'/'),
    }
    let body: &[u8] = b"308 Permanent Redirect: this site is served over HTTPS\n";
    out.extend_from_slice(b"\r\nContent-Type: text/plain; charset=utf-8\r\n");
    end_with_body(body, head_only, close, out);
}

/// Appends a `200 OK` with `key_authorization` as its body: the answer to an ACME HTTP-01
/// validator's request for an open token (RFC 8555 §8.3). The connection stays open unless
/// `close`.
pub fn write_acme_http01_answer(
    key_authorization: &str,
    head_only: bool,
    close: bool,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n");
    end_with_body(key_authorization.as_bytes(), head_only, close, out);
}

/// Ends an answer's head with its `Content-Length` (and `Connection: close` when `close`), then
/// appends `body` unless the request was a HEAD.
pub fn end_with_body(body: &[u8], head_only: bool, close: bool, out: &mut Vec<u8>) {
    let _ = write!(out, "Content-Length: {}\r\n", body.len());
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// `host` without a `:port` after it (an IPv6 literal keeps its brackets).
fn host_without_port(host: &[u8]) -> &[u8] {
    let end = match host.iter().rposition(|&b| b == b':') {
        Some(colon) if !host[colon..].contains(&b']') => colon,
        _ => host.len(),
    };
    &host[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_keeps_the_host_and_target_and_names_the_https_port() {
        let text = |host: &[u8], target: &str, port: u16| {
            let mut out = Vec::new();
            write_https_redirect(host, target, port, false, false, &mut out);
            let text = String::from_utf8(out).unwrap();
            let location = text.lines().find_map(|l| l.strip_prefix("Location: "));
            location.unwrap().to_string()
        };
        assert_eq!(
            text(b"example.com", "/a?b=1", 443),
            "https://example.com/a?b=1"
        );
        assert_eq!(text(b"example.com:8080", "/", 443), "https://example.com/");
        assert_eq!(
            text(b"example.com", "/x", 8443),
            "https://example.com:8443/x"
        );
        assert_eq!(text(b"[::1]:8080", "/", 443), "https://[::1]/");
        assert_eq!(text(b"[::1]", "*", 443), "https://[::1]/");
        let mut out = Vec::new();
        write_https_redirect(b"h", "/", 443, false, true, &mut out);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 308 Permanent Redirect\r\n"));
        assert!(head.ends_with("Connection: close"));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }

    #[test]
    fn error_response_is_complete_and_closes() {
        let mut out = Vec::new();
        write_error_response(502, "server reset the connection", false, &mut out);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"));
        assert!(head.contains("Connection: close"));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert_eq!(body, "502 Bad Gateway: server reset the connection\n");
        let mut head_only = Vec::new();
        write_error_response(502, "server reset the connection", true, &mut head_only);
        assert_eq!(head_only, format!("{head}\r\n\r\n").into_bytes());
    }
}
