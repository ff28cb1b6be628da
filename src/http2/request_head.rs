//! An HTTP/2 request's head (RFC 9113 §8.3) written as the HTTP/1.1 head the exchange reads, so
//! that a stream is routed, checked, forwarded and logged exactly as an HTTP/1.1 request is: the
//! method and `:path` as the request line (`:authority` alone for CONNECT), `:authority` as Host
//! (a Host field beside it must name the same host), cookie fields joined into one (§8.2.3), the
//! other fields as they came, and the body's framing: its `content-length` when it has one,
//! chunked when it has a body of unknown length, none when the HEADERS frame ended the stream.
//! The `h2` crate has already refused what §8.2.2 forbids (connection-specific fields, `te` other
//! than `trailers`, uppercase names) and malformed pseudo-fields, as stream errors; what it lets
//! through and §8 still calls malformed is refused here (`HeadProblem`), and the stream is reset
//! with PROTOCOL_ERROR (§8.1.1), as the crate does — never answered.
//!
//! An extended CONNECT (RFC 8441: `:protocol = websocket`) is written as the HTTP/1.1 WebSocket
//! handshake a server expects (§5): a GET of `:path` with `Upgrade: websocket`, `Connection:
//! upgrade` and a `Sec-WebSocket-Key` of its own (HTTP/2 has none); its DATA frames are the
//! tunnel's bytes (`BodyFraming::Tunnel`), and the server's 101 goes back as a 200
//! (`response::ResponseReader::for_tunnel`).

use http::request::Parts;
use http::{header, Method};

/// How the request body reaches the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body: the HEADERS frame ended the stream.
    None,
    /// `content-length` bytes, passed as they come.
    Length(u64),
    /// A body of unknown length, written in the chunked coding (its trailers as the trailer
    /// section).
    Chunked,
    /// An extended CONNECT's tunnel: the DATA frames' bytes as they come, after a head that has
    /// no body of its own.
    Tunnel,
}

/// Why a stream's head is a malformed request (RFC 9113 §8.1.1: a stream error of type
/// PROTOCOL_ERROR, the stream reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadProblem {
    /// §8.3.1: `http` and `https` requests need one or the other.
    #[error("no :authority and no Host")]
    NoHost,
    /// §8.3.1: either, when there, must not be empty.
    #[error("an empty :authority or Host")]
    EmptyHost,
    /// §8.3.1: both, when there, must name the same host.
    #[error(":authority and Host name different hosts")]
    HostMismatch,
    /// §8.1.1 (and RFC 9110 §8.6).
    #[error("content-length is not one number")]
    BadLength,
    /// §8.3.1: `*` (asterisk-form) is a `:path` for OPTIONS alone.
    #[error(":path * on a request other than OPTIONS")]
    AsteriskPath,
    /// §8.2.1: a value must not start or end with whitespace (SP or HTAB).
    #[error("a field value starts or ends with whitespace")]
    PaddedValue,
    /// RFC 8441 §4: an extended CONNECT for a protocol herdsman cannot carry (WebSocket alone).
    #[error("an extended CONNECT for a protocol other than websocket")]
    UnknownProtocol,
}

/// Writes `head` as an HTTP/1.1 request head into `out` (emptied first); `ended` says the
/// HEADERS frame ended the stream. Returns how its body follows.
pub fn write_request_head(
    head: &Parts,
    ended: bool,
    out: &mut Vec<u8>,
) -> Result<BodyFraming, HeadProblem> {
    out.clear();
    let authority = head.uri.authority().map(|a| a.as_str());
    let mut hosts = head.headers.get_all(header::HOST).iter();
    let (field, another) = (hosts.next(), hosts.next());
    if another.is_some() {
        return Err(HeadProblem::HostMismatch);
    }
    if authority.is_some_and(str::is_empty) || field.is_some_and(|host| host.is_empty()) {
        return Err(HeadProblem::EmptyHost);
    }
    let host = match (authority, field) {
        (Some(authority), Some(host)) => {
            if !host.as_bytes().eq_ignore_ascii_case(authority.as_bytes()) {
                return Err(HeadProblem::HostMismatch);
            }
            authority.as_bytes()
        }
        (Some(authority), None) => authority.as_bytes(),
        (None, Some(host)) => host.as_bytes(),
        (None, None) => return Err(HeadProblem::NoHost),
    };
    let protocol = head.extensions.get::<h2::ext::Protocol>();
    let tunnel = head.method == Method::CONNECT && protocol.is_some();
    if tunnel {
        if !protocol.is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket")) {
            return Err(HeadProblem::UnknownProtocol);
        }
        let target = head.uri.path_and_query().map_or("/", |p| p.as_str());
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(target.as_bytes());
    } else if head.method == Method::CONNECT {
        out.extend_from_slice(b"CONNECT ");
        out.extend_from_slice(host);
    } else {
        out.extend_from_slice(head.method.as_str().as_bytes());
        out.push(b' ');
        let target = head.uri.path_and_query().map_or("/", |p| p.as_str());
        if target == "*" && head.method != Method::OPTIONS {
            return Err(HeadProblem::AsteriskPath);
        }
        out.extend_from_slice(target.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host);
    out.extend_from_slice(b"\r\n");
    if tunnel {
        out.extend_from_slice(b"upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-key: ");
        out.extend_from_slice(&websocket_key(fastrand::u128(..)));
        out.extend_from_slice(b"\r\n");
    }
    let mut cookies = 0;
    for cookie in head.headers.get_all(header::COOKIE) {
        out.extend_from_slice(if cookies == 0 { b"cookie: " } else { b"; " });
        out.extend_from_slice(cookie.as_bytes());
        cookies += 1;
    }
    if cookies > 0 {
        out.extend_from_slice(b"\r\n");
    }
    let mut length = None;
    for (name, value) in &head.headers {
        if let (Some(first), Some(last)) = (value.as_bytes().first(), value.as_bytes().last()) {
            if [first, last].iter().any(|b| matches!(b, b' ' | b'\t')) {
                return Err(HeadProblem::PaddedValue);
            }
        }
        if name == header::HOST || name == header::COOKIE {
            continue;
        }
        // The handshake's key is herdsman's own (the client sent none over HTTP/2).
        if tunnel && name.as_str() == "sec-websocket-key" {
            continue;
        }
        if name == header::CONTENT_LENGTH {
            let parsed = std::str::from_utf8(value.as_bytes())
                .ok()
                .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or(HeadProblem::BadLength)?;
            if length.is_some_and(|earlier| earlier != parsed) {
                return Err(HeadProblem::BadLength);
            }
            if length.is_some() {
                continue;
            }
            length = Some(parsed);
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let framing = match (length, ended) {
        _ if tunnel => BodyFraming::Tunnel,
        (Some(length), _) => BodyFraming::Length(length),
        (None, true) => BodyFraming::None,
        (None, false) => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            BodyFraming::Chunked
        }
    };
    out.extend_from_slice(b"\r\n");
    Ok(framing)
}

/// A `Sec-WebSocket-Key` (RFC 6455 §4.1): 16 random bytes in base64.
fn websocket_key(random: u128) -> [u8; 24] {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = random.to_be_bytes();
    let mut key = [b'='; 24];
    for (group, out) in bytes.chunks(3).zip(key.chunks_mut(4)) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        let chars = group.len() + 1;
        for (i, slot) in out.iter_mut().take(chars).enumerate() {
            *slot = ALPHABET[(n >> (18 - 6 * i) & 63) as usize];
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn written(request: Request<()>, ended: bool) -> (Result<BodyFraming, HeadProblem>, String) {
        let (parts, ()) = request.into_parts();
        let mut out = Vec::new();
        let framing = write_request_head(&parts, ended, &mut out);
        (framing, String::from_utf8(out).unwrap())
    }

    #[test]
    fn authority_becomes_host_and_cookies_are_joined() {
        let request = Request::get("https://example.com/a?b=1")
            .header("cookie", "a=1")
            .header("accept", "*/*")
            .header("cookie", "b=2")
            .body(())
            .unwrap();
        let (framing, head) = written(request, true);
        assert_eq!(framing, Ok(BodyFraming::None));
        assert_eq!(
            head,
            "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\ncookie: a=1; b=2\r\naccept: */*\r\n\r\n"
        );
    }

    #[test]
    fn an_extended_connect_becomes_a_websocket_handshake_of_herdsmans_own() {
        let mut request = Request::connect("https://chat.test/room?x=1")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "from-the-client")
            .header("origin", "https://chat.test")
            .body(())
            .unwrap();
        request
            .extensions_mut()
            .insert(h2::ext::Protocol::from_static("websocket"));
        let (framing, head) = written(request, false);
        assert_eq!(framing, Ok(BodyFraming::Tunnel));
        let (start, rest) = head.split_at(head.find("sec-websocket-key: ").unwrap());
        assert_eq!(
            start,
            "GET /room?x=1 HTTP/1.1\r\nhost: chat.test\r\nupgrade: websocket\r\n\
             connection: upgrade\r\n"
        );
        let key = &rest["sec-websocket-key: ".len()..][..24];
        assert!(key.ends_with("=="), "{key}");
        assert!(!head.contains("from-the-client"), "{head}");
        assert!(head.ends_with("sec-websocket-version: 13\r\norigin: https://chat.test\r\n\r\n"));
        let mut other = Request::connect("https://chat.test/").body(()).unwrap();
        other
            .extensions_mut()
            .insert(h2::ext::Protocol::from_static("connect-udp"));
        assert_eq!(written(other, false).0, Err(HeadProblem::UnknownProtocol));
    }

    #[test]
    fn a_websocket_key_is_16_bytes_in_base64() {
        // RFC 6455 §1.3's example nonce.
        let key = websocket_key(u128::from_be_bytes(*b"the sample nonce"));
        assert_eq!(&key, b"dGhlIHNhbXBsZSBub25jZQ==");
    }

    #[test]
    fn a_body_keeps_its_length_or_is_chunked() {
        let request = Request::post("https://example.com/up")
            .header("content-length", "5")
            .body(())
            .unwrap();
        let (framing, head) = written(request, false);
        assert_eq!(framing, Ok(BodyFraming::Length(5)));
        assert!(head.contains("content-length: 5\r\n"), "{head}");
        let request = Request::post("https://example.com/up").body(()).unwrap();
        let (framing, head) = written(request, false);
        assert_eq!(framing, Ok(BodyFraming::Chunked));
        assert!(
            head.ends_with("transfer-encoding: chunked\r\n\r\n"),
            "{head}"
        );
    }

    #[test]
    fn hosts_must_agree_and_one_must_be_there() {
        let agree = Request::get("https://example.com/")
            .header("host", "EXAMPLE.com")
            .body(())
            .unwrap();
        assert_eq!(written(agree, true).0, Ok(BodyFraming::None));
        let differ = Request::get("https://example.com/")
            .header("host", "other.example")
            .body(())
            .unwrap();
        assert_eq!(written(differ, true).0, Err(HeadProblem::HostMismatch));
        let host_only = Request::get("/x")
            .header("host", "h.example")
            .body(())
            .unwrap();
        let (framing, head) = written(host_only, true);
        assert_eq!(framing, Ok(BodyFraming::None));
        assert!(
            head.starts_with("GET /x HTTP/1.1\r\nhost: h.example\r\n"),
            "{head}"
        );
        let none = Request::get("/x").body(()).unwrap();
        assert_eq!(written(none, true).0, Err(HeadProblem::NoHost));
        let empty = Request::get("/x").header("host", "").body(()).unwrap();
        assert_eq!(written(empty, true).0, Err(HeadProblem::EmptyHost));
    }

    #[test]
    fn an_asterisk_path_is_for_options_alone() {
        let asterisk = Request::get("*")
            .header("host", "h.example")
            .body(())
            .unwrap();
        assert_eq!(written(asterisk, true).0, Err(HeadProblem::AsteriskPath));
        let options = Request::options("*")
            .header("host", "h.example")
            .body(())
            .unwrap();
        let (framing, head) = written(options, true);
        assert_eq!(framing, Ok(BodyFraming::None));
        assert!(head.starts_with("OPTIONS * HTTP/1.1\r\n"), "{head}");
    }

    /// What a POST (its body to come) with `name: value` is written as.
    fn with_field(name: &str, value: &str) -> Result<BodyFraming, HeadProblem> {
        let request = Request::post("https://e.example/")
            .header(name, value)
            .body(())
            .unwrap();
        written(request, false).0
    }

    #[test]
    fn values_may_not_start_or_end_with_whitespace() {
        for bad in [" a", "a ", "\ta", "a\t"] {
            assert_eq!(
                with_field("x-field", bad),
                Err(HeadProblem::PaddedValue),
                "{bad:?}"
            );
        }
        assert_eq!(with_field("x-field", "a b\tc"), Ok(BodyFraming::Chunked));
    }

    #[test]
    fn content_lengths_must_be_one_number() {
        for bad in ["", "-1", "1,2", "x"] {
            assert_eq!(
                with_field("content-length", bad),
                Err(HeadProblem::BadLength),
                "{bad:?}"
            );
        }
        let twice = Request::post("https://e.example/")
            .header("content-length", "3")
            .header("content-length", "4")
            .body(())
            .unwrap();
        assert_eq!(written(twice, false).0, Err(HeadProblem::BadLength));
    }
}
