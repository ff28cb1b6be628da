//! A streaming, strict decoder for the chunked transfer coding (RFC 9112 §7.1).
//!
//! It never buffers: each call to [`ChunkedDecoder::step`] says how many bytes at the front of
//! the input are framing, data, a trailer field to drop or the end of the message, so a caller
//! can forward the bytes as they are (after they were checked) or forward only the data (to
//! re-frame the body). It refuses what proxies and servers disagree about: bare LF line endings,
//! chunk sizes with signs or spaces inside, sizes that overflow, obs-folded or nameless trailers.
//!
//! A trailer field line is passed on or dropped whole, so its bytes are not taken until its line
//! end is in the input: the caller holds them (at most [`MAX_TRAILERS`], in the buffer it reads
//! into anyway) and calls again with more. A trailer section is small and rare; the usual empty
//! one is two bytes that never wait.
//!
//! [`put_size_line`] writes a chunk's size line, for whoever frames a body in chunks.

use super::tokens::is_token_byte;

/// Longest chunk size, extensions included, before the line is refused.
const MAX_SIZE_LINE: usize = 4096;
/// Longest trailer section accepted.
pub const MAX_TRAILERS: usize = 16384;

/// What the bytes at the front of the input are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// This many bytes are framing (sizes, extensions, line ends, trailer fields to pass on). 0
    /// means the decoder needs more input: the input is empty, or all of it is the start of a
    /// trailer field line, to be given again with what follows.
    Framing(usize),
    /// This many bytes are a trailer field line that must not be passed on (see
    /// [`is_forbidden_trailer`]).
    Dropped(usize),
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
    /// At the start of a trailer field line (taken whole) or of the final empty line.
    TrailerStart,
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

    /// True at the start of a line of the trailer section: a `Framing` step from here is a
    /// trailer field line to pass on (or the section's empty last line, as `Done`).
    pub fn at_trailer_line(&self) -> bool {
        self.state == State::TrailerStart
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
            if self.state == State::TrailerStart && byte != b'\r' {
                // A trailer field line: the bytes before it first, so that it starts the input.
                if i > 0 {
                    return Ok(Step::Framing(i));
                }
                return self.trailer_line(input);
            }
            self.framing_byte(byte)?;
            match self.state {
                State::Data => return Ok(Step::Framing(i + 1)),
                State::Finished => return Ok(Step::Done(i + 1)),
                _ => {}
            }
        }
        Ok(Step::Framing(input.len()))
    }

    /// The trailer field line at the start of `input`: kept, dropped, or `Framing(0)` while its
    /// line end has not come. Its name must be a token followed by a colon; its value may hold
    /// tabs, visible characters and obs-text, like a header's.
    fn trailer_line(&mut self, input: &[u8]) -> Result<Step, ChunkedError> {
        let mut cr_at = None;
        for (i, &byte) in input.iter().enumerate() {
            match byte {
                b'\r' => {
                    cr_at = Some(i);
                    break;
                }
                b'\t' | b' '..=b'~' | 0x80..=0xff => {}
                _ => return Err(ChunkedError::Trailer),
            }
        }
        let (Some(line_len), Some(&lf)) = (cr_at, cr_at.and_then(|cr| input.get(cr + 1))) else {
            // Held by the caller until the line ends, within the section's limit.
            if self.trailer_len + input.len() > MAX_TRAILERS {
                return Err(ChunkedError::Trailer);
            }
            return Ok(Step::Framing(0));
        };
        self.trailer_len += line_len + 2;
        if lf != b'\n' || self.trailer_len > MAX_TRAILERS {
            return Err(ChunkedError::Trailer);
        }
        let line = &input[..line_len];
        let name_len = line.iter().position(|&b| b == b':');
        let name = &line[..name_len.ok_or(ChunkedError::Trailer)?];
        if name.is_empty() || !name.iter().all(|&b| is_token_byte(b)) {
            return Err(ChunkedError::Trailer);
        }
        Ok(if is_forbidden_trailer(name) {
            Step::Dropped(line_len + 2)
        } else {
            Step::Framing(line_len + 2)
        })
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
            // Only the final empty line's CR reaches here: `step` takes field lines whole.
            State::TrailerStart => self.state = State::EndLf,
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
}

/// Whether a field must not be passed on in a trailer section (RFC 9110 §6.5.1): fields that
/// frame the message, route it, modify the request (controls and conditionals), authenticate,
/// control the response, or say how to read the content, and hop-by-hop fields. A recipient
/// that merged one into the head after herdsman checked and routed the head could be made to
/// frame, route or authorize the message differently; dropping them is what the RFC allows a
/// proxy that cannot tell whether the next recipient merges trailers.
pub fn is_forbidden_trailer(name: &[u8]) -> bool {
    const FORBIDDEN: [&str; 27] = [
        "content-length",
        "transfer-encoding",
        "trailer",
        "host",
        "cache-control",
        "expect",
        "max-forwards",
        "pragma",
        "range",
        "te",
        "authorization",
        "set-cookie",
        "cookie",
        "www-authenticate",
        "age",
        "expires",
        "date",
        "location",
        "retry-after",
        "vary",
        "warning",
        "content-encoding",
        "content-type",
        "content-range",
        "connection",
        "keep-alive",
        "upgrade",
    ];
    // If-Match, If-None-Match, If-Modified-Since, If-Range, …; and Proxy-Authorization,
    // Proxy-Authenticate, Proxy-Connection, hop-by-hop like every Proxy-* field in a head.
    let prefixed = |prefix: &[u8]| {
        name.len() > prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix)
    };
    prefixed(b"if-")
        || prefixed(b"proxy-")
        || FORBIDDEN
            .iter()
            .any(|forbidden| name.eq_ignore_ascii_case(forbidden.as_bytes()))
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// What a relay passing a chunked body on as framed makes of it (see [`pass_on_in_pieces`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PassedOn {
    /// The bytes passed on: all of the message's but the dropped trailer fields.
    pub bytes: Vec<u8>,
    /// The body's data.
    pub data: Vec<u8>,
    /// Where the message ended in the input, once it did.
    pub end: Option<usize>,
}

/// Relays `input` as framed, as it arrives in pieces of the sizes in `pieces` (over again until
/// it is all there; a held trailer line waits for the next piece). Used by tests and the fuzz
/// target; the proxy streams with [`ChunkedDecoder::step`].
pub fn pass_on_in_pieces(input: &[u8], pieces: &[usize]) -> Result<PassedOn, ChunkedError> {
    let mut decoder = ChunkedDecoder::new();
    let mut passed = PassedOn::default();
    let (mut at, mut available) = (0, 0);
    let mut piece = pieces.iter().cycle();
    while passed.end.is_none() && available < input.len() {
        available = (available + piece.next().copied().unwrap_or(1).max(1)).min(input.len());
        while at < available && passed.end.is_none() {
            let step = decoder.step(&input[at..available])?;
            let taken = match step {
                Step::Framing(0) => break,
                Step::Framing(n) | Step::Data(n) | Step::Dropped(n) | Step::Done(n) => n,
            };
            let bytes = &input[at..at + taken];
            match step {
                Step::Dropped(_) => {}
                Step::Data(_) => {
                    passed.bytes.extend_from_slice(bytes);
                    passed.data.extend_from_slice(bytes);
                }
                _ => passed.bytes.extend_from_slice(bytes),
            }
            at += taken;
            if let Step::Done(_) = step {
                passed.end = Some(at);
            }
        }
    }
    Ok(passed)
}

/// Decodes a whole chunked body held in memory: the data, and how many bytes the message took.
pub fn decode_all(input: &[u8]) -> Result<(Vec<u8>, Option<usize>), ChunkedError> {
    let passed = pass_on_in_pieces(input, &[input.len()])?;
    Ok((passed.data, passed.end))
}

/// Appends a chunk's size line (`size` in hexadecimal, then CRLF), without allocating.
pub fn put_size_line(out: &mut Vec<u8>, size: usize) {
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut rest = size;
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[rest & 0xf];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn size_lines_are_lowercase_hexadecimal() {
        let mut out = Vec::new();
        for size in [0, 9, 10, 255, 4096, usize::MAX] {
            put_size_line(&mut out, size);
        }
        assert_eq!(out, b"0\r\n9\r\na\r\nff\r\n1000\r\nffffffffffffffff\r\n");
    }

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

    /// `data` chunked in `sizes`, with `trailers` (whole field lines) after the last chunk.
    fn encode(data: &[u8], sizes: &[usize], trailers: &[&str]) -> Vec<u8> {
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
        out.extend_from_slice(b"0\r\n");
        for line in trailers {
            out.extend_from_slice(line.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    #[test]
    fn trailer_fields_that_must_not_be_trailers_are_dropped_whole() {
        let trailers = [
            "X-Checksum: abc\r\n",
            "Content-Length: 5\r\n",
            "if-none-match: \"x\"\r\n",
            "Proxy-Authorization: Basic x\r\n",
            "Set-Cookie: a=1\r\n",
            "Server-Timing: db;dur=53\r\n",
        ];
        let encoded = encode(b"hello", &[3], &trailers);
        let kept = encode(
            b"hello",
            &[3],
            &["X-Checksum: abc\r\n", "Server-Timing: db;dur=53\r\n"],
        );
        for cuts in [&[encoded.len()][..], &[1], &[2, 7], &[5]] {
            let passed = pass_on_in_pieces(&encoded, cuts).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&passed.bytes),
                String::from_utf8_lossy(&kept)
            );
            assert_eq!(passed.data, b"hello");
            assert_eq!(passed.end, Some(encoded.len()));
        }
    }

    #[test]
    fn a_trailer_line_is_held_until_its_end_arrives() {
        let mut decoder = ChunkedDecoder::new();
        assert_eq!(decoder.step(b"0\r\nX-A: 1"), Ok(Step::Framing(3)));
        assert_eq!(decoder.step(b"X-A: 1"), Ok(Step::Framing(0)));
        assert_eq!(decoder.step(b"X-A: 1\r"), Ok(Step::Framing(0)));
        assert_eq!(
            decoder.step(b"X-A: 1\r\nHost: x\r\n\r\n"),
            Ok(Step::Framing(8))
        );
        assert_eq!(decoder.step(b"Host: x\r\n\r\n"), Ok(Step::Dropped(9)));
        assert_eq!(decoder.step(b"\r\nNEXT"), Ok(Step::Done(2)));
        let mut endless = ChunkedDecoder::new();
        let long = format!("0\r\nX-Long: {}", "a".repeat(MAX_TRAILERS));
        assert_eq!(endless.step(long.as_bytes()), Ok(Step::Framing(3)));
        assert_eq!(
            endless.step(&long.as_bytes()[3..]),
            Err(ChunkedError::Trailer)
        );
        for nameless in [&b"0\r\nno colon\r\n\r\n"[..], b"0\r\nX Y: z\r\n\r\n"] {
            assert!(decode_all(nameless).is_err());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any body, chunked any way and delivered in any pieces, decodes to itself and ends
        /// exactly where the encoding ends; its trailers pass whole, less the forbidden ones.
        #[test]
        fn round_trips_in_pieces(
            data in proptest::collection::vec(any::<u8>(), 0..2000),
            sizes in proptest::collection::vec(1usize..300, 1..8),
            cuts in proptest::collection::vec(1usize..64, 1..16),
            trailers in proptest::collection::vec(
                prop::sample::select(vec!["X-Sum: 1\r\n", "Host: h\r\n", "If-Match: *\r\n", "Etag: \"e\"\r\n"]),
                0..4,
            ),
        ) {
            let encoded = encode(&data, &sizes, &trailers);
            let passed = pass_on_in_pieces(&encoded, &cuts).unwrap();
            let allowed: Vec<&str> = trailers.iter().copied().filter(|line| {
                !is_forbidden_trailer(line.split(':').next().unwrap().as_bytes())
            }).collect();
            prop_assert_eq!(passed.bytes, encode(&data, &sizes, &allowed));
            prop_assert_eq!(passed.data, data);
            prop_assert_eq!(passed.end, Some(encoded.len()));
        }

        /// Arbitrary bytes never panic the decoder, and it never claims more bytes than given.
        #[test]
        fn arbitrary_input_is_safe(input in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut decoder = ChunkedDecoder::new();
            let mut at = 0;
            while at < input.len() {
                match decoder.step(&input[at..]) {
                    Ok(Step::Framing(n)) | Ok(Step::Data(n)) | Ok(Step::Dropped(n)) => {
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
