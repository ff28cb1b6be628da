//! Small byte-level helpers for comma-separated header values and token comparison.

/// The elements of a comma-separated header value (RFC 9110 §5.6.1), trimmed of optional
/// whitespace, empty elements skipped.
pub fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|e| !e.is_empty())
}

/// Trims spaces and tabs at both ends.
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

pub use crate::config::token::is_token_byte;

/// True when `value`, as a comma-separated list, holds `token` (ASCII case-insensitive).
pub fn list_contains(value: &[u8], token: &[u8]) -> bool {
    list_elements(value).any(|e| e.eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_split_and_trim() {
        let got: Vec<&[u8]> = list_elements(b" keep-alive ,, Upgrade\t").collect();
        assert_eq!(got, vec![&b"keep-alive"[..], &b"Upgrade"[..]]);
        assert!(list_contains(b"close, Upgrade", b"upgrade"));
        assert!(!list_contains(b"closed", b"close"));
    }
}
