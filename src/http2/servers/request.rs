//! The exchange's request to an HTTP/2 server, read from the HTTP/1.1 bytes it writes into the
//! pieces of an HTTP/2 request (RFC 9113 §8.3): the head as `:method`, `:scheme`, `:authority`
//! (from Host) and `:path`, without the fields HTTP/2 forbids (§8.2.2: `Connection` and the
//! fields it names, `Keep-Alive`, `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`, a `te`
//! other than `trailers`); then the body's bytes as they come (a chunked body decoded, its
//! trailer fields as HTTP/2 trailers) and its end.

use http::header::{HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};

use crate::http1::{parse_request, HeadError};
use crate::http2::body::{forbidden_in_http2, BodyError, BodyPiece, BodyReader, HeadBytes};

/// Largest request head the exchange writes (its own limit for a client's head, and room).
const MAX_HEAD: usize = 96 * 1024;

/// One piece of the HTTP/2 request.
#[derive(Debug)]
pub enum RequestPiece {
    /// The head; `ends`: no body follows (the HEADERS frame ends the stream).
    Head {
        head: http::Request<()>,
        ends: bool,
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
    scheme: Scheme,
    /// The head's bytes while they come in more than one write.
    head: HeadBytes,
    /// The body, once the head went.
    body: Option<BodyReader>,
}

impl RequestReader {
    /// A reader for a request to a server reached over TLS (`https`) or not.
    pub fn new(tls: bool) -> RequestReader {
        RequestReader {
            scheme: if tls { Scheme::HTTPS } else { Scheme::HTTP },
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
        let scheme = &self.scheme;
        let (taken, made) = self.head.parse(input, |bytes| -> Result<_, RequestError> {
            let mut slots = crate::http1::header_slots();
            let parsed = parse_request(bytes, &mut slots, MAX_HEAD).map_err(RequestError::Head)?;
            let Some(request) = parsed else {
                return Ok(None);
            };
            let head = http2_request(&request, scheme.clone())?;
            Ok(Some(((head, request.body), request.head_len)))
        })?;
        let Some((head, body)) = made else {
            return Ok((taken, None));
        };
        let body = BodyReader::new(body);
        let ends = body.is_done();
        self.body = Some(body);
        Ok((taken, Some(RequestPiece::Head { head, ends })))
    }
}

/// The HTTP/2 form of `request`'s head, reached over `scheme`.
fn http2_request(
    request: &crate::http1::Request<'_, '_>,
    scheme: Scheme,
) -> Result<http::Request<()>, RequestError> {
    let host = request.host.ok_or(RequestError::NoHost)?;
    let authority = Authority::try_from(host).map_err(|_| RequestError::NoHost)?;
    let path = match request.forwarded_target {
        "" => PathAndQuery::from_static("/"),
        target if target.starts_with('?') => format!("/{target}")
            .parse()
            .map_err(|_| RequestError::Field("the request target"))?,
        target => target
            .parse()
            .map_err(|_| RequestError::Field("the request target"))?,
    };
    let uri = http::Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(path)
        .build()
        .map_err(|_| RequestError::Field("the request target"))?;
    let method = http::Method::from_bytes(request.method_text.as_bytes())
        .map_err(|_| RequestError::Field("the method"))?;
    if method == http::Method::CONNECT {
        return Err(RequestError::Field("CONNECT"));
    }
    let mut head = http::Request::new(());
    *head.method_mut() = method;
    *head.uri_mut() = uri;
    let fields = head.headers_mut();
    for field in request.headers {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| RequestError::Field("a field name"))?;
        if name == http::header::HOST
            || forbidden_in_http2(&name)
            || request.connection.names(field.name)
        {
            continue;
        }
        // §8.2.2: te only as "trailers" (gRPC sends it; an HTTP/1.1 client's other codings mean
        // nothing to an HTTP/2 server).
        if name == http::header::TE {
            // HTTP/1.1's tokens are case-insensitive; HTTP/2's te is "trailers" exactly, which a
            // strict server holds it to (found by the fuzz target h2_server_request).
            if field.value.eq_ignore_ascii_case(b"trailers") {
                fields.append(name, HeaderValue::from_static("trailers"));
            }
            continue;
        }
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| RequestError::Field("a field value"))?;
        fields.append(name, value);
    }
    Ok(head)
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
                    Some(RequestPiece::Head { head, ends }) => {
                        let mut fields: Vec<_> = head
                            .headers()
                            .iter()
                            .map(|(n, v)| format!("{n}={}", v.to_str().unwrap()))
                            .collect();
                        fields.sort();
                        let (method, uri) = (head.method(), head.uri());
                        lines.push(format!("{method} {uri} {fields:?} ends={ends}"));
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
    fn a_body_of_known_length_ends_with_its_last_bytes() {
        let request = b"PUT /x HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\nabc";
        let (lines, data, last) = pieces(request, request.len());
        assert_eq!(lines, [r#"PUT http://a/x ["content-length=3"] ends=false"#]);
        assert_eq!((data.as_str(), last), ("abc", true));
    }
}
