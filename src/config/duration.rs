//! Durations as written in the config: a whole number and a unit, "2s", "150ms" — parsing them,
//! and writing them back the same way in messages.

use std::time::Duration;

/// Ends every parse error, so the fix sits on the same line as the problem.
const HOW_TO_WRITE: &str = r#"write a number and a unit, e.g. "2s" or "150ms""#;

/// The longest duration accepted: a year. No timeout needs more, and the cap keeps
/// `Instant::now() + duration` (which panics on overflow) safe wherever a timeout is armed.
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// Units in the order [`format_duration`] tries them, each with its size in microseconds.
const UNITS: [(&str, u64); 5] = [
    ("h", 3_600_000_000),
    ("m", 60_000_000),
    ("s", 1_000_000),
    ("ms", 1_000),
    ("us", 1),
];

/// Parses an unsigned whole number immediately followed by a unit — `us`, `ms`, `s`, `m` or `h` —
/// such as "150ms", "2s", "1m". No spaces, fractions, signs or bare numbers: "1.5s" is written
/// "1500ms". "0s" parses; whether zero makes sense is the caller's rule. At most a year.
///
/// The error says what was wrong and how to write it, ready to follow `key = "value": `.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let refuse = |problem: &str| Err(format!("{problem}; {HOW_TO_WRITE}"));

    if text.is_empty() {
        return refuse("empty");
    }
    if text.contains(char::is_whitespace) {
        return refuse("no spaces allowed");
    }
    if text.starts_with(['-', '+']) {
        return refuse("no sign allowed");
    }
    if number.is_empty() {
        return refuse("no number");
    }
    if unit.starts_with(['.', ',']) {
        return refuse(r#"no fractions; use a smaller unit, e.g. "1500ms" for 1.5 seconds"#);
    }
    if unit.is_empty() {
        return refuse("no unit");
    }
    let Some(&(_, unit_micros)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return refuse(&format!(
            r#"unknown unit "{unit}" (units: us, ms, s, m, h)"#
        ));
    };

    let too_long = || r#"too long; at most a year ("8760h")"#.to_string();
    // A count too large for u64 and a product past u64 microseconds are both far beyond a year.
    let count: u64 = number.parse().map_err(|_| too_long())?;
    let micros = count.checked_mul(unit_micros).ok_or_else(too_long)?;
    let duration = Duration::from_micros(micros);
    if duration > LONGEST {
        return Err(too_long());
    }
    Ok(duration)
}

/// Writes a duration in the largest unit that represents it exactly, so that what
/// [`parse_duration`] read comes back recognisably: 2s → "2s", 1500ms → "1500ms", 120s → "2m".
pub fn format_duration(duration: Duration) -> String {
    let micros = duration.as_micros();
    if micros == 0 {
        return "0s".to_string();
    }
    let (name, size) = UNITS
        .into_iter()
        .find(|&(_, size)| micros.is_multiple_of(u128::from(size)))
        .unwrap_or(("us", 1));
    format!("{}{name}", micros / u128::from(size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> String {
        parse_duration(text).expect_err(text)
    }

    #[test]
    fn every_unit_parses() {
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("150ms"), Ok(Duration::from_millis(150)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("8760h"), Ok(LONGEST));
    }

    #[test]
    fn a_bare_number_is_refused_with_an_example() {
        assert_eq!(
            error_of("2"),
            r#"no unit; write a number and a unit, e.g. "2s" or "150ms""#
        );
    }

    #[test]
    fn spaces_fractions_signs_and_missing_numbers_are_refused() {
        assert!(error_of("2 s").starts_with("no spaces allowed; write a number and a unit"));
        assert!(error_of(" 2s").starts_with("no spaces allowed;"));
        assert!(error_of("1.5s").starts_with(r#"no fractions; use a smaller unit, e.g. "1500ms""#));
        assert!(error_of("-1s").starts_with("no sign allowed;"));
        assert!(error_of("+1s").starts_with("no sign allowed;"));
        assert!(error_of("s").starts_with("no number;"));
        assert!(error_of("").starts_with("empty;"));
    }

    #[test]
    fn unknown_units_are_named_with_the_accepted_ones() {
        assert_eq!(
            error_of("2sec"),
            r#"unknown unit "sec" (units: us, ms, s, m, h); write a number and a unit, e.g. "2s" or "150ms""#
        );
        assert!(error_of("2S").starts_with(r#"unknown unit "S""#));
        assert!(error_of("2d").starts_with(r#"unknown unit "d""#));
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        assert_eq!(
            error_of("9999999999999999999h"),
            r#"too long; at most a year ("8760h")"#
        );
        assert!(error_of("99999999999999999999999s").starts_with("too long"));
        assert!(error_of("8761h").starts_with("too long"));
        assert!(error_of("5124095576030431h").starts_with("too long"));
    }

    #[test]
    fn formatting_uses_the_largest_exact_unit_and_parses_back() {
        for (duration, text) in [
            (Duration::from_secs(2), "2s"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_micros(7), "7us"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(format_duration(duration), text);
            assert_eq!(parse_duration(text), Ok(duration));
        }
    }
}
