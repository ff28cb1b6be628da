//! Cookies as a request carries them (RFC 6265 §5.4): the value of one by name, which sticky
//! sessions, hashing by cookie and rate limits keyed by a cookie all read.

use super::Request;

/// The value of the first cookie called `name` in a `Cookie` header value (RFC 6265:
/// `a=1; b=2`, blanks around pairs optional, a value may be in double quotes, which are
/// removed). Names are compared exactly (cookie names are case-sensitive).
pub fn find_cookie<'h>(header: &'h [u8], name: &str) -> Option<&'h [u8]> {
    header.split(|&b| b == b';').find_map(|pair| {
        let eq = pair.iter().position(|&b| b == b'=')?;
        if pair[..eq].trim_ascii() != name.as_bytes() {
            return None;
        }
        let value = pair[eq + 1..].trim_ascii();
        Some(match value {
            [b'"', quoted @ .., b'"'] => quoted,
            _ => value,
        })
    })
}

/// The values of a request's `Cookie` fields, in order (HTTP/1.1 clients send one; HTTP/2
/// ones may send several, which the head joins).
pub fn cookie_fields<'r, 'b>(request: &'r Request<'_, 'b>) -> impl Iterator<Item = &'b [u8]> + 'r {
    request
        .headers
        .iter()
        .filter(|field| field.name.eq_ignore_ascii_case("cookie"))
        .map(|field| field.value)
}

/// The value of the request's first cookie called `name`.
pub fn request_cookie<'b>(request: &Request<'_, 'b>, name: &str) -> Option<&'b [u8]> {
    cookie_fields(request).find_map(|header| find_cookie(header, name))
}
