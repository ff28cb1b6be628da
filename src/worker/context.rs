//! A worker's own state, shared by its tasks through an `Rc`: the request-path half
//! (`ProxyContext`), its listeners, its hand-off board, its parking lot, and the count of its open
//! connections. Also where a connection starts its task: accepted here, handed over by another
//! worker, or woken in the parking lot.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::Notify;

use super::parking::{Parked, ParkingLot};
use crate::intake::{Acceptor, HandoffBoard, ListenerLoad};
use crate::proxy::ProxyContext;
use crate::session;
use crate::stats::log_every::LogEvery;
use crate::stats::{Stats, WorkerCounters};
use crate::transport::{Detached, ListenSocket};

/// A worker's descriptor of each open listener, and its load, by slot. Looked up once per
/// connection (its listener's load): foldhash rather than SipHash, 12,100 -> 11,971 instructions
/// a new connection (callgrind, `herdsman-bench instructions`).
pub(super) type KeptListeners =
    Rc<RefCell<HashMap<usize, (ListenSocket, Arc<ListenerLoad>), foldhash::fast::RandomState>>>;

/// Near the client cap, a warning at most this often, process-wide.
const NEAR_CAP_WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);
static NEAR_CAP_WARNINGS: LogEvery = LogEvery::new();

/// The worker's state, shared by its tasks through an `Rc`.
pub struct WorkerContext {
    pub index: usize,
    /// What the exchanges on this worker use.
    pub proxy: Rc<ProxyContext>,
    pub(super) stats: Arc<Stats>,
    handoff: Option<Arc<HandoffBoard>>,
    /// Quiet client connections, out of their tasks (`None` if the lot could not be created).
    pub parking: Option<ParkingLot<ConnectionGuard>>,
    /// This worker's descriptor of each open listener, and its shared load, by slot (kept by
    /// the thread across restarts of the event loop).
    pub(super) listeners: KeptListeners,
    connections: Cell<usize>,
    connections_done: Notify,
}

impl WorkerContext {
    pub(super) fn new(
        proxy: Rc<ProxyContext>,
        stats: Arc<Stats>,
        handoff: Option<Arc<HandoffBoard>>,
        listeners: KeptListeners,
    ) -> WorkerContext {
        let index = proxy.index;
        let parking = ParkingLot::new(Arc::clone(&stats), index)
            .inspect_err(|error| {
                tracing::warn!(worker = index, %error, "no parking lot: idle connections keep their tasks");
            })
            .ok();
        WorkerContext {
            index,
            proxy,
            stats,
            handoff,
            parking,
            listeners,
            connections: Cell::new(0),
            connections_done: Notify::new(),
        }
    }

    /// This worker's own counters.
    pub fn counters(&self) -> &WorkerCounters {
        &self.stats.counters[self.index]
    }

    /// Completes when a graceful stop begins.
    pub async fn stopped(&self) {
        self.proxy.stopped().await
    }

    /// Open client connections on this worker, parked ones included.
    pub(super) fn open_connections(&self) -> usize {
        self.connections.get()
    }

    /// Serves a connection accepted on listener `listener` on this worker.
    pub fn serve(self: &Rc<Self>, stream: Detached, peer: SocketAddr, listener: usize) {
        // An address at its `max_connections_per_client` is closed at once, uncounted.
        let per_client = self.proxy.snapshot().limits.max_connections_per_client;
        let client = match per_client {
            0 => None,
            limit if self.stats.per_client.enter(peer.ip(), limit) => Some(peer.ip()),
            _ => return,
        };
        let mut guard = self.connection_guard(listener);
        guard.client = client;
        self.spawn_connection_task(stream, peer, listener, guard, None);
    }

    /// Serves a parked connection that woke up, in a new task.
    pub(super) fn resume(self: &Rc<Self>, parked: Parked<ConnectionGuard>) {
        let Parked {
            stream,
            peer,
            listener,
            guard,
            h2,
            ..
        } = parked;
        self.spawn_connection_task(stream, peer, listener, guard, h2.map(|h2| *h2));
    }

    fn spawn_connection_task(
        self: &Rc<Self>,
        stream: Detached,
        peer: SocketAddr,
        listener: usize,
        guard: ConnectionGuard,
        resumed_h2: Option<session::h2::Parked>,
    ) {
        let context = Rc::clone(self);
        let parks = self.parking.is_some();
        let quiet = move |stream, h2, deadline| {
            context.park(stream, peer, listener, guard, h2, deadline);
        };
        let session = session::serve(
            Rc::clone(&self.proxy),
            stream,
            peer,
            listener,
            parks,
            resumed_h2,
            quiet,
        );
        // Boxed first: the session's future is 1,152 bytes, and tokio's task moves its stage
        // whole about seven times between spawn and end (about 950 instructions of memcpy a
        // connection under callgrind); a box is one allocation and one copy
        // (bench/results/connection-setup.md).
        tokio::task::spawn_local(Box::pin(session));
    }

    /// Moves a quiet connection from its task into the worker's parking lot (closing it if that
    /// fails); the task then ends.
    fn park(
        &self,
        stream: Detached,
        peer: SocketAddr,
        listener: usize,
        guard: ConnectionGuard,
        h2: Option<session::h2::Parked>,
        deadline: tokio::time::Instant,
    ) {
        let Some(lot) = &self.parking else {
            return;
        };
        let parked = Parked {
            stream,
            peer,
            listener,
            guard,
            h2: h2.map(Box::new),
            deadline,
        };
        if lot.park(parked).is_err() {
            tracing::debug!(client = %peer, "could not park an idle connection; closed it");
        }
    }

    /// Counts a client connection of listener `slot` as open, on this worker and on its
    /// listener, until the guard drops (also when its task panics).
    fn connection_guard(self: &Rc<Self>, slot: usize) -> ConnectionGuard {
        self.connections.set(self.connections.get() + 1);
        self.stats.loads[self.index]
            .active
            .fetch_add(1, Ordering::Relaxed);
        let listener = self.listener_load(slot);
        if let Some(load) = &listener {
            load.opened();
        }
        ConnectionGuard {
            worker: Rc::clone(self),
            listener,
            client: None,
        }
    }

    /// Begins a graceful stop: exchanges finish what is in flight, parked connections are
    /// served their last call.
    pub(super) fn begin_stop(self: &Rc<Self>) {
        self.proxy.begin_stop();
        if let Some(lot) = &self.parking {
            lot.take_all(|parked| self.resume(parked));
        }
    }

    /// Closes this worker's quiet connections, oldest first, whenever an accept loop at the
    /// client cap asks, until the process is below it or none is left here.
    pub(super) async fn shed_when_asked(&self) {
        let cap = &self.stats.client_cap;
        loop {
            cap.shed_asked().await;
            let Some(lot) = &self.parking else {
                continue;
            };
            while cap.is_full(self.stats.client_connections()) && lot.close_oldest() {
                WorkerCounters::bump(&self.counters().shed_for_room);
            }
        }
    }

    pub(super) async fn all_connections_closed(&self) {
        while self.connections.get() > 0 {
            self.connections_done.notified().await;
        }
    }
}

impl Acceptor for WorkerContext {
    fn worker(&self) -> usize {
        self.index
    }

    fn counters(&self) -> &WorkerCounters {
        WorkerContext::counters(self)
    }

    async fn stopped(&self) {
        WorkerContext::stopped(self).await
    }

    /// The shared load of the listener in `slot`.
    fn listener_load(&self, slot: usize) -> Option<Arc<ListenerLoad>> {
        let listeners = self.listeners.borrow();
        listeners.get(&slot).map(|(_, load)| Arc::clone(load))
    }

    /// Serves a connection this worker accepted, here or — in `balanced` intake — on the worker
    /// the hand-off chooses.
    fn dispatch(
        self: &Rc<Self>,
        stream: Detached,
        peer: SocketAddr,
        listener: usize,
        rotation: &Cell<usize>,
    ) {
        let here = match &self.handoff {
            Some(board) => {
                let mut rng = self.proxy.rng.borrow_mut();
                board.dispatch(self.index, rotation, &mut rng, stream, peer, listener)
            }
            None => Some((stream, peer)),
        };
        if let Some((stream, peer)) = here {
            self.serve(stream, peer, listener);
        }
    }

    fn at_client_cap(&self) -> bool {
        let cap = &self.stats.client_cap;
        if cap.cap() == 0 {
            return false;
        }
        let open = self.stats.client_connections();
        if open * 10 >= u64::from(cap.cap()) * 9 {
            if let Some(more) = NEAR_CAP_WARNINGS.allow(NEAR_CAP_WARN_EVERY) {
                tracing::warn!(open, cap = cap.cap(), more_since_last = more, "client connections at 90% or more of the descriptor budget's cap; quiet ones are closed for new clients at the cap");
            }
        }
        // Below the cap (the usual case) nothing is closed.
        if !cap.is_full(open) {
            return false;
        }
        match self.parking.as_ref().is_some_and(|lot| lot.close_oldest()) {
            true => {
                WorkerCounters::bump(&self.counters().shed_for_room);
                false
            }
            false => true,
        }
    }

    async fn client_room(&self) {
        let cap = &self.stats.client_cap;
        WorkerCounters::bump(&self.counters().accept_paused);
        loop {
            // Room comes when a connection closes; a quiet one can be closed for it once it is
            // parked, which is at most PARK_AFTER from now: look again then.
            tokio::select! {
                () = cap.room(|| self.stats.client_connections()) => return,
                () = tokio::time::sleep(session::PARK_AFTER) => {}
            }
            if !self.at_client_cap() {
                return;
            }
        }
    }

    #[cfg(feature = "fault-injection")]
    fn panic_on_accept(&self) -> bool {
        self.proxy.panic_next_accept.replace(false)
    }
}

/// Counts a client connection as open, on its worker and its listener, while it lives.
pub struct ConnectionGuard {
    worker: Rc<WorkerContext>,
    listener: Option<Arc<ListenerLoad>>,
    /// The address counted against `max_connections_per_client`, when it is set.
    client: Option<std::net::IpAddr>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let worker = &self.worker;
        let left = worker.connections.get() - 1;
        worker.connections.set(left);
        worker.stats.loads[worker.index]
            .active
            .fetch_sub(1, Ordering::Relaxed);
        if let Some(load) = &self.listener {
            load.closed();
        }
        worker.stats.client_cap.closed();
        if let Some(client) = self.client {
            worker.stats.per_client.leave(client);
        }
        if left == 0 {
            worker.connections_done.notify_waiters();
        }
    }
}
