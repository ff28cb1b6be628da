//! herdsman's own TLS figures per worker, from `/metrics` on its admin API: the handshakes each
//! worker completed (full, resumed), those that failed by reason (`timeout` among them: `[timeouts]
//! tls_handshake` passed), and those under way now; beside them each worker's requests, which tell
//! how the established connections were spread. The server's side of what the clients counted;
//! HAProxy and nginx keep no such count without more configuration (a stats socket, an access log
//! with `$ssl_session_reused`), so for them the client's count stands alone.

use anyhow::Context;

use crate::kit::admin_api;

/// Handshakes completed so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandshakeCounts {
    pub full: u64,
    pub resumed: u64,
}

impl HandshakeCounts {
    /// What was counted between `earlier` and this reading.
    pub fn since(self, earlier: HandshakeCounts) -> HandshakeCounts {
        HandshakeCounts {
            full: self.full.saturating_sub(earlier.full),
            resumed: self.resumed.saturating_sub(earlier.resumed),
        }
    }

    /// Full and resumed together.
    pub fn total(self) -> u64 {
        self.full + self.resumed
    }
}

/// One worker's TLS figures at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerTls {
    /// The `worker` label.
    pub worker: u32,
    pub handshakes: HandshakeCounts,
    /// Failed handshakes by reason (`timeout`, `closed`, …), in the order /metrics lists them.
    pub failed: Vec<(String, u64)>,
    /// Handshakes under way now (a gauge).
    pub in_progress: u64,
    /// Requests the worker finished (`herdsman_worker_requests_total`).
    pub requests: u64,
}

impl WorkerTls {
    fn failed_for(&self, reason: &str) -> u64 {
        self.failed
            .iter()
            .filter(|(why, _)| why == reason)
            .map(|&(_, count)| count)
            .sum()
    }
}

/// herdsman's TLS figures at one moment, by worker in the order /metrics lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsMetrics {
    pub workers: Vec<WorkerTls>,
}

impl TlsMetrics {
    /// Handshakes completed, summed over workers.
    pub fn handshakes(&self) -> HandshakeCounts {
        self.workers
            .iter()
            .fold(HandshakeCounts::default(), |sum, w| HandshakeCounts {
                full: sum.full + w.handshakes.full,
                resumed: sum.resumed + w.handshakes.resumed,
            })
    }

    /// Handshakes failed for `reason` (`timeout`, say), summed over workers.
    pub fn failed(&self, reason: &str) -> u64 {
        self.workers.iter().map(|w| w.failed_for(reason)).sum()
    }

    /// Handshakes under way now, summed over workers.
    pub fn in_progress(&self) -> u64 {
        self.workers.iter().map(|w| w.in_progress).sum()
    }

    /// Each worker's handshakes completed (full and resumed) since `earlier`, in worker order.
    pub fn handshakes_per_worker_since(&self, earlier: &TlsMetrics) -> Vec<u64> {
        self.per_worker_since(earlier, |w| w.handshakes.total())
    }

    /// Each worker's requests finished since `earlier`, in worker order.
    pub fn requests_per_worker_since(&self, earlier: &TlsMetrics) -> Vec<u64> {
        self.per_worker_since(earlier, |w| w.requests)
    }

    /// Each worker's growth of the counter `count` since `earlier` (from 0 for a worker not
    /// seen then), in worker order.
    fn per_worker_since(&self, earlier: &TlsMetrics, count: fn(&WorkerTls) -> u64) -> Vec<u64> {
        self.workers
            .iter()
            .map(|now| {
                let before = earlier
                    .workers
                    .iter()
                    .find(|w| w.worker == now.worker)
                    .map_or(0, count);
                count(now).saturating_sub(before)
            })
            .collect()
    }

    /// The worker with label `worker`, created when first seen.
    fn worker(&mut self, worker: u32) -> &mut WorkerTls {
        let index = match self.workers.iter().position(|w| w.worker == worker) {
            Some(index) => index,
            None => {
                self.workers.push(WorkerTls {
                    worker,
                    ..WorkerTls::default()
                });
                self.workers.len() - 1
            }
        };
        &mut self.workers[index]
    }
}

/// The figures herdsman's admin API on 127.0.0.1:`admin_port` reports now.
pub fn read(admin_port: u16) -> anyhow::Result<TlsMetrics> {
    let body = admin_api::get(admin_port, "/metrics")?;
    parse(&String::from_utf8_lossy(&body)).context("herdsman's /metrics has no handshake counts")
}

/// Reads `herdsman_worker_tls_handshakes_total{worker="…",kind="full|resumed"} N`,
/// `herdsman_worker_tls_handshake_failures_total{worker="…",reason="…"} N` and
/// `herdsman_worker_tls_handshakes_in_progress{worker="…"} N` and
/// `herdsman_worker_requests_total{worker="…"} N`; None without a handshake count.
fn parse(metrics: &str) -> Option<TlsMetrics> {
    let mut read = TlsMetrics::default();
    let mut seen = false;
    for line in metrics.lines() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let family = match name {
            "herdsman_worker_tls_handshakes_total" => Family::Completed,
            "herdsman_worker_tls_handshake_failures_total" => Family::Failed,
            "herdsman_worker_tls_handshakes_in_progress" => Family::InProgress,
            "herdsman_worker_requests_total" => Family::Requests,
            _ => continue,
        };
        let (labels, value) = rest.split_once('}')?;
        let value = value.trim().parse::<f64>().ok()? as u64;
        let worker = read.worker(label(labels, "worker")?.parse().ok()?);
        match family {
            Family::Completed => {
                match label(labels, "kind")? {
                    "full" => worker.handshakes.full += value,
                    "resumed" => worker.handshakes.resumed += value,
                    _ => {}
                }
                seen = true;
            }
            Family::Failed => worker
                .failed
                .push((label(labels, "reason")?.to_string(), value)),
            Family::InProgress => worker.in_progress += value,
            Family::Requests => worker.requests += value,
        }
    }
    seen.then_some(read)
}

/// The metric families read.
enum Family {
    Completed,
    Failed,
    InProgress,
    Requests,
}

/// The value of `name="value"` in a metric's labels.
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key.trim() == name).then(|| value.trim().trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "\
# TYPE herdsman_worker_tls_handshakes_total counter
herdsman_worker_tls_handshakes_total{worker=\"0\",kind=\"full\"} 21
herdsman_worker_tls_handshakes_total{worker=\"0\",kind=\"resumed\"} 1980
herdsman_worker_tls_handshakes_total{worker=\"1\",kind=\"full\"} 4
herdsman_worker_tls_handshakes_total{worker=\"1\",kind=\"resumed\"} 20
herdsman_worker_tls_handshake_failures_total{worker=\"0\",reason=\"closed\"} 3
herdsman_worker_tls_handshake_failures_total{worker=\"0\",reason=\"timeout\"} 500
herdsman_worker_tls_handshake_failures_total{worker=\"1\",reason=\"timeout\"} 498
herdsman_worker_tls_handshakes_in_progress{worker=\"0\"} 510
herdsman_worker_tls_handshakes_in_progress{worker=\"1\"} 490
herdsman_worker_tls_handshake_duration_seconds_bucket{worker=\"0\",le=\"0.001\"} 7
herdsman_worker_requests_total{worker=\"0\"} 900
herdsman_worker_requests_total{worker=\"1\"} 1100
";

    #[test]
    fn the_counts_are_read_per_worker_and_summed() {
        let read = parse(METRICS).unwrap();
        assert_eq!(read.workers.len(), 2);
        assert_eq!(
            read.handshakes(),
            HandshakeCounts {
                full: 25,
                resumed: 2000
            }
        );
        assert_eq!(read.failed("timeout"), 998);
        assert_eq!(read.failed("closed"), 3);
        assert_eq!(read.failed("io"), 0);
        assert_eq!(read.in_progress(), 1000);
        assert_eq!(
            read.handshakes().since(HandshakeCounts {
                full: 5,
                resumed: 1000
            }),
            HandshakeCounts {
                full: 20,
                resumed: 1000
            }
        );
        let mut earlier = read.clone();
        earlier.workers[1].handshakes.full = 0;
        assert_eq!(read.handshakes_per_worker_since(&earlier), vec![0, 4]);
        earlier.workers[0].requests = 400;
        assert_eq!(read.requests_per_worker_since(&earlier), vec![500, 0]);
        assert_eq!(parse("herdsman_up 1\n"), None);
    }
}
