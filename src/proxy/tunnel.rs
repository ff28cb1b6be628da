//! What follows a 101 (a WebSocket): bytes both ways between the client and the server until the
//! tunnel ends, counted each way, and how it ended — for the access log line written then.
//!
//! A tunnel ends when both sides have closed (a side that closes first has its close passed on,
//! and the other may still send), when either side's connection fails, when nothing passed
//! either way for `[timeouts] tunnel_idle`, or when the worker cuts it at a stop's deadline. An
//! idle tunnel holds no buffer: each direction reads into a block from the worker's free list
//! that goes back while the read waits.

use std::cell::Cell;
use std::time::Duration;

use crate::transport::Moment;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::context::ProxyContext;
use super::downstream::Downstream;
use super::Client;
use crate::transport::deadline::sleep_until;
use crate::transport::{Buffer, Stream, BUFFER_INITIAL};

/// The most one read in a tunnel takes at once (after a read that filled its room).
const READ_MOST: usize = 64 * 1024;

/// What went through a tunnel, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunnelled {
    /// Bytes passed from the server to the client.
    pub to_client: u64,
    /// Bytes passed from the client to the server.
    pub from_client: u64,
    /// As the access log's `ended` says it: `client_closed`, `server_closed` (that side closed
    /// first), `client_error`, `server_error` (that side's connection failed), `idle_timeout`,
    /// or why the worker cut it (`shutdown`, `upgrade`).
    pub ended: &'static str,
}

/// A side of the tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

impl Side {
    fn closed(self) -> &'static str {
        match self {
            Side::Client => "client_closed",
            Side::Server => "server_closed",
        }
    }

    fn failed(self) -> &'static str {
        match self {
            Side::Client => "client_error",
            Side::Server => "server_error",
        }
    }
}

/// Passes bytes both ways between `client` and `server` until the tunnel ends. What either sent
/// before the switch (left in the client's received bytes and in `client.server_buffer`) goes
/// first.
pub async fn run<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    mut server: Stream,
    idle: Duration,
) -> Tunnelled {
    let to_client = Cell::new(0u64);
    let from_client = Cell::new(0u64);
    let last_moved = Cell::new(Moment::now());
    let (mut client_read, from_client_buffer, mut client_write) = client.downstream.split();
    let (mut server_read, mut server_write) = server.split();
    let up = one_way(
        &mut client_read,
        from_client_buffer,
        &mut server_write,
        (&from_client, &last_moved),
        (Side::Client, Side::Server),
    );
    let down = one_way(
        &mut server_read,
        &mut client.server_buffer,
        &mut client_write,
        (&to_client, &last_moved),
        (Side::Server, Side::Client),
    );
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    let mut closed_first = None;
    let ended = loop {
        // Re-armed only when it fires or a direction ends, not per byte: bytes that moved since
        // push the deadline on, and the loop sleeps again until then.
        let idle_until = last_moved.get() + idle;
        tokio::select! {
            result = &mut up, if !up_done => match result {
                Ok(()) => {
                    up_done = true;
                    closed_first.get_or_insert(Side::Client);
                }
                Err(side) => break side.failed(),
            },
            result = &mut down, if !down_done => match result {
                Ok(()) => {
                    down_done = true;
                    closed_first.get_or_insert(Side::Server);
                }
                Err(side) => break side.failed(),
            },
            () = sleep_until(idle_until) => {
                if last_moved.get() + idle <= Moment::now() {
                    break "idle_timeout";
                }
            }
            why = context.tunnels_cut() => break why,
        }
        if up_done && down_done {
            break closed_first.map_or("client_closed", Side::closed);
        }
    };
    Tunnelled {
        to_client: to_client.get(),
        from_client: from_client.get(),
        ended,
    }
}

/// Passes what `from` sends to `to` (what `buffer` holds first) until `from` closes, then closes
/// `to`'s side for writing. `moved` counts the bytes written, `last` is when bytes last moved.
/// An error names the side whose connection failed: `sides` are the reader's and the writer's.
async fn one_way<R, W>(
    from: &mut R,
    buffer: &mut Buffer,
    to: &mut W,
    (moved, last): (&Cell<u64>, &Cell<Moment>),
    (reader, writer): (Side, Side),
) -> Result<(), Side>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        if buffer.is_empty() {
            match buffer
                .read_stream_from(from, BUFFER_INITIAL, READ_MOST)
                .await
            {
                Ok(0) => {
                    // A failed shutdown shows as the other direction's error, if it matters.
                    let _ = to.shutdown().await;
                    return Ok(());
                }
                Ok(_) => last.set(Moment::now()),
                Err(_) => return Err(reader),
            }
        }
        match to.write(buffer.data()).await {
            Ok(0) | Err(_) => return Err(writer),
            Ok(n) => {
                buffer.consume(n);
                moved.set(moved.get() + n as u64);
                last.set(Moment::now());
            }
        }
    }
}
