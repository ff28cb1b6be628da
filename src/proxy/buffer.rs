//! A read buffer for one side of a connection: bytes read but not yet used sit between `start`
//! and `end`; reading appends, using consumes from the front. Its memory comes from, and goes
//! back to, the worker's free list (`recycle`), so a buffer released between requests costs no
//! allocation when the next request arrives.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, ReadBuf};

use super::recycle;

/// Unread bytes are `bytes[start..]`; reads append into the vector's spare capacity, which is
/// never zeroed first (a fresh buffer costs no memset).
pub struct Buffer {
    bytes: Vec<u8>,
    start: usize,
}

impl Default for Buffer {
    fn default() -> Self {
        Buffer::new()
    }
}

impl Buffer {
    /// An empty buffer that allocates nothing until the first read.
    pub fn new() -> Buffer {
        Buffer {
            bytes: Vec::new(),
            start: 0,
        }
    }

    /// The unread bytes.
    pub fn data(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.bytes.len()
    }

    pub fn len(&self) -> usize {
        self.bytes.len() - self.start
    }

    /// Marks the first `n` unread bytes as used.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n;
        if self.start == self.bytes.len() {
            self.start = 0;
            self.bytes.clear();
        }
    }

    /// Reads once from `source`, appending. The buffer holds at most `limit` unread bytes: its
    /// capacity starts at `initial` and doubles as a head outgrows it. Returns the bytes read,
    /// 0 at end of stream. Must not be called when `len() == limit`.
    pub async fn read_from<R: AsyncRead + Unpin>(
        &mut self,
        source: &mut R,
        initial: usize,
        limit: usize,
    ) -> io::Result<usize> {
        if self.bytes.len() == self.bytes.capacity() {
            if self.start > 0 {
                self.bytes.drain(..self.start);
                self.start = 0;
            }
            if self.bytes.capacity() == 0 {
                self.bytes = recycle::take_bytes(initial.max(1));
            } else if self.bytes.len() == self.bytes.capacity() {
                let grown = (self.bytes.capacity() * 2).clamp(initial, limit.max(initial));
                self.bytes.reserve_exact(grown - self.bytes.len());
            }
        }
        let room = (limit - self.len()).min(self.bytes.capacity() - self.bytes.len());
        let spare = &mut self.bytes.spare_capacity_mut()[..room];
        let mut read_buf = ReadBuf::uninit(spare);
        poll_fn(|cx| Pin::new(&mut *source).poll_read(cx, &mut read_buf)).await?;
        let n = read_buf.filled().len();
        // SAFETY: poll_read initialised the first `n` bytes of the spare capacity (ReadBuf
        // tracks exactly what was written), so they may become part of the vector.
        unsafe { self.bytes.set_len(self.bytes.len() + n) };
        Ok(n)
    }

    /// Gives the memory back when nothing is unread (an idle connection holds no buffer).
    pub fn release_if_empty(&mut self) {
        if self.is_empty() {
            self.give_back_memory();
        }
    }

    fn give_back_memory(&mut self) {
        self.start = 0;
        recycle::give_back_bytes(std::mem::take(&mut self.bytes));
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.give_back_memory();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn grows_compacts_and_respects_the_limit() {
        let mut buffer = Buffer::new();
        let mut source: &[u8] = b"0123456789abcdef";
        assert_eq!(buffer.read_from(&mut source, 4, 8).await.unwrap(), 4);
        assert_eq!(buffer.read_from(&mut source, 4, 8).await.unwrap(), 4);
        assert_eq!(buffer.data(), b"01234567");
        buffer.consume(6);
        assert_eq!(buffer.read_from(&mut source, 4, 8).await.unwrap(), 6);
        assert_eq!(buffer.data(), b"6789abcd");
        buffer.consume(8);
        assert!(buffer.is_empty());
        buffer.release_if_empty();
        assert_eq!(buffer.read_from(&mut source, 4, 8).await.unwrap(), 2);
        assert_eq!(buffer.read_from(&mut source, 4, 8).await.unwrap(), 0);
    }
}
