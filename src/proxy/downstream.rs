//! The contract between a session and the exchanges it carries: what an exchange needs of the
//! client side of one request. The session keeps its connection (stream, buffers, protocol) to
//! itself and gives the exchange three things through this trait:
//!
//! - the **request head**, as HTTP/1 bytes arriving in [`Downstream::received`] (more with
//!   [`Downstream::receive`]), which the exchange parses, checks and consumes;
//! - the **body source**: the body's first bytes (left in `received` after the head) and then a
//!   reader ([`Downstream::split`]'s source), which also says when the client went away;
//! - the **response sink**: [`Downstream::send`] for a head or an error, bounded by a deadline,
//!   and a writer ([`Downstream::split`]'s sink) for interim responses and the body.
//!
//! An HTTP/1 connection (`session::h1`) implements it over its socket. A session of another
//! protocol (an HTTP/2 stream) implements it over its own framing, and the same exchange serves
//! it. The exchange never sees the connection: not its socket, not its other requests.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use crate::transport::Moment;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::transport::{Buffer, TlsFacts};

/// The client side of an exchange.
pub trait Downstream {
    /// Where the request body comes from, after the bytes at hand.
    type Source<'a>: BodySource
    where
        Self: 'a;
    /// Where the response goes, after its head.
    type Sink<'a>: AsyncWrite + Unpin
    where
        Self: 'a;

    /// The client's address (for the log and X-Forwarded-For).
    fn peer(&self) -> SocketAddr;

    /// What the client's TLS handshake agreed; `None` for cleartext. Over TLS, servers are told
    /// so (`X-Forwarded-Proto: https`), cookies herdsman sets are `Secure`, and the access log
    /// names the version, cipher and SNI.
    fn tls(&self) -> Option<&TlsFacts>;

    /// The HTTP/2 stream this exchange is, for the access log; 0 for an HTTP/1 connection.
    fn stream_id(&self) -> u32 {
        0
    }

    /// What the client sent that the exchange has not used yet: the request head as it arrives,
    /// then the first bytes of its body (and, in HTTP/1, of pipelined requests).
    fn received(&mut self) -> &mut Buffer;

    /// Reads more of what the client sends into [`Downstream::received`], which holds at most
    /// `most` bytes. `Ok(0)`: the client closed its side.
    fn receive(&mut self, most: usize) -> impl Future<Output = io::Result<usize>>;

    /// The body source, the bytes at hand, and the response sink, to use at once (a body
    /// streaming up while the response comes down).
    fn split(&mut self) -> (Self::Source<'_>, &mut Buffer, Self::Sink<'_>);

    /// Sends `bytes` of the response by `deadline`: `None` if the deadline passed first. Most
    /// sends fit at once and arm no timer.
    fn send(
        &mut self,
        bytes: &[u8],
        deadline: Moment,
    ) -> impl Future<Output = Option<io::Result<()>>>;

    /// Sends `head` and then `body` by `deadline`, in one write where the connection can (a
    /// cached answer's head and its stored body, which would otherwise be copied behind it).
    fn send_two(
        &mut self,
        head: &[u8],
        body: &[u8],
        deadline: Moment,
    ) -> impl Future<Output = Option<io::Result<()>>> {
        async move {
            match self.send(head, deadline).await {
                Some(Ok(())) => self.send(body, deadline).await,
                failed => failed,
            }
        }
    }
}

/// A request body's source.
pub trait BodySource: AsyncRead + Unpin {
    /// Completes when the client closed or reset its side. Bytes it sends meanwhile (a pipelined
    /// request) are left for later, and then it is not watched any longer.
    fn closed(&mut self) -> impl Future<Output = ()>;

    /// The client connection's own reading half, when the body comes straight from its socket
    /// (HTTP/1): what a splice needs.
    fn read_half(&self) -> Option<&crate::transport::ReadHalf<'_>> {
        None
    }
}
