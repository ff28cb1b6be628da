//! The byte stream a connection runs on, to a client or to a server: an enum of the transports
//! herdsman speaks (plain TCP, TLS over it: `tls.rs`, and a UNIX socket to a server on the same
//! machine). An enum rather than a boxed trait object, so that the fast paths the request path
//! relies on (`poll_read_ready` before a buffer is taken, `try_write` before a timer is armed)
//! stay direct calls that the compiler sees through: a registered connection's code is what it
//! was with a bare `TcpStream`.
//!
//! A client connection is registered with the runtime (epoll) only when it first has to wait:
//! until a read or a write would block it is read and written directly (`ClientTcp`), and once
//! registered it is a plain `Tcp` stream. A request that is already here when the connection is
//! accepted and whose response fits the socket's buffer never waits, and so costs no
//! `epoll_ctl` to add it and none to remove it (2.4–3.1 µs a connection,
//! bench/results/epoll-del.md). Nagle's algorithm is turned off before the second write, or when
//! the connection registers, rather than at accept: it can only hold back a write that follows
//! another, so a connection that writes once and never waits costs no `setsockopt` either.

use std::cell::{Cell, OnceCell};
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf, Ready};
use tokio::net::{tcp, unix, TcpStream, UnixStream};

use super::buffer::{Buffer, BUFFER_INITIAL};
use super::client_tcp::{ClientTcp, Nagle};
use super::multiplexed::Multiplexed;
use super::sys;
use super::tls::{self, HandshakeFailure, TlsFacts, TlsStream};
use crate::config::server_tls::ServerTls;
use crate::config::ServerAddr;

/// A connection: to a server, registered with the worker's runtime from its connect; or from a
/// client, registered when it first has to wait.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Client(ClientTcp),
    /// To a server on a UNIX socket; boxed, so that the enum stays the size of a `TcpStream`
    /// (a second variant of its 40 bytes takes a tag: 48), the box made once a connection.
    Unix(Box<UnixStream>),
    /// TLS, on a registered socket; boxed, as its state is large and a handshake's cost dwarfs
    /// the allocation.
    Tls(Box<TlsStream>),
    /// One of many streams over a shared connection (HTTP/2 to a server): never idle, never
    /// parked, no socket of its own.
    Multiplexed(Box<dyn Multiplexed>),
}

/// A connection outside any runtime: accepted and not yet served, handed between workers, or
/// waiting in a worker's parking lot. `Send`, unlike a [`Stream`].
#[derive(Debug)]
pub struct Detached {
    socket: std::net::TcpStream,
    /// Nagle's algorithm is off already (a connection that wrote more than once, then parked).
    nagle_off: bool,
    /// The TLS state of a TLS connection that parked; `None` for cleartext and for a
    /// connection whose handshake has not begun.
    tls: Option<Box<super::tls_state::TlsState>>,
}

/// The reading half of a [`Stream`] split for a relay both ways.
pub enum ReadHalf<'a> {
    Tcp(tcp::ReadHalf<'a>),
    Unix(unix::ReadHalf<'a>),
    /// Of a client connection that was not yet registered when it was split.
    Client(&'a ClientTcp),
    Tls(&'a TlsStream),
    Multiplexed(&'a dyn Multiplexed),
}

/// The writing half of a [`Stream`] split for a relay both ways.
pub enum WriteHalf<'a> {
    Tcp(tcp::WriteHalf<'a>),
    Unix(unix::WriteHalf<'a>),
    /// Of a client connection that was not yet registered when it was split.
    Client(&'a ClientTcp),
    Tls(&'a TlsStream),
    Multiplexed(&'a dyn Multiplexed),
}

impl Detached {
    /// Reads what the client has already sent, without waiting and before the connection is
    /// registered anywhere (a speculative read, as HAProxy's): into `buffer`, holding at most
    /// `limit` unread bytes. 0 at the end of the stream; `WouldBlock` when nothing is here yet.
    /// A read before the registration leaves no stale readiness behind, which a read after it
    /// would (a keep-alive connection's next wait would start with a read that finds nothing).
    /// A parked TLS connection's records are read and opened the same way.
    pub fn read_now(&mut self, buffer: &mut Buffer, limit: usize) -> io::Result<usize> {
        if let Some(tls) = &mut self.tls {
            let socket = &self.socket;
            return buffer.read_now(BUFFER_INITIAL, limit, |room| {
                tls::read_now(socket, tls, room)
            });
        }
        buffer.read_now(BUFFER_INITIAL, limit, |room| loop {
            match socket2::SockRef::from(&self.socket).recv(room) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                read => return read,
            }
        })
    }

    /// The connection as a client stream of the current worker: a cleartext one is registered
    /// with its runtime when it first has to wait; a TLS one (woken from the parking lot) at
    /// once, which is what fails if anything does.
    #[inline]
    pub fn into_stream(self) -> io::Result<Stream> {
        if let Some(tls) = self.tls {
            return Ok(Stream::Tls(Box::new(TlsStream::resume(self.socket, tls)?)));
        }
        let nagle = match self.nagle_off {
            true => Nagle::Off,
            false => Nagle::Unwritten,
        };
        Ok(Stream::Client(ClientTcp {
            socket: Cell::new(Some(self.socket)),
            registered: OnceCell::new(),
            nagle: Cell::new(nagle),
        }))
    }

    /// Whether the connection is a TLS one already (it parked after its handshake).
    #[inline]
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The server side of a TLS handshake on this new connection, with `config`: the stream
    /// once it is done. The caller bounds its time (`[timeouts] tls_handshake`).
    pub async fn accept_tls(
        self,
        config: &std::sync::Arc<rustls::ServerConfig>,
    ) -> Result<Stream, HandshakeFailure> {
        let stream = tls::accept(self.socket, config).await?;
        Ok(Stream::Tls(Box::new(stream)))
    }

    /// A cleartext connection over `socket` (one a TLS handshake handed back).
    pub(super) fn plain(socket: std::net::TcpStream) -> Detached {
        Detached {
            socket,
            nagle_off: true,
            tls: None,
        }
    }
}

impl FromRawFd for Detached {
    /// `fd` must be a connected TCP socket, non-blocking, owned by nobody else (one `accept`
    /// returned).
    unsafe fn from_raw_fd(fd: RawFd) -> Detached {
        Detached {
            // SAFETY: the caller's promise, passed on.
            socket: unsafe { std::net::TcpStream::from_raw_fd(fd) },
            nagle_off: false,
            tls: None,
        }
    }
}

impl AsRawFd for Detached {
    #[inline]
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

/// A socket registered with the worker's runtime, TCP or UNIX: both are read and written by the
/// same calls below, monomorphised (a TCP stream's code is what it was before UNIX ones came).
pub(super) trait Registered: AsFd {
    fn try_io<R>(&self, interest: Interest, io: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>>;
}

macro_rules! registered {
    ($socket:ty) => {
        impl Registered for $socket {
            #[inline]
            fn try_io<R>(
                &self,
                interest: Interest,
                io: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                <$socket>::try_io(self, interest, io)
            }

            #[inline]
            fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$socket>::poll_read_ready(self, cx)
            }

            #[inline]
            fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$socket>::poll_write_ready(self, cx)
            }

            #[inline]
            fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>> {
                <$socket>::ready(self, interest)
            }
        }
    };
}

registered!(TcpStream);
registered!(UnixStream);

/// Reads into `buf`'s unfilled part with one `recv`, without initialising it first.
#[inline]
pub(super) fn recv_into(socket: BorrowedFd<'_>, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
    // SAFETY: recv only writes the bytes it reports; those are then marked initialised.
    let n = sys::recv(socket, unsafe { buf.unfilled_mut() })?;
    // SAFETY: recv wrote these `n` bytes.
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Ok(n)
}

/// A registered socket's read, as tokio's own `poll_read` (after a short read the readiness is
/// cleared, so that the next wait goes to the kernel rather than to a read that would only say
/// EAGAIN), with `recv` made as a plain system call (`sys::recv`), and tried before the
/// readiness is polled: every read on the request path follows a wait for readiness already (for
/// the next request, for a response), which a second poll would only repeat (about 60
/// instructions a read, callgrind). A loop of reads that are all ready still yields to the
/// worker's other tasks: the writes beside them poll their readiness, which spends tokio's
/// per-task budget.
#[inline]
pub(super) fn poll_recv(
    stream: &impl Registered,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    loop {
        let room = buf.remaining();
        let mut short = false;
        let read = stream.try_io(Interest::READABLE, || {
            let n = recv_into(stream.as_fd(), buf)?;
            if n > 0 && n < room {
                // WouldBlock makes try_io clear the readiness; the bytes are kept.
                short = true;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match read {
            _ if short => return Poll::Ready(Ok(())),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::task::ready!(stream.poll_read_ready(cx))?;
            }
            read => return Poll::Ready(read.map(|_| ())),
        }
    }
}

/// A registered socket's write that does not wait (as tokio's `try_write`, with `sys::send`).
#[inline]
pub(super) fn try_send(stream: &impl Registered, bytes: &[u8]) -> io::Result<usize> {
    stream.try_io(Interest::WRITABLE, || sys::send(stream.as_fd(), bytes))
}

/// A registered socket's write of `first` and then `second` in one system call, that does not
/// wait.
#[inline]
fn try_send_two(stream: &impl Registered, first: &[u8], second: &[u8]) -> io::Result<usize> {
    stream.try_io(Interest::WRITABLE, || {
        sys::send_two(stream.as_fd(), first, second)
    })
}

/// A registered socket's write, as tokio's own `poll_write` (with `sys::send`).
#[inline]
pub(super) fn poll_send(
    stream: &impl Registered,
    cx: &mut Context<'_>,
    bytes: &[u8],
) -> Poll<io::Result<usize>> {
    loop {
        std::task::ready!(stream.poll_write_ready(cx))?;
        match try_send(stream, bytes) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            written => return Poll::Ready(written),
        }
    }
}

/// tokio's own halves of a registered stream.
#[inline]
fn tcp_halves(stream: &mut TcpStream) -> (ReadHalf<'_>, WriteHalf<'_>) {
    let (read, write) = stream.split();
    (ReadHalf::Tcp(read), WriteHalf::Tcp(write))
}

/// Completes when the peer of a registered socket closed or reset it. Bytes it sends meanwhile
/// are left for later, and then it is not watched any longer (the future never completes).
async fn peer_closed(socket: &impl Registered) {
    let peek = poll_fn(|cx| loop {
        std::task::ready!(socket.poll_read_ready(cx))?;
        let mut probe = [std::mem::MaybeUninit::new(0u8); 1];
        let peeked = socket.try_io(Interest::READABLE, || {
            socket2::SockRef::from(&socket.as_fd()).peek(&mut probe)
        });
        match peeked {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            peeked => return Poll::Ready(peeked),
        }
    });
    match peek.await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

/// Sends FIN after what was written (`shutdown(SHUT_WR)`).
pub(super) fn shutdown_write(socket: BorrowedFd<'_>) -> io::Result<()> {
    socket2::SockRef::from(&socket).shutdown(std::net::Shutdown::Write)
}

impl Stream {
    /// Connects to a server: over TCP with Nagle off (requests are written whole), or to its
    /// UNIX socket. The caller bounds the time it takes.
    pub async fn connect(addr: &ServerAddr) -> io::Result<Stream> {
        match addr {
            ServerAddr::Tcp(addr) => {
                let stream = TcpStream::connect(*addr).await?;
                let _ = stream.set_nodelay(true);
                Ok(Stream::Tcp(stream))
            }
            ServerAddr::Unix(path) => Ok(Stream::Unix(Box::new(connect_unix(path).await?))),
        }
    }

    /// A server connection just made (`connect`), over TLS from here: the handshake with the
    /// server, as `tls` says (see `tls::connect`).
    pub async fn start_tls(self, tls: &ServerTls) -> Result<Stream, HandshakeFailure> {
        let socket = match self {
            Stream::Tcp(socket) => socket,
            _ => {
                let error = io::Error::other("TLS starts only on a connection to a server");
                return Err(HandshakeFailure::Io(error));
            }
        };
        Ok(Stream::Tls(Box::new(tls::connect(socket, tls).await?)))
    }

    /// Takes the connection out of the runtime, e.g. to park it.
    #[inline]
    pub fn detach(self) -> io::Result<Detached> {
        let (socket, nagle_off, tls) = match self {
            Stream::Tcp(stream) => (stream.into_std()?, true, None),
            Stream::Client(client) => {
                let nagle_off = client.nagle.get() == Nagle::Off;
                (client.into_std()?, nagle_off, None)
            }
            Stream::Tls(stream) => {
                let (socket, tls) = stream.detach()?;
                (socket, true, Some(tls))
            }
            Stream::Multiplexed(_) => return Err(no_socket()),
            Stream::Unix(_) => {
                let error = "a connection to a server's UNIX socket is never parked";
                return Err(io::Error::new(io::ErrorKind::Unsupported, error));
            }
        };
        Ok(Detached {
            socket,
            nagle_off,
            tls,
        })
    }

    /// Whether it is one of many streams over a shared connection.
    #[inline]
    pub fn is_multiplexed(&self) -> bool {
        matches!(self, Stream::Multiplexed(_))
    }

    /// What a TLS connection's handshake agreed; `None` for cleartext.
    pub fn tls_facts(&self) -> Option<TlsFacts> {
        match self {
            Stream::Tls(stream) => stream.facts(),
            _ => None,
        }
    }

    /// Whether a TLS connection's handshake agreed on the ALPN protocol `protocol`; false for
    /// cleartext.
    pub fn agreed_alpn(&self, protocol: &[u8]) -> bool {
        match self {
            Stream::Tls(stream) => stream.agreed_alpn(protocol),
            _ => false,
        }
    }

    /// Before a close that does not wait: a TLS connection says close_notify if the socket
    /// takes it now. Nothing for cleartext.
    pub fn close_notify_now(&self) {
        if let Stream::Tls(stream) = self {
            stream.close_notify_now();
        }
    }

    /// The registered stream: a client connection is registered now if it is not yet, and
    /// from then on is a plain registered stream, which runs on tokio's own calls (a client
    /// stream that stayed behind its cell cost about 300 instructions a keep-alive request,
    /// callgrind). Its Nagle is turned off here if it is not already: a connection that waits
    /// is one that may write more than once.
    #[inline]
    fn registered(&mut self) -> io::Result<&mut TcpStream> {
        if let Stream::Client(_) = self {
            self.register_client()?;
        }
        match self {
            Stream::Tcp(stream) => Ok(stream),
            _ => unreachable!("registered just above, and only a client's TCP stream is called"),
        }
    }

    /// A client connection's read: at once while it is not registered, else registered and
    /// then as any. Out of line, so that a registered stream's read is tokio's alone.
    #[inline(never)]
    fn poll_read_client(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Stream::Client(client) = self {
            if let Some(read) = client.read_unregistered(buf) {
                return Poll::Ready(read.map(|_| ()));
            }
        }
        Pin::new(self.registered()?).poll_read(cx, buf)
    }

    /// As [`Stream::poll_read_client`], for a write.
    #[inline(never)]
    fn poll_write_client(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        if let Stream::Client(client) = self {
            if let Some(written) = client.write_unregistered(bytes) {
                return Poll::Ready(written);
            }
        }
        Pin::new(self.registered()?).poll_write(cx, bytes)
    }

    /// Out of line: a connection takes this path once, the requests after never.
    #[cold]
    #[inline(never)]
    fn register_client(&mut self) -> io::Result<()> {
        let Stream::Client(client) = self else {
            return Ok(());
        };
        let nagle_off = client.nagle.get() == Nagle::Off;
        // The client moves out; a placeholder holds its place until the `Tcp` stream does.
        let placeholder = ClientTcp {
            socket: Cell::new(None),
            registered: OnceCell::new(),
            nagle: Cell::new(Nagle::Off),
        };
        let stream = std::mem::replace(client, placeholder).into_registered()?;
        if !nagle_off {
            let _ = stream.set_nodelay(true);
        }
        *self = Stream::Tcp(stream);
        Ok(())
    }

    /// Ready when a read would find bytes, the end of the stream or an error. Unlike
    /// `readable().await`, queues no waiter on the registration (about 230 instructions a request
    /// cheaper, bench/results/optimisation.md). A client connection not yet registered is then.
    #[inline]
    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(stream) => stream.poll_read_ready(cx),
            Stream::Unix(stream) => stream.poll_read_ready(cx),
            Stream::Client(_) => self.registered()?.poll_read_ready(cx),
            Stream::Tls(stream) => stream.poll_read_ready(cx),
            Stream::Multiplexed(stream) => stream.poll_read_ready(cx),
        }
    }

    /// Whether the runtime already knows the stream readable (bytes, the end of the stream or an
    /// error came since it was last drained), with no system call: nginx's `read->ready`. A
    /// client connection that never waited is not known readable: nothing was seen after the
    /// read that found its request.
    #[inline]
    pub fn is_read_ready(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self {
            Stream::Tcp(stream) => stream.poll_read_ready(&mut cx).is_ready(),
            Stream::Unix(stream) => stream.poll_read_ready(&mut cx).is_ready(),
            Stream::Client(client) => match client.registered.get() {
                Some(stream) => stream.poll_read_ready(&mut cx).is_ready(),
                None => false,
            },
            Stream::Tls(stream) => stream.is_read_ready(),
            Stream::Multiplexed(stream) => stream.poll_read_ready(&mut cx).is_ready(),
        }
    }

    /// Writes what the socket takes now, without waiting.
    #[inline]
    pub fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => try_send(stream, bytes),
            Stream::Unix(stream) => try_send(&**stream, bytes),
            Stream::Client(client) => client.try_write(bytes),
            Stream::Tls(stream) => stream.try_write(bytes),
            Stream::Multiplexed(stream) => {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                match stream.poll_write(&mut cx, bytes) {
                    Poll::Ready(written) => written,
                    Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
                }
            }
        }
    }

    /// Writes what the socket takes now of `first` and then `second`, without waiting: over TCP
    /// both in one system call (a cached answer's head and its body); over TLS and HTTP/2 what
    /// one write takes of the first that is not empty, as `write_vectored` may.
    #[inline]
    pub fn try_write_two(&self, first: &[u8], second: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => try_send_two(stream, first, second),
            Stream::Unix(stream) => try_send_two(&**stream, first, second),
            Stream::Client(client) => client.try_write_two(first, second),
            _ if first.is_empty() => self.try_write(second),
            _ => self.try_write(first),
        }
    }

    /// The two halves, to read and write at once within one task.
    #[inline]
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        match self {
            Stream::Tcp(stream) => tcp_halves(stream),
            Stream::Unix(stream) => {
                let (read, write) = stream.split();
                (ReadHalf::Unix(read), WriteHalf::Unix(write))
            }
            Stream::Client(_) => self.split_client(),
            Stream::Tls(stream) => (ReadHalf::Tls(stream), WriteHalf::Tls(stream)),
            Stream::Multiplexed(stream) => (
                ReadHalf::Multiplexed(&**stream),
                WriteHalf::Multiplexed(&**stream),
            ),
        }
    }

    /// Out of line, as the connection's first exchange alone takes it. Registered by halves
    /// split earlier: a plain registered stream from now on. Not registered: it stays so, its
    /// halves registering it should they have to wait.
    #[cold]
    #[inline(never)]
    fn split_client(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        if let Stream::Client(client) = self {
            if client.registered_by_a_half() {
                let _ = self.register_client();
            }
        }
        match self {
            Stream::Tcp(stream) => tcp_halves(stream),
            Stream::Client(client) => {
                let client = &*client;
                (ReadHalf::Client(client), WriteHalf::Client(client))
            }
            Stream::Tls(stream) => (ReadHalf::Tls(stream), WriteHalf::Tls(stream)),
            Stream::Multiplexed(_) | Stream::Unix(_) => {
                unreachable!("the match above splits a server's stream")
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
        let peek = |socket: BorrowedFd<'_>| {
            // Non-blocking (tokio set O_NONBLOCK), and a peek leaves any byte where it was.
            let mut probe = [std::mem::MaybeUninit::new(0u8); 1];
            socket2::SockRef::from(&socket).peek(&mut probe)
        };
        match self {
            Stream::Tcp(stream) if !ask_kernel => {
                let mut probe = [0u8; 1];
                would_block(stream.try_read(&mut probe))
            }
            Stream::Tcp(stream) => would_block(peek(stream.as_fd())),
            Stream::Unix(stream) if !ask_kernel => {
                let mut probe = [0u8; 1];
                would_block(stream.try_read(&mut probe))
            }
            Stream::Unix(stream) => would_block(peek(stream.as_fd())),
            Stream::Client(client) => would_block(client.with_socket(peek)),
            Stream::Tls(stream) => stream.still_open(),
            // Never kept idle: its connection is, by the room that made it.
            Stream::Multiplexed(_) => false,
        }
    }

    /// Makes the close that dropping the stream brings a reset (SO_LINGER 0) rather than a FIN.
    /// Best effort: should the option not take, the close is an ordinary one.
    #[inline]
    pub fn reset_on_close(&self) {
        if let Stream::Multiplexed(stream) = self {
            stream.abandon();
            return;
        }
        let _ = self
            .with_socket(|socket| socket2::SockRef::from(&socket).set_linger(Some(Duration::ZERO)));
    }

    /// Bytes sent once (retransmissions aside) and bytes the peer acknowledged, from TCP_INFO
    /// (Linux 4.19 and later; `None` elsewhere).
    #[inline]
    pub fn tcp_bytes(&self) -> Option<(u64, u64)> {
        self.with_socket(|socket| Ok(super::sys::tcp_bytes(socket.as_raw_fd())))
            .ok()
            .flatten()
    }

    fn with_socket<R>(&self, f: impl FnOnce(BorrowedFd<'_>) -> io::Result<R>) -> io::Result<R> {
        match self {
            Stream::Tcp(stream) => f(stream.as_fd()),
            Stream::Unix(stream) => f(stream.as_fd()),
            Stream::Client(client) => client.with_socket(f),
            Stream::Tls(stream) => f(stream.socket()),
            Stream::Multiplexed(_) => Err(no_socket()),
        }
    }
}

/// What a call that needs a socket of the stream's own gets from a multiplexed one.
fn no_socket() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "a multiplexed stream has no socket of its own",
    )
}

/// Connects to the UNIX socket at `path`. A listener whose queue is full refuses at once
/// (`EAGAIN`), where a TCP one lets the connect wait: the connect is tried again, a little later
/// each time, until the caller's deadline, as a TCP connect would have waited (nginx fails the
/// request: "Resource temporarily unavailable" in front of a busy PHP-FPM). No socket at the
/// path is a refusal: nothing listens there (a server that restarts removes and remakes it).
async fn connect_unix(path: &std::path::Path) -> io::Result<UnixStream> {
    const FIRST_PAUSE: Duration = Duration::from_millis(1);
    const LONGEST_PAUSE: Duration = Duration::from_millis(32);
    let mut pause = FIRST_PAUSE;
    loop {
        match UnixStream::connect(path).await {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                let why = format!("no socket at {}: nothing listens there", path.display());
                return Err(io::Error::new(io::ErrorKind::ConnectionRefused, why));
            }
            connected => return connected,
        }
    }
}

impl AsyncRead for Stream {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this {
            Stream::Tcp(inner) => poll_recv(inner, cx, buf),
            Stream::Unix(inner) => poll_recv(&**inner, cx, buf),
            Stream::Client(_) => this.poll_read_client(cx, buf),
            Stream::Tls(stream) => stream.poll_read(cx, buf),
            Stream::Multiplexed(stream) => stream.poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this {
            Stream::Tcp(inner) => poll_send(inner, cx, bytes),
            Stream::Unix(inner) => poll_send(&**inner, cx, bytes),
            Stream::Client(_) => this.poll_write_client(cx, bytes),
            Stream::Tls(stream) => stream.poll_write(cx, bytes),
            Stream::Multiplexed(stream) => stream.poll_write(cx, bytes),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Writes go straight to the socket: nothing is held back to flush.
        Poll::Ready(Ok(()))
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &*self {
            Stream::Tls(stream) => return stream.poll_shutdown(cx),
            // Its request ends by its own framing.
            Stream::Multiplexed(_) => return Poll::Ready(Ok(())),
            _ => {}
        }
        // No registration needed: tokio's own shutdown is this same call.
        Poll::Ready(self.with_socket(shutdown_write))
    }
}

impl ReadHalf<'_> {
    /// As [`Stream::poll_read_ready`].
    #[inline]
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ReadHalf::Tcp(read) => read.as_ref().poll_read_ready(cx),
            ReadHalf::Unix(read) => read.as_ref().poll_read_ready(cx),
            ReadHalf::Client(client) => client.poll_read_ready(cx),
            ReadHalf::Tls(stream) => stream.poll_read_ready(cx),
            ReadHalf::Multiplexed(stream) => stream.poll_read_ready(cx),
        }
    }

    /// Completes when the peer closed or reset the connection. Bytes it sends meanwhile are left
    /// for later, and then it is not watched any longer (the future never completes).
    #[inline]
    pub async fn closed(&mut self) {
        match self {
            ReadHalf::Tcp(read) => peer_closed(read.as_ref()).await,
            ReadHalf::Unix(read) => peer_closed(read.as_ref()).await,
            ReadHalf::Client(client) => {
                let mut data_came = false;
                poll_fn(|cx| client.poll_closed(cx, &mut data_came)).await;
            }
            ReadHalf::Tls(stream) => {
                let mut data_came = false;
                poll_fn(|cx| stream.poll_closed(cx, &mut data_came)).await;
            }
            // A server's stream is not watched for a close: its response is read.
            ReadHalf::Multiplexed(_) => std::future::pending().await,
        }
    }
}

impl AsyncRead for ReadHalf<'_> {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(inner) => poll_recv(inner.as_ref(), cx, buf),
            ReadHalf::Unix(inner) => poll_recv(inner.as_ref(), cx, buf),
            ReadHalf::Client(client) => client.poll_read(cx, buf),
            ReadHalf::Tls(stream) => stream.poll_read(cx, buf),
            ReadHalf::Multiplexed(stream) => stream.poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf<'_> {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(inner) => poll_send(inner.as_ref(), cx, bytes),
            WriteHalf::Unix(inner) => poll_send(inner.as_ref(), cx, bytes),
            WriteHalf::Client(client) => client.poll_write(cx, bytes),
            WriteHalf::Tls(stream) => stream.poll_write(cx, bytes),
            WriteHalf::Multiplexed(stream) => stream.poll_write(cx, bytes),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(inner) => Pin::new(inner).poll_flush(cx),
            // Writes are write-through (see `tls.rs`); a multiplexed stream's too.
            WriteHalf::Unix(_)
            | WriteHalf::Client(_)
            | WriteHalf::Tls(_)
            | WriteHalf::Multiplexed(_) => Poll::Ready(Ok(())),
        }
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(inner) => Pin::new(inner).poll_shutdown(cx),
            WriteHalf::Unix(inner) => Pin::new(inner).poll_shutdown(cx),
            WriteHalf::Client(client) => Poll::Ready(client.shutdown_write()),
            WriteHalf::Tls(stream) => stream.poll_shutdown(cx),
            WriteHalf::Multiplexed(_) => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::IntoRawFd;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    impl Stream {
        fn is_registered(&self) -> bool {
            match self {
                Stream::Tcp(_) | Stream::Unix(_) | Stream::Tls(_) | Stream::Multiplexed(_) => true,
                Stream::Client(client) => client.registered_by_a_half(),
            }
        }

        fn nagle_is_off(&self) -> bool {
            self.with_socket(|socket| socket2::SockRef::from(&socket).nodelay())
                .unwrap()
        }
    }

    /// The client's end (blocking, std) and herdsman's, as an accept hands it over.
    fn accepted() -> (std::net::TcpStream, Stream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (ours, _) = listener.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        // SAFETY: a connected, non-blocking TCP socket that nothing else owns.
        let detached = unsafe { Detached::from_raw_fd(ours.into_raw_fd()) };
        (client, detached.into_stream().unwrap())
    }

    #[test]
    fn a_stream_is_no_larger_than_a_server_connection() {
        // Moved with every idle server connection: see `ClientTcp`.
        assert_eq!(
            std::mem::size_of::<Stream>(),
            std::mem::size_of::<TcpStream>()
        );
    }

    #[tokio::test]
    async fn a_request_already_here_is_read_and_answered_without_registering() {
        let (mut client, mut stream) = accepted();
        std::io::Write::write_all(&mut client, b"GET / HTTP/1.1\r\n\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut request = [0; 64];
        let n = stream.read(&mut request).await.unwrap();
        assert_eq!(&request[..n], b"GET / HTTP/1.1\r\n\r\n");
        stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        stream.shutdown().await.unwrap();
        assert!(!stream.is_registered());
        drop(stream);
        let mut response = String::new();
        client.read_to_string(&mut response).unwrap();
        assert_eq!(response, "HTTP/1.1 200 OK\r\n\r\n");
    }

    #[tokio::test]
    async fn a_read_that_has_to_wait_registers_and_gets_the_bytes_when_they_come() {
        let (mut client, mut stream) = accepted();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            std::io::Write::write_all(&mut client, b"late").unwrap();
            client
        });
        let mut got = [0; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut got))
            .await
            .expect("the read never woke")
            .unwrap();
        assert_eq!(&got[..n], b"late");
        assert!(stream.is_registered());
        drop(sender.join());
    }

    #[tokio::test]
    async fn the_halves_of_an_unregistered_connection_write_and_see_the_close() {
        let (mut client, mut stream) = accepted();
        let (mut read, mut write) = stream.split();
        assert!(matches!(read, ReadHalf::Client(_)));
        write.write_all(b"hello").await.unwrap();
        let mut got = [0; 5];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
        drop(client);
        tokio::time::timeout(Duration::from_secs(5), read.closed())
            .await
            .expect("the close was not seen");
        assert!(stream.is_registered());
    }

    #[tokio::test]
    async fn nagle_goes_off_before_the_second_write_and_stays_off_when_parked() {
        let (mut client, mut stream) = accepted();
        stream.write_all(b"one").await.unwrap();
        assert!(!stream.nagle_is_off(), "turned off before the first write");
        stream.write_all(b"two").await.unwrap();
        assert!(stream.nagle_is_off());
        let mut got = [0; 6];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"onetwo");
        let again = stream.detach().unwrap().into_stream().unwrap();
        let Stream::Client(client_tcp) = &again else {
            panic!("a client stream")
        };
        assert_eq!(client_tcp.nagle.get(), Nagle::Off);
    }
}
