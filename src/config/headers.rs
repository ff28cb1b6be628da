//! Header rules as checked: `[headers.request|response]` and a route's own (`set`, `add`,
//! `remove`), their values compiled into templates of literal and variable parts, and
//! `[request_id]`. What the rules do to a head is `rules::headers`; what a request id is,
//! `rules::request_id`.

use super::cidr::AddressSet;
use super::template::{Template, Variable};

/// Whether a field value may name `variable`, towards servers or (`towards_clients`) towards
/// clients: `{server}` only towards clients, once a server answered; not `{path_rest}`, a
/// redirect's.
pub fn field_may_name(variable: Variable, towards_clients: bool) -> bool {
    match variable {
        Variable::Server => towards_clients,
        Variable::PathRest => false,
        _ => true,
    }
}

/// A field herdsman writes: its name as the config spells it, and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLine {
    pub name: Box<str>,
    pub value: Template,
    /// What is written before the value's variables, made once: `Name: `, or for a value
    /// without variables the whole line, `Name: value\r\n` (one copy a request rather than four:
    /// about 60 instructions a field, callgrind). Only a whole line ends with CRLF: a name is a
    /// token and a value holds no CR or LF (the check refuses them).
    start: Box<[u8]>,
}

impl FieldLine {
    pub fn new(name: &str, value: Template) -> FieldLine {
        let mut start = Vec::with_capacity(name.len() + 2);
        start.extend_from_slice(name.as_bytes());
        start.extend_from_slice(b": ");
        if let Some(literal) = value.literal() {
            start.extend_from_slice(literal.as_bytes());
            start.extend_from_slice(b"\r\n");
        }
        FieldLine {
            name: name.into(),
            value,
            start: start.into(),
        }
    }

    /// `Name: ` or the whole line, and whether it is the whole line.
    pub fn start(&self) -> (&[u8], bool) {
        (&self.start, self.start.ends_with(b"\r\n"))
    }
}

/// One side's rules (towards servers, or towards clients) as they apply to a request: the
/// top level's, then a route's over them, resolved into what a head loses and what it gains.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldRules {
    /// The names (lower case) whose fields the head loses: those `remove` lists and those
    /// `set` replaces.
    pub dropped: Box<[Box<str>]>,
    /// The fields written after the head's own: each `set`, then each `add`.
    pub written: Box<[FieldLine]>,
    /// Some value uses the request's host, path or method.
    pub reads_request_head: bool,
}

impl FieldRules {
    pub fn is_empty(&self) -> bool {
        self.dropped.is_empty() && self.written.is_empty()
    }

    /// Whether a field named `name` is dropped.
    pub fn drops(&self, name: &[u8]) -> bool {
        self.dropped
            .iter()
            .any(|dropped| dropped.as_bytes().eq_ignore_ascii_case(name))
    }

    /// These rules, then `later`'s over them (a route's over the top level's): a field `later`
    /// drops is dropped, a field these write that `later` drops is not written.
    pub fn then(&self, later: &FieldRules) -> FieldRules {
        let mut dropped: Vec<Box<str>> = self.dropped.to_vec();
        for name in later.dropped.iter() {
            if !dropped.contains(name) {
                dropped.push(name.clone());
            }
        }
        let written: Vec<FieldLine> = self
            .written
            .iter()
            .filter(|line| !later.drops(line.name.as_bytes()))
            .chain(later.written.iter())
            .cloned()
            .collect();
        let reads_request_head = written
            .iter()
            .any(|line| line.value.variables().any(Variable::reads_request_head));
        FieldRules {
            dropped: dropped.into_boxed_slice(),
            written: written.into_boxed_slice(),
            reads_request_head,
        }
    }
}

/// `[headers]` or a route's `[route.headers]` (resolved over the top level's): what requests
/// towards servers and answers towards clients lose and gain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderRules {
    pub request: FieldRules,
    pub response: FieldRules,
}

impl HeaderRules {
    pub fn is_empty(&self) -> bool {
        self.request.is_empty() && self.response.is_empty()
    }
}

/// `[request_id]`: every request gets an id, passed to servers, written in the access log.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestIdSettings {
    /// The field's name, as written to servers (and to clients with `respond`). Default
    /// `X-Request-Id`.
    pub header: Box<str>,
    /// Peers (the TCP peer, not `[real_ip]`'s client) whose id is kept; any other's is
    /// replaced, so that a client cannot choose the id servers and the log see. Default
    /// `[real_ip]`'s trusted list, else none.
    pub trusted: AddressSet,
    /// The id goes back to the client in its answer too. Default false.
    pub respond: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_s_rules_go_over_the_top_level_s() {
        let line = |name: &str, value: &str| {
            let value = Template::parse(value, |variable| field_may_name(variable, true));
            FieldLine::new(name, value.unwrap())
        };
        let top = FieldRules {
            dropped: vec!["x-frame-options".into(), "server".into()].into(),
            written: vec![line("X-Frame-Options", "DENY"), line("X-Via", "{host}")].into(),
            reads_request_head: true,
        };
        let route = FieldRules {
            dropped: vec!["x-via".into()].into(),
            written: vec![line("X-Route", "{route}")].into(),
            reads_request_head: false,
        };
        let both = top.then(&route);
        assert_eq!(
            &*both.dropped,
            &["x-frame-options".into(), "server".into(), "x-via".into()]
        );
        let names: Vec<&str> = both.written.iter().map(|line| &*line.name).collect();
        assert_eq!(names, ["X-Frame-Options", "X-Route"]);
        assert!(!both.reads_request_head);
    }
}
