//! When a certificate is renewed and when a failed order is tried again: the CA's suggested
//! window (ACME Renewal Information, RFC 9773) when it offers one, else two thirds into the
//! certificate's lifetime (Let's Encrypt's and Caddy's rule: a 90-day certificate is renewed
//! with 30 days left); after a failure, a back-off that doubles from a minute to six hours, with
//! jitter so that processes that failed together do not all try again together. Pure functions
//! of times, so that the choices are unit-tested without a CA.

use std::time::{Duration, SystemTime};

/// The first wait after a failed order.
pub const FIRST_RETRY: Duration = Duration::from_secs(60);
/// The longest wait after failed orders: after the tenth in a row (the waits before it are 1,
/// 2, 4 … 256 minutes) and every one after, so a CA down for days is still asked four times a
/// day.
pub const LONGEST_RETRY: Duration = Duration::from_secs(6 * 3600);

/// When a certificate valid from `not_before` to `not_after` is renewed: in `window` (the CA's
/// suggestion, `(start, end)`) when one was given and makes sense, at the point `pick` (0 to 1)
/// of it — RFC 9773 §4.2 asks clients to pick a random time within the window; else two thirds
/// into the lifetime.
pub fn renewal_time(
    not_before: SystemTime,
    not_after: SystemTime,
    window: Option<(SystemTime, SystemTime)>,
    pick: f64,
) -> SystemTime {
    if let Some((start, end)) = window {
        if let Ok(width) = end.duration_since(start) {
            return start + width.mul_f64(pick.clamp(0.0, 1.0));
        }
    }
    let lifetime = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO);
    not_before + lifetime * 2 / 3
}

/// How long to wait before trying again after `failures` failed orders in a row (1 for the
/// first): [`FIRST_RETRY`] doubled per failure up to [`LONGEST_RETRY`], then spread by
/// `jitter` (0 to 1) over ±25%.
pub fn retry_after(failures: u32, jitter: f64) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    let base = FIRST_RETRY
        .saturating_mul(1 << doublings)
        .min(LONGEST_RETRY);
    base.mul_f64(0.75 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// How worried to be about a certificate whose renewal failed: from how much of its lifetime is
/// left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// More than a sixth of its lifetime left: a warning.
    Renewing,
    /// A sixth or less left, or already expired: an error every time.
    NearExpiry,
}

/// The urgency of a certificate valid from `not_before` to `not_after`, at `now`.
pub fn urgency(not_before: SystemTime, not_after: SystemTime, now: SystemTime) -> Urgency {
    let lifetime = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO);
    match not_after.duration_since(now) {
        Ok(left) if left > lifetime / 6 => Urgency::Renewing,
        _ => Urgency::NearExpiry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn at(days: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + DAY * 20_000 + DAY * days as u32
    }

    #[test]
    fn without_a_window_a_certificate_renews_two_thirds_into_its_lifetime() {
        assert_eq!(renewal_time(at(0), at(90), None, 0.5), at(60));
        // A short-lived one (Let's Encrypt's 6-day certificates) the same way.
        let start = at(0);
        let end = start + Duration::from_secs(6 * 86_400);
        assert_eq!(
            renewal_time(start, end, None, 0.0),
            start + Duration::from_secs(4 * 86_400)
        );
    }

    #[test]
    fn the_cas_window_wins_and_a_time_is_picked_within_it() {
        let window = Some((at(70), at(72)));
        assert_eq!(renewal_time(at(0), at(90), window, 0.0), at(70));
        assert_eq!(renewal_time(at(0), at(90), window, 1.0), at(72));
        assert_eq!(renewal_time(at(0), at(90), window, 0.5), at(71));
        // A window earlier than two thirds (the CA revokes the certificate soon) is followed.
        let early = Some((at(10), at(10)));
        assert_eq!(renewal_time(at(0), at(90), early, 0.3), at(10));
        // A window that ends before it starts is ignored.
        let broken = Some((at(72), at(70)));
        assert_eq!(renewal_time(at(0), at(90), broken, 0.5), at(60));
    }

    #[test]
    fn retries_double_from_a_minute_to_six_hours_with_jitter() {
        assert_eq!(retry_after(1, 0.5), Duration::from_secs(60));
        assert_eq!(retry_after(2, 0.5), Duration::from_secs(120));
        assert_eq!(retry_after(4, 0.5), Duration::from_secs(480));
        assert_eq!(retry_after(9, 0.5), Duration::from_secs(256 * 60));
        assert_eq!(retry_after(10, 0.5), LONGEST_RETRY);
        assert_eq!(retry_after(1_000, 0.5), LONGEST_RETRY);
        assert_eq!(retry_after(1, 0.0), Duration::from_secs(45));
        assert_eq!(retry_after(1, 1.0), Duration::from_secs(75));
    }

    #[test]
    fn the_last_sixth_of_a_lifetime_is_near_expiry() {
        assert_eq!(urgency(at(0), at(90), at(60)), Urgency::Renewing);
        assert_eq!(urgency(at(0), at(90), at(76)), Urgency::NearExpiry);
        assert_eq!(urgency(at(0), at(90), at(100)), Urgency::NearExpiry);
    }
}
