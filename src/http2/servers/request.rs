//! The exchange's request to an HTTP/2 server, read from the HTTP/1.1 bytes it writes into the
//! pieces of an HTTP/2 request (RFC 9113 §8.3): the head as `:method`, `:scheme`, `:authority`
//! (from Host) and `:path`, without the fields HTTP/2 forbids (§8.2.2: `Connection` and the
//! fields it names, `Keep-Alive`, `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`, a `te`
//! other than `trailers`); then the body's bytes as they come (a chunked body decoded, its
//! trailer fields as HTTP/2 trailers) and its end.

use crate::http1::{parse_request, HeadError};
use crate::http2::body::{forbidden_name, BodyError, BodyPiece, BodyReader, HeadBytes};
use crate::http2::hpack::{encode_field, encode_indexed};

/// Largest request head the exchange writes (its own limit for a client's head, and room).
const MAX_HEAD: usize = 96 * 1024;

/// One piece of the HTTP/2 request.
#[derive(Debug)]
pub enum RequestPiece {
    /// The head, as the HPACK block of its HEADERS frame (stateless: literals without
    /// indexing, names by their static index where the table has them); `ends`: no body
    /// follows (the HEADERS frame ends the stream); `head_request`: a HEAD, whose response has
    /// no body.
    Head {
        block: Vec<u8>,
        ends: bool,
        head_request: bool,
    },
    Body(BodyPiece),
}

/// Why the bytes are not a request an HTTP/2 server can be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("bad request head: {0:?}")]
    Head(HeadError),
    #[error("a request to an HTTP/2 server needs a Host")]
    NoHost,
    #[error("{0} cannot be sent in HTTP/2")]
    Field(&'static str),
    #[error(transparent)]
    Body(#[from] BodyError),
}

/// Reads one exchange's request, piece by piece.
#[derive(Debug)]
pub struct RequestReader {
    tls: bool,
    /// The head's bytes while they come in more than one write.
    head: HeadBytes,
    /// The body, once the head went.
    body: Option<BodyReader>,
}

impl RequestReader {
    /// A reader for a request to a server reached over TLS (`https`) or not.
    pub fn new(tls: bool) -> RequestReader {
        RequestReader {
            tls,
            head: HeadBytes::default(),
            body: None,
        }
    }

    /// Whether the head went and body bytes are being read.
    pub fn in_body(&self) -> bool {
        self.body.as_ref().is_some_and(|body| !body.is_done())
    }

    /// Whether the whole request was read.
    pub fn is_done(&self) -> bool {
        self.body.as_ref().is_some_and(BodyReader::is_done)
    }

    /// Reads from the front of `input`: how many bytes it took, and the piece they made if one is
    /// complete. Call again with the rest; a call that takes nothing and makes nothing needs more.
    pub fn read(&mut self, input: &[u8]) -> Result<(usize, Option<RequestPiece>), RequestError> {
        match &mut self.body {
            None => self.read_head(input),
            Some(body) => {
                let (taken, piece) = body.read(input)?;
                Ok((taken, piece.map(RequestPiece::Body)))
            }
        }
    }

    fn read_head(&mut self, input: &[u8]) -> Result<(usize, Option<RequestPiece>), RequestError> {
        let tls = self.tls;
        let (taken, made) = self.head.parse(input, |bytes| -> Result<_, RequestError> {
            let mut slots = crate::http1::header_slots();
            let parsed = parse_request(bytes, &mut slots, MAX_HEAD).map_err(RequestError::Head)?;
            let Some(request) = parsed else {
                return Ok(None);
            };
            let block = http2_request(&request, tls)?;
            let head_request = request.method_text == "HEAD";
            Ok(Some((
                (block, head_request, request.body),
                request.head_len,
            )))
        })?;
        let Some((block, head_request, body)) = made else {
            return Ok((taken, None));
        };
        let body = BodyReader::new(body);
        let ends = body.is_done();
        self.body = Some(body);
        let head = RequestPiece::Head {
            block,
            ends,
            head_request,
        };
        Ok((taken, Some(head)))
    }
}

/// The HPACK block of `request`'s head in HTTP/2 (RFC 9113 §8.3.1), to a server reached over
/// TLS or not: the pseudo-fields, then the fields HTTP/2 allows, their names lowercased.
fn http2_request(
    request: &crate::http1::Request<'_, '_>,
    tls: bool,
) -> Result<Vec<u8>, RequestError> {
    let host = request.host.ok_or(RequestError::NoHost)?;
    if host.is_empty() {
        return Err(RequestError::NoHost);
    }
    if request.method_text == "CONNECT" {
        return Err(RequestError::Field("CONNECT"));
    }
    let mut block = Vec::with_capacity(256);
    // The static table's whole entries (RFC 7541 Appendix A): 2 GET, 3 POST, 4 `/`, 6 http,
    // 7 https.
    match request.method_text {
        "GET" => encode_indexed(&mut block, 2),
        "POST" => encode_indexed(&mut block, 3),
        method => encode_field(&mut block, b":method", method.as_bytes()),
    }
    encode_indexed(&mut block, if tls { 7 } else { 6 });
    encode_field(&mut block, b":authority", host);
    match request.forwarded_target {
        "" | "/" => encode_indexed(&mut block, 4),
        target if target.starts_with('?') => {
            let mut path = Vec::with_capacity(target.len() + 1);
            path.push(b'/');
            path.extend_from_slice(target.as_bytes());
            encode_field(&mut block, b":path", &path);
        }
        target if target.starts_with('/') || target == "*" => {
            encode_field(&mut block, b":path", target.as_bytes())
        }
        _ => return Err(RequestError::Field("the request target")),
    }
    let mut lowered = Vec::new();
    for field in request.headers {
        let name = field.name.as_bytes();
        let name = if name.iter().any(u8::is_ascii_uppercase) {
            lowered.clear();
            lowered.extend(name.iter().map(u8::to_ascii_lowercase));
            &lowered[..]
        } else {
            name
        };
        if name == b"host" || forbidden_name(name) || request.connection.names(field.name) {
            continue;
        }
        // §8.2.2: te only as "trailers" (gRPC sends it; an HTTP/1.1 client's other codings mean
        // nothing to an HTTP/2 server).
        if name == b"te" {
            // HTTP/1.1's tokens are case-insensitive; HTTP/2's te is "trailers" exactly, which a
            // strict server holds it to (found by the fuzz target h2_server_request).
            if field.value.eq_ignore_ascii_case(b"trailers") {
                encode_field(&mut block, b"te", b"trailers");
            }
            continue;
        }
        encode_field(&mut block, name, field.value);
    }
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `bytes` make, fed in writes of at most `step` bytes: each head, trailers and end as
    /// a line, and the body's bytes joined (with whether the last of them ended the stream).
    fn pieces(bytes: &[u8], step: usize) -> (Vec<String>, String, bool) {
        let mut reader = RequestReader::new(false);
        let (mut lines, mut data, mut last_data) = (Vec::new(), String::new(), false);
        let mut pending: Vec<u8> = Vec::new();
        for write in bytes.chunks(step) {
            pending.extend_from_slice(write);
            loop {
                let (taken, piece) = reader.read(&pending).unwrap();
                match piece {
                    Some(RequestPiece::Head { block, ends, .. }) => {
                        lines.push(format!("{} ends={ends}", head_line(&block)));
                    }
                    Some(RequestPiece::Body(BodyPiece::Data { len, last })) => {
                        data.push_str(&String::from_utf8_lossy(&pending[..len]));
                        last_data = last;
                    }
                    Some(RequestPiece::Body(BodyPiece::Trailers(t))) => {
                        lines.push(format!("trailers {t:?}"))
                    }
                    Some(RequestPiece::Body(BodyPiece::End)) => lines.push("end".into()),
                    None if taken == 0 => break,
                    None => {}
                }
                pending.drain(..taken);
            }
        }
        (lines, data, last_data)
    }

    /// A head's block decoded back: "METHOD scheme://authority/path [fields, sorted]".
    fn head_line(block: &[u8]) -> String {
        let mut decoder = crate::http2::hpack::Decoder::new(4096);
        let (mut pseudo, mut fields) = (Vec::new(), Vec::new());
        decoder
            .decode(block, &mut Vec::new(), |name, value| {
                let (name, value) = (
                    String::from_utf8_lossy(name),
                    String::from_utf8_lossy(value),
                );
                match name.strip_prefix(':') {
                    Some(name) => pseudo.push((name.to_string(), value.to_string())),
                    None => fields.push(format!("{name}={value}")),
                }
                Ok::<(), ()>(())
            })
            .unwrap();
        let names: Vec<_> = pseudo.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            ["method", "scheme", "authority", "path"],
            "the pseudo-fields first"
        );
        fields.sort();
        let [method, scheme, authority, path] = [0, 1, 2, 3].map(|i| &pseudo[i].1);
        format!("{method} {scheme}://{authority}{path} {fields:?}")
    }

    #[test]
    fn a_get_becomes_pseudo_fields_without_hop_by_hop_fields() {
        let request = b"GET /a?b=1 HTTP/1.1\r\nhost: api.test\r\nconnection: keep-alive, x-hop\r\n\
                        x-hop: 1\r\nkeep-alive: 5\r\nte: gzip\r\nx-forwarded-for: 10.0.0.1\r\n\r\n";
        for step in [1, 7, request.len()] {
            let (lines, data, _) = pieces(request, step);
            assert_eq!(
                lines,
                [r#"GET http://api.test/a?b=1 ["x-forwarded-for=10.0.0.1"] ends=true"#],
                "in writes of {step}"
            );
            assert_eq!(data, "");
        }
    }

    #[test]
    fn a_chunked_grpc_body_is_decoded_with_te_trailers_kept_and_its_trailers_passed() {
        let request = b"POST /pkg.Svc/Call HTTP/1.1\r\nhost: grpc.test\r\n\
                        content-type: application/grpc\r\nte: Trailers\r\n\
                        transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nx-t: 1\r\n\r\n";
        // `Trailers`, as HTTP/1.1 allows, goes to the server as HTTP/2's `trailers`.
        for step in [1, 3, request.len()] {
            let (lines, data, last) = pieces(request, step);
            assert_eq!(
                lines,
                [
                    r#"POST http://grpc.test/pkg.Svc/Call ["content-type=application/grpc", "te=trailers"] ends=false"#,
                    r#"trailers {"x-t": "1"}"#,
                ],
                "in writes of {step}"
            );
            assert_eq!((data.as_str(), last), ("hello", false));
        }
    }

    #[test]
    fn names_are_lowercased_and_other_methods_and_targets_written_out() {
        let request =
            b"DELETE http://api.test?q=1 HTTP/1.1\r\nHost: api.test\r\nX-Trace-Id: 7\r\n\r\n";
        let (lines, _, _) = pieces(request, request.len());
        assert_eq!(
            lines,
            [r#"DELETE http://api.test/?q=1 ["x-trace-id=7"] ends=true"#]
        );
        let connect = b"CONNECT api.test:443 HTTP/1.1\r\nhost: api.test:443\r\n\r\n";
        let mut reader = RequestReader::new(true);
        assert!(reader.read(connect).is_err(), "CONNECT has no place here");
    }

    #[test]
    fn a_body_of_known_length_ends_with_its_last_bytes() {
        let request = b"PUT /x HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\nabc";
        let (lines, data, last) = pieces(request, request.len());
        assert_eq!(lines, [r#"PUT http://a/x ["content-length=3"] ends=false"#]);
        assert_eq!((data.as_str(), last), ("abc", true));
    }
}
