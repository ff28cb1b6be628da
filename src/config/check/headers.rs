//! `[headers]`, `[route.headers]` and `[request_id]`: field names that are tokens and not
//! herdsman's to say (framing, hop-by-hop, the X-Forwarded-* it writes), values that are field
//! values once rendered, variables known and on their side; each refusal on its own line.

use std::sync::Arc;

use toml::Spanned;

use super::primitives::quoted;
use super::{Checker, Table};
use crate::config::access::RealIp;
use crate::config::cidr::AddressSet;
use crate::config::headers::{
    field_may_name, FieldLine, FieldRules, HeaderRules, RequestIdSettings,
};
use crate::config::raw::{RawFieldRules, RawFields, RawHeaders, RawRequestId};
use crate::config::template::{Template, TemplateError, Variable};
use crate::config::token::is_token;

/// Which way a side's fields go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Towards servers: `{server}` is not known yet.
    Request,
    /// Towards clients.
    Response,
}

/// Fields that frame a message or describe one connection (RFC 9110 §7.6.1): herdsman writes
/// them as each hop needs, and a rule could only make a message that reads two ways.
const NEVER: [&str; 9] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
    "upgrade",
    "te",
    "keep-alive",
    "trailer",
    "http2-settings",
];

/// The fields herdsman writes to servers itself, from what it knows of the connection.
const FORWARDED: [&str; 4] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-client-cert",
];

/// The default `[request_id] header`.
const DEFAULT_REQUEST_ID: &str = "X-Request-Id";

impl Checker {
    /// `[request_id]`, if the config has one; `real_ip`'s trusted peers are its default.
    pub(super) fn request_id(
        &mut self,
        raw: &Option<Spanned<RawRequestId>>,
        real_ip: Option<&RealIp>,
    ) -> Option<RequestIdSettings> {
        let raw = raw.as_ref()?;
        let table = Table {
            path: "request_id".to_string(),
            line: self.lines.line_of(raw.span().start),
        };
        let raw = raw.get_ref();
        let header = match &raw.header {
            None => DEFAULT_REQUEST_ID.into(),
            Some(name) => {
                let text = name.get_ref();
                let why = if !is_token(text) {
                    Some("not a field name; write e.g. header = \"X-Request-Id\"")
                } else if refused_name(&text.to_ascii_lowercase(), Side::Request).is_some() {
                    Some("a field herdsman writes itself; write e.g. header = \"X-Request-Id\"")
                } else {
                    None
                };
                if let Some(why) = why {
                    self.reject(&table.key("header"), name.span(), &quoted(text), why);
                }
                text.as_str().into()
            }
        };
        let trusted = match &raw.trusted {
            Some(list) => self.addresses(&table.key("trusted"), list),
            None => real_ip.map_or_else(AddressSet::default, |real_ip| real_ip.trusted.clone()),
        };
        Some(RequestIdSettings {
            header,
            trusted,
            respond: raw.respond.as_ref().is_some_and(|b| *b.get_ref()),
        })
    }

    /// `[headers]` (`top` `None`), or a route's `[route.headers]` over the top level's `top`:
    /// the rules as they apply, `None` when there are none. `request_id`: `[request_id]`, whose
    /// field the rules may not name.
    pub(super) fn header_rules(
        &mut self,
        path: &str,
        raw: &RawHeaders,
        top: Option<&HeaderRules>,
        request_id: Option<&RequestIdSettings>,
    ) -> Option<Arc<HeaderRules>> {
        let mut side = |name: &str, raw: &Option<Spanned<RawFieldRules>>, side: Side| {
            let own = raw.as_ref().map_or_else(FieldRules::default, |raw| {
                self.field_rules(&format!("{path}.{name}"), raw.get_ref(), side, request_id)
            });
            let base = top.map(|top| match side {
                Side::Request => &top.request,
                Side::Response => &top.response,
            });
            match base {
                Some(base) => base.then(&own),
                None => own,
            }
        };
        let rules = HeaderRules {
            request: side("request", &raw.request, Side::Request),
            response: side("response", &raw.response, Side::Response),
        };
        (!rules.is_empty()).then(|| Arc::new(rules))
    }

    /// One side's `set`, `add` and `remove` at `path` (`headers.request`).
    fn field_rules(
        &mut self,
        path: &str,
        raw: &RawFieldRules,
        side: Side,
        request_id: Option<&RequestIdSettings>,
    ) -> FieldRules {
        let mut dropped: Vec<Box<str>> = Vec::new();
        let mut drop = |name: String| {
            if !dropped.iter().any(|known| **known == *name) {
                dropped.push(name.into_boxed_str());
            }
        };
        if let Some(list) = &raw.remove {
            let key = format!("{path}.remove");
            for name in list.get_ref() {
                if let Some(lower) = self.rule_name(&key, name, side, request_id) {
                    drop(lower);
                }
            }
        }
        let mut written = Vec::new();
        let set = self.field_lines(&format!("{path}.set"), &raw.set, side, request_id);
        for line in &set {
            drop(line.name.to_ascii_lowercase());
        }
        written.extend(set);
        written.extend(self.field_lines(&format!("{path}.add"), &raw.add, side, request_id));
        let reads_request_head = written
            .iter()
            .any(|line: &FieldLine| line.value.variables().any(Variable::reads_request_head));
        FieldRules {
            dropped: dropped.into_boxed_slice(),
            written: written.into_boxed_slice(),
            reads_request_head,
        }
    }

    /// The fields of a `set` or `add` table at `key`, each name and value checked.
    fn field_lines(
        &mut self,
        key: &str,
        raw: &Option<Spanned<RawFields>>,
        side: Side,
        request_id: Option<&RequestIdSettings>,
    ) -> Vec<FieldLine> {
        let Some(fields) = raw else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        for (name, value) in &fields.get_ref().0 {
            let field_key = format!("{key}.{}", name.get_ref());
            let known_name = self.rule_name(key, name, side, request_id).is_some();
            let template = self.field_value(&field_key, value, side);
            if let (true, Some(value)) = (known_name, template) {
                lines.push(FieldLine::new(name.get_ref(), value));
            }
        }
        lines
    }

    /// A field name a rule at `key` names, in lower case; `None`, after refusing it, when it is
    /// not a token or not one a rule may change.
    fn rule_name(
        &mut self,
        key: &str,
        name: &Spanned<String>,
        side: Side,
        request_id: Option<&RequestIdSettings>,
    ) -> Option<String> {
        let text = name.get_ref();
        let lower = text.to_ascii_lowercase();
        let request_id_here = request_id.filter(|settings| {
            settings.header.eq_ignore_ascii_case(text)
                && (side == Side::Request || settings.respond)
        });
        let why = if !is_token(text) {
            "not a field name (letters, digits and !#$%&'*+-.^_`|~)".to_string()
        } else if let Some(why) = refused_name(&lower, side) {
            why.to_string()
        } else if request_id_here.is_some() {
            "[request_id] writes this field; change [request_id] header instead".to_string()
        } else {
            return Some(lower);
        };
        self.reject(key, name.span(), &quoted(text), why);
        None
    }

    /// A field's value at `key`, compiled; `None` after refusing it.
    fn field_value(&mut self, key: &str, raw: &Spanned<String>, side: Side) -> Option<Template> {
        let text = raw.get_ref();
        let towards_clients = side == Side::Response;
        let allows = |variable| field_may_name(variable, towards_clients);
        let why = match Template::parse(text, allows) {
            Ok(template) => return Some(template),
            Err(TemplateError::NotHere {
                variable: Variable::Server,
                ..
            }) => "{server} is known only once a server answers: use it in [headers.response]"
                .to_string(),
            Err(error) => error.to_string(),
        };
        self.reject(key, raw.span(), &quoted(text), why);
        None
    }
}

/// Whether the field `lower` (lower case) is one herdsman writes for each hop itself — framing,
/// hop-by-hop, `Proxy-*` — which no header rule or fixed response may set.
pub(super) fn is_framing_or_hop_by_hop(lower: &str) -> bool {
    NEVER.contains(&lower) || lower.starts_with("proxy-")
}

/// Why a rule on `side` may not name the field `lower` (lower case), if it may not.
fn refused_name(lower: &str, side: Side) -> Option<&'static str> {
    if is_framing_or_hop_by_hop(lower) {
        return Some("a framing or hop-by-hop field, which herdsman writes for each hop itself");
    }
    if side == Side::Request && FORWARDED.contains(&lower) {
        return Some("herdsman writes this field to servers itself, from the connection");
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::config::fixtures::{only_problem, MINIMAL};
    use crate::config::load::from_toml;

    #[test]
    fn rules_and_a_route_s_own_are_compiled_in_order() {
        let text = format!(
            "{MINIMAL}\n[headers.request]\nset = {{ \"X-Client\" = \"{{client}}\" }}\n\
             remove = [\"X-Debug\"]\n[headers.response]\nremove = [\"Server\"]\n\
             [[route]]\npath_prefix = \"/a/\"\npool = \"app\"\n\
             [route.headers.response]\nset = {{ \"Strict-Transport-Security\" = \"max-age=1\" }}\n"
        );
        let config = from_toml(&text, "test").unwrap();
        let top = config.headers.as_deref().unwrap();
        assert_eq!(
            &*top.request.dropped,
            &["x-debug".into(), "x-client".into()]
        );
        let route = config.routes[0].headers.as_deref().unwrap();
        assert_eq!(route.request, top.request);
        assert_eq!(
            &*route.response.dropped,
            &["server".into(), "strict-transport-security".into()]
        );
    }

    #[test]
    fn bad_names_values_and_variables_are_refused_with_key_and_line() {
        let cases = [
            (
                "[headers.request]\nset = { \"X-A\" = \"{server}\" }",
                "headers.request.set.X-A",
                "{server} is known only",
            ),
            (
                "[headers.request]\nset = { \"X-A\" = \"{path_rest}\" }",
                "headers.request.set.X-A",
                "path_rest",
            ),
            (
                "[headers.response]\nadd = { \"X-A\" = \"{nope}\" }",
                "headers.response.add.X-A",
                "unknown variable {nope}",
            ),
            (
                "[headers.response]\nset = { \"X-A\" = \"a\\r\\nInjected: 1\" }",
                "headers.response.set.X-A",
                "control character",
            ),
            (
                "[headers.response]\nset = { \"X A\" = \"1\" }",
                "headers.response.set",
                "not a field name",
            ),
            (
                "[headers.request]\nremove = [\"Content-Length\"]",
                "headers.request.remove",
                "framing or hop-by-hop",
            ),
            (
                "[headers.response]\nset = { \"Proxy-Authenticate\" = \"x\" }",
                "headers.response.set",
                "framing or hop-by-hop",
            ),
            (
                "[headers.request]\nset = { \"X-Forwarded-For\" = \"{client}\" }",
                "headers.request.set",
                "writes this field to servers itself",
            ),
            (
                "[request_id]\n[headers.request]\nset = { \"x-request-id\" = \"1\" }",
                "headers.request.set",
                "[request_id] writes this field",
            ),
            (
                "[request_id]\nheader = \"Host\"",
                "request_id.header",
                "a field herdsman writes itself",
            ),
            (
                "[request_id]\ntrusted = [\"10.0.0.0/33\"]",
                "request_id.trusted",
                "",
            ),
        ];
        for (rules, key, why) in cases {
            let text = format!("{MINIMAL}\n{rules}\n");
            let found = only_problem(&text);
            assert_eq!(found.key, key, "{rules}: {found:?}");
            assert!(found.message.contains(why), "{rules}: {found:?}");
            let line = text.lines().count();
            assert_eq!(found.line, Some(line), "{rules}: {found:?}");
        }
        // A route's own, named by its route.
        let text = format!(
            "{MINIMAL}\n[[route]]\npool = \"app\"\n[route.headers.request]\n\
             add = {{ \"X-B\" = \"{{server}}\" }}\n"
        );
        assert_eq!(only_problem(&text).key, "route[0].headers.request.add.X-B");
    }

    #[test]
    fn request_ids_trust_real_ip_s_peers_unless_told() {
        let text = format!("{MINIMAL}\n[real_ip]\ntrusted = [\"10.0.0.0/8\"]\n[request_id]\n");
        let settings = from_toml(&text, "test").unwrap().request_id.unwrap();
        assert!(settings.trusted.contains("10.1.2.3".parse().unwrap()));
        assert_eq!(&*settings.header, "X-Request-Id");
        assert!(!settings.respond);
        let text = format!(
            "{MINIMAL}\n[real_ip]\ntrusted = [\"10.0.0.0/8\"]\n[request_id]\ntrusted = []\n\
             header = \"X-Trace\"\nrespond = true\n"
        );
        let settings = from_toml(&text, "test").unwrap().request_id.unwrap();
        assert!(!settings.trusted.contains("10.1.2.3".parse().unwrap()));
        assert_eq!(&*settings.header, "X-Trace");
        assert!(settings.respond);
    }
}
