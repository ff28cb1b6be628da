//! Summing up a set of measurements: the median and range of a figure over rounds, percentiles
//! of a distribution, and how evenly a quantity is spread across workers (coefficient of
//! variation, max ÷ mean).
//!
//! One convention each, used by every benchmark:
//! - a **percentile** is the nearest rank: the smallest value with at least p% of the values at or
//!   below it (so always one of the values measured, never an interpolation; the 50th of 1, 2, 3, 4
//!   is 2);
//! - a **median over rounds** (`Spread::median`) is the middle value, or with an even count the
//!   mean of the two middle ones (so two rounds give their mean).

/// Median and range of one figure over the rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub count: usize,
}

/// The median, min, max and count of `values` (in any order); None when empty.
pub fn spread(values: &[f64]) -> Option<Spread> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: sorted[0],
        max: sorted[n - 1],
        count: n,
    })
}

/// The `p`-th percentile (0–100) by nearest rank of already sorted values; None when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// `percentile` of values in any order (sorts a copy).
pub fn percentile_of(values: &[f64], p: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile(&sorted, p)
}

/// How evenly a quantity is spread across workers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Balance {
    pub mean: f64,
    /// Population standard deviation ÷ mean (0 when every worker has the same; NaN when all are 0).
    pub cv: f64,
    /// The largest worker's share over the mean (1 is perfect; 8 with 8 workers is "one took all").
    pub max_over_mean: f64,
}

/// The balance of per-worker values; None for no workers.
pub fn balance(values: &[u64]) -> Option<Balance> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<u64>() as f64 / n;
    let variance = values
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let max = values.iter().copied().max().unwrap_or(0) as f64;
    Some(Balance {
        mean,
        cv: variance.sqrt() / mean,
        max_over_mean: max / mean,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_middle_and_the_ends() {
        let s = spread(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.count), (2.0, 1.0, 3.0, 3));
        assert_eq!(spread(&[1.0, 4.0]).unwrap().median, 2.5);
        assert!(spread(&[]).is_none());
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(50.0));
        assert_eq!(percentile(&values, 99.0), Some(99.0));
        assert_eq!(percentile(&values, 100.0), Some(100.0));
        assert_eq!(percentile(&values, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn percentiles_of_unsorted_values_sort_them_first() {
        let values = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile_of(&values, 50.0), Some(3.0));
        assert_eq!(percentile_of(&values, 90.0), Some(5.0));
        assert_eq!(percentile_of(&values, 0.0), Some(1.0));
        assert_eq!(percentile_of(&[], 50.0), None);
    }

    #[test]
    fn an_even_spread_has_no_variation() {
        let b = balance(&[5, 5, 5, 5]).unwrap();
        assert_eq!((b.mean, b.cv, b.max_over_mean), (5.0, 0.0, 1.0));
    }

    #[test]
    fn one_worker_taking_all_shows_in_both_figures() {
        let b = balance(&[8, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(b.mean, 1.0);
        assert!((b.cv - 7f64.sqrt()).abs() < 1e-12);
        assert_eq!(b.max_over_mean, 8.0);
        let b = balance(&[90, 110]).unwrap();
        assert!((b.cv - 0.1).abs() < 1e-12);
        assert!((b.max_over_mean - 1.1).abs() < 1e-12);
        assert!(balance(&[]).is_none());
        assert!(balance(&[0, 0]).unwrap().cv.is_nan());
    }
}
