//! A pool's retry budget, in the manner of Finagle's `RetryBudget`: retries may add at most
//! `retry_budget_percent` to the requests the pool saw over the last ten seconds, plus a small
//! floor per second so that a quiet pool can still retry its few requests. The reserve follows the
//! traffic: a busy pool can retry a burst of failures as large as its share of the last window at
//! once, and when every server fails, retries stay within the share.
//!
//! Each worker keeps its own window of the pool's requests and retries on its own cache lines, in
//! one-second slots (a relaxed load and store, as `stats::traffic` counts): nothing is shared on
//! the request path. Kept across snapshots with the pool.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::transport::Moment;

/// Seconds the window spans.
pub const WINDOW_SECONDS: u32 = 10;

/// One second of a worker's traffic to the pool.
#[derive(Debug, Default)]
struct Slot {
    /// The second it counts (since the process's first reading); another second's counts are
    /// stale.
    second: AtomicU32,
    requests: AtomicU32,
    retries: AtomicU32,
}

/// One worker's window, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(64))]
struct WorkerWindow {
    slots: [Slot; WINDOW_SECONDS as usize],
}

/// A pool's retry budget: a window per worker.
#[derive(Debug)]
pub struct RetryBudget {
    workers: Box<[WorkerWindow]>,
}

/// A counter only its own worker writes.
fn bump(counter: &AtomicU32) {
    counter.store(
        counter.load(Ordering::Relaxed).saturating_add(1),
        Ordering::Relaxed,
    );
}

/// Whole seconds on the monotonic clock, from a reading the caller has (a division, where the
/// seconds since a first reading took a subtraction of `Instant`s).
pub fn second_of(now: Moment) -> u32 {
    // Wraps after 136 years of uptime.
    (now.nanos() / 1_000_000_000) as u32
}

impl RetryBudget {
    pub fn new(workers: usize) -> RetryBudget {
        RetryBudget {
            workers: (0..workers.max(1))
                .map(|_| WorkerWindow::default())
                .collect(),
        }
    }

    /// The slot of `second` in `worker`'s window, emptied first if it held an older second.
    fn slot(&self, worker: usize, second: u32) -> &Slot {
        let window = &self.workers[worker % self.workers.len()];
        let slot = &window.slots[(second % WINDOW_SECONDS) as usize];
        if slot.second.load(Ordering::Relaxed) != second {
            slot.requests.store(0, Ordering::Relaxed);
            slot.retries.store(0, Ordering::Relaxed);
            slot.second.store(second, Ordering::Relaxed);
        }
        slot
    }

    /// A request to the pool, on `worker` in `second`. Only that worker may call this for its
    /// index.
    pub fn count_request(&self, worker: usize, second: u32) {
        bump(&self.slot(worker, second).requests);
    }

    /// Takes a retry for `worker` in `second` if the window has one to spare: retries in the
    /// window stay within `percent` of its requests plus `floor_per_second` (the pool's, shared
    /// out among the workers) for each second of the window. Counts it when taken.
    pub fn try_retry(
        &self,
        worker: usize,
        second: u32,
        percent: u32,
        floor_per_second: u32,
    ) -> bool {
        let window = &self.workers[worker % self.workers.len()];
        let oldest = second.saturating_sub(WINDOW_SECONDS - 1);
        let (mut requests, mut retries) = (0u64, 0u64);
        for slot in &window.slots {
            let at = slot.second.load(Ordering::Relaxed);
            if (oldest..=second).contains(&at) {
                requests += u64::from(slot.requests.load(Ordering::Relaxed));
                retries += u64::from(slot.retries.load(Ordering::Relaxed));
            }
        }
        let workers = self.workers.len() as u64;
        let floor = u64::from(floor_per_second).div_ceil(workers) * u64::from(WINDOW_SECONDS);
        // retries + 1 <= requests × percent / 100 + floor, in whole numbers.
        let allowed = (retries + 1) * 100 <= requests * u64::from(percent) + floor * 100;
        if allowed {
            bump(&self.slot(worker, second).retries);
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Retries `worker` may take after `requests` requests in `second`, one at a time.
    fn retries_taken(budget: &RetryBudget, second: u32, percent: u32, floor: u32) -> u32 {
        let mut taken = 0;
        while budget.try_retry(0, second, percent, floor) {
            taken += 1;
        }
        taken
    }

    #[test]
    fn a_burst_as_large_as_the_share_of_the_window_is_retried_at_once() {
        let budget = RetryBudget::new(1);
        for second in 0..10 {
            for _ in 0..1000 {
                budget.count_request(0, second);
            }
        }
        // 10,000 requests in the window at 20%: 2,000 retries now, none more.
        assert_eq!(retries_taken(&budget, 9, 20, 0), 2000);
        assert!(!budget.try_retry(0, 9, 20, 0));
    }

    #[test]
    fn the_window_forgets_what_is_ten_seconds_old() {
        let budget = RetryBudget::new(1);
        for _ in 0..1000 {
            budget.count_request(0, 0);
        }
        assert_eq!(retries_taken(&budget, 0, 10, 0), 100);
        // Nine seconds on, the requests and retries of second 0 still count.
        assert_eq!(retries_taken(&budget, 9, 10, 0), 0);
        // Ten seconds on they are gone: nothing earned, nothing spent.
        assert_eq!(retries_taken(&budget, 10, 10, 0), 0);
        for _ in 0..50 {
            budget.count_request(0, 10);
        }
        assert_eq!(retries_taken(&budget, 10, 10, 0), 5);
    }

    #[test]
    fn a_quiet_pool_has_its_floor_shared_among_workers() {
        // 10 a second for the pool, two workers: 5 a second each, 50 in the window.
        let budget = RetryBudget::new(2);
        assert_eq!(retries_taken(&budget, 3, 20, 10), 50);
        let mut second_worker = 0;
        while budget.try_retry(1, 3, 20, 10) {
            second_worker += 1;
        }
        assert_eq!(second_worker, 50);
    }

    #[test]
    fn when_every_request_fails_retries_stay_within_the_share() {
        let budget = RetryBudget::new(1);
        let (mut requests, mut retries) = (0u64, 0u64);
        for second in 0..30 {
            for _ in 0..500 {
                budget.count_request(0, second);
                requests += 1;
                // Each request fails and asks for up to two retries.
                for _ in 0..2 {
                    if budget.try_retry(0, second, 20, 0) {
                        retries += 1;
                    }
                }
            }
        }
        assert!(retries * 100 <= requests * 20, "{retries} of {requests}");
        assert!(retries * 100 >= requests * 19, "{retries} of {requests}");
    }
}
