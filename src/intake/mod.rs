//! Listening sockets and how new connections reach workers.
//!
//! Today's mode is `reuseport`: every worker gets its own socket bound to the listener's address
//! with SO_REUSEPORT, and the kernel spreads new connections over them by hash. Each worker waits
//! only on its own sockets, so one connection wakes one worker.

mod sys;

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Binds `count` sockets to `addr`, one per worker, and returns them listening and non-blocking.
/// When `addr` has port 0 the first bind picks the port and the others join it.
pub fn bind_reuseport_group(
    addr: SocketAddr,
    backlog: u32,
    count: usize,
) -> io::Result<Vec<TcpListener>> {
    let mut listeners = Vec::with_capacity(count);
    let mut bound_addr = addr;
    for _ in 0..count {
        let listener = bind_one(bound_addr, backlog)?;
        bound_addr = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

fn bind_one(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    sys::set_reuse_port(&socket)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_shares_one_port() {
        let group = bind_reuseport_group("127.0.0.1:0".parse().unwrap(), 16, 3).unwrap();
        let port = group[0].local_addr().unwrap().port();
        assert_ne!(port, 0);
        assert!(group.iter().all(|l| l.local_addr().unwrap().port() == port));
    }
}
