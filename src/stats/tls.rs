//! A worker's TLS handshakes: how many finished (full or resumed), how many failed and why, how
//! long they took, and how many are under way now.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Why a handshake on a TLS listener failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailed {
    /// Cleartext HTTP came to the TLS port (answered 400).
    PlainHttp,
    /// The first bytes were neither TLS nor HTTP.
    NotTls,
    /// The client closed or reset the connection mid-handshake.
    Closed,
    /// The client named a host the listener has no certificate for, and it refuses those.
    UnknownName,
    /// A client certificate was required and none was sent, or it did not verify.
    ClientCertificate,
    /// The client offered ALPN protocols and none herdsman speaks (`h2` alone, say).
    Alpn,
    /// Any other breach of TLS, or nothing in common (versions, ciphers, groups).
    Protocol,
    /// The socket failed.
    Io,
    /// `[timeouts] tls_handshake` passed.
    Timeout,
}

/// How many reasons a handshake can fail for.
pub const REASONS: usize = 9;

impl HandshakeFailed {
    pub const ALL: [HandshakeFailed; REASONS] = [
        HandshakeFailed::PlainHttp,
        HandshakeFailed::NotTls,
        HandshakeFailed::Closed,
        HandshakeFailed::UnknownName,
        HandshakeFailed::ClientCertificate,
        HandshakeFailed::Alpn,
        HandshakeFailed::Protocol,
        HandshakeFailed::Io,
        HandshakeFailed::Timeout,
    ];

    /// The reason as the metrics and the log name it.
    pub fn name(self) -> &'static str {
        match self {
            HandshakeFailed::PlainHttp => "plain_http",
            HandshakeFailed::NotTls => "not_tls",
            HandshakeFailed::Closed => "closed",
            HandshakeFailed::UnknownName => "unknown_name",
            HandshakeFailed::ClientCertificate => "client_certificate",
            HandshakeFailed::Alpn => "alpn",
            HandshakeFailed::Protocol => "protocol",
            HandshakeFailed::Io => "io",
            HandshakeFailed::Timeout => "timeout",
        }
    }
}

/// Upper bounds of the handshake time histogram's buckets, in milliseconds (then +Inf).
pub const HANDSHAKE_BUCKETS_MS: [u64; 12] = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000];

/// One worker's handshake counters.
#[derive(Debug, Default)]
pub struct TlsCounters {
    pub full: AtomicU64,
    /// Resumed from a ticket or a TLS 1.2 session id.
    pub resumed: AtomicU64,
    /// Failed, by [`HandshakeFailed`] in the order of `ALL`.
    pub failed: [AtomicU64; REASONS],
    /// Finished handshakes by time taken, cumulative as Prometheus wants them: `buckets[i]` counts
    /// those within `HANDSHAKE_BUCKETS_MS[i]`; the last counts them all.
    pub buckets: [AtomicU64; 13],
    /// Their total time, µs.
    pub total_us: AtomicU64,
}

/// One worker's handshake counters as read at one moment.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TlsReport {
    pub full: u64,
    pub resumed: u64,
    /// By [`HandshakeFailed`], in the order of `ALL`.
    pub failed: [u64; REASONS],
    /// Under way now (the worker's `WorkerLoad::handshaking`).
    pub in_progress: u32,
    /// Cumulative, as in [`TlsCounters::buckets`].
    pub buckets: [u64; 13],
    pub total_us: u64,
}

impl TlsCounters {
    /// The counters now, with `in_progress` handshakes under way (the worker's load says).
    pub fn report(&self, in_progress: u32) -> TlsReport {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        TlsReport {
            full: load(&self.full),
            resumed: load(&self.resumed),
            failed: std::array::from_fn(|i| load(&self.failed[i])),
            in_progress,
            buckets: std::array::from_fn(|i| load(&self.buckets[i])),
            total_us: load(&self.total_us),
        }
    }

    /// A handshake that finished in `took`.
    pub fn finished(&self, resumed: bool, took: Duration) {
        let counter = if resumed { &self.resumed } else { &self.full };
        counter.fetch_add(1, Ordering::Relaxed);
        let ms = took.as_millis() as u64;
        let first = HANDSHAKE_BUCKETS_MS
            .iter()
            .position(|&bound| ms < bound)
            .unwrap_or(HANDSHAKE_BUCKETS_MS.len());
        for bucket in &self.buckets[first..] {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.total_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn failed(&self, why: HandshakeFailed) {
        let index = HandshakeFailed::ALL
            .iter()
            .position(|&w| w == why)
            .unwrap_or(0);
        self.failed[index].fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handshake_counts_in_its_bucket_and_every_wider_one() {
        let counters = TlsCounters::default();
        counters.finished(false, Duration::from_micros(3_500));
        counters.finished(true, Duration::from_secs(20));
        let buckets: Vec<u64> = counters
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        assert_eq!(buckets, [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]);
        assert_eq!(counters.full.load(Ordering::Relaxed), 1);
        assert_eq!(counters.resumed.load(Ordering::Relaxed), 1);
        assert_eq!(counters.total_us.load(Ordering::Relaxed), 20_003_500);
        counters.failed(HandshakeFailed::Timeout);
        assert_eq!(counters.failed[8].load(Ordering::Relaxed), 1);
    }
}
