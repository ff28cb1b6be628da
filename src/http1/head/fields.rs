//! The one pass over a head's header fields that gathers what framing, persistence, Host,
//! upgrade and 100-continue depend on, refusing what no server would read alike (differing
//! Content-Lengths, too many Connection fields).

use super::HeadError;
use crate::http1::tokens::{list_contains, list_elements, trim_ows};

/// The Connection field values of a head (there may be several fields). Up to 8 are kept;
/// a head with more Connection fields than that is refused as malformed.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConnectionTokens<'b> {
    values: [&'b [u8]; 8],
    count: usize,
}

impl<'b> ConnectionTokens<'b> {
    fn push(&mut self, value: &'b [u8]) -> Result<(), HeadError> {
        if self.count == self.values.len() {
            return Err(HeadError::Invalid("too many Connection fields"));
        }
        self.values[self.count] = value;
        self.count += 1;
        Ok(())
    }

    /// True when some Connection field lists `token`.
    pub fn contains(&self, token: &[u8]) -> bool {
        self.values[..self.count]
            .iter()
            .any(|v| list_contains(v, token))
    }

    /// True when the field called `name` is named by Connection, and so is hop-by-hop. Framing
    /// fields and Host are never removed this way: a client that lists Content-Length in
    /// Connection must not make herdsman forward a body the server cannot delimit.
    pub fn names(&self, name: &str) -> bool {
        let protected = ["content-length", "transfer-encoding", "host"];
        !protected.iter().any(|p| name.eq_ignore_ascii_case(p)) && self.contains(name.as_bytes())
    }
}

/// Facts gathered in one pass over the header fields.
#[derive(Default)]
pub(super) struct FieldFacts<'b> {
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
    pub(super) connection: ConnectionTokens<'b>,
}

pub(super) fn gather_facts<'b>(
    headers: &[httparse::Header<'b>],
) -> Result<FieldFacts<'b>, HeadError> {
    let mut facts = FieldFacts::default();
    for header in headers {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            let length = parse_content_length(header.value)
                .ok_or(HeadError::Invalid("invalid Content-Length"))?;
            if facts.content_length.is_some_and(|seen| seen != length) {
                return Err(HeadError::Invalid("differing Content-Length values"));
            }
            facts.content_length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            facts.transfer_encoding_seen = true;
            for coding in list_elements(header.value) {
                let coding_name = trim_ows(coding.split(|&b| b == b';').next().unwrap_or(b""));
                facts.chunked_last = coding_name.eq_ignore_ascii_case(b"chunked");
                if facts.chunked_last {
                    facts.chunked_count += 1;
                }
                facts.coding_count += 1;
                facts.plain_chunked_last = coding.eq_ignore_ascii_case(b"chunked");
            }
        } else if name.eq_ignore_ascii_case("host") {
            facts.host = Some(header.value);
            facts.host_count += 1;
        } else if name.eq_ignore_ascii_case("connection") {
            facts.connection.push(header.value)?;
        } else if name.eq_ignore_ascii_case("upgrade") {
            facts.upgrade_field = true;
        } else if name.eq_ignore_ascii_case("expect") {
            facts.expect_continue = trim_ows(header.value).eq_ignore_ascii_case(b"100-continue");
        }
    }
    Ok(facts)
}

/// Content-Length is 1*DIGIT; a list of identical values ("5, 5") is accepted as one (RFC 9110
/// §8.6). Anything else — signs, spaces inside, overflow, differing values — is refused.
fn parse_content_length(value: &[u8]) -> Option<u64> {
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
