//! A streaming, strict decoder for the chunked transfer coding (RFC 9112 §7.1).
//!
//! It never buffers: each call to [`ChunkedDecoder::step`] says how many bytes at the front of
//! the input are framing, data or the end of the message, so a caller can forward the bytes as
//! they are (after they were checked) or forward only the data (to re-frame the body). It refuses
//! what proxies and servers disagree about: bare LF line endings, chunk sizes with signs or
//! spaces inside, sizes that overflow, obs-folded trailers.

/// Longest chunk size, extensions included, before the line is refused.
const MAX_SIZE_LINE: usize = 4096;
/// Longest trailer section accepted.
const MAX_TRAILERS: usize = 16384;

/// What the bytes at the front of the input are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// This many bytes are framing (sizes, extensions, line ends, trailers). 0 means the decoder
    /// needs more input (it only returns 0 for empty input).
    Framing(usize),
    /// This many bytes are body data.
    Data(usize),
    /// The message ends after this many bytes (framing). Nothing after them belongs to it.
    Done(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    #[error("invalid chunk size")]
    Size,
    #[error("chunk size too large")]
    SizeOverflow,
    #[error("invalid chunk extension")]
    Extension,
    #[error("chunk not followed by CRLF")]
    DataEnd,
    #[error("invalid trailer section")]
    Trailer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits; `digits` counts them.
    Size {
        digits: u8,
    },
    /// After the size: optional whitespace, then `;` extensions or CR.
    SizeRest,
    /// Inside chunk extensions, up to CR.
    Extension,
    /// CR seen after the size line; LF must follow.
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line.
    TrailerLine,
    TrailerLineLf,
    /// CR of the final empty line seen.
    EndLf,
    Finished,
}

/// Decoder state for one chunked body.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// Size of the current chunk while reading it; bytes of it left while in `Data`.
    remaining: u64,
    line_len: usize,
    trailer_len: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> ChunkedDecoder {
        ChunkedDecoder {
            state: State::Size { digits: 0 },
            remaining: 0,
            line_len: 0,
            trailer_len: 0,
        }
    }

    /// True once the last chunk and the trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Finished
    }

    /// Classifies the bytes at the front of `input`. Call again with the rest.
    pub fn step(&mut self, input: &[u8]) -> Result<Step, ChunkedError> {
        if self.state == State::Data {
            let take = (input.len() as u64).min(self.remaining) as usize;
            self.remaining -= take as u64;
            if self.remaining == 0 {
                self.state = State::DataCr;
            }
            return Ok(Step::Data(take));
        }
        for (i, &byte) in input.iter().enumerate() {
            self.framing_byte(byte)?;
            match self.state {
                State::Data => return Ok(Step::Framing(i + 1)),
                State::Finished => return Ok(Step::Done(i + 1)),
                _ => {}
            }
        }
        Ok(Step::Framing(input.len()))
    }

    fn framing_byte(&mut self, byte: u8) -> Result<(), ChunkedError> {
        match self.state {
            State::Size { digits } => match hex_value(byte) {
                Some(value) => {
                    if digits >= 16 {
                        return Err(ChunkedError::SizeOverflow);
                    }
                    self.remaining = (self.remaining << 4) | u64::from(value);
                    self.state = State::Size { digits: digits + 1 };
                }
                None if digits == 0 => return Err(ChunkedError::Size),
                None => {
                    self.line_len = usize::from(digits);
                    self.state = State::SizeRest;
                    return self.framing_byte(byte);
                }
            },
            State::SizeRest => match byte {
                b' ' | b'\t' => self.count_line()?,
                b';' => {
                    self.count_line()?;
                    self.state = State::Extension;
                }
                b'\r' => self.state = State::SizeLf,
                _ => return Err(ChunkedError::Size),
            },
            State::Extension => match byte {
                b'\r' => self.state = State::SizeLf,
                b'\t' | b' '..=b'~' | 0x80..=0xff => self.count_line()?,
                _ => return Err(ChunkedError::Extension),
            },
            State::SizeLf => {
                if byte != b'\n' {
                    return Err(ChunkedError::Size);
                }
                self.line_len = 0;
                self.state = if self.remaining == 0 {
                    State::TrailerStart
                } else {
                    State::Data
                };
            }
            State::Data => unreachable!("data is consumed in step()"),
            State::DataCr => {
                if byte != b'\r' {
                    return Err(ChunkedError::DataEnd);
                }
                self.state = State::DataLf;
            }
            State::DataLf => {
                if byte != b'\n' {
                    return Err(ChunkedError::DataEnd);
                }
                self.state = State::Size { digits: 0 };
            }
            State::TrailerStart => match byte {
                b'\r' => self.state = State::EndLf,
                // a trailer line may not start with whitespace (obs-fold) or a colon
                b' ' | b'\t' | b':' | b'\n' => return Err(ChunkedError::Trailer),
                _ => {
                    self.count_trailer()?;
                    self.state = State::TrailerLine;
                }
            },
            State::TrailerLine => match byte {
                b'\r' => self.state = State::TrailerLineLf,
                b'\n' => return Err(ChunkedError::Trailer),
                b'\t' | b' '..=b'~' | 0x80..=0xff => self.count_trailer()?,
                _ => return Err(ChunkedError::Trailer),
            },
            State::TrailerLineLf => {
                if byte != b'\n' {
                    return Err(ChunkedError::Trailer);
                }
                self.state = State::TrailerStart;
            }
            State::EndLf => {
                if byte != b'\n' {
                    return Err(ChunkedError::Trailer);
                }
                self.state = State::Finished;
            }
            State::Finished => {}
        }
        Ok(())
    }

    fn count_line(&mut self) -> Result<(), ChunkedError> {
        self.line_len += 1;
        if self.line_len > MAX_SIZE_LINE {
            return Err(ChunkedError::Extension);
        }
        Ok(())
    }

    fn count_trailer(&mut self) -> Result<(), ChunkedError> {
        self.trailer_len += 1;
        if self.trailer_len > MAX_TRAILERS {
            return Err(ChunkedError::Trailer);
        }
        Ok(())
    }
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Decodes a whole chunked body held in memory: the data, and how many bytes the message took.
/// Used by tests and the fuzz target; the proxy streams with [`ChunkedDecoder::step`].
pub fn decode_all(input: &[u8]) -> Result<(Vec<u8>, Option<usize>), ChunkedError> {
    let mut decoder = ChunkedDecoder::new();
    let mut data = Vec::new();
    let mut at = 0;
    loop {
        match decoder.step(&input[at..])? {
            Step::Framing(0) => return Ok((data, None)),
            Step::Framing(n) => at += n,
            Step::Data(0) => return Ok((data, None)),
            Step::Data(n) => {
                data.extend_from_slice(&input[at..at + n]);
                at += n;
            }
            Step::Done(n) => return Ok((data, Some(at + n))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let body = b"4\r\nWiki\r\n5;name=value\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\nNEXT";
        let (data, end) = decode_all(body).unwrap();
        assert_eq!(data, b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(end, Some(body.len() - 4));
    }

    #[test]
    fn incomplete_input_asks_for_more() {
        assert_eq!(decode_all(b"5\r\nhel").unwrap(), (b"hel".to_vec(), None));
        assert_eq!(decode_all(b"0\r\n").unwrap(), (vec![], None));
    }

    #[test]
    fn refuses_what_parsers_disagree_on() {
        let cases: &[&[u8]] = &[
            b"zz\r\n",
            b"\r\n",
            b"-1\r\n",
            b"+5\r\nhello\r\n0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"1 2\r\n",
            b"0\r\n folded: x\r\n\r\n",
            b"0\r\nX: y\n\r\n",
            b"0\r\n\n",
            b"11111111111111111\r\n",
            b"5;a\x01\r\nhello\r\n",
        ];
        for case in cases {
            assert!(
                decode_all(case).is_err(),
                "accepted {:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    fn encode(data: &[u8], sizes: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = 0;
        for &size in sizes.iter().cycle() {
            if at >= data.len() {
                break;
            }
            let n = size.clamp(1, data.len() - at);
            out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
            out.extend_from_slice(&data[at..at + n]);
            out.extend_from_slice(b"\r\n");
            at += n;
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any body, chunked any way and delivered in any pieces, decodes to itself and ends
        /// exactly where the encoding ends.
        #[test]
        fn round_trips_in_pieces(
            data in proptest::collection::vec(any::<u8>(), 0..2000),
            sizes in proptest::collection::vec(1usize..300, 1..8),
            cuts in proptest::collection::vec(1usize..64, 1..16),
        ) {
            let encoded = encode(&data, &sizes);
            let mut decoder = ChunkedDecoder::new();
            let mut decoded = Vec::new();
            let mut at = 0;
            let mut cut = cuts.iter().cycle();
            let mut end = None;
            while at < encoded.len() && end.is_none() {
                let piece_end = (at + cut.next().unwrap()).min(encoded.len());
                let mut piece_at = at;
                while piece_at < piece_end {
                    match decoder.step(&encoded[piece_at..piece_end]).unwrap() {
                        Step::Framing(n) => piece_at += n,
                        Step::Data(n) => {
                            decoded.extend_from_slice(&encoded[piece_at..piece_at + n]);
                            piece_at += n;
                        }
                        Step::Done(n) => { end = Some(piece_at + n); break; }
                    }
                }
                at = piece_end;
            }
            prop_assert_eq!(decoded, data);
            prop_assert_eq!(end, Some(encoded.len()));
        }

        /// Arbitrary bytes never panic the decoder, and it never claims more bytes than given.
        #[test]
        fn arbitrary_input_is_safe(input in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut decoder = ChunkedDecoder::new();
            let mut at = 0;
            while at < input.len() {
                match decoder.step(&input[at..]) {
                    Ok(Step::Framing(n)) | Ok(Step::Data(n)) => {
                        prop_assert!(n <= input.len() - at);
                        if n == 0 { break; }
                        at += n;
                    }
                    Ok(Step::Done(n)) => { prop_assert!(n <= input.len() - at); break; }
                    Err(_) => break,
                }
            }
        }
    }
}
