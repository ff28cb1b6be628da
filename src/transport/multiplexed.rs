//! A byte stream that is not a connection of its own but one of many carried over a shared
//! connection: an HTTP/2 stream to a server (`http2::server`), which reads and writes the
//! exchange's HTTP/1.1 bytes and maps them to its frames. The exchange holds it as any other
//! `Stream`, so one exchange serves servers of either protocol; it is never kept idle (its
//! connection is, by the room that made it) and never parks.

use std::io;
use std::task::{Context, Poll};

use tokio::io::ReadBuf;

/// What a multiplexed stream does, by shared reference: the stream's two halves read and write at
/// once within one task, each call borrowing the state it needs for that call alone (as a TLS
/// stream's do).
pub trait Multiplexed: std::fmt::Debug {
    /// Reads the response's bytes as they come.
    fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>>;

    /// Ready when a read would find bytes, the end or an error.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Takes the request's bytes as the stream can send them.
    fn poll_write(&self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>>;

    /// The exchange abandons the stream before its end: the peer is told to forget it (an HTTP/2
    /// stream is reset with CANCEL), as a server connection abandoned mid-exchange is reset.
    fn abandon(&self);

    /// Whether the peer certainly did not process the request: the stream was refused, or never
    /// opened (its connection had already been told to go away), so it may go again elsewhere
    /// whatever its method.
    fn took_none(&self) -> bool;
}
