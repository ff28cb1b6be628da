//! An HTTP/1 client connection as its session holds it: the stream and the bytes received and
//! not yet used. The exchanges reach it only through the `Downstream` contract; the session
//! itself waits on it between requests, closes it with a lingering close, or gives up its stream
//! to be parked.

use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::transport::Moment;
use tokio::io::AsyncWriteExt;

use crate::proxy::{BodySource, Downstream};
use crate::transport::deadline::timeout_at;
use crate::transport::{
    write_all_by, write_two_by, Buffer, ReadHalf, Stream, TlsFacts, WriteHalf, BUFFER_INITIAL,
};

/// One client connection speaking HTTP/1.
pub struct Connection {
    stream: Stream,
    /// Bytes from the client not yet used (a partial head, body bytes, pipelined requests).
    received: Buffer,
    peer: SocketAddr,
    /// Bytes of the last send written so far (the count `write_all_by` keeps; unread here).
    sent: usize,
    /// What the stream's TLS handshake agreed (boxed: cleartext connections carry 8 bytes).
    tls: Option<Box<TlsFacts>>,
}

impl Connection {
    /// The connection, with the bytes already read from it.
    pub fn with_received(stream: Stream, received: Buffer, peer: SocketAddr) -> Connection {
        let tls = stream.tls_facts().map(Box::new);
        Connection {
            stream,
            received,
            peer,
            sent: 0,
            tls,
        }
    }

    /// Bytes of a next request are already here (pipelined, or read while waiting).
    pub fn has_unread(&self) -> bool {
        !self.received.is_empty()
    }

    /// Gives the buffer's memory back to the worker's free list while it holds nothing.
    pub fn release_idle_memory(&mut self) {
        self.received.release_if_empty();
    }

    /// Waits for the first bytes of the next request, then reads them (up to `most`), holding no
    /// buffer until they are there. False when the client closed the connection or it failed.
    /// Readiness first, then the read: tokio clears readiness after a short read, so after a
    /// request the wait goes straight to the kernel, with no read that would only say EAGAIN
    /// (counted with strace in bench/results/optimisation.md).
    pub async fn read_first_bytes(&mut self, most: usize) -> bool {
        if poll_fn(|cx| self.stream.poll_read_ready(cx)).await.is_err() {
            return false;
        }
        matches!(
            self.received
                .read_from(&mut self.stream, BUFFER_INITIAL, most)
                .await,
            Ok(n) if n > 0
        )
    }

    /// The stream, to park; with the bytes received and not yet used.
    pub fn into_parts(self) -> (Stream, Buffer) {
        (self.stream, self.received)
    }

    /// Whether the client may have sent more than was used: bytes already received and not
    /// used, or the stream already known readable (no system call; as nginx's `read->ready`).
    pub fn may_have_more(&mut self) -> bool {
        self.has_unread() || self.stream.is_read_ready()
    }

    /// Closes at once, when nothing more can come from the client: what was written still goes
    /// out, followed by FIN (a close with no unread bytes sends no reset).
    pub fn close_at_once(self) {
        self.stream.close_notify_now();
        drop(self);
    }

    /// Closes with a reset: what the kernel still holds for the client is dropped.
    pub fn reset(self) {
        self.stream.reset_on_close();
    }

    /// Sends FIN after everything written, then reads and discards what the client still sends
    /// for a moment. Closing with unread bytes would make the kernel answer with a reset, which
    /// can destroy the response still in flight (the lingering close of Apache and nginx).
    pub async fn close_gracefully(mut self) {
        const LINGER: Duration = Duration::from_millis(500);
        const MOST_DISCARDED: usize = 256 * 1024;
        if self.stream.shutdown().await.is_err() {
            return;
        }
        let deadline = Moment::now() + LINGER;
        let mut discarded = 0;
        while discarded < MOST_DISCARDED {
            let received = &mut self.received;
            let limit = BUFFER_INITIAL.max(received.len() + 1);
            let read = received.read_from(&mut self.stream, BUFFER_INITIAL, limit);
            match timeout_at(deadline, read).await {
                Ok(Ok(n)) if n > 0 => {
                    discarded += n;
                    let unread = received.len();
                    received.consume(unread);
                }
                _ => break,
            }
        }
    }
}

impl Downstream for Connection {
    type Source<'a> = ReadHalf<'a>;
    type Sink<'a> = WriteHalf<'a>;

    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn tls(&self) -> Option<&TlsFacts> {
        self.tls.as_deref()
    }

    fn received(&mut self) -> &mut Buffer {
        &mut self.received
    }

    fn receive(&mut self, most: usize) -> impl Future<Output = io::Result<usize>> {
        self.received
            .read_from(&mut self.stream, BUFFER_INITIAL, most)
    }

    fn split(&mut self) -> (ReadHalf<'_>, &mut Buffer, WriteHalf<'_>) {
        let (read, write) = self.stream.split();
        (read, &mut self.received, write)
    }

    /// The write's own future, not one around it: an extra layer cost about 40 instructions a
    /// request (callgrind).
    fn send(
        &mut self,
        bytes: &[u8],
        deadline: Moment,
    ) -> impl Future<Output = Option<io::Result<()>>> {
        write_all_by(&mut self.stream, bytes, deadline, &mut self.sent)
    }

    fn send_two(
        &mut self,
        head: &[u8],
        body: &[u8],
        deadline: Moment,
    ) -> impl Future<Output = Option<io::Result<()>>> {
        write_two_by(&mut self.stream, head, body, deadline, &mut self.sent)
    }
}

impl BodySource for ReadHalf<'_> {
    fn closed(&mut self) -> impl Future<Output = ()> {
        ReadHalf::closed(self)
    }

    fn read_half(&self) -> Option<&ReadHalf<'_>> {
        Some(self)
    }
}
