//! Access log lines, appended to a byte buffer without allocating (beyond the buffer's growth).
//!
//! `combined` is nginx's, byte for byte, in UTC:
//!
//! ```text
//! 127.0.0.1 - - [10/Oct/2000:20:55:36 +0000] "GET /a HTTP/1.1" 200 2326 "-" "curl/8.5.0" pool=app server=a upstream_ms=0.412 total_ms=0.530 sticky=0 buffered=none spooled=none received=- ended=done
//! ```
//!
//! then herdsman's fields. Inside quotes, `"`, `\` and bytes below 0x20 or above 0x7e are written
//! `\xHH`, as nginx does. `-` stands for a missing field, a body of 0 bytes, and `upstream_ms`
//! when no server sent a response head. The status is 0 when no whole response reached the
//! client (it went away first, or the server failed partway through the body). `server` names
//! the server that answered or was last tried: `-` when none was contacted (the client left
//! before, or no server could take the request).
//!
//! `json` is one object per line with the same facts: `time` (RFC 3339, UTC, milliseconds),
//! `client`, `method`, `target`, `version`, `host`, `status`, `bytes`, `referer`, `user_agent`,
//! `pool`, `server`, `upstream_ms`, `total_ms`, `sticky`, `buffered`, `spooled`, `received`,
//! `ended`, `cache`, `rule`, `stream`, `tls`, `cipher`, `sni`, `client_cert`; a missing value is
//! `null` (`stream` for HTTP/1, the last four on a cleartext connection). An HTTP/2 request's
//! version is `HTTP/2.0`, and its combined line says `stream=N` after `ended`. A request a rule
//! answered instead of a server (a rate limit's 429, a route's redirect or fixed response, an
//! access rule's refusal) says which after `ended` and `cache`: `rule=rate_limit`,
//! `rule=redirect`, `rule=respond`, `rule=deny` (combined lines of other requests end as
//! before). Where `[request_id]` gives requests ids, every line says its own next:
//! `request_id=…` (`-` for a request that failed before it had one), a `request_id` key in JSON;
//! lines of other configs are unchanged. A combined line of a TLS
//! connection ends with `tls=TLSv1.3
//! cipher=TLS13_AES_128_GCM_SHA256 sni=app.example client_cert="CN=alice"` (`-` for no SNI or no
//! client certificate); a cleartext one ends as before.
//! `buffered` says which bodies went through `[buffering]` (`none`, `request`, `response` or
//! `both`), `spooled` which of those had bytes in a temporary file, `received` the request body
//! bytes the client sent, and `ended` how the exchange ended: `done`, a failure's word
//! (`client_gone_mid_body`, `connect_failed`, … see `proxy::Failure::ended`), or, for a
//! connection upgraded by a 101 (a WebSocket), how its tunnel closed. Such a line is written
//! when the tunnel ends, not at the 101: `bytes` and `received` count what went through it each
//! way and `total_ms` runs to its end. Strings are escaped as JSON requires; a byte that is not
//! part of valid UTF-8 is written `\u00HH` (read as Latin-1), so every line parses.

use std::time::Duration;

use super::capture::CapturedRequest;
use super::clock::LogTime;

/// What one line says about one exchange.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// The client's address (the TCP peer, as nginx's `$remote_addr`), as text: the
    /// connection's X-Forwarded-For text, formatted once per connection (formatting an address
    /// per line cost about 1,000 instructions, a tenth of a proxied request).
    pub client: &'a [u8],
    pub request: &'a CapturedRequest,
    /// The status sent; `None` when no whole response reached the client.
    pub status: Option<u16>,
    /// Response body bytes sent to the client.
    pub body_bytes: u64,
    /// The pool the request was routed to, and the server that answered it or was tried last.
    pub pool: Option<&'a str>,
    pub server: Option<&'a str>,
    /// From sending the request until the response head came, over every attempt.
    pub upstream: Option<Duration>,
    /// From the request's first byte until the response's last.
    pub total: Duration,
    /// The request named its server with a sticky cookie, or the response gave it one.
    pub sticky: bool,
    /// Which bodies went through `[buffering]`, and which of those reached a temporary file.
    pub buffered: Buffered,
    /// Request body bytes received from the client (after a 101: bytes it sent through the
    /// tunnel).
    pub received: u64,
    /// How the exchange ended: `done`, a failure's word (`Failure::ended`), or how a tunnel
    /// closed.
    pub ended: &'a str,
    /// What the cache did, for a pool that caches (`hit`, `miss`, `uncacheable`); `None`
    /// otherwise.
    pub cache: Option<&'a str>,
    /// The rule that answered the request instead of a server (`rate_limit`, `redirect`,
    /// `respond`, `deny`); `None` otherwise.
    pub rule: Option<&'a str>,
    /// The request's id, where `[request_id]` gives requests one (empty for a request that
    /// failed before it had one); `None` otherwise.
    pub request_id: Option<&'a [u8]>,
    /// The client's TLS connection; `None` for cleartext.
    pub tls: Option<Tls<'a>>,
}

/// What a line says of a TLS connection (nginx's `$ssl_protocol`, `$ssl_cipher`,
/// `$ssl_server_name`).
#[derive(Debug, Clone, Copy)]
pub struct Tls<'a> {
    /// "TLSv1.3", "TLSv1.2".
    pub version: &'a str,
    /// The cipher suite, e.g. "TLS13_AES_128_GCM_SHA256".
    pub cipher: &'a str,
    /// The name the client asked for, if it sent one.
    pub server_name: Option<&'a str>,
    /// The subject of the certificate the client presented and the listener verified, if any.
    pub client_certificate: Option<&'a str>,
}

/// Which of an exchange's bodies went through `[buffering]` (the request's, read before a server
/// was involved; the response's, read at the server's pace), and which of those had bytes in a
/// temporary file. Said of a body that went only partway too (a client that gave up mid-upload).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Buffered {
    pub request: bool,
    pub response: bool,
    pub request_on_disk: bool,
    pub response_on_disk: bool,
}

impl Buffered {
    /// The `buffered` field: `none`, `request`, `response` or `both`.
    pub fn word(self) -> &'static [u8] {
        bodies_word(self.request, self.response)
    }

    /// The `spooled` field: which buffered bodies had bytes on disk, in the same words.
    pub fn disk_word(self) -> &'static [u8] {
        bodies_word(self.request_on_disk, self.response_on_disk)
    }
}

/// `none`, `request`, `response` or `both`.
fn bodies_word(request: bool, response: bool) -> &'static [u8] {
    match (request, response) {
        (false, false) => b"none",
        (true, false) => b"request",
        (false, true) => b"response",
        (true, true) => b"both",
    }
}

/// Appends `entry` as a `combined` line, with herdsman's fields, and a newline.
pub fn write_combined(out: &mut Vec<u8>, time: &LogTime, entry: &Entry) {
    out.extend_from_slice(entry.client);
    out.extend_from_slice(b" - - [");
    out.extend_from_slice(&time.combined);
    out.extend_from_slice(b"] \"");
    let request = entry.request;
    match (request.method(), request.target(), request.version()) {
        (Some(method), Some(target), Some(version)) => {
            escape_combined(out, method);
            out.push(b' ');
            escape_combined(out, target);
            out.push(b' ');
            out.extend_from_slice(version.as_bytes());
        }
        _ => out.push(b'-'),
    }
    out.extend_from_slice(b"\" ");
    write_u64(out, u64::from(entry.status.unwrap_or(0)));
    out.push(b' ');
    match entry.body_bytes {
        0 => out.push(b'-'),
        bytes => write_u64(out, bytes),
    }
    for field in [request.referer(), request.user_agent()] {
        out.extend_from_slice(b" \"");
        match field {
            Some(value) if !value.is_empty() => escape_combined(out, value),
            _ => out.push(b'-'),
        }
        out.push(b'"');
    }
    out.extend_from_slice(b" pool=");
    write_name_or_dash(out, entry.pool);
    out.extend_from_slice(b" server=");
    write_name_or_dash(out, entry.server);
    out.extend_from_slice(b" upstream_ms=");
    match entry.upstream {
        Some(upstream) => write_millis(out, upstream),
        None => out.push(b'-'),
    }
    out.extend_from_slice(b" total_ms=");
    write_millis(out, entry.total);
    out.extend_from_slice(if entry.sticky {
        b" sticky=1"
    } else {
        b" sticky=0"
    });
    out.extend_from_slice(b" buffered=");
    out.extend_from_slice(entry.buffered.word());
    out.extend_from_slice(b" spooled=");
    out.extend_from_slice(entry.buffered.disk_word());
    out.extend_from_slice(b" received=");
    match entry.received {
        0 => out.push(b'-'),
        bytes => write_u64(out, bytes),
    }
    out.extend_from_slice(b" ended=");
    out.extend_from_slice(entry.ended.as_bytes());
    // A cached pool's line says what the cache did; others end as they always did.
    if let Some(cache) = entry.cache {
        out.extend_from_slice(b" cache=");
        out.extend_from_slice(cache.as_bytes());
    }
    // A request a rule answered says which; others end as they always did.
    if let Some(rule) = entry.rule {
        out.extend_from_slice(b" rule=");
        out.extend_from_slice(rule.as_bytes());
    }
    // Where requests get ids, each line says its own; others end as they always did.
    if let Some(id) = entry.request_id {
        out.extend_from_slice(b" request_id=");
        match id.is_empty() {
            true => out.push(b'-'),
            false => out.extend_from_slice(id),
        }
    }
    // An HTTP/2 request says its stream; HTTP/1 lines end as they always did.
    if let Some(stream) = request.stream() {
        out.extend_from_slice(b" stream=");
        write_u64(out, u64::from(stream));
    }
    // Cleartext lines end as they always did; a TLS one says how it was encrypted.
    if let Some(tls) = entry.tls {
        out.extend_from_slice(b" tls=");
        out.extend_from_slice(tls.version.as_bytes());
        out.extend_from_slice(b" cipher=");
        out.extend_from_slice(tls.cipher.as_bytes());
        out.extend_from_slice(b" sni=");
        write_name_or_dash(out, tls.server_name);
        out.extend_from_slice(b" client_cert=");
        match tls.client_certificate {
            Some(subject) => {
                out.push(b'"');
                escape_combined(out, subject.as_bytes());
                out.push(b'"');
            }
            None => out.push(b'-'),
        }
    }
    out.push(b'\n');
}

/// Appends `entry` as a JSON object and a newline.
pub fn write_json(out: &mut Vec<u8>, time: &LogTime, entry: &Entry) {
    out.extend_from_slice(b"{\"time\":\"");
    out.extend_from_slice(&time.rfc3339_seconds);
    out.push(b'.');
    let millis = u64::from(time.millis.min(999));
    out.extend_from_slice(&[
        b'0' + (millis / 100) as u8,
        b'0' + (millis / 10 % 10) as u8,
        b'0' + (millis % 10) as u8,
    ]);
    out.extend_from_slice(b"Z\",\"client\":\"");
    out.extend_from_slice(entry.client);
    out.push(b'"');
    let request = entry.request;
    let version = request.version().map(str::as_bytes);
    let strings = [
        (&b",\"method\":"[..], request.method()),
        (b",\"target\":", request.target()),
        (b",\"version\":", version),
        (b",\"host\":", request.host()),
    ];
    for (key, value) in strings {
        out.extend_from_slice(key);
        json_string_or_null(out, value);
    }
    out.extend_from_slice(b",\"status\":");
    write_u64(out, u64::from(entry.status.unwrap_or(0)));
    out.extend_from_slice(b",\"bytes\":");
    write_u64(out, entry.body_bytes);
    out.extend_from_slice(b",\"referer\":");
    json_string_or_null(out, request.referer());
    out.extend_from_slice(b",\"user_agent\":");
    json_string_or_null(out, request.user_agent());
    out.extend_from_slice(b",\"pool\":");
    json_string_or_null(out, entry.pool.map(str::as_bytes));
    out.extend_from_slice(b",\"server\":");
    json_string_or_null(out, entry.server.map(str::as_bytes));
    out.extend_from_slice(b",\"upstream_ms\":");
    match entry.upstream {
        Some(upstream) => write_millis(out, upstream),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"total_ms\":");
    write_millis(out, entry.total);
    out.extend_from_slice(if entry.sticky {
        b",\"sticky\":true"
    } else {
        b",\"sticky\":false"
    });
    out.extend_from_slice(b",\"buffered\":\"");
    out.extend_from_slice(entry.buffered.word());
    out.extend_from_slice(b"\",\"spooled\":\"");
    out.extend_from_slice(entry.buffered.disk_word());
    out.extend_from_slice(b"\",\"received\":");
    write_u64(out, entry.received);
    out.extend_from_slice(b",\"ended\":\"");
    out.extend_from_slice(entry.ended.as_bytes());
    out.push(b'"');
    out.extend_from_slice(b",\"cache\":");
    match entry.cache {
        Some(cache) => {
            out.push(b'"');
            out.extend_from_slice(cache.as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"rule\":");
    json_string_or_null(out, entry.rule.map(str::as_bytes));
    // Only where requests get ids (null for one that failed before it had one).
    if let Some(id) = entry.request_id {
        out.extend_from_slice(b",\"request_id\":");
        json_string_or_null(out, Some(id).filter(|id| !id.is_empty()));
    }
    out.extend_from_slice(b",\"stream\":");
    match request.stream() {
        Some(stream) => write_u64(out, u64::from(stream)),
        None => out.extend_from_slice(b"null"),
    }
    let tls = entry.tls;
    let tls_fields = [
        (&b",\"tls\":"[..], tls.map(|t| t.version.as_bytes())),
        (b",\"cipher\":", tls.map(|t| t.cipher.as_bytes())),
        (
            b",\"sni\":",
            tls.and_then(|t| t.server_name).map(str::as_bytes),
        ),
        (
            b",\"client_cert\":",
            tls.and_then(|t| t.client_certificate).map(str::as_bytes),
        ),
    ];
    for (key, value) in tls_fields {
        out.extend_from_slice(key);
        json_string_or_null(out, value);
    }
    out.extend_from_slice(b"}\n");
}

/// A pool or server name (names are `[A-Za-z0-9_.-]`, see `config::is_valid_name`, so they need
/// no escaping), or `-`.
fn write_name_or_dash(out: &mut Vec<u8>, name: Option<&str>) {
    match name {
        Some(name) if !name.is_empty() => escape_combined(out, name.as_bytes()),
        _ => out.push(b'-'),
    }
}

/// `value` in decimal.
fn write_u64(out: &mut Vec<u8>, mut value: u64) {
    // Two digits a step from a table, as the `itoa` crate does: a line has four numbers, and
    // a digit at a time cost about 60 instructions each (callgrind, bench/results/observability.md).
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    while value >= 100 {
        let pair = usize::try_from(value % 100).unwrap_or(0) * 2;
        value /= 100;
        start -= 2;
        digits[start..start + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if value >= 10 {
        let pair = usize::try_from(value).unwrap_or(0) * 2;
        start -= 2;
        digits[start..start + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        start -= 1;
        digits[start] = b'0' + value as u8;
    }
    out.extend_from_slice(&digits[start..]);
}

/// "00" to "99", one after another.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// A duration in milliseconds with three decimals: `12.345`.
fn write_millis(out: &mut Vec<u8>, duration: Duration) {
    let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
    write_u64(out, micros / 1000);
    let fraction = micros % 1000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (fraction / 100) as u8,
        b'0' + (fraction / 10 % 10) as u8,
        b'0' + (fraction % 10) as u8,
    ]);
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// `value` as nginx escapes a logged variable (`escape=default`): `"`, `\`, and bytes below 0x20
/// or above 0x7e become `\xHH`, so a line stays one line and its quotes stay balanced.
fn escape_combined(out: &mut Vec<u8>, value: &[u8]) {
    let mut rest = value;
    while !rest.is_empty() {
        let run = rest
            .iter()
            .position(|&b| ESCAPED_IN_COMBINED[usize::from(b)])
            .unwrap_or(rest.len());
        out.extend_from_slice(&rest[..run]);
        if let Some(&byte) = rest.get(run) {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]);
            rest = &rest[run + 1..];
        } else {
            rest = &[];
        }
    }
}

/// The bytes `escape_combined` escapes, by value: one load per byte rather than four tests.
const ESCAPED_IN_COMBINED: [bool; 256] = {
    let mut escaped = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        escaped[byte] =
            byte < 0x20 || byte > 0x7e || byte == b'"' as usize || byte == b'\\' as usize;
        byte += 1;
    }
    escaped
};

/// `value` as a JSON string, or `null`.
fn json_string_or_null(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(value) => json_string(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

/// `value` as a quoted JSON string (RFC 8259 §7): `"` and `\` escaped, control characters as
/// `\n`, `\r`, `\t` or `\u00HH`, valid UTF-8 as it is, and each byte of invalid UTF-8 as `\u00HH`
/// (its Latin-1 reading), so that the line always parses.
fn json_string(out: &mut Vec<u8>, value: &[u8]) {
    out.push(b'"');
    for chunk in value.utf8_chunks() {
        let valid = chunk.valid().as_bytes();
        let mut rest = valid;
        while !rest.is_empty() {
            let run = rest
                .iter()
                .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
                .unwrap_or(rest.len());
            out.extend_from_slice(&rest[..run]);
            let Some(&byte) = rest.get(run) else {
                break;
            };
            match byte {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                _ => unicode_escape(out, byte),
            }
            rest = &rest[run + 1..];
        }
        for &byte in chunk.invalid() {
            unicode_escape(out, byte);
        }
    }
    out.push(b'"');
}

/// `\u00HH`.
fn unicode_escape(out: &mut Vec<u8>, byte: u8) {
    out.extend_from_slice(&[
        b'\\',
        b'u',
        b'0',
        b'0',
        HEX[usize::from(byte >> 4)],
        HEX[usize::from(byte & 0xf)],
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access_log::capture::tests::captured;

    const TIME: u64 = 971_211_336; // 10/Oct/2000:20:55:36 +0000

    fn entry(request: &CapturedRequest) -> Entry<'_> {
        Entry {
            client: b"192.0.2.7",
            request,
            status: Some(200),
            body_bytes: 2326,
            pool: Some("app"),
            server: Some("a"),
            upstream: Some(Duration::from_micros(412)),
            total: Duration::from_micros(12_530),
            sticky: false,
            buffered: Buffered::default(),
            received: 0,
            ended: "done",
            cache: None,
            rule: None,
            request_id: None,
            tls: None,
        }
    }

    fn combined(entry: &Entry) -> String {
        let mut out = Vec::new();
        write_combined(&mut out, &LogTime::at(TIME, 45), entry);
        String::from_utf8(out).unwrap()
    }

    fn json(entry: &Entry) -> String {
        let mut out = Vec::new();
        write_json(&mut out, &LogTime::at(TIME, 45), entry);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_combined_line_is_nginxs_followed_by_herdsmans_fields() {
        let request = captured(
            b"GET /apache_pb.gif?x=1 HTTP/1.1\r\nHost: h\r\nReferer: http://example.com/start\r\n\
              User-Agent: Mozilla/4.08 [en] (Win98; I ;Nav)\r\n\r\n",
        );
        assert_eq!(
            combined(&entry(&request)),
            "192.0.2.7 - - [10/Oct/2000:20:55:36 +0000] \"GET /apache_pb.gif?x=1 HTTP/1.1\" 200 \
             2326 \"http://example.com/start\" \"Mozilla/4.08 [en] (Win98; I ;Nav)\" pool=app \
             server=a upstream_ms=0.412 total_ms=12.530 sticky=0 buffered=none spooled=none \
             received=- ended=done\n"
        );
    }

    #[test]
    fn missing_fields_are_dashes_and_an_unanswered_request_is_status_0() {
        let request = captured(b"HEAD / HTTP/1.0\r\n\r\n");
        let unanswered = Entry {
            client: b"::1",
            status: None,
            body_bytes: 0,
            server: None,
            upstream: None,
            sticky: true,
            buffered: Buffered {
                request: true,
                request_on_disk: true,
                ..Buffered::default()
            },
            received: 21_000_000,
            ended: "client_gone_mid_body",
            cache: None,
            ..entry(&request)
        };
        assert_eq!(
            combined(&unanswered),
            "::1 - - [10/Oct/2000:20:55:36 +0000] \"HEAD / HTTP/1.0\" 0 - \"-\" \"-\" pool=app \
             server=- upstream_ms=- total_ms=12.530 sticky=1 buffered=request spooled=request \
             received=21000000 ended=client_gone_mid_body\n"
        );
        // A head that did not parse: no request line, no pool.
        let mut unparsed = captured(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        unparsed.forget();
        let refused = Entry {
            status: Some(400),
            pool: None,
            server: None,
            upstream: None,
            ..entry(&unparsed)
        };
        assert!(
            combined(&refused).starts_with("192.0.2.7 - - [10/Oct/2000:20:55:36 +0000] \"-\" 400 2326 \"-\" \"-\" pool=- server=- upstream_ms=- "),
            "{}",
            combined(&refused)
        );
    }

    #[test]
    fn combined_escapes_quotes_backslashes_and_control_bytes_as_nginx_does() {
        let mut out = Vec::new();
        escape_combined(&mut out, b"a\"b\\c\x01\x7f\xc3\xa9 ~");
        assert_eq!(out, b"a\\x22b\\x5Cc\\x01\\x7F\\xC3\\xA9 ~");
        let request = captured(b"GET / HTTP/1.1\r\nHost: h\r\nUser-Agent: evil\" \"x\r\n\r\n");
        let line = combined(&entry(&request));
        assert!(line.contains(" \"evil\\x22 \\x22x\" pool="), "{line}");
        assert_eq!(line.matches('"').count(), 6, "{line}");
    }

    #[test]
    fn an_http2_request_says_its_version_and_stream() {
        let mut request = captured(b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
        request.came_on_stream(3);
        let line = combined(&entry(&request));
        assert!(line.contains(" \"GET /a HTTP/2.0\" "), "{line}");
        assert!(line.ends_with(" ended=done stream=3\n"), "{line}");
        let line = json(&entry(&request));
        assert!(line.contains(r#""version":"HTTP/2.0""#), "{line}");
        assert!(
            line.contains(r#""ended":"done","cache":null,"rule":null,"stream":3"#),
            "{line}"
        );
        // An HTTP/1 request's line is as it was; JSON says null.
        let request = captured(b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
        assert!(!combined(&entry(&request)).contains("stream="));
        assert!(json(&entry(&request)).contains(r#""stream":null"#));
        // A cached pool's line says what the cache did, after `ended`.
        let cached = Entry {
            cache: Some("hit"),
            ..entry(&request)
        };
        assert!(combined(&cached).ends_with(" ended=done cache=hit\n"));
        assert!(json(&cached).contains(r#""ended":"done","cache":"hit","rule":null,"stream":null"#));
        // A request a rule answered names it, after `cache`.
        let limited = Entry {
            status: Some(429),
            rule: Some("rate_limit"),
            ..entry(&request)
        };
        assert!(combined(&limited).ends_with(" ended=done rule=rate_limit\n"));
        assert!(json(&limited).contains(r#""cache":null,"rule":"rate_limit","stream":null"#));
        // Where requests get ids, the line says its own, after `rule`.
        let identified = Entry {
            request_id: Some(b"5f0c1e2d3a4b5c6d0001000000000007"),
            ..limited
        };
        assert!(combined(&identified)
            .ends_with(" rule=rate_limit request_id=5f0c1e2d3a4b5c6d0001000000000007\n"));
        assert!(json(&identified).contains(
            r#""rule":"rate_limit","request_id":"5f0c1e2d3a4b5c6d0001000000000007","stream":null"#
        ));
    }

    #[test]
    fn a_line_of_a_tls_connection_names_its_version_cipher_and_sni() {
        let request = captured(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        let tls = Tls {
            version: "TLSv1.3",
            cipher: "TLS13_AES_128_GCM_SHA256",
            server_name: Some("app.example"),
            client_certificate: Some("CN=alice,O=Example"),
        };
        let line = combined(&Entry {
            tls: Some(tls),
            ..entry(&request)
        });
        assert!(
            line.ends_with(
                " ended=done tls=TLSv1.3 cipher=TLS13_AES_128_GCM_SHA256 sni=app.example client_cert=\"CN=alice,O=Example\"\n"
            ),
            "{line}"
        );
        let without_sni = Tls {
            server_name: None,
            client_certificate: None,
            ..tls
        };
        let line = combined(&Entry {
            tls: Some(without_sni),
            ..entry(&request)
        });
        assert!(line.ends_with(" sni=- client_cert=-\n"), "{line}");
        let line = json(&Entry {
            tls: Some(tls),
            ..entry(&request)
        });
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["tls"], "TLSv1.3");
        assert_eq!(value["cipher"], "TLS13_AES_128_GCM_SHA256");
        assert_eq!(value["sni"], "app.example");
        assert_eq!(value["client_cert"], "CN=alice,O=Example");
    }

    #[test]
    fn a_json_line_has_every_field_and_parses() {
        let request = captured(
            b"GET /search?q=caf\xc3\xa9 HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: curl/8\r\n\r\n",
        );
        let line = json(&Entry {
            sticky: true,
            buffered: Buffered {
                request: true,
                ..Buffered::default()
            },
            received: 12,
            ..entry(&request)
        });
        assert!(
            line.ends_with("}\n") && line.matches('\n').count() == 1,
            "{line}"
        );
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let expected = serde_json::json!({
            "time": "2000-10-10T20:55:36.045Z",
            "client": "192.0.2.7",
            "method": "GET",
            "target": "/search?q=café",
            "version": "HTTP/1.1",
            "host": "shop.example",
            "status": 200,
            "bytes": 2326,
            "referer": null,
            "user_agent": "curl/8",
            "pool": "app",
            "server": "a",
            "upstream_ms": 0.412,
            "total_ms": 12.53,
            "sticky": true,
            "buffered": "request",
            "spooled": "none",
            "received": 12,
            "ended": "done",
            "cache": null,
            "rule": null,
            "stream": null,
            "tls": null,
            "cipher": null,
            "sni": null,
            "client_cert": null,
        });
        assert_eq!(value, expected);
        // The keys in the documented order.
        let keys: Vec<&str> = line
            .split("\":")
            .filter_map(|piece| piece.rsplit('"').next())
            .collect();
        assert!(keys.starts_with(&["time", "client", "method", "target", "version", "host"]));
    }

    #[test]
    fn json_escapes_what_json_requires_and_keeps_invalid_utf8_readable() {
        let mut out = Vec::new();
        json_string(&mut out, b"q\"b\\s\n\r\t\x01\x7f \xe2\x82\xac \xff\xc3");
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "\"q\\\"b\\\\s\\n\\r\\t\\u0001\x7f \u{20ac} \\u00FF\\u00C3\""
        );
        let parsed: String = serde_json::from_slice(&out).unwrap();
        assert_eq!(parsed, "q\"b\\s\n\r\t\u{1}\u{7f} € ÿÃ");
        let unanswered = json(&Entry {
            status: None,
            body_bytes: 0,
            pool: None,
            server: None,
            upstream: None,
            ..entry(&CapturedRequest::default())
        });
        let value: serde_json::Value = serde_json::from_str(&unanswered).unwrap();
        assert_eq!(value["method"], serde_json::Value::Null);
        assert_eq!(value["status"], 0);
        assert_eq!(value["upstream_ms"], serde_json::Value::Null);
        assert_eq!(value["server"], serde_json::Value::Null);
    }

    #[test]
    fn numbers_are_written_whole_and_milliseconds_with_three_decimals() {
        let mut out = Vec::new();
        for value in [0, 7, 10, 18_446_744_073_709_551_615] {
            write_u64(&mut out, value);
            out.push(b' ');
        }
        for micros in [0, 5, 1_000, 1_234_567] {
            write_millis(&mut out, Duration::from_micros(micros));
            out.push(b' ');
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0 7 10 18446744073709551615 0.000 0.005 1.000 1234.567 "
        );
    }

    #[test]
    fn numbers_of_every_length() {
        for value in [
            0,
            7,
            10,
            99,
            100,
            101,
            999,
            1_000,
            65_535,
            1_000_007,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            write_u64(&mut out, value);
            assert_eq!(out, value.to_string().as_bytes());
        }
    }
}
