//! The cap on client connections the descriptor budget sets (`config::descriptors`), shared by
//! every worker: whether the process is at it, the accept loops' wait for room, and the request
//! that workers close quiet keep-alive connections to make some. The count itself is the
//! workers' own (`WorkerLoad::active`, summed when asked, at accepts only): no shared write per
//! connection.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use tokio::sync::Notify;

/// The cap and its waits.
#[derive(Debug, Default)]
pub struct ClientCap {
    /// Client connections allowed at once; 0: no cap.
    cap: AtomicU32,
    /// An accept loop waits for room: closes must say when they make some.
    waiting: AtomicBool,
    room: Notify,
    /// Asks every worker to close quiet connections, oldest first, until below the cap.
    shed: Notify,
}

impl ClientCap {
    /// Sets the cap (0: none); wakes loops waiting should it have grown.
    pub fn set(&self, cap: u32) {
        self.cap.store(cap, Ordering::Relaxed);
        self.room.notify_waiters();
    }

    pub fn cap(&self) -> u32 {
        self.cap.load(Ordering::Relaxed)
    }

    /// Whether `open` client connections are at the cap.
    pub fn is_full(&self, open: u64) -> bool {
        let cap = self.cap();
        cap > 0 && open >= u64::from(cap)
    }

    /// A client connection closed: wakes an accept loop waiting for room (one relaxed load of
    /// a rarely written flag otherwise).
    pub fn closed(&self) {
        if self.waiting.load(Ordering::Relaxed) {
            self.room.notify_waiters();
        }
    }

    /// Returns once `open()` is below the cap, asking every worker to close quiet connections
    /// first.
    pub async fn room(&self, open: impl Fn() -> u64) {
        loop {
            let freed = self.room.notified();
            tokio::pin!(freed);
            // Registered before looking, so that a close in between is not missed.
            freed.as_mut().enable();
            if !self.is_full(open()) {
                return;
            }
            self.waiting.store(true, Ordering::Relaxed);
            self.shed.notify_waiters();
            freed.await;
            self.waiting.store(false, Ordering::Relaxed);
        }
    }

    /// Completes when an accept loop at the cap asks for quiet connections to be closed.
    pub async fn shed_asked(&self) {
        self.shed.notified().await;
    }
}
