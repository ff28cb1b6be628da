//! Templates in values built from the request (`{host}`, `{path_rest}`, …): compiled at load into
//! literal text and variables, so that a request writes one without parsing or allocating.

use std::fmt;

/// A value with `{name}` variables, compiled: `https://{host}/new/{path_rest}` is the text
/// `https://`, the variable `host`, the text `/new/`, the variable `path_rest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub parts: Box<[Part]>,
}

/// One piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Written as it is (`{{` in the config is one `{` here).
    Text(Box<str>),
    Variable(Variable),
}

/// What a template may name, written `{name}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variable {
    /// `http` or `https`: how the client reached herdsman.
    Scheme,
    /// The request's host as the client named it (an absolute-form target's, else Host's),
    /// port included if it gave one.
    Host,
    /// The request's path, without its query.
    Path,
    /// The path after the route's `path_prefix` (after its `/` when the route has none).
    PathRest,
    /// The request's query, without its `?`; empty when it has none.
    Query,
    /// The request's method.
    Method,
    /// The client's address as herdsman sees it (`[real_ip]` applied).
    Client,
    /// The port the client's connection comes from.
    ClientPort,
    /// The route that took the request: `route[N]`, N its index in the file.
    Route,
    /// The TLS version (`TLSv1.3`); empty when not TLS.
    TlsVersion,
    /// The TLS cipher suite; empty when not TLS.
    TlsCipher,
}

impl Variable {
    const ALL: [(&'static str, Variable); 11] = [
        ("scheme", Variable::Scheme),
        ("host", Variable::Host),
        ("path", Variable::Path),
        ("path_rest", Variable::PathRest),
        ("query", Variable::Query),
        ("method", Variable::Method),
        ("client", Variable::Client),
        ("client_port", Variable::ClientPort),
        ("route", Variable::Route),
        ("tls_version", Variable::TlsVersion),
        ("tls_cipher", Variable::TlsCipher),
    ];

    fn named(name: &str) -> Option<Variable> {
        Variable::ALL
            .iter()
            .find(|(word, _)| *word == name)
            .map(|&(_, variable)| variable)
    }

    /// The name a template writes it by.
    pub fn name(self) -> &'static str {
        Variable::ALL
            .iter()
            .find(|(_, variable)| *variable == self)
            .map_or("?", |(word, _)| word)
    }
}

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// A `{` without its `}`.
    Unclosed,
    /// `{}` or a name that is not lowercase letters, digits and `_`.
    Malformed(String),
    /// A well-formed name no variable has.
    Unknown(String),
    /// A byte no header value may hold (CR, LF, NUL).
    ControlCharacter,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known = Variable::ALL
            .iter()
            .map(|(word, _)| *word)
            .collect::<Vec<_>>()
            .join(", ");
        match self {
            TemplateError::Unclosed => {
                f.write_str("a '{' without its '}' (write {{ for a '{' of its own)")
            }
            TemplateError::Malformed(name) => write!(
                f,
                "{{{name}}} is no variable name (lowercase letters, digits and _): variables are \
                 {known}"
            ),
            TemplateError::Unknown(name) => {
                write!(f, "no variable {{{name}}}: variables are {known}")
            }
            TemplateError::ControlCharacter => f.write_str("holds a CR, LF or NUL"),
        }
    }
}

impl Template {
    /// Compiles `text`: `{name}` is a variable, `{{` a `{`.
    pub fn compile(text: &str) -> Result<Template, TemplateError> {
        if text.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(TemplateError::ControlCharacter);
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            literal.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            if let Some(escaped) = after.strip_prefix('{') {
                literal.push('{');
                rest = escaped;
                continue;
            }
            let close = after.find('}').ok_or(TemplateError::Unclosed)?;
            let name = &after[..close];
            let well_formed = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !well_formed {
                return Err(TemplateError::Malformed(name.to_string()));
            }
            let variable =
                Variable::named(name).ok_or_else(|| TemplateError::Unknown(name.to_string()))?;
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal).into()));
            }
            parts.push(Part::Variable(variable));
            rest = &after[close + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal.into()));
        }
        Ok(Template {
            parts: parts.into(),
        })
    }

    /// Whether it names `variable`.
    pub fn names(&self, variable: Variable) -> bool {
        self.parts.contains(&Part::Variable(variable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_variables_alternate_and_braces_escape() {
        let template = Template::compile("https://{host}/new/{path_rest}?a={{b}").unwrap();
        assert_eq!(
            &*template.parts,
            [
                Part::Text("https://".into()),
                Part::Variable(Variable::Host),
                Part::Text("/new/".into()),
                Part::Variable(Variable::PathRest),
                Part::Text("?a={b}".into()),
            ]
        );
        assert!(template.names(Variable::Host));
        assert!(!template.names(Variable::Query));
    }

    #[test]
    fn unknown_malformed_and_unclosed_names_are_refused() {
        assert_eq!(
            Template::compile("/{hots}"),
            Err(TemplateError::Unknown("hots".into()))
        );
        assert_eq!(
            Template::compile("/{Host}"),
            Err(TemplateError::Malformed("Host".into()))
        );
        assert_eq!(
            Template::compile("/{}"),
            Err(TemplateError::Malformed(String::new()))
        );
        assert_eq!(Template::compile("/{host"), Err(TemplateError::Unclosed));
        assert_eq!(
            Template::compile("/a\r\nSet-Cookie: x"),
            Err(TemplateError::ControlCharacter)
        );
        let message = TemplateError::Unknown("hots".into()).to_string();
        assert!(message.starts_with("no variable {hots}: variables are scheme, host"));
    }
}
