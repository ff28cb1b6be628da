//! A head's bytes read in one pass: the request line or status line, then each header field,
//! whose facts (`head/fields.rs`) are taken as it is found. The grammar and the errors are
//! httparse's, byte for byte (the tests compare the two on every prefix and one-byte change of
//! sample heads, and on thousands of heads made of random pieces); what changed is the cost.
//! httparse, then a second pass for the facts, took 1,913 instructions for a keep-alive
//! request's two one-field heads; this scan takes 1,368 (callgrind, bench/results/diet.md):
//! targets and values are checked eight bytes at a time, each field is looked at once, and a
//! field's name is told by its length and one comparison.

use std::mem::MaybeUninit;

use httparse::{Error, Header};

use super::fields::FieldFacts;
use super::HeadError;

/// A scan's end: `Ok(None)` while the head is incomplete.
pub(super) type Scanned<T> = Result<Option<T>, Error>;

/// A request head's parts.
pub(super) struct RequestHead<'h, 'b> {
    pub(super) method: &'b str,
    pub(super) target: &'b str,
    pub(super) minor_version: u8,
    pub(super) fields: Fields<'h, 'b>,
}

/// A response head's parts.
pub(super) struct ResponseHead<'h, 'b> {
    pub(super) minor_version: u8,
    pub(super) code: u16,
    pub(super) reason: &'b str,
    pub(super) fields: Fields<'h, 'b>,
}

/// A head's fields, its length, and what its fields say (or the first thing refused in them,
/// which the caller reports once it has checked the head's size, as it did after httparse).
pub(super) struct Fields<'h, 'b> {
    pub(super) fields: &'h [Header<'b>],
    pub(super) head_len: usize,
    pub(super) facts: Result<FieldFacts<'h, 'b>, HeadError>,
}

/// Bytes of a token (RFC 9110 §5.6.2): a method, a field name.
const TOKEN: u8 = 1;
/// Bytes of a request target as httparse takes them: visible ASCII and obs-text.
const TARGET: u8 = 2;
/// Bytes of a field value: HTAB, SP, visible ASCII and obs-text.
const VALUE: u8 = 4;
/// Bytes of a reason phrase: as a value's.
const REASON: u8 = VALUE;

static CLASSES: [u8; 256] = classes();

const fn classes() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        let mut class = 0;
        if byte.is_ascii_alphanumeric() {
            class |= TOKEN;
        }
        if matches!(byte, 0x21..=0x7e | 0x80..=0xff) {
            class |= TARGET;
        }
        if matches!(byte, b'\t' | 0x20..=0x7e | 0x80..=0xff) {
            class |= VALUE;
        }
        table[b] = class;
        b += 1;
    }
    let others = b"!#$%&'*+-.^_`|~";
    let mut i = 0;
    while i < others.len() {
        table[others[i] as usize] |= TOKEN;
        i += 1;
    }
    table
}

#[inline(always)]
fn is(class: u8, b: u8) -> bool {
    CLASSES[usize::from(b)] & class != 0
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any of the eight bytes in `word` is below `n` (n ≤ 0x80); exact for the first such
/// byte, so a word it says nothing of holds none.
#[inline(always)]
fn any_below(word: u64, n: u8) -> bool {
    word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS != 0
}

/// Whether any of the eight bytes in `word` is `b`.
#[inline(always)]
fn any_is(word: u64, b: u8) -> bool {
    any_below(word ^ (ONES * u64::from(b)), 1)
}

/// The first position from `at` whose byte is not of `class`: eight bytes at a time while none
/// is below `low` or DEL (what both a target and a value refuse), then byte by byte.
#[inline(always)]
fn run_of(buf: &[u8], mut at: usize, class: u8, low: u8) -> usize {
    while let Some(chunk) = buf.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        if any_below(word, low) || any_is(word, 0x7f) {
            break;
        }
        at += 8;
    }
    run_of_bytes(buf, at, class)
}

/// The first position from `at` whose byte is not of `class`, byte by byte.
#[inline(always)]
fn run_of_bytes(buf: &[u8], at: usize, class: u8) -> usize {
    match buf.get(at..) {
        Some(rest) => {
            at + rest
                .iter()
                .position(|&b| !is(class, b))
                .unwrap_or(rest.len())
        }
        None => at,
    }
}

/// The empty lines a head may follow (RFC 9112 §2.2), skipped; `Ok(None)` when the buffer ends
/// first.
#[inline]
fn skip_empty_lines(buf: &[u8], mut at: usize) -> Scanned<usize> {
    loop {
        match buf.get(at) {
            Some(b'\r') => match buf.get(at + 1) {
                Some(b'\n') => at += 2,
                Some(_) => return Err(Error::NewLine),
                None => return Ok(None),
            },
            Some(b'\n') => at += 1,
            Some(_) => return Ok(Some(at)),
            None => return Ok(None),
        }
    }
}

/// `HTTP/1.0` or `HTTP/1.1` at `at`: its minor version. Any other eight bytes are a version
/// error (which the caller tells apart: a later minor version, another major one).
#[inline]
fn version(buf: &[u8], at: usize) -> Scanned<u8> {
    match buf.get(at..at + 8) {
        Some(b"HTTP/1.1") => Ok(Some(1)),
        Some(b"HTTP/1.0") => Ok(Some(0)),
        Some(_) => Err(Error::Version),
        None => {
            let come = &buf[at..];
            match b"HTTP/1."[..come.len().min(7)] == come[..come.len().min(7)] {
                true => Ok(None),
                false => Err(Error::Version),
            }
        }
    }
}

/// A line's end at `at` (CRLF, or a bare LF as httparse takes it): the position after it.
#[inline(always)]
fn line_end(buf: &[u8], at: usize, error: Error) -> Scanned<usize> {
    match buf.get(at) {
        Some(b'\r') => match buf.get(at + 1) {
            Some(b'\n') => Ok(Some(at + 2)),
            Some(_) => Err(error),
            None => Ok(None),
        },
        Some(b'\n') => Ok(Some(at + 1)),
        Some(_) => Err(error),
        None => Ok(None),
    }
}

/// Reads a request head at the start of `buf` into its parts, its fields into `slots`. Inlined,
/// as are the fields' scan and `response`: their parts are then made where they are used rather
/// than moved out (with runs scanned by `position`, 216 instructions less for a keep-alive
/// request's two heads, callgrind).
#[inline(always)]
pub(super) fn request<'h, 'b>(
    buf: &'b [u8],
    slots: &'h mut [MaybeUninit<Header<'b>>],
) -> Scanned<RequestHead<'h, 'b>> {
    let Some(start) = skip_empty_lines(buf, 0)? else {
        return Ok(None);
    };
    // The method: a token, then one SP.
    let at = run_of_bytes(buf, start, TOKEN);
    match buf.get(at) {
        None => return Ok(None),
        Some(b' ') if at > start => {}
        Some(_) => return Err(Error::Token),
    }
    // SAFETY: token bytes are ASCII.
    let method = unsafe { std::str::from_utf8_unchecked(&buf[start..at]) };
    // The target, then one SP.
    let target_at = at + 1;
    let target_end = run_of(buf, target_at, TARGET, 0x21);
    match buf.get(target_end) {
        None => return Ok(None),
        Some(b' ') if target_end > target_at => {}
        Some(_) => return Err(Error::Token),
    }
    let target_bytes = &buf[target_at..target_end];
    let target = match target_bytes.is_ascii() {
        // SAFETY: ASCII is UTF-8.
        true => unsafe { std::str::from_utf8_unchecked(target_bytes) },
        false => std::str::from_utf8(target_bytes).map_err(|_| Error::Token)?,
    };
    let Some(minor_version) = version(buf, target_end + 1)? else {
        return Ok(None);
    };
    let Some(fields_at) = line_end(buf, target_end + 9, Error::NewLine)? else {
        return Ok(None);
    };
    let Some(fields) = fields(buf, fields_at, slots)? else {
        return Ok(None);
    };
    Ok(Some(RequestHead {
        method,
        target,
        minor_version,
        fields,
    }))
}

/// Reads a response head at the start of `buf` into its parts, its fields into `slots`.
#[inline(always)]
pub(super) fn response<'h, 'b>(
    buf: &'b [u8],
    slots: &'h mut [MaybeUninit<Header<'b>>],
) -> Scanned<ResponseHead<'h, 'b>> {
    let Some(start) = skip_empty_lines(buf, 0)? else {
        return Ok(None);
    };
    let Some(minor_version) = version(buf, start)? else {
        return Ok(None);
    };
    let mut at = start + 8;
    match buf.get(at) {
        None => return Ok(None),
        Some(b' ') => at += 1,
        Some(_) => return Err(Error::Version),
    }
    let mut code = 0u16;
    for _ in 0..3 {
        match buf.get(at) {
            None => return Ok(None),
            Some(digit @ b'0'..=b'9') => code = code * 10 + u16::from(digit - b'0'),
            Some(_) => return Err(Error::Status),
        }
        at += 1;
    }
    // A reason phrase after one SP, or none: the line may end at the code.
    let (reason, fields_at) = match buf.get(at) {
        None => return Ok(None),
        Some(b' ') => {
            let reason_at = at + 1;
            let reason_end = run_of(buf, reason_at, REASON, 0x20);
            let Some(after) = line_end(buf, reason_end, Error::Status)? else {
                return Ok(None);
            };
            let bytes = &buf[reason_at..reason_end];
            // A reason with obs-text is dropped, as httparse drops it (it is not UTF-8).
            // SAFETY: ASCII is UTF-8.
            let reason = match bytes.is_ascii() {
                true => unsafe { std::str::from_utf8_unchecked(bytes) },
                false => "",
            };
            (reason, after)
        }
        Some(b'\r' | b'\n') => match line_end(buf, at, Error::Status)? {
            Some(after) => ("", after),
            None => return Ok(None),
        },
        Some(_) => return Err(Error::Status),
    };
    let Some(fields) = fields(buf, fields_at, slots)? else {
        return Ok(None);
    };
    Ok(Some(ResponseHead {
        minor_version,
        code,
        reason,
        fields,
    }))
}

/// The header fields from `at` to the blank line, each into the next of `slots` (more than
/// there are slots is `TooManyHeaders`), each's facts taken as it is found.
#[inline(always)]
fn fields<'h, 'b>(
    buf: &'b [u8],
    mut at: usize,
    slots: &'h mut [MaybeUninit<Header<'b>>],
) -> Scanned<Fields<'h, 'b>> {
    let mut count = 0;
    let mut facts = Ok(FieldFacts::default());
    loop {
        let Some(&first) = buf.get(at) else {
            return Ok(None);
        };
        // The blank line.
        if first == b'\r' || first == b'\n' {
            let Some(end) = line_end(buf, at, Error::NewLine)? else {
                return Ok(None);
            };
            // SAFETY: the first `count` slots were written with fields borrowing `buf`.
            let fields =
                unsafe { std::slice::from_raw_parts(slots.as_ptr().cast::<Header<'b>>(), count) };
            return Ok(Some(Fields {
                fields,
                head_len: end,
                facts: facts.map(|facts| facts.of_fields(fields)),
            }));
        }
        // The name: a token, then the colon.
        let name_at = at;
        at = run_of_bytes(buf, at, TOKEN);
        match buf.get(at) {
            None => return Ok(None),
            Some(b':') if at > name_at => {}
            Some(_) => return Err(Error::HeaderName),
        }
        // SAFETY: token bytes are ASCII.
        let name = unsafe { std::str::from_utf8_unchecked(&buf[name_at..at]) };
        at += 1;
        // Whitespace, then the value (which may be empty), then the line's end.
        while let Some(b' ' | b'\t') = buf.get(at) {
            at += 1;
        }
        let value_at = at;
        let value_end = run_of(buf, value_at, VALUE, 0x20);
        let Some(next) = line_end(buf, value_end, Error::HeaderValue)? else {
            return Ok(None);
        };
        let mut value = &buf[value_at..value_end];
        while let [rest @ .., b' ' | b'\t'] = value {
            value = rest;
        }
        at = next;
        let Some(slot) = slots.get_mut(count) else {
            return Err(Error::TooManyHeaders);
        };
        slot.write(Header { name, value });
        if let Ok(gathered) = &mut facts {
            if let Err(refused) = gathered.take(count, name, value) {
                facts = Err(refused);
            }
        }
        count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::{header_slots, MAX_HEADERS};

    type Fields = Vec<(String, Vec<u8>)>;
    type RequestParts = (String, String, u8, Fields, usize);

    /// What httparse makes of a request head, in the scan's terms.
    fn httparse_request(buf: &[u8]) -> Result<Option<RequestParts>, Error> {
        let mut slots = header_slots();
        let mut request = httparse::Request::new(&mut []);
        match httparse::ParserConfig::default().parse_request_with_uninit_headers(
            &mut request,
            buf,
            &mut slots,
        )? {
            httparse::Status::Partial => Ok(None),
            httparse::Status::Complete(len) => Ok(Some((
                request.method.unwrap().to_owned(),
                request.path.unwrap().to_owned(),
                request.version.unwrap(),
                request
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect(),
                len,
            ))),
        }
    }

    fn scanned_request(buf: &[u8]) -> Result<Option<RequestParts>, Error> {
        let mut slots = header_slots();
        Ok(request(buf, &mut slots)?.map(|head| {
            (
                head.method.to_owned(),
                head.target.to_owned(),
                head.minor_version,
                head.fields
                    .fields
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect(),
                head.fields.head_len,
            )
        }))
    }

    type ResponseParts = (u8, u16, String, Fields, usize);

    fn httparse_response(buf: &[u8]) -> Result<Option<ResponseParts>, Error> {
        let mut slots = header_slots();
        let mut response = httparse::Response::new(&mut []);
        match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut response,
            buf,
            &mut slots,
        )? {
            httparse::Status::Partial => Ok(None),
            httparse::Status::Complete(len) => Ok(Some((
                response.version.unwrap(),
                response.code.unwrap(),
                response.reason.unwrap().to_owned(),
                response
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect(),
                len,
            ))),
        }
    }

    fn scanned_response(buf: &[u8]) -> Result<Option<ResponseParts>, Error> {
        let mut slots = header_slots();
        Ok(response(buf, &mut slots)?.map(|head| {
            (
                head.minor_version,
                head.code,
                head.reason.to_owned(),
                head.fields
                    .fields
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect(),
                head.fields.head_len,
            )
        }))
    }

    /// Every prefix of `whole`, and `whole` with each byte replaced by each of `replacements`:
    /// the scan and httparse agree on every one.
    fn agree_around(whole: &[u8], replacements: &[u8]) {
        let mut inputs: Vec<Vec<u8>> = (0..=whole.len()).map(|n| whole[..n].to_vec()).collect();
        for at in 0..whole.len() {
            for &b in replacements {
                let mut changed = whole.to_vec();
                changed[at] = b;
                inputs.push(changed);
            }
        }
        for input in &inputs {
            assert_eq!(
                scanned_request(input),
                httparse_request(input),
                "request {:?}",
                String::from_utf8_lossy(input)
            );
            assert_eq!(
                scanned_response(input),
                httparse_response(input),
                "response {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    const BYTES: &[u8] = b" \t\r\n:/a0-\x00\x7f\x80\xff\"HP1.";

    #[test]
    fn requests_read_as_httparse_reads_them() {
        agree_around(
            b"\r\nGET /a/b?c=d HTTP/1.1\r\nHost: example.com:8080\r\nX-Long-Value: 0123456789abcdefghij  \r\nEmpty:\r\nTabbed:\t v \t\r\n\r\nbody",
            BYTES,
        );
        agree_around(b"POST http://h/\xc3\xa9 HTTP/1.0\nA:b\n\n", BYTES);
    }

    #[test]
    fn responses_read_as_httparse_reads_them() {
        agree_around(
            b"HTTP/1.1 200 OK fine\r\nContent-Length: 19\r\nSet-Cookie: a=b; Path=/; HttpOnly\r\n\r\n",
            BYTES,
        );
        agree_around(b"HTTP/1.0 404\nA: \xe9t\xe9\n\n", BYTES);
        agree_around(b"HTTP/1.1 500 caf\xc3\xa9\r\n\r\n", BYTES);
    }

    #[test]
    fn too_many_fields_are_refused_as_httparse_refuses_them() {
        let mut head = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            head.extend_from_slice(format!("F{i}: v\r\n").as_bytes());
            let mut whole = head.clone();
            whole.extend_from_slice(b"\r\n");
            assert_eq!(
                scanned_request(&whole),
                httparse_request(&whole),
                "{i} fields"
            );
        }
        assert_eq!(scanned_request(&head), Err(Error::TooManyHeaders));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Pieces heads are made of, and the bytes that break them.
        fn piece() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                prop::sample::select(vec![
                    &b"GET "[..],
                    b"POST ",
                    b"HTTP/1.1",
                    b"HTTP/1.0",
                    b"HTTP/1.2",
                    b"HTTP/2.0",
                    b" 200 OK",
                    b" 404",
                    b"\r\n",
                    b"\n",
                    b"\r",
                    b": ",
                    b":",
                    b" ",
                    b"\t",
                    b"Host",
                    b"Content-Length",
                    b"Connection: close",
                    b"/",
                    b"?a=b",
                    b"\xc3\xa9",
                ])
                .prop_map(<[u8]>::to_vec),
                "[a-zA-Z0-9-]{1,12}".prop_map(String::into_bytes),
                proptest::collection::vec(any::<u8>(), 1..4),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4096))]

            /// Any sequence of such pieces reads the same through the scan as through httparse,
            /// as a request and as a response: the same parts, the same error, the same wait.
            #[test]
            fn heads_of_any_pieces_read_as_httparse_reads_them(
                pieces in proptest::collection::vec(piece(), 0..24),
            ) {
                let input = pieces.concat();
                prop_assert_eq!(scanned_request(&input), httparse_request(&input));
                prop_assert_eq!(scanned_response(&input), httparse_response(&input));
                let mut as_request = b"GET / HTTP/1.1\r\n".to_vec();
                as_request.extend_from_slice(&input);
                prop_assert_eq!(scanned_request(&as_request), httparse_request(&as_request));
                let mut as_response = b"HTTP/1.1 200 OK\r\n".to_vec();
                as_response.extend_from_slice(&input);
                prop_assert_eq!(scanned_response(&as_response), httparse_response(&as_response));
            }
        }
    }

    #[test]
    fn a_fields_refusal_waits_for_the_whole_head() {
        let mut slots = header_slots();
        let head = request(b"GET / HTTP/1.1\r\nContent-Length: x\r\n", &mut slots);
        assert!(matches!(head, Ok(None)));
        let mut slots = header_slots();
        let head = request(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", &mut slots)
            .unwrap()
            .unwrap();
        assert!(matches!(
            head.fields.facts,
            Err(HeadError::Invalid("invalid Content-Length"))
        ));
    }
}
