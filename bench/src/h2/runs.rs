//! What one h2load run against one proxy measured, and the figures it gives: requests/s, p99,
//! CPU-µs per request (user and kernel apart) and resident memory. A gRPC call is a request here.

use crate::kit::h2load::{StreamLoad, StreamReport};
use crate::kit::procstat::CpuTime;
use crate::kit::proxies::ProxyKind;

use super::settings::Traffic;

/// Where a run sits in the results: a worker count, a traffic (GETs over a transport, or gRPC
/// calls) and a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    pub workers: u32,
    pub traffic: Traffic,
    /// Its `seconds` are the run's; cells are told apart by clients and streams.
    pub load: StreamLoad,
}

impl Cell {
    /// Whether `other` is the same cell (the same worker count, traffic, clients and streams).
    pub fn is(&self, other: &Cell) -> bool {
        self.workers == other.workers
            && self.traffic == other.traffic
            && (self.load.clients, self.load.streams) == (other.load.clients, other.load.streams)
    }

    /// How a rate and "per request" are written for it: "req/s" and "req", or "calls/s" and
    /// "call" in a gRPC cell.
    pub fn units(&self) -> (&'static str, &'static str) {
        match self.traffic {
            Traffic::Grpc => ("calls/s", "call"),
            Traffic::Requests(_) => ("req/s", "req"),
        }
    }

    /// "1 worker, TLS, 50 × 10"; "1 worker, gRPC, 50 × 10".
    pub fn written(&self) -> String {
        format!(
            "{}, {}, {}",
            crate::kit::markdown::worker_count(self.workers),
            self.traffic,
            self.load.written()
        )
    }
}

/// One proxy under one cell's load for one round.
#[derive(Debug, Clone)]
pub struct H2Run {
    pub round: u32,
    pub cell: Cell,
    pub proxy: ProxyKind,
    /// The proxy's process tree's CPU time over the run (/proc, just before h2load starts and
    /// just after it ends).
    pub cpu: CpuTime,
    pub report: StreamReport,
    /// The proxy's process tree's resident memory halfway through the run, under load.
    pub rss_kib: u64,
    /// CPUs that processes outside the benchmark used over the run.
    pub other_cpus: f64,
}

impl H2Run {
    /// CPU time per answered request, in µs, of `part` of the proxy's CPU time.
    fn per_request_us(&self, part: std::time::Duration) -> f64 {
        part.as_secs_f64() * 1e6 / self.report.answered.max(1) as f64
    }

    pub fn cpu_us(&self) -> f64 {
        self.per_request_us(self.cpu.total())
    }

    pub fn user_us(&self) -> f64 {
        self.per_request_us(self.cpu.user)
    }

    pub fn system_us(&self) -> f64 {
        self.per_request_us(self.cpu.system)
    }

    pub fn requests_per_sec(&self) -> f64 {
        self.report.requests_per_sec
    }

    /// p99 in ms; NaN without an answered request (never, for a run that is kept).
    pub fn p99_ms(&self) -> f64 {
        self.report.p99_us.map_or(f64::NAN, |us| us / 1000.0)
    }

    pub fn rss_mib(&self) -> f64 {
        self.rss_kib as f64 / 1024.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h2::settings::Transport;
    use std::time::Duration;

    #[test]
    fn per_request_figures_divide_by_the_answered() {
        let run = H2Run {
            round: 1,
            cell: Cell {
                workers: 1,
                traffic: Traffic::Requests(Transport::Tls),
                load: StreamLoad {
                    clients: 50,
                    streams: 10,
                    seconds: 5,
                },
            },
            proxy: ProxyKind::Herdsman,
            cpu: CpuTime {
                user: Duration::from_millis(300),
                system: Duration::from_millis(700),
            },
            report: StreamReport {
                answered: 100_000,
                failed: 0,
                requests_per_sec: 20_000.0,
                p50_us: Some(900.0),
                p99_us: Some(2_500.0),
                protocol: Some("h2".into()),
            },
            rss_kib: 10_240,
            other_cpus: 0.0,
        };
        assert_eq!(
            (run.cpu_us(), run.user_us(), run.system_us()),
            (10.0, 3.0, 7.0)
        );
        assert_eq!((run.p99_ms(), run.rss_mib()), (2.5, 10.0));
        assert_eq!(run.cell.written(), "1 worker, TLS, 50 × 10");
        let other = Cell {
            load: StreamLoad {
                seconds: 9,
                ..run.cell.load
            },
            ..run.cell
        };
        assert!(run.cell.is(&other));
        let grpc = Cell {
            traffic: Traffic::Grpc,
            ..run.cell
        };
        assert!(!run.cell.is(&grpc));
        assert_eq!(grpc.written(), "1 worker, gRPC, 50 × 10");
    }
}
