//! A worker's response compression: answers compressed and their bytes in and out per
//! algorithm, and answers left as they were by the reason why.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why an answer on a route that compresses went as the server sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// The client accepts none of the route's algorithms (or prefers `identity`).
    NotAccepted,
    /// A HEAD request (no body to compress).
    Head,
    /// A request with `Range`, or a 206: byte ranges of a compressed body mean nothing.
    Range,
    /// A gRPC call (its messages have compression of their own), or an upgrade.
    Stream,
    /// The route caches: its answers are stored and served as the server sent them.
    Cached,
    /// A status without a body to compress (1xx, 204, 304).
    Status,
    /// The server encoded it already (`Content-Encoding`).
    Encoded,
    /// `Cache-Control: no-transform`.
    NoTransform,
    /// A content type not in `types` (or none).
    Type,
    /// A `Content-Length` below `min_length`.
    TooSmall,
}

/// How many reasons there are.
pub const REASONS: usize = 10;

impl Skipped {
    pub const ALL: [Skipped; REASONS] = [
        Skipped::NotAccepted,
        Skipped::Head,
        Skipped::Range,
        Skipped::Stream,
        Skipped::Cached,
        Skipped::Status,
        Skipped::Encoded,
        Skipped::NoTransform,
        Skipped::Type,
        Skipped::TooSmall,
    ];

    /// The reason as the metrics name it.
    pub fn name(self) -> &'static str {
        match self {
            Skipped::NotAccepted => "not_accepted",
            Skipped::Head => "head",
            Skipped::Range => "range",
            Skipped::Stream => "stream",
            Skipped::Cached => "cached",
            Skipped::Status => "status",
            Skipped::Encoded => "encoded",
            Skipped::NoTransform => "no_transform",
            Skipped::Type => "type",
            Skipped::TooSmall => "too_small",
        }
    }
}

/// The algorithms counted, in `config::Algorithm::ALL`'s order.
pub const ALGORITHMS: usize = 3;

/// One worker's compression counters (touched only by answers on routes that compress).
#[derive(Debug, Default)]
pub struct CompressionCounters {
    /// Answers compressed, by algorithm.
    pub compressed: [AtomicU64; ALGORITHMS],
    /// Body bytes the server sent, by algorithm.
    pub bytes_in: [AtomicU64; ALGORITHMS],
    /// Body bytes the client got (compressed, framing not counted), by algorithm.
    pub bytes_out: [AtomicU64; ALGORITHMS],
    /// Answers not compressed, by [`Skipped`] in the order of `ALL`.
    pub skipped: [AtomicU64; REASONS],
}

/// Every worker's compression counters summed, as read at one moment.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CompressionReport {
    pub compressed: [u64; ALGORITHMS],
    pub bytes_in: [u64; ALGORITHMS],
    pub bytes_out: [u64; ALGORITHMS],
    pub skipped: [u64; REASONS],
}

impl CompressionCounters {
    pub fn skipped(&self, why: Skipped) {
        self.skipped[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// An answer compressed with the algorithm at `index`: `bytes_in` of body became
    /// `bytes_out` (counted once it ended, or failed).
    pub fn compressed(&self, index: usize, bytes_in: u64, bytes_out: u64) {
        self.compressed[index].fetch_add(1, Ordering::Relaxed);
        self.bytes_in[index].fetch_add(bytes_in, Ordering::Relaxed);
        self.bytes_out[index].fetch_add(bytes_out, Ordering::Relaxed);
    }

    /// Adds this worker's counters to `report`.
    pub fn add_to(&self, report: &mut CompressionReport) {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        for i in 0..ALGORITHMS {
            report.compressed[i] += load(&self.compressed[i]);
            report.bytes_in[i] += load(&self.bytes_in[i]);
            report.bytes_out[i] += load(&self.bytes_out[i]);
        }
        for i in 0..REASONS {
            report.skipped[i] += load(&self.skipped[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_add_up_and_reasons_keep_their_place() {
        let (one, two) = (
            CompressionCounters::default(),
            CompressionCounters::default(),
        );
        one.compressed(2, 1000, 300);
        two.compressed(2, 500, 100);
        two.skipped(Skipped::TooSmall);
        let mut report = CompressionReport::default();
        one.add_to(&mut report);
        two.add_to(&mut report);
        assert_eq!(report.compressed, [0, 0, 2]);
        assert_eq!((report.bytes_in[2], report.bytes_out[2]), (1500, 400));
        assert_eq!(report.skipped[Skipped::TooSmall as usize], 1);
        assert_eq!(Skipped::ALL[Skipped::TooSmall as usize], Skipped::TooSmall);
    }
}
