//! HTTP/2 to servers (a pool's `protocol = "h2"` or `"h2c"`, gRPC's transport): each worker keeps
//! a few connections per server and multiplexes its requests over them, each request one stream
//! (`stream.rs`, which the exchange holds as a `transport::Multiplexed` stream). A request takes
//! the first connection with a stream to spare under the server's SETTINGS_MAX_CONCURRENT_STREAMS;
//! when every one is full, the exchange opens another. A connection the server sent GOAWAY on
//! takes no new streams and closes when its last one ends; one without streams for the pool's
//! idle timeout closes, as do all once the worker stops and they are quiet.

// Public for the fuzz target h2_server_request, which feeds it arbitrary bytes.
pub mod request;
mod response;
mod stream;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::transport::Stream;

pub use stream::ServerStream;

/// Streams a connection takes before the server's SETTINGS say how many it allows (RFC 9113
/// §6.5.2 recommends servers allow at least 100).
const STREAMS_BEFORE_SETTINGS: u32 = 100;

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

/// What a connection's windows and life are.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    pub stream_window: u32,
    pub connection_window: u32,
    /// Without a stream for this long, the connection closes.
    pub idle: Duration,
}

/// One HTTP/2 connection to a server, shared by the streams on it and its task.
#[derive(Debug)]
pub(crate) struct Connection {
    send_request: SendRequest<Bytes>,
    open: Cell<u32>,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS, as its task last saw it.
    limit: Cell<u32>,
    /// GOAWAY came, or the connection ended: no new streams.
    closing: Cell<bool>,
    quiet_since: Cell<Instant>,
    wake: Rc<Notify>,
}

impl Connection {
    fn stream_opened(&self) {
        self.open.set(self.open.get() + 1);
    }

    fn stream_closed(&self) {
        self.open.set(self.open.get() - 1);
        if self.open.get() == 0 {
            self.quiet_since.set(Instant::now());
            self.wake.notify_waiters();
        }
    }

    /// Closing with no stream left on it: nothing will use it again.
    fn is_spent(&self) -> bool {
        self.closing.get() && self.open.get() == 0
    }

    fn going_away(&self) {
        self.closing.set(true);
    }

    /// Whether it takes a new stream now: not closing (a GOAWAY it was sent ends the h2 crate's
    /// readiness at once), and under the server's limit.
    fn takes_a_stream(&self) -> bool {
        if self.closing.get() || self.open.get() >= self.limit.get() {
            return false;
        }
        let mut send_request = self.send_request.clone();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if let Poll::Ready(Err(_)) = send_request.poll_ready(&mut cx) {
            self.closing.set(true);
            return false;
        }
        true
    }
}

/// Why a new connection could not be made ready.
#[derive(Debug, thiserror::Error)]
#[error("HTTP/2 handshake with the server failed: {0}")]
pub struct HandshakeError(#[from] h2::Error);

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
    pub async fn stream_or_wait(&self, server: u64, tls: bool, until: Instant) -> Option<Stream> {
        loop {
            // Made before looking, so that a connection made meanwhile is not missed.
            let connected = self.connected.notified();
            if let Some(stream) = self.stream(server, tls) {
                return Some(stream);
            }
            if !self.connecting.borrow().contains_key(&server) {
                return None;
            }
            tokio::time::timeout_at(until, connected).await.ok()?;
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
    /// preface and SETTINGS; the server's come later), keeps it for the requests after, and
    /// returns a stream on it for this one.
    pub async fn connect(
        &self,
        server: u64,
        stream: Stream,
        settings: ConnectionSettings,
    ) -> Result<Stream, HandshakeError> {
        let tls = matches!(stream, Stream::Tls(_));
        // Until its SETTINGS come, a new connection is assumed to allow what the server's other
        // connections do (a server says the same on each), else 100.
        let assumed = self
            .by_server
            .borrow()
            .get(&server)
            .and_then(|connections| connections.last().map(|c| c.limit.get()))
            .unwrap_or(STREAMS_BEFORE_SETTINGS);
        let (send_request, mut connection) = h2::client::Builder::new()
            .enable_push(false)
            .initial_max_send_streams(assumed as usize)
            .initial_window_size(settings.stream_window)
            .initial_connection_window_size(settings.connection_window)
            .handshake::<_, Bytes>(stream)
            .await?;
        let shared = Rc::new(Connection {
            send_request,
            open: Cell::new(0),
            limit: Cell::new(assumed),
            closing: Cell::new(false),
            quiet_since: Cell::new(Instant::now()),
            wake: Rc::clone(&self.wake),
        });
        let first = ServerStream::new(Rc::clone(&shared), tls);
        self.by_server
            .borrow_mut()
            .entry(server)
            .or_default()
            .push(Rc::clone(&shared));
        let stopping = Rc::clone(&self.stopping);
        tokio::task::spawn_local(async move {
            // The connection's frames move while it is polled; it ends when the server closes
            // it, or here once it is quiet for `idle` or the worker stops.
            loop {
                let quiet = shared.open.get() == 0;
                if quiet && (stopping.get() || shared.closing.get()) {
                    break;
                }
                let idle_end = shared.quiet_since.get() + settings.idle;
                if quiet && idle_end <= Instant::now() {
                    break;
                }
                let wake = shared.wake.notified();
                let ended = tokio::select! {
                    ended = std::future::poll_fn(|cx| {
                        let polled = std::pin::Pin::new(&mut connection).poll(cx);
                        // The server's limit (the h2 crate applies its SETTINGS as it reads
                        // them, and assumes 100 until then).
                        let limit = connection.max_concurrent_send_streams();
                        shared.limit.set(u32::try_from(limit).unwrap_or(u32::MAX));
                        polled
                    }) => Some(ended),
                    () = tokio::time::sleep_until(idle_end), if quiet => None,
                    () = wake => None,
                };
                if let Some(ended) = ended {
                    if let Err(error) = ended {
                        tracing::debug!(%error, "HTTP/2 connection to a server ended");
                    }
                    break;
                }
            }
            shared.closing.set(true);
        });
        Ok(Stream::Multiplexed(Box::new(first)))
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
