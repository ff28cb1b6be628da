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

#[cfg(test)]
mod tests {
    use super::*;

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
