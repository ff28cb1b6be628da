//! A worker's HTTP/2 client connections: how many it opened and has open, their streams, the
//! resets each way and the GOAWAYs it sent, by error code, and the floods it ended.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The error codes of RFC 9113 §7, in order: a code's counter is at its value.
pub const CODES: [&str; 14] = [
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
];

/// One worker's HTTP/2 counters; only the worker writes them.
#[derive(Debug, Default)]
pub struct Http2Counters {
    pub connections: AtomicU64,
    pub connections_open: AtomicU32,
    pub streams: AtomicU64,
    pub streams_open: AtomicU32,
    /// RST_STREAM frames by error code (an unknown code counts as INTERNAL_ERROR).
    pub resets_received: [AtomicU64; 14],
    pub resets_sent: [AtomicU64; 14],
    pub goaways_sent: [AtomicU64; 14],
    /// Connections ended with GOAWAY ENHANCE_YOUR_CALM: a budget of `session::h2::budget`
    /// spent, or one of `[http2]`'s flood limits passed.
    pub floods: AtomicU64,
}

/// One worker's HTTP/2 counters as read at one moment (`/api/workers`' `http2`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Http2Report {
    pub connections: u64,
    pub connections_open: u32,
    pub streams: u64,
    pub streams_open: u32,
    /// By error code, in the order of [`CODES`].
    pub resets_received: [u64; 14],
    pub resets_sent: [u64; 14],
    pub goaways_sent: [u64; 14],
    pub floods: u64,
}

/// The counter of error `code` in `counters`.
fn by_code(counters: &[AtomicU64; 14], code: u32) -> &AtomicU64 {
    &counters[usize::try_from(code).ok().filter(|&c| c < 14).unwrap_or(2)]
}

fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

fn add(gauge: &AtomicU32, delta: i32) {
    let now = gauge.load(Ordering::Relaxed);
    gauge.store(now.saturating_add_signed(delta), Ordering::Relaxed);
}

impl Http2Counters {
    pub fn report(&self) -> Http2Report {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Http2Report {
            connections: load(&self.connections),
            connections_open: self.connections_open.load(Ordering::Relaxed),
            streams: load(&self.streams),
            streams_open: self.streams_open.load(Ordering::Relaxed),
            resets_received: std::array::from_fn(|i| load(&self.resets_received[i])),
            resets_sent: std::array::from_fn(|i| load(&self.resets_sent[i])),
            goaways_sent: std::array::from_fn(|i| load(&self.goaways_sent[i])),
            floods: load(&self.floods),
        }
    }

    pub fn connection_opened(&self) {
        bump(&self.connections);
        add(&self.connections_open, 1);
    }

    pub fn connection_closed(&self) {
        add(&self.connections_open, -1);
    }

    pub fn stream_opened(&self) {
        bump(&self.streams);
        add(&self.streams_open, 1);
    }

    pub fn stream_closed(&self) {
        add(&self.streams_open, -1);
    }

    pub fn reset_received(&self, code: u32) {
        bump(by_code(&self.resets_received, code));
    }

    pub fn reset_sent(&self, code: u32) {
        bump(by_code(&self.resets_sent, code));
    }

    pub fn goaway_sent(&self, code: u32) {
        bump(by_code(&self.goaways_sent, code));
    }

    pub fn flood(&self) {
        bump(&self.floods);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_go_by_code_and_gauges_go_up_and_down() {
        let counters = Http2Counters::default();
        counters.connection_opened();
        counters.stream_opened();
        counters.stream_opened();
        counters.stream_closed();
        counters.reset_received(8);
        counters.reset_sent(99);
        counters.goaway_sent(11);
        let report = counters.report();
        assert_eq!((report.connections, report.connections_open), (1, 1));
        assert_eq!((report.streams, report.streams_open), (2, 1));
        assert_eq!(report.resets_received[8], 1, "CANCEL");
        assert_eq!(
            report.resets_sent[2], 1,
            "an unknown code counts as INTERNAL_ERROR"
        );
        assert_eq!(report.goaways_sent[11], 1, "ENHANCE_YOUR_CALM");
        assert_eq!(CODES[11], "ENHANCE_YOUR_CALM");
    }
}
