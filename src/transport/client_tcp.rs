//! A client's TCP connection before the runtime knows it: read and written with direct system
//! calls until a read or a write would block, then registered (by the stream, or by one of its
//! halves within one call), Nagle turned off before its second write. `stream.rs`'s `Stream::Client`.

use std::cell::{Cell, OnceCell};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::task::{ready, Context, Poll};

use tokio::io::{Interest, ReadBuf};
use tokio::net::TcpStream;

use super::stream::{poll_recv, recv_into, shutdown_write};
use super::sys;

/// A client's TCP connection, read and written directly until it has to wait, then registered
/// with the worker's runtime. The cells let the two halves of a split stream register it, each
/// only within one call (nothing is held across a wait); the stream stays within its task.
///
/// 16 bytes, so that the stream enum stays the size of a server's `TcpStream` (40): it is moved
/// with every idle server connection, and at 64 bytes it cost about 150 instructions a
/// keep-alive request (callgrind). Hence the socket in a `Cell` (taken out for each call and put
/// back) and the registration a half makes in a box: an allocation of 40 bytes, at most once in a
/// connection's life and only when a half waits before the stream itself did (a response body
/// relayed while the client is watched, say), never per request.
pub struct ClientTcp {
    /// The socket while it is not registered; `None` once registered (or lost).
    pub(super) socket: Cell<Option<std::net::TcpStream>>,
    /// The registration a half made, until the stream becomes a plain `Tcp` one.
    pub(super) registered: OnceCell<Box<TcpStream>>,
    pub(super) nagle: Cell<Nagle>,
}

impl std::fmt::Debug for ClientTcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTcp")
            .field("registered", &self.registered_by_a_half())
            .field("nagle", &self.nagle.get())
            .finish_non_exhaustive()
    }
}

/// Where a [`ClientTcp`]'s socket is, for one call.
enum Held<'a> {
    /// Not known to the runtime: every call is a system call that does not wait.
    Unregistered(&'a std::net::TcpStream),
    Registered(&'a TcpStream),
    /// The registration failed, and the socket was closed with it.
    Lost,
}

/// Where a client connection stands with Nagle's algorithm, which only holds back a small write
/// while an earlier one is unacknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Nagle {
    /// Nothing written yet: the first write goes out at once whatever the setting.
    Unwritten,
    /// Written to once; Nagle is turned off before the next write.
    WrittenOnce,
    Off,
}

/// Registers `socket` with the current runtime; a failure (which closes the socket) is logged.
#[cold]
fn register(socket: std::net::TcpStream) -> io::Result<TcpStream> {
    TcpStream::from_std(socket).inspect_err(|error| {
        tracing::warn!(%error, "cannot register a client connection");
    })
}

fn lost() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the connection could not be registered",
    )
}

impl ClientTcp {
    /// Calls `f` with the socket where it is held now. `f` must not register the connection
    /// (the socket is out of its cell meanwhile).
    #[inline]
    fn with_held<R>(&self, f: impl FnOnce(Held<'_>) -> R) -> R {
        if let Some(stream) = self.registered.get() {
            return f(Held::Registered(stream));
        }
        match self.socket.take() {
            Some(socket) => {
                let result = f(Held::Unregistered(&socket));
                self.socket.set(Some(socket));
                result
            }
            None => f(Held::Lost),
        }
    }

    /// The registered connection (for a half): registered with the current runtime now if it
    /// is not yet.
    #[inline]
    pub(super) fn registration(&self) -> io::Result<&TcpStream> {
        if let Some(stream) = self.registered.get() {
            return Ok(stream);
        }
        self.register()
    }

    #[cold]
    fn register(&self) -> io::Result<&TcpStream> {
        if let Some(socket) = self.socket.take() {
            let _ = self.registered.set(Box::new(register(socket)?));
        }
        self.registered
            .get()
            .map(|stream| &**stream)
            .ok_or_else(lost)
    }

    /// Turns Nagle off before a write that follows another (see the module's comment).
    #[inline]
    fn before_write(&self, socket: BorrowedFd<'_>) {
        if self.nagle.get() == Nagle::WrittenOnce {
            let _ = socket2::SockRef::from(&socket).set_nodelay(true);
            self.nagle.set(Nagle::Off);
        }
    }

    #[inline]
    fn after_write(&self, written: &io::Result<usize>) {
        if self.nagle.get() == Nagle::Unwritten && matches!(written, Ok(n) if *n > 0) {
            self.nagle.set(Nagle::WrittenOnce);
        }
    }

    /// One read while the connection is not registered: `None` when it has to wait (or is
    /// registered already), and so must be registered.
    #[inline]
    pub(super) fn read_unregistered(&self, buf: &mut ReadBuf<'_>) -> Option<io::Result<usize>> {
        self.with_held(|held| match held {
            Held::Unregistered(socket) => match recv_into(socket.as_fd(), buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => None,
                read => Some(read),
            },
            _ => None,
        })
    }

    /// As [`ClientTcp::read_unregistered`], for a write.
    #[inline]
    pub(super) fn write_unregistered(&self, bytes: &[u8]) -> Option<io::Result<usize>> {
        self.with_held(|held| match held {
            Held::Unregistered(_) => match self.write_now(&held, bytes) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => None,
                written => Some(written),
            },
            _ => None,
        })
    }

    /// A half's read: at once while the connection is not registered, else registered (in the
    /// cell) and then like tokio's own stream: after a short read the readiness is cleared, so
    /// that the next wait goes to the kernel rather than to a read that would only say EAGAIN.
    pub(super) fn poll_read(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(read) = self.read_unregistered(buf) {
            return Poll::Ready(read.map(|_| ()));
        }
        poll_recv(self.registration()?, cx, buf)
    }

    /// As [`ClientTcp::poll_read`], for a write.
    pub(super) fn poll_write(&self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(written) = self.write_unregistered(bytes) {
            return Poll::Ready(written);
        }
        let stream = self.registration()?;
        loop {
            ready!(stream.poll_write_ready(cx))?;
            match self.write_now(&Held::Registered(stream), bytes) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                written => return Poll::Ready(written),
            }
        }
    }

    /// One write that does not wait; `WouldBlock` when the socket takes nothing now.
    #[inline]
    fn write_now(&self, held: &Held<'_>, bytes: &[u8]) -> io::Result<usize> {
        self.send_now(held, |socket| sys::send(socket, bytes))
    }

    /// One `send` (a system call on the socket) that does not wait, Nagle turned off first
    /// where it must be; `WouldBlock` when the socket takes nothing now.
    #[inline]
    fn send_now(
        &self,
        held: &Held<'_>,
        send: impl Fn(BorrowedFd<'_>) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let written = match held {
            Held::Unregistered(socket) => {
                self.before_write(socket.as_fd());
                send(socket.as_fd())
            }
            Held::Registered(stream) => {
                self.before_write(stream.as_fd());
                stream.try_io(Interest::WRITABLE, || send(stream.as_fd()))
            }
            Held::Lost => Err(lost()),
        };
        self.after_write(&written);
        written
    }

    pub(super) fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        self.with_held(|held| self.write_now(&held, bytes))
    }

    /// `first` and then `second` in one write that does not wait (`sys::send_two`).
    pub(super) fn try_write_two(&self, first: &[u8], second: &[u8]) -> io::Result<usize> {
        self.with_held(|held| self.send_now(&held, |socket| sys::send_two(socket, first, second)))
    }

    pub(super) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Whether bytes are here is the kernel's to say, and a wait needs the registration.
        self.registration()?.poll_read_ready(cx)
    }

    /// Completes when the peer closed or reset the connection (see [`ReadHalf::closed`]).
    pub(super) fn poll_closed(&self, cx: &mut Context<'_>, data_came: &mut bool) -> Poll<()> {
        if *data_came {
            return Poll::Pending;
        }
        loop {
            if ready!(self.poll_read_ready(cx)).is_err() {
                return Poll::Ready(());
            }
            let peeked = self.registration().and_then(|stream| {
                let mut probe = [std::mem::MaybeUninit::new(0u8); 1];
                stream.try_io(Interest::READABLE, || {
                    socket2::SockRef::from(stream).peek(&mut probe)
                })
            });
            match peeked {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Ok(0) | Err(_) => return Poll::Ready(()),
                Ok(_) => {
                    *data_came = true;
                    return Poll::Pending;
                }
            }
        }
    }

    pub(super) fn shutdown_write(&self) -> io::Result<()> {
        self.with_socket(shutdown_write)
    }

    /// Calls `f` with the socket, wherever it is held.
    pub(super) fn with_socket<R>(
        &self,
        f: impl FnOnce(BorrowedFd<'_>) -> io::Result<R>,
    ) -> io::Result<R> {
        self.with_held(|held| match held {
            Held::Unregistered(socket) => f(socket.as_fd()),
            Held::Registered(stream) => f(stream.as_fd()),
            Held::Lost => Err(lost()),
        })
    }

    /// Whether a half registered the connection (the stream then becomes a plain `Tcp` one).
    #[inline]
    pub(super) fn registered_by_a_half(&self) -> bool {
        self.registered.get().is_some()
    }

    /// The connection, registered now if it is not yet (for the stream, which owns it).
    pub(super) fn into_registered(self) -> io::Result<TcpStream> {
        if let Some(stream) = self.registered.into_inner() {
            return Ok(*stream);
        }
        self.socket
            .into_inner()
            .map_or_else(|| Err(lost()), register)
    }

    /// The socket, out of the runtime.
    pub(super) fn into_std(self) -> io::Result<std::net::TcpStream> {
        if let Some(stream) = self.registered.into_inner() {
            return stream.into_std();
        }
        self.socket.into_inner().ok_or_else(lost)
    }
}
