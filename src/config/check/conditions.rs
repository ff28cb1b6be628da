//! A route's `when`: the inline table read into a [`Condition`], its regexes compiled and its
//! address lists merged here, once. A problem names the key inside it (`route[2].when.any[1].matches`)
//! and the line `when` stands on.

use toml::{Spanned, Value};

use super::primitives::quoted;
use super::Checker;
use crate::config::cidr::AddressSet;
use crate::config::condition::{Condition, FieldTest, Pattern};

/// The kinds of condition, one per table: what a problem lists as accepted.
const KINDS: &str = "method, header, query, cookie, client, all, any, not";
/// The tests of a header, query parameter or cookie.
const TESTS: &str = "present, equals, prefix, matches";
/// A regex's compiled size at most (the `regex` crate's default is 10 MiB per regex): a condition
/// is a small pattern, and thousands of routes may carry one.
pub(super) const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl Checker {
    /// `when` at `key` (`route[3].when`); `None` after recording a problem.
    pub(super) fn condition(&mut self, key: &str, raw: &Spanned<Value>) -> Option<Condition> {
        let span = raw.span();
        let mut problem = None;
        let condition = read(key, raw.get_ref(), &mut problem);
        if let Some((key, value, why)) = problem {
            self.reject(&key, span, &value, why);
            return None;
        }
        condition
    }
}

/// The first problem found: its key, the value as written, and why.
type Problem = Option<(String, String, String)>;

/// Reads one condition table at `key`; records the first problem in `problem` and stops there.
fn read(key: &str, value: &Value, problem: &mut Problem) -> Option<Condition> {
    let mut refuse = |key: String, value: &Value, why: &str| {
        problem.get_or_insert((key, shown(value), why.to_string()));
        None
    };
    let Value::Table(table) = value else {
        return refuse(
            key.to_string(),
            value,
            &format!("a condition is a table with one of: {KINDS}; e.g. {{ method = [\"GET\"] }}"),
        );
    };
    let kinds: Vec<&String> = table
        .keys()
        .filter(|name| KINDS.split(", ").any(|kind| kind == name.as_str()))
        .collect();
    let [kind] = kinds[..] else {
        let why = if kinds.is_empty() {
            format!("names no condition; use one of: {KINDS}")
        } else {
            format!(
                "has {} conditions; combine them with all = [...] or any = [...]",
                kinds.len()
            )
        };
        return refuse(key.to_string(), value, &why);
    };
    let at = format!("{key}.{kind}");
    let inner = &table[kind.as_str()];
    match kind.as_str() {
        "header" | "query" | "cookie" => {
            let Value::String(name) = inner else {
                return refuse(at, inner, "the name of the field, as a string");
            };
            if name.is_empty() {
                return refuse(at, inner, "empty; write the field's name");
            }
            let test = field_test(key, table, kind, problem)?;
            Some(match kind.as_str() {
                "header" => Condition::Header(name.to_ascii_lowercase().into(), test),
                "query" => Condition::Query(name.as_str().into(), test),
                _ => Condition::Cookie(name.as_str().into(), test),
            })
        }
        other => {
            if let Some(extra) = table.keys().find(|name| *name != kind) {
                let why = format!("unknown here ({other} takes no other key)");
                return refuse(format!("{key}.{extra}"), &table[extra.as_str()], &why);
            }
            match other {
                "method" => {
                    let methods = strings(inner)
                        .filter(|list| !list.is_empty() && list.iter().all(|m| is_method(m)));
                    let Some(methods) = methods else {
                        return refuse(
                            at,
                            inner,
                            "a list of methods in capitals, e.g. [\"GET\", \"HEAD\"]",
                        );
                    };
                    Some(Condition::Method(
                        methods.into_iter().map(Into::into).collect(),
                    ))
                }
                "client" => {
                    let Some(entries) = strings(inner) else {
                        return refuse(
                            at,
                            inner,
                            "a list of addresses and networks, e.g. [\"10.0.0.0/8\", \"::1\"]",
                        );
                    };
                    match AddressSet::parse(entries.iter().copied()) {
                        Ok(set) => Some(Condition::Client(set)),
                        Err(why) => {
                            let bad = entries
                                .iter()
                                .find(|entry| AddressSet::parse([**entry]).is_err())
                                .copied()
                                .unwrap_or_default();
                            let why = format!("{}: {why}", quoted(bad));
                            refuse(at, inner, &why)
                        }
                    }
                }
                "all" | "any" => {
                    let Value::Array(items) = inner else {
                        return refuse(at, inner, "a list of conditions");
                    };
                    if items.is_empty() {
                        return refuse(at, inner, "empty; list at least one condition");
                    }
                    let mut conditions = Vec::with_capacity(items.len());
                    for (index, item) in items.iter().enumerate() {
                        conditions.push(read(&format!("{at}[{index}]"), item, problem)?);
                    }
                    let conditions = conditions.into_boxed_slice();
                    Some(if other == "all" {
                        Condition::All(conditions)
                    } else {
                        Condition::Any(conditions)
                    })
                }
                _ => read(&at, inner, problem).map(|not| Condition::Not(Box::new(not))),
            }
        }
    }
}

/// The one test beside `header`, `query` or `cookie` in `table` at `key`.
fn field_test(
    key: &str,
    table: &toml::Table,
    kind: &str,
    problem: &mut Problem,
) -> Option<FieldTest> {
    let mut refuse = |key: String, value: &Value, why: &str| {
        problem.get_or_insert((key, shown(value), why.to_string()));
        None
    };
    let mut tests = table.iter().filter(|(name, _)| *name != kind);
    let Some((test, value)) = tests.next() else {
        let why = format!("{kind} needs one test beside it: {TESTS}");
        return refuse(key.to_string(), &Value::Table(table.clone()), &why);
    };
    if let Some((extra, extra_value)) = tests.next() {
        let why =
            format!("one test per condition ({test} is given already); combine with all = [...]");
        return refuse(format!("{key}.{extra}"), extra_value, &why);
    }
    let at = format!("{key}.{test}");
    match (test.as_str(), value) {
        ("present", Value::Boolean(present)) => Some(FieldTest::Present(*present)),
        ("equals", Value::String(text)) => Some(FieldTest::Equals(text.as_bytes().into())),
        ("prefix", Value::String(text)) => Some(FieldTest::Prefix(text.as_bytes().into())),
        ("matches", Value::String(text)) => {
            let compiled = regex::bytes::RegexBuilder::new(text)
                .size_limit(REGEX_SIZE_LIMIT)
                .build();
            match compiled {
                Ok(regex) => Some(FieldTest::Matches(Pattern(regex))),
                Err(error) => {
                    // The crate's message spans lines (the pattern, a caret, the error): its last
                    // line says what is wrong.
                    let text = error.to_string();
                    let why = text.lines().last().unwrap_or_default().trim();
                    refuse(at, value, &format!("not a regex: {why}"))
                }
            }
        }
        ("present", _) => refuse(at, value, "true or false"),
        ("equals" | "prefix" | "matches", _) => refuse(at, value, "a string"),
        _ => refuse(at, value, &format!("unknown test; accepted: {TESTS}")),
    }
}

/// A list of strings, if `value` is one.
fn strings(value: &Value) -> Option<Vec<&str>> {
    let Value::Array(items) = value else {
        return None;
    };
    items.iter().map(Value::as_str).collect()
}

/// A method token as a request line carries it, in capitals (methods are case-sensitive).
fn is_method(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
}

/// A value as a problem shows it: a string quoted, anything else as TOML writes it inline.
fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => quoted(text),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::condition::{Condition, FieldTest};
    use crate::config::fixtures::{only_problem, VALID};
    use crate::config::load::from_toml;

    /// VALID with one more route, to the pool `app`, carrying `when`.
    fn with_when(when: &str) -> String {
        format!("{VALID}[[route]]\npath_prefix = \"/w/\"\npool = \"app\"\nwhen = {when}\n")
    }

    #[test]
    fn conditions_of_every_kind_are_read() {
        let text = with_when(
            r#"{ all = [ { method = ["GET", "HEAD"] }, { header = "X-Beta", equals = "1" }, { not = { client = ["10.0.0.0/8"] } }, { any = [ { query = "v", prefix = "2" }, { cookie = "s", matches = "^a+$" }, { header = "x-a", present = false } ] } ] }"#,
        );
        let config = from_toml(&text, "t").unwrap();
        let Some(Condition::All(all)) = config.routes.last().unwrap().when.as_deref() else {
            panic!("{:?}", config.routes.last());
        };
        assert_eq!(all.len(), 4);
        assert_eq!(
            all[0],
            Condition::Method(["GET".into(), "HEAD".into()].into())
        );
        // Header names are matched without regard to case: kept lowercase.
        assert_eq!(
            all[1],
            Condition::Header("x-beta".into(), FieldTest::Equals((*b"1").into()))
        );
        assert!(
            matches!(&all[2], Condition::Not(inner) if matches!(**inner, Condition::Client(_)))
        );
        assert!(matches!(&all[3], Condition::Any(any) if any.len() == 3));
    }

    #[test]
    fn a_bad_condition_is_refused_with_its_key_and_line() {
        let line = VALID.lines().count() + 4;
        let cases = [
            (
                r#"{ header = "x", matches = "a(" }"#,
                "route[2].when.matches",
                "not a regex",
            ),
            (
                r#"{ client = ["10.0.0.0/33"] }"#,
                "route[2].when.client",
                "\"10.0.0.0/33\": the prefix length",
            ),
            (
                r#"{ client = ["office"] }"#,
                "route[2].when.client",
                "not an IP address",
            ),
            (
                r#"{ method = ["get"] }"#,
                "route[2].when.method",
                "in capitals",
            ),
            (
                r#"{ colour = "red" }"#,
                "route[2].when",
                "names no condition",
            ),
            (
                r#"{ method = ["GET"], client = ["::1"] }"#,
                "route[2].when",
                "has 2 conditions",
            ),
            (r#"{ header = "x" }"#, "route[2].when", "needs one test"),
            (
                r#"{ header = "x", equals = "a", prefix = "b" }"#,
                "route[2].when.prefix",
                "one test per condition",
            ),
            (
                r#"{ cookie = "x", present = "yes" }"#,
                "route[2].when.present",
                "true or false",
            ),
            (
                r#"{ any = [{ method = ["GET"] }, { query = "q", like = "x" }] }"#,
                "route[2].when.any[1].like",
                "unknown test",
            ),
            (
                r#"{ not = { method = ["GET"], extra = 1 } }"#,
                "route[2].when.not.extra",
                "takes no other key",
            ),
            (r#"{ all = [] }"#, "route[2].when.all", "empty"),
        ];
        for (when, key, why) in cases {
            let problem = only_problem(&with_when(when));
            assert_eq!(problem.key, key, "{when}: {problem}");
            assert_eq!(problem.line, Some(line), "{when}: {problem}");
            assert!(problem.message.contains(why), "{when}: {problem}");
        }
    }
}
