//! Header rules as checked: `[headers.request|response]` and a route's own (`set`, `add`,
//! `remove`), their values compiled into templates of literal and variable parts, and
//! `[request_id]`. What the rules do to a head is `rules::headers`; what a request id is,
//! `rules::request_id`.

use super::cidr::AddressSet;

/// A value `{name}` stands for, rendered per request (`rules::headers::Values`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variable {
    /// The client's address as herdsman serves it (`[real_ip]` applied).
    Client,
    /// The TCP peer's port.
    ClientPort,
    /// The request's id (`[request_id]`); empty without one.
    RequestId,
    /// The request's Host (an absolute-form target's host).
    Host,
    /// The target as received: path and query.
    Path,
    Method,
    /// `http` or `https`.
    Scheme,
    /// `route[N]`, the route that took the request; empty when none did.
    Route,
    /// The name of the server that answered; response side only (empty on a cached answer).
    Server,
    /// The client's TLS version, cipher suite and the name it asked for; empty in cleartext.
    TlsVersion,
    TlsCipher,
    Sni,
}

impl Variable {
    /// Every variable, under the name a template writes.
    pub const NAMES: [(&'static str, Variable); 12] = [
        ("client", Variable::Client),
        ("client_port", Variable::ClientPort),
        ("request_id", Variable::RequestId),
        ("host", Variable::Host),
        ("path", Variable::Path),
        ("method", Variable::Method),
        ("scheme", Variable::Scheme),
        ("route", Variable::Route),
        ("server", Variable::Server),
        ("tls_version", Variable::TlsVersion),
        ("tls_cipher", Variable::TlsCipher),
        ("sni", Variable::Sni),
    ];

    /// Whether its value comes from the request's head, which is gone by the time the response
    /// comes (the exchange keeps a copy for the response's rules: `proxy::Client`).
    pub fn reads_request_head(self) -> bool {
        matches!(self, Variable::Host | Variable::Path | Variable::Method)
    }
}

/// One piece of a field value as written in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Literal(Box<str>),
    Variable(Variable),
}

/// A field value: literal text and variables, in order. Rendering writes each part straight
/// into the head being written (no allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub parts: Box<[Part]>,
}

impl Template {
    /// Reads `text`: `{name}` is a variable, `{{` a literal `{` (and `}}` a literal `}`).
    /// The error says what is wrong, for the check to name with the key.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find(['{', '}']) {
            literal.push_str(&rest[..at]);
            let brace = rest.as_bytes()[at];
            let after = &rest[at + 1..];
            if after.as_bytes().first() == Some(&brace) {
                literal.push(char::from(brace));
                rest = &after[1..];
                continue;
            }
            if brace == b'}' {
                return Err("a '}' that closes nothing; write '}}' for a literal one".into());
            }
            let Some(end) = after.find('}') else {
                return Err("a '{' without its '}'; write '{{' for a literal one".into());
            };
            let name = &after[..end];
            let Some((_, variable)) = Variable::NAMES.iter().find(|(known, _)| *known == name)
            else {
                let known: Vec<&str> = Variable::NAMES.iter().map(|(name, _)| *name).collect();
                return Err(format!(
                    "unknown variable {{{name}}}; known: {}",
                    known.join(", ")
                ));
            };
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal).into_boxed_str()));
            }
            parts.push(Part::Variable(*variable));
            rest = &after[end + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Literal(literal.into_boxed_str()));
        }
        Ok(Template {
            parts: parts.into_boxed_slice(),
        })
    }

    /// The variables it uses.
    pub fn variables(&self) -> impl Iterator<Item = Variable> + '_ {
        self.parts.iter().filter_map(|part| match part {
            Part::Variable(variable) => Some(*variable),
            Part::Literal(_) => None,
        })
    }
}

/// A field herdsman writes: its name as the config spells it, and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLine {
    pub name: Box<str>,
    pub value: Template,
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

    fn literal(text: &str) -> Part {
        Part::Literal(text.into())
    }

    #[test]
    fn a_template_is_literals_and_variables() {
        let template = Template::parse("for={client}:{client_port}; {{x}} {route}").unwrap();
        assert_eq!(
            &*template.parts,
            &[
                literal("for="),
                Part::Variable(Variable::Client),
                literal(":"),
                Part::Variable(Variable::ClientPort),
                literal("; {x} "),
                Part::Variable(Variable::Route),
            ]
        );
        assert!(Template::parse("").unwrap().parts.is_empty());
        assert!(Template::parse("{nope}")
            .unwrap_err()
            .starts_with("unknown variable {nope}"));
        assert!(Template::parse("{client").is_err());
        assert!(Template::parse("a}b").is_err());
    }

    #[test]
    fn a_route_s_rules_go_over_the_top_level_s() {
        let line = |name: &str, value: &str| FieldLine {
            name: name.into(),
            value: Template::parse(value).unwrap(),
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
