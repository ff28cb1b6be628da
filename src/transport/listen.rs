//! Listening sockets: bound here, or adopted from a descriptor a previous process handed down,
//! and the accept that yields a connection outside any runtime ([`Detached`]).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};

use super::{sys, Detached};

/// A listening TCP socket (non-blocking), or one descriptor of it.
#[derive(Debug)]
pub struct ListenSocket(Socket);

/// How a listening socket is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenOptions {
    /// listen(2)'s backlog.
    pub backlog: u32,
    /// TCP_DEFER_ACCEPT in seconds: a connection is accepted once its first bytes are here; 0:
    /// at once.
    pub defer_accept: u32,
}

impl ListenSocket {
    /// Binds and listens on `addr` as `options` say; with `reuse_port`, beside other sockets on
    /// the same address (SO_REUSEPORT: the kernel spreads connections over them).
    pub fn bind(
        addr: SocketAddr,
        options: ListenOptions,
        reuse_port: bool,
    ) -> io::Result<ListenSocket> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        if reuse_port {
            sys::set_reuse_port(&socket)?;
        }
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.bind(&addr.into())?;
        socket.listen(options.backlog.min(i32::MAX as u32) as i32)?;
        socket.set_nonblocking(true)?;
        if options.defer_accept > 0 {
            sys::set_defer_accept(&socket, options.defer_accept)?;
        }
        Ok(ListenSocket(socket))
    }

    /// A listening socket handed down by the process this one replaces, set to defer its
    /// accepts as `defer_accept` says (0 included: the process before may have set another).
    pub fn adopt(descriptor: impl Into<OwnedFd>, defer_accept: u32) -> io::Result<ListenSocket> {
        let socket = Socket::from(descriptor.into());
        socket.set_nonblocking(true)?;
        sys::set_defer_accept(&socket, defer_accept)?;
        Ok(ListenSocket(socket))
    }

    /// Another descriptor of the same socket.
    pub fn try_clone(&self) -> io::Result<ListenSocket> {
        self.0.try_clone().map(ListenSocket)
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("the listening socket has no IP address"))
    }

    /// Accepts one connection, already non-blocking and close-on-exec (one syscall, not three).
    pub fn accept(&self) -> io::Result<(Detached, SocketAddr)> {
        sys::accept_nonblocking(&self.0)
    }
}

impl AsRawFd for ListenSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
