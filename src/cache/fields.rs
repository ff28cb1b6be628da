//! What the cache reads of a request's and a response's fields: the request's cache controls,
//! credentials, conditions and method overrides; the response's freshness, validators, `Vary`
//! and surrogate keys.

use crate::http1::Response;

use super::control::{RequestControl, ResponseControl};
use super::freshness::{http_date, ResponseFacts};

/// What the cache needs of a request, read in one pass over its fields.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestFields<'b> {
    pub control: RequestControl,
    /// `Authorization`: a response to it is stored only as RFC 9111 §3.5 allows.
    pub authorization: bool,
    /// `X-HTTP-Method-Override` and its kin: the server may act on another method than the
    /// one herdsman sees, so the request is neither served from the cache nor stored into it.
    pub method_override: bool,
    /// `If-None-Match`'s value, for answering a client's conditional request with 304.
    pub if_none_match: Option<&'b [u8]>,
    /// `If-Modified-Since`, in seconds since the epoch (ignored, as RFC 9110 §13.1.3 says,
    /// when `If-None-Match` is present).
    pub if_modified_since: Option<u64>,
    /// `Range`: served from a complete stored object, or passed on.
    pub range: Option<&'b [u8]>,
    /// `If-Range`: the range only if the stored object is this one.
    pub if_range: Option<&'b [u8]>,
}

/// Fields that ask the server for another method than the request line's (as frameworks
/// honour them): such a request bypasses the cache.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Reads a request's fields.
pub fn read_request<'b>(headers: &[httparse::Header<'b>]) -> RequestFields<'b> {
    let mut fields = RequestFields::default();
    let (mut had_cache_control, mut pragma) = (false, false);
    for header in headers {
        let name = header.name;
        if name.eq_ignore_ascii_case("cache-control") {
            had_cache_control = true;
            fields.control.read(header.value);
        } else if name.eq_ignore_ascii_case("pragma") {
            RequestControl::read_pragma(header.value, &mut pragma);
        } else if name.eq_ignore_ascii_case("authorization") {
            fields.authorization = true;
        } else if name.eq_ignore_ascii_case("if-none-match") {
            fields.if_none_match = Some(header.value.trim_ascii());
        } else if name.eq_ignore_ascii_case("if-modified-since") {
            fields.if_modified_since = http_date(header.value);
        } else if name.eq_ignore_ascii_case("range") {
            fields.range = Some(header.value.trim_ascii());
        } else if name.eq_ignore_ascii_case("if-range") {
            fields.if_range = Some(header.value.trim_ascii());
        } else if METHOD_OVERRIDES
            .iter()
            .any(|known| name.eq_ignore_ascii_case(known))
        {
            fields.method_override = true;
        }
    }
    fields.control.finish(had_cache_control, pragma);
    fields
}

/// What the cache needs of a response beyond [`ResponseFacts`]: its validators, the field
/// names it varies on, and its surrogate keys.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ResponseFields {
    pub facts: ResponseFacts,
    pub etag: Option<Box<[u8]>>,
    /// The names of its `Vary` fields, lower case, comma-separated, in the order given (empty:
    /// it varies on nothing).
    pub vary: Vec<u8>,
    /// `Surrogate-Key` and `Cache-Tag` values, space-separated.
    pub tags: Vec<u8>,
}

/// Reads a response's fields.
pub fn read_response(response: &Response<'_, '_>) -> ResponseFields {
    let mut fields = ResponseFields::default();
    let facts = &mut fields.facts;
    facts.status = response.code;
    let mut control = ResponseControl::default();
    for header in response.headers {
        let (name, value) = (header.name, header.value);
        if name.eq_ignore_ascii_case("cache-control") {
            control.read(value);
        } else if name.eq_ignore_ascii_case("date") {
            facts.date = http_date(value);
        } else if name.eq_ignore_ascii_case("expires") {
            // A second Expires that disagrees makes the response stale (RFC 9111 §4.2.1).
            let expires = http_date(value);
            facts.expires = match facts.expires {
                Some(first) if first != expires => Some(None),
                _ => Some(expires),
            };
        } else if name.eq_ignore_ascii_case("last-modified") {
            facts.last_modified = http_date(value);
            facts.validator |= facts.last_modified.is_some();
        } else if name.eq_ignore_ascii_case("age") {
            facts.age = std::str::from_utf8(value.trim_ascii())
                .ok()
                .and_then(|text| text.parse().ok());
        } else if name.eq_ignore_ascii_case("etag") {
            fields.etag = Some(value.trim_ascii().into());
            facts.validator = true;
        } else if name.eq_ignore_ascii_case("set-cookie") {
            facts.set_cookie = true;
        } else if name.eq_ignore_ascii_case("vary") {
            for vary_name in value.split(|&byte| byte == b',') {
                let vary_name = vary_name.trim_ascii();
                if vary_name == b"*" {
                    facts.vary_star = true;
                } else if !vary_name.is_empty() {
                    if !fields.vary.is_empty() {
                        fields.vary.push(b',');
                    }
                    fields
                        .vary
                        .extend(vary_name.iter().map(u8::to_ascii_lowercase));
                }
            }
        } else if name.eq_ignore_ascii_case("surrogate-key")
            || name.eq_ignore_ascii_case("cache-tag")
        {
            // Surrogate-Key separates by spaces, Cache-Tag by commas.
            for tag in value.split(|&byte| byte == b' ' || byte == b',') {
                let tag = tag.trim_ascii();
                if !tag.is_empty() {
                    if !fields.tags.is_empty() {
                        fields.tags.push(b' ');
                    }
                    fields.tags.extend_from_slice(tag);
                }
            }
        }
    }
    facts.control = control;
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::{header_slots, parse_request, parse_response, Method};

    #[test]
    fn a_request_s_cache_fields() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\nCache-Control: max-age=5\r\nPragma: no-cache\r\n\
            Authorization: Basic eA==\r\nIf-None-Match: \"v1\" \r\n\
            If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\nRange: bytes=0-9\r\n\
            X-HTTP-Method-Override: DELETE\r\n\r\n";
        let mut slots = header_slots();
        let request = parse_request(head, &mut slots, 8192).unwrap().unwrap();
        let fields = read_request(request.headers);
        assert_eq!(fields.control.max_age, Some(5));
        assert!(
            !fields.control.no_cache,
            "Pragma counts only without Cache-Control"
        );
        assert!(fields.authorization);
        assert!(fields.method_override);
        assert_eq!(fields.if_none_match, Some(&b"\"v1\""[..]));
        assert_eq!(fields.if_modified_since, Some(784_111_777));
        assert_eq!(fields.range, Some(&b"bytes=0-9"[..]));
    }

    #[test]
    fn a_response_s_cache_fields() {
        let head = b"HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
            Cache-Control: public\r\ncache-control: max-age=60\r\nETag: \"abc\"\r\nAge: 7\r\n\
            Vary: Accept-Encoding, X-Tenant\r\nSurrogate-Key: a b\r\nCache-Tag: c,d\r\n\
            Content-Length: 0\r\n\r\n";
        let mut slots = header_slots();
        let response = parse_response(head, &mut slots, Method::Get, 8192)
            .unwrap()
            .unwrap();
        let fields = read_response(&response);
        assert_eq!(fields.facts.status, 200);
        assert!(fields.facts.control.public);
        assert_eq!(fields.facts.control.max_age, Some(60));
        assert_eq!(fields.facts.date, Some(784_111_777));
        assert_eq!(fields.facts.age, Some(7));
        assert!(fields.facts.validator);
        assert_eq!(fields.etag.as_deref(), Some(&b"\"abc\""[..]));
        assert_eq!(fields.vary, b"accept-encoding,x-tenant");
        assert_eq!(fields.tags, b"a b c d");
        assert!(!fields.facts.vary_star && !fields.facts.set_cookie);
    }

    #[test]
    fn vary_star_and_disagreeing_expires() {
        let head = b"HTTP/1.1 200 OK\r\nVary: *\r\nExpires: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
            Expires: Mon, 07 Nov 1994 08:49:37 GMT\r\nContent-Length: 0\r\n\r\n";
        let mut slots = header_slots();
        let response = parse_response(head, &mut slots, Method::Get, 8192)
            .unwrap()
            .unwrap();
        let fields = read_response(&response);
        assert!(fields.facts.vary_star);
        assert_eq!(fields.facts.expires, Some(None));
    }
}
