//! Summing up a set of measurements: the median and range of a figure over rounds, and
//! percentiles of a distribution.
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
}
