//! Listening sockets and how new connections reach workers (the config's `intake`).
//!
//! - `reuseport`: each worker has its own SO_REUSEPORT socket; the kernel spreads connections by
//!   a hash of the addresses, blind to load, and a stalled worker's share waits for it.
//! - `shared`: one socket in every worker's epoll, as plain edge-triggered interest: each new
//!   connection wakes every idle worker, and all but one find nothing. The thundering herd, kept
//!   as the baseline the others are measured against.
//! - `exclusive`: one socket, EPOLLEXCLUSIVE: the kernel wakes one idle worker (the first in
//!   its wait queue, so the same ones keep winning).
//! - `balanced` (the default): `exclusive`, then the accepting worker hands the connection to
//!   the lighter of two workers (see `handoff.rs`).

mod accept;
pub mod handoff;
pub mod limit;

use std::io;
use std::net::SocketAddr;

pub use accept::{accept_loop, Acceptor};
pub use handoff::{HandoffBoard, HandoffInbox};
pub use limit::ListenerLoad;

use crate::config::{IntakeMode, ListenerConfig};
use crate::transport::{epoll_exclusive_supported, ListenOptions, ListenSocket};

/// A listener opened or closed while herdsman runs (a reload), as one worker is told of it.
/// Listeners are known by slot: a number given when the listener is opened and never reused,
/// so that connections accepted on a closed listener still find its pool.
#[derive(Debug)]
pub enum ListenerChange {
    /// Start accepting on `socket`, this worker's descriptor for the listener in `slot`, whose
    /// open connections `load` counts.
    Open {
        slot: usize,
        socket: ListenSocket,
        load: std::sync::Arc<ListenerLoad>,
    },
    /// Stop accepting on the listener in `slot` and close this worker's descriptor for it.
    /// Connections already accepted carry on.
    Close { slot: usize },
}

/// Refuses a mode this platform cannot provide, saying why.
pub fn check_supported(mode: IntakeMode) -> Result<(), String> {
    check_supported_on(mode, epoll_exclusive_supported())
}

fn check_supported_on(mode: IntakeMode, epoll_exclusive: bool) -> Result<(), String> {
    match mode {
        IntakeMode::Exclusive | IntakeMode::Balanced if !epoll_exclusive => Err(format!(
            "intake = \"{}\" needs EPOLLEXCLUSIVE (Linux 4.5 or later), which this system lacks; use intake = \"reuseport\"",
            mode.name()
        )),
        _ => Ok(()),
    }
}

/// The socket options of `listener`: its backlog, and its `defer_accept` in whole seconds (a part
/// of a second counts as one).
pub fn listen_options(listener: &ListenerConfig) -> ListenOptions {
    let defer = listener.defer_accept;
    let seconds = defer.as_secs() + u64::from(defer.subsec_nanos() > 0);
    ListenOptions {
        backlog: listener.backlog,
        defer_accept: u32::try_from(seconds).unwrap_or(u32::MAX),
    }
}

/// Binds one listener's sockets: one per worker (index = worker). For `reuseport` these are
/// separate sockets on one address; for the other modes, descriptors of one shared socket.
pub fn bind_listener(
    mode: IntakeMode,
    addr: SocketAddr,
    options: ListenOptions,
    workers: usize,
) -> io::Result<Vec<ListenSocket>> {
    if mode == IntakeMode::ReusePort {
        let mut sockets = Vec::with_capacity(workers);
        let mut bound_addr = addr;
        for _ in 0..workers {
            let socket = ListenSocket::bind(bound_addr, options, true)?;
            bound_addr = socket.local_addr().unwrap_or(bound_addr);
            sockets.push(socket);
        }
        return Ok(sockets);
    }
    let shared = ListenSocket::bind(addr, options, false)?;
    let mut sockets = Vec::with_capacity(workers);
    for _ in 1..workers {
        sockets.push(shared.try_clone()?);
    }
    sockets.push(shared);
    Ok(sockets)
}

/// Like [`bind_listener`], starting from `socket`, a listening socket handed down by the process
/// this one replaces (see `process::upgrade`): the same socket for every worker, or for
/// `reuseport` the first worker's, the others binding beside it.
pub fn adopt_listener(
    mode: IntakeMode,
    socket: ListenSocket,
    options: ListenOptions,
    workers: usize,
) -> io::Result<Vec<ListenSocket>> {
    let addr = socket.local_addr()?;
    let mut sockets = Vec::with_capacity(workers);
    for _ in 1..workers {
        sockets.push(if mode == IntakeMode::ReusePort {
            ListenSocket::bind(addr, options, true)?
        } else {
            socket.try_clone()?
        });
    }
    sockets.insert(0, socket);
    Ok(sockets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_binds_one_address_for_all_workers() {
        for mode in [
            IntakeMode::ReusePort,
            IntakeMode::Shared,
            IntakeMode::Exclusive,
            IntakeMode::Balanced,
        ] {
            let options = ListenOptions {
                backlog: 16,
                defer_accept: 1,
            };
            let sockets = bind_listener(mode, "127.0.0.1:0".parse().unwrap(), options, 3).unwrap();
            assert_eq!(sockets.len(), 3);
            let addr = sockets[0].local_addr().unwrap();
            assert_ne!(addr.port(), 0);
            assert!(sockets.iter().all(|s| s.local_addr().unwrap() == addr));
        }
    }

    #[test]
    fn modes_the_kernel_lacks_are_refused_with_the_way_out() {
        let refused = check_supported_on(IntakeMode::Balanced, false).unwrap_err();
        assert!(
            refused.contains("EPOLLEXCLUSIVE") && refused.contains("reuseport"),
            "{refused}"
        );
        assert!(check_supported_on(IntakeMode::Exclusive, false).is_err());
        assert!(check_supported_on(IntakeMode::Shared, false).is_ok());
        assert!(check_supported_on(IntakeMode::ReusePort, false).is_ok());
        assert!(check_supported_on(IntakeMode::Balanced, true).is_ok());
    }
}
