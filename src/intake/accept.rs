//! A worker's accept loop for one listener: wait for readiness, accept what is there, count the
//! wake-ups that found nothing, and hand each connection to the worker's dispatch (which serves
//! it there or hands it to another worker).

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::ListenerLoad;
use crate::config::IntakeMode;
use crate::stats::WorkerCounters;
use crate::transport::{make_epoll_exclusive, Detached, ListenSocket};

/// What an accept loop needs of the worker it runs on.
pub trait Acceptor {
    /// The worker's index (for the log).
    fn worker(&self) -> usize;
    /// The worker's counters (accepted connections, spurious wake-ups).
    fn counters(&self) -> &WorkerCounters;
    /// Completes when a graceful stop begins.
    fn stopped(&self) -> impl Future<Output = ()>;
    /// The shared load of the listener in `slot`, which bounds its connections.
    fn listener_load(&self, slot: usize) -> Option<Arc<ListenerLoad>>;
    /// Serves a connection accepted on listener `slot`, here or on another worker; `rotation`
    /// is this loop's own state for spreading hand-offs.
    fn dispatch(
        self: &Rc<Self>,
        stream: Detached,
        peer: SocketAddr,
        slot: usize,
        rotation: &Cell<usize>,
    );
    /// At the descriptor budget's cap on client connections, with none of this worker's quiet
    /// ones to close for room: true when nothing more may be accepted now. A quiet one closed
    /// makes room (the oldest parked, as nginx reuses its idle keep-alive connections).
    fn at_client_cap(&self) -> bool;
    /// Returns once the process is below its client cap (other workers asked to close quiet
    /// connections meanwhile).
    fn client_room(&self) -> impl Future<Output = ()>;
    /// Fault injection: whether this accept is to panic (see `/__herdsman/panic-accept`).
    #[cfg(feature = "fault-injection")]
    fn panic_on_accept(&self) -> bool;
}

/// Connections accepted in one go before the loop lets the worker's connections run: enough to
/// take a burst in few wake-ups, few enough that accepting never starves serving.
const ACCEPT_BATCH: usize = 16;

/// Accepts connections on `socket` (this worker's descriptor for listener `listener`) until a
/// graceful stop begins.
pub async fn accept_loop<A: Acceptor>(
    context: Rc<A>,
    listener: usize,
    socket: ListenSocket,
    mode: IntakeMode,
) {
    // SAFETY: a ListenSocket owns its descriptor until it is dropped, and as_raw_fd always
    // returns that descriptor, which is what tokio requires of the registered object.
    let registered = unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE) };
    let socket = match registered.map_err(|e| e.into_parts().1) {
        Ok(socket) => socket,
        Err(error) => {
            tracing::error!(worker = context.worker(), %error, "cannot register a listening socket");
            return;
        }
    };
    if matches!(mode, IntakeMode::Exclusive | IntakeMode::Balanced) {
        if let Err(error) = make_epoll_exclusive(socket.as_raw_fd()) {
            // Still served, only with every idle worker woken per connection, as in `shared`.
            tracing::warn!(
                worker = context.worker(),
                %error,
                "cannot wait on the listening socket with EPOLLEXCLUSIVE; this worker is woken for every new connection"
            );
        }
    }
    let counters = context.counters();
    // Each acceptor starts its rotation at itself, so that acceptors do not move in step.
    let rotation = Cell::new(context.worker());
    let load = context.listener_load(listener);
    loop {
        // At its max_connections a listener accepts nothing: new connections wait in the
        // kernel's backlog until one closes.
        if let Some(load) = &load {
            tokio::select! {
                () = load.room() => {}
                () = context.stopped() => return,
            }
        }
        // Likewise at the process's cap on client connections, once no quiet connection is
        // left to close for room: the descriptors kept for servers and the operator stay kept.
        if context.at_client_cap() {
            tokio::select! {
                () = context.client_room() => {}
                () = context.stopped() => return,
            }
        }
        let mut ready = tokio::select! {
            ready = socket.readable() => match ready {
                Ok(ready) => ready,
                Err(error) => {
                    tracing::error!(worker = context.worker(), %error, "listening socket failed");
                    return;
                }
            },
            () = context.stopped() => return,
        };
        let mut accepted = 0;
        let mut failure = None;
        while accepted < ACCEPT_BATCH {
            // Checked before each accept: the limit may have been reached while this loop
            // waited for readiness. The readiness is kept for when there is room again.
            if load.as_ref().is_some_and(|load| load.is_full()) || context.at_client_cap() {
                break;
            }
            match ready.get_inner().accept() {
                Ok((stream, peer)) => {
                    #[cfg(feature = "fault-injection")]
                    if context.panic_on_accept() {
                        // The connection is dropped with the panic; its client sees a close.
                        panic!("fault injection: a panic in an accept loop");
                    }
                    accepted += 1;
                    WorkerCounters::bump(&counters.accepted);
                    context.dispatch(stream, peer, listener, &rotation);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if accepted == 0 {
                        // Woken for a connection another worker took (or none at all).
                        WorkerCounters::bump(&counters.spurious_wakeups);
                    }
                    ready.clear_ready();
                    break;
                }
                Err(error) if error.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        drop(ready);
        if let Some(error) = failure {
            // Out of descriptors or memory: say so and pause rather than spin on a queue that
            // cannot be served; connections keep waiting in the kernel's backlog meanwhile.
            tracing::warn!(worker = context.worker(), %error, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        } else if accepted == ACCEPT_BATCH {
            tokio::task::yield_now().await;
        }
    }
}
