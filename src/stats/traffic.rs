//! Requests counted by how they ended and how long they took, for one pool or one server (and a
//! server's requests started and in flight): each worker writes its own cache line (a relaxed
//! load and store, no locked instruction, nothing shared on the request path), and a reader sums
//! the lines when it is asked.
//!
//! Durations go into fixed buckets (Prometheus's histogram: the bounds below, then +Inf), from
//! which a quantile is estimated the way `histogram_quantile` does: linearly within its bucket.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Upper bounds of the duration buckets, in microseconds: 1-2.5-5 steps from 100 µs to 10 s,
/// then 30 s and 60 s. A request longer than the last falls in +Inf.
pub const BUCKET_BOUNDS_US: [u64; 18] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// The buckets, with +Inf.
const BUCKETS: usize = BUCKET_BOUNDS_US.len() + 1;

/// How a request ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// A response with this status (from the server, or herdsman's own error response).
    Status(u16),
    /// No response, or not all of one: the client went away, or the server failed mid-body and
    /// the connection was closed.
    Unanswered,
}

/// One worker's figures, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(64))]
struct WorkerTraffic {
    /// Responses by status class: 1xx to 5xx.
    classes: [AtomicU64; 5],
    unanswered: AtomicU64,
    retries: AtomicU64,
    /// Connections opened to servers (an idle one reused is not counted).
    connections_opened: AtomicU64,
    duration_sum_us: AtomicU64,
    /// Requests by duration bucket (not cumulative).
    buckets: [AtomicU64; BUCKETS],
    /// A server's requests in flight that its worker counts here (`ActiveGuard`: those without a
    /// count shared by all workers); these two fit the line's padding.
    active: AtomicU32,
    /// A server's requests started on this worker.
    started: AtomicU64,
}

// The in-flight and started counts live in the padding of the lines the other counts take.
const _: () = assert!(std::mem::size_of::<WorkerTraffic>() == 256);

/// The counters of one pool or one server: a line per worker.
#[derive(Debug)]
pub struct Traffic {
    workers: Box<[WorkerTraffic]>,
}

/// A counter only its own worker writes: no locked read-modify-write is needed.
fn add(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

impl Traffic {
    pub fn new(workers: usize) -> Traffic {
        Traffic {
            workers: (0..workers.max(1))
                .map(|_| WorkerTraffic::default())
                .collect(),
        }
    }

    fn line(&self, worker: usize) -> &WorkerTraffic {
        &self.workers[worker % self.workers.len()]
    }

    /// Counts a request that ended so, after `duration`, on `worker`. Only that worker may call
    /// this for its index.
    pub fn record(&self, worker: usize, ending: Ending, duration: Duration) {
        self.record_took(worker, ending, Took::of(duration));
    }

    /// [`Traffic::record`] with the duration's figures worked out once for the pool's and the
    /// server's counts.
    pub fn record_took(&self, worker: usize, ending: Ending, took: Took) {
        let line = self.line(worker);
        match ending {
            Ending::Status(status) => {
                let class = usize::from(status / 100).clamp(1, 5) - 1;
                add(&line.classes[class], 1);
            }
            Ending::Unanswered => add(&line.unanswered, 1),
        }
        add(&line.duration_sum_us, took.micros);
        add(&line.buckets[took.bucket], 1);
    }

    /// Counts a retry (a request sent again, to another server) on `worker`.
    pub fn record_retry(&self, worker: usize) {
        add(&self.line(worker).retries, 1);
    }

    /// Counts a connection opened to a server on `worker` (none idle could be reused).
    pub fn record_connection_opened(&self, worker: usize) {
        add(&self.line(worker).connections_opened, 1);
    }

    /// A request started on `worker`, and counted in flight there until [`Traffic::finished`].
    pub fn started_in_flight(&self, worker: usize) {
        let line = self.line(worker);
        add(&line.started, 1);
        let active = &line.active;
        active.store(active.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// A request started on `worker`, counted in flight elsewhere.
    pub fn started(&self, worker: usize) {
        add(&self.line(worker).started, 1);
    }

    /// A request counted by [`Traffic::started_in_flight`] on `worker` is over.
    pub fn finished(&self, worker: usize) {
        let active = &self.line(worker).active;
        active.store(
            active.load(Ordering::Relaxed).wrapping_sub(1),
            Ordering::Relaxed,
        );
    }

    /// Requests in flight counted here, over all workers.
    pub fn active(&self) -> u32 {
        self.workers.iter().fold(0u32, |sum, line| {
            sum.wrapping_add(line.active.load(Ordering::Relaxed))
        })
    }

    /// Requests started, over all workers.
    pub fn started_total(&self) -> u64 {
        self.workers
            .iter()
            .map(|line| line.started.load(Ordering::Relaxed))
            .sum()
    }

    /// Every worker's figures, summed.
    pub fn totals(&self) -> TrafficTotals {
        let mut totals = TrafficTotals {
            buckets: vec![0; BUCKETS],
            ..TrafficTotals::default()
        };
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        for line in self.workers.iter() {
            let classes = line.classes.each_ref().map(read);
            for (total, count) in totals.responses.iter_mut().zip(classes) {
                *total += count;
            }
            totals.unanswered += read(&line.unanswered);
            totals.retries += read(&line.retries);
            totals.connections_opened += read(&line.connections_opened);
            totals.duration_sum_us += read(&line.duration_sum_us);
            for (total, bucket) in totals.buckets.iter_mut().zip(&line.buckets) {
                *total += read(bucket);
            }
        }
        totals.requests = totals.buckets.iter().sum();
        totals
    }
}

/// A request's duration as the counts take it: in microseconds, and its histogram bucket.
#[derive(Debug, Clone, Copy)]
pub struct Took {
    micros: u64,
    bucket: usize,
}

impl Took {
    pub fn of(duration: Duration) -> Took {
        let micros = duration.as_micros().min(u128::from(u64::MAX)) as u64;
        let bucket = BUCKET_BOUNDS_US.partition_point(|&bound| bound < micros);
        Took { micros, bucket }
    }
}

/// One pool's or server's figures since start, as the admin API reports them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TrafficTotals {
    /// Requests that ended (answered or not).
    pub requests: u64,
    /// Responses by status class: `[1xx, 2xx, 3xx, 4xx, 5xx]`.
    pub responses: [u64; 5],
    pub unanswered: u64,
    pub retries: u64,
    /// Connections opened to servers; at a steady load, far fewer than the requests.
    #[serde(default)]
    pub connections_opened: u64,
    pub duration_sum_us: u64,
    /// Requests by duration bucket (see [`BUCKET_BOUNDS_US`]; the last is +Inf), not cumulative.
    pub buckets: Vec<u64>,
}

impl TrafficTotals {
    /// Errors, as a monitor counts them: 5xx responses and requests left unanswered.
    pub fn errors(&self) -> u64 {
        self.responses[4] + self.unanswered
    }

    /// The figures of the span from `earlier` to these (counters only grow; a counter that
    /// shrank — a server re-added afresh — counts from zero).
    pub fn since(&self, earlier: &TrafficTotals) -> TrafficTotals {
        let minus = |now: u64, then: u64| now.checked_sub(then).unwrap_or(now);
        // An earlier sample may have fewer buckets (a default, empty one): those count as 0.
        let buckets = self.buckets.iter().enumerate();
        TrafficTotals {
            requests: minus(self.requests, earlier.requests),
            responses: std::array::from_fn(|i| minus(self.responses[i], earlier.responses[i])),
            unanswered: minus(self.unanswered, earlier.unanswered),
            retries: minus(self.retries, earlier.retries),
            connections_opened: minus(self.connections_opened, earlier.connections_opened),
            duration_sum_us: minus(self.duration_sum_us, earlier.duration_sum_us),
            buckets: buckets
                .map(|(i, &now)| minus(now, earlier.buckets.get(i).copied().unwrap_or(0)))
                .collect(),
        }
    }

    /// The estimated `q`-quantile (0 < q ≤ 1) of the durations, in microseconds, interpolated
    /// within its bucket as Prometheus's `histogram_quantile` does; a quantile in the +Inf bucket
    /// is given as the last bound. `None` without requests.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        quantile_us(&self.buckets, q)
    }
}

/// The `q`-quantile of per-bucket counts `buckets` (see [`TrafficTotals::quantile_us`]).
pub fn quantile_us(buckets: &[u64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, &count) in buckets.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let Some(&upper) = BUCKET_BOUNDS_US.get(i) else {
                return Some(BUCKET_BOUNDS_US[BUCKET_BOUNDS_US.len() - 1] as f64);
            };
            let lower = if i == 0 { 0 } else { BUCKET_BOUNDS_US[i - 1] };
            let within = (rank - below as f64) / count as f64;
            return Some(lower as f64 + (upper - lower) as f64 * within);
        }
        below += count;
    }
    Some(BUCKET_BOUNDS_US[BUCKET_BOUNDS_US.len() - 1] as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_counts_apart_and_the_totals_sum_them() {
        let traffic = Traffic::new(2);
        traffic.record(0, Ending::Status(200), Duration::from_micros(80));
        traffic.record(1, Ending::Status(204), Duration::from_micros(100));
        traffic.record(1, Ending::Status(503), Duration::from_millis(3));
        traffic.record(0, Ending::Unanswered, Duration::from_secs(100));
        traffic.record(1, Ending::Status(101), Duration::ZERO);
        traffic.record_retry(1);
        traffic.record_connection_opened(0);
        traffic.record_connection_opened(1);
        let totals = traffic.totals();
        assert_eq!(totals.connections_opened, 2);
        // Started and in flight: each worker on its line, summed.
        traffic.started_in_flight(0);
        traffic.started_in_flight(1);
        traffic.started_in_flight(1);
        traffic.started(0);
        traffic.finished(1);
        assert_eq!((traffic.active(), traffic.started_total()), (2, 4));
        traffic.finished(0);
        traffic.finished(1);
        assert_eq!((traffic.active(), traffic.started_total()), (0, 4));
        assert_eq!(totals.requests, 5);
        assert_eq!(totals.responses, [1, 2, 0, 0, 1]);
        assert_eq!(
            (totals.unanswered, totals.retries, totals.errors()),
            (1, 1, 2)
        );
        assert_eq!(totals.duration_sum_us, 80 + 100 + 3_000 + 100_000_000);
        // A bound is inclusive (Prometheus's `le`): 100 µs falls in the first bucket.
        assert_eq!(totals.buckets[0], 3);
        assert_eq!(totals.buckets[5], 1, "3 ms ≤ 5 ms");
        assert_eq!(totals.buckets[BUCKETS - 1], 1, "100 s is past every bound");
    }

    #[test]
    fn quantiles_interpolate_within_their_bucket() {
        let mut buckets = vec![0; BUCKETS];
        // 100 requests between 1 ms and 2.5 ms (bucket 4), 1 between 5 and 10 ms (bucket 6).
        buckets[4] = 99;
        buckets[6] = 1;
        let p50 = quantile_us(&buckets, 0.5).unwrap();
        assert!(
            (p50 - (1_000.0 + 1_500.0 * 50.0 / 99.0)).abs() < 1e-6,
            "{p50}"
        );
        assert_eq!(quantile_us(&buckets, 0.99), Some(2_500.0));
        assert_eq!(quantile_us(&buckets, 1.0), Some(10_000.0));
        assert_eq!(quantile_us(&[0; BUCKETS], 0.5), None);
        let mut slow = vec![0; BUCKETS];
        slow[BUCKETS - 1] = 1;
        assert_eq!(quantile_us(&slow, 0.5), Some(60_000_000.0));
    }

    #[test]
    fn a_span_is_the_difference_and_survives_a_reset() {
        let traffic = Traffic::new(1);
        traffic.record(0, Ending::Status(200), Duration::from_millis(1));
        let earlier = traffic.totals();
        traffic.record(0, Ending::Status(500), Duration::from_millis(1));
        let span = traffic.totals().since(&earlier);
        assert_eq!(span.requests, 1);
        assert_eq!(span.responses, [0, 0, 0, 0, 1]);
        let fresh = Traffic::new(1).totals();
        assert_eq!(fresh.since(&earlier).requests, 0);
        assert_eq!(earlier.since(&fresh).requests, 1);
    }
}
