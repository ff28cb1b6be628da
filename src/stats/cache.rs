//! What the cache did for one request, as the access log names it and the per-pool cache
//! counters count it; and what the store holds of a pool, as the admin API reports it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

/// The cache's part in one request to a pool that caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Answered from a fresh stored response.
    Hit,
    /// Answered from a stale stored response: within `stale-while-revalidate` (while one
    /// background fetch refreshes it), or instead of a server's failure (`stale-if-error`,
    /// `grace`).
    Stale,
    /// Answered from another request's fetch of the same object, as it arrived.
    Collapsed,
    /// Waited for another request's fetch longer than `lock_timeout`, and went to the server.
    LockTimeout,
    /// Not stored, or expired: fetched, and stored as it came.
    Miss,
    /// Fetched, and the answer may not be stored.
    Uncacheable,
    /// Not for the cache at all: another method, a range, a method override, `no-store`.
    Pass,
    /// A stale object revalidated: the server answered 304 and the stored object, refreshed,
    /// answered.
    Revalidated,
    /// A stale object revalidated: the server answered with a new response, stored instead.
    Replaced,
}

impl CacheOutcome {
    /// The word the access log writes.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Stale => "stale",
            CacheOutcome::Collapsed => "collapsed",
            CacheOutcome::LockTimeout => "lock_timeout",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Uncacheable => "uncacheable",
            CacheOutcome::Pass => "pass",
            CacheOutcome::Revalidated => "revalidated",
            CacheOutcome::Replaced => "replaced",
        }
    }
}

/// Every outcome, in the order the counters and their reports list them.
pub const OUTCOMES: [CacheOutcome; 9] = [
    CacheOutcome::Hit,
    CacheOutcome::Stale,
    CacheOutcome::Collapsed,
    CacheOutcome::LockTimeout,
    CacheOutcome::Miss,
    CacheOutcome::Uncacheable,
    CacheOutcome::Pass,
    CacheOutcome::Revalidated,
    CacheOutcome::Replaced,
];

/// One worker's counts, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(64))]
struct WorkerCacheCounts {
    /// By outcome, in [`OUTCOMES`] order.
    outcomes: [AtomicU64; OUTCOMES.len()],
}

/// A pool's requests by what the cache did for them: a line per worker, written only by its
/// worker (a relaxed load and store, as `traffic.rs` counts), summed when read.
#[derive(Debug)]
pub struct CacheCounts {
    workers: Box<[WorkerCacheCounts]>,
}

impl CacheCounts {
    pub fn new(workers: usize) -> CacheCounts {
        CacheCounts {
            workers: (0..workers.max(1))
                .map(|_| WorkerCacheCounts::default())
                .collect(),
        }
    }

    /// Counts one request's outcome on `worker`. Only that worker may call this for its index.
    pub fn record(&self, worker: usize, outcome: CacheOutcome) {
        let line = &self.workers[worker % self.workers.len()];
        let counter = &line.outcomes[outcome as usize];
        counter.store(counter.load(Relaxed) + 1, Relaxed);
    }

    /// Every worker's counts, summed.
    pub fn totals(&self) -> CacheTotals {
        let mut counts = [0u64; OUTCOMES.len()];
        for line in self.workers.iter() {
            for (total, counter) in counts.iter_mut().zip(&line.outcomes) {
                *total += counter.load(Relaxed);
            }
        }
        let [hit, stale, collapsed, lock_timeout, miss, uncacheable, pass, revalidated, replaced] =
            counts;
        CacheTotals {
            hit,
            stale,
            collapsed,
            lock_timeout,
            miss,
            uncacheable,
            pass,
            revalidated,
            replaced,
        }
    }
}

// The discriminants index the counters.
const _: () = {
    let mut at = 0;
    while at < OUTCOMES.len() {
        assert!(OUTCOMES[at] as usize == at);
        at += 1;
    }
};

/// A pool's requests since start by what the cache did for them, named as the access log
/// names the outcomes.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct CacheTotals {
    pub hit: u64,
    pub stale: u64,
    pub collapsed: u64,
    pub lock_timeout: u64,
    pub miss: u64,
    pub uncacheable: u64,
    pub pass: u64,
    pub revalidated: u64,
    pub replaced: u64,
}

impl CacheTotals {
    /// Each outcome and its count, in [`OUTCOMES`] order.
    pub fn by_outcome(&self) -> [(CacheOutcome, u64); OUTCOMES.len()] {
        let counts = [
            self.hit,
            self.stale,
            self.collapsed,
            self.lock_timeout,
            self.miss,
            self.uncacheable,
            self.pass,
            self.revalidated,
            self.replaced,
        ];
        std::array::from_fn(|at| (OUTCOMES[at], counts[at]))
    }

    /// The share of the requests the cache was asked for (all but `pass`) that were answered
    /// with a stored body: fresh or stale hits, followers of another request's fetch, and
    /// revalidations the server answered 304. `None` before any such request.
    pub fn hit_ratio(&self) -> Option<f64> {
        let asked: u64 = self
            .by_outcome()
            .iter()
            .filter(|(outcome, _)| *outcome != CacheOutcome::Pass)
            .map(|(_, count)| count)
            .sum();
        let served = self.hit + self.stale + self.collapsed + self.revalidated;
        (asked > 0).then(|| served as f64 / asked as f64)
    }

    /// The counts of the span from `earlier` to these (one that shrank — a new process —
    /// counts from zero).
    pub fn since(&self, earlier: &CacheTotals) -> CacheTotals {
        let minus = |now: u64, then: u64| now.checked_sub(then).unwrap_or(now);
        CacheTotals {
            hit: minus(self.hit, earlier.hit),
            stale: minus(self.stale, earlier.stale),
            collapsed: minus(self.collapsed, earlier.collapsed),
            lock_timeout: minus(self.lock_timeout, earlier.lock_timeout),
            miss: minus(self.miss, earlier.miss),
            uncacheable: minus(self.uncacheable, earlier.uncacheable),
            pass: minus(self.pass, earlier.pass),
            revalidated: minus(self.revalidated, earlier.revalidated),
            replaced: minus(self.replaced, earlier.replaced),
        }
    }
}

/// What the store holds of one pool's responses now, and what it evicted of them since the
/// store was made (a change to the cache's config makes a new, empty one).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct CacheHeld {
    /// Responses held (each variant of a response that varies is one).
    pub objects: u64,
    /// The bytes of the budget they take: keys, heads, bodies and each entry's overhead.
    pub bytes: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
}

/// A caching pool's cache, as `GET /api/pools` reports it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct PoolCacheView {
    /// Its requests since start, by outcome.
    pub requests: CacheTotals,
    /// [`CacheTotals::hit_ratio`] of `requests`; `None` before any request asked the cache.
    pub hit_ratio: Option<f64>,
    #[serde(flatten)]
    pub held: CacheHeld,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_counts_apart_and_the_totals_sum_them() {
        let counts = CacheCounts::new(2);
        counts.record(0, CacheOutcome::Hit);
        counts.record(1, CacheOutcome::Hit);
        counts.record(1, CacheOutcome::Miss);
        counts.record(0, CacheOutcome::Pass);
        counts.record(0, CacheOutcome::Revalidated);
        let totals = counts.totals();
        assert_eq!((totals.hit, totals.miss, totals.pass), (2, 1, 1));
        assert_eq!(totals.revalidated, 1);
        // 3 of the 4 that asked the cache were answered from it; the pass is not counted.
        assert_eq!(totals.hit_ratio(), Some(0.75));
        assert_eq!(CacheTotals::default().hit_ratio(), None);
        let later = CacheTotals { hit: 5, ..totals };
        assert_eq!(later.since(&totals).hit, 3);
        assert_eq!(later.since(&totals).miss, 0);
    }
}
