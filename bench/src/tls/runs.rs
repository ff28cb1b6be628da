//! What one run of each kind measured, and the figure each gives: handshakes per CPU-second (full
//! with either key, resumed), CPU per request and p99 of keep-alive requests, CPU-seconds per GiB
//! of 1 MiB answers, and resident bytes per idle TLS connection.

use std::time::Duration;

use super::handshakes::Counted;
use super::holder::HeldReport;
use crate::kit::backend::BIG_BODY_LEN;
use crate::kit::certificates::KeyType;
use crate::kit::procstat::CpuTime;
use crate::kit::proxies::ProxyKind;
use crate::kit::tls_metrics::HandshakeCounts;
use crate::kit::wrk::WrkReport;

/// Which proxy a run measured, with how many workers, in which round.
pub trait Run {
    fn round(&self) -> u32;
    fn workers(&self) -> u32;
    fn proxy(&self) -> ProxyKind;
}

macro_rules! run {
    ($type:ty) => {
        impl Run for $type {
            fn round(&self) -> u32 {
                self.round
            }
            fn workers(&self) -> u32 {
                self.workers
            }
            fn proxy(&self) -> ProxyKind {
                self.proxy
            }
        }
    };
}

/// The handshakes a run made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandshakeFigure {
    /// New connections, no session offered, with the certificate on this key.
    Full(KeyType),
    /// Connections resuming the session of the one before (TLS 1.3 tickets), on the ECDSA
    /// listener: a resumption signs nothing, so the key does not matter.
    Resumed,
}

impl HandshakeFigure {
    pub const ALL: [HandshakeFigure; 3] = [
        HandshakeFigure::Full(KeyType::Ecdsa),
        HandshakeFigure::Full(KeyType::Rsa),
        HandshakeFigure::Resumed,
    ];

    pub fn written(self) -> String {
        match self {
            HandshakeFigure::Full(key) => format!("full, {}", key.written()),
            HandshakeFigure::Resumed => "resumed".into(),
        }
    }

    /// The key of the certificate the proxy served.
    pub fn key(self) -> KeyType {
        match self {
            HandshakeFigure::Full(key) => key,
            HandshakeFigure::Resumed => KeyType::Ecdsa,
        }
    }
}

/// Handshakes through one proxy, each with one small request.
#[derive(Debug, Clone)]
pub struct HandshakeRun {
    pub round: u32,
    pub workers: u32,
    pub proxy: ProxyKind,
    pub figure: HandshakeFigure,
    pub counted: Counted,
    /// herdsman's own count over the same window, when the proxy is herdsman.
    pub server: Option<HandshakeCounts>,
}
run!(HandshakeRun);

impl HandshakeRun {
    /// Handshakes completed per second of the proxy's CPU (user + system).
    pub fn per_cpu_second(&self) -> f64 {
        self.counted.handshakes as f64 / self.counted.cpu.total().as_secs_f64().max(1e-9)
    }

    /// Handshakes completed per second of wall time.
    pub fn per_second(&self) -> f64 {
        self.counted.handshakes as f64 / self.counted.seconds.max(1e-9)
    }

    /// CPU-µs of `cpu` per handshake.
    pub fn us_each(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1e6 / self.counted.handshakes.max(1) as f64
    }
}

/// What a wrk run over TLS keep-alive connections asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transfer {
    /// `GET /`, a 19-byte answer.
    Small,
    /// `GET /big`, a 1 MiB answer.
    Big,
}

impl Transfer {
    /// The path asked for.
    pub fn path(self) -> &'static str {
        match self {
            Transfer::Small => "/",
            Transfer::Big => "/big",
        }
    }
}

/// wrk through one proxy over TLS.
#[derive(Debug, Clone)]
pub struct TransferRun {
    pub round: u32,
    pub workers: u32,
    pub proxy: ProxyKind,
    pub transfer: Transfer,
    pub cpu: CpuTime,
    pub wrk: WrkReport,
}
run!(TransferRun);

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;

impl TransferRun {
    /// CPU-µs of `cpu` per request.
    pub fn us_per_request(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1e6 / self.wrk.requests.max(1) as f64
    }

    pub fn cpu_us(&self) -> f64 {
        self.us_per_request(self.cpu.total())
    }

    /// The answers' bodies in GiB: what the proxy decrypted nothing of and encrypted all of.
    pub fn gib(&self) -> f64 {
        let body = match self.transfer {
            Transfer::Small => crate::kit::backend::BODY.len(),
            Transfer::Big => BIG_BODY_LEN,
        };
        self.wrk.requests as f64 * body as f64 / GIB
    }

    /// CPU-seconds of `cpu` per GiB of answer bodies.
    pub fn seconds_per_gib(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() / self.gib().max(1e-12)
    }

    pub fn cpu_per_gib(&self) -> f64 {
        self.seconds_per_gib(self.cpu.total())
    }

    pub fn errors(&self) -> u64 {
        self.wrk.socket_errors + self.wrk.bad_status
    }
}

/// One proxy, freshly started, holding idle TLS connections.
#[derive(Debug, Clone)]
pub struct IdleRun {
    pub round: u32,
    pub workers: u32,
    pub proxy: ProxyKind,
    /// Its processes' resident memory once it served one TLS request, before the holder.
    pub rss_before_kib: u64,
    /// The same with every connection held.
    pub rss_after_kib: u64,
    pub held: HeldReport,
    /// Connections the proxy had closed by the time the holder finished.
    pub closed: u32,
}
run!(IdleRun);

impl IdleRun {
    /// (RSS with the connections − RSS before) ÷ connections.
    pub fn bytes_per_connection(&self) -> f64 {
        (self.rss_after_kib as f64 - self.rss_before_kib as f64) * 1024.0
            / f64::from(self.held.count.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figures_divide_what_was_counted() {
        let run = HandshakeRun {
            round: 1,
            workers: 1,
            proxy: ProxyKind::Herdsman,
            figure: HandshakeFigure::Full(KeyType::Rsa),
            counted: Counted {
                handshakes: 2_000,
                resumed: None,
                failed: 0,
                version: "TLSv1.3".into(),
                seconds: 4.0,
                cpu: CpuTime {
                    user: Duration::from_millis(600),
                    system: Duration::from_millis(400),
                },
            },
            server: None,
        };
        assert_eq!(run.per_cpu_second(), 2_000.0);
        assert_eq!(run.per_second(), 500.0);
        assert_eq!(run.us_each(run.counted.cpu.user), 300.0);
        assert_eq!(HandshakeFigure::Resumed.key(), KeyType::Ecdsa);

        let big = TransferRun {
            round: 1,
            workers: 1,
            proxy: ProxyKind::Nginx,
            transfer: Transfer::Big,
            cpu: CpuTime {
                user: Duration::from_secs(1),
                system: Duration::from_secs(1),
            },
            wrk: crate::kit::wrk::WrkReport {
                requests: 4_096,
                ..crate::kit::wrk::sample_report(1000.0)
            },
        };
        assert_eq!(big.gib(), 4.0);
        assert_eq!(big.cpu_per_gib(), 0.5);

        let idle = IdleRun {
            round: 1,
            workers: 1,
            proxy: ProxyKind::Haproxy,
            rss_before_kib: 10_000,
            rss_after_kib: 30_000,
            held: HeldReport {
                count: 10_000,
                tls13: 10_000,
                full: 10_000,
            },
            closed: 0,
        };
        assert_eq!(idle.bytes_per_connection(), 2048.0);
    }
}
