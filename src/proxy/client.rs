//! One client connection as its exchanges see it: the stream, the peer's address as
//! X-Forwarded-For writes it, the buffers of both directions, the scratch space for the heads
//! herdsman writes, and what the access log keeps of the current request. Its fields are the
//! exchange's; the session that runs the connection reaches it through the methods here.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::access_log::CapturedRequest;
use crate::http1::forward::{client_ip, AddressText};
use crate::transport::{recycle, Buffer, Stream, BUFFER_INITIAL};

/// One client connection and the buffers it uses.
pub struct Client {
    pub(super) stream: Stream,
    pub(super) peer: SocketAddr,
    /// The peer's address as X-Forwarded-For writes it.
    pub(super) forwarded_for: AddressText,
    /// Bytes from the client not yet used (a partial head, body bytes, pipelined requests).
    pub(super) buffer: Buffer,
    /// Bytes from the server of the current exchange not yet relayed.
    pub(super) server_buffer: Buffer,
    /// Scratch space for the heads herdsman writes.
    pub(super) out: Vec<u8>,
    /// What the access log shows of the current request's head; captured only on a listener
    /// with an access log, so that the others pay nothing for it.
    pub(super) request_log: CapturedRequest,
}

impl Client {
    pub fn new(stream: Stream, peer: SocketAddr) -> Client {
        Client {
            stream,
            peer,
            forwarded_for: AddressText::new(client_ip(peer)),
            buffer: Buffer::new(),
            server_buffer: Buffer::new(),
            out: Vec::new(),
            request_log: CapturedRequest::default(),
        }
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Bytes of a next request are already here (pipelined, or read while waiting).
    pub fn has_unread(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// Waits for the first bytes of the next request, then reads them (up to `most`), holding no
    /// buffer until they are there. False when the client closed the connection or it failed.
    /// Readiness first, then the read: tokio clears readiness after a short read, so after a
    /// request the wait goes straight to the kernel, with no read that would only say EAGAIN
    /// (counted with strace in bench/results/optimisation.md).
    pub async fn read_first_bytes(&mut self, most: usize) -> bool {
        let ready = std::future::poll_fn(|cx| self.stream.poll_read_ready(cx)).await;
        if ready.is_err() {
            return false;
        }
        matches!(
            self.buffer
                .read_from(&mut self.stream, BUFFER_INITIAL, most)
                .await,
            Ok(n) if n > 0
        )
    }

    /// Gives the buffers' memory back to the worker's free list while they hold nothing, so an
    /// idle connection costs only its socket and its task.
    pub fn release_idle_memory(&mut self) {
        self.buffer.release_if_empty();
        self.server_buffer.release_if_empty();
        // Scratch space: nothing in it outlives the exchange that wrote it.
        recycle::give_back_bytes(std::mem::take(&mut self.out));
        recycle::give_back_bytes(self.request_log.take_storage());
    }

    /// The connection's stream, its buffers given up (they are empty between requests).
    pub fn into_stream(self) -> Stream {
        self.stream
    }

    /// After a switch of protocols (a 101): the stream, the bytes the client sent after its
    /// request, and those the server sent with its 101, for the session to pass on.
    pub fn switched(&mut self) -> (&mut Stream, &mut Buffer, &mut Buffer) {
        (&mut self.stream, &mut self.buffer, &mut self.server_buffer)
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
        let deadline = tokio::time::Instant::now() + LINGER;
        let mut discarded = 0;
        while discarded < MOST_DISCARDED {
            let buffer = &mut self.buffer;
            let limit = BUFFER_INITIAL.max(buffer.len() + 1);
            let read = buffer.read_from(&mut self.stream, BUFFER_INITIAL, limit);
            match tokio::time::timeout_at(deadline, read).await {
                Ok(Ok(n)) if n > 0 => {
                    discarded += n;
                    let unread = buffer.len();
                    buffer.consume(unread);
                }
                _ => break,
            }
        }
    }
}

/// `Client::out`, emptied, with room for a usual head (from the free list after an idle spell).
pub fn scratch(out: &mut Vec<u8>) -> &mut Vec<u8> {
    if out.capacity() == 0 {
        *out = recycle::take_bytes(BUFFER_INITIAL);
    }
    out.clear();
    out
}
