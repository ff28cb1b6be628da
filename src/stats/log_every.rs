//! A warning that may come thousands of times a second (a client population failing the same
//! way) logged at most once per interval, process-wide, saying how many were held back since.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Lets one of a kind of warning through per interval; counts the others.
#[derive(Debug, Default)]
pub struct LogEvery {
    /// Milliseconds since the process's first use of any `LogEvery` before which none may be
    /// logged (0: the next may).
    next_ms: AtomicU64,
    /// Those held back since the last one logged.
    held_back: AtomicU64,
}

/// The clock all `LogEvery`s count from.
fn elapsed_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl LogEvery {
    pub const fn new() -> LogEvery {
        LogEvery {
            next_ms: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
        }
    }

    /// Whether this one may be logged (then `Some`, with how many were held back since the last
    /// one), or is held back and counted (`None`). At most one per `every`, whichever thread asks.
    pub fn allow(&self, every: Duration) -> Option<u64> {
        let now = elapsed_ms();
        let next = self.next_ms.load(Ordering::Relaxed);
        let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
        let ours = now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now.saturating_add(every_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok();
        match ours {
            true => Some(self.held_back.swap(0, Ordering::Relaxed)),
            false => {
                self.held_back.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_let_through_per_interval_and_the_rest_are_counted() {
        let log = LogEvery::new();
        assert_eq!(log.allow(Duration::from_millis(50)), Some(0));
        for _ in 0..5 {
            assert_eq!(log.allow(Duration::from_millis(50)), None);
        }
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(log.allow(Duration::from_millis(50)), Some(5));
        assert_eq!(log.allow(Duration::from_millis(50)), None);
    }
}
