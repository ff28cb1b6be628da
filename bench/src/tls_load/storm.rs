//! What herdsman's workers did under the handshake storm: over a window, each worker's handshakes
//! (herdsman's own count, /metrics) and its thread's CPU time (/proc, the thread named
//! `herdsman-wN`), with their coefficient of variation across workers.

use anyhow::Context;

use crate::kit::procstat::{self, CpuTime};
use crate::kit::stats::balance;
use crate::kit::tls_metrics::{self, TlsMetrics};

/// herdsman's workers at one moment: its handshake counts, and each worker thread's CPU time.
#[derive(Debug, Clone)]
pub struct WorkersReading {
    metrics: TlsMetrics,
    /// By worker index.
    cpu: Vec<CpuTime>,
}

/// The name herdsman gives worker `index`'s thread.
fn worker_thread(index: u32) -> String {
    format!("herdsman-w{index}")
}

/// Reads herdsman's (process `pid`, admin API on `admin_port`) `workers` workers now.
pub fn read_workers(pid: u32, admin_port: u16, workers: u32) -> anyhow::Result<WorkersReading> {
    let metrics = tls_metrics::read(admin_port)?;
    let cpu = (0..workers)
        .map(|index| {
            let name = worker_thread(index);
            procstat::thread_cpu(pid, &name)
                .with_context(|| format!("herdsman (pid {pid}) has no thread {name}"))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(WorkersReading { metrics, cpu })
}

/// What the workers did over a window, by worker.
#[derive(Debug, Clone, PartialEq)]
pub struct PerWorker {
    /// Handshakes completed (full and resumed), by herdsman's own count.
    pub handshakes: Vec<u64>,
    /// Requests finished: the storm's clients make none, so these are the established
    /// connections' (wrk's), and their spread is how those connections were spread.
    pub requests: Vec<u64>,
    /// Each worker thread's CPU time.
    pub cpu: Vec<CpuTime>,
    /// Each worker's open client connections halfway through the window (`/api/workers`), when
    /// read; empty otherwise.
    pub open_midway: Vec<u64>,
}

impl PerWorker {
    /// What the workers did between `earlier` and `later`.
    pub fn between(earlier: &WorkersReading, later: &WorkersReading) -> PerWorker {
        PerWorker {
            handshakes: later.metrics.handshakes_per_worker_since(&earlier.metrics),
            requests: later.metrics.requests_per_worker_since(&earlier.metrics),
            cpu: later
                .cpu
                .iter()
                .zip(&earlier.cpu)
                .map(|(later, earlier)| later.since(*earlier))
                .collect(),
            open_midway: Vec::new(),
        }
    }

    /// The coefficient of variation of the handshakes across workers; NaN when none were made.
    pub fn handshakes_cv(&self) -> f64 {
        balance(&self.handshakes).map_or(f64::NAN, |b| b.cv)
    }

    /// The coefficient of variation of the requests across workers; NaN when none were made.
    pub fn requests_cv(&self) -> f64 {
        balance(&self.requests).map_or(f64::NAN, |b| b.cv)
    }

    /// The coefficient of variation of the CPU time across workers (at µs resolution).
    pub fn cpu_cv(&self) -> f64 {
        let micros: Vec<u64> = self
            .cpu
            .iter()
            .map(|cpu| cpu.total().as_micros() as u64)
            .collect();
        balance(&micros).map_or(f64::NAN, |b| b.cv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::tls_metrics::{HandshakeCounts, WorkerTls};
    use std::time::Duration;

    fn reading(handshakes: [u64; 2], cpu_ms: [u64; 2]) -> WorkersReading {
        WorkersReading {
            metrics: TlsMetrics {
                workers: (0..2)
                    .map(|w| WorkerTls {
                        worker: w,
                        handshakes: HandshakeCounts {
                            full: handshakes[w as usize],
                            resumed: 0,
                        },
                        ..WorkerTls::default()
                    })
                    .collect(),
            },
            cpu: cpu_ms
                .iter()
                .map(|&ms| CpuTime {
                    user: Duration::from_millis(ms),
                    system: Duration::ZERO,
                })
                .collect(),
        }
    }

    #[test]
    fn the_workers_share_is_their_growth_and_its_spread() {
        let before = reading([100, 50], [1_000, 2_000]);
        let after = reading([1_100, 1_150], [1_900, 3_100]);
        let share = PerWorker::between(&before, &after);
        assert_eq!(share.handshakes, vec![1_000, 1_100]);
        // |1000 − 1100| ÷ (1000 + 1100).
        assert!((share.handshakes_cv() - 100.0 / 2_100.0).abs() < 1e-12);
        // 900 and 1,100 ms: 0.1.
        assert!((share.cpu_cv() - 0.1).abs() < 1e-12);
        assert!(PerWorker::between(&before, &before)
            .handshakes_cv()
            .is_nan());
        assert_eq!(worker_thread(1), "herdsman-w1");
    }
}
