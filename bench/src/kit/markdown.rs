//! How figures and lists read in the results files and the summaries: numbers grouped by
//! thousands, milliseconds, worker counts in words, prose lists, table cells of a spread over rounds, and the
//! folded table of every run.

use std::fmt::Write as _;

use super::stats::Spread;

/// A whole number with thin groups of three: 57,123.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Milliseconds: whole above 100 ("1,063"), two decimals below 10, one between.
pub fn milliseconds(value: f64) -> String {
    if value >= 100.0 {
        thousands(value)
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// `text` on one line, its runs of white space (newlines among them) made one space.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// "1 worker", "2 workers".
pub fn worker_count(workers: u32) -> String {
    if workers == 1 {
        "1 worker".to_string()
    } else {
        format!("{workers} workers")
    }
}

/// "1 worker", "2 workers", "1 and 2 workers", "1, 2 and 4 workers"; "no workers" for none.
pub fn worker_counts(counts: &[u32]) -> String {
    match counts {
        [] => "no workers".to_string(),
        [1] => "1 worker".to_string(),
        _ => format!("{} workers", and_list(counts)),
    }
}

/// "1 and 2", "1, 2 and 4".
pub fn and_list(values: &[u32]) -> String {
    match values {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!(
            "{} and {last}",
            rest.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A table cell: the median, and with several rounds the min–max; "–" when none ran.
pub fn spread_cell(spread: Option<Spread>, format: fn(f64) -> String) -> String {
    match spread {
        None => "–".to_string(),
        Some(s) if s.count == 1 => format(s.median),
        Some(s) => format!("{} ({}–{})", format(s.median), format(s.min), format(s.max)),
    }
}

/// A section `## heading` holding a folded table: `header`, `alignment`, then one line per row.
pub fn write_details_table(
    md: &mut String,
    heading: &str,
    header: &str,
    alignment: &str,
    rows: impl ExactSizeIterator<Item = String>,
) {
    let _ = writeln!(md, "## {heading}\n");
    let _ = writeln!(md, "<details><summary>{} runs</summary>\n", rows.len());
    let _ = writeln!(md, "{header}\n{alignment}");
    for row in rows {
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md, "\n</details>\n");
}

/// Fails the test unless `text` contains every one of `parts`, naming the first missing.
#[cfg(test)]
pub fn assert_contains_all(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} missing from:\n{text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(57123.4), "57,123");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(milliseconds(1234.4), "1,234");
        assert_eq!(milliseconds(12.34), "12.3");
        assert_eq!(milliseconds(1.234), "1.23");
    }

    #[test]
    fn lists_read_as_prose() {
        assert_eq!(and_list(&[1]), "1");
        assert_eq!(and_list(&[1, 2]), "1 and 2");
        assert_eq!(and_list(&[50, 200, 1000]), "50, 200 and 1000");
        assert_eq!(worker_count(1), "1 worker");
        assert_eq!(worker_count(2), "2 workers");
    }

    #[test]
    fn worker_counts_read_as_words() {
        assert_eq!(worker_counts(&[1]), "1 worker");
        assert_eq!(worker_counts(&[2]), "2 workers");
        assert_eq!(worker_counts(&[1, 2]), "1 and 2 workers");
        assert_eq!(worker_counts(&[1, 2, 4]), "1, 2 and 4 workers");
        assert_eq!(worker_counts(&[]), "no workers");
    }
}
