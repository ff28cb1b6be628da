//! The rows `herdsman top` shows, made from two samples by one function ([`Tables::between`]):
//! the live view draws them as ratatui tables, `--once` prints them as aligned text.
//!
//! A rate is a counter's growth between the samples divided by the seconds between them; a CPU
//! share is CPU seconds grown per second, as a percentage of one CPU (so a worker thread is at
//! most 100%).

use std::fmt::Write as _;

use herdsman::stats::cache::CacheTotals;
use herdsman::stats::traffic::TrafficTotals;

use super::sample::{Sample, WorkerFigures, WorkersReply};
use crate::cli::ctl::print::{self, PoolsReply, ServerReply};

/// One table: headings, and rows of cells already written as they are shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub headings: &'static [&'static str],
    /// Which columns hold numbers (right-aligned); as long as `headings`.
    pub numeric: &'static [bool],
    /// A row may be shorter than the headings (a pool without servers): the rest is blank.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The headings, then the rows: the cells of a text table.
    fn cells(&self) -> Vec<Vec<String>> {
        let headings = self.headings.iter().map(|heading| heading.to_string());
        std::iter::once(headings.collect())
            .chain(self.rows.iter().cloned())
            .collect()
    }

    /// Each column's width in characters: its widest cell, heading included.
    pub fn widths(&self) -> Vec<usize> {
        print::column_widths(&self.cells())
    }

    /// The table as lines of aligned text, headings first (`ctl servers`' layout).
    pub fn text(&self) -> String {
        print::aligned_columns(&self.cells(), self.numeric)
    }
}

/// Everything `top` shows for one span between two samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    /// One line: the process, its intake and generation, the kernel's listen-queue losses.
    pub summary: String,
    /// A row per worker thread.
    pub workers: Table,
    /// A row per server, pool by pool.
    pub servers: Table,
    /// A row per pool that caches (none: not shown).
    pub cache: Table,
}

const WORKER_HEADINGS: &[&str] = &[
    "WORKER",
    "USR%",
    "SYS%",
    "LAT%",
    "CONNS",
    "H2CONNS",
    "H2STREAMS",
    "ACCEPT/S",
    "REQ/S",
    "CONN/REQ",
    "SHED/S",
];
const WORKER_NUMERIC: &[bool] = &[true; 11];
const SERVER_HEADINGS: &[&str] = &[
    "POOL", "SERVER", "STATE", "HEALTH", "REQ/S", "ERR/S", "P99MS", "LATMS", "CONN/REQ",
];
const SERVER_NUMERIC: &[bool] = &[false, false, false, false, true, true, true, true, true];
const CACHE_HEADINGS: &[&str] = &["POOL", "CACHE/S", "HIT%", "OBJECTS", "MIB", "EVICT"];
const CACHE_NUMERIC: &[bool] = &[false, true, true, true, true, true];

impl Tables {
    /// The figures of the span from `earlier` to `later`. A worker or server missing from
    /// `earlier` counts from zero, and so does everything when `later` comes from another
    /// process (a binary upgrade restarts the counters).
    pub fn between(earlier: &Sample, later: &Sample) -> Tables {
        // Never zero, so that no rate is infinite or NaN.
        let seconds = later
            .taken_at
            .saturating_duration_since(earlier.taken_at)
            .as_secs_f64()
            .max(1e-6);
        let same_process = earlier.workers.pid == later.workers.pid;
        let earlier_workers: &[WorkerFigures] = if same_process {
            &earlier.workers.workers
        } else {
            &[]
        };
        let earlier_pools = same_process.then_some(&earlier.pools);
        Tables {
            summary: summary(&earlier.workers, later, seconds),
            workers: Table {
                headings: WORKER_HEADINGS,
                numeric: WORKER_NUMERIC,
                rows: worker_rows(earlier_workers, &later.workers.workers, seconds),
            },
            servers: Table {
                headings: SERVER_HEADINGS,
                numeric: SERVER_NUMERIC,
                rows: server_rows(earlier_pools, &later.pools, seconds),
            },
            cache: Table {
                headings: CACHE_HEADINGS,
                numeric: CACHE_NUMERIC,
                rows: cache_rows(earlier_pools, &later.pools, seconds),
            },
        }
    }

    /// The summary line, then the tables (the cache's, when some pool caches, before the
    /// servers', as the screen shows them): what `--once` prints.
    pub fn plain_text(&self) -> String {
        let cache = if self.cache.rows.is_empty() {
            String::new()
        } else {
            self.cache.text()
        };
        format!(
            "{}\n{}{cache}{}",
            self.summary,
            self.workers.text(),
            self.servers.text()
        )
    }
}

/// `herdsman pid 1234, intake balanced, generation 3, listen queue: 0 overflows, 0 drops in 1.0 s`,
/// prstat's summary line in herdsman's terms.
fn summary(earlier: &WorkersReply, later: &Sample, seconds: f64) -> String {
    let workers = &later.workers;
    let mut line = format!("herdsman pid {}", workers.pid);
    if earlier.pid != workers.pid {
        let _ = write!(line, " (was {}: figures since it started)", earlier.pid);
    }
    let _ = write!(
        line,
        ", intake {}, generation {}, listen queue: ",
        workers.intake, later.pools.generation
    );
    match (earlier.listen_queue, workers.listen_queue) {
        (Some(then), Some(now)) => {
            let _ = write!(
                line,
                "{} overflows, {} drops",
                now.overflows.saturating_sub(then.overflows),
                now.drops.saturating_sub(then.drops)
            );
        }
        _ => line.push_str("not readable"),
    }
    let _ = write!(line, " in {seconds:.1} s");
    line
}

/// `WORKER USR% SYS% LAT% CONNS H2CONNS H2STREAMS ACCEPT/S REQ/S CONN/REQ SHED/S`, a row per
/// worker in `later` (H2CONNS and H2STREAMS: its HTTP/2 connections and streams open now, the
/// connections among CONNS; SHED/S: quiet connections closed to make room at the client cap) and,
/// with several workers, a row `all` of their sums (CPU shares summed too: 150.0 is one and a half
/// CPUs).
fn worker_rows(
    earlier: &[WorkerFigures],
    later: &[WorkerFigures],
    seconds: f64,
) -> Vec<Vec<String>> {
    let from_zero = WorkerFigures::default();
    let then_of = |now: &WorkerFigures| {
        earlier
            .iter()
            .find(|then| then.worker == now.worker)
            .unwrap_or(&from_zero)
    };
    let mut rows: Vec<Vec<String>> = later
        .iter()
        .map(|now| worker_row(now.worker.to_string(), then_of(now), now, seconds))
        .collect();
    if later.len() > 1 {
        // The workers of `later`, each against its own earlier figures: one that is gone by now
        // has nothing to show.
        let then = sum(later.iter().map(then_of));
        let now = sum(later.iter());
        rows.push(worker_row("all".to_string(), &then, &now, seconds));
    }
    rows
}

/// One row of the worker table, named `label`, for the span from `then` to `now`.
fn worker_row(
    label: String,
    then: &WorkerFigures,
    now: &WorkerFigures,
    seconds: f64,
) -> Vec<String> {
    let cpu_share = |now: f64, then: f64| percent((now - then).max(0.0) / seconds);
    let run_queue_wait = match now.cpu.run_queue_wait_seconds {
        Some(wait) => cpu_share(wait, then.cpu.run_queue_wait_seconds.unwrap_or(0.0)),
        None => "-".to_string(),
    };
    vec![
        label,
        cpu_share(now.cpu.user_seconds, then.cpu.user_seconds),
        cpu_share(now.cpu.system_seconds, then.cpu.system_seconds),
        run_queue_wait,
        now.active.to_string(),
        now.http2.connections_open.to_string(),
        now.http2.streams_open.to_string(),
        per_second(now.accepted.saturating_sub(then.accepted), seconds),
        per_second(now.requests.saturating_sub(then.requests), seconds),
        per_request(
            now.backend_connects.saturating_sub(then.backend_connects),
            now.requests.saturating_sub(then.requests),
        ),
        per_second(
            now.shed_for_room.saturating_sub(then.shed_for_room),
            seconds,
        ),
    ]
}

/// The sum of `workers`' figures, as one worker's. Run-queue wait is summed over the workers
/// that report it (all or none: it is the kernel's), `None` when none does.
fn sum<'a>(workers: impl Iterator<Item = &'a WorkerFigures>) -> WorkerFigures {
    let mut total = WorkerFigures::default();
    for worker in workers {
        total.accepted += worker.accepted;
        total.active += worker.active;
        total.requests += worker.requests;
        total.backend_connects += worker.backend_connects;
        total.shed_for_room += worker.shed_for_room;
        total.cpu.user_seconds += worker.cpu.user_seconds;
        total.cpu.system_seconds += worker.cpu.system_seconds;
        if let Some(wait) = worker.cpu.run_queue_wait_seconds {
            *total.cpu.run_queue_wait_seconds.get_or_insert(0.0) += wait;
        }
        total.http2.connections_open += worker.http2.connections_open;
        total.http2.streams_open += worker.http2.streams_open;
    }
    total
}

/// `POOL SERVER STATE HEALTH REQ/S ERR/S P99MS LATMS CONN/REQ`, a row per server in `later` (and
/// one saying so for a pool without servers); LATMS is peak-ewma's estimate now (`-` without
/// one). Without `earlier`, every server counts from zero.
fn server_rows(earlier: Option<&PoolsReply>, later: &PoolsReply, seconds: f64) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for pool in &later.pools {
        if pool.servers.is_empty() {
            rows.push(vec![pool.name.clone(), "(no servers)".to_string()]);
        }
        let earlier_pool = earlier.and_then(|earlier| {
            earlier
                .pools
                .iter()
                .find(|earlier_pool| earlier_pool.name == pool.name)
        });
        for server in &pool.servers {
            let earlier_server: Option<&ServerReply> = earlier_pool.and_then(|earlier_pool| {
                earlier_pool
                    .servers
                    .iter()
                    .find(|earlier_server| earlier_server.name == server.name)
            });
            let span = match earlier_server {
                Some(then) => server.traffic.since(&then.traffic),
                None => server.traffic.since(&TrafficTotals::default()),
            };
            let p99_ms = span
                .quantile_us(0.99)
                .map_or_else(|| "-".to_string(), |us| format!("{:.2}", us / 1000.0));
            rows.push(vec![
                pool.name.clone(),
                server.name.clone(),
                server.state.clone(),
                server.health.clone(),
                per_second(span.requests, seconds),
                per_second(span.errors(), seconds),
                p99_ms,
                print::latency_ms(server.latency_ms),
                per_request(span.connections_opened, span.requests),
            ]);
        }
    }
    rows
}

/// `POOL CACHE/S HIT% OBJECTS MIB EVICT`, a row per pool that caches: the requests that asked
/// the cache per second, the share of them answered from it (`CacheTotals::hit_ratio`, `-`
/// without any) in the span, and what the store holds of the pool now and has evicted of it.
fn cache_rows(earlier: Option<&PoolsReply>, later: &PoolsReply, seconds: f64) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for pool in &later.pools {
        let Some(cache) = &pool.cache else {
            continue;
        };
        let then = earlier
            .and_then(|earlier| earlier.pools.iter().find(|then| then.name == pool.name))
            .and_then(|then| then.cache)
            .map_or_else(CacheTotals::default, |then| then.requests);
        let span = cache.requests.since(&then);
        let asked = span
            .by_outcome()
            .iter()
            .map(|(_, count)| count)
            .sum::<u64>()
            - span.pass;
        rows.push(vec![
            pool.name.clone(),
            per_second(asked, seconds),
            span.hit_ratio()
                .map_or_else(|| "-".to_string(), |ratio| format!("{:.1}", ratio * 100.0)),
            cache.held.objects.to_string(),
            format!("{:.1}", cache.held.bytes as f64 / (1024.0 * 1024.0)),
            cache.held.evictions.to_string(),
        ]);
    }
    rows
}

fn per_second(count: u64, seconds: f64) -> String {
    format!("{:.1}", count as f64 / seconds)
}

/// Server connections opened per request, to three places; `-` without requests.
fn per_request(connections: u64, requests: u64) -> String {
    if requests == 0 {
        return "-".to_string();
    }
    format!("{:.3}", connections as f64 / requests as f64)
}

/// A fraction of one CPU's time, as a percentage with one decimal.
fn percent(fraction: f64) -> String {
    format!("{:.1}", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::{Duration, Instant};

    /// A sample from the admin API's JSON, `after` the moment `start`.
    fn sample(
        start: Instant,
        after: Duration,
        workers: serde_json::Value,
        pools: serde_json::Value,
    ) -> Sample {
        Sample {
            taken_at: start + after,
            workers: serde_json::from_value(workers).expect("a /api/workers answer"),
            pools: serde_json::from_value(pools).expect("a /api/pools answer"),
        }
    }

    /// A worker as `GET /api/workers` shows it, with the fields `top` ignores too.
    fn worker(
        worker: usize,
        accepted: u64,
        active: u32,
        (requests, backend_connects): (u64, u64),
        cpu: serde_json::Value,
    ) -> serde_json::Value {
        let by_code = [0u64; 14];
        json!({
            "worker": worker, "tid": 4000 + worker, "accepted": accepted, "active": active,
            "parked": 0, "pending_handoffs": 0, "handoffs_sent": 0, "handoffs_received": 0,
            "spurious_wakeups": 0, "restarts": 0, "requests": requests, "rejected": 0,
            "backend_connects": backend_connects, "backend_reuses": 0, "idle_backend": 0,
            "shed_for_room": accepted / 5,
            "handoff_wait_us": { "count": 0, "total": 0, "max": 0 },
            "context_switches": { "voluntary": 0, "involuntary": 0 },
            "cpu": cpu,
            // Worker w has w HTTP/2 connections open with 3·w streams.
            "http2": {
                "connections": 10, "connections_open": worker, "streams": 40,
                "streams_open": 3 * worker, "resets_received": by_code, "resets_sent": by_code,
                "goaways_sent": by_code, "floods": 0,
            },
        })
    }

    fn cpu(user: f64, system: f64, run_queue_wait: Option<f64>) -> serde_json::Value {
        json!({ "user_seconds": user, "system_seconds": system, "run_queue_wait_seconds": run_queue_wait })
    }

    /// A server's traffic: `requests` in all, `fives` of them 5xx, `unanswered` with no answer,
    /// the rest 2xx; `buckets` as (index, count).
    fn traffic(fives: u64, unanswered: u64, buckets: &[(usize, u64)]) -> serde_json::Value {
        traffic_opening(fives, unanswered, buckets, 0)
    }

    /// The same, with `opened` connections opened to the server.
    fn traffic_opening(
        fives: u64,
        unanswered: u64,
        buckets: &[(usize, u64)],
        opened: u64,
    ) -> serde_json::Value {
        let mut counts = vec![0u64; 19];
        for &(index, count) in buckets {
            counts[index] = count;
        }
        let requests: u64 = counts.iter().sum();
        json!({
            "requests": requests,
            "responses": [0, requests - fives - unanswered, 0, 0, fives],
            "unanswered": unanswered, "retries": 0, "connections_opened": opened,
            "duration_sum_us": 0, "buckets": counts,
        })
    }

    fn server(
        name: &str,
        state: &str,
        health: serde_json::Value,
        traffic: serde_json::Value,
    ) -> serde_json::Value {
        let mut server = json!({
            "name": name, "addr": "127.0.0.1:9001", "state": state, "weight": 1,
            "effective_weight": 1, "max_connections": 0, "active": 0, "requests": 0,
            "added_at_run_time": false, "traffic": traffic,
        });
        for (key, value) in health.as_object().unwrap() {
            server[key] = value.clone();
        }
        server
    }

    fn pools(generation: u64, servers: Vec<serde_json::Value>) -> serde_json::Value {
        json!({
            "bucket_bounds_us": herdsman::stats::traffic::BUCKET_BOUNDS_US,
            "generation": generation,
            "pools": [
                { "name": "demo", "balance": "round-robin", "sticky_cookie": null, "queued": 0,
                  "queue_timeouts": 0, "traffic": traffic(0, 0, &[]), "servers": servers },
                { "name": "empty", "balance": "p2c", "sticky_cookie": null, "queued": 0,
                  "queue_timeouts": 0, "traffic": traffic(0, 0, &[]), "servers": [] },
            ],
        })
    }

    fn workers(
        pid: u32,
        workers: Vec<serde_json::Value>,
        overflows: u64,
        drops: u64,
    ) -> serde_json::Value {
        json!({
            "pid": pid, "intake": "balanced", "workers": workers,
            "listen_queue": { "overflows": overflows, "drops": drops },
        })
    }

    /// Two samples 2 s apart: worker 0 busy, worker 1 nearly idle on a kernel without
    /// schedstat; server a served 600 requests (12 of them errors), b is drained and served
    /// none, c was added in between.
    fn two_samples() -> (Sample, Sample) {
        let start = Instant::now();
        let up = json!({ "health": "up" });
        let earlier = sample(
            start,
            Duration::ZERO,
            workers(
                1234,
                vec![
                    worker(0, 100, 20, (1000, 40), cpu(10.0, 5.0, Some(1.0))),
                    worker(1, 50, 3, (400, 7), cpu(2.0, 1.0, None)),
                ],
                7,
                9,
            ),
            pools(
                3,
                vec![
                    server(
                        "a",
                        "ready",
                        up.clone(),
                        traffic_opening(10, 0, &[(3, 1000)], 30),
                    ),
                    server(
                        "backend-b",
                        "drain",
                        json!({ "health": "ejected", "remaining_ms": 900 }),
                        traffic(0, 0, &[(3, 40)]),
                    ),
                ],
            ),
        );
        let later = sample(
            start,
            Duration::from_secs(2),
            workers(
                1234,
                vec![
                    worker(0, 120, 25, (2900, 59), cpu(10.24, 5.16, Some(1.01))),
                    worker(1, 50, 2, (410, 7), cpu(2.0, 1.02, None)),
                ],
                8,
                11,
            ),
            pools(
                4,
                vec![
                    // 1000 + 588 between 0.5 and 1 ms, 12 between 1 and 2.5 ms: p99 is 594th
                    // of 600, halfway into the 1–2.5 ms bucket. Its pool's peak-ewma estimate
                    // (as the API gives it, whatever the pool's balance here) is LATMS.
                    server(
                        "a",
                        "ready",
                        json!({ "health": "up", "latency_ms": 1.237 }),
                        traffic_opening(20, 2, &[(3, 1588), (4, 12)], 36),
                    ),
                    server(
                        "backend-b",
                        "drain",
                        json!({ "health": "ejected", "remaining_ms": 700 }),
                        traffic(0, 0, &[(3, 40)]),
                    ),
                    server("c", "ready", up, traffic(0, 0, &[(0, 10)])),
                ],
            ),
        );
        (earlier, later)
    }

    #[test]
    fn rows_are_the_rates_between_two_samples() {
        let (earlier, later) = two_samples();
        let tables = Tables::between(&earlier, &later);
        let expected = "\
herdsman pid 1234, intake balanced, generation 4, listen queue: 1 overflows, 2 drops in 2.0 s
WORKER  USR%  SYS%  LAT%  CONNS  H2CONNS  H2STREAMS  ACCEPT/S  REQ/S  CONN/REQ  SHED/S
     0  12.0   8.0   0.5     25        0          0      10.0  950.0     0.010     2.0
     1   0.0   1.0     -      2        1          3       0.0    5.0     0.000     0.0
   all  12.0   9.0   0.5     27        1          3      10.0  955.0     0.010     2.0
POOL   SERVER        STATE  HEALTH   REQ/S  ERR/S  P99MS  LATMS  CONN/REQ
demo   a             ready  up       300.0    6.0   1.75   1.24     0.010
demo   backend-b     drain  ejected    0.0    0.0      -      -         -
demo   c             ready  up         5.0    0.0   0.10      -     0.000
empty  (no servers)
";
        assert_eq!(tables.plain_text(), expected);
        assert_eq!(tables.workers.widths(), [6, 4, 4, 4, 5, 7, 9, 8, 5, 8, 6]);
    }

    #[test]
    fn a_new_process_counts_from_zero() {
        let (earlier, mut later) = two_samples();
        later.workers.pid = 5678;
        let tables = Tables::between(&earlier, &later);
        assert!(
            tables
                .summary
                .starts_with("herdsman pid 5678 (was 1234: figures since it started), intake"),
            "{}",
            tables.summary
        );
        // Worker 0: 2900 requests in its 2 s.
        assert_eq!(tables.workers.rows[0][8], "1450.0");
        // Server a: 1600 requests, 20 5xx + 2 unanswered.
        assert_eq!(tables.servers.rows[0][4..6], ["800.0", "11.0"]);
    }

    #[test]
    fn a_caching_pool_gets_a_row_with_its_hit_ratio_in_the_span() {
        let (mut earlier, mut later) = two_samples();
        let cache = |hit: u64, miss: u64, pass: u64, objects: u64| {
            serde_json::from_value(json!({
                "requests": { "hit": hit, "miss": miss, "pass": pass },
                "hit_ratio": null, "objects": objects, "bytes": 3 * 1024 * 1024, "evictions": 2,
            }))
            .unwrap()
        };
        earlier.pools.pools[0].cache = Some(cache(10, 10, 0, 5));
        later.pools.pools[0].cache = Some(cache(40, 20, 6, 7));
        let tables = Tables::between(&earlier, &later);
        // 30 hits and 10 misses in 2 s; the 6 passes did not ask the cache.
        assert_eq!(
            tables.cache.rows,
            [["demo", "20.0", "75.0", "7", "3.0", "2"]]
        );
        assert!(
            tables
                .plain_text()
                .contains("\nPOOL  CACHE/S  HIT%  OBJECTS  MIB  EVICT\ndemo     20.0  75.0        7  3.0      2\n"),
            "{}",
            tables.plain_text()
        );
        // No pool caches: no table.
        let (earlier, later) = two_samples();
        assert!(Tables::between(&earlier, &later).cache.rows.is_empty());
    }

    #[test]
    fn missing_listen_queue_counters_are_said_so() {
        let (mut earlier, later) = two_samples();
        earlier.workers.listen_queue = None;
        let summary = Tables::between(&earlier, &later).summary;
        assert!(
            summary.ends_with("listen queue: not readable in 2.0 s"),
            "{summary}"
        );
    }
}
