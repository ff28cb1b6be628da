//! The heads herdsman writes: the request as forwarded to a server, and the response as
//! forwarded to the client, with hop-by-hop fields removed and X-Forwarded-* added.

use std::io::Write;
use std::net::IpAddr;

use super::head::{Body, ConnectionTokens, HeadError, Request, Response};
use super::tokens::list_elements;
use super::upgrade;
use super::MAX_HEADERS;
use crate::config::UpgradeProtocols;

/// A client's address as X-Forwarded-For carries it, formatted once per connection rather than
/// through `fmt` on every request (about 900 instructions a request, measured with callgrind in
/// bench/results/optimisation.md). An IPv4 address is written digit by digit: through `fmt` it
/// still cost 1,026 instructions a connection, 6% of a `Connection: close` request's
/// (bench/results/connection-setup.md).
#[derive(Clone, Copy)]
pub struct AddressText {
    /// Long enough for any IPv6 text form, IPv4-embedded ones included (45 bytes).
    bytes: [u8; 45],
    len: u8,
}

impl AddressText {
    pub fn new(ip: IpAddr) -> AddressText {
        let mut bytes = [0u8; 45];
        let len = match ip {
            IpAddr::V4(v4) => write_ipv4(&mut bytes, v4.octets()),
            IpAddr::V6(_) => {
                let mut cursor = std::io::Cursor::new(&mut bytes[..]);
                let _ = write!(cursor, "{ip}");
                cursor.position() as usize
            }
        };
        AddressText {
            bytes,
            len: len as u8,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// Writes `octets` as dotted decimal at the start of `out` (at least 15 bytes); returns the length.
fn write_ipv4(out: &mut [u8], octets: [u8; 4]) -> usize {
    let mut len = 0;
    for (i, octet) in octets.into_iter().enumerate() {
        if i > 0 {
            out[len] = b'.';
            len += 1;
        }
        if octet >= 100 {
            out[len] = b'0' + octet / 100;
            len += 1;
        }
        if octet >= 10 {
            out[len] = b'0' + octet / 10 % 10;
            len += 1;
        }
        out[len] = b'0' + octet % 10;
        len += 1;
    }
    len
}

/// Fields that describe one connection, not the message (RFC 9110 §7.6.1), plus the
/// X-Forwarded-* fields herdsman writes itself. `upgrade` is handled by the caller.
/// `HTTP2-Settings` goes with an `Upgrade: h2c`, which is never passed on (RFC 7540 §3.2.1 makes
/// it hop-by-hop).
pub fn is_hop_by_hop(name: &str, connection: &ConnectionTokens<'_, '_>) -> bool {
    const FIXED: [&str; 6] = [
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "http2-settings",
    ];
    FIXED.iter().any(|h| name.eq_ignore_ascii_case(h))
        || name.len() > 6 && name[..6].eq_ignore_ascii_case("proxy-")
        || connection.names(name)
}

/// Whether a TE field's value lists `trailers`.
fn lists_trailers(value: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"trailers"))
}

#[inline]
fn write_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends the request head to send to a server. Always HTTP/1.1, origin-form, with Host first:
/// the host the request is for (an absolute-form target's, RFC 9112 §3.2.2), or empty for an
/// HTTP/1.0 request without one. The body is forwarded as framed after its framing was checked,
/// so the framing field goes on, once, at the place of the first: one Content-Length with one
/// value (RFC 9112 §6.3: a repeated or listed one is replaced, so no server can read it another
/// way), or `Transfer-Encoding: chunked`. The Upgrade goes on only with the protocols `upgrades`
/// allows, and only when there is one.
///
/// `TooLarge` when the head as written has more than [`MAX_HEADERS`] fields or more than
/// `max_head` bytes: the fields herdsman adds (`X-Forwarded-*`, a Host for HTTP/1.0) could take
/// a head within the limits beyond them, and a server — or a second tier of herdsman, with the
/// same limits — would refuse what the first accepted. Refused at the edge instead (431), where
/// the client is told.
pub fn write_request_head(
    request: &Request<'_, '_>,
    upgrades: &UpgradeProtocols,
    client: &AddressText,
    tls: Forwarded<'_>,
    max_head: usize,
    out: &mut Vec<u8>,
) -> Result<(), HeadError> {
    out.extend_from_slice(request.method_text.as_bytes());
    out.push(b' ');
    if !matches!(
        request.forwarded_target.as_bytes().first(),
        Some(b'/' | b'*')
    ) {
        // An absolute-form target without a path, or with only a query.
        out.push(b'/');
    }
    out.extend_from_slice(request.forwarded_target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(request.host.unwrap_or_default());
    out.extend_from_slice(b"\r\n");
    let upgrade = upgrade::forwards(upgrades, request);
    let mut forwarded_for: Option<&[u8]> = None;
    let mut more_forwarded_for = false;
    let mut framing_written = false;
    // Host, X-Forwarded-For and X-Forwarded-Proto, always written; then those written below.
    let mut fields = 3;
    for field in request.headers {
        let name = field.name;
        if name.eq_ignore_ascii_case("x-forwarded-for") {
            // Earlier proxies' entries are kept, in order, with the client's address last.
            match forwarded_for {
                None => forwarded_for = Some(field.value),
                Some(_) => more_forwarded_for = true,
            }
            continue;
        }
        // Herdsman's to say, never the client's: a client could claim any certificate.
        if name.eq_ignore_ascii_case("host")
            || name.eq_ignore_ascii_case("x-forwarded-proto")
            || name.eq_ignore_ascii_case("x-forwarded-host")
            || name.eq_ignore_ascii_case("x-forwarded-client-cert")
        {
            continue;
        }
        if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            if !framing_written {
                framing_written = true;
                fields += 1;
                write_framing(request, name, field.value, out);
            }
            continue;
        }
        if is_hop_by_hop(name, &request.connection) {
            if tls.trailers && name.eq_ignore_ascii_case("te") && lists_trailers(field.value) {
                fields += 1;
                write_field(out, "te", b"trailers");
            }
            continue;
        }
        fields += 1;
        write_field(out, name, field.value);
    }
    if upgrade {
        fields += 2;
        out.extend_from_slice(b"Upgrade: ");
        upgrade::write_allowed(upgrades, request, out);
        out.extend_from_slice(b"\r\nConnection: upgrade\r\n");
    }
    out.extend_from_slice(b"X-Forwarded-For: ");
    if more_forwarded_for {
        for field in request.headers {
            if field.name.eq_ignore_ascii_case("x-forwarded-for") {
                out.extend_from_slice(field.value);
                out.extend_from_slice(b", ");
            }
        }
    } else if let Some(earlier) = forwarded_for {
        out.extend_from_slice(earlier);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(client.as_bytes());
    out.extend_from_slice(match tls.secure {
        true => b"\r\nX-Forwarded-Proto: https\r\n",
        false => b"\r\nX-Forwarded-Proto: http\r\n",
    });
    if !tls.client_certificate.is_empty() {
        fields += 1;
        write_field(out, "X-Forwarded-Client-Cert", tls.client_certificate);
    }
    if let Some(host) = request.host {
        fields += 1;
        write_field(out, "X-Forwarded-Host", host);
    }
    out.extend_from_slice(b"\r\n");
    match fields <= MAX_HEADERS && out.len() <= max_head {
        true => Ok(()),
        false => Err(HeadError::TooLarge),
    }
}

/// The request's one framing field, under the client's spelling of `name`: its first
/// Content-Length value (every value was checked to be the same number), or chunked, the only
/// transfer coding accepted.
fn write_framing(request: &Request<'_, '_>, name: &str, value: &[u8], out: &mut Vec<u8>) {
    let value = match request.body {
        Body::Chunked => &b"chunked"[..],
        _ => list_elements(value).next().unwrap_or(b"0"),
    };
    write_field(out, name, value);
}

/// What the response head tells the client about the connection and the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFraming {
    /// herdsman will close the client connection after this response.
    pub close: bool,
    /// The client spoke HTTP/1.0 and asked for keep-alive (it must be told it got it).
    pub http10_keep_alive: bool,
    /// The chunked body is decoded and sent close-delimited (an HTTP/1.0 client cannot read
    /// chunked), so Transfer-Encoding is dropped.
    pub dechunk: bool,
    /// herdsman compresses the body with this content coding (`gzip`, `br`, `zstd`): the head
    /// says so, loses its Content-Length, gains `Vary: Accept-Encoding` (unless a Vary names it
    /// already) and is chunked (unless `dechunk`: close-delimited); a strong ETag is weakened,
    /// since the bytes are no longer the server's.
    pub content_coding: Option<&'static str>,
}

/// What a request's connection says that servers are told of: whether it is TLS
/// (`X-Forwarded-Proto`), and the client certificate it verified (`X-Forwarded-Client-Cert`'s
/// value, empty for none). Any `X-Forwarded-Client-Cert` a client sends is dropped. `trailers`:
/// the client's `TE: trailers` goes on (a gRPC call, whose status comes in trailers, which
/// herdsman relays); any other request's TE is dropped as hop-by-hop.
#[derive(Debug, Clone, Copy, Default)]
pub struct Forwarded<'a> {
    pub secure: bool,
    pub client_certificate: &'a [u8],
    pub trailers: bool,
}

/// Whole header lines (CRLF included) of herdsman's own that a response gets after the server's
/// fields, never merged into them; each may be empty.
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnFields<'a> {
    /// The sticky cookie that assigns the client to the server that answered.
    pub set_cookie: &'a [u8],
    /// The listener's `Strict-Transport-Security` (TLS only); it replaces the server's own.
    pub hsts: &'a [u8],
}

/// Removes the `Expect` field from the request head [`write_request_head`] wrote at the start
/// of `out` (it ends at its blank line; a body may follow): herdsman answered the expectation
/// itself, and the server, asked again, would send a `100 Continue` of its own for herdsman to
/// swallow. nginx drops the field likewise when it buffers. Only requests that sent it pay.
#[cold]
pub fn drop_expect(out: &mut Vec<u8>) {
    let Some(blank) = out.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    // A field line follows a CRLF (the request line comes first), and ends with one.
    let Some(crlf) = out[..blank]
        .windows(9)
        .position(|w| w.eq_ignore_ascii_case(b"\r\nexpect:"))
    else {
        return;
    };
    let start = crlf + 2;
    // The blank line's CRLF at the latest.
    let line = out[start..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(0, |at| at + 2);
    out.drain(start..start + line);
}

/// Appends `response`'s status line as HTTP/1.1 (the version herdsman speaks to clients).
/// Always inlined: out of line, its call cost a proxied response about 16 instructions.
#[inline(always)]
pub fn write_status_line(response: &Response<'_, '_>, out: &mut Vec<u8>) {
    // httparse accepts only three-digit status codes.
    let code = response.code;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(&[
        b'0' + (code / 100 % 10) as u8,
        b'0' + (code / 10 % 10) as u8,
        b'0' + (code % 10) as u8,
        b' ',
    ]);
    out.extend_from_slice(response.reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends the response head to send to the client, with herdsman's `own` fields after the
/// server's. `TooLarge` when the head as written has more than [`MAX_HEADERS`] fields or more
/// than `max_head` bytes: a response within the limits that herdsman's fields would take past
/// them is the server's fault (502), not something to hand a client — or a second tier of
/// herdsman with the same limits — to refuse.
pub fn write_response_head(
    response: &Response<'_, '_>,
    framing: ClientFraming,
    own: &OwnFields<'_>,
    max_head: usize,
    out: &mut Vec<u8>,
) -> Result<(), HeadError> {
    write_status_line(response, out);
    let start = out.len();
    let switching = response.code == 101;
    let mut fields = 0;
    // A compressed answer's Vary names Accept-Encoding already (or `*`).
    let mut varies = false;
    for field in response.headers {
        let name = field.name;
        if switching && name.eq_ignore_ascii_case("upgrade") {
            fields += 1;
            write_field(out, name, field.value);
            continue;
        }
        if is_hop_by_hop(name, &response.connection)
            || framing.dechunk && name.eq_ignore_ascii_case("transfer-encoding")
            || response.transfer_encoding && name.eq_ignore_ascii_case("content-length")
            || !own.hsts.is_empty() && name.eq_ignore_ascii_case("strict-transport-security")
        {
            continue;
        }
        if framing.content_coding.is_some() {
            fields += write_recoded_field(name, field.value, &mut varies, out);
            continue;
        }
        fields += 1;
        write_field(out, name, field.value);
    }
    if let Some(coding) = framing.content_coding {
        fields += end_recoded_head(coding, varies, framing.dechunk, out);
    }
    // Each of herdsman's own is one whole line, or empty.
    fields += usize::from(!own.set_cookie.is_empty()) + usize::from(!own.hsts.is_empty());
    out.extend_from_slice(own.set_cookie);
    out.extend_from_slice(own.hsts);
    if switching {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    } else if framing.close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if framing.http10_keep_alive {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    fields += usize::from(switching || framing.close || framing.http10_keep_alive);
    out.extend_from_slice(b"\r\n");
    match fields <= MAX_HEADERS && out.len() - start <= max_head {
        true => Ok(()),
        false => Err(HeadError::TooLarge),
    }
}

/// One server field of an answer herdsman compresses with `coding`, as the client gets it: its
/// framing gone (Content-Length, Transfer-Encoding: the body is re-framed), a strong ETag made
/// weak, others as they are; notes in `varies` whether a Vary names Accept-Encoding. Returns the
/// fields written.
#[cold]
fn write_recoded_field(name: &str, value: &[u8], varies: &mut bool, out: &mut Vec<u8>) -> usize {
    if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding")
    {
        return 0;
    }
    if name.eq_ignore_ascii_case("etag") && value.trim_ascii().starts_with(b"\"") {
        out.extend_from_slice(b"ETag: W/");
        out.extend_from_slice(value.trim_ascii());
        out.extend_from_slice(b"\r\n");
        return 1;
    }
    if name.eq_ignore_ascii_case("vary") {
        *varies |= value.split(|&b| b == b',').any(|token| {
            let token = token.trim_ascii();
            token == b"*" || token.eq_ignore_ascii_case(b"accept-encoding")
        });
    }
    write_field(out, name, value);
    1
}

/// The fields a compressed answer ends its head with: its coding, its Vary (a field of its own,
/// which a list field's recipients join to any other: RFC 9110 §5.3), its framing. Returns the
/// fields written.
#[cold]
fn end_recoded_head(coding: &str, varies: bool, dechunk: bool, out: &mut Vec<u8>) -> usize {
    write_field(out, "Content-Encoding", coding.as_bytes());
    if !varies {
        write_field(out, "Vary", b"Accept-Encoding");
    }
    if !dechunk {
        write_field(out, "Transfer-Encoding", b"chunked");
    }
    1 + usize::from(!varies) + usize::from(!dechunk)
}

/// The address a client connected from, for X-Forwarded-For and for hashing by client.
pub fn client_ip(peer: std::net::SocketAddr) -> std::net::IpAddr {
    match peer.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(std::net::IpAddr::V4)
            .unwrap_or(std::net::IpAddr::V6(v6)),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::head::{parse_request, parse_response, Method};

    #[test]
    fn an_answered_expectation_leaves_the_head_and_nothing_else() {
        let mut out =
            b"POST /up HTTP/1.1\r\nHost: t\r\nEXPECT: 100-continue\r\nContent-Length: 5\r\n\r\nhel"
                .to_vec();
        drop_expect(&mut out);
        assert_eq!(
            out,
            b"POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhel"
        );
        // Nothing to drop: the head and the body's bytes stay as they are, even when the body
        // looks like a field.
        let unchanged = b"POST /up HTTP/1.1\r\nHost: t\r\n\r\nExpect: 100-continue\r\n".to_vec();
        let mut out = unchanged.clone();
        drop_expect(&mut out);
        assert_eq!(out, unchanged);
    }

    fn forwarded(text: &str) -> String {
        forwarded_as(text, Forwarded::default())
    }

    fn forwarded_as(text: &str, tls: Forwarded<'_>) -> String {
        let mut headers = [const { std::mem::MaybeUninit::uninit() }; 32];
        let request = parse_request(text.as_bytes(), &mut headers, 8192)
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        let client = AddressText::new("10.1.2.3".parse().unwrap());
        write_request_head(
            &request,
            &UpgradeProtocols::new(["websocket"]),
            &client,
            tls,
            8192,
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A request head of `fields` fields after its Host, `filler` bytes each.
    fn head_with_fields(version: &str, fields: usize, filler: usize) -> String {
        let mut text = format!("GET / HTTP/1.{version}\r\n");
        if version == "1" {
            text.push_str("Host: h\r\n");
        }
        for n in 0..fields {
            text.push_str(&format!("X-Field-{n}: {}\r\n", "v".repeat(filler)));
        }
        text.push_str("\r\n");
        text
    }

    #[test]
    fn a_head_that_would_outgrow_the_limits_once_forwarded_is_refused() {
        let upgrades = UpgradeProtocols::new(["websocket"]);
        let client = AddressText::new("10.1.2.3".parse().unwrap());
        let write = |text: &str, max_head: usize| {
            let mut headers = crate::http1::header_slots();
            let request = parse_request(text.as_bytes(), &mut headers, max_head)
                .unwrap()
                .unwrap();
            let mut out = Vec::new();
            let written = write_request_head(
                &request,
                &upgrades,
                &client,
                Forwarded::default(),
                max_head,
                &mut out,
            );
            written.map(|()| out)
        };
        // 128 fields parse (Host and 127 more); forwarded with X-Forwarded-For, -Proto and
        // -Host they would be 130.
        let full = head_with_fields("1", MAX_HEADERS - 1, 1);
        assert_eq!(write(&full, 65536).err(), Some(HeadError::TooLarge));
        // With room for what herdsman adds, it goes, and what goes parses again under the same
        // limits (a second tier of herdsman accepts it).
        let fits = head_with_fields("1", MAX_HEADERS - 4, 1);
        let out = write(&fits, 65536).expect("within the limits once forwarded");
        let mut again = crate::http1::header_slots();
        assert!(parse_request(&out, &mut again, 65536).unwrap().is_some());
        // HTTP/1.0 without a Host gets one (and no X-Forwarded-Host), which counts too.
        let old = head_with_fields("0", MAX_HEADERS - 2, 1);
        assert_eq!(write(&old, 65536).err(), Some(HeadError::TooLarge));
        assert!(write(&head_with_fields("0", MAX_HEADERS - 3, 1), 65536).is_ok());
        // Bytes: a head just under max_head grows past it by the added fields.
        let long = head_with_fields("1", 4, 1900);
        assert!(long.len() < 8192);
        assert!(write(&long, long.len()).is_err());
        assert!(write(&long, long.len() + 200).is_ok());
    }

    #[test]
    fn a_request_over_tls_is_forwarded_as_https() {
        let mut headers = [const { std::mem::MaybeUninit::uninit() }; 32];
        let text = "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Client-Cert: Subject=\"CN=root\"\r\n\r\n";
        let request = parse_request(text.as_bytes(), &mut headers, 8192)
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        let client = AddressText::new("10.1.2.3".parse().unwrap());
        let upgrades = UpgradeProtocols::new(["websocket"]);
        let tls = Forwarded {
            secure: true,
            client_certificate: b"Hash=ab;Subject=\"CN=alice\"",
            trailers: false,
        };
        write_request_head(&request, &upgrades, &client, tls, 8192, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.1.2.3\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Client-Cert: Hash=ab;Subject=\"CN=alice\"\r\nX-Forwarded-Host: h\r\n\r\n"
        );
    }

    #[test]
    fn addresses_are_written_as_their_usual_text() {
        for text in [
            "10.1.2.3",
            "255.255.255.255",
            "::1",
            "2001:db8::8a2e:370:7334",
        ] {
            let address = AddressText::new(text.parse().unwrap());
            assert_eq!(address.as_bytes(), text.as_bytes());
        }
        let longest = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255";
        let ip: IpAddr = longest.parse().unwrap();
        assert_eq!(AddressText::new(ip).as_bytes(), ip.to_string().as_bytes());
    }

    #[test]
    fn te_trailers_goes_on_only_for_a_call_that_needs_it() {
        let call = "POST /s HTTP/1.1\r\nHost: a\r\nTE: gzip, trailers\r\nContent-Length: 0\r\n\r\n";
        let grpc = Forwarded {
            trailers: true,
            ..Forwarded::default()
        };
        let got = forwarded_as(call, grpc);
        assert!(got.contains("\r\nte: trailers\r\n"), "{got}");
        let got = forwarded(call);
        assert!(!got.to_ascii_lowercase().contains("te:"), "{got}");
        let got = forwarded_as("GET / HTTP/1.1\r\nHost: a\r\nTE: gzip\r\n\r\n", grpc);
        assert!(!got.to_ascii_lowercase().contains("te:"), "{got}");
    }

    #[test]
    fn request_loses_hop_by_hop_and_gains_forwarded_fields() {
        let got = forwarded(
            "GET /x?y HTTP/1.0\r\nHost: example.com\r\nConnection: keep-alive, X-Private\r\nKeep-Alive: 5\r\nX-Private: 1\r\nTE: trailers\r\nProxy-Authorization: a\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-Proto: https\r\nAccept: */*\r\n\r\n",
        );
        assert_eq!(
            got,
            "GET /x?y HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nX-Forwarded-For: 1.1.1.1, 10.1.2.3\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\n\r\n"
        );
    }

    #[test]
    fn http10_request_without_host_gains_an_empty_host() {
        let got = forwarded("GET / HTTP/1.0\r\nAccept: */*\r\n\r\n");
        assert_eq!(
            got,
            "GET / HTTP/1.1\r\nHost: \r\nAccept: */*\r\nX-Forwarded-For: 10.1.2.3\r\nX-Forwarded-Proto: http\r\n\r\n"
        );
    }

    #[test]
    fn addresses_read_as_the_standard_library_writes_them() {
        let mut rng = fastrand::Rng::with_seed(17);
        let mut samples: Vec<IpAddr> = ["0.0.0.0", "255.255.255.255", "10.0.100.9", "::1"]
            .iter()
            .map(|text| text.parse().unwrap())
            .collect();
        samples.extend((0..2_000).map(|_| IpAddr::from(rng.u32(..).to_be_bytes())));
        samples.push("2001:db8::ffff:1.2.3.4".parse().unwrap());
        for ip in samples {
            assert_eq!(AddressText::new(ip).as_bytes(), ip.to_string().as_bytes());
        }
    }

    #[test]
    fn several_forwarded_for_fields_are_joined_in_order() {
        let got = forwarded("GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2, 3.3.3.3\r\n\r\n");
        assert!(
            got.contains("X-Forwarded-For: 1.1.1.1, 2.2.2.2, 3.3.3.3, 10.1.2.3\r\n"),
            "{got}"
        );
    }

    #[test]
    fn upgrade_request_keeps_upgrade() {
        let got = forwarded(
            "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        );
        assert!(
            got.contains("Upgrade: websocket\r\n") && got.contains("Connection: upgrade\r\n"),
            "{got}"
        );
    }

    #[test]
    fn upgrade_goes_on_with_only_the_allowed_protocols() {
        let got = forwarded(
            "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\n\
             Upgrade: h2c, WebSocket\r\nUpgrade: websocket/13, irc\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
        );
        assert_eq!(
            got,
            "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket, websocket/13\r\nConnection: upgrade\r\n\
             X-Forwarded-For: 10.1.2.3\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n\r\n"
        );
        // h2c alone: a plain request, with neither Upgrade, its Connection token nor
        // HTTP2-Settings (even when Connection does not name it).
        let got = forwarded(
            "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMA\r\n\r\n",
        );
        assert_eq!(
            got,
            "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.1.2.3\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n\r\n"
        );
    }

    #[test]
    fn framing_fields_go_on_once_with_one_value() {
        for lengths in [
            "Content-Length: 2\r\nContent-Length: 2\r\n",
            "Content-Length: 2, 2\r\n",
            "content-length: 2\r\nX-A: 1\r\nContent-Length:2,2\r\n",
        ] {
            let got = forwarded(&format!("POST / HTTP/1.1\r\nHost: h\r\n{lengths}\r\n"));
            let framing: Vec<&str> = got
                .lines()
                .filter(|line| line.to_ascii_lowercase().starts_with("content-length"))
                .collect();
            assert_eq!(framing.len(), 1, "{got}");
            assert!(framing[0].ends_with(": 2"), "{got}");
        }
        let got = forwarded("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \r\nTransfer-Encoding: ChunKed \r\n\r\n");
        assert!(
            got.contains("\r\nTransfer-Encoding: chunked\r\nX-Forwarded-For"),
            "{got}"
        );
        assert_eq!(got.matches("Transfer-Encoding").count(), 1, "{got}");
    }

    #[test]
    fn absolute_form_goes_on_in_origin_form_with_its_host() {
        let got = forwarded("GET http://y/a?b HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
        assert_eq!(
            got,
            "GET /a?b HTTP/1.1\r\nHost: y\r\nAccept: */*\r\nX-Forwarded-For: 10.1.2.3\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: y\r\n\r\n"
        );
        assert!(forwarded("GET http://y?q HTTP/1.0\r\n\r\n")
            .starts_with("GET /?q HTTP/1.1\r\nHost: y\r\n"));
        assert!(forwarded("OPTIONS http://y HTTP/1.1\r\nHost: y\r\n\r\n")
            .starts_with("OPTIONS * HTTP/1.1\r\n"));
    }

    #[test]
    fn response_head_for_http10_keep_alive_and_close() {
        let text = "HTTP/1.1 200 Fine\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n";
        let mut headers = [const { std::mem::MaybeUninit::uninit() }; 32];
        let response = parse_response(text.as_bytes(), &mut headers, Method::Get, 8192)
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        let framing = ClientFraming {
            close: false,
            http10_keep_alive: true,
            dechunk: false,
            content_coding: None,
        };
        write_response_head(&response, framing, &OwnFields::default(), 8192, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 Fine\r\nContent-Length: 2\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nConnection: keep-alive\r\n\r\n"
        );
        let mut out = Vec::new();
        let framing = ClientFraming {
            close: true,
            http10_keep_alive: false,
            dechunk: false,
            content_coding: None,
        };
        write_response_head(&response, framing, &OwnFields::default(), 8192, &mut out).unwrap();
        assert!(String::from_utf8(out)
            .unwrap()
            .ends_with("Connection: close\r\n\r\n"));
    }

    #[test]
    fn a_compressed_answer_loses_its_length_weakens_its_etag_and_varies() {
        let compressed = |text: &str, dechunk: bool| {
            let mut headers = crate::http1::header_slots();
            let response = parse_response(text.as_bytes(), &mut headers, Method::Get, 8192)
                .unwrap()
                .unwrap();
            let framing = ClientFraming {
                close: dechunk,
                http10_keep_alive: false,
                dechunk,
                content_coding: Some("gzip"),
            };
            let mut out = Vec::new();
            write_response_head(&response, framing, &OwnFields::default(), 8192, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let text = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5000\r\nETag: \"v1\"\r\nVary: Cookie\r\n\r\n";
        assert_eq!(
            compressed(text, false),
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: W/\"v1\"\r\nVary: Cookie\r\n\
             Content-Encoding: gzip\r\nVary: Accept-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let text = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: W/\"v1\"\r\nVary: accept-encoding, Cookie\r\n\r\n";
        assert_eq!(
            compressed(text, true),
            "HTTP/1.1 200 OK\r\nETag: W/\"v1\"\r\nVary: accept-encoding, Cookie\r\n\
             Content-Encoding: gzip\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn a_response_that_would_outgrow_the_limits_once_forwarded_is_refused() {
        let lines: String = (0..MAX_HEADERS).map(|n| format!("X-F{n}: v\r\n")).collect();
        let text = format!("HTTP/1.1 200 OK\r\n{lines}\r\n");
        let mut headers = crate::http1::header_slots();
        let response = parse_response(text.as_bytes(), &mut headers, Method::Get, 65536)
            .unwrap()
            .unwrap();
        let close = ClientFraming {
            close: true,
            http10_keep_alive: false,
            dechunk: false,
            content_coding: None,
        };
        let keep = ClientFraming {
            close: false,
            ..close
        };
        let write = |framing, own: &OwnFields| {
            write_response_head(&response, framing, own, 65536, &mut Vec::new())
        };
        // 128 fields go on as they are; with a Connection: close, or a cookie, they are 129.
        assert_eq!(write(keep, &OwnFields::default()), Ok(()));
        assert_eq!(
            write(close, &OwnFields::default()),
            Err(HeadError::TooLarge)
        );
        let cookie = OwnFields {
            set_cookie: b"Set-Cookie: s=1\r\n",
            ..OwnFields::default()
        };
        assert_eq!(write(keep, &cookie), Err(HeadError::TooLarge));
    }
}
