//! HTTP/2 to servers (a pool's `protocol = "h2"` or `"h2c"`, gRPC's transport): each worker keeps
//! a few connections per server and multiplexes its requests over them, each request one stream
//! (`stream.rs`, which the exchange holds as a `transport::Multiplexed` stream). A request takes
//! the first connection with a stream to spare under the server's SETTINGS_MAX_CONCURRENT_STREAMS;
//! when every one is full, the exchange opens another. A connection the server sent GOAWAY on
//! takes no new streams and closes when its last one ends; one without streams for the pool's
//! idle timeout closes, as do all once the worker stops and they are quiet.

// Public for the fuzz target h2_server_frames, which feeds it arbitrary frames.
pub mod connection;
// Public for the fuzz target h2_server_request, which feeds it arbitrary bytes.
pub mod request;
mod response;
mod stream;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::http2::frame::{ConnError, HEADER_LEN};
use crate::transport::{deadline, Moment, Stream};
use connection::{Failed, State, MAX_FRAME, MAX_OUT};

pub use connection::ConnectionSettings;
pub use stream::ServerStream;

/// Streams a connection takes before the server's SETTINGS say how many it allows (RFC 9113
/// §6.5.2 recommends servers allow at least 100).
const STREAMS_BEFORE_SETTINGS: u32 = 100;

/// Reads a connection's task makes in one turn before it lets the worker's other tasks run.
const READS_PER_TURN: usize = 16;

/// One worker's HTTP/2 connections to servers, by server id.
#[derive(Debug, Default)]
pub struct ServerConnections {
    by_server: RefCell<HashMap<u64, Vec<Rc<Connection>>>>,
    /// Set once the worker stops: connections close as soon as they have no stream.
    stopping: Rc<Cell<bool>>,
    /// Wakes every connection's task to look whether it should close.
    wake: Rc<Notify>,
    /// Connections being made, by server: a request finding none with room waits for them
    /// rather than making one more.
    connecting: RefCell<HashMap<u64, u32>>,
    /// Told when one of them is made (or fails).
    connected: Notify,
}

/// A connection to a server being made, counted until it is dropped.
pub struct Connecting<'a> {
    connections: &'a ServerConnections,
    server: u64,
}

impl Drop for Connecting<'_> {
    fn drop(&mut self) {
        let mut connecting = self.connections.connecting.borrow_mut();
        if let Some(count) = connecting.get_mut(&self.server) {
            *count -= 1;
            if *count == 0 {
                connecting.remove(&self.server);
            }
        }
        self.connections.connected.notify_waiters();
    }
}

/// One HTTP/2 connection to a server, shared by the streams on it and its task.
#[derive(Debug)]
pub(crate) struct Connection {
    state: RefCell<State>,
    wake: Rc<Notify>,
}

impl Connection {
    /// Closing with no stream left on it: nothing will use it again.
    fn is_spent(&self) -> bool {
        let state = self.state.borrow();
        state.closing && state.open == 0
    }

    /// Whether it takes a new stream now: not closing, and under the server's limit.
    fn takes_a_stream(&self) -> bool {
        self.state.borrow().takes_a_stream()
    }
}

/// The socket side of a connection's task: bytes read and not yet made into frames, frames
/// being written.
struct Io {
    stream: Stream,
    input: Vec<u8>,
    input_at: usize,
    writing: Vec<u8>,
    written: usize,
}

/// Why a connection's task stopped moving bytes.
enum Ended {
    /// The server closed the connection (or the socket failed).
    Closed(io::ErrorKind),
    /// A connection error herdsman found; its GOAWAY is written before the close.
    Error(ConnError),
}

impl Io {
    /// Writes what the connection has to send, until it is all written or the socket is full.
    fn poll_write_out(
        &mut self,
        connection: &Connection,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if self.written == self.writing.len() {
                self.writing.clear();
                self.written = 0;
                let mut state = connection.state.borrow_mut();
                if state.out.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                std::mem::swap(&mut state.out, &mut self.writing);
                // Room in `out` again: streams waiting for it write on.
                state.wake_blocked();
            }
            let n = std::task::ready!(
                Pin::new(&mut self.stream).poll_write(cx, &self.writing[self.written..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
            if self.written == self.writing.len() {
                std::task::ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
                if self.writing.capacity() > 2 * MAX_OUT {
                    self.writing = Vec::new();
                }
            }
        }
    }

    /// Moves bytes both ways until nothing more can be done now: Pending then (woken by the
    /// socket or a stream), Ready when the connection ends.
    fn poll_turn(&mut self, connection: &Connection, cx: &mut Context<'_>) -> Poll<Ended> {
        {
            let mut state = connection.state.borrow_mut();
            match &state.driver {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => state.driver = Some(cx.waker().clone()),
            }
        }
        for _ in 0..READS_PER_TURN {
            if let Poll::Ready(Err(error)) = self.poll_write_out(connection, cx) {
                return Poll::Ready(Ended::Closed(error.kind()));
            }
            if self.input_at > 0 {
                self.input.drain(..self.input_at);
                self.input_at = 0;
            }
            let held = self.input.len();
            // Room for a whole frame beside what is held.
            self.input.reserve(MAX_FRAME + HEADER_LEN);
            let mut buf = ReadBuf::uninit(self.input.spare_capacity_mut());
            match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => {
                    let n = buf.filled().len();
                    if n == 0 {
                        return Poll::Ready(Ended::Closed(io::ErrorKind::UnexpectedEof));
                    }
                    // SAFETY: `poll_read` initialised the first `n` bytes of the spare capacity.
                    unsafe { self.input.set_len(held + n) };
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Ended::Closed(error.kind())),
                Poll::Pending => {
                    if self.input.is_empty() && self.input.capacity() > 0 {
                        // Nothing held while the server is quiet.
                        self.input = Vec::new();
                    }
                    return Poll::Pending;
                }
            }
            let mut state = connection.state.borrow_mut();
            loop {
                match state.read_frame(&self.input[self.input_at..]) {
                    Ok(0) => break,
                    Ok(n) => self.input_at += n,
                    Err(error) => return Poll::Ready(Ended::Error(error)),
                }
            }
        }
        // More may be waiting: the task runs again after the worker's others.
        cx.waker().wake_by_ref();
        if let Poll::Ready(Err(error)) = self.poll_write_out(connection, cx) {
            return Poll::Ready(Ended::Closed(error.kind()));
        }
        Poll::Pending
    }
}

impl ServerConnections {
    /// A stream on one of this worker's connections to server `server` with room for one, if
    /// there is such a connection. `tls`: the connection is over TLS (the `:scheme`).
    pub fn stream(&self, server: u64, tls: bool) -> Option<Stream> {
        let mut by_server = self.by_server.borrow_mut();
        let connections = by_server.get_mut(&server)?;
        connections.retain(|connection| !connection.is_spent());
        let connection = connections.iter().find(|c| c.takes_a_stream())?;
        let stream = ServerStream::new(Rc::clone(connection), tls);
        Some(Stream::Multiplexed(Box::new(stream)))
    }

    /// A stream to `server` on a connection with room, waiting (until `until`) for the
    /// connections being made to it when none has room now; `None` if there is none, and a new
    /// connection is wanted.
    pub async fn stream_or_wait(&self, server: u64, tls: bool, until: Moment) -> Option<Stream> {
        loop {
            // Made before looking, so that a connection made meanwhile is not missed.
            let connected = self.connected.notified();
            if let Some(stream) = self.stream(server, tls) {
                return Some(stream);
            }
            if !self.connecting.borrow().contains_key(&server) {
                return None;
            }
            deadline::timeout_at(until, connected).await.ok()?;
        }
    }

    /// Counts a connection to `server` being made (its TCP connect, its TLS, its preface) until
    /// the returned guard is dropped: requests meanwhile wait for it (`stream_or_wait`).
    pub fn begin_connecting(&self, server: u64) -> Connecting<'_> {
        *self.connecting.borrow_mut().entry(server).or_default() += 1;
        Connecting {
            connections: self,
            server,
        }
    }

    /// Makes `stream`, just connected to server `server`, an HTTP/2 connection (the client
    /// preface and SETTINGS go first; the server's come later), keeps it for the requests after,
    /// and returns a stream on it for this one.
    pub fn connect(&self, server: u64, stream: Stream, settings: ConnectionSettings) -> Stream {
        let tls = matches!(stream, Stream::Tls(_));
        // Until its SETTINGS come, a new connection is assumed to allow what the server's other
        // connections do (a server says the same on each), else 100.
        let assumed = self
            .by_server
            .borrow()
            .get(&server)
            .and_then(|connections| connections.last().map(|c| c.state.borrow().limit))
            .unwrap_or(STREAMS_BEFORE_SETTINGS);
        let shared = Rc::new(Connection {
            state: RefCell::new(State::new(settings, assumed)),
            wake: Rc::clone(&self.wake),
        });
        let first = ServerStream::new(Rc::clone(&shared), tls);
        self.by_server
            .borrow_mut()
            .entry(server)
            .or_default()
            .push(Rc::clone(&shared));
        let stopping = Rc::clone(&self.stopping);
        let mut io = Io {
            stream,
            input: Vec::new(),
            input_at: 0,
            writing: Vec::new(),
            written: 0,
        };
        tokio::task::spawn_local(async move {
            // The connection's frames move while it is polled; it ends when the server closes
            // it, or here once it is quiet for `idle` or the worker stops.
            let ended = loop {
                let (quiet, closing, idle_end) = {
                    let state = shared.state.borrow();
                    (
                        state.open == 0,
                        state.closing,
                        state.quiet_since + settings.idle,
                    )
                };
                if quiet && (stopping.get() || closing || idle_end <= Instant::now()) {
                    break None;
                }
                let wake = shared.wake.notified();
                tokio::select! {
                    ended = std::future::poll_fn(|cx| io.poll_turn(&shared, cx)) => break Some(ended),
                    () = tokio::time::sleep_until(idle_end), if quiet => {}
                    () = wake => {}
                }
            };
            {
                let mut state = shared.state.borrow_mut();
                match ended {
                    Some(Ended::Closed(kind)) => {
                        tracing::debug!(?kind, "HTTP/2 connection to a server ended");
                        state.end(Failed {
                            unprocessed: false,
                            kind,
                        });
                    }
                    Some(Ended::Error(error)) => {
                        tracing::debug!(reason = error.reason, "HTTP/2 server broke the protocol");
                        state.connection_error(error);
                    }
                    None => state.close_quietly(),
                }
            }
            // The last frames (a GOAWAY) go out, briefly, before the close.
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(1),
                std::future::poll_fn(|cx| io.poll_write_out(&shared, cx)),
            )
            .await;
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut io.stream).await;
        });
        Stream::Multiplexed(Box::new(first))
    }

    /// The worker stops: quiet connections close now, the others once their streams end.
    pub fn stop(&self) {
        self.stopping.set(true);
        self.wake.notify_waiters();
    }

    /// Forgets connections that ended (their servers may be gone for good).
    pub fn forget_ended(&self) {
        self.by_server.borrow_mut().retain(|_, connections| {
            connections.retain(|connection| !connection.is_spent());
            !connections.is_empty()
        });
    }
}
