//! A message body as the exchange writes it in HTTP/1.1 (a length, the chunked coding with its
//! trailer section, or until the exchange ends), read back into HTTP/2's pieces: the bytes as
//! they come, the trailer fields, the end. Shared by both directions (`response`: a response to
//! a client's stream; `server`: a request to a server's).

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

use crate::http1::chunked::{ChunkedDecoder, ChunkedError, Step, MAX_TRAILERS};
use crate::http1::Body;

/// A head's bytes as writes bring them: parsed where they are when one write held the whole head
/// (the usual case), gathered when it took more than one.
#[derive(Debug, Default)]
pub struct HeadBytes(Vec<u8>);

impl HeadBytes {
    /// Parses the head `input` holds or ends (after what earlier writes brought) with `parse`,
    /// which gives what it made of a whole head and the head's length, or `None` for a head not
    /// yet whole. Returns how many bytes of `input` were taken, and what `parse` made.
    pub fn parse<T, E>(
        &mut self,
        input: &[u8],
        parse: impl FnOnce(&[u8]) -> Result<Option<(T, usize)>, E>,
    ) -> Result<(usize, Option<T>), E> {
        let gathered = !self.0.is_empty();
        if gathered {
            self.0.extend_from_slice(input);
        }
        let bytes: &[u8] = if gathered { &self.0 } else { input };
        let earlier = bytes.len() - input.len();
        match parse(bytes)? {
            None => {
                if !gathered {
                    self.0.extend_from_slice(input);
                }
                Ok((input.len(), None))
            }
            Some((made, head_len)) => {
                self.0 = Vec::new();
                Ok((head_len - earlier, Some(made)))
            }
        }
    }
}

/// One piece of a body.
#[derive(Debug)]
pub enum BodyPiece {
    /// Body bytes: `len` at the front of the input; `last` when they end the body (its length
    /// known), so that the DATA frame carrying them ends the stream.
    Data { len: usize, last: bool },
    /// The trailer fields, which end the stream.
    Trailers(HeaderMap),
    /// The body ended (with no trailer fields): an empty DATA frame ends the stream.
    End,
}

/// Why the bytes are not a body this can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("bad chunked body: {0}")]
    Chunked(#[from] ChunkedError),
    #[error("bytes after the end of the message")]
    AfterEnd,
}

#[derive(Debug)]
enum BodyState {
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Until the exchange ends (the HTTP/1.1 message would have ended with its connection).
    UntilEnd,
    Done,
}

/// Reads one body, piece by piece.
#[derive(Debug)]
pub struct BodyReader {
    state: BodyState,
    /// The trailer section's lines while they come.
    trailers: Vec<u8>,
    /// The start of a trailer field line whose end has not come yet.
    carry: Vec<u8>,
}

impl BodyReader {
    /// A reader for a body framed as `body` says.
    pub fn new(body: Body) -> BodyReader {
        BodyReader {
            state: match body {
                Body::None | Body::Length(0) => BodyState::Done,
                Body::Length(n) => BodyState::Length(n),
                Body::Chunked => BodyState::Chunked(ChunkedDecoder::new()),
                Body::UntilClose => BodyState::UntilEnd,
            },
            trailers: Vec::new(),
            carry: Vec::new(),
        }
    }

    /// Whether the body has ended.
    pub fn is_done(&self) -> bool {
        matches!(self.state, BodyState::Done)
    }

    /// Reads from the front of `input`: how many bytes it took, and the piece they made if one is
    /// complete. Call again with the rest; a call that takes nothing and makes nothing needs more.
    pub fn read(&mut self, input: &[u8]) -> Result<(usize, Option<BodyPiece>), BodyError> {
        match &mut self.state {
            BodyState::Length(left) => {
                let take = (input.len() as u64).min(*left) as usize;
                *left -= take as u64;
                if take > 0 {
                    // The last bytes end the stream in their own frame: no empty DATA frame after
                    // them, one frame less per response.
                    let last = *left == 0;
                    if last {
                        self.state = BodyState::Done;
                    }
                    return Ok((take, Some(BodyPiece::Data { len: take, last })));
                }
                if *left == 0 {
                    self.state = BodyState::Done;
                    return Ok((0, Some(BodyPiece::End)));
                }
                Ok((0, None))
            }
            BodyState::Chunked(decoder) => {
                let trailer_line = decoder.at_trailer_line();
                if !self.carry.is_empty() {
                    // The start of a trailer field line came before: the line with what follows.
                    let carried = self.carry.len();
                    self.carry.extend_from_slice(input);
                    let (step, line) = match decoder.step(&self.carry)? {
                        Step::Framing(0) => return Ok((input.len(), None)),
                        Step::Framing(n) => (n, true),
                        Step::Dropped(n) => (n, false),
                        other => {
                            unreachable!("a trailer line's step is framing or dropped: {other:?}")
                        }
                    };
                    if line {
                        if self.trailers.len() + step > MAX_TRAILERS {
                            return Err(BodyError::Chunked(ChunkedError::Trailer));
                        }
                        self.trailers.extend_from_slice(&self.carry[..step]);
                    }
                    self.carry.clear();
                    return Ok((step - carried, None));
                }
                match decoder.step(input)? {
                    // The start of a trailer field line whose end has not come: kept for it.
                    Step::Framing(0) if trailer_line && !input.is_empty() => {
                        self.carry.extend_from_slice(input);
                        Ok((input.len(), None))
                    }
                    // No input: nothing to make of it.
                    Step::Data(0) => Ok((0, None)),
                    Step::Data(n) => Ok((
                        n,
                        Some(BodyPiece::Data {
                            len: n,
                            last: false,
                        }),
                    )),
                    // A field line; the section's last, empty line (its CR alone, when the input
                    // ends there) is framing.
                    Step::Framing(n) if trailer_line && n > 0 && input[0] != b'\r' => {
                        if self.trailers.len() + n > MAX_TRAILERS {
                            return Err(BodyError::Chunked(ChunkedError::Trailer));
                        }
                        self.trailers.extend_from_slice(&input[..n]);
                        Ok((n, None))
                    }
                    Step::Framing(n) | Step::Dropped(n) => Ok((n, None)),
                    Step::Done(n) => {
                        self.state = BodyState::Done;
                        let trailers = trailer_fields(&self.trailers)?;
                        self.trailers = Vec::new();
                        Ok((
                            n,
                            Some(if trailers.is_empty() {
                                BodyPiece::End
                            } else {
                                BodyPiece::Trailers(trailers)
                            }),
                        ))
                    }
                }
            }
            BodyState::UntilEnd => Ok((
                input.len(),
                (!input.is_empty()).then_some(BodyPiece::Data {
                    len: input.len(),
                    last: false,
                }),
            )),
            BodyState::Done if input.is_empty() => Ok((0, None)),
            BodyState::Done => Err(BodyError::AfterEnd),
        }
    }

    /// The exchange is over: the end of a body that ends with it.
    pub fn finish(&mut self) -> Option<BodyPiece> {
        match self.state {
            BodyState::UntilEnd => {
                self.state = BodyState::Done;
                Some(BodyPiece::End)
            }
            _ => None,
        }
    }
}

/// Fields a message in HTTP/2 must not carry (RFC 9113 §8.2.2).
pub fn forbidden_in_http2(name: &HeaderName) -> bool {
    forbidden_name(name.as_str().as_bytes())
}

/// [`forbidden_in_http2`] for a lowercase name's bytes.
pub fn forbidden_name(name: &[u8]) -> bool {
    matches!(
        name,
        b"connection" | b"transfer-encoding" | b"upgrade" | b"keep-alive" | b"proxy-connection"
    )
}

/// The trailer section's field lines (each ending CRLF, as the chunked decoder checked them) as
/// HTTP/2 trailer fields, without those HTTP/2 forbids.
fn trailer_fields(lines: &[u8]) -> Result<HeaderMap, BodyError> {
    let mut fields = HeaderMap::new();
    for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(BodyError::Chunked(ChunkedError::Trailer))?;
        let name = HeaderName::from_bytes(&line[..colon])
            .map_err(|_| BodyError::Chunked(ChunkedError::Trailer))?;
        let value = line[colon + 1..].trim_ascii();
        let value = HeaderValue::from_bytes(value)
            .map_err(|_| BodyError::Chunked(ChunkedError::Trailer))?;
        if !forbidden_in_http2(&name) {
            fields.append(name, value);
        }
    }
    Ok(fields)
}
