//! One client connection's request loop: read a head, pick a server, forward the request,
//! relay the response, and keep the connection for the next request or close it.
//!
//! A request is either forwarded whole or answered by herdsman with an error. It goes again on a
//! fresh connection to the same server when a reused connection failed before any response byte
//! and the request is idempotent or provably untouched (the server had closed the connection as it
//! went out); it goes to another server after a failure its pool's `retry_on` lists, when nothing
//! of it reached the first server or it is idempotent and all of it is at hand (`exchange.rs`).

mod buffer;
mod exchange;
mod failure;
pub mod parking;
mod recycle;
mod relay;
mod respond;
mod server_stream;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};

pub use buffer::Buffer;
pub use exchange::Outcome;
pub use failure::Failure;
pub use relay::{BodyRelay, RelayError};

use recycle::Recycled;
use relay::BUFFER_INITIAL;

use crate::access_log::CapturedRequest;
use crate::http1::forward::AddressText;
use crate::upstream::Snapshot;
use crate::worker::{client_ip, ConnectionGuard, WorkerContext};
use parking::{Parked, PARK_AFTER};

/// One client connection and the buffers it uses.
pub struct Client {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    /// The peer's address as X-Forwarded-For writes it.
    pub forwarded_for: AddressText,
    /// Bytes from the client not yet used (a partial head, body bytes, pipelined requests).
    pub buffer: Buffer,
    /// Bytes from the server of the current exchange not yet relayed.
    pub server_buffer: Buffer,
    /// Scratch space for the heads herdsman writes.
    pub out: Vec<u8>,
    /// What the access log shows of the current request's head; captured only on a listener
    /// with an access log, so that the others pay nothing for it.
    pub request_log: CapturedRequest,
}

/// What happens to the client connection after an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    KeepAlive,
    Close,
}

/// Serves a client connection until it closes, a stop begins, an error ends it, or it stays
/// quiet long enough to be parked (`parking`). `guard` counts it as open meanwhile.
pub async fn serve_client(
    context: &Rc<WorkerContext>,
    stream: TcpStream,
    peer: SocketAddr,
    listener: usize,
    guard: ConnectionGuard,
) {
    let mut client = Client {
        stream,
        peer,
        forwarded_for: AddressText::new(client_ip(peer)),
        buffer: Buffer::new(),
        server_buffer: Buffer::new(),
        out: Vec::new(),
        request_log: CapturedRequest::default(),
    };
    // Where the client's silence began: its arrival, then the end of each exchange.
    let mut quiet_since = Instant::now();
    loop {
        let snapshot = context.snapshot();
        if client.buffer.is_empty() {
            match wait_for_request(context, &mut client, &snapshot, quiet_since).await {
                Waited::Request => {}
                Waited::Quiet { deadline } => {
                    return park(context, client, listener, guard, deadline)
                }
                Waited::Close => break,
            }
        }
        // The exchange's future is large (about 1.5 KiB: timers, the relay's state); it lives in
        // a recycled block, so the task of an idle connection holds only this loop's small state
        // and a busy one allocates nothing per request.
        let (client, snapshot) = (&mut client, &snapshot);
        let exchange =
            Recycled::new(move || exchange::serve_one(context, client, snapshot, listener));
        match exchange.await {
            (Next::KeepAlive, ended) => quiet_since = ended,
            (Next::Close, _) => break,
        }
    }
    close_gracefully(client).await;
}

/// How the wait for a request ended.
enum Waited {
    /// Its first bytes are in `client.buffer`.
    Request,
    /// Nothing for `PARK_AFTER`: park the connection until `deadline` (its idle timeout).
    Quiet { deadline: Instant },
    /// The client closed the connection, stayed idle past `client_idle`, or a stop began.
    Close,
}

/// Between requests: holds no buffer until the client sends the first bytes of its next
/// request, then reads them into `client.buffer`. The idle timeout counts from `since`.
async fn wait_for_request(
    context: &WorkerContext,
    client: &mut Client,
    snapshot: &Snapshot,
    since: Instant,
) -> Waited {
    client.release_idle_memory();
    let (idle, most) = (
        snapshot.timeouts.client_idle,
        snapshot.limits.max_header_bytes,
    );
    let parks = context.parking.is_some() && idle > PARK_AFTER;
    // Readiness first, then the read: the buffer is taken only when bytes are there. tokio
    // clears readiness after a short read, so after a request the wait goes straight to the
    // kernel, with no read that would only say EAGAIN (counted with strace in
    // bench/results/optimisation.md).
    let first_bytes = async {
        // poll_read_ready, not `readable`: the latter queues a waiter on the socket's
        // registration, about 230 instructions a request dearer (bench/results/optimisation.md).
        let ready = std::future::poll_fn(|cx| client.stream.poll_read_ready(cx)).await;
        if ready.is_err() {
            return Waited::Close;
        }
        match client
            .buffer
            .read_from(&mut client.stream, BUFFER_INITIAL, most)
            .await
        {
            Ok(0) | Err(_) => Waited::Close,
            Ok(_) => Waited::Request,
        }
    };
    let wait = if parks { PARK_AFTER } else { idle };
    tokio::pin!(first_bytes);
    tokio::select! {
        waited = timeout_at(since + wait, &mut first_bytes) => waited.unwrap_or(if parks {
            Waited::Quiet { deadline: since + idle }
        } else {
            Waited::Close
        }),
        () = context.stopped() => {
            // Last call: a request already on its way (a busy client sends its next one at
            // once) is served, with Connection: close, rather than met with a close that could
            // cross it on the wire and fail it. A connection that stays silent closes.
            timeout(LAST_CALL, first_bytes).await.unwrap_or(Waited::Close)
        }
    }
}

/// How long a stop waits for the next request of a connection that is between requests.
const LAST_CALL: Duration = Duration::from_millis(250);

/// Moves a quiet connection from its task into the worker's parking lot (closing it if that
/// fails); the task then ends.
fn park(
    context: &WorkerContext,
    client: Client,
    listener: usize,
    guard: ConnectionGuard,
    deadline: Instant,
) {
    let (Some(lot), Ok(stream)) = (&context.parking, client.stream.into_std()) else {
        return;
    };
    let parked = Parked {
        stream,
        peer: client.peer,
        listener,
        guard,
        deadline,
    };
    if lot.park(parked).is_err() {
        tracing::debug!(client = %client.peer, "could not park an idle connection; closed it");
    }
}

impl Client {
    /// Gives the buffers' memory back to the worker's free list while they hold nothing, so an
    /// idle connection costs only its socket and its task.
    fn release_idle_memory(&mut self) {
        self.buffer.release_if_empty();
        self.server_buffer.release_if_empty();
        // Scratch space: nothing in it outlives the exchange that wrote it.
        recycle::give_back_bytes(std::mem::take(&mut self.out));
        recycle::give_back_bytes(self.request_log.take_storage());
    }
}

/// Writes all of `bytes` to `stream` by `deadline`; `None` if the deadline passed first.
/// `written` counts the bytes written so far, also when it fails. Most writes fit the socket's
/// buffer and are done by the first try, which arms no timer: setting up and dropping a timeout
/// that is never waited on cost about 250 instructions a write (bench/results/optimisation.md).
/// Same syscalls: a try that would block makes none (tokio knows the socket is not writable) or
/// is the first `write` of the timed loop.
pub async fn write_all_by(
    stream: &mut TcpStream,
    bytes: &[u8],
    deadline: Instant,
    written: &mut usize,
) -> Option<std::io::Result<()>> {
    use std::io::ErrorKind::{Interrupted, WouldBlock, WriteZero};
    *written = match stream.try_write(bytes) {
        Ok(n) => n,
        Err(e) if matches!(e.kind(), WouldBlock | Interrupted) => 0,
        Err(e) => return Some(Err(e)),
    };
    if *written == bytes.len() {
        return Some(Ok(()));
    }
    let rest = async {
        while *written < bytes.len() {
            match stream.write(&bytes[*written..]).await {
                Ok(0) => return Err(std::io::Error::from(WriteZero)),
                Ok(n) => *written += n,
                Err(e) if e.kind() == Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    };
    timeout_at(deadline, rest).await.ok()
}

/// `Client::out`, emptied, with room for a usual head (from the free list after an idle spell).
pub fn scratch(out: &mut Vec<u8>) -> &mut Vec<u8> {
    if out.capacity() == 0 {
        *out = recycle::take_bytes(BUFFER_INITIAL);
    }
    out.clear();
    out
}

/// Sends FIN after everything written, then reads and discards what the client still sends for
/// a moment. Closing with unread bytes would make the kernel answer with a reset, which can
/// destroy the response still in flight (the lingering close of Apache and nginx).
async fn close_gracefully(mut client: Client) {
    const LINGER: Duration = Duration::from_millis(500);
    const MOST_DISCARDED: usize = 256 * 1024;
    if client.stream.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut discarded = 0;
    while discarded < MOST_DISCARDED {
        let buffer = &mut client.buffer;
        let limit = BUFFER_INITIAL.max(buffer.len() + 1);
        let read = buffer.read_from(&mut client.stream, BUFFER_INITIAL, limit);
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// More than loopback's socket buffers hold, so the first try writes only part of it.
    const LARGE: usize = 8 * 1024 * 1024;

    async fn connected_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let writer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (reader, _) = listener.accept().await.unwrap();
        (writer, reader)
    }

    #[tokio::test]
    async fn a_write_too_large_for_the_socket_sends_every_byte_once_and_in_order() {
        let (mut writer, mut reader) = connected_pair().await;
        let bytes: Vec<u8> = (0..LARGE).map(|i| (i % 251) as u8).collect();
        let read = tokio::spawn(async move {
            let mut got = Vec::with_capacity(LARGE);
            reader.read_to_end(&mut got).await.unwrap();
            got
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let written = write_all_by(&mut writer, &bytes, deadline, &mut 0).await;
        assert!(matches!(written, Some(Ok(()))), "{written:?}");
        drop(writer);
        assert!(read.await.unwrap() == bytes, "the reader got other bytes");
    }

    #[tokio::test]
    async fn a_write_to_a_peer_that_does_not_read_ends_at_the_deadline() {
        let (mut writer, _reader) = connected_pair().await;
        let bytes = vec![b'x'; LARGE];
        let started = Instant::now();
        let deadline = started + Duration::from_millis(100);
        let written = write_all_by(&mut writer, &bytes, deadline, &mut 0).await;
        assert!(written.is_none(), "{written:?}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(100), "ended after {took:?}");
        assert!(took < Duration::from_secs(5), "ended after {took:?}");
    }
}
