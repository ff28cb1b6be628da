//! A route's own answer, written as HTTP/1.1 bytes (an HTTP/2 client's stream reads them back
//! into frames as it does any answer): a redirect's Location built from its template and the
//! request, or a fixed response's head and body as compiled at load. No allocation: everything
//! is written into the exchange's output buffer.

use std::io::Write;

use super::template::Values;
use crate::config::answers::{reason_phrase, FixedResponse, Redirect};
use crate::config::template::Part;
use crate::http1::error_response::end_with_body;
use crate::http1::Request;

/// What a template may name beyond the request's head: the connection, the request's id and the
/// route.
pub struct AnswerFacts<'a> {
    /// The client's TLS version and cipher suite, when it came over TLS.
    pub tls: Option<(&'static str, &'static str)>,
    /// The client's address as herdsman sees it (`[real_ip]` applied), as text.
    pub client: &'a [u8],
    /// The port of the client's connection.
    pub client_port: u16,
    /// The request's id (`[request_id]`); empty without one.
    pub request_id: &'a [u8],
    /// The route's index in the config, and its `path_prefix`.
    pub route: usize,
    pub route_prefix: Option<&'a str>,
}

/// The path and query of a request's target: `/a/b?x=1` is `/a/b` and `x=1`.
pub fn path_and_query(target: &[u8]) -> (&[u8], &[u8]) {
    match target.iter().position(|&b| b == b'?') {
        Some(mark) => (&target[..mark], &target[mark + 1..]),
        None => (target, &[]),
    }
}

/// The path after the route's `path_prefix` (after the first `/` for a route without one).
pub fn path_rest<'p>(path: &'p [u8], route_prefix: Option<&str>) -> &'p [u8] {
    let prefix = route_prefix.unwrap_or("/").as_bytes();
    path.strip_prefix(prefix).unwrap_or(path)
}

/// Appends `redirect`'s answer to `request`: its status, `Location`, an empty body.
pub fn write_redirect(
    redirect: &Redirect,
    request: &Request<'_, '_>,
    facts: &AnswerFacts<'_>,
    (head_only, close): (bool, bool),
    out: &mut Vec<u8>,
) {
    let status = redirect.status;
    let _ = write!(
        out,
        "HTTP/1.1 {status} {}\r\nLocation: ",
        reason_phrase(status)
    );
    let location = out.len();
    let target = request.path();
    let (path, query) = path_and_query(target);
    let values = Values {
        client: facts.client,
        client_port: facts.client_port,
        request_id: facts.request_id,
        host: request.host.unwrap_or_default(),
        target,
        path,
        query,
        path_rest: path_rest(path, facts.route_prefix),
        method: request.method_text.as_bytes(),
        secure: facts.tls.is_some(),
        route: Some(facts.route),
        server: b"",
        tls_version: facts.tls.map_or("", |(version, _)| version),
        tls_cipher: facts.tls.map_or("", |(_, cipher)| cipher),
        sni: "",
    };
    values.render(&redirect.to, out);
    // A path made from the request (`/{path_rest}` for `/old//evil.example/`) must not become a
    // scheme-relative URL (`//evil.example/`, or `/\evil.example/` as browsers read it), which
    // sends the client to another host: its slashes after the first are dropped.
    let written_by_config =
        matches!(redirect.to.parts.first(), Some(Part::Literal(text)) if text.starts_with("//"));
    while !written_by_config
        && out[location..].starts_with(b"/")
        && matches!(out.get(location + 1), Some(b'/' | b'\\'))
    {
        out.remove(location + 1);
    }
    if redirect.keep_query && !query.is_empty() {
        out.push(if redirect.to_has_query { b'&' } else { b'?' });
        out.extend_from_slice(query);
    }
    out.extend_from_slice(b"\r\n");
    end_with_body(b"", head_only, close, out);
}

/// Appends `fixed`, its head as compiled at load, then its length and body.
pub fn write_fixed_response(
    fixed: &FixedResponse,
    (head_only, close): (bool, bool),
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(&fixed.head);
    if matches!(fixed.status, 204 | 304) {
        // No body and no Content-Length of one (RFC 9110 §8.6).
        if close {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        return;
    }
    end_with_body(&fixed.body, head_only, close, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::answers::redirect_may_name;
    use crate::config::template::{Template, Variable};
    use crate::http1::{header_slots, parse_request};

    fn redirect_of(to: &str, keep_query: bool, head: &str) -> String {
        let template = Template::parse(to, redirect_may_name).unwrap();
        let redirect = Redirect {
            status: 301,
            to_has_query: to.contains('?'),
            keep_query: keep_query
                && !template.names(Variable::Query)
                && !template.names(Variable::Target),
            to: template,
        };
        let mut headers = header_slots();
        let text = format!("{head}\r\n\r\n");
        let request = parse_request(text.as_bytes(), &mut headers, 8192)
            .unwrap()
            .unwrap();
        let facts = AnswerFacts {
            tls: None,
            client: b"192.0.2.7",
            client_port: 50123,
            request_id: b"4f2a",
            route: 2,
            route_prefix: Some("/old/"),
        };
        let mut out = Vec::new();
        write_redirect(&redirect, &request, &facts, (false, false), &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 301 Moved Permanently\r\n"),
            "{text}"
        );
        assert!(text.ends_with("\r\nContent-Length: 0\r\n\r\n"), "{text}");
        let location = text.lines().find_map(|l| l.strip_prefix("Location: "));
        location.unwrap().to_string()
    }

    #[test]
    fn a_location_is_built_from_the_request_and_keeps_or_drops_its_query() {
        let get = "GET /old/a/b?x=1&y=2 HTTP/1.1\r\nHost: example.com:8080";
        assert_eq!(
            redirect_of("https://{host}/new/{path_rest}", true, get),
            "https://example.com:8080/new/a/b?x=1&y=2"
        );
        assert_eq!(
            redirect_of("{scheme}://{host}{path}", false, get),
            "http://example.com:8080/old/a/b"
        );
        assert_eq!(
            redirect_of("/new?from={route}", true, get),
            "/new?from=route[2]&x=1&y=2"
        );
        assert_eq!(
            redirect_of("/q/{query}/{client}:{client_port}", true, get),
            "/q/x=1&y=2/192.0.2.7:50123"
        );
        assert_eq!(
            redirect_of("/{method}?id={request_id}", false, get),
            "/GET?id=4f2a"
        );
        let bare = "GET /old/ HTTP/1.1\r\nHost: example.com";
        assert_eq!(redirect_of("/new/{path_rest}", true, bare), "/new/");
        // Never to another host by a doubled slash.
        let doubled = "GET /old//evil.example/x HTTP/1.1\r\nHost: example.com";
        assert_eq!(
            redirect_of("/{path_rest}", true, doubled),
            "/evil.example/x"
        );
        let tripled = "GET /old///evil.example/x HTTP/1.1\r\nHost: example.com";
        assert_eq!(
            redirect_of("/{path_rest}", true, tripled),
            "/evil.example/x"
        );
        assert_eq!(
            redirect_of("{path}", true, "GET //evil.example/ HTTP/1.1\r\nHost: h"),
            "/evil.example/"
        );
    }

    #[test]
    fn a_fixed_response_has_its_length_and_a_head_has_no_body() {
        let fixed = FixedResponse {
            status: 503,
            head: Box::from(&b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 120\r\n"[..]),
            body: Box::from(&b"<h1>Back soon</h1>"[..]),
        };
        let mut out = Vec::new();
        write_fixed_response(&fixed, (false, true), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 120\r\nContent-Length: 18\r\n\
             Connection: close\r\n\r\n<h1>Back soon</h1>"
        );
        let mut head = Vec::new();
        write_fixed_response(&fixed, (true, false), &mut head);
        assert!(head.ends_with(b"Content-Length: 18\r\n\r\n"));
    }
}
