//! Paired rounds, the way `compare`, `slowloris` and `observability` measure one side against
//! another on a noisy machine: every side runs once per round, back to back, in an order that
//! turns from round to round (so that a drift over the whole run falls on every side alike); a
//! ratio between two sides is taken per round (its two runs back to back, so that a disturbance
//! from outside falls on one pair rather than on one side), and judged by its median over rounds
//! with that median's 95% interval (as is any figure measured once per round).

use std::fmt::Write as _;

use super::stats::{spread, Spread};

/// The order `sides` sides take their turns in `round` (from 1): 0, 1, … n−1 rotated by
/// round − 1. With two sides: 0 then 1 in odd rounds, 1 then 0 in even ones.
pub fn turn_order(sides: usize, round: u32) -> impl Iterator<Item = usize> {
    let shift = (round as usize).saturating_sub(1);
    (0..sides).map(move |turn| (turn + shift) % sides)
}

/// Whether the runs of `round` (from 1) are with the disturbance under test (slow clients, say),
/// in order: the turns of two sides, without first in odd rounds, with first in even ones.
pub fn without_and_with(round: u32) -> [bool; 2] {
    let mut turns = turn_order(2, round).map(|side| side == 1);
    [turns.next().unwrap_or(false), turns.next().unwrap_or(true)]
}

/// One figure of one side over the rounds: (round, value) for each run it made.
pub type Side = [(u32, f64)];

/// A figure of one side over another's, round by round.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedRatio {
    /// numerator ÷ denominator in each round where both ran, by round.
    pub rounds: Vec<f64>,
    /// The numerator's median over its rounds ÷ the denominator's; None when either never ran.
    pub of_medians: Option<f64>,
}

impl PairedRatio {
    pub fn of(numerator: &Side, denominator: &Side) -> PairedRatio {
        let mut rounds: Vec<u32> = numerator.iter().map(|&(round, _)| round).collect();
        rounds.sort_unstable();
        rounds.dedup();
        let first = |side: &Side, round: u32| {
            side.iter()
                .find(|&&(r, _)| r == round)
                .map(|&(_, value)| value)
        };
        let median = |side: &Side| {
            spread(&side.iter().map(|&(_, value)| value).collect::<Vec<_>>()).map(|s| s.median)
        };
        PairedRatio {
            rounds: rounds
                .into_iter()
                .filter_map(|round| Some(first(numerator, round)? / first(denominator, round)?))
                .collect(),
            of_medians: median(numerator)
                .zip(median(denominator))
                .map(|(n, d)| n / d),
        }
    }

    /// The rounds' ratios: their median (the figure judged against a target), min and max.
    pub fn per_round(&self) -> Option<Spread> {
        spread(&self.rounds)
    }

    /// The figure judged against a target: the median of the rounds' ratios.
    pub fn median(&self) -> Option<f64> {
        self.per_round().map(|s| s.median)
    }

    /// "met" when the median reaches `target`, "**NOT MET**" when it does not, "not measured"
    /// when no round has both runs.
    pub fn verdict(&self, target: f64) -> &'static str {
        match self.median() {
            None => "not measured",
            Some(r) if r >= target => "met",
            Some(_) => "**NOT MET**",
        }
    }

    /// The median of the rounds' ratios judged against `bound` (`judged`).
    pub fn judged(&self, bound: f64, at_most: bool) -> String {
        judged(&self.rounds, bound, at_most)
    }

    /// The median over rounds, and with several rounds their range and the ratio of the medians,
    /// as "96.2% (per round 92.0–99.1%; ratio of the medians 95.0%)"; "–" when no round has both
    /// runs.
    pub fn text(&self) -> String {
        let Some(rounds) = self.per_round() else {
            return "–".to_string();
        };
        let mut text = format!("{:.1}%", rounds.median * 100.0);
        if rounds.count > 1 {
            let _ = write!(
                text,
                " (per round {:.1}–{:.1}%",
                rounds.min * 100.0,
                rounds.max * 100.0
            );
            if let Some(of_medians) = self.of_medians {
                let _ = write!(text, "; ratio of the medians {:.1}%", of_medians * 100.0);
            }
            text.push(')');
        }
        text
    }
}

/// A 95% interval for the median of `values` (one per round), from their order statistics (the
/// count of rounds below the true median is binomial, n and ½): with 40 rounds the 14th to the
/// 27th smallest, with 100 the 41st to the 60th; the whole range below 6 rounds.
pub fn median_interval(values: &[f64]) -> Option<(f64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let below = ((n as f64 - 1.96 * (n as f64).sqrt()) / 2.0)
        .floor()
        .max(0.0) as usize;
    Some((*sorted.get(below)?, sorted[n - 1 - below]))
}

/// A target judged with the noise in view, on a figure measured once per round (`values`), such
/// as a ratio or a coefficient of variation: "met" when their median meets `bound` (at most it
/// when `at_most`, else at least), "not told apart" when it does not but the median's 95%
/// interval reaches the bound (the machine's noise is larger than the difference asked about),
/// "**NOT MET**" when the whole interval misses it; "not measured" without values.
pub fn judged(values: &[f64], bound: f64, at_most: bool) -> String {
    let (Some(median), Some((low, high))) =
        (spread(values).map(|s| s.median), median_interval(values))
    else {
        return "not measured".into();
    };
    let meets = |value: f64| {
        if at_most {
            value <= bound
        } else {
            value >= bound
        }
    };
    if meets(median) {
        "met".into()
    } else if meets(low) || meets(high) {
        format!("not told apart: the median's 95% interval {low:.3}–{high:.3} holds {bound}")
    } else {
        format!("**NOT MET** (the median's 95% interval {low:.3}–{high:.3})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_turns_rotate_so_every_side_takes_every_place() {
        let order = |n, round| turn_order(n, round).collect::<Vec<_>>();
        assert_eq!(order(2, 1), vec![0, 1]);
        assert_eq!(order(2, 2), vec![1, 0]);
        assert_eq!(order(2, 3), vec![0, 1]);
        assert_eq!(order(3, 2), vec![1, 2, 0]);
        assert_eq!(order(3, 3), vec![2, 0, 1]);
        assert_eq!(order(3, 1), vec![0, 1, 2]);
        assert_eq!(order(3, 4), vec![0, 1, 2]);
        assert!(order(0, 2).is_empty());
    }

    #[test]
    fn without_and_with_alternate_so_drift_falls_on_both() {
        assert_eq!(without_and_with(1), [false, true]);
        assert_eq!(without_and_with(2), [true, false]);
        assert_eq!(without_and_with(3), [false, true]);
    }

    #[test]
    fn ratios_pair_the_runs_of_one_round() {
        let with = [(1, 90.0), (2, 80.0), (3, 99.0)];
        let without = [(1, 100.0), (3, 100.0), (2, 100.0)];
        let ratio = PairedRatio::of(&with, &without);
        assert_eq!(ratio.rounds, vec![0.9, 0.8, 0.99]);
        assert_eq!(ratio.median(), Some(0.9));
        assert_eq!(ratio.of_medians, Some(0.9));
        let rounds = ratio.per_round().unwrap();
        assert_eq!((rounds.min, rounds.max, rounds.count), (0.8, 0.99, 3));
        assert_eq!(ratio.verdict(0.9), "met");
        assert_eq!(ratio.verdict(0.95), "**NOT MET**");
        assert_eq!(
            ratio.text(),
            "90.0% (per round 80.0–99.0%; ratio of the medians 90.0%)"
        );
        // A round with one side only has no ratio.
        let alone = PairedRatio::of(&[(1, 90.0)], &[(2, 100.0)]);
        assert!(alone.rounds.is_empty());
        assert_eq!(alone.verdict(0.9), "not measured");
        assert_eq!(alone.text(), "–");
        assert_eq!(PairedRatio::of(&[(1, 95.0)], &[(1, 100.0)]).text(), "95.0%");
    }

    #[test]
    fn a_median_judged_by_its_interval() {
        let side = |values: &[f64]| -> Vec<(u32, f64)> {
            values
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as u32 + 1, v))
                .collect()
        };
        let ones = side(&[1.0; 40]);
        // 40 rounds 0.80, 0.81, … 1.19: median 0.995, interval from the 14th to the 27th.
        let spread: Vec<f64> = (0..40).map(|i| 0.8 + f64::from(i) * 0.01).collect();
        let ratio = PairedRatio::of(&side(&spread), &ones);
        let (low, high) = median_interval(&ratio.rounds).unwrap();
        assert!(
            (low - 0.93).abs() < 1e-9 && (high - 1.06).abs() < 1e-9,
            "{low} {high}"
        );
        assert_eq!(ratio.judged(1.0, true), "met");
        assert!(ratio.judged(1.0, false).starts_with("not told apart"));
        assert!(ratio.judged(0.9, true).starts_with("**NOT MET**"));
        assert_eq!(ratio.judged(0.9, false), "met");
        assert_eq!(
            PairedRatio::of(&[], &ones).judged(1.0, true),
            "not measured"
        );
        // A figure measured once per round, judged alike.
        assert_eq!(judged(&[0.02, 0.04, 0.03], 0.05, true), "met");
        assert!(judged(&[0.02, 0.06, 0.07], 0.05, true).starts_with("not told apart"));
        assert_eq!(judged(&[], 0.05, true), "not measured");
    }
}
