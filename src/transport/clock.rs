//! The request path's clock: [`Moment`], a reading of `CLOCK_MONOTONIC` (the clock of std's and
//! tokio's `Instant`) as nanoseconds in one `u64`. Adding a duration, subtracting two readings
//! and turning one into the timer wheel's milliseconds are then an integer operation each, where
//! `Instant`'s go through `Timespec`'s checked arithmetic out of line: about 40 instructions a
//! subtraction, six a keep-alive request, and 16 more a reading (callgrind,
//! bench/results/diet.md). `Instant`s from elsewhere convert both ways.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time on `CLOCK_MONOTONIC`, in nanoseconds from the clock's own start (the
/// machine's boot): good for 584 years.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Moment(u64);

const NANOS_PER_SECOND: u64 = 1_000_000_000;

impl Moment {
    /// Now.
    #[inline]
    pub fn now() -> Moment {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid timespec to write; CLOCK_MONOTONIC always exists on Linux (std's
        // Instant::now reads it the same way, through the vDSO).
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        Moment(now.tv_sec as u64 * NANOS_PER_SECOND + now.tv_nsec as u64)
    }

    /// The time from `earlier` to this moment; zero if `earlier` is later.
    #[inline]
    pub fn saturating_duration_since(self, earlier: Moment) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The time since this moment; zero if it is still to come.
    #[inline]
    pub fn elapsed(self) -> Duration {
        Moment::now().saturating_duration_since(self)
    }

    /// Whole nanoseconds since the clock's start.
    #[inline]
    pub fn nanos(self) -> u64 {
        self.0
    }

    /// The same point as a tokio `Instant` (two clock readings: for the waits that need tokio's
    /// timer, off the request path).
    pub fn to_instant(self) -> tokio::time::Instant {
        // This clock first, so that the instant is late by the time between, never early.
        let (moment, now) = (Moment::now(), tokio::time::Instant::now());
        match self.cmp(&moment) {
            std::cmp::Ordering::Less => now
                .checked_sub(moment.saturating_duration_since(self))
                .unwrap_or(now),
            _ => now + self.saturating_duration_since(moment),
        }
    }
}

impl From<tokio::time::Instant> for Moment {
    /// The same point as an `Instant` (two clock readings).
    fn from(at: tokio::time::Instant) -> Moment {
        // The instant's clock first, so that the moment is late by the time between, never early.
        let (now, moment) = (tokio::time::Instant::now(), Moment::now());
        match at.checked_duration_since(now) {
            Some(ahead) => moment + ahead,
            None => Moment(moment.0.saturating_sub(duration_nanos(now - at))),
        }
    }
}

impl From<std::time::Instant> for Moment {
    fn from(at: std::time::Instant) -> Moment {
        Moment::from(tokio::time::Instant::from_std(at))
    }
}

/// A duration's nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
fn duration_nanos(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_mul(NANOS_PER_SECOND)
        .saturating_add(u64::from(duration.subsec_nanos()))
}

impl Add<Duration> for Moment {
    type Output = Moment;

    /// Saturating: a moment 584 years away stands for "never".
    #[inline]
    fn add(self, duration: Duration) -> Moment {
        Moment(self.0.saturating_add(duration_nanos(duration)))
    }
}

impl Sub<Moment> for Moment {
    type Output = Duration;

    /// Saturating at zero, as tokio's `Instant` does.
    #[inline]
    fn sub(self, earlier: Moment) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_keep_the_instant_clock_s_time() {
        let (instant, moment) = (tokio::time::Instant::now(), Moment::now());
        std::thread::sleep(Duration::from_millis(20));
        let (instant_took, moment_took) = (instant.elapsed(), moment.elapsed());
        assert!(moment_took >= Duration::from_millis(20), "{moment_took:?}");
        let apart = instant_took.abs_diff(moment_took);
        assert!(
            apart < Duration::from_millis(5),
            "{instant_took:?} {moment_took:?}"
        );
        // Each way and back within a reading's time.
        for offset in [
            Duration::ZERO,
            Duration::from_secs(3),
            Duration::from_secs(86_400),
        ] {
            let later = Moment::now() + offset;
            let back = Moment::from(later.to_instant());
            assert!(
                back.nanos().abs_diff(later.nanos()) < 1_000_000,
                "{offset:?}"
            );
            let earlier = tokio::time::Instant::now() - offset.min(Duration::from_secs(1));
            let there = Moment::from(earlier).to_instant();
            assert!(there.max(earlier) - there.min(earlier) < Duration::from_millis(1));
        }
    }

    #[test]
    fn arithmetic_saturates_rather_than_wraps() {
        let now = Moment::now();
        assert_eq!(now + Duration::MAX, Moment(u64::MAX));
        assert_eq!(now - (now + Duration::from_secs(1)), Duration::ZERO);
        assert_eq!(
            (now + Duration::from_millis(1500)) - now,
            Duration::from_millis(1500)
        );
        assert!(now < now + Duration::from_nanos(1));
    }
}
