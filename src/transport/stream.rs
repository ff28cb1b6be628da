//! The byte stream a connection runs on, to a client or to a server: an enum of the transports
//! herdsman speaks (plain TCP today; TLS becomes one more variant). An enum rather than a boxed
//! trait object, so that the fast paths the request path relies on (`poll_read_ready` before a
//! buffer is taken, `try_write` before a timer is armed) stay direct calls that the compiler sees
//! through: with one variant the code is what it was with a bare `TcpStream`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{tcp, TcpStream};

use super::buffer::{Buffer, BUFFER_INITIAL};

/// Implements `AsyncRead` for an enum of transports by passing each call to the variant's own
/// stream (the same for a whole stream and for its reading half).
macro_rules! read_by_variant {
    ($type:ty) => {
        impl AsyncRead for $type {
            #[inline]
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(inner) => Pin::new(inner).poll_read(cx, buf),
                }
            }
        }
    };
}

/// Implements `AsyncWrite` for an enum of transports by passing each call to the variant's own
/// stream (the same for a whole stream and for its writing half).
macro_rules! write_by_variant {
    ($type:ty) => {
        impl AsyncWrite for $type {
            #[inline]
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Tcp(inner) => Pin::new(inner).poll_write(cx, buf),
                }
            }

            #[inline]
            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(inner) => Pin::new(inner).poll_flush(cx),
                }
            }

            #[inline]
            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(inner) => Pin::new(inner).poll_shutdown(cx),
                }
            }
        }
    };
}

/// A connection registered with the worker's runtime.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
}

/// A connection outside any runtime: accepted and not yet served, handed between workers, or
/// waiting in a worker's parking lot. `Send`, unlike a registered [`Stream`].
#[derive(Debug)]
pub struct Detached(std::net::TcpStream);

/// The reading half of a [`Stream`] split for a relay both ways.
pub enum ReadHalf<'a> {
    Tcp(tcp::ReadHalf<'a>),
}

/// The writing half of a [`Stream`] split for a relay both ways.
pub enum WriteHalf<'a> {
    Tcp(tcp::WriteHalf<'a>),
}

impl Detached {
    /// Turns Nagle off for a new client connection: responses are written whole, so it would
    /// only delay their last segment.
    #[inline]
    pub fn set_nodelay(&self) {
        let _ = self.0.set_nodelay(true);
    }

    /// Reads what the client has already sent, without waiting and before the connection is
    /// registered anywhere (a speculative read, as HAProxy's): into `buffer`, holding at most
    /// `limit` unread bytes. 0 at the end of the stream; `WouldBlock` when nothing is here yet.
    /// A read before the registration leaves no stale readiness behind, which a read after it
    /// would (a keep-alive connection's next wait would start with a read that finds nothing).
    pub fn read_now(&self, buffer: &mut Buffer, limit: usize) -> io::Result<usize> {
        buffer.read_now(BUFFER_INITIAL, limit, |room| loop {
            match socket2::SockRef::from(&self.0).recv(room) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                read => return read,
            }
        })
    }

    /// Registers the connection with the current runtime.
    #[inline]
    pub fn attach(self) -> io::Result<Stream> {
        TcpStream::from_std(self.0).map(Stream::Tcp)
    }
}

impl FromRawFd for Detached {
    /// `fd` must be a connected TCP socket, non-blocking, owned by nobody else (one `accept`
    /// returned).
    unsafe fn from_raw_fd(fd: RawFd) -> Detached {
        // SAFETY: the caller's promise, passed on.
        Detached(unsafe { std::net::TcpStream::from_raw_fd(fd) })
    }
}

impl AsRawFd for Detached {
    #[inline]
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl Stream {
    /// Connects to a server, Nagle off (requests are written whole).
    pub async fn connect(addr: SocketAddr) -> io::Result<Stream> {
        let stream = TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        Ok(Stream::Tcp(stream))
    }

    /// Takes the connection out of the runtime, e.g. to park it.
    #[inline]
    pub fn detach(self) -> io::Result<Detached> {
        match self {
            Stream::Tcp(stream) => stream.into_std().map(Detached),
        }
    }

    /// Ready when a read would find bytes, the end of the stream or an error. Unlike
    /// `readable().await`, queues no waiter on the registration (about 230 instructions a request
    /// cheaper, bench/results/optimisation.md).
    #[inline]
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(stream) => stream.poll_read_ready(cx),
        }
    }

    /// Whether the runtime already knows the stream readable (bytes, the end of the stream or an
    /// error came since it was last drained), with no system call: nginx's `read->ready`.
    #[inline]
    pub fn is_read_ready(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.poll_read_ready(&mut cx).is_ready()
    }

    /// Writes what the socket takes now, without waiting.
    #[inline]
    pub fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.try_write(bytes),
        }
    }

    /// The two halves, to read and write at once within one task.
    #[inline]
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        match self {
            Stream::Tcp(stream) => {
                let (read, write) = stream.split();
                (ReadHalf::Tcp(read), WriteHalf::Tcp(write))
            }
        }
    }

    /// Whether an idle connection is still usable: reading would block (no end of stream, no
    /// error, no bytes sent outside a response). Without `ask_kernel` the runtime answers from
    /// its cached readiness, with no syscall when the socket has not become readable since it
    /// was last drained; with it, the socket itself is peeked at, whatever the runtime last saw
    /// (a close it has not yet polled for).
    #[inline]
    pub fn still_open(&self, ask_kernel: bool) -> bool {
        let would_block = |result: io::Result<usize>| matches!(result, Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        let Stream::Tcp(stream) = self;
        if ask_kernel {
            // Non-blocking (tokio set O_NONBLOCK), and a peek leaves any byte where it was.
            let mut probe = [std::mem::MaybeUninit::new(0u8); 1];
            return would_block(socket2::SockRef::from(stream).peek(&mut probe));
        }
        let mut probe = [0u8; 1];
        would_block(stream.try_read(&mut probe))
    }

    /// Makes the close that dropping the stream brings a reset (SO_LINGER 0) rather than a FIN.
    /// Best effort: should the option not take, the close is an ordinary one.
    #[inline]
    pub fn reset_on_close(&self) {
        let Stream::Tcp(stream) = self;
        let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
    }

    /// Bytes sent once (retransmissions aside) and bytes the peer acknowledged, from TCP_INFO
    /// (Linux 4.19 and later; `None` elsewhere).
    #[inline]
    pub fn tcp_bytes(&self) -> Option<(u64, u64)> {
        let Stream::Tcp(stream) = self;
        super::sys::tcp_bytes(stream.as_raw_fd())
    }
}

read_by_variant!(Stream);

write_by_variant!(Stream);

impl ReadHalf<'_> {
    /// As [`Stream::poll_read_ready`].
    #[inline]
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ReadHalf::Tcp(read) => read.as_ref().poll_read_ready(cx),
        }
    }

    /// Completes when the peer closed or reset the connection. Bytes it sends meanwhile are left
    /// for later, and then it is not watched any longer (the future never completes).
    #[inline]
    pub async fn closed(&mut self) {
        let mut probe = [0u8; 1];
        let ReadHalf::Tcp(read) = self;
        match read.peek(&mut probe).await {
            Ok(0) | Err(_) => {}
            Ok(_) => std::future::pending().await,
        }
    }
}

read_by_variant!(ReadHalf<'_>);

write_by_variant!(WriteHalf<'_>);
