//! A read buffer for one side of a connection: bytes read but not yet used sit between `start`
//! and `end`; reading appends, using consumes from the front. Its memory comes from, and goes
//! back to, the worker's free list (`recycle`), so a buffer released between requests costs no
//! allocation when the next request arrives.
//!
//! A read that has to wait holds no more memory than the bytes already read need: an empty buffer
//! gives its block back until bytes arrive, and a few bytes of a head move into a block their
//! size. So a peer that sends slowly, or not at all, costs a small block at most, while a read
//! that finds its bytes at once (the usual case) reads into a full-sized block as before. A write
//! to a peer that reads slowly likewise keeps only what it has yet to take, in a block its size.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::recycle;

/// First size of a buffer: a usual head, or a body relay's read.
pub const BUFFER_INITIAL: usize = 16 * 1024;

/// The smallest block the bytes of a waiting read move into. Most request heads are smaller, so a
/// head that trickles in stays in it for its first kilobyte.
const SMALLEST_WAITING: usize = 1024;

/// Unread bytes are `bytes[start..]`; reads append into the vector's spare capacity, which is
/// never zeroed first (a fresh buffer costs no memset).
pub struct Buffer {
    bytes: Vec<u8>,
    start: usize,
    /// The last read filled all the room it had: its source likely holds more at once
    /// (`read_stream_from`).
    read_filled_room: bool,
}

impl Default for Buffer {
    fn default() -> Self {
        Buffer::new()
    }
}

impl From<Vec<u8>> for Buffer {
    /// A buffer whose unread bytes are `bytes`.
    fn from(bytes: Vec<u8>) -> Buffer {
        Buffer {
            bytes,
            start: 0,
            read_filled_room: false,
        }
    }
}

impl Buffer {
    /// An empty buffer that allocates nothing until the first read.
    pub fn new() -> Buffer {
        Buffer {
            bytes: Vec::new(),
            start: 0,
            read_filled_room: false,
        }
    }

    /// The unread bytes.
    pub fn data(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    /// The unread bytes, to be changed in place (a head's version digit).
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..]
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

    /// Reads once from `source`, appending. The buffer holds at most `limit` unread bytes. An
    /// empty buffer reads into a block of at least `initial` bytes; a full one moves into a block
    /// twice its size. While the read waits, the buffer shrinks to what its unread bytes need
    /// (`fit_while_waiting`). Returns the bytes read, 0 at end of stream. Must not be called when
    /// `len() == limit`.
    pub async fn read_from<R: AsyncRead + Unpin>(
        &mut self,
        source: &mut R,
        initial: usize,
        limit: usize,
    ) -> io::Result<usize> {
        poll_fn(|cx| {
            // Every poll, since a wait may have given the block back.
            let mut read_buf = ReadBuf::uninit(self.room(initial, limit));
            match Pin::new(&mut *source).poll_read(cx, &mut read_buf) {
                // A pending read has written nothing (AsyncRead's contract).
                Poll::Pending => {
                    self.fit_while_waiting();
                    Poll::Pending
                }
                Poll::Ready(result) => {
                    let n = read_buf.filled().len();
                    self.read_filled_room = n > 0 && read_buf.remaining() == 0;
                    // SAFETY: poll_read initialised the first `n` bytes of the spare capacity
                    // (ReadBuf tracks exactly what was written), so they may become part of the
                    // vector.
                    unsafe { self.bytes.set_len(self.bytes.len() + n) };
                    Poll::Ready(result.map(|()| n))
                }
            }
        })
        .await
    }

    /// [`Buffer::read_from`] for a long run of bytes (a body): after a read that filled all the
    /// room it had, the source likely holds more at once, so the next read into an empty buffer
    /// takes a block of `limit` bytes, not `initial`: one system call for up to `limit` bytes,
    /// and over TLS one send of several records. A 1 MiB answer costs 20 reads and 20 sends
    /// instead of 68 of each, and 38% less CPU in cleartext, 15% less over TLS
    /// (bench/results/read-size.md). A read that comes back short goes back to `initial` for
    /// the next empty buffer; a read that waits still gives the block back.
    pub async fn read_stream_from<R: AsyncRead + Unpin>(
        &mut self,
        source: &mut R,
        initial: usize,
        limit: usize,
    ) -> io::Result<usize> {
        let initial = match self.read_filled_room {
            true => limit.max(initial),
            false => initial,
        };
        self.read_from(source, initial, limit).await
    }

    /// Reads once what `read` finds without waiting, appending, into the room `read_from` would
    /// give: `read` fills the start of the slice it is handed and says how many bytes it wrote.
    /// A read that finds nothing keeps no memory.
    pub fn read_now(
        &mut self,
        initial: usize,
        limit: usize,
        read: impl FnOnce(&mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let room = self.room(initial, limit);
        let room_len = room.len();
        match read(room) {
            Ok(n) => {
                let n = n.min(room_len);
                self.read_filled_room = n > 0 && n == room_len;
                // SAFETY: `read` initialised the first `n` bytes of the room it was handed.
                unsafe { self.bytes.set_len(self.bytes.len() + n) };
                Ok(n)
            }
            Err(error) => {
                self.fit_while_waiting();
                Err(error)
            }
        }
    }

    /// Writes the first `n` unread bytes to `sink`, consuming them as they go out. While a write
    /// waits (a slow reader), the bytes still to go move into a block their size if that is at
    /// most half the one they are in (`fit_while_writing`).
    pub async fn write_to<W: AsyncWrite + Unpin>(
        &mut self,
        n: usize,
        sink: &mut W,
    ) -> io::Result<()> {
        let mut left = n;
        self.write_counted(&mut left, sink).await
    }

    /// As [`Buffer::write_to`], with the bytes still to write in `left`, counted down as each
    /// write takes some: a write abandoned midway leaves `left` saying what is still owed, so a
    /// relay can take it up again later (a full-duplex call's upload, `http1::relay`).
    pub async fn write_counted<W: AsyncWrite + Unpin>(
        &mut self,
        left: &mut usize,
        sink: &mut W,
    ) -> io::Result<()> {
        debug_assert!(*left <= self.len());
        poll_fn(|cx| {
            while *left > 0 {
                match Pin::new(&mut *sink).poll_write(cx, &self.data()[..*left]) {
                    Poll::Pending => {
                        self.fit_while_writing();
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(written)) => {
                        self.consume(written);
                        *left -= written;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                }
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// The room a read may fill, made as `make_room` says: the block's spare capacity, up to
    /// `limit` unread bytes in all.
    #[inline]
    fn room(&mut self, initial: usize, limit: usize) -> &mut [std::mem::MaybeUninit<u8>] {
        self.make_room(initial, limit);
        let room = (limit - self.len()).min(self.bytes.capacity() - self.bytes.len());
        &mut self.bytes.spare_capacity_mut()[..room]
    }

    /// Room for at least one byte more: an empty buffer gets a block of `initial` bytes if its own
    /// is smaller (one that shrank while waiting), a full one first drops the bytes consumed at
    /// its front, then moves into a block twice its size, at most `limit` (or `initial`).
    fn make_room(&mut self, initial: usize, limit: usize) {
        if self.is_empty() {
            let initial = initial.max(1);
            if self.bytes.capacity() < initial {
                // Nothing to move: just a bigger block.
                self.give_back_memory();
                self.bytes = recycle::take_bytes(initial);
            }
        } else if self.bytes.len() == self.bytes.capacity() {
            if self.start > 0 {
                self.bytes.drain(..self.start);
                self.start = 0;
            } else {
                let grown = (self.bytes.capacity() * 2).min(limit.max(initial));
                self.move_to_block(grown);
            }
        }
    }

    /// While a read waits: an empty buffer gives its block back, and unread bytes that would fit
    /// in a block a quarter the size or less (twice their length, at least `SMALLEST_WAITING`)
    /// move into one, so a slow peer holds a block the size of what it sent.
    fn fit_while_waiting(&mut self) {
        if self.is_empty() {
            self.give_back_memory();
            return;
        }
        let fit = (self.len() * 2).next_power_of_two().max(SMALLEST_WAITING);
        if fit <= self.bytes.capacity() / 4 {
            self.move_to_block(fit);
        }
    }

    /// While a write waits: unread bytes that would fit in a block half the size or less (their
    /// length, at least `SMALLEST_WAITING`; nothing is added to them meanwhile) move into one.
    fn fit_while_writing(&mut self) {
        let fit = self.len().next_power_of_two().max(SMALLEST_WAITING);
        if fit <= self.bytes.capacity() / 2 {
            self.move_to_block(fit);
        }
    }

    /// Moves the unread bytes to the front of a block of `capacity` bytes (at least `len()`) from
    /// the free list, and gives the old block back.
    fn move_to_block(&mut self, capacity: usize) {
        debug_assert!(capacity >= self.len());
        let mut block = recycle::take_bytes(capacity);
        block.extend_from_slice(self.data());
        self.start = 0;
        recycle::give_back_bytes(std::mem::replace(&mut self.bytes, block));
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

/// Reads once from `source` straight onto the end of `out`, at most `most` bytes (no block of
/// its own, no copy afterwards): for a body that is kept where it is read. `out` must have room
/// for `most` more bytes. Returns the bytes read, 0 at end of stream.
pub async fn read_appending<R: AsyncRead + Unpin>(
    source: &mut R,
    out: &mut Vec<u8>,
    most: usize,
) -> io::Result<usize> {
    debug_assert!(out.capacity() - out.len() >= most);
    poll_fn(|cx| {
        let room = most.min(out.capacity() - out.len());
        let mut read_buf = ReadBuf::uninit(&mut out.spare_capacity_mut()[..room]);
        std::task::ready!(Pin::new(&mut *source).poll_read(cx, &mut read_buf))?;
        let n = read_buf.filled().len();
        // SAFETY: poll_read initialised the first `n` bytes of the spare capacity (ReadBuf
        // tracks exactly what was written).
        unsafe { out.set_len(out.len() + n) };
        Poll::Ready(Ok(n))
    })
    .await
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.give_back_memory();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::timeout;

    const FULL: usize = 16 * 1024;
    const LIMIT: usize = 64 * 1024;

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

    /// A body that keeps coming is read in blocks of the limit once a read has filled its room
    /// (a quarter of the system calls of reads of the initial size); a read that comes back
    /// short, or waits, makes the next block the initial size again.
    #[tokio::test]
    async fn a_long_stream_is_read_in_blocks_of_the_limit() {
        let (mut peer, mut source) = tokio::io::duplex(4 * LIMIT);
        peer.write_all(&[b'b'; 3 * LIMIT]).await.unwrap();
        let mut buffer = Buffer::new();
        let mut reads = Vec::new();
        for _ in 0..3 {
            reads.push(
                buffer
                    .read_stream_from(&mut source, FULL, LIMIT)
                    .await
                    .unwrap(),
            );
            buffer.consume(buffer.len());
        }
        assert_eq!(reads, [FULL, LIMIT, LIMIT]);

        // The rest is short of a full block; then the source has nothing for a while.
        let rest = buffer
            .read_stream_from(&mut source, FULL, LIMIT)
            .await
            .unwrap();
        assert_eq!(rest, 3 * LIMIT - FULL - 2 * LIMIT);
        buffer.consume(buffer.len());
        let wait = Duration::from_millis(20);
        let waited = timeout(wait, buffer.read_stream_from(&mut source, FULL, LIMIT)).await;
        assert!(waited.is_err(), "nothing was sent");
        assert_eq!(buffer.bytes.capacity(), 0);
        peer.write_all(&[b'b'; 2 * LIMIT]).await.unwrap();
        let n = buffer
            .read_stream_from(&mut source, FULL, LIMIT)
            .await
            .unwrap();
        assert_eq!((n, buffer.bytes.capacity()), (FULL, FULL));
    }

    /// What a slow peer costs: while a read waits, an empty buffer holds no block and a few bytes
    /// hold a small one; bytes that are there at once are read into a full block.
    #[tokio::test]
    async fn a_waiting_read_holds_only_what_its_bytes_need() {
        let (mut peer, mut source) = tokio::io::duplex(LIMIT);
        let mut buffer = Buffer::new();
        let wait = Duration::from_millis(20);
        let waited = timeout(wait, buffer.read_from(&mut source, FULL, LIMIT)).await;
        assert!(waited.is_err(), "nothing was sent");
        assert_eq!(buffer.bytes.capacity(), 0);

        peer.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let n = buffer.read_from(&mut source, FULL, LIMIT).await.unwrap();
        assert_eq!((n, buffer.bytes.capacity()), (16, FULL));
        let waited = timeout(wait, buffer.read_from(&mut source, FULL, LIMIT)).await;
        assert!(waited.is_err(), "the head is not complete");
        assert_eq!(buffer.bytes.capacity(), SMALLEST_WAITING);
        assert_eq!(buffer.data(), b"GET / HTTP/1.1\r\n");

        // A head that keeps coming grows its block by doubling.
        peer.write_all(&[b'a'; 1500]).await.unwrap();
        while buffer.len() < 16 + 1500 {
            buffer.read_from(&mut source, FULL, LIMIT).await.unwrap();
        }
        assert_eq!(buffer.bytes.capacity(), 2 * SMALLEST_WAITING);
        assert_eq!(&buffer.data()[..16], b"GET / HTTP/1.1\r\n");
        assert!(buffer.data()[16..].iter().all(|&b| b == b'a'));

        // Used up, the buffer reads what comes next (a body, say) into a full block again.
        buffer.consume(buffer.len());
        peer.write_all(b"body").await.unwrap();
        assert_eq!(buffer.read_from(&mut source, FULL, LIMIT).await.unwrap(), 4);
        assert_eq!(buffer.bytes.capacity(), FULL);
    }

    /// A write to a peer that reads slowly keeps only the bytes still to go, in a block their size.
    #[tokio::test]
    async fn a_waiting_write_holds_only_what_is_left() {
        const LEFT: usize = 3000;
        let (mut sink, mut peer) = tokio::io::duplex(FULL - LEFT);
        let mut source: &[u8] = &[b'x'; FULL];
        let mut buffer = Buffer::new();
        let n = buffer.read_from(&mut source, FULL, LIMIT).await.unwrap();
        assert_eq!(n, FULL);
        let waited = timeout(Duration::from_millis(20), buffer.write_to(FULL, &mut sink)).await;
        assert!(waited.is_err(), "the peer has not read");
        assert_eq!((buffer.len(), buffer.bytes.capacity()), (LEFT, 4096));

        let mut taken = vec![0; FULL];
        peer.read_exact(&mut taken[..FULL - LEFT]).await.unwrap();
        buffer.write_to(LEFT, &mut sink).await.unwrap();
        assert!(buffer.is_empty());
        peer.read_exact(&mut taken[FULL - LEFT..]).await.unwrap();
        assert!(taken.iter().all(|&b| b == b'x'));
    }
}
