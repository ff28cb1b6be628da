//! The Prometheus text format (version 0.0.4) as `/metrics` writes it: families with their HELP
//! and TYPE lines, samples with escaped labels, and histograms as cumulative buckets.

use std::fmt::{Display, Write};

use crate::stats::traffic::{TrafficTotals, BUCKET_BOUNDS_US};

/// The text being written.
#[derive(Default)]
pub(super) struct Exposition {
    pub(super) text: String,
}

impl Exposition {
    /// Starts a family: its HELP and TYPE lines. Its samples must follow before the next.
    pub(super) fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// A family of one unlabelled sample.
    pub(super) fn single(&mut self, name: &str, kind: &str, help: &str, value: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    pub(super) fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape_label(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    /// A histogram's cumulative buckets, sum (seconds) and count.
    pub(super) fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        traffic: &TrafficTotals,
    ) {
        let bounds: Vec<f64> = BUCKET_BOUNDS_US.iter().map(|&us| us as f64 / 1e6).collect();
        let cumulative: Vec<u64> = traffic
            .buckets
            .iter()
            .scan(0, |total, count| {
                *total += count;
                Some(*total)
            })
            .collect();
        let buckets = Buckets {
            bounds: &bounds,
            cumulative: &cumulative,
            sum_seconds: traffic.duration_sum_us as f64 / 1e6,
            count: traffic.requests,
        };
        self.buckets(name, labels, &buckets);
    }

    /// A histogram's samples: `_bucket` per bound and `+Inf`, `_sum`, `_count`.
    pub(super) fn buckets(&mut self, name: &str, labels: &[(&str, &str)], buckets: &Buckets<'_>) {
        let bucket_name = format!("{name}_bucket");
        let bounds: Vec<String> = buckets
            .bounds
            .iter()
            .map(f64::to_string)
            .chain(["+Inf".to_string()])
            .collect();
        let mut with_le = labels.to_vec();
        with_le.push(("le", ""));
        let last = with_le.len() - 1;
        for (count, bound) in buckets.cumulative.iter().zip(&bounds) {
            with_le[last].1 = bound;
            self.sample(&bucket_name, &with_le, count);
        }
        self.sample(&format!("{name}_sum"), labels, buckets.sum_seconds);
        self.sample(&format!("{name}_count"), labels, buckets.count);
    }
}

/// A histogram as the exposition writes it.
pub(super) struct Buckets<'a> {
    /// Upper bounds in seconds, `+Inf` left out.
    pub(super) bounds: &'a [f64],
    /// Counts within each bound, then of all (one more than `bounds`).
    pub(super) cumulative: &'a [u64],
    pub(super) sum_seconds: f64,
    pub(super) count: u64,
}

/// A label value with `\`, `"` and newlines escaped, as the format asks.
fn escape_label(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("plain"), "plain");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
