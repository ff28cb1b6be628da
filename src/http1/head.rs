//! Request and response heads: read by `head/scan.rs` (httparse's grammar, in one pass), then
//! checked for what a proxy must decide before forwarding a byte — the version, the target's
//! form, body framing, persistence, Host, upgrade and 100-continue. What the header fields say is
//! taken field by field in `head/fields.rs`; the target's form and which hosts may stand in it or
//! in Host, `head/target.rs`.

mod fields;
mod lookup;
mod scan;
mod target;

use std::mem::MaybeUninit;

pub use fields::ConnectionTokens;
pub use lookup::find_cookie;
use target::{is_valid_host, read_target};

/// How a message's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body at all.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding, ending with the last chunk and trailer section.
    Chunked,
    /// Everything until the server closes (responses only).
    UntilClose,
}

/// Why a head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// The head is larger than allowed (431 for requests), or has too many fields.
    TooLarge,
    /// Malformed or ambiguous; the text says what, for the error body and the log.
    Invalid(&'static str),
    /// Well-formed, but asks for something herdsman does not implement (501): a transfer coding
    /// other than chunked (RFC 9112 §6.1).
    NotImplemented(&'static str),
    /// An HTTP major version other than 1, such as `HTTP/2.0` or `HTTP/0.9` in the request line
    /// (505, RFC 9110 §15.6.6).
    VersionNotSupported,
    /// `HTTP/1.2` to `HTTP/1.9`: to be read as HTTP/1.1, the highest minor version herdsman
    /// speaks (RFC 9110 §2.5). httparse refuses them, so the caller rewrites the minor digit at
    /// `digit_at` in place ([`read_as_http11`]) and parses again: the head is never copied, and
    /// the usual head pays nothing for the rare one.
    LaterMinorVersion { digit_at: usize },
}

/// The request methods herdsman treats specially; all others are `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Trace,
    Connect,
    Other,
}

impl Method {
    /// The method a request line names (`Other` for any not listed).
    pub fn named(method: &str) -> Method {
        match method {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "CONNECT" => Method::Connect,
            _ => Method::Other,
        }
    }

    /// RFC 9110 §9.2.2: sending it twice has the same effect as once, so it may be retried.
    pub fn is_idempotent(self) -> bool {
        matches!(
            self,
            Method::Get
                | Method::Head
                | Method::Put
                | Method::Delete
                | Method::Options
                | Method::Trace
        )
    }
}

/// A parsed, validated request head. Borrows the read buffer and the header array.
#[derive(Debug)]
pub struct Request<'h, 'b> {
    pub method: Method,
    pub method_text: &'b str,
    /// The request target as received (what the access log shows).
    pub target: &'b str,
    /// The target as it is forwarded: `target` itself in origin-form (`/path?query`) and
    /// asterisk-form (`*`, OPTIONS only); in absolute-form (`http://host/path`), what follows the
    /// authority, which may be empty or start with `?` (then the server is sent `/` before it;
    /// see [`Request::path`]).
    pub forwarded_target: &'b str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1 (and for HTTP/1.2 to 1.9, read as 1.1).
    pub minor_version: u8,
    pub headers: &'h [httparse::Header<'b>],
    /// Bytes of the head, including the blank line.
    pub head_len: usize,
    pub body: Body,
    /// The Content-Length, when the request has one (`Body::None` for 0 does not say so).
    pub content_length: Option<u64>,
    /// The client wants the connection kept open after this exchange.
    pub keep_alive: bool,
    pub expect_continue: bool,
    /// `Connection: upgrade` with an `Upgrade` field: the client asks to switch protocols. Which
    /// of those it offers go on to the server is the listener's choice
    /// (`config::UpgradeProtocols`, `http1::upgrade`).
    pub upgrade: bool,
    /// The host the request is for: an absolute-form target's authority, which wins over the
    /// Host field (RFC 9112 §3.2.2), else the Host field (validated); `None` for an HTTP/1.0
    /// request with neither.
    pub host: Option<&'b [u8]>,
    /// The value of the Connection field(s) as sent, for removing the fields it names.
    pub connection: ConnectionTokens<'h, 'b>,
}

impl Request<'_, '_> {
    /// A gRPC call (a POST of `application/grpc` or `application/grpc+…`): never buffered either
    /// way, its errors answered as gRPC statuses; with its deadline (`grpc-timeout`), if it has
    /// one. `None` for any other request (read only for a POST).
    pub fn grpc(&self) -> Option<GrpcCall> {
        if self.method != Method::Post {
            return None;
        }
        let mut call = None;
        let mut timeout = None;
        for field in self.headers {
            if field.name.eq_ignore_ascii_case("content-type") {
                let media = field.value.trim_ascii();
                let grpc = media.len() >= 16
                    && media[..16].eq_ignore_ascii_case(b"application/grpc")
                    && matches!(media.get(16), None | Some(b'+' | b';'));
                if !grpc {
                    return None;
                }
                call = Some(());
            } else if field.name.eq_ignore_ascii_case("grpc-timeout") {
                timeout = grpc_timeout(field.value);
            }
        }
        call.map(|()| GrpcCall { timeout })
    }

    /// The path the request is for, as routes match it: the forwarded target, `/` for an
    /// absolute-form target with no path.
    pub fn path(&self) -> &[u8] {
        let target = self.forwarded_target.as_bytes();
        match target.first() {
            None | Some(b'?') => b"/",
            Some(_) => target,
        }
    }
}

/// What herdsman keeps of a gRPC call's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcCall {
    /// Its `grpc-timeout`: how long the client waits for the call at most.
    pub timeout: Option<std::time::Duration>,
}

/// A `grpc-timeout` value (gRPC over HTTP/2: 1 to 8 digits and a unit, `H`, `M`, `S`, `m`, `u`
/// or `n`); `None` if it is not one.
fn grpc_timeout(value: &[u8]) -> Option<std::time::Duration> {
    use std::time::Duration;
    let (&unit, digits) = value.trim_ascii().split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// A parsed, validated response head.
#[derive(Debug)]
pub struct Response<'h, 'b> {
    pub code: u16,
    pub reason: &'b str,
    pub minor_version: u8,
    pub headers: &'h [httparse::Header<'b>],
    pub head_len: usize,
    pub body: Body,
    /// The server will keep the connection open after this response.
    pub keep_alive: bool,
    /// The response has Transfer-Encoding, which overrides any Content-Length: that field must
    /// not be passed on, or a client trusting it would lose its place in the connection.
    pub transfer_encoding: bool,
    pub connection: ConnectionTokens<'h, 'b>,
}

impl Response<'_, '_> {
    /// 1xx other than 101: more heads follow before the final response.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.code) && self.code != 101
    }

    /// The response is a stream its client must get as it comes, not when a buffer fills: an
    /// event stream (`Content-Type: text/event-stream`), a gRPC response (`application/grpc`,
    /// whose messages a streaming call waits for one by one), or a server that says so with
    /// nginx's `X-Accel-Buffering: no`.
    pub fn asks_to_stream(&self) -> bool {
        self.headers.iter().any(|header| {
            let value = header.value.trim_ascii();
            if header.name.eq_ignore_ascii_case("content-type") {
                let media = value.split(|&b| b == b';').next().unwrap_or_default();
                let media = media.trim_ascii();
                let grpc = media.len() >= 16
                    && media[..16].eq_ignore_ascii_case(b"application/grpc")
                    && matches!(media.get(16), None | Some(b'+'));
                grpc || media.eq_ignore_ascii_case(b"text/event-stream")
            } else {
                header.name.eq_ignore_ascii_case("x-accel-buffering")
                    && value.eq_ignore_ascii_case(b"no")
            }
        })
    }
}

fn map_parse_error(error: httparse::Error) -> HeadError {
    match error {
        httparse::Error::TooManyHeaders => HeadError::TooLarge,
        httparse::Error::HeaderName => HeadError::Invalid("invalid header name"),
        httparse::Error::HeaderValue => HeadError::Invalid("invalid header value"),
        httparse::Error::NewLine => HeadError::Invalid("invalid line ending"),
        httparse::Error::Status => HeadError::Invalid("invalid status"),
        httparse::Error::Token => HeadError::Invalid("invalid method or token"),
        httparse::Error::Version => HeadError::Invalid("invalid HTTP version"),
    }
}

/// Parses a request head at the start of `buf`. `Ok(None)`: incomplete, read more (unless
/// `buf` already holds `max_head` bytes, which is `TooLarge`).
pub fn parse_request<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    max_head: usize,
) -> Result<Option<Request<'h, 'b>>, HeadError> {
    let scanned = match scan::request(buf, headers) {
        Err(httparse::Error::Version) => {
            return match refused_version(buf) {
                Some(error) => Err(error),
                None if buf.len() >= max_head => Err(HeadError::TooLarge),
                None => Ok(None),
            }
        }
        scanned => scanned.map_err(map_parse_error)?,
    };
    let request = match scanned {
        Some(request) if request.fields.head_len <= max_head => request,
        Some(_) => return Err(HeadError::TooLarge),
        None if buf.len() >= max_head => return Err(HeadError::TooLarge),
        None => return Ok(None),
    };
    let (method_text, target) = (request.method, request.target);
    let minor_version = request.minor_version;
    let (headers, head_len) = (request.fields.fields, request.fields.head_len);
    let facts = request.fields.facts?;

    if minor_version == 1 && facts.host_count != 1 {
        return Err(HeadError::Invalid(
            "HTTP/1.1 request needs exactly one Host field",
        ));
    }
    if facts.host_count > 1 {
        return Err(HeadError::Invalid("several Host fields"));
    }
    let method = Method::named(method_text);
    let (forwarded_target, target_host) = read_target(method, target)?;
    let host = match (target_host, facts.host) {
        (Some(authority), _) => Some(authority),
        (None, Some(field)) if !is_valid_host(field) => {
            return Err(HeadError::Invalid("invalid Host"))
        }
        (None, field) => field,
    };
    let body = match (facts.transfer_encoding_seen, facts.content_length) {
        (true, Some(_)) => {
            return Err(HeadError::Invalid(
                "both Content-Length and Transfer-Encoding",
            ))
        }
        (true, None) if minor_version == 0 => {
            return Err(HeadError::Invalid(
                "Transfer-Encoding in an HTTP/1.0 request",
            ))
        }
        // RFC 9112 §6.3: without chunked last, the body's end cannot be found: 400.
        (true, None) if !facts.chunked_last || facts.chunked_count != 1 => {
            return Err(HeadError::Invalid(
                "Transfer-Encoding must end with chunked, once",
            ))
        }
        // Other codings before chunked (gzip, chunked), or parameters on it: servers differ on
        // what those mean, and herdsman would have to forward them blind (RFC 9112 §6.1: 501).
        (true, None) if facts.coding_count != 1 || !facts.plain_chunked_last => {
            return Err(HeadError::NotImplemented(
                "transfer codings other than chunked are not supported",
            ))
        }
        (true, None) => Body::Chunked,
        (false, Some(0)) | (false, None) => Body::None,
        (false, Some(length)) => Body::Length(length),
    };
    let keep_alive = if minor_version == 1 {
        !facts.connection.contains(b"close")
    } else {
        facts.connection.contains(b"keep-alive")
    };
    let upgrade =
        minor_version == 1 && facts.upgrade_field && facts.connection.contains(b"upgrade");
    Ok(Some(Request {
        method,
        method_text,
        target,
        forwarded_target,
        minor_version,
        headers,
        head_len,
        body,
        content_length: facts.content_length,
        keep_alive,
        expect_continue: facts.expect_continue && minor_version == 1,
        upgrade,
        host,
        connection: facts.connection,
    }))
}

/// What a request line whose version httparse refused gets: `LaterMinorVersion` for
/// `HTTP/1.2` to `HTTP/1.9`, `VersionNotSupported` for another major version, `Invalid` for
/// anything else; `None` while what has come of the version could still become one.
fn refused_version(buf: &[u8]) -> Option<HeadError> {
    let line_end = buf.iter().position(|&b| b == b'\r' || b == b'\n');
    let line = &buf[..line_end.unwrap_or(buf.len())];
    let version_at = line
        .iter()
        .rposition(|&b| b == b' ')
        .map_or(line.len(), |space| space + 1);
    let version = &line[version_at..];
    let pattern = b"HTTP/0.0";
    let fits = |(i, &b): (usize, &u8)| match pattern[i] {
        b'0' => b.is_ascii_digit(),
        expected => b == expected,
    };
    if version.len() == pattern.len() && version.iter().enumerate().all(fits) {
        return Some(match (version[5], version[7]) {
            (b'1', b'2'..=b'9') => HeadError::LaterMinorVersion {
                digit_at: version_at + 7,
            },
            (b'1', _) => HeadError::Invalid("invalid HTTP version"),
            _ => HeadError::VersionNotSupported,
        });
    }
    let unfinished = line_end.is_none() && version.len() < pattern.len();
    if unfinished && version.iter().enumerate().all(fits) {
        return None;
    }
    Some(HeadError::Invalid("invalid HTTP version"))
}

/// Makes the head at the front of `buf` say HTTP/1.1 where it said a later HTTP/1 minor version
/// (see [`HeadError::LaterMinorVersion`]): one byte, in place.
pub fn read_as_http11(buf: &mut [u8], digit_at: usize) {
    if let Some(digit) = buf.get_mut(digit_at) {
        *digit = b'1';
    }
}

/// Parses a response head to a request made with `method`. `Ok(None)`: incomplete.
pub fn parse_response<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    method: Method,
    max_head: usize,
) -> Result<Option<Response<'h, 'b>>, HeadError> {
    let response = match scan::response(buf, headers).map_err(map_parse_error)? {
        Some(response) if response.fields.head_len <= max_head => response,
        Some(_) => return Err(HeadError::TooLarge),
        None if buf.len() >= max_head => return Err(HeadError::TooLarge),
        None => return Ok(None),
    };
    let (code, reason) = (response.code, response.reason);
    let minor_version = response.minor_version;
    let (headers, head_len) = (response.fields.fields, response.fields.head_len);
    let facts = response.fields.facts?;

    // RFC 9112 §6.3, in order: no body for HEAD, 1xx, 204, 304; then Transfer-Encoding (chunked
    // last, else read until close), which overrides Content-Length; then Content-Length.
    let body = if method == Method::Head || code < 200 || code == 204 || code == 304 {
        Body::None
    } else if facts.transfer_encoding_seen {
        if facts.chunked_last && facts.chunked_count == 1 {
            Body::Chunked
        } else {
            Body::UntilClose
        }
    } else {
        match facts.content_length {
            Some(length) => Body::Length(length),
            None => Body::UntilClose,
        }
    };
    let persistent = if minor_version == 1 {
        !facts.connection.contains(b"close")
    } else {
        facts.connection.contains(b"keep-alive")
    };
    Ok(Some(Response {
        code,
        reason,
        minor_version,
        headers,
        head_len,
        body,
        keep_alive: persistent && body != Body::UntilClose,
        transfer_encoding: facts.transfer_encoding_seen,
        connection: facts.connection,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> Result<Option<(Body, bool, bool)>, HeadError> {
        let mut headers = [const { MaybeUninit::uninit() }; 32];
        parse_request(text.as_bytes(), &mut headers, 8192)
            .map(|r| r.map(|r| (r.body, r.keep_alive, r.upgrade)))
    }

    fn invalid(text: &str) -> &'static str {
        match request(text) {
            Err(HeadError::Invalid(why)) => why,
            other => panic!("expected invalid, got {other:?} for {text:?}"),
        }
    }

    #[test]
    fn simple_requests_and_persistence() {
        assert_eq!(
            request("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            Ok(Some((Body::None, true, false)))
        );
        assert_eq!(
            request("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"),
            Ok(Some((Body::None, false, false)))
        );
        assert_eq!(
            request("GET / HTTP/1.0\r\n\r\n"),
            Ok(Some((Body::None, false, false)))
        );
        assert_eq!(
            request("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"),
            Ok(Some((Body::None, true, false)))
        );
        assert_eq!(request("GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
    }

    #[test]
    fn body_framing() {
        assert_eq!(
            request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n"),
            Ok(Some((Body::Length(12), true, false)))
        );
        assert_eq!(
            request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 7, 7\r\n\r\n"),
            Ok(Some((Body::Length(7), true, false)))
        );
        assert_eq!(
            request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            Ok(Some((Body::Chunked, true, false)))
        );
    }

    #[test]
    fn transfer_codings_other_than_chunked_are_not_implemented() {
        for coding in ["gzip, chunked", "chunked;ext=1", "identity, chunked"] {
            let text = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {coding}\r\n\r\n");
            assert_eq!(
                request(&text),
                Err(HeadError::NotImplemented(
                    "transfer codings other than chunked are not supported"
                )),
                "{coding}"
            );
        }
        // Not ending in chunked, or chunked twice, leaves the body's end unknown: 400 as before.
        invalid("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n");
        invalid("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
    }

    #[test]
    fn later_http1_minor_versions_are_read_as_http11_and_other_majors_refused() {
        let mut text = b"GET / HTTP/1.2\r\nHost: a\r\n\r\n".to_vec();
        let digit_at = match request(std::str::from_utf8(&text).unwrap()) {
            Err(HeadError::LaterMinorVersion { digit_at }) => digit_at,
            other => panic!("{other:?}"),
        };
        assert_eq!(digit_at, 13);
        read_as_http11(&mut text, digit_at);
        assert_eq!(text, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        for refused in ["HTTP/2.0", "HTTP/0.9", "HTTP/3.0"] {
            let text = format!("GET / {refused}\r\nHost: a\r\n\r\n");
            assert_eq!(
                request(&text),
                Err(HeadError::VersionNotSupported),
                "{refused}"
            );
        }
        for invalid_version in ["HTTP/2", "HTTP/1.x", "FTP/1.1", "HTTP/1.2.0"] {
            let text = format!("GET / {invalid_version}\r\nHost: a\r\n\r\n");
            assert_eq!(invalid(&text), "invalid HTTP version", "{invalid_version}");
        }
        // httparse takes HTTP/1.1 and then finds no line end.
        invalid("GET / HTTP/1.10\r\nHost: a\r\n\r\n");
        // A version cut short by the end of what arrived so far waits for the rest.
        assert_eq!(request("GET / HTTP/2"), Ok(None));
        assert_eq!(
            request("GET / HTTP/2.0"),
            Err(HeadError::VersionNotSupported)
        );
    }

    fn target_and_host(text: &str) -> (String, Option<String>) {
        let mut headers = [const { MaybeUninit::uninit() }; 32];
        let r = parse_request(text.as_bytes(), &mut headers, 8192)
            .unwrap()
            .unwrap();
        let host = r.host.map(|h| String::from_utf8_lossy(h).into_owned());
        (r.forwarded_target.to_string(), host)
    }

    #[test]
    fn request_targets_in_each_form() {
        let pair = |t: &str, h: Option<&str>| (t.to_string(), h.map(str::to_string));
        assert_eq!(
            target_and_host("GET /a?b HTTP/1.1\r\nHost: x\r\n\r\n"),
            pair("/a?b", Some("x"))
        );
        // Absolute-form: its authority is the host, whatever the Host field says.
        assert_eq!(
            target_and_host("GET http://y:8080/a?b HTTP/1.1\r\nHost: x\r\n\r\n"),
            pair("/a?b", Some("y:8080"))
        );
        assert_eq!(
            target_and_host("GET HTTPS://y HTTP/1.0\r\n\r\n"),
            pair("", Some("y"))
        );
        assert_eq!(
            target_and_host("OPTIONS http://y HTTP/1.1\r\nHost: y\r\n\r\n"),
            pair("*", Some("y"))
        );
        assert_eq!(
            target_and_host("OPTIONS * HTTP/1.1\r\nHost: y\r\n\r\n"),
            pair("*", Some("y"))
        );
        assert_eq!(
            target_and_host("GET http://[::1]:80/ HTTP/1.1\r\nHost: x\r\n\r\n"),
            pair("/", Some("[::1]:80"))
        );
        let refused = [
            (
                "GET * HTTP/1.1\r\nHost: x\r\n\r\n",
                "an asterisk target is for OPTIONS only",
            ),
            (
                "GET http://u@y/ HTTP/1.1\r\nHost: x\r\n\r\n",
                "userinfo in the request target",
            ),
            (
                "GET http:///a HTTP/1.1\r\nHost: x\r\n\r\n",
                "invalid host in the request target",
            ),
            (
                "GET http://y#f HTTP/1.1\r\nHost: x\r\n\r\n",
                "invalid host in the request target",
            ),
            (
                "GET ftp://y/ HTTP/1.1\r\nHost: x\r\n\r\n",
                "invalid request target",
            ),
            (
                "GET a/b HTTP/1.1\r\nHost: x\r\n\r\n",
                "invalid request target",
            ),
            ("GET / HTTP/1.1\r\nHost: a@x\r\n\r\n", "invalid Host"),
            ("GET / HTTP/1.1\r\nHost: x/y\r\n\r\n", "invalid Host"),
            ("GET / HTTP/1.1\r\nHost: x:8o\r\n\r\n", "invalid Host"),
            ("GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", "invalid Host"),
        ];
        for (text, why) in refused {
            assert_eq!(invalid(text), why, "{text:?}");
        }
        // CONNECT's authority-form is left to the caller, which answers 501.
        assert_eq!(
            target_and_host("CONNECT y:443 HTTP/1.1\r\nHost: y:443\r\n\r\n"),
            pair("y:443", Some("y:443"))
        );
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        invalid(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        invalid("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n");
        invalid("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\n");
        invalid("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -3\r\n\r\n");
        invalid("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n");
        invalid("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n");
        invalid("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
        invalid("GET / HTTP/1.1\r\n\r\n");
        invalid("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
        // obs-fold and bad characters come from httparse
        assert!(request("GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n").is_err());
        assert!(request("GET / HTTP/1.1\r\nHost: a\r\nX(y): z\r\n\r\n").is_err());
        assert!(request("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n").is_err());
    }

    #[test]
    fn oversized_heads() {
        let mut headers = [const { MaybeUninit::uninit() }; 4];
        let many = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\n\r\n";
        assert_eq!(
            parse_request(many.as_bytes(), &mut headers, 8192).unwrap_err(),
            HeadError::TooLarge
        );
        let mut headers = [const { MaybeUninit::uninit() }; 4];
        let partial = "GET / HTTP/1.1\r\nHost: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        assert_eq!(
            parse_request(partial.as_bytes(), &mut headers, 20).unwrap_err(),
            HeadError::TooLarge
        );
    }

    #[test]
    fn upgrade_needs_both_fields() {
        let text =
            "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
        assert_eq!(request(text), Ok(Some((Body::None, true, true))));
        let text = "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n";
        assert_eq!(request(text), Ok(Some((Body::None, true, false))));
    }

    fn response(text: &str, method: Method) -> (u16, Body, bool) {
        let mut headers = [const { MaybeUninit::uninit() }; 32];
        let r = parse_response(text.as_bytes(), &mut headers, method, 8192)
            .unwrap()
            .unwrap();
        (r.code, r.body, r.keep_alive)
    }

    #[test]
    fn response_framing() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(response(ok, Method::Get), (200, Body::Length(5), true));
        assert_eq!(response(ok, Method::Head), (200, Body::None, true));
        let no_content = "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(response(no_content, Method::Get), (204, Body::None, true));
        let not_modified = "HTTP/1.1 304 Not Modified\r\n\r\n";
        assert_eq!(response(not_modified, Method::Get), (304, Body::None, true));
        let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(response(chunked, Method::Get), (200, Body::Chunked, true));
        // A server's other codings before chunked stay its business: chunked still frames it.
        let gzipped = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(response(gzipped, Method::Get), (200, Body::Chunked, true));
        let until_close = "HTTP/1.1 200 OK\r\n\r\n";
        assert_eq!(
            response(until_close, Method::Get),
            (200, Body::UntilClose, false)
        );
        let old = "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n";
        assert_eq!(response(old, Method::Get), (200, Body::Length(1), false));
        let closing = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n";
        assert_eq!(
            response(closing, Method::Get),
            (200, Body::Length(1), false)
        );
    }

    #[test]
    fn connection_cannot_strip_framing() {
        let mut headers = [const { MaybeUninit::uninit() }; 8];
        let text = "POST / HTTP/1.1\r\nHost: a\r\nConnection: content-length, x-secret\r\nContent-Length: 3\r\n\r\n";
        let r = parse_request(text.as_bytes(), &mut headers, 8192)
            .unwrap()
            .unwrap();
        assert!(!r.connection.names("Content-Length"));
        assert!(r.connection.names("X-Secret"));
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        fn token() -> impl Strategy<Value = String> {
            "[A-Za-z][A-Za-z0-9-]{0,15}"
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Arbitrary bytes never panic the parser, and a complete head never claims more
            /// bytes than it was given.
            #[test]
            fn arbitrary_bytes_are_safe(input in proptest::collection::vec(any::<u8>(), 0..600)) {
                let mut headers = [const { MaybeUninit::uninit() }; 32];
                if let Ok(Some(request)) = parse_request(&input, &mut headers, 4096) {
                    prop_assert!(request.head_len <= input.len());
                }
            }

            /// A well-formed request parses with the framing it declares, and any prefix of it
            /// is incomplete rather than wrong.
            #[test]
            fn generated_requests_parse_and_prefixes_wait(
                method in prop::sample::select(vec!["GET", "POST", "PUT", "DELETE", "PATCH"]),
                path in "/[a-z0-9/._~-]{0,40}",
                fields in proptest::collection::vec((token(), "[ -~]{0,30}"), 0..10),
                length in proptest::option::of(0u64..1_000_000),
            ) {
                let mut text = format!("{method} {path} HTTP/1.1\r\nHost: example.test\r\n");
                for (name, value) in &fields {
                    let lower = name.to_ascii_lowercase();
                    if ["host", "content-length", "transfer-encoding", "connection", "upgrade", "expect"].contains(&lower.as_str()) {
                        continue;
                    }
                    text.push_str(&format!("{name}: {}\r\n", value.trim()));
                }
                if let Some(length) = length {
                    text.push_str(&format!("Content-Length: {length}\r\n"));
                }
                text.push_str("\r\n");
                let bytes = text.as_bytes();
                let mut headers = [const { MaybeUninit::uninit() }; 32];
                let request = parse_request(bytes, &mut headers, 8192).unwrap().unwrap();
                prop_assert_eq!(request.head_len, bytes.len());
                let expected = match length { None | Some(0) => Body::None, Some(n) => Body::Length(n) };
                prop_assert_eq!(request.body, expected);
                prop_assert!(request.keep_alive);
                for cut in [1, bytes.len() / 2, bytes.len() - 1] {
                    let mut headers = [const { MaybeUninit::uninit() }; 32];
                    prop_assert!(parse_request(&bytes[..cut], &mut headers, 8192).unwrap().is_none());
                }
            }
        }
    }
}
