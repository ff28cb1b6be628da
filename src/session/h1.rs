//! An HTTP/1 client connection: wait for each request without holding buffers, serve it as one
//! exchange, keep the connection for the next or close it (lingering only when the client may
//! still be sending), and hand it back to the worker when it stays quiet (to be parked).

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use crate::transport::Moment;

use super::connection::Connection;
use super::h2;
use super::handshake::handshake;
use crate::config::tls::ALPN_H2;
use crate::proxy::{serve_one, Client, Next, ProxyContext};
use crate::transport::deadline::{timeout, timeout_at, Expiry};
use crate::transport::recycle::Recycled;
use crate::transport::{Buffer, Detached, BUFFER_INITIAL};
use crate::upstream::Snapshot;

/// How long a connection waits for its next request inside its task before it is handed back
/// to be parked.
pub const PARK_AFTER: Duration = Duration::from_millis(100);

/// How long a stop waits for the next request of a connection that is between requests.
const LAST_CALL: Duration = Duration::from_millis(250);

/// Serves a client connection of `listener` until it closes, a stop begins, an error ends it,
/// or — when `parks` — it stays quiet for `PARK_AFTER`: then it is handed, out of the runtime, to
/// `quiet` with the deadline of its idle timeout (the worker parks it). `quiet` is dropped when
/// the session ends, which is when what it holds (the worker's count of the connection) goes.
///
/// What the client has already sent is read first (a new connection's request is usually here by
/// the time it is accepted, a parked one woke because bytes came): no wait for readiness, no
/// timer armed to park it. The connection is registered with the runtime only if it has to wait
/// (see `transport::Stream`): one whose request was here and whose response went out at once
/// is closed without ever being registered.
///
/// The worker spawns this future itself as the connection's task: a task that wrapped it in
/// another future cost about 150 instructions a request more (callgrind).
pub async fn serve<Q>(
    context: Rc<ProxyContext>,
    stream: Detached,
    peer: SocketAddr,
    listener: usize,
    parks: bool,
    resumed_h2: Option<h2::Parked>,
    quiet: Q,
) where
    Q: FnOnce(Detached, Option<h2::Parked>, Instant),
{
    let context = &context;
    let mut received = Buffer::new();
    let snapshot = context.snapshot();
    let stream = match snapshot.listener_tls(listener) {
        // A new connection on a TLS listener: the handshake first (a parked one has had it).
        Some(tls) if !stream.is_tls() => {
            let deadline = Moment::now() + snapshot.timeouts.tls_handshake;
            match handshake(context, stream, tls, peer, deadline).await {
                Some(stream) => stream,
                None => return,
            }
        }
        _ => {
            let mut stream = stream;
            let most = snapshot.limits.max_header_bytes;
            match stream.read_now(&mut received, most) {
                Ok(0) => return,
                Err(error) if error.kind() != io::ErrorKind::WouldBlock => return,
                _ => {}
            }
            match stream.into_stream() {
                Ok(stream) => stream,
                Err(_) => return,
            }
        }
    };
    if resumed_h2.is_some() {
        // A parked HTTP/2 connection that woke: its state goes on where it stopped.
        drop(snapshot);
        let quiet = parks.then_some(quiet);
        return h2::serve(context, stream, received, peer, listener, resumed_h2, quiet).await;
    }
    let h2c = snapshot.listener_h2c(listener);
    let first_bytes_by = Moment::now() + snapshot.timeouts.client_header;
    let most = snapshot.limits.max_header_bytes;
    drop(snapshot);
    let mut stream = stream;
    if h2c && received.is_empty() {
        // Which protocol it speaks is in its first bytes: wait for them.
        let read = received.read_from(&mut stream, BUFFER_INITIAL, most);
        match timeout_at(first_bytes_by, read).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
    // HTTP/2: agreed by ALPN over TLS, or, on an h2c listener, a connection that starts with its
    // preface (a fresh one: the first bytes are all here, or it is read for the rest of them).
    if stream.agreed_alpn(ALPN_H2) || (h2c && h2::is_preface(received.data())) {
        let quiet = parks.then_some(quiet);
        return h2::serve(context, stream, received, peer, listener, None, quiet).await;
    }
    if h2c && h2::is_broken_preface(received.data()) {
        // A connection error, answered in HTTP/2 rather than with an HTTP/1.1 status.
        let _ = stream.try_write(&h2::GOAWAY_BROKEN_PREFACE);
        return;
    }
    let mut client = Client::new(Connection::with_received(stream, received, peer));
    // Where the client's silence began: its arrival, then the end of each exchange.
    let mut quiet_since = Moment::now();
    // How the connection ends, when it ends by a close: lingering, or at once.
    let linger = loop {
        let snapshot = context.snapshot();
        if !client.downstream().has_unread() {
            match wait_for_request(&mut client, &snapshot, quiet_since, parks).await {
                Waited::Request => {}
                Waited::Quiet { deadline } => {
                    let (stream, _) = client.into_parts().0.into_parts();
                    if let Ok(stream) = stream.detach() {
                        quiet(stream, None, deadline.to_instant());
                    }
                    return;
                }
                Waited::Close => break true,
                Waited::Gone => break false,
            }
        }
        // The exchange's future is large (about 1.5 KiB: timers, the relay's state); it lives in
        // a recycled block, so the task of an idle connection holds only this loop's small state
        // and a busy one allocates nothing per request.
        let exchange = {
            let (client, snapshot) = (&mut client, &snapshot);
            Recycled::new(move || serve_one(context, client, snapshot, listener))
        };
        match exchange.await {
            (Next::KeepAlive, ended) => quiet_since = ended,
            (Next::Close { linger }, _) => break linger || client.downstream().may_have_more(),
            (Next::Reset, _) => {
                client.into_parts().0.reset();
                return;
            }
        }
    };
    let connection = client.into_parts().0;
    match linger {
        true => connection.close_gracefully().await,
        false => connection.close_at_once(),
    }
}

/// How the wait for a request ended.
enum Waited {
    /// Its first bytes are in the client's buffer.
    Request,
    /// Nothing for `PARK_AFTER`: park the connection until `deadline` (its idle timeout).
    Quiet { deadline: Moment },
    /// The client stayed idle past `client_idle`, or a stop began: close, lingering.
    Close,
    /// The client closed the connection (or it failed): nothing more can come.
    Gone,
}

/// Between requests: holds no buffer until the client sends the first bytes of its next
/// request, then reads them. The idle timeout counts from `since`.
async fn wait_for_request(
    client: &mut Client<Connection>,
    snapshot: &Snapshot,
    since: Moment,
    parks: bool,
) -> Waited {
    client.release_idle_memory();
    client.downstream().release_idle_memory();
    let (idle, most) = (
        snapshot.timeouts.client_idle,
        snapshot.limits.max_header_bytes,
    );
    let parks = parks && idle > PARK_AFTER;
    let timer = client.timer();
    let first_bytes = async {
        match client.downstream().read_first_bytes(most).await {
            true => Waited::Request,
            false => Waited::Gone,
        }
    };
    let wait = if parks { PARK_AFTER } else { idle };
    tokio::pin!(first_bytes);
    // One entry in the worker's wheel for both the wait's end and a stop.
    match timer.until_or_stop(since + wait, &mut first_bytes).await {
        Ok(waited) => waited,
        Err(Expiry::Elapsed) if parks => Waited::Quiet {
            deadline: since + idle,
        },
        Err(Expiry::Elapsed) => Waited::Close,
        Err(Expiry::Stopping) => {
            // Last call: a request already on its way (a busy client sends its next one at
            // once) is served, with Connection: close, rather than met with a close that could
            // cross it on the wire and fail it. A connection that stays silent closes.
            timeout(LAST_CALL, first_bytes)
                .await
                .unwrap_or(Waited::Close)
        }
    }
}
