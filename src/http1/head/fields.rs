//! What a head's header fields say that framing, persistence, Host, upgrade and 100-continue
//! depend on, taken field by field as the scan (`head/scan.rs`) finds them, refusing what no
//! server would read alike (differing Content-Lengths, too many Connection fields).

use super::HeadError;
use crate::http1::tokens::{list_contains, list_elements, trim_ows};

/// The Connection fields of a head (there may be several): which of its fields they are, as a
/// bit each (a head has at most `MAX_HEADERS`, 128). A head with more than 8 is refused as
/// malformed. 32 bytes, where the values themselves took 136: a request's and a response's
/// head are moved a few times each on their way (bench/results/diet.md).
#[derive(Debug, Default, Clone, Copy)]
pub struct ConnectionTokens<'h, 'b> {
    fields: &'h [httparse::Header<'b>],
    connection: u128,
}

// A bit per field of a head.
const _: () = assert!(crate::http1::MAX_HEADERS <= 128);

/// The most Connection fields a head may have.
const MOST_CONNECTION_FIELDS: u32 = 8;

impl<'h, 'b> ConnectionTokens<'h, 'b> {
    fn push(&mut self, index: usize) -> Result<(), HeadError> {
        if self.connection.count_ones() == MOST_CONNECTION_FIELDS {
            return Err(HeadError::Invalid("too many Connection fields"));
        }
        self.connection |= 1 << index;
        Ok(())
    }

    /// True when some Connection field lists `token`.
    pub fn contains(&self, token: &[u8]) -> bool {
        let mut rest = self.connection;
        while rest != 0 {
            let index = rest.trailing_zeros() as usize;
            if list_contains(self.fields[index].value, token) {
                return true;
            }
            rest &= rest - 1;
        }
        false
    }

    /// True when the field called `name` is named by Connection, and so is hop-by-hop. Framing
    /// fields and Host are never removed this way: a client that lists Content-Length in
    /// Connection must not make herdsman forward a body the server cannot delimit.
    pub fn names(&self, name: &str) -> bool {
        let protected = ["content-length", "transfer-encoding", "host"];
        // Most heads have no Connection field: nothing to compare then.
        self.connection != 0
            && !protected.iter().any(|p| name.eq_ignore_ascii_case(p))
            && self.contains(name.as_bytes())
    }
}

/// Facts gathered in the scan's one pass over the header fields.
#[derive(Default)]
pub(super) struct FieldFacts<'h, 'b> {
    pub(super) content_length: Option<u64>,
    pub(super) transfer_encoding_seen: bool,
    /// The last transfer coding is chunked (by name; parameters aside).
    pub(super) chunked_last: bool,
    pub(super) chunked_count: usize,
    /// Transfer codings listed, over all Transfer-Encoding fields.
    pub(super) coding_count: usize,
    /// The last transfer coding is exactly `chunked`, with no parameters.
    pub(super) plain_chunked_last: bool,
    pub(super) host: Option<&'b [u8]>,
    pub(super) host_count: usize,
    pub(super) upgrade_field: bool,
    pub(super) expect_continue: bool,
    pub(super) connection: ConnectionTokens<'h, 'b>,
}

impl<'h, 'b> FieldFacts<'h, 'b> {
    /// Takes what field `index` of the head, `name: value`, says, as the scan finds it.
    #[inline]
    pub(super) fn take(
        &mut self,
        index: usize,
        name: &str,
        value: &'b [u8],
    ) -> Result<(), HeadError> {
        // By length first: most fields are none of these, and each is told by one comparison.
        let name = name.as_bytes();
        match name.len() {
            14 if is_named(name, b"content-length") => {
                let length = parse_content_length(value)
                    .ok_or(HeadError::Invalid("invalid Content-Length"))?;
                if self.content_length.is_some_and(|seen| seen != length) {
                    return Err(HeadError::Invalid("differing Content-Length values"));
                }
                self.content_length = Some(length);
            }
            17 if is_named(name, b"transfer-encoding") => {
                self.transfer_encoding_seen = true;
                for coding in list_elements(value) {
                    let coding_name = trim_ows(coding.split(|&b| b == b';').next().unwrap_or(b""));
                    self.chunked_last = coding_name.eq_ignore_ascii_case(b"chunked");
                    if self.chunked_last {
                        self.chunked_count += 1;
                    }
                    self.coding_count += 1;
                    self.plain_chunked_last = coding.eq_ignore_ascii_case(b"chunked");
                }
            }
            4 if is_named(name, b"host") => {
                self.host = Some(value);
                self.host_count += 1;
            }
            10 if is_named(name, b"connection") => self.connection.push(index)?,
            7 if is_named(name, b"upgrade") => self.upgrade_field = true,
            6 if is_named(name, b"expect") => {
                self.expect_continue = trim_ows(value).eq_ignore_ascii_case(b"100-continue");
            }
            _ => {}
        }
        Ok(())
    }

    /// The head's fields, once all are scanned: what the Connection bits index.
    pub(super) fn of_fields(mut self, fields: &'h [httparse::Header<'b>]) -> FieldFacts<'h, 'b> {
        self.connection.fields = fields;
        self
    }
}

/// Whether a field's `name` (token bytes, as the scan takes them) is `lower` (lowercase letters
/// and `-`) in any case: of the token bytes, only a letter's two cases differ from a lowercase
/// letter in the 0x20 bit alone, and only `-` itself gives `-`; so one OR makes the comparison,
/// eight bytes at a time.
#[inline(always)]
fn is_named(name: &[u8], lower: &[u8]) -> bool {
    const CASE: u64 = 0x2020_2020_2020_2020;
    debug_assert!(lower.iter().all(|&b| b.is_ascii_lowercase() || b == b'-'));
    if name.len() != lower.len() {
        return false;
    }
    if name.len() < 8 {
        return name.iter().zip(lower).all(|(&a, &b)| a | 0x20 == b);
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8"));
    let last = name.len() - 8;
    let mut at = 0;
    while at < last {
        if word(name, at) | CASE != word(lower, at) {
            return false;
        }
        at += 8;
    }
    word(name, last) | CASE == word(lower, last)
}

/// Content-Length is 1*DIGIT; a list of identical values ("5, 5") is accepted as one (RFC 9110
/// §8.6). Anything else — signs, spaces inside, overflow, differing values — is refused.
fn parse_content_length(value: &[u8]) -> Option<u64> {
    // The usual value: digits alone.
    if !value.is_empty() && value.len() <= 19 && value.iter().all(u8::is_ascii_digit) {
        return Some(
            value
                .iter()
                .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
        );
    }
    let mut result = None;
    for element in value.split(|&b| b == b',') {
        let digits = trim_ows(element);
        if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = digits
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        if result.is_some_and(|r| r != n) {
            return None;
        }
        result = Some(n);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_told_in_any_case_and_by_no_other_token() {
        for lower in ["host", "expect", "upgrade", "connection", "content-length"] {
            let upper = lower.to_ascii_uppercase();
            assert!(is_named(upper.as_bytes(), lower.as_bytes()));
            assert!(is_named(lower.as_bytes(), lower.as_bytes()));
            // Every token byte in every place: only the name's own letters in either case match.
            for at in 0..lower.len() {
                let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
                for b in (0u8..=255).filter(token) {
                    let mut name = lower.as_bytes().to_vec();
                    name[at] = b;
                    assert_eq!(
                        is_named(&name, lower.as_bytes()),
                        name.eq_ignore_ascii_case(lower.as_bytes()),
                        "{:?}",
                        String::from_utf8_lossy(&name)
                    );
                }
            }
        }
        assert!(!is_named(b"hosts", b"host"));
    }
}
