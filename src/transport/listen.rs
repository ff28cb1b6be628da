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

impl ListenSocket {
    /// Binds and listens on `addr` with `backlog`; with `reuse_port`, beside other sockets on
    /// the same address (SO_REUSEPORT: the kernel spreads connections over them).
    pub fn bind(addr: SocketAddr, backlog: u32, reuse_port: bool) -> io::Result<ListenSocket> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        if reuse_port {
            sys::set_reuse_port(&socket)?;
        }
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.bind(&addr.into())?;
        socket.listen(backlog.min(i32::MAX as u32) as i32)?;
        socket.set_nonblocking(true)?;
        Ok(ListenSocket(socket))
    }

    /// A listening socket handed down by the process this one replaces.
    pub fn adopt(descriptor: impl Into<OwnedFd>) -> io::Result<ListenSocket> {
        let socket = Socket::from(descriptor.into());
        socket.set_nonblocking(true)?;
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
