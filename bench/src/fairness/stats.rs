//! The figures a spread across workers is summed up by: coefficient of variation and max ÷ mean.

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

/// `numerator ÷ denominator`, NaN when nothing was counted.
pub fn per(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        f64::NAN
    } else {
        numerator as f64 / denominator as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_share_of_nothing_is_not_a_number() {
        assert!(per(1, 0).is_nan());
        assert_eq!(per(3, 2), 1.5);
    }
}
