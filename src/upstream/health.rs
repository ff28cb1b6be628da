//! What the control plane knows of a server's health: down by active checks (with the reason),
//! ejected by passive checks (until when, and how many times in a row), and when it last came
//! back (for slow start). Kept per server across snapshots by `snapshot::Lineage`.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::Passive;

/// What a worker tells the health checker of a server (by id), which decides what follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerReport {
    /// Its failures in a row reached its pool's passive limit (or another multiple of it).
    Failing(u64),
    /// It refused a connection: nothing listens there now.
    Refused(u64),
}

/// One server's health, as the control plane tracks it.
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// Set by active checks: why the server is down.
    pub down: Option<String>,
    /// Set by passive checks: the server takes no new requests until then.
    pub ejected_until: Option<Instant>,
    /// Set when it refused a connection: it takes no new requests until a connection to it
    /// opens again (an active check's, or the probe the refusal starts).
    pub refused: bool,
    /// Ejections in a row: each one lasts twice the one before. Forgotten once the server has
    /// gone `max_ejection` without one.
    pub ejections: u32,
    /// When the last ejection ended, to forget old ones.
    pub last_ejection_end: Option<Instant>,
    /// When the server last came back into service, for slow start.
    pub back_since: Option<Instant>,
}

/// The reason a server that refused a connection is down, until it listens again.
pub const REFUSED: &str = "refused a connection; waiting for it to listen again";

/// How a server's health reads in `GET /api/pools`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "health", rename_all = "lowercase")]
pub enum HealthView {
    Up,
    Down { reason: String },
    Ejected { remaining_ms: u64 },
}

impl Health {
    /// Whether the server may take requests now.
    pub fn is_available(&self, now: Instant) -> bool {
        self.down.is_none() && !self.refused && !self.is_ejected(now)
    }

    pub fn is_ejected(&self, now: Instant) -> bool {
        self.ejected_until.is_some_and(|until| until > now)
    }

    pub fn view(&self, now: Instant) -> HealthView {
        if let Some(reason) = &self.down {
            return HealthView::Down {
                reason: reason.clone(),
            };
        }
        if self.refused {
            return HealthView::Down {
                reason: REFUSED.to_string(),
            };
        }
        match self.ejected_until {
            Some(until) if until > now => HealthView::Ejected {
                remaining_ms: (until - now).as_millis() as u64,
            },
            _ => HealthView::Up,
        }
    }

    /// Ejects the server from `now`, for a back-off that doubles with each ejection in a row;
    /// returns how long.
    pub fn eject(&mut self, now: Instant, passive: &Passive) -> Duration {
        let forgotten = self
            .last_ejection_end
            .is_some_and(|end| now.saturating_duration_since(end) >= passive.max_ejection);
        if forgotten {
            self.ejections = 0;
        }
        let doublings = self.ejections.min(20);
        let length = passive
            .ejection
            .saturating_mul(1 << doublings)
            .min(passive.max_ejection);
        self.ejections += 1;
        self.ejected_until = Some(now + length);
        length
    }

    /// Ends an ejection whose time is up; returns whether one ended.
    pub fn end_ejection(&mut self, now: Instant) -> bool {
        match self.ejected_until {
            Some(until) if until <= now => {
                self.ejected_until = None;
                self.last_ejection_end = Some(until);
                self.back_since = Some(now);
                true
            }
            _ => false,
        }
    }

    /// The share of its weight the server takes `now` under slow start: from a tenth up to all
    /// of it, linearly over `slow_start` after it came back.
    pub fn ramp(&self, now: Instant, slow_start: Duration) -> f64 {
        match self.back_since {
            Some(since) if !slow_start.is_zero() => {
                let elapsed = now.saturating_duration_since(since).as_secs_f64();
                (0.1 + 0.9 * elapsed / slow_start.as_secs_f64()).min(1.0)
            }
            _ => 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ejections_in_a_row_double_up_to_the_maximum_and_are_forgotten() {
        let passive = Passive {
            ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(35),
            ..Passive::default()
        };
        let mut health = Health::default();
        let start = Instant::now();
        let mut now = start;
        let mut lengths = Vec::new();
        for _ in 0..4 {
            lengths.push(health.eject(now, &passive).as_secs());
            assert!(!health.is_available(now));
            now = health.ejected_until.unwrap();
            assert!(health.end_ejection(now));
            assert!(health.is_available(now));
        }
        assert_eq!(lengths, [10, 20, 35, 35]);
        // A quiet spell as long as the longest ejection starts the back-off over.
        now += Duration::from_secs(35);
        assert_eq!(health.eject(now, &passive).as_secs(), 10);
    }

    #[test]
    fn slow_start_ramps_from_a_tenth_to_full() {
        let now = Instant::now();
        let health = Health {
            back_since: Some(now),
            ..Health::default()
        };
        let ramp = Duration::from_secs(10);
        assert!((health.ramp(now, ramp) - 0.1).abs() < 1e-9);
        assert!((health.ramp(now + Duration::from_secs(5), ramp) - 0.55).abs() < 1e-9);
        assert_eq!(health.ramp(now + Duration::from_secs(11), ramp), 1.0);
        assert_eq!(health.ramp(now, Duration::ZERO), 1.0);
    }

    #[test]
    fn down_wins_over_ejected_in_the_view() {
        let now = Instant::now();
        let mut health = Health {
            down: Some("connection refused".into()),
            ..Health::default()
        };
        health.eject(now, &Passive::default());
        assert_eq!(
            health.view(now),
            HealthView::Down {
                reason: "connection refused".into()
            }
        );
        health.down = None;
        assert!(matches!(health.view(now), HealthView::Ejected { .. }));
    }
}
