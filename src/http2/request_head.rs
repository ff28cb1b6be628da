//! An HTTP/2 request's head (RFC 9113 §8.3) written, field by field as HPACK decodes it, as the
//! HTTP/1.1 head the exchange reads, so that a stream is routed, checked, forwarded and logged
//! exactly as an HTTP/1.1 request is: the method and `:path` as the request line (`:authority`
//! alone for CONNECT), `:authority` as Host (a Host field beside it must name the same host),
//! cookie fields joined into one (§8.2.3), the other fields as they came, and the body's framing:
//! its `content-length` when it has one, chunked when it has a body of unknown length, none when
//! the HEADERS frame ended the stream. Whatever §8 calls malformed — a field name with uppercase
//! or a character no token has, a value with NUL, CR or LF or padded with whitespace,
//! connection-specific fields, `te` other than `trailers`, pseudo-fields unknown, repeated,
//! missing, or after a regular field — is a `HeadProblem`, and the stream is reset with
//! PROTOCOL_ERROR (§8.1.1), never answered. A trailer section (`Trailers`) is checked the same way
//! and written as the chunked body's trailer fields.
//!
//! An extended CONNECT (RFC 8441: `:protocol = websocket`) is written as the HTTP/1.1 WebSocket
//! handshake a server expects (§5): a GET of `:path` with `Upgrade: websocket`, `Connection:
//! upgrade` and a `Sec-WebSocket-Key` of its own (HTTP/2 has none); its DATA frames are the
//! tunnel's bytes (`BodyFraming::Tunnel`), and the server's 101 goes back as a 200
//! (`response::ResponseReader::for_tunnel`).

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
    /// §8.3.1: `:path` is origin-form (a `/` first) or `*`.
    #[error(":path neither starts with / nor is *")]
    PathForm,
    /// §8.2.1: a value must not start or end with whitespace (SP or HTAB).
    #[error("a field value starts or ends with whitespace")]
    PaddedValue,
    /// §8.2.1: no NUL, CR or LF in a value.
    #[error("a field value holds NUL, CR or LF")]
    BadValue,
    /// §8.2.1: a name is lowercase token characters.
    #[error("a field name is empty, has uppercase or a character no token has")]
    BadName,
    /// §8.2.2: `connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`.
    #[error("a connection-specific field")]
    ConnectionSpecific,
    /// §8.2.2: `te` may say `trailers` alone.
    #[error("te other than trailers")]
    BadTe,
    /// §8.3: a pseudo-field no request has (`:status` among them), or one repeated.
    #[error("an unknown or repeated pseudo-field")]
    BadPseudo,
    /// §8.3: pseudo-fields come before the regular fields, and never in trailers.
    #[error("a pseudo-field after a regular field or in trailers")]
    LatePseudo,
    /// §8.3.1: `:method`, `:scheme` and a non-empty `:path`, or CONNECT's `:authority` alone.
    #[error("a required pseudo-field missing, or one CONNECT must not have")]
    MissingPseudo,
    /// `:method`, `:scheme`, `:path` or `:authority` with bytes no request line or Host carries.
    #[error("a pseudo-field with a character it cannot hold")]
    BadPseudoValue,
    /// RFC 8441 §4: an extended CONNECT for a protocol herdsman cannot carry (WebSocket alone).
    #[error("an extended CONNECT for a protocol other than websocket")]
    UnknownProtocol,
}

/// The pseudo-fields, kept while they come (they precede every regular field).
#[derive(Debug, Default, Clone, Copy)]
struct Pseudo {
    method: Option<(u16, u16)>,
    scheme: Option<(u16, u16)>,
    authority: Option<(u16, u16)>,
    path: Option<(u16, u16)>,
    protocol: Option<(u16, u16)>,
}

/// Writes one request's head as HPACK decodes its fields. Reused by a connection from stream to
/// stream: its buffers keep their capacity.
#[derive(Debug, Default)]
pub struct RequestHead {
    /// The HTTP/1.1 head being written.
    pub out: Vec<u8>,
    /// The pseudo-fields' bytes (ranges in `pseudo`), then the joined cookie value's.
    scratch: Vec<u8>,
    pseudo: Pseudo,
    /// The request line (and Host, when `:authority` gave it) is written.
    line_written: bool,
    /// Whether the host came from `:authority` (a Host field must then agree), or a Host field
    /// was written.
    host_from_authority: bool,
    host_field_seen: bool,
    /// Where the cookie values begin in `scratch`, once one came.
    cookies_at: Option<usize>,
    length: Option<u64>,
    tunnel: bool,
    /// The first problem found: later fields are still decoded (HPACK's table must stay whole)
    /// but not written.
    problem: Option<HeadProblem>,
}

impl RequestHead {
    /// Begins a new head (the buffers emptied, their capacity kept).
    pub fn begin(&mut self) {
        self.out.clear();
        self.scratch.clear();
        self.pseudo = Pseudo::default();
        self.line_written = false;
        self.host_from_authority = false;
        self.host_field_seen = false;
        self.cookies_at = None;
        self.length = None;
        self.tunnel = false;
        self.problem = None;
    }

    /// The method, once the request line is written (`GET` for an extended CONNECT, whose
    /// handshake is a GET).
    pub fn method(&self) -> &[u8] {
        match self.out.iter().position(|&b| b == b' ') {
            Some(end) if self.line_written => &self.out[..end],
            _ => b"",
        }
    }

    fn fail(&mut self, problem: HeadProblem) {
        if self.problem.is_none() {
            self.problem = Some(problem);
        }
    }

    fn range(&self, range: Option<(u16, u16)>) -> Option<&[u8]> {
        range.map(|(start, end)| &self.scratch[start as usize..end as usize])
    }

    /// Takes one decoded field.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.problem.is_some() {
            return;
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            return self.pseudo_field(pseudo, value);
        }
        if let Err(problem) = check_field(name, value) {
            return self.fail(problem);
        }
        if !self.line_written {
            if let Err(problem) = self.write_line() {
                return self.fail(problem);
            }
        }
        match name {
            b"host" => self.host_field(value),
            b"cookie" => {
                match self.cookies_at {
                    None => self.cookies_at = Some(self.scratch.len()),
                    Some(_) => self.scratch.extend_from_slice(b"; "),
                }
                self.scratch.extend_from_slice(value);
            }
            b"content-length" => {
                let parsed = parse_length(value);
                match (parsed, self.length) {
                    (None, _) => self.fail(HeadProblem::BadLength),
                    (Some(n), Some(earlier)) if n != earlier => self.fail(HeadProblem::BadLength),
                    (Some(_), Some(_)) => {}
                    (Some(n), None) => {
                        self.length = Some(n);
                        self.put(name, value);
                    }
                }
            }
            // The handshake's key is herdsman's own (the client sent none over HTTP/2).
            b"sec-websocket-key" if self.tunnel => {}
            _ => self.put(name, value),
        }
    }

    fn put(&mut self, name: &[u8], value: &[u8]) {
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
    }

    fn host_field(&mut self, value: &[u8]) {
        if self.host_field_seen {
            return self.fail(HeadProblem::HostMismatch);
        }
        self.host_field_seen = true;
        if value.is_empty() {
            return self.fail(HeadProblem::EmptyHost);
        }
        if self.host_from_authority {
            let authority = self.range(self.pseudo.authority).unwrap_or_default();
            if !authority.eq_ignore_ascii_case(value) {
                self.fail(HeadProblem::HostMismatch);
            }
            return;
        }
        if !value.iter().all(|&b| b.is_ascii_graphic()) {
            return self.fail(HeadProblem::BadPseudoValue);
        }
        self.put(b"host", value);
    }

    fn pseudo_field(&mut self, pseudo: &[u8], value: &[u8]) {
        if self.line_written {
            return self.fail(HeadProblem::LatePseudo);
        }
        let slot = match pseudo {
            b"method" => &mut self.pseudo.method,
            b"scheme" => &mut self.pseudo.scheme,
            b"authority" => &mut self.pseudo.authority,
            b"path" => &mut self.pseudo.path,
            b"protocol" => &mut self.pseudo.protocol,
            _ => return self.fail(HeadProblem::BadPseudo),
        };
        if slot.is_some() {
            return self.fail(HeadProblem::BadPseudo);
        }
        // Request lines and Host carry visible ASCII alone (an empty :authority is refused
        // by its own rule, an empty :path by its own).
        if !value.iter().all(|&b| b.is_ascii_graphic()) || self.scratch.len() + value.len() > 0xffff
        {
            return self.fail(HeadProblem::BadPseudoValue);
        }
        let start = self.scratch.len() as u16;
        self.scratch.extend_from_slice(value);
        *slot = Some((start, self.scratch.len() as u16));
    }

    /// The request line, and Host when `:authority` gives it: written when the first regular
    /// field comes, or at the end.
    fn write_line(&mut self) -> Result<(), HeadProblem> {
        self.line_written = true;
        let scratch = std::mem::take(&mut self.scratch);
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        let written = write_line(&self.pseudo, &scratch, &mut out);
        if let Ok(line) = written {
            self.host_from_authority = line.has_authority;
            self.tunnel = line.tunnel;
        }
        self.scratch = scratch;
        self.out = out;
        written.map(|_| ())
    }

    /// Ends the head; `ended` says the HEADERS frame ended the stream. The head is in `out`.
    pub fn finish(&mut self, ended: bool) -> Result<BodyFraming, HeadProblem> {
        if !self.line_written && self.problem.is_none() {
            if let Err(problem) = self.write_line() {
                self.fail(problem);
            }
        }
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        if !self.host_from_authority && !self.host_field_seen {
            return Err(HeadProblem::NoHost);
        }
        if let Some(at) = self.cookies_at {
            self.out.extend_from_slice(b"cookie: ");
            self.out.extend_from_slice(&self.scratch[at..]);
            self.out.extend_from_slice(b"\r\n");
        }
        let framing = match (self.length, ended) {
            _ if self.tunnel => BodyFraming::Tunnel,
            (Some(length), _) => BodyFraming::Length(length),
            (None, true) => BodyFraming::None,
            (None, false) => {
                self.out
                    .extend_from_slice(b"transfer-encoding: chunked\r\n");
                BodyFraming::Chunked
            }
        };
        self.out.extend_from_slice(b"\r\n");
        Ok(framing)
    }

    /// The content-length the head declared, which the DATA frames must add up to (§8.1.1).
    pub fn content_length(&self) -> Option<u64> {
        self.length
    }
}

/// What the request line said.
#[derive(Debug, Clone, Copy)]
struct Line {
    has_authority: bool,
    tunnel: bool,
}

/// Writes the request line (and Host, from `:authority`) from the pseudo-fields, whose bytes
/// are in `scratch`.
fn write_line(pseudo: &Pseudo, scratch: &[u8], out: &mut Vec<u8>) -> Result<Line, HeadProblem> {
    let range = |range: Option<(u16, u16)>| range.map(|(a, b)| &scratch[a as usize..b as usize]);
    let method = range(pseudo.method).ok_or(HeadProblem::MissingPseudo)?;
    if method.is_empty() || !method.iter().all(|&b| is_token(b)) {
        return Err(HeadProblem::BadPseudoValue);
    }
    let authority = range(pseudo.authority);
    if authority.is_some_and(<[u8]>::is_empty) {
        return Err(HeadProblem::EmptyHost);
    }
    let mut tunnel = false;
    if method == b"CONNECT" && pseudo.protocol.is_none() {
        // §8.5: CONNECT names its target in :authority alone.
        if pseudo.scheme.is_some() || pseudo.path.is_some() {
            return Err(HeadProblem::MissingPseudo);
        }
        let authority = authority.ok_or(HeadProblem::MissingPseudo)?;
        out.extend_from_slice(b"CONNECT ");
        out.extend_from_slice(authority);
    } else {
        let path = range(pseudo.path).filter(|path| !path.is_empty());
        let scheme = range(pseudo.scheme).filter(|scheme| !scheme.is_empty());
        let (Some(_), Some(path)) = (scheme, path) else {
            return Err(HeadProblem::MissingPseudo);
        };
        match range(pseudo.protocol) {
            Some(_) if method != b"CONNECT" => return Err(HeadProblem::BadPseudo),
            Some(protocol) => {
                if !protocol.eq_ignore_ascii_case(b"websocket") {
                    return Err(HeadProblem::UnknownProtocol);
                }
                if authority.is_none() {
                    return Err(HeadProblem::MissingPseudo);
                }
                if path[0] != b'/' {
                    return Err(HeadProblem::PathForm);
                }
                tunnel = true;
                out.extend_from_slice(b"GET ");
            }
            None => {
                if path == b"*" && method != b"OPTIONS" {
                    return Err(HeadProblem::AsteriskPath);
                }
                if path[0] != b'/' && path != b"*" {
                    return Err(HeadProblem::PathForm);
                }
                out.extend_from_slice(method);
                out.push(b' ');
            }
        }
        out.extend_from_slice(path);
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(authority) = authority {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(authority);
        out.extend_from_slice(b"\r\n");
    }
    if tunnel {
        out.extend_from_slice(b"upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-key: ");
        out.extend_from_slice(&websocket_key(fastrand::u128(..)));
        out.extend_from_slice(b"\r\n");
    }
    Ok(Line {
        has_authority: authority.is_some(),
        tunnel,
    })
}

/// A trailer section's fields, written as a chunked body's last chunk and trailer fields.
#[derive(Debug, Default)]
pub struct Trailers {
    pub out: Vec<u8>,
    problem: Option<HeadProblem>,
}

impl Trailers {
    pub fn begin(&mut self) {
        self.out.clear();
        self.out.extend_from_slice(b"0\r\n");
        self.problem = None;
    }

    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.problem.is_some() {
            return;
        }
        if name.starts_with(b":") {
            self.problem = Some(HeadProblem::LatePseudo);
            return;
        }
        if let Err(problem) = check_field(name, value) {
            self.problem = Some(problem);
            return;
        }
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
    }

    /// The chunked body's end, trailers included.
    pub fn finish(&mut self) -> Result<&[u8], HeadProblem> {
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        self.out.extend_from_slice(b"\r\n");
        Ok(&self.out)
    }
}

/// RFC 9113 §8.2.1 and §8.2.2 for one regular field.
pub(crate) fn check_field(name: &[u8], value: &[u8]) -> Result<(), HeadProblem> {
    if name.is_empty() || !name.iter().all(|&b| is_token(b) && !b.is_ascii_uppercase()) {
        return Err(HeadProblem::BadName);
    }
    if memchr::memchr3(0, b'\r', b'\n', value).is_some() {
        return Err(HeadProblem::BadValue);
    }
    if let (Some(first), Some(last)) = (value.first(), value.last()) {
        if [first, last].iter().any(|b| matches!(b, b' ' | b'\t')) {
            return Err(HeadProblem::PaddedValue);
        }
    }
    match name {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
            Err(HeadProblem::ConnectionSpecific)
        }
        b"te" if !value.eq_ignore_ascii_case(b"trailers") => Err(HeadProblem::BadTe),
        _ => Ok(()),
    }
}

/// RFC 9110 §5.6.2's tchar.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

pub(crate) fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        value
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
    )
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

    /// Writes the head of `fields` (in order); `ended` as the HEADERS frame's END_STREAM.
    fn written(fields: &[(&str, &str)], ended: bool) -> (Result<BodyFraming, HeadProblem>, String) {
        let mut head = RequestHead::default();
        head.begin();
        for (name, value) in fields {
            head.field(name.as_bytes(), value.as_bytes());
        }
        let framing = head.finish(ended);
        (framing, String::from_utf8(head.out.clone()).unwrap())
    }

    fn get(path: &'static str) -> Vec<(&'static str, &'static str)> {
        vec![(":method", "GET"), (":scheme", "https"), (":path", path)]
    }

    #[test]
    fn authority_becomes_host_and_cookies_are_joined() {
        let mut fields = get("/a?b=1");
        fields.push((":authority", "example.com"));
        fields.extend([("cookie", "a=1"), ("accept", "*/*"), ("cookie", "b=2")]);
        let (framing, head) = written(&fields, true);
        assert_eq!(framing, Ok(BodyFraming::None));
        assert_eq!(
            head,
            "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncookie: a=1; b=2\r\n\r\n"
        );
    }

    #[test]
    fn a_head_is_reused_for_the_next_stream() {
        let mut head = RequestHead::default();
        head.begin();
        head.field(b":method", b"BAD METHOD");
        assert!(head.finish(true).is_err());
        head.begin();
        for (name, value) in [(":method", "GET"), (":scheme", "http"), (":path", "/")] {
            head.field(name.as_bytes(), value.as_bytes());
        }
        head.field(b"host", b"h.example");
        assert_eq!(head.finish(true), Ok(BodyFraming::None));
        assert_eq!(head.method(), b"GET");
        assert_eq!(head.out, b"GET / HTTP/1.1\r\nhost: h.example\r\n\r\n");
    }

    #[test]
    fn an_extended_connect_becomes_a_websocket_handshake_of_herdsmans_own() {
        let fields = [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "https"),
            (":path", "/room?x=1"),
            (":authority", "chat.test"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "from-the-client"),
            ("origin", "https://chat.test"),
        ];
        let (framing, head) = written(&fields, false);
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
        let mut other = fields[..5].to_vec();
        other[1] = (":protocol", "connect-udp");
        assert_eq!(written(&other, false).0, Err(HeadProblem::UnknownProtocol));
    }

    #[test]
    fn a_plain_connect_has_its_authority_alone() {
        let (framing, head) = written(&[(":method", "CONNECT"), (":authority", "h:443")], false);
        assert_eq!(framing, Ok(BodyFraming::Chunked));
        assert!(
            head.starts_with("CONNECT h:443 HTTP/1.1\r\nhost: h:443\r\n"),
            "{head}"
        );
        let with_path = [
            (":method", "CONNECT"),
            (":authority", "h:443"),
            (":path", "/"),
        ];
        assert_eq!(
            written(&with_path, false).0,
            Err(HeadProblem::MissingPseudo)
        );
        assert_eq!(
            written(&[(":method", "CONNECT")], false).0,
            Err(HeadProblem::MissingPseudo)
        );
    }

    #[test]
    fn a_websocket_key_is_16_bytes_in_base64() {
        // RFC 6455 §1.3's example nonce.
        let key = websocket_key(u128::from_be_bytes(*b"the sample nonce"));
        assert_eq!(&key, b"dGhlIHNhbXBsZSBub25jZQ==");
    }

    #[test]
    fn a_body_keeps_its_length_or_is_chunked() {
        let mut fields = vec![
            (":method", "POST"),
            (":scheme", "https"),
            (":path", "/up"),
            (":authority", "e.example"),
        ];
        let (framing, head) = written(&fields, false);
        assert_eq!(framing, Ok(BodyFraming::Chunked));
        assert!(
            head.ends_with("transfer-encoding: chunked\r\n\r\n"),
            "{head}"
        );
        fields.push(("content-length", "5"));
        let (framing, head) = written(&fields, false);
        assert_eq!(framing, Ok(BodyFraming::Length(5)));
        assert!(head.contains("content-length: 5\r\n"), "{head}");
    }

    #[test]
    fn hosts_must_agree_and_one_must_be_there() {
        let mut agree = get("/");
        agree.extend([(":authority", "example.com"), ("host", "EXAMPLE.com")]);
        assert_eq!(written(&agree, true).0, Ok(BodyFraming::None));
        let mut differ = get("/");
        differ.extend([(":authority", "example.com"), ("host", "other.example")]);
        assert_eq!(written(&differ, true).0, Err(HeadProblem::HostMismatch));
        let mut host_only = get("/x");
        host_only.push(("host", "h.example"));
        let (framing, head) = written(&host_only, true);
        assert_eq!(framing, Ok(BodyFraming::None));
        assert_eq!(head, "GET /x HTTP/1.1\r\nhost: h.example\r\n\r\n");
        assert_eq!(written(&get("/x"), true).0, Err(HeadProblem::NoHost));
        let mut empty = get("/x");
        empty.push(("host", ""));
        assert_eq!(written(&empty, true).0, Err(HeadProblem::EmptyHost));
        let mut twice = host_only.clone();
        twice.push(("host", "h.example"));
        assert_eq!(written(&twice, true).0, Err(HeadProblem::HostMismatch));
    }

    #[test]
    fn an_asterisk_path_is_for_options_alone() {
        let mut asterisk = get("*");
        asterisk.push(("host", "h.example"));
        assert_eq!(written(&asterisk, true).0, Err(HeadProblem::AsteriskPath));
        asterisk[0] = (":method", "OPTIONS");
        let (framing, head) = written(&asterisk, true);
        assert_eq!(framing, Ok(BodyFraming::None));
        assert!(head.starts_with("OPTIONS * HTTP/1.1\r\n"), "{head}");
    }

    /// What a GET with `name: value` is written as.
    fn with_field(name: &str, value: &str) -> Result<BodyFraming, HeadProblem> {
        let mut fields = get("/");
        fields.extend([(":authority", "e.example"), (name, value)]);
        written(&fields, true).0
    }

    #[test]
    fn fields_follow_rfc_9113_section_8_2() {
        for bad in [" a", "a ", "\ta", "a\t"] {
            assert_eq!(
                with_field("x-field", bad),
                Err(HeadProblem::PaddedValue),
                "{bad:?}"
            );
        }
        for bad in ["a\0b", "a\rb", "a\nb"] {
            assert_eq!(
                with_field("x-field", bad),
                Err(HeadProblem::BadValue),
                "{bad:?}"
            );
        }
        assert_eq!(with_field("x-field", "a b\tc"), Ok(BodyFraming::None));
        for bad in ["X-Field", "x field", "x:field", "", "x\u{e9}"] {
            assert_eq!(with_field(bad, "v"), Err(HeadProblem::BadName), "{bad:?}");
        }
        for bad in [
            "connection",
            "keep-alive",
            "proxy-connection",
            "transfer-encoding",
            "upgrade",
        ] {
            assert_eq!(
                with_field(bad, "x"),
                Err(HeadProblem::ConnectionSpecific),
                "{bad}"
            );
        }
        assert_eq!(with_field("te", "gzip"), Err(HeadProblem::BadTe));
        assert_eq!(with_field("te", "trailers"), Ok(BodyFraming::None));
    }

    #[test]
    fn pseudo_fields_follow_rfc_9113_section_8_3() {
        // A response's pseudo-field among a request's: unknown to a request.
        let mut status = get("/");
        status.push((":status", "200"));
        assert_eq!(written(&status, true).0, Err(HeadProblem::BadPseudo));
        assert_eq!(with_field(":path", "/"), Err(HeadProblem::BadPseudo));
        let mut unknown = get("/");
        unknown.insert(0, (":unknown", "x"));
        assert_eq!(written(&unknown, true).0, Err(HeadProblem::BadPseudo));
        let mut twice = get("/");
        twice.push((":path", "/again"));
        assert_eq!(written(&twice, true).0, Err(HeadProblem::BadPseudo));
        let mut late = get("/");
        late.extend([("accept", "*/*"), (":authority", "e.example")]);
        assert_eq!(written(&late, true).0, Err(HeadProblem::LatePseudo));
        for missing in 0..3 {
            let mut fields = get("/");
            fields.remove(missing);
            fields.push((":authority", "e.example"));
            assert_eq!(
                written(&fields, true).0,
                Err(HeadProblem::MissingPseudo),
                "{missing}"
            );
        }
        let mut relative = get("a/b");
        relative.push((":authority", "e.example"));
        assert_eq!(written(&relative, true).0, Err(HeadProblem::PathForm));
        let mut empty_path = get("");
        empty_path.push((":authority", "e.example"));
        assert_eq!(
            written(&empty_path, true).0,
            Err(HeadProblem::MissingPseudo)
        );
        let mut spaced = get("/a b");
        spaced.push((":authority", "e.example"));
        assert_eq!(written(&spaced, true).0, Err(HeadProblem::BadPseudoValue));
    }

    #[test]
    fn content_lengths_must_be_one_number() {
        for bad in ["", "-1", "1,2", "x", "99999999999999999999"] {
            assert_eq!(
                with_field("content-length", bad),
                Err(HeadProblem::BadLength),
                "{bad:?}"
            );
        }
        let mut twice = get("/");
        twice.extend([
            (":authority", "e.example"),
            ("content-length", "3"),
            ("content-length", "4"),
        ]);
        assert_eq!(written(&twice, false).0, Err(HeadProblem::BadLength));
    }

    #[test]
    fn trailers_are_the_chunked_ending_and_have_no_pseudo_fields() {
        let mut trailers = Trailers::default();
        trailers.begin();
        trailers.field(b"grpc-status", b"0");
        assert_eq!(trailers.finish().unwrap(), b"0\r\ngrpc-status: 0\r\n\r\n");
        trailers.begin();
        trailers.field(b":path", b"/");
        assert_eq!(trailers.finish(), Err(HeadProblem::LatePseudo));
        trailers.begin();
        trailers.field(b"connection", b"close");
        assert_eq!(trailers.finish(), Err(HeadProblem::ConnectionSpecific));
    }
}
