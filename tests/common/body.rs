//! Deterministic body content (an endless xorshift byte stream, so large bodies are generated
//! and checked on the fly rather than held in memory), its FNV-1a, and a large upload sent twice.

use std::io;

/// An endless deterministic byte stream (xorshift), so large bodies are generated and checked
/// on the fly rather than held in memory.
pub struct Pattern {
    state: u64,
    word: [u8; 8],
    used: usize,
    /// Bytes produced or checked so far.
    pub offset: u64,
}

impl Pattern {
    pub fn new(seed: u64) -> Pattern {
        Pattern {
            state: seed | 1,
            word: [0; 8],
            used: 8,
            offset: 0,
        }
    }

    fn next_byte(&mut self) -> u8 {
        if self.used == 8 {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            self.word = self.state.to_le_bytes();
            self.used = 0;
        }
        let b = self.word[self.used];
        self.used += 1;
        b
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf.iter_mut() {
            *b = self.next_byte();
        }
        self.offset += buf.len() as u64;
    }

    /// Checks the next bytes of the stream; on a mismatch returns its absolute offset.
    pub fn check(&mut self, data: &[u8]) -> Result<(), u64> {
        for (i, b) in data.iter().enumerate() {
            if *b != self.next_byte() {
                return Err(self.offset + i as u64);
            }
        }
        self.offset += data.len() as u64;
        Ok(())
    }

    /// Produces the next `len` bytes of the stream in pieces of at most `piece_len` bytes, handing
    /// each to `write`; stops at the first error.
    pub fn write_in_pieces(
        &mut self,
        len: u64,
        piece_len: usize,
        write: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut piece = vec![0u8; piece_len];
        let mut left = len;
        while left > 0 {
            let n = left.min(piece_len as u64) as usize;
            self.fill(&mut piece[..n]);
            write(&piece[..n])?;
            left -= n as u64;
        }
        Ok(())
    }

    /// The first `n` bytes of the stream for `seed`.
    pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut out = vec![0; n];
        Pattern::new(seed).fill(&mut out);
        out
    }
}

/// Checks a stream of pieces against a pattern, remembering the first mismatch.
pub struct PatternCheck {
    pattern: Pattern,
    pub mismatch: Option<u64>,
    pub received: u64,
}

impl PatternCheck {
    pub fn new(seed: u64) -> PatternCheck {
        PatternCheck {
            pattern: Pattern::new(seed),
            mismatch: None,
            received: 0,
        }
    }

    pub fn feed(&mut self, data: &[u8]) {
        self.received += data.len() as u64;
        if self.mismatch.is_none() {
            if let Err(at) = self.pattern.check(data) {
                self.mismatch = Some(at);
            }
        }
    }

    /// "<bytes received> <first mismatch>", what a mock answers after checking an upload: an
    /// intact upload of `len` bytes reads `"{len} None"`.
    pub fn report(&self) -> String {
        format!("{} {:?}", self.received, self.mismatch)
    }
}

/// FNV-1a of `bytes`: what a server tells of a body it got, so that a test sees it arrived as
/// sent without the server sending it back.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// POSTs `body` to `/up` at `addr` twice on one connection (after a body that went by splice or
/// streamed, both connections must carry the next request); the two answers, each read within
/// 20 s.
pub fn post_twice(addr: std::net::SocketAddr, body: &[u8]) -> Vec<super::heads::Response> {
    let mut client = super::raw::Conn::connect(addr);
    client.set_read_timeout(std::time::Duration::from_secs(20));
    let head = format!(
        "POST /up HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    (0..2)
        .map(|_| {
            client.send(head.as_bytes());
            client.send(body);
            client.response()
        })
        .collect()
}
