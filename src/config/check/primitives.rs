//! The small checkers every table uses: names (and that they are unique), socket addresses,
//! integers in a range, durations, environment variable names and tokens.

use std::collections::hash_map::{Entry, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::time::Duration;

use toml::Spanned;

use super::{Checker, Table};
use crate::config::duration::{format_duration, parse_duration};
use crate::config::raw::Named;
use crate::config::ServerAddr;

/// Whether `name` may name a listener, pool or server: not empty, at most 255 bytes, made of
/// `[A-Za-z0-9_.-]` (so it can stand in a URL path of the admin API and a metric label as it is).
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Put in place of a refused address so checking can go on; never in a returned `Config`.
pub(super) const STAND_IN_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// Whether a zero duration means something for a key.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Zero {
    Allowed,
    Refused,
}

impl Checker {
    /// Checks each table of the array at `key` — `listener`, `pool`, a pool's `servers` — with
    /// `check`, then that no two of them share a name (`rule` says so in the message).
    pub(super) fn tables<R: Named, T>(
        &mut self,
        key: &str,
        raw: &[Spanned<R>],
        rule: &str,
        mut check: impl FnMut(&mut Self, &Table, &R) -> T,
    ) -> Vec<T> {
        let checked = raw
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                let table = Table {
                    path: format!("{key}[{index}]"),
                    line: self.lines.line_of(entry.span().start),
                };
                check(self, &table, entry.get_ref())
            })
            .collect();
        self.unique_names(key, raw, rule);
        checked
    }

    /// Reports each name in the array at `key` that equals an earlier one, pointing at where the
    /// earlier one is.
    pub(super) fn unique_names<R: Named>(&mut self, key: &str, raw: &[Spanned<R>], rule: &str) {
        let mut first_lines: HashMap<&str, usize> = HashMap::new();
        for (index, entry) in raw.iter().enumerate() {
            let Some(name) = entry.get_ref().name() else {
                continue;
            };
            let line = self.lines.line_of(name.span().start);
            match first_lines.entry(name.get_ref()) {
                Entry::Vacant(entry) => {
                    entry.insert(line);
                }
                Entry::Occupied(entry) => self.reject(
                    &format!("{key}[{index}].name"),
                    name.span(),
                    &quoted(name.get_ref()),
                    format!("duplicate; {rule} (first at line {})", entry.get()),
                ),
            }
        }
    }

    /// A required `name`: present, not empty, made of `[A-Za-z0-9_.-]` (so it can stand in a URL
    /// path of the admin API and a metric label as it is). Messages suggest `"example"`.
    pub(super) fn name(
        &mut self,
        table: &Table,
        raw: &Option<Spanned<String>>,
        example: &str,
    ) -> String {
        let how = format!(r#"write e.g. name = "{example}""#);
        let Some(name) = self.required(table, "name", raw, &how) else {
            return String::new();
        };
        let text = name.get_ref();
        let why = if text.is_empty() {
            "empty"
        } else if !is_valid_name(text) {
            "not a valid name"
        } else {
            return text.clone();
        };
        self.reject(
            &table.key("name"),
            name.span(),
            &quoted(text),
            format!(r#"{why}; use up to 255 letters, digits, '_', '.' and '-', e.g. "{example}""#),
        );
        text.clone()
    }

    /// A required address to bind (`bind`): port 0 is taken (the kernel picks one; tests rely on
    /// it); a server's address is [`Checker::server_addr`]'s. Messages suggest `"example"`;
    /// [`STAND_IN_ADDR`] when missing or refused.
    pub(super) fn socket_addr(
        &mut self,
        table: &Table,
        field: &str,
        raw: &Option<Spanned<String>>,
        example: &str,
    ) -> SocketAddr {
        let how = format!(r#"write e.g. {field} = "{example}""#);
        let Some(raw) = self.required(table, field, raw, &how) else {
            return STAND_IN_ADDR;
        };
        let text = raw.get_ref();
        let why = match text.parse::<SocketAddr>() {
            Ok(addr) => return addr,
            Err(_) => not_a_socket_address(text, example),
        };
        self.reject(&table.key(field), raw.span(), &quoted(text), why);
        STAND_IN_ADDR
    }

    /// A server's required address (`addr`): an IP address and port, or `unix:` and a socket's
    /// path. [`STAND_IN_ADDR`] when missing or refused.
    pub(super) fn server_addr(
        &mut self,
        table: &Table,
        raw: &Option<Spanned<String>>,
    ) -> ServerAddr {
        const EXAMPLE: &str = "127.0.0.1:9001";
        let how = format!(r#"write e.g. addr = "{EXAMPLE}" or addr = "unix:/run/app.sock""#);
        let Some(raw) = self.required(table, "addr", raw, &how) else {
            return STAND_IN_ADDR.into();
        };
        let text = raw.get_ref();
        let why = match ServerAddr::parse(text) {
            Some(Ok(addr)) => return addr,
            Some(Err(why)) => why,
            None => format!(
                r#"{} (or "unix:/run/app.sock" for a UNIX socket)"#,
                not_a_socket_address(text, EXAMPLE)
            ),
        };
        self.reject(&table.key("addr"), raw.span(), &quoted(text), why);
        STAND_IN_ADDR.into()
    }

    /// An optional integer within `range`; `default` when absent or refused.
    pub(super) fn integer<T: TryFrom<i64>>(
        &mut self,
        key: &str,
        raw: &Option<Spanned<i64>>,
        range: RangeInclusive<i64>,
        accepted: &str,
        default: T,
    ) -> T {
        let Some(raw) = raw else {
            return default;
        };
        let value = *raw.get_ref();
        if range.contains(&value) {
            // Every range passed here fits T, so this conversion cannot fail.
            return T::try_from(value).unwrap_or(default);
        }
        self.reject(
            key,
            raw.span(),
            &value.to_string(),
            format!("out of range; accepted: {accepted}"),
        );
        default
    }

    /// An optional size in bytes within `range`: a whole number of bytes, or a string with a
    /// binary unit (`"512KiB"`, `"256MiB"`, `"4GiB"`, `"1TiB"`; `B` for bytes). `default` when
    /// absent or refused.
    pub(super) fn size(
        &mut self,
        key: &str,
        raw: &Option<Spanned<toml::Value>>,
        range: RangeInclusive<u64>,
        accepted: &str,
        default: u64,
    ) -> u64 {
        let Some(raw) = raw else {
            return default;
        };
        let value = match raw.get_ref() {
            toml::Value::Integer(bytes) => u64::try_from(*bytes).ok(),
            toml::Value::String(text) => parse_size(text),
            _ => None,
        };
        let why = match value {
            Some(bytes) if range.contains(&bytes) => return bytes,
            Some(_) => "out of range",
            None => "not a size",
        };
        self.reject(
            key,
            raw.span(),
            &raw.get_ref().to_string(),
            format!("{why}; accepted: {accepted}"),
        );
        default
    }

    /// An optional `"auto"` or whole number in `range` (`what` names the number in a refusal):
    /// `None` when absent, written "auto", or refused (and reported).
    pub(super) fn auto_or_integer(
        &mut self,
        key: &str,
        raw: &Option<Spanned<toml::Value>>,
        range: RangeInclusive<i64>,
        (what, accepted): (&str, &str),
    ) -> Option<i64> {
        let raw = raw.as_ref()?;
        let why = match raw.get_ref() {
            toml::Value::String(word) if word == "auto" => return None,
            toml::Value::Integer(n) if range.contains(n) => return Some(*n),
            toml::Value::Integer(_) => "out of range".to_string(),
            _ => format!("not a number of {what}"),
        };
        self.reject(
            key,
            raw.span(),
            &raw.get_ref().to_string(),
            format!("{why}; accepted: {accepted}"),
        );
        None
    }

    /// An optional duration; `default` when absent or refused.
    pub(super) fn duration(
        &mut self,
        key: &str,
        raw: &Option<Spanned<String>>,
        default: Duration,
        zero: Zero,
    ) -> Duration {
        let Some(raw) = raw else {
            return default;
        };
        let why = match parse_duration(raw.get_ref()) {
            Ok(duration) if duration.is_zero() && zero == Zero::Refused => format!(
                r#"must be more than 0, e.g. "{}" (the default)"#,
                format_duration(default)
            ),
            Ok(duration) => return duration,
            Err(why) => why,
        };
        self.reject(key, raw.span(), &quoted(raw.get_ref()), why);
        default
    }

    /// A duration that means nothing is bounded unless written: above zero when written, `None`
    /// when absent. `example` shows a value; `absent` says what leaving it out means.
    pub(super) fn optional_duration(
        &mut self,
        key: &str,
        raw: &Option<Spanned<String>>,
        example: &str,
        absent: &str,
    ) -> Option<Duration> {
        let raw = raw.as_ref()?;
        let why = match parse_duration(raw.get_ref()) {
            Ok(duration) if duration.is_zero() => {
                format!(r#"must be more than 0, e.g. "{example}"; leave it out for {absent}"#)
            }
            Ok(duration) => return Some(duration),
            Err(why) => why,
        };
        self.reject(key, raw.span(), &quoted(raw.get_ref()), why);
        None
    }

    /// An optional environment variable's name (`token_env`, `key_env`).
    pub(super) fn env_name(
        &mut self,
        key: &str,
        raw: &Option<Spanned<String>>,
        example: &str,
    ) -> Option<String> {
        let name = raw.as_ref()?;
        let text = name.get_ref();
        let valid = text
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            let field = key.rsplit('.').next().unwrap_or(key);
            self.reject(
                key,
                name.span(),
                &quoted(text),
                format!(r#"not an environment variable name; write e.g. {field} = "{example}""#),
            );
        }
        Some(text.clone())
    }
}

/// An RFC 9110 token: a header field name, a cookie name.
pub(super) use crate::config::token::is_token;

/// A size with a binary unit: digits, optional spaces, then `B`, `KiB`, `MiB`, `GiB` or `TiB`
/// (the unit alone may be left out: bytes).
pub(super) fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let number: u64 = text[..digits].parse().ok()?;
    let shift = match text[digits..].trim_start() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        _ => return None,
    };
    number.checked_mul(1 << shift)
}

pub(super) fn quoted(text: &str) -> String {
    format!("{text:?}")
}

/// Why `text` is not a socket address, with the two mistakes worth naming: a host name (nothing
/// is looked up, so the address does not change under a running proxy) and a bare IPv6 address.
pub(super) fn not_a_socket_address(text: &str, example: &str) -> String {
    let port = example.rsplit(':').next().unwrap_or("80");
    let bare_ipv6 = text.parse::<Ipv6Addr>().is_ok()
        || (text.matches(':').count() > 1 && !text.starts_with('['));
    let host_name = text.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && port.parse::<u16>().is_ok() && host.parse::<IpAddr>().is_err()
    });
    if bare_ipv6 {
        format!(r#"not a socket address; put an IPv6 address in brackets, e.g. "[::1]:{port}""#)
    } else if host_name {
        format!(
            r#"not a socket address; host names are not looked up, write an IP address and port, e.g. "{example}""#
        )
    } else {
        format!(r#"not a socket address; write host:port, e.g. "{example}""#)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{addr, only_problem, problem, valid_with, MINIMAL};
    use crate::config::load::from_toml;

    #[test]
    fn an_address_without_a_port_is_named_with_key_line_and_example() {
        let text = valid_with("127.0.0.1:9002", "127.0.0.1");
        let found = only_problem(&text);
        assert_eq!(
            found,
            problem(
                "pool[0].servers[1].addr",
                34,
                r#"pool[0].servers[1].addr = "127.0.0.1": not a socket address; write host:port, e.g. "127.0.0.1:9001" (or "unix:/run/app.sock" for a UNIX socket)"#
            )
        );
        assert_eq!(
            found.to_string(),
            r#"line 34: pool[0].servers[1].addr = "127.0.0.1": not a socket address; write host:port, e.g. "127.0.0.1:9001" (or "unix:/run/app.sock" for a UNIX socket)"#
        );
    }

    #[test]
    fn host_names_and_bare_ipv6_get_their_own_hint() {
        let host = only_problem(&valid_with("127.0.0.1:8080", "localhost:8080"));
        assert_eq!(host.key, "listener[0].bind");
        assert_eq!(host.line, Some(8));
        assert!(
            host.message.ends_with(
                r#"host names are not looked up, write an IP address and port, e.g. "127.0.0.1:8080""#
            ),
            "{}",
            host.message
        );
        let ipv6 = only_problem(&valid_with("[::1]:0", "::1:8080"));
        assert_eq!(
            ipv6.message,
            r#"listener[1].bind = "::1:8080": not a socket address; put an IPv6 address in brackets, e.g. "[::1]:8080""#
        );
    }

    #[test]
    fn a_server_on_port_zero_is_refused_but_a_listener_may_bind_it() {
        let found = only_problem(&valid_with("10.0.0.7:80", "10.0.0.7:0"));
        assert_eq!(found.key, "pool[1].servers[0].addr");
        assert_eq!(found.line, Some(40));
        assert!(found.message.contains("port 0 cannot be connected to"));
        let config = from_toml(&MINIMAL.replace("127.0.0.1:8080", "127.0.0.1:0"), "t").unwrap();
        assert_eq!(config.listeners[0].bind, addr("127.0.0.1:0"));
    }

    #[test]
    fn a_duplicate_pool_name_points_at_the_first() {
        // MINIMAL names its pool "app" on line 8; the second pool begins on line 11, its name on 12.
        let text = format!(
            r#"{MINIMAL}
[[pool]]
name = "app"
servers = [{{ name = "b", addr = "127.0.0.1:9002" }}]
"#
        );
        assert_eq!(
            only_problem(&text),
            problem(
                "pool[1].name",
                12,
                r#"pool[1].name = "app": duplicate; pool names must be unique (first at line 8)"#
            )
        );
    }

    #[test]
    fn duplicate_listener_and_server_names_are_refused() {
        let listener = only_problem(&valid_with(r#"name = "internal""#, r#"name = "web""#));
        assert_eq!(
            listener,
            problem(
                "listener[1].name",
                13,
                r#"listener[1].name = "web": duplicate; listener names must be unique (first at line 7)"#
            )
        );
        let server = only_problem(&valid_with(r#"{ name = "b""#, r#"{ name = "a""#));
        assert_eq!(
            server,
            problem(
                "pool[0].servers[1].name",
                34,
                r#"pool[0].servers[1].name = "a": duplicate; server names must be unique within a pool (first at line 33)"#
            )
        );
        // The same server name in two pools is two different servers.
        assert!(from_toml(&valid_with(r#"name = "x""#, r#"name = "a""#), "t").is_ok());
    }

    #[test]
    fn bad_names_are_refused() {
        let spaced = only_problem(&valid_with(r#"name = "internal""#, r#"name = "in ternal""#));
        assert_eq!(
            spaced,
            problem(
                "listener[1].name",
                13,
                r#"listener[1].name = "in ternal": not a valid name; use up to 255 letters, digits, '_', '.' and '-', e.g. "web""#
            )
        );
        let empty = only_problem(&valid_with(r#"name = "x""#, r#"name = """#));
        assert_eq!(empty.key, "pool[1].servers[0].name");
        assert!(
            empty.message.contains(r#"= "": empty;"#),
            "{}",
            empty.message
        );
    }

    #[test]
    fn numbers_out_of_range_say_what_is_accepted() {
        let cases = [
            ("backlog = 1024", "backlog = 0", "listener[0].backlog = 0: out of range; accepted: 1 to 65535 (default 4096)"),
            ("backlog = 1024", "defer_accept = \"2h\"", r#"listener[0].defer_accept = "2h": at most "1h"; a client's first bytes come within a second or two"#),
            ("weight = 2", "weight = 257", "pool[0].servers[1].weight = 257: out of range; accepted: 0 to 256 (default 1; 0 takes no new requests)"),
            ("max_header_bytes = 16384", "max_header_bytes = 100", "limits.max_header_bytes = 100: out of range; accepted: 1024 to 1048576 (default 65536)"),
            ("max_body_bytes = 1048576", "max_body_bytes = -1", "limits.max_body_bytes = -1: out of range; accepted: 0 (no limit, the default) or a number of bytes"),
            ("max_idle_per_server = 8", "max_idle_per_server = 70000", r#"limits.max_idle_per_server = 70000: out of range; accepted: "auto" (the default: as many as recent use calls for) or a number from 0 to 65535"#),
            ("max_idle_per_server = 8", r#"max_idle_per_server = "many""#, r#"limits.max_idle_per_server = "many": not a number of connections; accepted: "auto" (the default: as many as recent use calls for) or a number from 0 to 65535"#),
            ("workers = 3", "workers = 1025", r#"workers = 1025: out of range; accepted: "auto" or a number from 1 to 1024"#),
            ("workers = 3", r#"workers = "4""#, r#"workers = "4": not a number of workers; accepted: "auto" or a number from 1 to 1024"#),
        ];
        for (from, to, message) in cases {
            assert_eq!(only_problem(&valid_with(from, to)).message, message);
        }
    }

    #[test]
    fn bad_durations_are_named_and_zero_is_only_allowed_for_the_grace() {
        assert_eq!(
            only_problem(&valid_with(r#""45s""#, r#""1.5s""#)),
            problem(
                "timeouts.backend_response",
                21,
                r#"timeouts.backend_response = "1.5s": no fractions; use a smaller unit, e.g. "1500ms" for 1.5 seconds; write a number and a unit, e.g. "2s" or "150ms""#
            )
        );
        assert_eq!(
            only_problem(&valid_with(r#""3500ms""#, r#""0ms""#)).message,
            r#"timeouts.backend_idle = "0ms": must be more than 0, e.g. "4s" (the default)"#
        );
        let grace = from_toml(&valid_with(r#""15s""#, r#""0s""#), "t").unwrap();
        assert_eq!(grace.shutdown_grace, Duration::ZERO);
        let grace = only_problem(&valid_with(r#""15s""#, r#""15 s""#));
        assert_eq!(
            (grace.key.as_str(), grace.line),
            ("shutdown_grace", Some(4))
        );
    }
}
