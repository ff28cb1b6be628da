//! What one discovery source (a DNS name, a Consul service) says a pool's servers are, answer
//! after answer: the last good set kept through failures, an empty answer believed only once
//! confirmed, and when to ask again — at most once per TTL (within the configured bounds, with
//! jitter so that many names do not expire in step), sooner with back-off after a failure. The
//! rules here are the ones the fleet-following proxies' users were hurt by the lack of: nginx
//! resolving once, HAProxy marking every server down during a DNS outage (haproxy#1286), Envoy's
//! query storms when TTLs expire together. Pure bookkeeping: no I/O, no clock of its own.

use std::time::{Duration, Instant};

/// One server a source found: its stable identity (the SRV target and port, or the address;
/// never a position in the answer), where it listens, its weight and whether it is a backup
/// (an SRV record of a lower priority than the best one found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub identity: String,
    pub addr: std::net::SocketAddr,
    pub weight: u32,
    pub backup: bool,
}

/// One answer of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Servers found, and the least TTL of the records that named them.
    Servers { servers: Vec<Found>, ttl: Duration },
    /// The name exists with nothing of the type asked, or does not exist (NXDOMAIN), or the
    /// service has no passing instance: believed only once confirmed. The TTL of the negative
    /// answer, when it had one (the SOA's minimum).
    Empty { ttl: Option<Duration> },
    /// Nothing to go on: a timeout, SERVFAIL, REFUSED, a network error. Changes nothing.
    Failed { reason: String },
}

/// How a source is followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// A TTL below this is taken as this (a record with TTL 0 would be asked for without end).
    pub ttl_floor: Duration,
    /// A TTL above this is taken as this (a server gone is not waited for a day).
    pub ttl_ceiling: Duration,
    /// After a failure, the first wait; doubled each failure in a row up to `retry_most`.
    pub retry_first: Duration,
    pub retry_most: Duration,
    /// An empty answer empties the set only when this many come in a row...
    pub confirm_empty: u32,
    /// ...and the first of them is at least this old.
    pub hold_empty: Duration,
}

/// What [`Membership::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The set of servers changed (servers came, went, or changed weight or backup).
    pub changed: bool,
    /// When to ask the source again.
    pub next: Instant,
}

/// The servers a source says a pool has, as it last said it believably.
#[derive(Debug)]
pub struct Membership {
    policy: Policy,
    /// By identity, in order.
    servers: Vec<Found>,
    /// The TTL the last answer with servers had, as bounded by the policy.
    ttl: Option<Duration>,
    /// When the last answer of any kind came, and the last answer that was not a failure.
    last_answer: Option<Instant>,
    last_good: Option<Instant>,
    /// Failures in a row, and the last one's reason.
    failures: u32,
    last_error: Option<String>,
    /// Empty answers in a row, and when the first of them came.
    empties: u32,
    first_empty: Option<Instant>,
}

impl Membership {
    pub fn new(policy: Policy) -> Membership {
        Membership {
            policy,
            servers: Vec::new(),
            ttl: None,
            last_answer: None,
            last_good: None,
            failures: 0,
            last_error: None,
            empties: 0,
            first_empty: None,
        }
    }

    /// Takes `answer`, which came at `now`. `jitter`, in [0, 1), lengthens the wait before the
    /// next question by up to a tenth (never shortens it: no more than one question per TTL).
    pub fn apply(&mut self, answer: Answer, now: Instant, jitter: f64) -> Applied {
        self.last_answer = Some(now);
        let stretch = |wait: Duration| wait.mul_f64(1.0 + jitter.clamp(0.0, 1.0) / 10.0);
        match answer {
            Answer::Servers { mut servers, ttl } => {
                self.failures = 0;
                self.empties = 0;
                self.first_empty = None;
                self.last_good = Some(now);
                servers.sort_by(|a, b| a.identity.cmp(&b.identity));
                servers.dedup_by(|a, b| a.identity == b.identity);
                let changed = servers != self.servers;
                self.servers = servers;
                let ttl = self.bounded(ttl);
                self.ttl = Some(ttl);
                Applied {
                    changed,
                    next: now + stretch(ttl),
                }
            }
            Answer::Empty { ttl } => {
                self.failures = 0;
                self.last_good = Some(now);
                self.empties += 1;
                let first = *self.first_empty.get_or_insert(now);
                let confirmed = self.empties >= self.policy.confirm_empty
                    && now.duration_since(first) >= self.policy.hold_empty;
                let changed = confirmed && !self.servers.is_empty();
                if confirmed {
                    self.servers.clear();
                }
                // Until confirmed, asked again soon (the floor), to confirm or take it back.
                let wait = match confirmed {
                    true => self.bounded(ttl.unwrap_or(self.policy.ttl_floor)),
                    false => self.policy.ttl_floor,
                };
                Applied {
                    changed,
                    next: now + stretch(wait),
                }
            }
            Answer::Failed { reason } => {
                self.failures += 1;
                self.last_error = Some(reason);
                let doublings = (self.failures - 1).min(16);
                let wait = self
                    .policy
                    .retry_first
                    .saturating_mul(1 << doublings)
                    .min(self.policy.retry_most);
                Applied {
                    changed: false,
                    next: now + stretch(wait),
                }
            }
        }
    }

    fn bounded(&self, ttl: Duration) -> Duration {
        ttl.clamp(self.policy.ttl_floor, self.policy.ttl_ceiling)
    }

    /// The servers, by identity.
    pub fn servers(&self) -> &[Found] {
        &self.servers
    }

    /// The TTL followed (the last answer's, within the policy's bounds).
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// When the last answer came, and the last one that was not a failure.
    pub fn last_answer(&self) -> Option<Instant> {
        self.last_answer
    }

    pub fn last_good(&self) -> Option<Instant> {
        self.last_good
    }

    /// Failures in a row, and the last failure's reason (kept after a success, for the
    /// record).
    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// Empty answers in a row not yet believed.
    pub fn unconfirmed_empties(&self) -> u32 {
        match self.servers.is_empty() {
            true => 0,
            false => self.empties,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            ttl_floor: Duration::from_secs(1),
            ttl_ceiling: Duration::from_secs(300),
            retry_first: Duration::from_millis(500),
            retry_most: Duration::from_secs(30),
            confirm_empty: 3,
            hold_empty: Duration::from_secs(10),
        }
    }

    fn found(last: u8, weight: u32) -> Found {
        Found {
            identity: format!("10.0.0.{last}:8080"),
            addr: format!("10.0.0.{last}:8080").parse().unwrap(),
            weight,
            backup: false,
        }
    }

    fn servers(list: &[Found], ttl_secs: u64) -> Answer {
        Answer::Servers {
            servers: list.to_vec(),
            ttl: Duration::from_secs(ttl_secs),
        }
    }

    fn failed() -> Answer {
        Answer::Failed {
            reason: "timed out".into(),
        }
    }

    #[test]
    fn servers_are_taken_in_identity_order_and_asked_for_again_after_their_ttl() {
        let mut membership = Membership::new(policy());
        let now = Instant::now();
        let applied = membership.apply(servers(&[found(2, 1), found(1, 1)], 30), now, 0.0);
        assert_eq!(
            applied,
            Applied {
                changed: true,
                next: now + Duration::from_secs(30)
            }
        );
        assert_eq!(membership.servers(), [found(1, 1), found(2, 1)]);
        // The same set in another order changes nothing; a new weight does.
        let later = now + Duration::from_secs(30);
        let same = membership.apply(servers(&[found(1, 1), found(2, 1)], 30), later, 0.0);
        assert!(!same.changed);
        assert!(
            membership
                .apply(servers(&[found(1, 1), found(2, 5)], 30), later, 0.0)
                .changed
        );
    }

    #[test]
    fn a_ttl_is_held_within_its_bounds_and_jitter_only_lengthens_it() {
        let mut membership = Membership::new(policy());
        let now = Instant::now();
        let zero = membership.apply(servers(&[found(1, 1)], 0), now, 0.0);
        assert_eq!(zero.next, now + Duration::from_secs(1));
        let day = membership.apply(servers(&[found(1, 1)], 86_400), now, 0.0);
        assert_eq!(day.next, now + Duration::from_secs(300));
        assert_eq!(membership.ttl(), Some(Duration::from_secs(300)));
        let jittered = membership.apply(servers(&[found(1, 1)], 20), now, 0.99);
        assert!(jittered.next >= now + Duration::from_secs(20));
        assert!(jittered.next <= now + Duration::from_secs(22));
    }

    #[test]
    fn failures_change_nothing_and_are_retried_with_back_off() {
        let mut membership = Membership::new(policy());
        let now = Instant::now();
        membership.apply(servers(&[found(1, 1), found(2, 1)], 30), now, 0.0);
        let waits: Vec<Duration> = (0..8)
            .map(|_| {
                let applied = membership.apply(failed(), now, 0.0);
                assert!(!applied.changed);
                applied.next - now
            })
            .collect();
        let ms = |ms| Duration::from_millis(ms);
        assert_eq!(
            waits,
            [
                ms(500),
                ms(1000),
                ms(2000),
                ms(4000),
                ms(8000),
                ms(16000),
                ms(30000),
                ms(30000)
            ]
        );
        assert_eq!(membership.servers().len(), 2, "the last good set stays");
        assert_eq!(membership.failures(), 8);
        assert_eq!(membership.last_error(), Some("timed out"));
        membership.apply(servers(&[found(1, 1)], 30), now, 0.0);
        assert_eq!(membership.failures(), 0);
    }

    #[test]
    fn an_empty_answer_is_believed_only_when_confirmed_in_a_row_and_held() {
        let mut membership = Membership::new(policy());
        let start = Instant::now();
        membership.apply(servers(&[found(1, 1)], 30), start, 0.0);
        let at = |secs| start + Duration::from_secs(secs);
        let empty = || Answer::Empty { ttl: None };
        // Once: nothing changes, and it is asked again at the floor to confirm.
        let once = membership.apply(empty(), at(30), 0.0);
        assert_eq!((once.changed, once.next), (false, at(31)));
        assert_eq!(membership.unconfirmed_empties(), 1);
        // An answer with servers between takes it back: the count starts again.
        membership.apply(servers(&[found(1, 1)], 30), at(31), 0.0);
        assert_eq!(membership.unconfirmed_empties(), 0);
        // Three in a row, but within the hold: still kept.
        for secs in [40, 41, 42] {
            assert!(!membership.apply(empty(), at(secs), 0.0).changed);
        }
        assert_eq!(membership.servers().len(), 1);
        // Past the hold: believed.
        let believed = membership.apply(empty(), at(50), 0.0);
        assert!(believed.changed);
        assert!(membership.servers().is_empty());
        assert_eq!(membership.unconfirmed_empties(), 0);
        // A server back is taken at once.
        assert!(
            membership
                .apply(servers(&[found(3, 1)], 30), at(60), 0.0)
                .changed
        );
    }

    #[test]
    fn a_failure_between_empty_answers_neither_counts_nor_breaks_their_row() {
        let mut membership = Membership::new(Policy {
            hold_empty: Duration::ZERO,
            ..policy()
        });
        let now = Instant::now();
        membership.apply(servers(&[found(1, 1)], 30), now, 0.0);
        membership.apply(Answer::Empty { ttl: None }, now, 0.0);
        membership.apply(failed(), now, 0.0);
        membership.apply(Answer::Empty { ttl: None }, now, 0.0);
        assert_eq!(membership.servers().len(), 1);
        assert!(
            membership
                .apply(Answer::Empty { ttl: None }, now, 0.0)
                .changed
        );
    }
}
