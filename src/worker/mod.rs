//! A worker: one OS thread running a current-thread tokio runtime, owning every connection it
//! accepts from accept to close.
//!
//! Everything a worker touches per request is its own (`WorkerContext`, reached through an `Rc`)
//! or an immutable snapshot; tasks never move between workers, so nothing here needs a lock.
//! A panic inside a connection task is caught by the runtime and closes that connection only.

mod context;
mod parking;
mod tasks;

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::LocalSet;

use crate::access_log::LogSink;
use crate::config::IntakeMode;
use crate::intake::{HandoffBoard, HandoffInbox, ListenerChange, ListenerLoad};
use crate::proxy::ProxyContext;
use crate::stats::{procfs, Stats, WorkerCounters};
use crate::transport::ListenSocket;
use crate::upstream::health::ServerReport;
use crate::upstream::SnapshotHandle;
use context::{KeptListeners, WorkerContext};
use tasks::{
    accept_on_listeners, close_expired_idle, flush_access_log, follow_snapshots, resume_parked,
    take_handoffs,
};

/// What a worker is given when it starts.
pub struct WorkerSetup {
    pub index: usize,
    /// (listener slot, this worker's descriptor for its socket, its shared load)
    pub listeners: Vec<(usize, ListenSocket, Arc<ListenerLoad>)>,
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
    /// The process's cache store and rate limits, which every worker shares.
    pub shared: crate::proxy::ProcessShared,
}

/// The key that bounds the old process's drain after a binary upgrade.
pub const HARD_STOP_AFTER: &str = "hard_stop_after";

/// How long tunnels cut at a stop's deadline have to write their log lines and close.
const CUT_GRACE: Duration = Duration::from_millis(100);

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

    /// How a tunnel cut at this stop's deadline says it ended: `upgrade` when the deadline is
    /// the old process's after a binary upgrade handed over, `shutdown` otherwise.
    pub fn cut_word(&self) -> &'static str {
        match self.set_by {
            HARD_STOP_AFTER => "upgrade",
            _ => "shutdown",
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
    shared: crate::proxy::ProcessShared,
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
            shared: setup.shared,
        }
    }
}

async fn run(lasting: &Lasting) {
    let index = lasting.index;
    lasting.stats.counters[index]
        .tid
        .store(procfs::current_thread_id(), Ordering::Relaxed);
    let proxy = Rc::new_cyclic(|me| {
        ProxyContext::new(
            index,
            Arc::clone(&lasting.snapshot),
            Arc::clone(&lasting.stats),
            lasting.failing.clone(),
            lasting.access_log.clone(),
            lasting.shared.clone(),
            me.clone(),
        )
    });
    let context = Rc::new(WorkerContext::new(
        proxy,
        Arc::clone(&lasting.stats),
        lasting.board.clone(),
        Rc::clone(&lasting.listeners),
    ));
    // The deadlines of the request path's waits (`transport::deadline`).
    tokio::task::spawn_local(crate::transport::deadline::drive());
    tokio::task::spawn_local(accept_on_listeners(
        Rc::clone(&context),
        Rc::clone(&lasting.listener_changes),
        lasting.intake,
    ));
    if let Some(inbox) = &lasting.inbox {
        tokio::task::spawn_local(take_handoffs(Rc::clone(&context), Rc::clone(inbox)));
    }
    tokio::task::spawn_local(close_expired_idle(Rc::clone(&context)));
    {
        let context = Rc::clone(&context);
        tokio::task::spawn_local(async move { context.shed_when_asked().await });
    }
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
        () = context.proxy.panic_loop.notified() => panic!("fault injection: a panic in a worker's event loop"),
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = stop.wait_for(Option::is_some).await;
    // Let go of the listening sockets, so that (with the other workers' gone) they close and
    // new connections are refused rather than queued for nobody.
    lasting.listeners.borrow_mut().clear();
    context.begin_stop();
    finish_connections(&context, &mut stop).await;
    // Every line of the requests served, before the writer is told the workers are gone.
    context.proxy.access_log().flush_waiting();
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
                    open = context.open_connections(),
                    "{} ended; closing connections still open",
                    stopping.set_by
                );
                // Tunnels end by themselves, writing their log lines; the rest close with the
                // runtime.
                context.proxy.cut_tunnels(stopping.cut_word());
                let _ = tokio::time::timeout(CUT_GRACE, context.all_connections_closed()).await;
                return;
            }
            () = changed => {}
        }
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
