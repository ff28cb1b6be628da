//! Request and response heads: parsed by `httparse`, then checked for what a proxy must decide
//! before forwarding a byte — body framing, persistence, Host, upgrade and 100-continue.

use std::mem::MaybeUninit;

use super::tokens::{list_contains, list_elements, trim_ows};

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
    fn from_str(method: &str) -> Method {
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
    pub target: &'b str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    pub headers: &'h [httparse::Header<'b>],
    /// Bytes of the head, including the blank line.
    pub head_len: usize,
    pub body: Body,
    /// The client wants the connection kept open after this exchange.
    pub keep_alive: bool,
    pub expect_continue: bool,
    /// `Connection: upgrade` with an `Upgrade` field: tunnel after a 101.
    pub upgrade: bool,
    pub host: Option<&'b [u8]>,
    /// The value of the Connection field(s) as sent, for removing the fields it names.
    pub connection: ConnectionTokens<'b>,
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
    pub connection: ConnectionTokens<'b>,
}

impl Response<'_, '_> {
    /// 1xx other than 101: more heads follow before the final response.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.code) && self.code != 101
    }
}

/// The Connection field values of a head (there may be several fields). Up to 8 are kept;
/// a head with more Connection fields than that is refused as malformed.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConnectionTokens<'b> {
    values: [&'b [u8]; 8],
    count: usize,
}

impl<'b> ConnectionTokens<'b> {
    fn push(&mut self, value: &'b [u8]) -> Result<(), HeadError> {
        if self.count == self.values.len() {
            return Err(HeadError::Invalid("too many Connection fields"));
        }
        self.values[self.count] = value;
        self.count += 1;
        Ok(())
    }

    /// True when some Connection field lists `token`.
    pub fn contains(&self, token: &[u8]) -> bool {
        self.values[..self.count]
            .iter()
            .any(|v| list_contains(v, token))
    }

    /// True when the field called `name` is named by Connection, and so is hop-by-hop. Framing
    /// fields and Host are never removed this way: a client that lists Content-Length in
    /// Connection must not make herdsman forward a body the server cannot delimit.
    pub fn names(&self, name: &str) -> bool {
        let protected = ["content-length", "transfer-encoding", "host"];
        !protected.iter().any(|p| name.eq_ignore_ascii_case(p)) && self.contains(name.as_bytes())
    }
}

/// Facts gathered in one pass over the header fields.
#[derive(Default)]
struct FieldFacts<'b> {
    content_length: Option<u64>,
    transfer_encoding_seen: bool,
    chunked_last: bool,
    chunked_count: usize,
    host: Option<&'b [u8]>,
    host_count: usize,
    upgrade_field: bool,
    expect_continue: bool,
    connection: ConnectionTokens<'b>,
}

fn gather_facts<'b>(headers: &[httparse::Header<'b>]) -> Result<FieldFacts<'b>, HeadError> {
    let mut facts = FieldFacts::default();
    for header in headers {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            let length = parse_content_length(header.value)
                .ok_or(HeadError::Invalid("invalid Content-Length"))?;
            if facts.content_length.is_some_and(|seen| seen != length) {
                return Err(HeadError::Invalid("differing Content-Length values"));
            }
            facts.content_length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            facts.transfer_encoding_seen = true;
            for coding in list_elements(header.value) {
                let coding_name = trim_ows(coding.split(|&b| b == b';').next().unwrap_or(b""));
                facts.chunked_last = coding_name.eq_ignore_ascii_case(b"chunked");
                if facts.chunked_last {
                    facts.chunked_count += 1;
                }
            }
        } else if name.eq_ignore_ascii_case("host") {
            facts.host = Some(header.value);
            facts.host_count += 1;
        } else if name.eq_ignore_ascii_case("connection") {
            facts.connection.push(header.value)?;
        } else if name.eq_ignore_ascii_case("upgrade") {
            facts.upgrade_field = true;
        } else if name.eq_ignore_ascii_case("expect") {
            facts.expect_continue = trim_ows(header.value).eq_ignore_ascii_case(b"100-continue");
        }
    }
    Ok(facts)
}

/// Content-Length is 1*DIGIT; a list of identical values ("5, 5") is accepted as one (RFC 9110
/// §8.6). Anything else — signs, spaces inside, overflow, differing values — is refused.
fn parse_content_length(value: &[u8]) -> Option<u64> {
    let mut result = None;
    for element in value.split(|&b| b == b',') {
        let digits = trim_ows(element);
        if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = digits
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        if result.is_some_and(|r| r != n) {
            return None;
        }
        result = Some(n);
    }
    result
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
    let mut request = httparse::Request::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut request, buf, headers)
        .map_err(map_parse_error)?;
    let head_len = match parsed {
        httparse::Status::Complete(len) if len <= max_head => len,
        httparse::Status::Complete(_) => return Err(HeadError::TooLarge),
        httparse::Status::Partial if buf.len() >= max_head => return Err(HeadError::TooLarge),
        httparse::Status::Partial => return Ok(None),
    };
    let method_text = request.method.unwrap_or("");
    let target = request.path.unwrap_or("");
    let minor_version = request.version.unwrap_or(1);
    let headers: &'h [httparse::Header<'b>] = request.headers;
    let facts = gather_facts(headers)?;

    if minor_version == 1 && facts.host_count != 1 {
        return Err(HeadError::Invalid(
            "HTTP/1.1 request needs exactly one Host field",
        ));
    }
    if facts.host_count > 1 {
        return Err(HeadError::Invalid("several Host fields"));
    }
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
        (true, None) if !facts.chunked_last || facts.chunked_count != 1 => {
            return Err(HeadError::Invalid(
                "Transfer-Encoding must end with chunked, once",
            ))
        }
        (true, None) => Body::Chunked,
        (false, Some(0)) | (false, None) => Body::None,
        (false, Some(length)) => Body::Length(length),
    };
    let method = Method::from_str(method_text);
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
        minor_version,
        headers,
        head_len,
        body,
        keep_alive,
        expect_continue: facts.expect_continue && minor_version == 1,
        upgrade,
        host: facts.host,
        connection: facts.connection,
    }))
}

/// Parses a response head to a request made with `method`. `Ok(None)`: incomplete.
pub fn parse_response<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
    method: Method,
    max_head: usize,
) -> Result<Option<Response<'h, 'b>>, HeadError> {
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut response, buf, headers)
        .map_err(map_parse_error)?;
    let head_len = match parsed {
        httparse::Status::Complete(len) if len <= max_head => len,
        httparse::Status::Complete(_) => return Err(HeadError::TooLarge),
        httparse::Status::Partial if buf.len() >= max_head => return Err(HeadError::TooLarge),
        httparse::Status::Partial => return Ok(None),
    };
    let code = response.code.unwrap_or(0);
    let reason = response.reason.unwrap_or("");
    let minor_version = response.version.unwrap_or(1);
    let headers: &'h [httparse::Header<'b>] = response.headers;
    let facts = gather_facts(headers)?;

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
            request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Ok(Some((Body::Chunked, true, false)))
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
        invalid("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
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
