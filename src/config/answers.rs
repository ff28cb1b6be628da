//! What a route answers itself instead of sending the request to a pool (`[route.redirect]`,
//! `[route.respond]`), and how a route rewrites the target its server is sent
//! (`[route.rewrite]`): as checked and compiled at load, so that a request only writes bytes.

use std::fmt;

use super::template::{Template, Variable};

/// Whether a redirect's `to` may name `variable`: all the request is known by (`{path}` without
/// its query), the path after the route's prefix and the query; not `{server}`, as none
/// answers, nor `{sni}` (the connection's, not at hand while the request's head is read: the
/// exchange copies only the TLS version and cipher, two static words).
pub fn redirect_may_name(variable: Variable) -> bool {
    !matches!(variable, Variable::Server | Variable::Sni)
}

/// A route's own answer: no pool, no server.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteAnswer {
    Redirect(Redirect),
    Respond(FixedResponse),
}

impl RouteAnswer {
    /// Its status.
    pub fn status(&self) -> u16 {
        match self {
            RouteAnswer::Redirect(redirect) => redirect.status,
            RouteAnswer::Respond(fixed) => fixed.status,
        }
    }
}

/// `[route.redirect]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Redirect {
    /// 301, 302 (the default), 303, 307 or 308.
    pub status: u16,
    /// `to`: the Location, an absolute URL or a path.
    pub to: Template,
    /// The request's query goes after `to` (`query = "keep"`, the default, unless `to` names
    /// `{query}` itself): behind `?`, or `&` when `to` has a `?` of its own.
    pub keep_query: bool,
    /// `to`'s literal text has a `?`: a kept query joins it with `&`.
    pub to_has_query: bool,
}

/// `[route.respond]`: a fixed answer (a maintenance page, robots.txt).
#[derive(Debug, Clone, PartialEq)]
pub struct FixedResponse {
    /// 200–599.
    pub status: u16,
    /// The status line, `Content-Type` and `headers`, each line with its CRLF, written once at
    /// load; the answer adds its `Content-Length` (and `Connection: close` when it closes).
    pub head: Box<[u8]>,
    /// `body`, or `body_file`'s bytes read at load (at most [`MAX_BODY`]); empty for 204 and 304.
    pub body: Box<[u8]>,
}

/// The largest fixed body: it is held in memory by every config that has it.
pub const MAX_BODY: u64 = 1024 * 1024;

/// `[route.rewrite]`: the target a route's server gets instead of the client's.
#[derive(Debug, Clone, PartialEq)]
pub enum Rewrite {
    /// `path_prefix`: the route's `path_prefix` replaced by this (`""` strips it; a `/` is put
    /// first when what is left does not start with one).
    Prefix(Box<str>),
    /// `path_regex` and `path`: the first match of the regex in the path (the query apart) is
    /// replaced by `path`, whose `$1`…`$9` and `${name}` are its captures; the query is kept.
    Regex {
        pattern: PathPattern,
        path: Box<str>,
    },
}

/// A path regex compiled at load. Two are equal when their sources are (whether a reload
/// changed the routes).
#[derive(Clone)]
pub struct PathPattern(pub regex::Regex);

impl PartialEq for PathPattern {
    fn eq(&self, other: &PathPattern) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl fmt::Debug for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PathPattern({:?})", self.0.as_str())
    }
}

/// The reason phrase a status line gives `status` (IANA's, or `Status` for one without a name).
pub fn reason_phrase(status: u16) -> &'static str {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|code| code.canonical_reason())
        .unwrap_or("Status")
}

/// The captures `replacement` (a regex replacement, as `regex::Regex::replace` reads it) names
/// that `regex` lacks, as written: `$3` for a regex of two groups, `${name}` for a missing name.
/// The crate reads `$1a` as the group named `1a`, so such a slip is named too.
pub fn missing_captures(regex: &regex::Regex, replacement: &str) -> Vec<String> {
    let mut missing = Vec::new();
    let mut rest = replacement;
    while let Some(dollar) = rest.find('$') {
        let after = &rest[dollar + 1..];
        if let Some(escaped) = after.strip_prefix('$') {
            rest = escaped;
            continue;
        }
        let (name, written, next) = match after.strip_prefix('{') {
            Some(braced) => match braced.find('}') {
                Some(close) => (
                    &braced[..close],
                    format!("${{{}}}", &braced[..close]),
                    &braced[close + 1..],
                ),
                None => (braced, format!("${{{braced}"), ""),
            },
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], format!("${}", &after[..end]), &after[end..])
            }
        };
        // A `$` followed by nothing a name is made of is written as it is.
        if !name.is_empty() {
            let exists = match name.parse::<usize>() {
                Ok(index) => index < regex.captures_len(),
                Err(_) => regex.capture_names().flatten().any(|each| each == name),
            };
            if !exists {
                missing.push(written);
            }
        }
        rest = next;
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_names_only_captures_its_regex_has() {
        let regex = regex::Regex::new(r"^/user/(\d+)/(?P<tab>\w+)$").unwrap();
        assert!(missing_captures(&regex, "/users/$1/${tab}?x=$$").is_empty());
        assert!(missing_captures(&regex, "/users/$2/$0/$tab").is_empty());
        assert_eq!(missing_captures(&regex, "/users/$3"), ["$3"]);
        assert_eq!(
            missing_captures(&regex, "/u/${nope}/$1a"),
            ["${nope}", "$1a"]
        );
    }

    #[test]
    fn statuses_have_their_reason_phrases() {
        assert_eq!(reason_phrase(308), "Permanent Redirect");
        assert_eq!(reason_phrase(503), "Service Unavailable");
        assert_eq!(reason_phrase(599), "Status");
    }
}
