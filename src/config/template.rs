//! Templates in values built from the request — a header rule's value (`{client}`), a redirect's
//! `to` (`https://{host}/new/{path_rest}`): one parser of `{name}` and `{{`, one set of
//! variables, compiled at load into literal text and variables so that a request writes one
//! without parsing or allocating (`rules::template` renders them). Each use says which variables
//! it allows (`config::headers`, `config::answers`); a template naming another is refused.

use std::fmt;

/// A value `{name}` stands for, rendered per request (`rules::template::Values`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variable {
    /// The client's address as herdsman serves it (`[real_ip]` applied).
    Client,
    /// The TCP peer's port.
    ClientPort,
    /// The request's id (`[request_id]`); empty without one.
    RequestId,
    /// The request's host as the client named it (an absolute-form target's, else Host's), port
    /// included if it gave one.
    Host,
    /// The request's target as received: its path and query (`/a/b?x=1`).
    Target,
    /// The target's path, without its query (`/a/b`).
    Path,
    /// The path after the route's `path_prefix` (after its first `/` when the route has none);
    /// redirects only.
    PathRest,
    /// The request's query, without its `?` (`x=1`); empty when it has none.
    Query,
    Method,
    /// `http` or `https`: how the client reached herdsman.
    Scheme,
    /// `route[N]`, the route that took the request (N its index in the file); empty when none
    /// did.
    Route,
    /// The name of the server that answered; answers from servers only (empty on a cached one).
    Server,
    /// The client's TLS version (`TLSv1.3`), cipher suite and the name it asked for; empty in
    /// cleartext.
    TlsVersion,
    TlsCipher,
    Sni,
}

impl Variable {
    /// Every variable, under the name a template writes.
    pub const NAMES: [(&'static str, Variable); 15] = [
        ("client", Variable::Client),
        ("client_port", Variable::ClientPort),
        ("request_id", Variable::RequestId),
        ("host", Variable::Host),
        ("target", Variable::Target),
        ("path", Variable::Path),
        ("path_rest", Variable::PathRest),
        ("query", Variable::Query),
        ("method", Variable::Method),
        ("scheme", Variable::Scheme),
        ("route", Variable::Route),
        ("server", Variable::Server),
        ("tls_version", Variable::TlsVersion),
        ("tls_cipher", Variable::TlsCipher),
        ("sni", Variable::Sni),
    ];

    /// The name a template writes it by.
    pub fn name(self) -> &'static str {
        Variable::NAMES
            .iter()
            .find(|(_, variable)| *variable == self)
            .map_or("?", |(name, _)| name)
    }

    /// Whether its value comes from the request's head, which is gone by the time the response
    /// comes (the exchange keeps a copy for the response's rules: `proxy::Client`).
    pub fn reads_request_head(self) -> bool {
        matches!(
            self,
            Variable::Host
                | Variable::Target
                | Variable::Path
                | Variable::PathRest
                | Variable::Query
                | Variable::Method
        )
    }
}

/// One piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Written as it is (`{{` in the config is one `{` here, `}}` one `}`).
    Literal(Box<str>),
    Variable(Variable),
}

/// A value with `{name}` variables, compiled: `https://{host}/new/{path_rest}` is the text
/// `https://`, the variable `host`, the text `/new/`, the variable `path_rest`. Rendering writes
/// each part straight into the head being written (no allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub parts: Box<[Part]>,
}

/// Why a template was refused; the check names the key with it. `known`: the variables its use
/// allows, for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// A byte no field value may hold: CR, LF, NUL or another control character but tab.
    ControlCharacter,
    /// A `{` without its `}`.
    Unclosed,
    /// A `}` that closes no `{`.
    StrayClose,
    /// `{}` or a name that is not lowercase letters, digits and `_`.
    Malformed { name: String, known: String },
    /// A well-formed name no variable has.
    Unknown { name: String, known: String },
    /// A variable its use does not allow.
    NotHere { variable: Variable, known: String },
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::ControlCharacter => {
                f.write_str("a field value cannot hold CR, LF, NUL or another control character")
            }
            TemplateError::Unclosed => {
                f.write_str("a '{' without its '}'; write '{{' for a literal one")
            }
            TemplateError::StrayClose => {
                f.write_str("a '}' that closes nothing; write '}}' for a literal one")
            }
            TemplateError::Malformed { name, known } => write!(
                f,
                "{{{name}}} is no variable name (lowercase letters, digits and _); known here: \
                 {known}"
            ),
            TemplateError::Unknown { name, known } => {
                write!(f, "unknown variable {{{name}}}; known here: {known}")
            }
            TemplateError::NotHere { variable, known } => write!(
                f,
                "{{{}}} is not known here; known here: {known}",
                variable.name()
            ),
        }
    }
}

impl Template {
    /// Reads `text`: `{name}` is a variable, which its use must allow (`allows`); `{{` is a
    /// literal `{` and `}}` a literal `}`.
    pub fn parse(text: &str, allows: impl Fn(Variable) -> bool) -> Result<Template, TemplateError> {
        // Only for a refusal's message.
        let known = || {
            let names = Variable::NAMES
                .iter()
                .filter(|(_, variable)| allows(*variable));
            names.map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
        };
        if text.chars().any(|c| c.is_control() && c != '\t') {
            return Err(TemplateError::ControlCharacter);
        }
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
                return Err(TemplateError::StrayClose);
            }
            let end = after.find('}').ok_or(TemplateError::Unclosed)?;
            let name = &after[..end];
            let well_formed = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            let found = Variable::NAMES.iter().find(|(known, _)| *known == name);
            let name = name.to_string();
            let variable = match (well_formed, found) {
                (false, _) => {
                    return Err(TemplateError::Malformed {
                        name,
                        known: known(),
                    })
                }
                (true, None) => {
                    return Err(TemplateError::Unknown {
                        name,
                        known: known(),
                    })
                }
                (true, Some(&(_, variable))) if !allows(variable) => {
                    return Err(TemplateError::NotHere {
                        variable,
                        known: known(),
                    });
                }
                (true, Some(&(_, variable))) => variable,
            };
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal).into_boxed_str()));
            }
            parts.push(Part::Variable(variable));
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

    /// The whole text of a template without variables (empty for an empty one); `None` when
    /// it has a variable.
    pub fn literal(&self) -> Option<&str> {
        match &self.parts[..] {
            [] => Some(""),
            [Part::Literal(text)] => Some(text),
            _ => None,
        }
    }

    /// An empty template: a stand-in for one refused.
    pub fn empty() -> Template {
        Template {
            parts: Box::default(),
        }
    }

    /// The variables it uses.
    pub fn variables(&self) -> impl Iterator<Item = Variable> + '_ {
        self.parts.iter().filter_map(|part| match part {
            Part::Variable(variable) => Some(*variable),
            Part::Literal(_) => None,
        })
    }

    /// Whether it names `variable`.
    pub fn names(&self, variable: Variable) -> bool {
        self.variables().any(|each| each == variable)
    }
}

/// Written as the config would write it (braces doubled), for `herdsman check`'s summary.
impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in self.parts.iter() {
            match part {
                Part::Literal(text) => f.write_str(&text.replace('{', "{{").replace('}', "}}"))?,
                Part::Variable(variable) => write!(f, "{{{}}}", variable.name())?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A use that allows these.
    fn some(variable: Variable) -> bool {
        matches!(
            variable,
            Variable::Client
                | Variable::ClientPort
                | Variable::Host
                | Variable::PathRest
                | Variable::Route
        )
    }

    fn literal(text: &str) -> Part {
        Part::Literal(text.into())
    }

    #[test]
    fn literals_and_variables_alternate_and_braces_escape() {
        let template = Template::parse("for={client}:{client_port}; {{x}} {route}", some).unwrap();
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
        assert!(template.names(Variable::Route));
        assert!(!template.names(Variable::Host));
        assert_eq!(
            template.to_string(),
            "for={client}:{client_port}; {{x}} {route}"
        );
        assert!(Template::parse("", some).unwrap().parts.is_empty());
    }

    #[test]
    fn unknown_malformed_unclosed_and_unallowed_names_are_refused() {
        let unknown = Template::parse("/{hots}", some).unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "unknown variable {hots}; known here: client, client_port, host, path_rest, route"
        );
        assert!(matches!(
            Template::parse("/{Host}", some),
            Err(TemplateError::Malformed { .. })
        ));
        assert!(matches!(
            Template::parse("/{}", some),
            Err(TemplateError::Malformed { .. })
        ));
        assert_eq!(
            Template::parse("/{host", some),
            Err(TemplateError::Unclosed)
        );
        assert_eq!(Template::parse("a}b", some), Err(TemplateError::StrayClose));
        assert_eq!(
            Template::parse("/a\r\nSet-Cookie: x", some),
            Err(TemplateError::ControlCharacter)
        );
        let not_here = Template::parse("{server}", some).unwrap_err();
        assert!(matches!(
            not_here,
            TemplateError::NotHere {
                variable: Variable::Server,
                ..
            }
        ));
        assert!(not_here
            .to_string()
            .starts_with("{server} is not known here"));
    }
}
