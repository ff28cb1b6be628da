//! The one pass over a head's header fields that gathers what framing, persistence, Host,
//! upgrade and 100-continue depend on, refusing what no server would read alike (differing
//! Content-Lengths, too many Connection fields).

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

/// Facts gathered in one pass over the header fields.
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

pub(super) fn gather_facts<'h, 'b>(
    headers: &'h [httparse::Header<'b>],
) -> Result<FieldFacts<'h, 'b>, HeadError> {
    let mut facts = FieldFacts::default();
    facts.connection.fields = headers;
    for (index, header) in headers.iter().enumerate() {
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
            facts.connection.push(index)?;
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
