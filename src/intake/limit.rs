//! A listener's `max_connections`: the connections it has open, over all workers, and the wait
//! of its accept loops while it is at the limit. At the limit herdsman stops accepting, so new
//! connections wait in the kernel's backlog rather than being accepted and closed.

use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::Notify;

/// One listener's open connections and its limit (0: none), shared by the workers.
#[derive(Debug, Default)]
pub struct ListenerLoad {
    open: AtomicU32,
    limit: AtomicU32,
    freed: Notify,
}

impl ListenerLoad {
    pub fn new(limit: u32) -> ListenerLoad {
        ListenerLoad {
            limit: AtomicU32::new(limit),
            ..ListenerLoad::default()
        }
    }

    /// A reload changed the limit.
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::Relaxed);
        self.freed.notify_waiters();
    }

    /// Connections open now.
    pub fn open(&self) -> u32 {
        self.open.load(Ordering::Relaxed)
    }

    pub fn opened(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    pub fn closed(&self) {
        let before = self.open.fetch_sub(1, Ordering::Relaxed);
        let limit = self.limit.load(Ordering::Relaxed);
        if limit > 0 && before >= limit {
            self.freed.notify_waiters();
        }
    }

    /// At the limit: accept nothing more for now.
    pub fn is_full(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        limit > 0 && self.open() >= limit
    }

    /// Returns once the listener is below its limit (at once without one).
    pub async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so that a connection closing in between is not missed.
            freed.as_mut().enable();
            if !self.is_full() {
                return;
            }
            freed.await;
        }
    }
}
