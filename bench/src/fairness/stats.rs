//! A share of a count that may be nothing (the spread across workers is `kit::stats::balance`).

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
    fn a_share_of_nothing_is_not_a_number() {
        assert!(per(1, 0).is_nan());
        assert_eq!(per(3, 2), 1.5);
    }
}
