//! Host names for the routing and SNI targets, built from a few labels so that fuzzed names
//! collide often.

/// The labels chosen by `bytes`, one a byte, joined by dots.
pub fn name(labels: &[&str], bytes: &[u8]) -> String {
    let chosen: Vec<&str> = bytes
        .iter()
        .map(|&b| labels[usize::from(b) % labels.len()])
        .collect();
    chosen.join(".")
}
