//! What a client's frames may cost before any request: the frames that make a server work without
//! asking it anything (SETTINGS, PING, PRIORITY, WINDOW_UPDATE, RST_STREAM, DATA and
//! CONTINUATION without payload, unknown types) spend a budget that each new stream and each
//! second refill. The attacks of 2019 (CVE-2019-9512 to 9518: ping, settings, reset, empty-frame
//! floods) and 2023 (rapid reset, CVE-2023-44487: streams opened and reset at once) all spend it;
//! a client that spends it all is sent GOAWAY with ENHANCE_YOUR_CALM. A browser's cancelled
//! streams and window updates stay far inside it. Resets have a budget of their own besides,
//! which new streams do not refill: a stream opened earns more frames than its reset costs, so
//! without it a client that opens each stream, lets it reach a server and resets it could go on
//! for ever.

use tokio::time::Instant;

/// The limits of the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Frames a connection may spend before it has earned any: the burst a client may send.
    pub burst: u32,
    /// Frames each new stream (a HEADERS frame that opens one) earns: the window updates, the
    /// priority, the reset a request may bring with it.
    pub per_stream: u32,
    /// Frames each second earns (a keep-alive PING now and then, settings changes).
    pub per_second: u32,
    /// Streams the client may reset (RST_STREAM) before it has earned any, and each second's
    /// earnings: only time refills these.
    pub reset_burst: u32,
    pub resets_per_second: u32,
}

/// Something a client may spend, `burst` at most, refilled by the clock (`per_second`) and
/// by whatever else earns it.
#[derive(Debug, Clone)]
pub struct Bucket {
    burst: u32,
    per_second: u32,
    /// Left to spend.
    left: u32,
    /// When `left` was last refilled by the clock.
    refilled: Instant,
}

impl Bucket {
    pub fn new(burst: u32, per_second: u32, now: Instant) -> Bucket {
        Bucket {
            burst,
            per_second,
            left: burst,
            refilled: now,
        }
    }

    pub fn earn(&mut self, units: u32) {
        self.left = self.left.saturating_add(units).min(self.burst);
    }

    /// Spends one; false when none is left, even after what the clock earned.
    pub fn spend(&mut self, now: Instant) -> bool {
        if self.left == 0 {
            let seconds = now.saturating_duration_since(self.refilled).as_secs_f64();
            let earned = (seconds * f64::from(self.per_second)) as u32;
            if earned > 0 {
                self.earn(earned);
                self.refilled = now;
            }
        }
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_bucket_spends_its_burst_then_what_time_and_earnings_give() {
        let start = Instant::now();
        let mut bucket = Bucket::new(3, 10, start);
        assert!((0..3).all(|_| bucket.spend(start)));
        assert!(!bucket.spend(start), "the burst is spent");
        bucket.earn(1);
        assert!(bucket.spend(start));
        assert!(!bucket.spend(start));
        // A second earns 10, but never more than the burst.
        let later = start + Duration::from_secs(1);
        assert!((0..3).all(|_| bucket.spend(later)));
        assert!(!bucket.spend(later));
    }
}
