//! One limit as the workers share it: its rule, its GCRA table, and per worker its counts and
//! the keys it refused most lately.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::config::rate_limit::RateLimitRule;
use crate::transport::Moment;

use super::key::{RequestKey, KEY_TEXT_MAX};
use super::table::{GcraTable, Verdict};

/// Keys each worker remembers refusing, per limit (the admin API's top keys).
const TOP_KEYS: usize = 8;

/// How long a refused key counts as lately refused, for the admin API.
pub const RECENT: std::time::Duration = std::time::Duration::from_secs(60);

/// One limit, shared by every worker; kept across reloads while its rule stays the same.
pub struct Limiter {
    pub rule: RateLimitRule,
    /// `rule`'s emission interval, in microseconds.
    interval: u64,
    table: GcraTable,
    /// With `[rate_limit] redis`: the keys Redis said are over, until when (a request of one is
    /// refused without asking Redis again).
    refused_by_redis: GcraTable,
    /// The keys' hash seed: random per limit, so that keys colliding on purpose in one table
    /// do not in the next.
    seed: foldhash::fast::RandomState,
    /// One per worker, indexed by the worker's index.
    workers: Box<[WorkerShare]>,
    /// With `[rate_limit] redis`: the start of its keys in Redis, written once here rather than
    /// formatted (two allocations) per check.
    redis_key_prefix: Box<str>,
}

/// What one worker counted of a limit: its own cache line, written by that worker alone.
#[repr(align(64))]
#[derive(Default)]
struct WorkerShare {
    allowed: AtomicU64,
    limited: AtomicU64,
    /// Keys forgotten for room (the table full).
    forgotten: AtomicU64,
    /// Checks Redis did not answer in time (or at all).
    redis_errors: AtomicU64,
    /// The keys it refused most: taken by this worker on a refusal and by the admin API when
    /// it reads, so never contended on the request path (each worker has its own).
    top: Mutex<TopKeys>,
}

/// A worker's most refused keys of one limit, kept Misra–Gries style in a fixed array: a key
/// not there takes the place of the least refused, counting on from its count.
#[derive(Default)]
struct TopKeys {
    keys: [TopKey; TOP_KEYS],
}

#[derive(Clone, Copy)]
struct TopKey {
    hash: u64,
    refused: u64,
    /// When it was last refused, in microseconds of the monotonic clock.
    last: u64,
    len: u8,
    text: [u8; KEY_TEXT_MAX],
}

impl Default for TopKey {
    fn default() -> TopKey {
        TopKey {
            hash: 0,
            refused: 0,
            last: 0,
            len: 0,
            text: [0; KEY_TEXT_MAX],
        }
    }
}

/// A request over a limit.
#[derive(Debug, Clone, Copy)]
pub struct Refusal<'l> {
    pub limiter: &'l Limiter,
    /// When a request of the key would be let through again.
    pub retry_after_micros: u64,
}

/// A limit as the admin API and the metrics show it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LimitView {
    pub name: String,
    pub rate: String,
    pub burst: u32,
    pub key: String,
    pub max_keys: u32,
    /// The table's memory, fixed whatever the number of keys.
    pub table_bytes: usize,
    pub allowed: u64,
    pub limited: u64,
    pub forgotten: u64,
    /// Checks Redis did not answer (with `[rate_limit] redis`).
    #[serde(default)]
    pub redis_errors: u64,
    /// The keys refused in the last minute, most refused first.
    pub top_keys: Vec<TopKeyView>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TopKeyView {
    pub key: String,
    pub refused: u64,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

/// Microseconds of the monotonic clock at `moment`.
fn micros(moment: Moment) -> u64 {
    moment.nanos() / 1_000
}

impl Limiter {
    /// A limit of `rule` for `workers` workers, its table empty.
    pub fn new(rule: RateLimitRule, workers: usize) -> Limiter {
        Limiter {
            interval: rule.interval_micros(),
            table: GcraTable::new(rule.max_keys),
            // Only keys over the limit are kept here: a tenth of the keys, at most 10,000.
            refused_by_redis: GcraTable::new((rule.max_keys / 10).clamp(8, 10_000)),
            seed: foldhash::fast::RandomState::default(),
            workers: (0..workers.max(1))
                .map(|_| WorkerShare::default())
                .collect(),
            // The limit's name and rule in the key: instances share a limit only when they
            // agree on it, and a changed rule starts afresh.
            redis_key_prefix: format!(
                "herdsman:rate_limit:{}:{}:{}:{}:",
                rule.name,
                rule.rate_text(),
                rule.burst,
                rule.key.text()
            )
            .into(),
            rule,
        }
    }

    /// The start of this limit's keys in Redis: `herdsman:rate_limit:NAME:RATE:BURST:KEY:`.
    pub fn redis_key_prefix(&self) -> &str {
        &self.redis_key_prefix
    }

    /// The time one request costs, in microseconds (GCRA's emission interval).
    pub fn interval_micros(&self) -> u64 {
        self.interval
    }

    /// Counts one request of `key` at `now` on worker `worker`: `None` when it may go on,
    /// else how long it should wait.
    pub fn check(&self, key: RequestKey<'_>, now: Moment, worker: usize) -> Option<u64> {
        let hash = key.hash(&self.seed);
        let refused = self.check_here(key, hash, now, worker);
        if refused.is_none() {
            self.count_allowed(worker);
        }
        refused
    }

    /// The local check of `check` for a key hashed to `hash`, counting a refusal but not a
    /// request let through (which Redis may yet refuse).
    fn check_here(
        &self,
        key: RequestKey<'_>,
        hash: u64,
        now: Moment,
        worker: usize,
    ) -> Option<u64> {
        let checked = self
            .table
            .check(hash, micros(now), self.interval, self.rule.burst);
        if checked.evicted {
            self.share(worker).forgotten.fetch_add(1, Ordering::Relaxed);
        }
        match checked.verdict {
            Verdict::Allowed { .. } => None,
            Verdict::Limited { retry_after_micros } => {
                self.count_refused(key, hash, now, worker);
                Some(retry_after_micros)
            }
        }
    }

    /// Before Redis is asked: the local limit (a key already over it here is over it in Redis
    /// too), then the keys Redis refused lately. `Err`: refused, with the wait; `Ok`: Redis
    /// decides, with the hash to give [`Limiter::redis_said`].
    pub fn before_redis(
        &self,
        key: RequestKey<'_>,
        now: Moment,
        worker: usize,
    ) -> Result<u64, u64> {
        let hash = key.hash(&self.seed);
        if let Some(wait) = self.check_here(key, hash, now, worker) {
            return Err(wait);
        }
        if let Some(wait) = self.refused_by_redis.held(hash, micros(now)) {
            self.count_refused(key, hash, now, worker);
            return Err(wait);
        }
        Ok(hash)
    }

    /// What Redis said of `key` (hashed `hash` by [`Limiter::before_redis`]): `over` is the wait
    /// when it is over the limit, remembered for that long.
    pub fn redis_said(
        &self,
        key: RequestKey<'_>,
        hash: u64,
        over: Option<u64>,
        now: Moment,
        worker: usize,
    ) {
        match over {
            None => self.count_allowed(worker),
            Some(wait) => {
                let now_micros = micros(now);
                self.refused_by_redis
                    .hold(hash, now_micros, now_micros + wait);
                self.count_refused(key, hash, now, worker);
            }
        }
    }

    /// Redis did not answer for `key`: counted; the request is let through when `fail_open`.
    pub fn redis_failed(&self, key: RequestKey<'_>, now: Moment, worker: usize, fail_open: bool) {
        self.share(worker)
            .redis_errors
            .fetch_add(1, Ordering::Relaxed);
        if fail_open {
            self.count_allowed(worker);
        } else {
            self.count_refused(key, key.hash(&self.seed), now, worker);
        }
    }

    fn share(&self, worker: usize) -> &WorkerShare {
        &self.workers[worker % self.workers.len()]
    }

    fn count_allowed(&self, worker: usize) {
        self.share(worker).allowed.fetch_add(1, Ordering::Relaxed);
    }

    fn count_refused(&self, key: RequestKey<'_>, hash: u64, now: Moment, worker: usize) {
        let share = self.share(worker);
        share.limited.fetch_add(1, Ordering::Relaxed);
        let mut top = share
            .top
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        top.refused(hash, key, micros(now));
    }

    /// Its rule, counts and lately refused keys, summed over the workers.
    pub fn view(&self) -> LimitView {
        let sum = |counter: fn(&WorkerShare) -> &AtomicU64| {
            self.workers
                .iter()
                .map(|share| counter(share).load(Ordering::Relaxed))
                .sum::<u64>()
        };
        let since = micros(Moment::now()).saturating_sub(RECENT.as_micros() as u64);
        let mut top: Vec<(u64, TopKeyView)> = Vec::new();
        for share in self.workers.iter() {
            let keys = share
                .top
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            for key in keys
                .keys
                .iter()
                .filter(|key| key.refused > 0 && key.last >= since)
            {
                match top.iter_mut().find(|(hash, _)| *hash == key.hash) {
                    Some((_, view)) => view.refused += key.refused,
                    None => top.push((
                        key.hash,
                        TopKeyView {
                            key: String::from_utf8_lossy(&key.text[..usize::from(key.len)])
                                .into_owned(),
                            refused: key.refused,
                        },
                    )),
                }
            }
        }
        top.sort_by(|a, b| b.1.refused.cmp(&a.1.refused).then(a.1.key.cmp(&b.1.key)));
        LimitView {
            name: self.rule.name.clone(),
            rate: self.rule.rate_text(),
            burst: self.rule.burst,
            key: self.rule.key.text(),
            max_keys: self.rule.max_keys,
            table_bytes: self.table.bytes(),
            allowed: sum(|share| &share.allowed),
            limited: sum(|share| &share.limited),
            forgotten: sum(|share| &share.forgotten),
            redis_errors: sum(|share| &share.redis_errors),
            top_keys: top.into_iter().map(|(_, view)| view).collect(),
        }
    }
}

impl TopKeys {
    /// One more refusal of `key` (hashed `hash`) at `now`.
    fn refused(&mut self, hash: u64, key: RequestKey<'_>, now: u64) {
        if let Some(known) = self
            .keys
            .iter_mut()
            .find(|known| known.hash == hash && known.refused > 0)
        {
            known.refused += 1;
            known.last = now;
            return;
        }
        // The least refused gives its place, or one refused long ago.
        let stale_before = now.saturating_sub(RECENT.as_micros() as u64);
        let place = self
            .keys
            .iter_mut()
            .min_by_key(|known| {
                if known.last < stale_before {
                    0
                } else {
                    known.refused
                }
            })
            .expect("TOP_KEYS > 0");
        let counted = if place.last < stale_before {
            0
        } else {
            place.refused
        };
        let mut text = [0; KEY_TEXT_MAX];
        let len = key.write_text(&mut text);
        *place = TopKey {
            hash,
            refused: counted + 1,
            last: now,
            len: len as u8,
            text,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::rate_limit::LimitKey;
    use std::time::Duration;

    fn rule(burst: u32) -> RateLimitRule {
        RateLimitRule {
            name: "route[0]".into(),
            count: 1,
            period: Duration::from_secs(3600),
            burst,
            key: LimitKey::Header("x-key".into()),
            max_keys: 1000,
        }
    }

    #[test]
    fn counts_and_top_keys_sum_over_the_workers() {
        let limiter = Limiter::new(rule(2), 2);
        let now = Moment::now();
        for worker in [0, 1, 0, 1, 0] {
            limiter.check(RequestKey::Value(b"alice"), now, worker);
        }
        limiter.check(RequestKey::Value(b"bob"), now, 1);
        limiter.check(RequestKey::Absent, now, 1);
        limiter.check(RequestKey::Absent, now, 0);
        limiter.check(RequestKey::Absent, now, 0);
        let view = limiter.view();
        assert_eq!((view.allowed, view.limited), (5, 4));
        let top: Vec<_> = view
            .top_keys
            .iter()
            .map(|key| (key.key.as_str(), key.refused))
            .collect();
        assert_eq!(top, [("alice", 3), ("(absent)", 1)]);
        assert_eq!(view.rate, "1/h");
        assert_eq!(view.key, "header:x-key");
    }
}
