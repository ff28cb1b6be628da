//! The body of an answer being stored, gathered as it comes from the server: counted to its
//! stated length, or taken out of its chunked framing (RFC 9112 §7.1) — whole only once the
//! framing says it ended, never past the object size allowed.

use crate::http1::chunked::{ChunkedDecoder, Step};

/// How the body ends, and how far it has come.
#[derive(Debug)]
pub struct Gathering {
    framing: Framing,
    /// Data bytes taken so far.
    taken: u64,
    /// The most data the object may have.
    limit: u64,
    /// Something was wrong with it (too large, bad framing): it will not be whole.
    spoiled: bool,
}

#[derive(Debug)]
enum Framing {
    /// `Content-Length`.
    Length(u64),
    /// Chunked, as the server framed it: decoded here, with the bytes of a trailer line held
    /// until its end comes.
    Chunked {
        decoder: Box<ChunkedDecoder>,
        held: Vec<u8>,
    },
}

impl Gathering {
    /// A body of `length` bytes.
    pub fn of_length(length: u64) -> Gathering {
        Gathering {
            framing: Framing::Length(length),
            taken: 0,
            limit: length,
            spoiled: false,
        }
    }

    /// A chunked body, given as framed, of at most `limit` data bytes.
    pub fn chunked(limit: u64) -> Gathering {
        Gathering {
            framing: Framing::Chunked {
                decoder: Box::default(),
                held: Vec::new(),
            },
            taken: 0,
            limit,
            spoiled: false,
        }
    }

    /// The body's length, when its head said it.
    pub fn length(&self) -> Option<u64> {
        match self.framing {
            Framing::Length(length) => Some(length),
            Framing::Chunked { .. } => None,
        }
    }

    /// Takes `bytes` as they came, passing the body's data in them to `data`.
    pub fn take(&mut self, bytes: &[u8], mut data: impl FnMut(&[u8])) {
        if self.spoiled {
            return;
        }
        match &mut self.framing {
            Framing::Length(length) => {
                let room = length.saturating_sub(self.taken) as usize;
                let bytes = &bytes[..bytes.len().min(room)];
                self.taken += bytes.len() as u64;
                data(bytes);
            }
            Framing::Chunked { decoder, held } => {
                let joined;
                let mut input = match held.is_empty() {
                    true => bytes,
                    false => {
                        held.extend_from_slice(bytes);
                        joined = std::mem::take(held);
                        &joined[..]
                    }
                };
                while !input.is_empty() && !decoder.is_done() {
                    let step = match decoder.step(input) {
                        Ok(step) => step,
                        Err(_) => {
                            self.spoiled = true;
                            return;
                        }
                    };
                    let used = match step {
                        Step::Data(n) => {
                            self.taken += n as u64;
                            if self.taken > self.limit {
                                self.spoiled = true;
                                return;
                            }
                            data(&input[..n]);
                            n
                        }
                        Step::Framing(0) => {
                            // The start of a trailer line: kept for the rest of it.
                            held.extend_from_slice(input);
                            return;
                        }
                        Step::Framing(n) | Step::Dropped(n) | Step::Done(n) => n,
                    };
                    input = &input[used..];
                }
            }
        }
    }

    /// All of the body came, within its limit.
    pub fn is_whole(&self) -> bool {
        !self.spoiled
            && match &self.framing {
                Framing::Length(length) => self.taken == *length,
                Framing::Chunked { decoder, .. } => decoder.is_done(),
            }
    }

    /// It can no longer be whole: too large, or badly framed.
    pub fn is_spoiled(&self) -> bool {
        self.spoiled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gathered(gathering: &mut Gathering, pieces: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        for piece in pieces {
            gathering.take(piece, |data| body.extend_from_slice(data));
        }
        body
    }

    #[test]
    fn a_chunked_body_is_decoded_across_any_split() {
        let framed: &[u8] = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n";
        for split in 0..framed.len() {
            let mut gathering = Gathering::chunked(1024);
            let body = gathered(&mut gathering, &[&framed[..split], &framed[split..]]);
            assert_eq!(body, b"hello world", "split at {split}");
            assert!(gathering.is_whole(), "split at {split}");
        }
        let mut cut = Gathering::chunked(1024);
        gathered(&mut cut, &[b"5\r\nhello\r\n"]);
        assert!(!cut.is_whole(), "no last chunk yet");
    }

    #[test]
    fn too_much_or_bad_framing_spoils_it() {
        let mut large = Gathering::chunked(4);
        gathered(&mut large, &[b"5\r\nhello\r\n0\r\n\r\n"]);
        assert!(large.is_spoiled() && !large.is_whole());
        let mut bad = Gathering::chunked(1024);
        gathered(&mut bad, &[b"zz\r\nhello\r\n0\r\n\r\n"]);
        assert!(bad.is_spoiled());
        let mut exact = Gathering::of_length(5);
        assert_eq!(gathered(&mut exact, &[b"hel", b"lo and more"]), b"hello");
        assert!(exact.is_whole());
    }
}
