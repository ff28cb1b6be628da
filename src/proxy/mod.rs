//! One client connection's request loop: read a head, pick a server, forward the request,
//! relay the response, and keep the connection for the next request or close it.
//!
//! A request is either forwarded whole or answered by herdsman with an error; it is retried on a
//! fresh connection only when it is idempotent, has no body, and went out on a reused connection
//! that failed before any response byte came back (the server had closed it while idle).

mod buffer;
mod exchange;
mod failure;
mod relay;
mod respond;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use buffer::Buffer;
pub use failure::Failure;
pub use relay::{BodyRelay, RelayError};

use crate::worker::WorkerContext;

/// One client connection and the buffers it uses.
pub struct Client {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    /// Bytes from the client not yet used (a partial head, body bytes, pipelined requests).
    pub buffer: Buffer,
    /// Bytes from the server of the current exchange not yet relayed.
    pub server_buffer: Buffer,
    /// Scratch space for the heads herdsman writes.
    pub out: Vec<u8>,
}

/// What happens to the client connection after an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    KeepAlive,
    Close,
}

/// Serves a client connection until it closes, a stop begins, or an error ends it.
pub async fn serve_client(
    context: &Rc<WorkerContext>,
    stream: TcpStream,
    peer: SocketAddr,
    listener: usize,
) {
    let mut client = Client {
        stream,
        peer,
        buffer: Buffer::new(),
        server_buffer: Buffer::new(),
        out: Vec::new(),
    };
    loop {
        let snapshot = context.snapshot();
        match exchange::serve_one(context, &mut client, &snapshot, listener).await {
            Next::KeepAlive => continue,
            Next::Close => break,
        }
    }
    close_gracefully(client.stream).await;
}

/// Sends FIN after everything written, then reads and discards what the client still sends for
/// a moment. Closing with unread bytes would make the kernel answer with a reset, which can
/// destroy the response still in flight (the lingering close of Apache and nginx).
async fn close_gracefully(mut stream: TcpStream) {
    const LINGER: Duration = Duration::from_millis(500);
    const MOST_DISCARDED: usize = 256 * 1024;
    if stream.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut discard = [0u8; 4096];
    let mut discarded = 0;
    while discarded < MOST_DISCARDED {
        match tokio::time::timeout_at(deadline, stream.read(&mut discard)).await {
            Ok(Ok(n)) if n > 0 => discarded += n,
            _ => break,
        }
    }
}
