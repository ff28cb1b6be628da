//! What a request carries, looked up by name where routing and rules need it: a header field, a
//! cookie, a query parameter. Each is found in the parsed head, without a copy.

use super::Request;

impl<'b> Request<'_, 'b> {
    /// The value of the first header field named `name` (compared without regard to case).
    pub fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.headers
            .iter()
            .find(|field| field.name.eq_ignore_ascii_case(name))
            .map(|field| field.value)
    }

    /// The value of the first cookie called `name` in the Cookie fields (HTTP/1.1 clients send
    /// one, but may send several; an HTTP/2 client's crumbs each come as one).
    pub fn cookie(&self, name: &str) -> Option<&'b [u8]> {
        self.headers
            .iter()
            .filter(|field| field.name.eq_ignore_ascii_case("cookie"))
            .find_map(|field| find_cookie(field.value, name))
    }

    /// The value of the first query parameter called `name`, as sent (neither name nor value
    /// percent-decoded; `+` is not a space): `Some(b"")` for `?name` and `?name=`.
    pub fn query_parameter(&self, name: &str) -> Option<&'b [u8]> {
        let target = self.forwarded_target.as_bytes();
        let query = &target[target.iter().position(|&b| b == b'?')? + 1..];
        // A fragment is never sent, but a client may: it is not part of the query.
        let query = query.split(|&b| b == b'#').next().unwrap_or_default();
        query.split(|&b| b == b'&').find_map(|pair| {
            let (key, value) = match pair.iter().position(|&b| b == b'=') {
                Some(eq) => (&pair[..eq], &pair[eq + 1..]),
                None => (pair, &pair[pair.len()..]),
            };
            (key == name.as_bytes()).then_some(value)
        })
    }
}

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

#[cfg(test)]
mod tests {
    use crate::http1::{header_slots, parse_request};

    #[test]
    fn headers_cookies_and_query_parameters_by_name() {
        let text = "GET /p?a=1&b&c=&a=2&d=x%20y HTTP/1.1\r\nHost: h\r\nX-One: 1\r\nCookie: s=abc; t=\"q\"\r\nCookie: u=2\r\nx-one: 2\r\n\r\n";
        let mut headers = header_slots();
        let request = parse_request(text.as_bytes(), &mut headers, 8192)
            .unwrap()
            .unwrap();
        assert_eq!(request.header("x-ONE"), Some(&b"1"[..]));
        assert_eq!(request.header("x-two"), None);
        assert_eq!(request.cookie("t"), Some(&b"q"[..]));
        assert_eq!(request.cookie("u"), Some(&b"2"[..]));
        assert_eq!(request.cookie("S"), None);
        assert_eq!(request.query_parameter("a"), Some(&b"1"[..]));
        assert_eq!(request.query_parameter("b"), Some(&b""[..]));
        assert_eq!(request.query_parameter("c"), Some(&b""[..]));
        assert_eq!(request.query_parameter("d"), Some(&b"x%20y"[..]));
        assert_eq!(request.query_parameter("p"), None);
        assert_eq!(request.query_parameter("e"), None);
    }
}
