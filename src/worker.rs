//! A worker: one OS thread running a current-thread tokio runtime, owning every connection it
//! accepts from accept to close.
//!
//! Everything a worker touches per request is its own (`WorkerContext`, reached through an `Rc`)
//! or an immutable snapshot; tasks never move between workers, so nothing here needs a lock.
//! A panic inside a connection task is caught by the runtime and closes that connection only.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use std::sync::atomic::Ordering;

use socket2::Socket;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::LocalSet;

use crate::access_log::{Entry, LogSink, WorkerAccessLog, FLUSH_AFTER};
use crate::config::IntakeMode;
use crate::intake::{HandoffBoard, HandoffInbox, ListenerChange, ListenerLoad};
use crate::proxy::parking::{Parked, ParkingLot};
use crate::proxy::{Client, Outcome};
use crate::stats::traffic::Ending;
use crate::stats::{procfs, Stats, WorkerCounters};
use crate::upstream::health::ServerReport;
use crate::upstream::idle::IdleConnections;
use crate::upstream::{Snapshot, SnapshotHandle};

/// What a worker is given when it starts.
pub struct WorkerSetup {
    pub index: usize,
    /// (listener slot, this worker's descriptor for its socket, its shared load)
    pub listeners: Vec<(usize, Socket, Arc<ListenerLoad>)>,
    /// Listeners opened and closed later, by reloads.
    pub listener_changes: mpsc::UnboundedReceiver<ListenerChange>,
    pub intake: IntakeMode,
    /// For `balanced`: every worker's queue, and this worker's own.
    pub handoff: Option<(Arc<HandoffBoard>, HandoffInbox)>,
    pub stats: Arc<Stats>,
    pub snapshot: SnapshotHandle,
    /// The generation of each snapshot published, to close idle connections to servers that
    /// left without waiting for a request.
    pub published: watch::Receiver<u64>,
    /// Where passive checks report a server whose failures in a row reached its pool's limit,
    /// or that refused a connection.
    pub failing: mpsc::UnboundedSender<ServerReport>,
    /// Becomes `Some` when the proxy is to stop: the worker stops accepting and lets its
    /// connections finish until the deadline it names, which a later stop may bring forward.
    pub stop: watch::Receiver<Option<Stopping>>,
    /// Where the worker's access log lines go (`None`: they are dropped).
    pub access_log: Option<LogSink>,
}

/// A stop under way: until when a worker's open connections may go on, and which setting said
/// so (named in the log when connections are closed at the deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopping {
    /// `None`: connections run to their end, however long that takes.
    pub deadline: Option<std::time::Instant>,
    /// The config key the deadline comes from: `shutdown_grace`, `hard_stop_after`.
    pub set_by: &'static str,
}

impl Stopping {
    /// A stop whose connections may go on for `limit` from now (`None`: without a limit).
    pub fn within(limit: Option<Duration>, set_by: &'static str) -> Stopping {
        Stopping {
            deadline: limit.map(|limit| std::time::Instant::now() + limit),
            set_by,
        }
    }

    /// Whether this stop ends no later than `other` would: a stop under way is only ever
    /// brought forward (a SIGTERM during an upgrade's drain), never put off.
    pub fn ends_no_later_than(&self, other: &Stopping) -> bool {
        match (self.deadline, other.deadline) {
            (Some(mine), Some(theirs)) => mine <= theirs,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => true,
        }
    }
}

/// Starts a worker thread. Should the worker's own event loop panic (outside any task, which
/// the runtime would contain), the thread counts it, says so, and runs the worker again on the
/// same listeners, queues and counters: its connections of the moment are lost, its listeners
/// are not.
pub fn spawn(setup: WorkerSetup) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("herdsman-w{}", setup.index))
        .spawn(move || {
            let lasting = Lasting::from(setup);
            loop {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        tracing::error!(worker = lasting.index, %error, "cannot start the worker's runtime");
                        return;
                    }
                };
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    LocalSet::new().block_on(&runtime, run(&lasting));
                }));
                drop(runtime);
                if ran.is_ok() || lasting.stop.borrow().is_some() {
                    return;
                }
                WorkerCounters::bump(&lasting.stats.counters[lasting.index].restarts);
                tracing::error!(worker = lasting.index, "the worker's event loop panicked; starting it again");
            }
        })
}

/// A worker's descriptor of each open listener, and its load, by slot.
type KeptListeners = Rc<RefCell<HashMap<usize, (Socket, Arc<ListenerLoad>)>>>;

/// What a worker keeps across a restart of its event loop: its listening sockets (one spare
/// descriptor each, the loops getting duplicates), the queues it is told things on, and what it
/// shares with the rest of the process.
struct Lasting {
    index: usize,
    intake: IntakeMode,
    listeners: KeptListeners,
    listener_changes: Rc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ListenerChange>>>,
    board: Option<Arc<HandoffBoard>>,
    inbox: Option<Rc<tokio::sync::Mutex<HandoffInbox>>>,
    stats: Arc<Stats>,
    snapshot: SnapshotHandle,
    published: watch::Receiver<u64>,
    failing: mpsc::UnboundedSender<ServerReport>,
    stop: watch::Receiver<Option<Stopping>>,
    access_log: Option<LogSink>,
}

impl From<WorkerSetup> for Lasting {
    fn from(setup: WorkerSetup) -> Lasting {
        let (board, inbox) = match setup.handoff {
            Some((board, inbox)) => (Some(board), Some(Rc::new(tokio::sync::Mutex::new(inbox)))),
            None => (None, None),
        };
        let listeners = setup
            .listeners
            .into_iter()
            .map(|(slot, socket, load)| (slot, (socket, load)))
            .collect();
        Lasting {
            index: setup.index,
            intake: setup.intake,
            listeners: Rc::new(RefCell::new(listeners)),
            listener_changes: Rc::new(tokio::sync::Mutex::new(setup.listener_changes)),
            board,
            inbox,
            stats: setup.stats,
            snapshot: setup.snapshot,
            published: setup.published,
            failing: setup.failing,
            stop: setup.stop,
            access_log: setup.access_log,
        }
    }
}

/// The worker's state, shared by its tasks through an `Rc`.
pub struct WorkerContext {
    pub index: usize,
    stats: Arc<Stats>,
    handoff: Option<Arc<HandoffBoard>>,
    snapshot_cache: RefCell<arc_swap::Cache<SnapshotHandle, Arc<Snapshot>>>,
    /// The current snapshot wrapped in an `Rc`, so that tasks clone a thread-local count rather
    /// than the `Arc`'s shared one on every request (that count's cache line would otherwise
    /// bounce between cores once per request per worker).
    #[allow(clippy::redundant_allocation)]
    snapshot_local: RefCell<Rc<Arc<Snapshot>>>,
    idle: RefCell<IdleConnections>,
    idle_added: Notify,
    /// Quiet client connections, out of their tasks (`None` if the lot could not be created).
    pub parking: Option<ParkingLot>,
    pub rng: RefCell<fastrand::Rng>,
    /// This worker's descriptor of each open listener, and its shared load, by slot (kept by
    /// the thread across restarts of the event loop).
    listeners: KeptListeners,
    /// Fault injection: the next accept on this worker panics (see `/__herdsman/panic-accept`).
    #[cfg(feature = "fault-injection")]
    pub panic_next_accept: Cell<bool>,
    /// Fault injection: the worker's event loop panics (see `/__herdsman/panic-worker`).
    #[cfg(feature = "fault-injection")]
    pub panic_loop: Notify,
    failing: mpsc::UnboundedSender<ServerReport>,
    stopping: Cell<bool>,
    stop_notify: Notify,
    connections: Cell<usize>,
    connections_done: Notify,
    /// This worker's access log lines, waiting for the writer.
    access_log: WorkerAccessLog,
}

impl WorkerContext {
    fn new(
        index: usize,
        snapshot: SnapshotHandle,
        stats: Arc<Stats>,
        handoff: Option<Arc<HandoffBoard>>,
        failing: mpsc::UnboundedSender<ServerReport>,
        listeners: KeptListeners,
        access_log: Option<LogSink>,
    ) -> WorkerContext {
        let current = snapshot.load_full();
        let parking = ParkingLot::new(Arc::clone(&stats), index)
            .inspect_err(|error| {
                tracing::warn!(worker = index, %error, "no parking lot: idle connections keep their tasks");
            })
            .ok();
        WorkerContext {
            index,
            stats,
            handoff,
            snapshot_cache: RefCell::new(arc_swap::Cache::new(snapshot)),
            snapshot_local: RefCell::new(Rc::new(current)),
            idle: RefCell::new(IdleConnections::new()),
            idle_added: Notify::new(),
            parking,
            rng: RefCell::new(fastrand::Rng::new()),
            listeners,
            #[cfg(feature = "fault-injection")]
            panic_next_accept: Cell::new(false),
            #[cfg(feature = "fault-injection")]
            panic_loop: Notify::new(),
            failing,
            stopping: Cell::new(false),
            stop_notify: Notify::new(),
            connections: Cell::new(0),
            connections_done: Notify::new(),
            access_log: WorkerAccessLog::new(access_log),
        }
    }

    /// The snapshot to use for the next request.
    #[allow(clippy::redundant_allocation)]
    pub fn snapshot(&self) -> Rc<Arc<Snapshot>> {
        let mut cache = self.snapshot_cache.borrow_mut();
        let current = cache.load();
        let mut local = self.snapshot_local.borrow_mut();
        if !Arc::ptr_eq(&local, current) {
            *local = Rc::new(Arc::clone(current));
            // Connections to servers removed or re-addressed must not carry another request.
            let mut idle = self.idle.borrow_mut();
            idle.retain_servers(|server| current.has_server(server));
            self.publish_idle_count(&idle);
        }
        Rc::clone(&local)
    }

    /// Counts a failure a request met on `server`; the worker whose count reaches the pool's
    /// limit (or another multiple of it, should the server fail on after an ejection) tells the
    /// health checker, which decides on ejection.
    pub fn server_failed(
        &self,
        server: &crate::upstream::Server,
        passive: &crate::config::Passive,
    ) {
        let in_a_row = server.counters.failed();
        let limit = passive.consecutive_failures;
        if limit > 0 && in_a_row.is_multiple_of(limit) {
            let _ = self.failing.send(ServerReport::Failing(server.id));
        }
    }

    /// `server` refused a connection: the health checker takes it out of rotation until it
    /// listens again. Every refusal is told (the checker ignores those of a server it already
    /// took out), so none is lost between a snapshot and the next.
    pub fn server_refused(&self, server: &crate::upstream::Server) {
        let _ = self.failing.send(ServerReport::Refused(server.id));
    }

    /// True once a graceful stop has begun: finish what is in flight, start nothing new.
    pub fn is_stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Completes when a graceful stop begins.
    pub async fn stopped(&self) {
        // Single-threaded: the flag cannot be set between this check and the registration of
        // the `notified()` future, which happens in the same poll.
        if self.stopping.get() {
            return;
        }
        self.stop_notify.notified().await;
    }

    /// Keeps a server connection, idle `since` then, for reuse by this worker's later requests;
    /// for no longer than `limit` when its server said how long it keeps idle connections.
    pub fn keep_idle(
        &self,
        server: u64,
        stream: TcpStream,
        max_per_server: usize,
        since: tokio::time::Instant,
        limit: Option<Duration>,
    ) {
        if self.stopping.get() {
            return;
        }
        let mut idle = self.idle.borrow_mut();
        let was_empty = idle.is_empty();
        idle.put(server, stream, max_per_server, since.into_std(), limit);
        self.publish_idle_count(&idle);
        if was_empty {
            self.idle_added.notify_one();
        }
    }

    /// An idle connection to `server` kept by this worker, if one is fresher than `max_idle` at
    /// `now` (the caller's clock reading, which it uses for more than this).
    pub fn take_idle(
        &self,
        server: u64,
        max_idle: Duration,
        now: tokio::time::Instant,
    ) -> Option<TcpStream> {
        let mut idle = self.idle.borrow_mut();
        let taken = idle.take(server, max_idle, now.into_std());
        self.publish_idle_count(&idle);
        taken
    }

    /// Counts a finished exchange that `took` so long: in the worker's requests, and in its
    /// pool's and server's traffic when it was routed.
    pub fn record(&self, snapshot: &Snapshot, outcome: &Outcome, took: Duration) {
        let counters = self.counters();
        WorkerCounters::bump(&counters.requests);
        let (Some(pool), server) = outcome.routed(snapshot) else {
            WorkerCounters::bump(&counters.rejected);
            return;
        };
        pool.traffic.record(self.index, outcome.ending, took);
        if let Some(server) = server {
            server.traffic.record(self.index, outcome.ending, took);
        }
    }

    /// Writes a finished exchange's line, when its listener keeps an access log (what the line
    /// needs of the request head was captured while it was read, for such listeners only).
    pub fn log_access(
        &self,
        snapshot: &Snapshot,
        listener: usize,
        client: &Client,
        outcome: &Outcome,
        took: Duration,
    ) {
        let Some(log) = snapshot.access_log(listener) else {
            return;
        };
        let (pool, server) = outcome.routed(snapshot);
        let entry = Entry {
            client: client.forwarded_for.as_bytes(),
            request: &client.request_log,
            status: match outcome.ending {
                Ending::Status(status) => Some(status),
                Ending::Unanswered => None,
            },
            body_bytes: outcome.body_bytes,
            pool: pool.map(|pool| pool.name.as_str()),
            server: server.map(|server| server.name.as_str()),
            upstream: outcome.upstream,
            total: took,
            sticky: outcome.sticky,
        };
        self.access_log.write(log, &entry);
    }

    /// Publishes how many idle server connections this worker keeps, for the metrics.
    fn publish_idle_count(&self, idle: &IdleConnections) {
        let count = u32::try_from(idle.len()).unwrap_or(u32::MAX);
        self.counters().idle_backend.store(count, Ordering::Relaxed);
    }

    /// This worker's own counters.
    pub fn counters(&self) -> &WorkerCounters {
        &self.stats.counters[self.index]
    }

    /// Serves a connection this worker accepted, here or — in `balanced` intake — on the worker
    /// the hand-off chooses.
    pub fn dispatch(
        self: &Rc<Self>,
        stream: std::net::TcpStream,
        peer: SocketAddr,
        listener: usize,
        rotation: &Cell<usize>,
    ) {
        let here = match &self.handoff {
            Some(board) => {
                let mut rng = self.rng.borrow_mut();
                board.dispatch(self.index, rotation, &mut rng, stream, peer, listener)
            }
            None => Some((stream, peer)),
        };
        if let Some((stream, peer)) = here {
            self.serve(stream, peer, listener);
        }
    }

    /// The shared load of the listener in `slot`.
    pub fn listener_load(&self, slot: usize) -> Option<Arc<ListenerLoad>> {
        let listeners = self.listeners.borrow();
        listeners.get(&slot).map(|(_, load)| Arc::clone(load))
    }

    /// Starts serving a connection on this worker.
    pub fn serve(self: &Rc<Self>, stream: std::net::TcpStream, peer: SocketAddr, listener: usize) {
        // Responses are written whole; Nagle would only delay the last segment.
        let _ = stream.set_nodelay(true);
        let guard = self.connection_guard(listener);
        self.spawn_connection_task(stream, peer, listener, guard);
    }

    /// Serves a parked connection that woke up, in a new task.
    fn resume(self: &Rc<Self>, parked: Parked) {
        self.spawn_connection_task(parked.stream, parked.peer, parked.listener, parked.guard);
    }

    fn spawn_connection_task(
        self: &Rc<Self>,
        stream: std::net::TcpStream,
        peer: SocketAddr,
        listener: usize,
        guard: ConnectionGuard,
    ) {
        let stream = match TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(worker = self.index, %error, "cannot register a connection");
                return;
            }
        };
        let context = Rc::clone(self);
        tokio::task::spawn_local(async move {
            crate::proxy::serve_client(&context, stream, peer, listener, guard).await;
        });
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
        }
    }

    fn begin_stop(self: &Rc<Self>) {
        self.stopping.set(true);
        self.stop_notify.notify_waiters();
        let mut idle = self.idle.borrow_mut();
        idle.clear();
        self.publish_idle_count(&idle);
        if let Some(lot) = &self.parking {
            lot.take_all(|parked| self.resume(parked));
        }
    }

    async fn all_connections_closed(&self) {
        while self.connections.get() > 0 {
            self.connections_done.notified().await;
        }
    }
}

pub struct ConnectionGuard {
    worker: Rc<WorkerContext>,
    listener: Option<Arc<ListenerLoad>>,
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
        if left == 0 {
            worker.connections_done.notify_waiters();
        }
    }
}

async fn run(lasting: &Lasting) {
    let index = lasting.index;
    lasting.stats.counters[index]
        .tid
        .store(procfs::current_thread_id(), Ordering::Relaxed);
    let context = Rc::new(WorkerContext::new(
        index,
        Arc::clone(&lasting.snapshot),
        Arc::clone(&lasting.stats),
        lasting.board.clone(),
        lasting.failing.clone(),
        Rc::clone(&lasting.listeners),
        lasting.access_log.clone(),
    ));
    tokio::task::spawn_local(accept_on_listeners(
        Rc::clone(&context),
        Rc::clone(&lasting.listener_changes),
        lasting.intake,
    ));
    if let Some(inbox) = &lasting.inbox {
        tokio::task::spawn_local(take_handoffs(Rc::clone(&context), Rc::clone(inbox)));
    }
    tokio::task::spawn_local(close_expired_idle(Rc::clone(&context)));
    tokio::task::spawn_local(resume_parked(Rc::clone(&context)));
    tokio::task::spawn_local(flush_access_log(Rc::clone(&context)));
    tokio::task::spawn_local(follow_snapshots(
        Rc::clone(&context),
        lasting.published.clone(),
    ));

    // A dropped sender means the server handle is gone: stop as well (`Server`'s drop sends a
    // stop first, so a deadline is there to read).
    let mut stop = lasting.stop.clone();
    #[cfg(feature = "fault-injection")]
    tokio::select! {
        _ = stop.wait_for(Option::is_some) => {}
        () = context.panic_loop.notified() => panic!("fault injection: a panic in a worker's event loop"),
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = stop.wait_for(Option::is_some).await;
    // Let go of the listening sockets, so that (with the other workers' gone) they close and
    // new connections are refused rather than queued for nobody.
    lasting.listeners.borrow_mut().clear();
    context.begin_stop();
    finish_connections(&context, &mut stop).await;
    // Every line of the requests served, before the writer is told the workers are gone.
    context.access_log.flush_waiting();
}

/// Waits for the worker's connections to close by themselves — keep-alive ones after their
/// response, the others (downloads, streams, tunnels) at their end — until the stop's deadline,
/// following it as a later stop brings it forward. Those still open then are closed when the
/// worker's runtime is dropped.
async fn finish_connections(context: &WorkerContext, stop: &mut watch::Receiver<Option<Stopping>>) {
    let mut sender_gone = false;
    loop {
        let stopping = (*stop.borrow_and_update()).unwrap_or(Stopping {
            deadline: Some(std::time::Instant::now()),
            set_by: "the proxy's handle was dropped",
        });
        let deadline = async {
            match stopping.deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let changed = async {
            if sender_gone || stop.changed().await.is_err() {
                sender_gone = true;
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = context.all_connections_closed() => return,
            () = deadline => {
                tracing::warn!(
                    worker = context.index,
                    open = context.connections.get(),
                    "{} ended; closing connections still open",
                    stopping.set_by
                );
                return;
            }
            () = changed => {}
        }
    }
}

/// Runs an accept loop per listener — those open now, then those reloads open — and ends the
/// loops of listeners reloads close. The context's `listeners` keep a descriptor of each open
/// one, from which the loops get duplicates, so that a restart of the worker finds them all.
async fn accept_on_listeners(
    context: Rc<WorkerContext>,
    changes: Rc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ListenerChange>>>,
    intake: IntakeMode,
) {
    let mut accepting = HashMap::new();
    let listeners = &context.listeners;
    let open = |slot: usize, socket: &Socket| {
        let socket = match socket.try_clone() {
            Ok(socket) => socket,
            Err(error) => {
                tracing::error!(worker = context.index, listener = slot, %error, "cannot accept on this listener");
                return None;
            }
        };
        let accept = supervise_accept(Rc::clone(&context), slot, socket, intake);
        Some(AbortOnDrop(tokio::task::spawn_local(accept).abort_handle()))
    };
    for (slot, (socket, _)) in listeners.borrow().iter() {
        if let Some(accept) = open(*slot, socket) {
            accepting.insert(*slot, accept);
        }
    }
    let mut changes = changes.lock().await;
    loop {
        let change = tokio::select! {
            change = changes.recv() => change,
            () = context.stopped() => return,
        };
        match change {
            Some(ListenerChange::Open { slot, socket, load }) => {
                if let Some(accept) = open(slot, &socket) {
                    accepting.insert(slot, accept);
                }
                listeners.borrow_mut().insert(slot, (socket, load));
            }
            Some(ListenerChange::Close { slot }) => {
                // Dropping the loop aborts it, and with the kept descriptor gone too, the socket
                // closes (once the other workers let go of theirs).
                accepting.remove(&slot);
                listeners.borrow_mut().remove(&slot);
            }
            None => return,
        }
    }
}

/// Runs the accept loop of listener `slot` and, should it panic, counts that, says so and starts
/// it again on a duplicate of the socket kept for that: a bug there must not leave the worker
/// deaf to a listener while its connections go on.
async fn supervise_accept(
    context: Rc<WorkerContext>,
    slot: usize,
    mut socket: Socket,
    intake: IntakeMode,
) {
    loop {
        let spare = socket.try_clone();
        let accept = crate::intake::accept_loop(Rc::clone(&context), slot, socket, intake);
        let running = tokio::task::spawn_local(accept);
        // Ending this task (a reload closed the listener) ends the loop with it.
        let _stop_with_me = AbortOnDrop(running.abort_handle());
        match running.await {
            Err(error) if error.is_panic() => {
                WorkerCounters::bump(&context.counters().restarts);
                tracing::error!(
                    worker = context.index,
                    listener = slot,
                    "accept loop panicked; starting it again"
                );
            }
            _ => return,
        }
        socket = match spare {
            Ok(spare) => spare,
            Err(error) => {
                tracing::error!(worker = context.index, listener = slot, %error, "cannot restart the accept loop");
                return;
            }
        };
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves the connections other workers hand to this one. At a stop the inbox closes — an
/// acceptor still finishing then serves what it accepted itself — and the connections already
/// queued are served like every open connection at a stop (a request on its way is answered,
/// with `Connection: close`). Left in the queue, they were closed unanswered when the process
/// exited: their clients had connected before the stop and sent a request at once (the soak's
/// binary upgrades under load lost a few requests so, one run in eight).
async fn take_handoffs(context: Rc<WorkerContext>, inbox: Rc<tokio::sync::Mutex<HandoffInbox>>) {
    let mut inbox = inbox.lock().await;
    loop {
        let handed = tokio::select! {
            handed = inbox.take() => handed,
            () = context.stopped() => break,
        };
        let Some(handed) = handed else {
            return;
        };
        context.serve(handed.stream, handed.peer, handed.listener);
    }
    inbox.close();
    while let Some(handed) = inbox.take().await {
        context.serve(handed.stream, handed.peer, handed.listener);
    }
}

/// Takes up each snapshot as it is published, so that idle connections to servers that left are
/// closed at once rather than at this worker's next request.
async fn follow_snapshots(context: Rc<WorkerContext>, mut published: watch::Receiver<u64>) {
    loop {
        tokio::select! {
            changed = published.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = context.stopped() => return,
        }
        let _ = context.snapshot();
    }
}

/// Serves parked connections as they wake, until a graceful stop (which closes them).
async fn resume_parked(context: Rc<WorkerContext>) {
    let Some(lot) = &context.parking else {
        return;
    };
    loop {
        tokio::select! {
            () = lot.resume_woken(|parked| context.resume(parked)) => {}
            () = context.stopped() => return,
        }
    }
}

/// Hands this worker's access log lines to the writer `FLUSH_AFTER` after a line goes into an
/// empty buffer (full buffers go at once, from the request that filled them). Sleeps without a
/// timer while there are none, so an idle proxy does not wake up; runs on through a graceful
/// stop, so the lines of requests finishing then are not held back.
async fn flush_access_log(context: Rc<WorkerContext>) {
    loop {
        context.access_log.lines_waiting().await;
        tokio::time::sleep(FLUSH_AFTER).await;
        context.access_log.flush();
    }
}

/// Closes idle server connections that outlived `backend_idle`. Sleeps without a timer while
/// there are none, so an idle proxy does not wake up.
async fn close_expired_idle(context: Rc<WorkerContext>) {
    loop {
        if context.idle.borrow().is_empty() {
            tokio::select! {
                () = context.idle_added.notified() => {}
                () = context.stopped() => return,
            }
        }
        let max_idle = context.snapshot().timeouts.backend_idle;
        tokio::select! {
            () = tokio::time::sleep(max_idle / 2) => {}
            () = context.stopped() => return,
        }
        let mut idle = context.idle.borrow_mut();
        idle.close_expired(max_idle);
        context.publish_idle_count(&idle);
    }
}

/// The address a client connected from, for X-Forwarded-For.
pub fn client_ip(peer: SocketAddr) -> std::net::IpAddr {
    match peer.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(std::net::IpAddr::V4)
            .unwrap_or(std::net::IpAddr::V6(v6)),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_under_way_is_only_ever_brought_forward() {
        let unbounded = Stopping::within(None, "hard_stop_after");
        let soon = Stopping::within(Some(Duration::from_secs(1)), "shutdown_grace");
        let later = Stopping {
            deadline: soon.deadline.map(|at| at + Duration::from_secs(60)),
            set_by: "hard_stop_after",
        };
        assert!(soon.ends_no_later_than(&later));
        assert!(!later.ends_no_later_than(&soon));
        assert!(soon.ends_no_later_than(&unbounded));
        assert!(!unbounded.ends_no_later_than(&soon));
        assert!(unbounded.ends_no_later_than(&unbounded));
    }
}
