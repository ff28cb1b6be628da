//! Whom the admin API answers: its operator, not a web page that happens to run in the operator's
//! browser, and not another local user. Checked on every request, before routing, in this order:
//!
//! 1. The `Host`: an IP literal, `localhost`, or a name in `[admin] allowed_hosts`. A page whose
//!    own name an attacker rebinds to 127.0.0.1 (DNS rebinding) sends its own name as the Host,
//!    so it is refused, and learns nothing. An IP literal cannot be rebound: no name is resolved.
//! 2. The browser's word on where a request comes from: an `Origin` other than the API's own
//!    (`http://` and the Host), or `Sec-Fetch-Site: cross-site` or `same-site`, is a page on
//!    another origin (cross-site request forgery) and refused. The stats page's own calls are
//!    same-origin and pass.
//! 3. The token, when `[admin] token_env` names one: every request, on every listener, carries
//!    it — except the stats page itself (`GET /stats`), which holds no data.
//! 4. A request that changes something must say `Content-Type: application/json`: a page on
//!    another origin cannot send that without a CORS preflight, and the API answers no preflight
//!    (an `OPTIONS` is refused with 405) and sends no CORS headers, so the browser never sends
//!    the request itself.
//!
//! A refusal is 403 (host, origin), 401 (token) or 415 (content type), with the reason.

use std::net::IpAddr;

use super::answer::Answer;
use crate::http1::{Method, Request};

/// What the API trusts, as `[admin]` says.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// Host names (lowercase, no port) answered besides IP literals and `localhost`.
    pub allowed_hosts: Vec<String>,
    /// The token every request must present; `None`: none needed.
    pub token: Option<String>,
}

impl Guard {
    /// `None` when the request may go on to routing; else the refusal to answer.
    /// `stats_page`: the request is `GET /stats` (served without the token).
    pub fn check(&self, request: &Request, stats_page: bool) -> Option<Answer> {
        if let Some(refusal) = self.check_host(request) {
            return Some(refusal);
        }
        if let Some(refusal) = check_origin(request) {
            return Some(refusal);
        }
        if let Some(refusal) = self.check_token(request, stats_page) {
            return Some(refusal);
        }
        check_content_type(request)
    }

    /// The check of the token alone, for a request answered before its body is read.
    pub fn check_token(&self, request: &Request, stats_page: bool) -> Option<Answer> {
        let token = self.token.as_ref()?;
        if stats_page || presents_token(request, token) {
            return None;
        }
        Some(
            Answer::error(
                401,
                "this admin API needs a token: send Authorization: Bearer <token>",
            )
            .with_headers("WWW-Authenticate: Bearer\r\n"),
        )
    }

    fn check_host(&self, request: &Request) -> Option<Answer> {
        // HTTP/1.1 requires a Host (the parser refuses a request without one); an HTTP/1.0
        // request without one comes from no browser.
        let host = request.host?;
        let name = host_name(host).to_ascii_lowercase();
        let known = is_ip_literal(&name)
            || name == b"localhost"
            || self
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.as_bytes() == name);
        if known {
            return None;
        }
        Some(Answer::error(
            403,
            &format!(
                "this admin API does not answer to the host {:?}: it answers to IP addresses, \
                 localhost and the names in [admin] allowed_hosts",
                String::from_utf8_lossy(host)
            ),
        ))
    }
}

/// Refuses a request a browser says a page on another origin made.
fn check_origin(request: &Request) -> Option<Answer> {
    if let Some(site) = field(request, "sec-fetch-site") {
        if site.eq_ignore_ascii_case(b"cross-site") || site.eq_ignore_ascii_case(b"same-site") {
            return Some(Answer::error(
                403,
                "requests from pages on other sites are refused (Sec-Fetch-Site)",
            ));
        }
    }
    let origin = field(request, "origin")?;
    let own = request.host.is_some_and(|host| {
        origin
            .strip_prefix(b"http://")
            .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
    });
    if own {
        return None;
    }
    Some(Answer::error(
        403,
        "requests from pages on other origins are refused (Origin)",
    ))
}

/// A request that changes something must carry JSON, which a browser sends across origins only
/// after a preflight the API never answers.
fn check_content_type(request: &Request) -> Option<Answer> {
    if matches!(request.method, Method::Get | Method::Head) {
        return None;
    }
    let json = field(request, "content-type").is_some_and(|value| {
        let media_type = value.split(|&b| b == b';').next().unwrap_or_default();
        media_type
            .trim_ascii()
            .eq_ignore_ascii_case(b"application/json")
    });
    if json {
        return None;
    }
    Some(Answer::error(
        415,
        "a request that changes something must say Content-Type: application/json",
    ))
}

/// The one value of the field `name` (lowercase); `None` when absent. Several fields of the same
/// name are not expected from a browser here; the first is taken.
fn field<'b>(request: &Request<'_, 'b>, name: &str) -> Option<&'b [u8]> {
    request
        .headers
        .iter()
        .find(|header| header.name.eq_ignore_ascii_case(name))
        .map(|header| header.value.trim_ascii())
}

/// A Host value without its port: `example.com:9900` → `example.com`, `[::1]:9900` → `::1`.
fn host_name(host: &[u8]) -> &[u8] {
    let host = host.trim_ascii();
    if let Some(rest) = host.strip_prefix(b"[") {
        return rest
            .iter()
            .position(|&b| b == b']')
            .map_or(rest, |end| &rest[..end]);
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(colon) => &host[..colon],
        None => host,
    }
}

fn is_ip_literal(name: &[u8]) -> bool {
    std::str::from_utf8(name).is_ok_and(|text| text.parse::<IpAddr>().is_ok())
}

/// True when the request has exactly one Authorization field, `Bearer <token>` with the right
/// token. The scheme name is case-insensitive (RFC 9110 §11.1); the token is not.
fn presents_token(request: &Request, token: &str) -> bool {
    let mut fields = request
        .headers
        .iter()
        .filter(|header| header.name.eq_ignore_ascii_case("authorization"));
    let (Some(field), None) = (fields.next(), fields.next()) else {
        return false;
    };
    let value = field.value.trim_ascii();
    let Some(space) = value.iter().position(|&b| b == b' ') else {
        return false;
    };
    let (scheme, credentials) = value.split_at(space);
    scheme.eq_ignore_ascii_case(b"Bearer")
        && equal_in_constant_time(token.as_bytes(), credentials.trim_ascii())
}

/// Compares without stopping at the first difference, so the time taken reveals nothing about
/// how much of a guess was right: it depends only on the length of the secret.
fn equal_in_constant_time(secret: &[u8], guess: &[u8]) -> bool {
    let mut difference = secret.len() ^ guess.len();
    for (i, &byte) in secret.iter().enumerate() {
        difference |= usize::from(byte ^ guess.get(i).copied().unwrap_or(0));
    }
    // black_box: keep the optimiser from turning the loop back into an early exit.
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::{header_slots, parse_request};

    /// The status of the refusal `guard` gives `head` (a request without a body), or 0.
    fn refusal(guard: &Guard, head: &str) -> u16 {
        let mut headers = header_slots();
        let request = parse_request(head.as_bytes(), &mut headers, 16 * 1024)
            .unwrap()
            .unwrap();
        guard
            .check(&request, false)
            .map_or(0, |answer| answer.status())
    }

    #[test]
    fn hosts_are_ip_literals_localhost_or_allowed_names() {
        let guard = Guard {
            allowed_hosts: vec!["admin.internal".into()],
            token: None,
        };
        for host in [
            "127.0.0.1:9900",
            "127.0.0.1",
            "[::1]:9900",
            "10.1.2.3:9900",
            "localhost:9900",
            "LOCALHOST",
            "admin.internal:9900",
        ] {
            let head = format!("GET /api/pools HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(refusal(&guard, &head), 0, "{host}");
        }
        for host in [
            "evil.example:9900",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
        ] {
            let head = format!("GET /api/pools HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(refusal(&guard, &head), 403, "{host}");
        }
    }

    #[test]
    fn pages_on_other_origins_are_refused_and_the_apis_own_pass() {
        let guard = Guard::default();
        let post = |extra: &str| {
            format!(
                "POST /api/reload HTTP/1.1\r\nHost: 127.0.0.1:9900\r\n\
                 Content-Type: application/json\r\nContent-Length: 0\r\n{extra}\r\n"
            )
        };
        assert_eq!(refusal(&guard, &post("")), 0);
        assert_eq!(
            refusal(&guard, &post("Origin: http://127.0.0.1:9900\r\n")),
            0
        );
        assert_eq!(refusal(&guard, &post("Sec-Fetch-Site: same-origin\r\n")), 0);
        assert_eq!(refusal(&guard, &post("Sec-Fetch-Site: none\r\n")), 0);
        assert_eq!(
            refusal(&guard, &post("Origin: http://evil.example\r\n")),
            403
        );
        assert_eq!(refusal(&guard, &post("Origin: null\r\n")), 403);
        assert_eq!(
            refusal(&guard, &post("Origin: http://127.0.0.1:8080\r\n")),
            403
        );
        assert_eq!(
            refusal(&guard, &post("Sec-Fetch-Site: cross-site\r\n")),
            403
        );
        assert_eq!(refusal(&guard, &post("Sec-Fetch-Site: same-site\r\n")), 403);
    }

    #[test]
    fn a_change_needs_json() {
        let guard = Guard::default();
        let post = |content_type: &str| {
            format!(
                "POST /api/pools/app/servers HTTP/1.1\r\nHost: localhost\r\n{content_type}\
                 Content-Length: 0\r\n\r\n"
            )
        };
        assert_eq!(refusal(&guard, &post("")), 415);
        assert_eq!(refusal(&guard, &post("Content-Type: text/plain\r\n")), 415);
        assert_eq!(
            refusal(
                &guard,
                &post("Content-Type: application/x-www-form-urlencoded\r\n")
            ),
            415
        );
        assert_eq!(
            refusal(
                &guard,
                &post("Content-Type: Application/JSON; charset=utf-8\r\n")
            ),
            0
        );
        let get = "GET /api/pools HTTP/1.1\r\nHost: localhost\r\n\r\n";
        assert_eq!(refusal(&guard, get), 0);
    }

    #[test]
    fn the_token_is_needed_wherever_it_is_set() {
        let guard = Guard {
            allowed_hosts: Vec::new(),
            token: Some("s3cret".into()),
        };
        let get =
            |extra: &str| format!("GET /api/pools HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n");
        assert_eq!(refusal(&guard, &get("")), 401);
        assert_eq!(
            refusal(&guard, &get("Authorization: Bearer wrong\r\n")),
            401
        );
        assert_eq!(refusal(&guard, &get("Authorization: bearer s3cret\r\n")), 0);
        // The host is checked first: a foreign page learns not even that a token is needed.
        let foreign = "GET /api/pools HTTP/1.1\r\nHost: evil.example\r\n\r\n";
        assert_eq!(refusal(&guard, foreign), 403);
    }

    #[test]
    fn comparison_takes_the_same_path_for_any_guess() {
        assert!(equal_in_constant_time(b"abc", b"abc"));
        assert!(!equal_in_constant_time(b"abc", b"abd"));
        assert!(!equal_in_constant_time(b"abc", b"ab"));
        assert!(!equal_in_constant_time(b"abc", b"abcd"));
        assert!(!equal_in_constant_time(b"", b"x"));
    }
}
