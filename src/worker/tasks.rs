//! A worker's background tasks: its accept loops (restarted should one panic, following the
//! listeners reloads open and close), the connections other workers hand it, the parked ones that
//! wake, and the housekeeping of the request path (snapshots taken up as published, idle server
//! connections expired, access log lines flushed).

use std::collections::HashMap;
use std::rc::Rc;

use tokio::sync::{mpsc, watch};

use super::context::WorkerContext;
use crate::access_log::FLUSH_AFTER;
use crate::config::IntakeMode;
use crate::intake::{HandoffInbox, ListenerChange};
use crate::stats::WorkerCounters;
use crate::transport::ListenSocket;
use crate::upstream::idle::PURGE_INTERVAL;

/// Runs an accept loop per listener — those open now, then those reloads open — and ends the
/// loops of listeners reloads close. The context's `listeners` keep a descriptor of each open
/// one, from which the loops get duplicates, so that a restart of the worker finds them all.
pub(super) async fn accept_on_listeners(
    context: Rc<WorkerContext>,
    changes: Rc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ListenerChange>>>,
    intake: IntakeMode,
) {
    let mut accepting = HashMap::new();
    let listeners = &context.listeners;
    let open = |slot: usize, socket: &ListenSocket| {
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
pub(super) async fn supervise_accept(
    context: Rc<WorkerContext>,
    slot: usize,
    mut socket: ListenSocket,
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
pub(super) async fn take_handoffs(
    context: Rc<WorkerContext>,
    inbox: Rc<tokio::sync::Mutex<HandoffInbox>>,
) {
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
pub(super) async fn follow_snapshots(
    context: Rc<WorkerContext>,
    mut published: watch::Receiver<u64>,
) {
    loop {
        tokio::select! {
            changed = published.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = context.stopped() => return,
        }
        let snapshot = context.proxy.snapshot();
        // Every worker sets the same figure: a reload's cap applies at once.
        context.stats.client_cap.set(snapshot.client_cap);
    }
}

/// Serves parked connections as they wake, until a graceful stop (which closes them).
pub(super) async fn resume_parked(context: Rc<WorkerContext>) {
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
pub(super) async fn flush_access_log(context: Rc<WorkerContext>) {
    loop {
        context.proxy.access_log().lines_waiting().await;
        tokio::time::sleep(FLUSH_AFTER).await;
        context.proxy.access_log().flush();
    }
}

/// Closes idle server connections that outlived `backend_idle`, and every `PURGE_INTERVAL` those
/// beyond what recent use calls for (`upstream::idle`). Sleeps without a timer while there are
/// none, so an idle proxy does not wake up.
pub(super) async fn close_expired_idle(context: Rc<WorkerContext>) {
    let mut next_purge = tokio::time::Instant::now() + PURGE_INTERVAL;
    loop {
        tokio::select! {
            () = context.proxy.idle_kept() => {}
            () = context.stopped() => return,
        }
        let max_idle = context.proxy.snapshot().timeouts.backend_idle;
        tokio::select! {
            () = tokio::time::sleep((max_idle / 2).min(PURGE_INTERVAL)) => {}
            () = context.stopped() => return,
        }
        let now = tokio::time::Instant::now();
        let purge = now >= next_purge;
        if purge {
            next_purge = now + PURGE_INTERVAL;
        }
        context.proxy.close_expired_idle(max_idle, purge);
    }
}
