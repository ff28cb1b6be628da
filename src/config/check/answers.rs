//! What a route does with the requests it takes: send them to its `pool`, or answer them itself
//! (`[route.redirect]`, `[route.respond]`) — exactly one of the three — and the target its server
//! is sent (`[route.rewrite]`): statuses, the redirect's template, the fixed body and its file,
//! header fields, the rewrite's regex and the captures its replacement names.

use std::io::Read;

use toml::Spanned;

use super::headers::is_framing_or_hop_by_hop;
use super::primitives::quoted;
use super::{Checker, Table};
use crate::config::answers::{
    missing_captures, reason_phrase, redirect_may_name, FixedResponse, PathPattern, Redirect,
    Rewrite, RouteAnswer, MAX_BODY,
};
use crate::config::raw::{RawPool, RawRedirect, RawRespond, RawRewrite, RawRoute};
use crate::config::template::{Part, Template, Variable};
use crate::config::token::is_token;
use crate::config::ConfigProblem;

/// The default `[route.respond] content_type`.
const DEFAULT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

impl Checker {
    /// The route's pool, or its own answer: it has exactly one of `pool`, `[route.redirect]`
    /// and `[route.respond]`.
    pub(super) fn route_target(
        &mut self,
        table: &Table,
        route: &RawRoute,
        pools: &[Spanned<RawPool>],
    ) -> (Option<usize>, Option<Box<RouteAnswer>>) {
        let answer = match (&route.redirect, &route.respond) {
            (None, None) => None,
            (Some(redirect), None) => Some(RouteAnswer::Redirect(self.redirect(table, redirect))),
            (None, Some(respond)) => Some(RouteAnswer::Respond(self.respond(table, respond))),
            (Some(_), Some(respond)) => {
                let key = table.key("respond");
                let line = self.lines.line_of(respond.span().start);
                let message = format!(
                    "{key}: a route answers with a redirect or a fixed response, not both; \
                     remove [{}.redirect] or [{}.respond]",
                    table.path, table.path
                );
                self.report(&key, Some(line), &message);
                None
            }
        };
        let Some(answer) = answer else {
            let how = r#"write the name of a [[pool]], e.g. pool = "app" (or give the route a [route.redirect] or [route.respond] to answer itself)"#;
            return (Some(self.pool_index(table, &route.pool, pools, how)), None);
        };
        if let Some(pool) = &route.pool {
            let what = match &answer {
                RouteAnswer::Redirect(_) => "redirect",
                RouteAnswer::Respond(_) => "respond",
            };
            self.reject(
                &table.key("pool"),
                pool.span(),
                &quoted(pool.get_ref()),
                format!(
                    "a route with [{}.{what}] answers itself and sends nothing to a pool; remove \
                     one of them",
                    table.path
                ),
            );
        }
        self.warn_of_tables_without_effect(table, route);
        if let Some(rewrite) = &route.rewrite {
            let key = table.key("rewrite");
            let line = self.lines.line_of(rewrite.span().start);
            let message = format!(
                "{key}: the route answers itself, so no server gets a target to rewrite; remove \
                 [{key}] or give the route a pool instead"
            );
            self.report(&key, Some(line), &message);
        }
        (None, Some(Box::new(answer)))
    }

    /// A warning for each table of a route that answers itself which only a route with a pool
    /// uses (its server's timeouts, the buffering and cache of its answers, their compression,
    /// header rules, which herdsman's own answers do not take): valid, but it changes nothing.
    fn warn_of_tables_without_effect(&mut self, table: &Table, route: &RawRoute) {
        let starts = [
            ("timeouts", route.timeouts.as_ref().map(|raw| raw.span())),
            ("buffering", route.buffering.as_ref().map(|raw| raw.span())),
            ("cache", route.cache.as_ref().map(|raw| raw.span())),
            (
                "compression",
                route.compression.as_ref().map(|raw| raw.span()),
            ),
            ("headers", route.headers.as_ref().map(|raw| raw.span())),
        ];
        for (field, span) in starts {
            let Some(span) = span else { continue };
            let key = table.key(field);
            self.warnings.push(ConfigProblem {
                message: format!(
                    "{key}: {} answers itself, so no server's request or answer is timed, \
                     buffered, cached, compressed or given header rules: [{key}] changes nothing",
                    table.path
                ),
                line: Some(self.lines.line_of(span.start)),
                key,
            });
        }
    }

    /// The table `field` of `table`, which starts at byte `start`: `route[2].redirect`.
    fn inner_table(&self, table: &Table, field: &str, start: usize) -> Table {
        Table {
            path: table.key(field),
            line: self.lines.line_of(start),
        }
    }

    /// `[route.redirect]`.
    fn redirect(&mut self, table: &Table, raw: &Spanned<RawRedirect>) -> Redirect {
        let table = self.inner_table(table, "redirect", raw.span().start);
        let raw = raw.get_ref();
        let status = match &raw.status {
            None => 302,
            Some(status) => match *status.get_ref() {
                value @ (301 | 302 | 303 | 307 | 308) => value as u16,
                value => {
                    let why = "a redirect's status is 301, 302 (the default), 303, 307 or 308";
                    self.reject(&table.key("status"), status.span(), &value.to_string(), why);
                    302
                }
            },
        };
        let how = r#"write where to, e.g. to = "https://{host}/new/{path_rest}" or "/new/""#;
        let to = match self.required(&table, "to", &raw.to, how) {
            Some(to) => self.location(&table.key("to"), to),
            None => Template::empty(),
        };
        let keep_query = match &raw.query {
            None => true,
            Some(word) => match word.get_ref().as_str() {
                "keep" => true,
                "drop" => false,
                other => {
                    let why = "accepted: \"keep\" (the default: the request's query goes after \
                               `to`), \"drop\"";
                    self.reject(&table.key("query"), word.span(), &quoted(other), why);
                    true
                }
            },
        };
        let to_has_query = to.parts.iter().any(|part| match part {
            Part::Literal(text) => text.contains('?'),
            Part::Variable(_) => false,
        });
        Redirect {
            status,
            // `{query}` or `{target}` in `to` places the query itself.
            keep_query: keep_query && !to.names(Variable::Query) && !to.names(Variable::Target),
            to_has_query,
            to,
        }
    }

    /// A redirect's `to`: a template that makes an absolute URL or a path, without a byte a
    /// Location may not hold.
    fn location(&mut self, key: &str, raw: &Spanned<String>) -> Template {
        let text = raw.get_ref();
        let template = match Template::parse(text, redirect_may_name) {
            Ok(template) => template,
            Err(error) => {
                self.reject(key, raw.span(), &quoted(text), error);
                return Template::empty();
            }
        };
        let starts_well = match template.parts.first() {
            Some(Part::Literal(first)) => {
                let lower = first.to_ascii_lowercase();
                first.starts_with('/')
                    || lower.starts_with("http://")
                    || lower.starts_with("https://")
            }
            Some(Part::Variable(Variable::Path)) => true,
            Some(Part::Variable(Variable::Scheme)) => {
                matches!(template.parts.get(1), Some(Part::Literal(next)) if next.starts_with("://"))
            }
            _ => false,
        };
        let bad_byte = template.parts.iter().any(|part| match part {
            Part::Literal(text) => text.bytes().any(|b| b <= b' ' || b == 0x7f),
            Part::Variable(_) => false,
        });
        if !starts_well {
            let why = "an absolute URL (http://, https:// or {scheme}://) or a path starting \
                       with '/'";
            self.reject(key, raw.span(), &quoted(text), why);
        } else if bad_byte {
            let why = "a URL holds no spaces or control characters (write %20 for a space)";
            self.reject(key, raw.span(), &quoted(text), why);
        }
        template
    }

    /// `[route.respond]`.
    fn respond(&mut self, table: &Table, raw: &Spanned<RawRespond>) -> FixedResponse {
        let table = self.inner_table(table, "respond", raw.span().start);
        let raw = raw.get_ref();
        let status: u16 = self.integer(
            &table.key("status"),
            &raw.status,
            200..=599,
            "200 to 599",
            200,
        );
        let body = match (&raw.body, &raw.body_file) {
            (Some(_), Some(file)) => {
                let why = "a fixed response has a body or a body_file, not both";
                self.reject(
                    &table.key("body_file"),
                    file.span(),
                    &quoted(file.get_ref()),
                    why,
                );
                Vec::new()
            }
            (Some(body), None) => {
                if body.get_ref().len() as u64 > MAX_BODY {
                    let key = table.key("body");
                    let line = self.lines.line_of(body.span().start);
                    let message = format!("{key}: longer than the 1 MiB a fixed body may be");
                    self.report(&key, Some(line), &message);
                }
                body.get_ref().as_bytes().to_vec()
            }
            (None, Some(file)) => self.body_file(&table.key("body_file"), file),
            (None, None) => Vec::new(),
        };
        let given = match (&raw.body, &raw.body_file) {
            (Some(body), _) => Some(("body", body)),
            (None, Some(file)) => Some(("body_file", file)),
            (None, None) => None,
        };
        if let (204 | 304, Some((key, value))) = (status, given) {
            let why = format!("a {status} carries no body; remove {key}");
            self.reject(&table.key(key), value.span(), &quoted(value.get_ref()), why);
        }
        let content_type = match &raw.content_type {
            None => DEFAULT_CONTENT_TYPE,
            Some(value) => {
                let text = value.get_ref().as_str();
                if text.is_empty() || !is_field_value(text) {
                    let why = "a media type, e.g. \"text/html; charset=utf-8\" (no CR, LF or NUL)";
                    self.reject(&table.key("content_type"), value.span(), &quoted(text), why);
                }
                text
            }
        };
        let mut head = format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status));
        if !matches!(status, 204 | 304) {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        for (name, value) in raw
            .headers
            .as_ref()
            .map(Spanned::get_ref)
            .into_iter()
            .flatten()
        {
            let key = format!("{}.headers.{name}", table.path);
            let text = value.get_ref();
            let lower = name.to_ascii_lowercase();
            let why = if !is_token(name) {
                Some("not a field name (letters, digits and !#$%&'*+-.^_`|~)".to_string())
            } else if is_framing_or_hop_by_hop(&lower) {
                Some(format!(
                    "{name} is the connection's framing or hop-by-hop, herdsman's to write"
                ))
            } else if lower == "content-type" {
                Some("set content_type instead".to_string())
            } else if !is_field_value(text) {
                Some("a field value holds no CR, LF or NUL".to_string())
            } else {
                None
            };
            match why {
                Some(why) => self.reject(&key, value.span(), &quoted(text), why),
                None => head.push_str(&format!("{name}: {text}\r\n")),
            }
        }
        FixedResponse {
            status,
            head: head.into_bytes().into(),
            body: if matches!(status, 204 | 304) {
                Box::default()
            } else {
                body.into()
            },
        }
    }

    /// A fixed response's `body_file`, read now (at start and at each reload): its bytes, or a
    /// problem naming the key and why it cannot be read.
    fn body_file(&mut self, key: &str, raw: &Spanned<String>) -> Vec<u8> {
        let path = raw.get_ref();
        let read = std::fs::File::open(path).and_then(|file| {
            let mut bytes = Vec::new();
            file.take(MAX_BODY + 1).read_to_end(&mut bytes)?;
            Ok(bytes)
        });
        match read {
            Ok(bytes) if bytes.len() as u64 <= MAX_BODY => bytes,
            Ok(_) => {
                let why = "larger than the 1 MiB a fixed body may be";
                self.reject(key, raw.span(), &quoted(path), why);
                Vec::new()
            }
            Err(error) => {
                self.reject(
                    key,
                    raw.span(),
                    &quoted(path),
                    format!("cannot read it: {error}"),
                );
                Vec::new()
            }
        }
    }

    /// `[route.rewrite]`, on a route that sends its requests to a pool (one that answers itself
    /// was refused it in [`Checker::route_target`]).
    pub(super) fn rewrite(
        &mut self,
        table: &Table,
        raw: &Spanned<RawRewrite>,
        route_prefix: Option<&str>,
    ) -> Option<Box<Rewrite>> {
        let path = table.key("rewrite");
        let line = self.lines.line_of(raw.span().start);
        let raw = raw.get_ref();
        match (&raw.path_prefix, &raw.path_regex, &raw.path) {
            (Some(prefix), None, None) => {
                let text = prefix.get_ref();
                let key = format!("{path}.path_prefix");
                if route_prefix.is_none() {
                    let why = format!(
                        "replaces the route's path_prefix, and {} has none; give it one, or \
                         rewrite with path_regex and path",
                        table.path
                    );
                    self.reject(&key, prefix.span(), &quoted(text), why);
                } else if !(text.is_empty() || text.starts_with('/')) || !is_target_text(text) {
                    let why = "\"\" (strips the route's prefix) or a path starting with '/', \
                               without spaces or control characters";
                    self.reject(&key, prefix.span(), &quoted(text), why);
                }
                Some(Box::new(Rewrite::Prefix(text.as_str().into())))
            }
            (None, Some(regex), Some(replacement)) => {
                let key = format!("{path}.path_regex");
                let compiled = regex::RegexBuilder::new(regex.get_ref())
                    .size_limit(super::conditions::REGEX_SIZE_LIMIT)
                    .build();
                let compiled = match compiled {
                    Ok(compiled) => compiled,
                    Err(error) => {
                        // The crate's message spans lines: its last says what is wrong.
                        let text = error.to_string();
                        let why = text.lines().last().unwrap_or_default().trim().to_string();
                        self.reject(&key, regex.span(), &quoted(regex.get_ref()), why);
                        return None;
                    }
                };
                let key = format!("{path}.path");
                let text = replacement.get_ref();
                let missing = missing_captures(&compiled, text);
                if !missing.is_empty() {
                    let groups = compiled.captures_len() - 1;
                    let why = format!(
                        "names {}, which path_regex does not capture (it has {groups} group{}; \
                         write ${{1}}a for group 1 then 'a')",
                        missing.join(", "),
                        if groups == 1 { "" } else { "s" }
                    );
                    self.reject(&key, replacement.span(), &quoted(text), why);
                } else if !is_target_text(text) {
                    let why = "a path holds no spaces or control characters";
                    self.reject(&key, replacement.span(), &quoted(text), why);
                }
                Some(Box::new(Rewrite::Regex {
                    pattern: PathPattern(compiled),
                    path: text.as_str().into(),
                }))
            }
            _ => {
                let message = format!(
                    "{path}: either path_prefix, or path_regex with path (not both): e.g. \
                     path_prefix = \"/v2/\", or path_regex = '^/user/(\\d+)$' with path = \
                     \"/users/$1\""
                );
                self.report(&path, Some(line), &message);
                None
            }
        }
    }
}

/// Text a header value may hold: no CR, LF or NUL.
fn is_field_value(text: &str) -> bool {
    !text.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0))
}

/// Text a request target may hold: visible ASCII and bytes beyond it, no space or control.
fn is_target_text(text: &str) -> bool {
    text.bytes().all(|b| b > b' ' && b != 0x7f)
}

#[cfg(test)]
mod tests {
    use crate::config::answers::{Rewrite, RouteAnswer};
    use crate::config::fixtures::{only_problem, MINIMAL};
    use crate::config::load::from_toml;

    fn with_route(route: &str) -> String {
        format!("{MINIMAL}\n[[route]]\npath_prefix = \"/old/\"\n{route}\n")
    }

    fn refusal(route: &str) -> (String, Option<usize>, String) {
        let problem = only_problem(&with_route(route));
        (problem.key, problem.line, problem.message)
    }

    #[test]
    fn a_redirect_needs_no_pool_and_defaults_to_302_keeping_the_query() {
        let text = with_route("[route.redirect]\nto = \"https://{host}/new/{path_rest}\"");
        let config = from_toml(&text, "t").unwrap();
        let route = &config.routes[0];
        assert_eq!(route.pool, None);
        let Some(RouteAnswer::Redirect(redirect)) = route.answer.as_deref() else {
            panic!("{:?}", route.answer);
        };
        assert_eq!((redirect.status, redirect.keep_query), (302, true));
    }

    #[test]
    fn a_bad_status_template_or_pool_beside_an_answer_is_refused_with_key_and_line() {
        let (key, line, message) = refusal("[route.redirect]\nstatus = 305\nto = \"/new/\"");
        assert_eq!((key.as_str(), line), ("route[0].redirect.status", Some(14)));
        assert!(
            message.starts_with("route[0].redirect.status = 305: "),
            "{message}"
        );
        let (key, _, message) = refusal("[route.redirect]\nto = \"https://{hots}/\"");
        assert_eq!(key, "route[0].redirect.to");
        assert!(message.contains("unknown variable {hots}"), "{message}");
        let (key, _, _) = refusal("[route.redirect]\nto = \"new\"");
        assert_eq!(key, "route[0].redirect.to");
        let (key, _, message) = refusal("pool = \"app\"\n[route.redirect]\nto = \"/new/\"");
        assert_eq!(key, "route[0].pool");
        assert!(message.contains("answers itself"), "{message}");
        let (key, _, _) = refusal("[route.respond]\nstatus = 199");
        assert_eq!(key, "route[0].respond.status");
        let (key, _, message) = refusal("[route.respond]\nstatus = 204\nbody = \"x\"");
        assert_eq!(key, "route[0].respond.body");
        assert!(message.contains("a 204 carries no body"), "{message}");
        let (key, _, message) =
            refusal("[route.respond]\nheaders = { \"Content-Length\" = \"3\" }");
        assert_eq!(key, "route[0].respond.headers.Content-Length");
        assert!(message.contains("framing or hop-by-hop"), "{message}");
    }

    #[test]
    fn a_table_only_a_pool_uses_on_a_route_that_answers_itself_is_a_warning() {
        let text = with_route("[route.respond]\nbody = \"x\"\n[route.cache]\nenabled = false");
        let config = from_toml(&text, "t").unwrap();
        assert_eq!(config.warnings.len(), 1, "{:#?}", config.warnings);
        let warning = &config.warnings[0];
        assert_eq!(
            (warning.key.as_str(), warning.line),
            ("route[0].cache", Some(15))
        );
        assert!(
            warning.message.contains("changes nothing"),
            "{}",
            warning.message
        );
        // Header rules too: herdsman's own answers take none.
        let text = with_route(
            "[route.redirect]\nto = \"/new/\"\n[route.headers.response]\nremove = [\"Server\"]",
        );
        let config = from_toml(&text, "t").unwrap();
        let keys: Vec<&str> = config.warnings.iter().map(|w| w.key.as_str()).collect();
        assert_eq!(keys, ["route[0].headers"]);
    }

    #[test]
    fn a_missing_body_file_is_refused_and_a_present_one_read() {
        let (key, line, message) =
            refusal("[route.respond]\nbody_file = \"/nonexistent/maintenance.html\"");
        assert_eq!(
            (key.as_str(), line),
            ("route[0].respond.body_file", Some(14))
        );
        assert!(message.contains("cannot read it"), "{message}");
        let dir = std::env::temp_dir().join(format!("herdsman-body-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("robots.txt");
        std::fs::write(&file, "User-agent: *\nDisallow: /\n").unwrap();
        let text = with_route(&format!(
            "[route.respond]\nbody_file = \"{}\"\nheaders = {{ \"Cache-Control\" = \"max-age=60\" }}",
            file.display()
        ));
        let config = from_toml(&text, "t").unwrap();
        let Some(RouteAnswer::Respond(fixed)) = config.routes[0].answer.as_deref() else {
            panic!();
        };
        assert_eq!(&*fixed.body, b"User-agent: *\nDisallow: /\n");
        assert_eq!(
            std::str::from_utf8(&fixed.head).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Cache-Control: max-age=60\r\n"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_rewrite_is_a_prefix_or_a_regex_naming_only_its_captures() {
        let text = with_route("pool = \"app\"\n[route.rewrite]\npath_prefix = \"/v2/\"");
        let config = from_toml(&text, "t").unwrap();
        assert_eq!(
            config.routes[0].rewrite.as_deref(),
            Some(&Rewrite::Prefix("/v2/".into()))
        );
        let (key, line, message) =
            refusal("pool = \"app\"\n[route.rewrite]\npath_regex = '^/user/(\\d+'\npath = \"/\"");
        assert_eq!(
            (key.as_str(), line),
            ("route[0].rewrite.path_regex", Some(15))
        );
        assert!(message.contains("unclosed group"), "{message}");
        let (key, _, message) = refusal(
            "pool = \"app\"\n[route.rewrite]\npath_regex = '^/user/(\\d+)$'\npath = \"/u/$2\"",
        );
        assert_eq!(key, "route[0].rewrite.path");
        assert!(message.contains("names $2"), "{message}");
        let (key, _, _) = refusal(
            "pool = \"app\"\n[route.rewrite]\npath_prefix = \"/\"\npath_regex = 'x'\npath = \"/\"",
        );
        assert_eq!(key, "route[0].rewrite");
        let (key, _, message) = refusal("[route.respond]\n[route.rewrite]\npath_prefix = \"/\"");
        assert_eq!(key, "route[0].rewrite");
        assert!(message.contains("answers itself"), "{message}");
    }
}
