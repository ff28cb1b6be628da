//! The exchange's response to a stream, read back from the HTTP/1.1 bytes it writes into the
//! pieces of an HTTP/2 response (RFC 9113 §8.1): each head (interim 1xx, then the final one)
//! encoded by HPACK straight from the parsed HTTP/1.1 fields, names lowercased, without the
//! fields HTTP/2 forbids (§8.2.2: `Connection` and the fields it names, `Keep-Alive`,
//! `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`) — no map of the fields is built; the
//! body's bytes as they come (a chunked body decoded, its trailer fields as HTTP/2 trailers),
//! and its end. The exchange writes what it would to an HTTP/1.1 client, so this is the one
//! place that knows the two differ.

use http::HeaderMap;

use super::body::{forbidden_name, BodyError, BodyPiece, BodyReader, HeadBytes};
use super::hpack;
use crate::http1::chunked::ChunkedError;
use crate::http1::{parse_response, Body, Method, Response};

/// Largest response head the exchange writes (its own limit for a server's head, and room).
const MAX_HEAD: usize = 96 * 1024;

/// Fields a response head may hold at most.
const MAX_FIELDS: usize = 256;

/// One piece of the HTTP/2 response.
#[derive(Debug)]
pub enum Piece {
    /// A head, its field block in `ResponseReader::block`; `interim` for a 1xx other than 101.
    /// `ends`: no body follows (the HEADERS frame ends the stream).
    Head {
        status: u16,
        interim: bool,
        ends: bool,
    },
    /// Body bytes: `len` at the front of the input; `last` when they end the body (its length
    /// known), so that the DATA frame carrying them ends the stream.
    Data { len: usize, last: bool },
    /// The trailer fields, which end the stream.
    Trailers(HeaderMap),
    /// The body ended (with no trailer fields): an empty DATA frame ends the stream.
    End,
}

/// Why the bytes are not a response this can read: the exchange wrote something it never writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("bad response head: {0}")]
    Head(String),
    #[error("bad chunked body: {0}")]
    Chunked(#[from] ChunkedError),
    #[error("bytes after the end of the response")]
    AfterEnd,
    #[error("a 101 is not an HTTP/2 response")]
    Switching,
}

impl From<BodyError> for ResponseError {
    fn from(error: BodyError) -> ResponseError {
        match error {
            BodyError::Chunked(error) => ResponseError::Chunked(error),
            BodyError::AfterEnd => ResponseError::AfterEnd,
        }
    }
}

impl From<BodyPiece> for Piece {
    fn from(piece: BodyPiece) -> Piece {
        match piece {
            BodyPiece::Data { len, last } => Piece::Data { len, last },
            BodyPiece::Trailers(fields) => Piece::Trailers(fields),
            BodyPiece::End => Piece::End,
        }
    }
}

/// Reads one exchange's response, piece by piece.
#[derive(Debug)]
pub struct ResponseReader {
    method: Method,
    /// The request was an extended CONNECT (RFC 8441): a 101 is its success, a 200 to the
    /// client, and the tunnel's bytes follow as its body.
    tunnel: bool,
    /// The head's bytes while they come in more than one write.
    head: HeadBytes,
    /// The body, once the final head went.
    body: Option<BodyReader>,
    /// The last head's field block (HPACK, `:status` first), kept from head to head.
    pub block: Vec<u8>,
}

impl ResponseReader {
    /// A reader for the response to a request made with `method` (a HEAD's has no body).
    pub fn new(method: Method) -> ResponseReader {
        ResponseReader {
            method,
            tunnel: false,
            head: HeadBytes::default(),
            body: None,
            block: Vec::new(),
        }
    }

    /// A reader for the response to an extended CONNECT, written to the server as a WebSocket
    /// handshake (`request_head`).
    pub fn for_tunnel() -> ResponseReader {
        ResponseReader {
            tunnel: true,
            ..ResponseReader::new(Method::Get)
        }
    }

    /// Whether the response has ended.
    pub fn is_done(&self) -> bool {
        self.body.as_ref().is_some_and(BodyReader::is_done)
    }

    /// Whether the head has gone and body bytes are being read.
    pub fn in_body(&self) -> bool {
        self.body.as_ref().is_some_and(|body| !body.is_done())
    }

    /// Reads from the front of `input`: how many bytes it took, and the piece they made if one is
    /// complete. Call again with the rest; a call that takes nothing and makes nothing needs more.
    pub fn read(&mut self, input: &[u8]) -> Result<(usize, Option<Piece>), ResponseError> {
        match &mut self.body {
            None => self.read_head(input),
            Some(body) => {
                let (taken, piece) = body.read(input)?;
                Ok((taken, piece.map(Piece::from)))
            }
        }
    }

    /// The exchange is over: the end of a body that ends with it.
    pub fn finish(&mut self) -> Option<Piece> {
        self.body.as_mut()?.finish().map(Piece::from)
    }

    fn read_head(&mut self, input: &[u8]) -> Result<(usize, Option<Piece>), ResponseError> {
        let (method, tunnel) = (self.method, self.tunnel);
        let block = &mut self.block;
        let (taken, made) = self
            .head
            .parse(input, |bytes| -> Result<_, ResponseError> {
                let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_FIELDS];
                let parsed = parse_response(bytes, &mut slots, method, MAX_HEAD)
                    .map_err(|e| ResponseError::Head(format!("{e:?}")))?;
                let Some(response) = parsed else {
                    return Ok(None);
                };
                if tunnel && response.code == 101 {
                    // RFC 8441 §5: the tunnel is open; its bytes are the stream's DATA.
                    encode_head(&response, 200, &[b"sec-websocket-accept"], block)?;
                    let made = (200, false, Body::UntilClose);
                    return Ok(Some((made, response.head_len)));
                }
                if response.code == 101 {
                    return Err(ResponseError::Switching);
                }
                encode_head(&response, response.code, &[], block)?;
                let made = (response.code, response.is_interim(), response.body);
                Ok(Some((made, response.head_len)))
            })?;
        let Some((status, interim, body)) = made else {
            return Ok((taken, None));
        };
        if interim {
            return Ok((
                taken,
                Some(Piece::Head {
                    status,
                    interim,
                    ends: false,
                }),
            ));
        }
        // A Content-Length stays: HTTP/2 allows it, and it must match the DATA frames.
        let body = BodyReader::new(body);
        let ends = body.is_done();
        self.body = Some(body);
        Ok((
            taken,
            Some(Piece::Head {
                status,
                interim,
                ends,
            }),
        ))
    }
}

/// Encodes `response`'s head with `status` into `block` (emptied first): its fields but those
/// HTTP/2 forbids, those its Connection field names and those in `dropped`, names lowercased.
fn encode_head(
    response: &Response<'_, '_>,
    status: u16,
    dropped: &[&[u8]],
    block: &mut Vec<u8>,
) -> Result<(), ResponseError> {
    block.clear();
    hpack::encode_status(block, status);
    // Names are lowercased on the stack (a longer one, which no response of a server should
    // have, is refused).
    let mut lower = [0u8; 256];
    for field in response.headers {
        let name = field.name.as_bytes();
        let Some(lower) = lower.get_mut(..name.len()) else {
            return Err(ResponseError::Head(format!("field name {:?}", field.name)));
        };
        for (to, from) in lower.iter_mut().zip(name) {
            *to = from.to_ascii_lowercase();
        }
        let lower = &*lower;
        if forbidden_name(lower)
            || dropped.contains(&lower)
            || response.connection.names(field.name)
        {
            continue;
        }
        if lower == b"set-cookie" {
            // The one response field that carries a secret: never indexed by any hop.
            hpack::encode_field_never_indexed(block, lower, field.value);
        } else {
            hpack::encode_field(block, lower, field.value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A head's field block as its fields, `{"name": "value", …}`, its `:status` checked.
    fn decoded(block: &[u8], status: u16) -> String {
        let mut decoder = hpack::Decoder::new(4096);
        let mut fields = Vec::new();
        decoder
            .decode(block, &mut Vec::new(), |name, value| -> Result<(), ()> {
                fields.push((
                    String::from_utf8_lossy(name).into_owned(),
                    String::from_utf8_lossy(value).into_owned(),
                ));
                Ok(())
            })
            .unwrap();
        assert_eq!(fields[0], (":status".to_string(), status.to_string()));
        let rest: Vec<String> = fields[1..]
            .iter()
            .map(|(name, value)| format!("{name:?}: {value:?}"))
            .collect();
        format!("{{{}}}", rest.join(", "))
    }

    /// Every piece `bytes` make, fed in writes of at most `step` bytes; data as text.
    fn pieces(method: Method, bytes: &[u8], step: usize) -> Vec<String> {
        let mut reader = ResponseReader::new(method);
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        for write in bytes.chunks(step) {
            pending.extend_from_slice(write);
            loop {
                let (taken, piece) = reader.read(&pending).unwrap();
                match piece {
                    Some(Piece::Head {
                        status,
                        interim,
                        ends,
                    }) => out.push(format!(
                        "head {status} {} interim={interim} ends={ends}",
                        decoded(&reader.block, status)
                    )),
                    Some(Piece::Data { len, last }) => {
                        out.push(format!("data {}", String::from_utf8_lossy(&pending[..len])));
                        if last {
                            // The stream ends with these bytes.
                            out.push("end".into());
                        }
                    }
                    Some(Piece::Trailers(t)) => out.push(format!("trailers {t:?}")),
                    Some(Piece::End) => out.push("end".into()),
                    None => {}
                }
                pending.drain(..taken);
                if taken == 0
                    && (pending.is_empty()
                        || reader.is_done()
                        || out.last().is_some_and(|p| p == "end"))
                {
                    break;
                }
                if taken == 0 {
                    break;
                }
            }
        }
        if let Some(Piece::End) = reader.finish() {
            out.push("end".into());
        }
        out
    }

    #[test]
    fn a_length_body_passes_and_hop_by_hop_fields_go() {
        let bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close, x-hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nServer: s\r\n\r\nhello";
        for step in [1, 7, bytes.len()] {
            let got = pieces(Method::Get, bytes, step);
            assert_eq!(
                got[0],
                "head 200 {\"content-length\": \"5\", \"server\": \"s\"} interim=false ends=false",
                "step {step}"
            );
            let data: String = got[1..got.len() - 1]
                .iter()
                .map(|p| p.trim_start_matches("data "))
                .collect();
            assert_eq!(data, "hello", "step {step}: {got:?}");
            assert_eq!(got.last().unwrap(), "end");
        }
    }

    #[test]
    fn the_last_bytes_of_a_known_length_end_the_stream_themselves() {
        let mut reader = ResponseReader::new(Method::Get);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        let (taken, _) = reader.read(head).unwrap();
        assert_eq!(taken, head.len());
        let (_, piece) = reader.read(b"hel").unwrap();
        assert!(matches!(
            piece,
            Some(Piece::Data {
                len: 3,
                last: false
            })
        ));
        let (_, piece) = reader.read(b"lo").unwrap();
        assert!(matches!(piece, Some(Piece::Data { len: 2, last: true })));
        assert!(reader.is_done());
        // No empty DATA frame follows.
        assert!(reader.read(b"").unwrap().1.is_none());
    }

    #[test]
    fn a_chunked_body_is_decoded_and_its_trailers_become_http2_trailers() {
        let bytes = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\ngrpc-status: 0\r\ngrpc-message: ok\r\n\r\n";
        for step in [1, 5, bytes.len()] {
            let got = pieces(Method::Post, bytes, step);
            assert_eq!(
                got[0], "head 200 {} interim=false ends=false",
                "step {step}"
            );
            let data: String = got.iter().filter_map(|p| p.strip_prefix("data ")).collect();
            assert_eq!(data, "abcde", "step {step}");
            assert_eq!(
                got.last().unwrap(),
                "trailers {\"grpc-status\": \"0\", \"grpc-message\": \"ok\"}",
                "step {step}"
            );
        }
    }

    #[test]
    fn interim_heads_and_bodiless_answers_end_where_they_should() {
        let bytes =
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        let got = pieces(Method::Get, bytes, bytes.len());
        assert_eq!(
            got[0],
            "head 103 {\"link\": \"</a.css>\"} interim=true ends=false"
        );
        assert_eq!(got[1], "head 204 {} interim=false ends=true");
        assert_eq!(got.len(), 2);
        let head_answer = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
        let got = pieces(Method::Head, head_answer, head_answer.len());
        assert_eq!(
            got,
            ["head 200 {\"content-length\": \"10\"} interim=false ends=true"]
        );
    }

    #[test]
    fn a_body_until_close_ends_with_the_exchange_and_a_101_is_refused() {
        let got = pieces(
            Method::Get,
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it",
            64,
        );
        assert_eq!(got[1], "data all of it");
        assert_eq!(got.last().unwrap(), "end");
        let mut reader = ResponseReader::new(Method::Get);
        assert_eq!(
            reader
                .read(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
                .unwrap_err(),
            ResponseError::Switching
        );
    }
}
