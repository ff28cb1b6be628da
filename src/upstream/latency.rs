//! A server's latency as `balance = "peak-ewma"` weighs it: a peak-sensitive moving average of
//! its time to a response head, kept in one atomic word that every worker reads and updates; the
//! cost a pick compares; and the probe that lets a server no pick chooses be measured again.
//!
//! The estimate is shared across workers rather than kept per worker: a server slow for every
//! worker is then seen as slow by every worker after its first slow answer, where estimates per
//! worker would each need their own slow answers (and their own probes) to learn it. Updating it
//! is a compare-exchange at most once a millisecond per server but for new peaks (a faster
//! answer in the millisecond of the last update weighs nothing, see [`next_estimate`], and is not
//! written); reading it is one load of a line the pick already reads for the server's requests in
//! flight.
//!
//! Finagle's and Linkerd's peak EWMA, with time in milliseconds:
//!
//! - an answer slower than the estimate replaces it at once (the peak);
//! - a faster one moves it as `estimate·w + rtt·(1 − w)`, `w = exp(−Δt/τ)` with `Δt` the time
//!   since the last update, so that the estimate decays by time and not by the number of answers;
//! - τ is a fifth of the pool's `latency_window`: an answer older than the window weighs under
//!   1% (e⁻⁵). With τ the whole window, a server that answered in 200 ms and recovered would take
//!   τ·ln(200 ms ÷ 1 ms) ≈ 5.3 windows to look as fast as servers answering in 1 ms, and about
//!   2 windows before its estimate fell below theirs times 25 requests in flight (when it begins
//!   to get some); with τ = window ÷ 5, about one window and 0.4 of one;
//! - an error (a failed attempt, a 5xx) is a slow answer (Finagle's penalty): twice the estimate
//!   and at least [`ERROR_PENALTY`], so that a server failing fast is never preferred for its
//!   speed. The doubling does not compound: an estimate made of a penalty is marked (the sign bit
//!   of its `f32`, never otherwise set), and a further error keeps it rather than doubling it
//!   again, so a server failing for minutes holds twice its last real latency (or 1 s), and once
//!   it answers again begins to regain its share within the window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::transport::Moment;

/// What an error is observed as, at least: slower than any server a pool should prefer, and
/// short enough that a server that stops failing soon regains its share (from 1 s to 1 ms in
/// τ·ln 1000 ≈ 1.4 windows; below 1 ms × 26 in flight, where it begins to get requests, in 0.7).
pub const ERROR_PENALTY: Duration = Duration::from_secs(1);

/// [`ERROR_PENALTY`] in microseconds, the estimate's unit.
const ERROR_PENALTY_US: f32 = ERROR_PENALTY.as_micros() as f32;

/// Marks an estimate that holds an error's penalty (the sign bit of its `f32`: estimates are
/// never negative).
const PENALISED: u32 = 1 << 31;

/// The shortest answer recorded, in microseconds: an estimate of 0 means "none yet".
const LEAST_SAMPLE_US: f32 = 1.0;

/// A server's latency, shared by every worker and kept across snapshots (it lives in the
/// server's `ServerCounters`).
#[derive(Debug, Default)]
pub struct Latency {
    /// The estimate (the bits of an `f32` of microseconds: precise to a ten-millionth of itself, so
    /// that the small steps of frequent answers are not rounded away, with room for answers of
    /// hours; the sign bit marks a penalty) in the high half, and when it was last updated in
    /// the low half (milliseconds of the [`Moment`] clock, wrapping every 49.7 days: only the
    /// time since, at most minutes, is ever read of it). 0: no answer yet.
    packed: AtomicU64,
    /// When a pick last claimed a probe of the server (milliseconds of the [`Moment`] clock; a
    /// full `u64`, so that a pool quiet for weeks is never mistaken for one probed just now).
    probed: AtomicU64,
}

/// A pool's rules for its servers' latency: derived from its `latency_window`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyRules {
    /// 1 / τ, τ being a fifth of the window, in milliseconds⁻¹.
    inverse_tau_ms: f32,
    /// A server whose estimate has not been updated for this long (a tenth of the window) is
    /// probed: picked when it is a candidate, about once per such interval over all workers.
    probe_every_ms: u32,
}

/// What one attempt at a server showed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample {
    /// Its response head came this long after the request went (connecting included).
    Answer(Duration),
    /// It failed (connecting, a reset, a timeout, a bad head, a 5xx) after this long.
    Error(Duration),
}

/// A server's estimate as a pick reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Microseconds; 0 before the first answer.
    estimate_us: f32,
    /// When it was last updated (milliseconds of the [`Moment`] clock, wrapping).
    updated_ms: u32,
}

impl LatencyRules {
    pub fn new(window: Duration) -> LatencyRules {
        let window_ms = window.as_millis().clamp(10, u128::from(u32::MAX)) as f32;
        LatencyRules {
            inverse_tau_ms: 5.0 / window_ms,
            probe_every_ms: (window_ms / 10.0) as u32,
        }
    }
}

impl Reading {
    /// The estimate in milliseconds, `None` before the first answer.
    pub fn millis(self) -> Option<f64> {
        (self.estimate_us > 0.0).then(|| f64::from(self.estimate_us) / 1000.0)
    }
}

/// A duration in microseconds, without the `u128` conversions of `as_nanos` and `as_micros`.
#[inline]
fn micros(took: Duration) -> f32 {
    took.as_secs() as f32 * 1e6 + took.subsec_nanos() as f32 / 1e3
}

/// Milliseconds of the [`Moment`] clock.
#[inline]
fn millis(moment: Moment) -> u64 {
    moment.nanos() / 1_000_000
}

/// The time from `then` to `now`, both wrapping milliseconds; 0 when `then` is later (a clock
/// read a little before another worker's, whose update came first).
#[inline]
fn since(now: u32, then: u32) -> u32 {
    let elapsed = now.wrapping_sub(then);
    if elapsed > i32::MAX as u32 {
        0
    } else {
        elapsed
    }
}

fn pack(estimate_us: f32, penalised: bool, at_ms: u32) -> u64 {
    let bits = estimate_us.to_bits() | if penalised { PENALISED } else { 0 };
    (u64::from(bits) << 32) | u64::from(at_ms)
}

/// The estimate (µs), whether it is a penalty, and when it was updated.
fn unpack(packed: u64) -> (f32, bool, u32) {
    let bits = (packed >> 32) as u32;
    (
        f32::from_bits(bits & !PENALISED),
        bits & PENALISED != 0,
        packed as u32,
    )
}

/// The word to store after `sample` came at `now_ms` over `packed`, or `None` when it changes
/// nothing (a faster answer in the millisecond of the last update: with `Δt = 0` it weighs
/// nothing; under load that is most answers, which then cost a load and no write).
pub(crate) fn next_estimate(
    packed: u64,
    now_ms: u32,
    sample: Sample,
    rules: LatencyRules,
) -> Option<u64> {
    let (estimate, penalised, updated) = unpack(packed);
    let elapsed = since(now_ms, updated);
    match sample {
        Sample::Answer(took) => {
            let rtt = micros(took).max(LEAST_SAMPLE_US);
            if estimate == 0.0 || rtt >= estimate {
                // The first answer, or a peak: taken at once.
                return Some(pack(rtt, false, now_ms));
            }
            if elapsed == 0 && !penalised {
                return None;
            }
            let weight = (-(elapsed as f32) * rules.inverse_tau_ms).exp();
            let moved = estimate * weight + rtt * (1.0 - weight);
            Some(pack(moved.max(LEAST_SAMPLE_US), false, now_ms))
        }
        Sample::Error(took) => {
            let took = micros(took);
            let penalty = if penalised {
                estimate
            } else {
                (estimate * 2.0).max(ERROR_PENALTY_US)
            };
            let observed = penalty.max(took);
            if observed == estimate && penalised && elapsed == 0 {
                return None;
            }
            // Never below the estimate (errors make no server look faster); the time is renewed,
            // so that a failing server is probed a window's tenth after its last failure.
            Some(pack(observed.max(estimate), true, now_ms))
        }
    }
}

impl Latency {
    /// Records what an attempt that ended at `at` showed.
    pub fn record(&self, rules: LatencyRules, sample: Sample, at: Moment) {
        let now_ms = millis(at) as u32;
        let mut current = self.packed.load(Ordering::Relaxed);
        while let Some(next) = next_estimate(current, now_ms, sample, rules) {
            match self.packed.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// The estimate now.
    #[inline]
    pub fn read(&self) -> Reading {
        let (estimate_us, _, updated_ms) = unpack(self.packed.load(Ordering::Relaxed));
        Reading {
            estimate_us,
            updated_ms,
        }
    }

    /// Whether this pick, at `now`, is the server's probe: its estimate (`reading`) has not been
    /// updated for `probe_every_ms`, nothing of it is in flight (whose answer would update it
    /// anyway), and no pick on any worker claimed a probe of it in that long — the claim is a
    /// compare-exchange, so over all workers a server gets about one probe an interval. Most
    /// picks end at the first test.
    #[inline]
    fn claims_probe(
        &self,
        rules: LatencyRules,
        reading: Reading,
        in_flight: u32,
        now_ms: u64,
    ) -> bool {
        // Unsigned: an update a worker made with a clock read a little after `now` looks
        // stale, which costs at most the interval's one probe (the claim below is exact), where
        // the rule of `since` would leave a server updated 25 to 50 days ago unprobed.
        let stale = (now_ms as u32).wrapping_sub(reading.updated_ms) >= rules.probe_every_ms;
        if !stale || in_flight > 0 {
            return false;
        }
        let last = self.probed.load(Ordering::Relaxed);
        now_ms.saturating_sub(last) >= u64::from(rules.probe_every_ms)
            && self
                .probed
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// One of a pick's candidates as peak-ewma weighs it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'c> {
    pub latency: &'c Latency,
    /// Its requests in flight over all workers.
    pub in_flight: u32,
    /// The weight it takes new requests with (its slow start's share of `weight`).
    pub weight: u32,
}

impl Candidate<'_> {
    /// What sending it one more request costs: its estimate times its requests in flight and
    /// this one, per unit of weight. A server with no estimate yet costs nothing while idle (it
    /// is tried, and so measured, first), and [`ERROR_PENALTY`] an answer while its first
    /// requests are out (as Finagle and Envoy charge it): otherwise a new server, cheaper than
    /// any measured one until its first answer, would take every request until then.
    #[inline]
    fn cost(&self, reading: Reading) -> f32 {
        let latency = match reading.estimate_us {
            estimate if estimate > 0.0 => estimate,
            _ if self.in_flight == 0 => return 0.0,
            _ => ERROR_PENALTY_US,
        };
        latency * (self.in_flight as f32 + 1.0) / self.weight.max(1) as f32
    }
}

/// How many times slower than another a server's estimate must be for the other to be preferred
/// whatever their requests in flight.
///
/// The cost multiplies an estimate by the requests in flight so that comparable servers share
/// the load before their estimates can show a queue; but an estimate is measured under the
/// server's load, queue included (a server answering in 2 ms with 100 requests in flight
/// answers the 101st in about 2 ms, not 200). Without this rule, at 200 connections over three
/// servers one of them 200 ms late, the late one looked cheaper than a healthy one's
/// 2 ms × 100 whenever it had nothing in flight, and got 0.02–0.03% of the requests: each one
/// 200 ms, which a closed-loop client such as wrk counts as the ~70 requests its connection
/// would have sent meanwhile (its correction for coordinated omission), making the p99
/// 70–80 ms against 7 with every server healthy. Eight: a server twice or four times slower
/// than another (an older machine) still takes its share by cost; one an order of magnitude
/// slower gets only its probes until its estimate comes within eight times, which a recovering
/// server's does within about half the window (`bench/results/gray.md`).
const OUT_OF_CLASS: f32 = 8.0;

/// Of two candidates, which a pick takes, and whether the other was out of its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preference {
    /// The second is taken (else the first).
    pub second: bool,
    /// The one not taken is an order of magnitude slower ([`OUT_OF_CLASS`]): comparing with it
    /// told nothing of the one taken, so a pick among more servers gives that one a second
    /// comparison.
    pub outclassed: bool,
}

/// Whether `b` (with its estimate `rb`) is to be preferred to `a` (with `ra`): the one an order
/// of magnitude faster ([`OUT_OF_CLASS`]) when both are measured, else the cheaper (`a` on a
/// tie).
#[inline]
fn preference(a: Candidate<'_>, ra: Reading, b: Candidate<'_>, rb: Reading) -> Preference {
    let (ea, eb) = (ra.estimate_us, rb.estimate_us);
    if ea > 0.0 && eb > 0.0 && (ea * OUT_OF_CLASS <= eb || eb * OUT_OF_CLASS <= ea) {
        return Preference {
            second: eb < ea,
            outclassed: true,
        };
    }
    Preference {
        second: b.cost(rb) < a.cost(ra),
        outclassed: false,
    }
}

impl LatencyRules {
    /// Of two candidates, which is to be picked at `now`: a candidate due for a probe (the
    /// first one checked wins it), else the preferred one ([`preference`]).
    #[inline]
    pub fn prefer(self, first: Candidate<'_>, second: Candidate<'_>, now: Moment) -> Preference {
        let now_ms = millis(now);
        let (a, b) = (first.latency.read(), second.latency.read());
        let probe = |second| Preference {
            second,
            outclassed: false,
        };
        if first.latency.claims_probe(self, a, first.in_flight, now_ms) {
            return probe(false);
        }
        if second
            .latency
            .claims_probe(self, b, second.in_flight, now_ms)
        {
            return probe(true);
        }
        preference(first, a, second, b)
    }

    /// Whether `a` is to be preferred to `b` now (no probes: for a retry's scan).
    pub fn cheaper(a: Candidate<'_>, b: Candidate<'_>) -> bool {
        preference(b, b.latency.read(), a, a.latency.read()).second
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn rules() -> LatencyRules {
        LatencyRules::new(Duration::from_secs(10))
    }

    /// The estimate in ms after `samples`, each `(at_ms, sample)`, from none.
    fn estimate_after(samples: &[(u32, Sample)]) -> (f32, bool) {
        let mut packed = 0;
        for &(at, sample) in samples {
            if let Some(next) = next_estimate(packed, at, sample, rules()) {
                packed = next;
            }
        }
        let (estimate, penalised, _) = unpack(packed);
        (estimate / 1000.0, penalised)
    }

    fn close(got: f32, expected: f32) -> bool {
        (got - expected).abs() <= expected * 1e-3
    }

    #[test]
    fn a_peak_is_taken_at_once_and_a_faster_answer_decays_it_by_time() {
        let answer = |ms: u64| Sample::Answer(MS * ms as u32);
        // The first answer is the estimate; a slower one replaces it at once.
        assert_eq!(estimate_after(&[(5, answer(3))]), (3.0, false));
        assert_eq!(
            estimate_after(&[(5, answer(3)), (6, answer(200))]),
            (200.0, false)
        );
        // A faster one, τ (2 s with a 10 s window) later: e⁻¹ of the way back.
        let (after_tau, _) = estimate_after(&[(1000, answer(200)), (3000, answer(1))]);
        assert!(
            close(
                after_tau,
                200.0 / std::f32::consts::E + (1.0 - 1.0 / std::f32::consts::E)
            ),
            "{after_tau}"
        );
        // In the millisecond of the last update a faster answer weighs nothing.
        assert_eq!(estimate_after(&[(7, answer(200)), (7, answer(1))]).0, 200.0);
        // Answers every 10 ms for a window: under 1% of the old peak is left.
        let mut samples = vec![(0, answer(200))];
        samples.extend((1..=1000).map(|i| (i * 10, answer(1))));
        let (after_window, _) = estimate_after(&samples);
        assert!(after_window < 1.0 + 200.0 * 0.01, "{after_window}");
        // The number of answers does not matter, only the time: one answer a second does the same.
        let mut sparse = vec![(0, answer(200))];
        sparse.extend((1..=10).map(|i| (i * 1000, answer(1))));
        assert!(
            close(estimate_after(&sparse).0, after_window),
            "{after_window}"
        );
    }

    #[test]
    fn an_error_is_a_penalty_that_does_not_compound() {
        let error = Sample::Error(MS);
        // None yet, or fast: the penalty, 1 s.
        assert_eq!(estimate_after(&[(5, error)]), (1000.0, true));
        assert_eq!(
            estimate_after(&[(5, Sample::Answer(MS * 2)), (9, error)]),
            (1000.0, true)
        );
        // Slow: twice its estimate.
        let slow = Sample::Answer(MS * 800);
        assert_eq!(estimate_after(&[(5, slow), (9, error)]), (1600.0, true));
        // Errors in a row keep the penalty rather than doubling it again.
        let failing: Vec<_> = (0..20).map(|i| (5 + i * 1000, error)).collect();
        assert_eq!(estimate_after(&failing), (1000.0, true));
        // A timeout after 30 s is 30 s.
        assert_eq!(
            estimate_after(&[(5, Sample::Error(MS * 30_000))]),
            (30_000.0, true)
        );
        // Answers again: it decays as from any peak, and is no longer a penalty.
        let (recovering, penalised) = estimate_after(&[(5, error), (2005, Sample::Answer(MS))]);
        assert!(!penalised);
        assert!(
            close(
                recovering,
                1000.0 / std::f32::consts::E + (1.0 - 1.0 / std::f32::consts::E)
            ),
            "{recovering}"
        );
    }

    #[test]
    fn a_late_clock_reading_counts_as_no_time() {
        // Another worker's update read the clock a millisecond after this one's.
        let packed = pack(200_000.0, false, 1001);
        assert_eq!(
            next_estimate(packed, 1000, Sample::Answer(MS), rules()),
            None
        );
        // And across the wrap of the milliseconds.
        let packed = pack(200_000.0, false, u32::MAX);
        let next = next_estimate(packed, 2000, Sample::Answer(MS), rules()).unwrap();
        assert!(unpack(next).0 < 200_000.0);
    }

    #[test]
    fn a_probe_is_claimed_once_an_interval_over_all_claimants() {
        let rules = rules();
        let latency = Latency::default();
        let at = Moment::now();
        let now = millis(at);
        latency.record(rules, Sample::Answer(MS * 200), at);
        let reading = latency.read();
        assert_eq!(reading.millis(), Some(200.0));
        // Fresh: no probe.
        assert!(!latency.claims_probe(rules, reading, 0, now + 999));
        // Stale: the first claim wins, the others (other workers, the same ms or later) lose.
        assert!(latency.claims_probe(rules, reading, 0, now + 1000));
        assert!(!latency.claims_probe(rules, reading, 0, now + 1000));
        assert!(!latency.claims_probe(rules, reading, 0, now + 1999));
        // A probe in flight: its answer will tell.
        assert!(!latency.claims_probe(rules, reading, 1, now + 2000));
        assert!(latency.claims_probe(rules, reading, 0, now + 2000));
        // Claims from threads at once: one wins.
        let won: usize = std::thread::scope(|scope| {
            let claims: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| latency.claims_probe(rules, reading, 0, now + 3000)))
                .collect();
            claims
                .into_iter()
                .map(|c| usize::from(c.join().unwrap()))
                .sum()
        });
        assert_eq!(won, 1);
    }

    #[test]
    fn cost_is_latency_times_load_per_weight() {
        let (fast, slow, new) = (Latency::default(), Latency::default(), Latency::default());
        let at = Moment::now();
        fast.record(rules(), Sample::Answer(MS), at);
        slow.record(rules(), Sample::Answer(MS * 200), at);
        let candidate = |latency, in_flight, weight| Candidate {
            latency,
            in_flight,
            weight,
        };
        // A server 200 times slower is never preferred for its load: the fast one's estimate
        // already holds its queue.
        assert!(LatencyRules::cheaper(
            candidate(&fast, 25, 1),
            candidate(&slow, 0, 1)
        ));
        assert!(LatencyRules::cheaper(
            candidate(&fast, 250, 1),
            candidate(&slow, 0, 1)
        ));
        // Within eight times, the loads decide: 1 ms × 6 against 5 ms × 1.
        let (five, seven_and_a_half, eight) =
            (Latency::default(), Latency::default(), Latency::default());
        five.record(rules(), Sample::Answer(MS * 5), at);
        seven_and_a_half.record(rules(), Sample::Answer(MS * 15 / 2), at);
        eight.record(rules(), Sample::Answer(MS * 8), at);
        assert!(!LatencyRules::cheaper(
            candidate(&fast, 5, 1),
            candidate(&five, 0, 1)
        ));
        assert!(!LatencyRules::cheaper(
            candidate(&fast, 10, 1),
            candidate(&seven_and_a_half, 0, 1)
        ));
        assert!(LatencyRules::cheaper(
            candidate(&fast, 10, 1),
            candidate(&eight, 0, 1)
        ));
        assert!(!LatencyRules::cheaper(
            candidate(&eight, 0, 1),
            candidate(&fast, 10, 1)
        ));
        // Weight divides the cost.
        assert!(LatencyRules::cheaper(
            candidate(&fast, 3, 2),
            candidate(&fast, 2, 1)
        ));
        // No estimate: free while idle, a penalty per answer while its first are out.
        assert!(LatencyRules::cheaper(
            candidate(&new, 0, 1),
            candidate(&fast, 0, 1)
        ));
        assert!(LatencyRules::cheaper(
            candidate(&slow, 3, 1),
            candidate(&new, 1, 1)
        ));
    }
}
