//! Turning TOML text into a validated [`Config`], the problems that name key, line and fix, and
//! the summary `herdsman check` prints.
//!
//! Two passes. The toml crate reads the text into the structs of `raw.rs`, refusing bad syntax,
//! wrong types and unknown keys; it stops at the first. Then [`Checker`] holds every value to its
//! rule and keeps going, so one `herdsman check` shows everything there is to fix.

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::ops::{Range, RangeInclusive};
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::duration::{format_duration, parse_duration};
use super::raw::{self, RawConfig, RawLimits, RawListener, RawPool, RawServer, RawTimeouts};
use super::{
    Balance, Config, IntakeMode, Limits, ListenerConfig, PoolConfig, ServerConfig, Timeouts,
};

/// Why a configuration was refused: every problem found, and where the text came from.
#[derive(Debug)]
pub struct ConfigError {
    /// The file's path, or a name such as "<demo>" for text that was not read from a file.
    pub origin: String,
    /// At least one, in the order of their lines; problems with no line come last.
    pub problems: Vec<ConfigProblem>,
}

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigProblem {
    /// The dotted key path: `listener[0].bind`, `pool[1].servers[2].addr`, `timeouts.connect`.
    /// Empty when there is no key to name (a syntax error, an unreadable file).
    pub key: String,
    /// 1-based line in the text, when the problem is at one place.
    pub line: Option<usize>,
    /// The whole sentence, complete without `key`: the key, the value when there is one, what is
    /// wrong and what would be accepted —
    /// `pool[0].balance = "fastest": unknown; accepted: round-robin, least-conn, p2c, random`.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.problems.len();
        let plural = if count == 1 { "" } else { "s" };
        write!(f, "{}: {count} problem{plural}", self.origin)?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Most worker threads accepted; also the cap on "auto".
const MAX_WORKERS: i64 = 1024;
/// `intake` when not written: the only mode so far.
const DEFAULT_INTAKE: IntakeMode = IntakeMode::ReusePort;
/// `shutdown_grace` when not written (see `Config::shutdown_grace`).
const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// `backlog` when not written (see `ListenerConfig::backlog`).
const DEFAULT_BACKLOG: u32 = 4096;
/// A server's `weight` when not written (see `ServerConfig::weight`).
const DEFAULT_WEIGHT: u32 = 1;
/// A pool's `balance` when not written.
const DEFAULT_BALANCE: Balance = Balance::RoundRobin;

/// The words `intake` accepts. DESIGN.md names more modes; those are refused as "not available
/// yet" rather than "unknown", so a reader of the design is not told they misspelt them.
const INTAKE_MODES: [(&str, IntakeMode); 1] = [("reuseport", IntakeMode::ReusePort)];
const INTAKE_MODES_PLANNED: [&str; 3] = ["exclusive", "shared", "balanced"];
const BALANCES: [(&str, Balance); 4] = [
    ("round-robin", Balance::RoundRobin),
    ("least-conn", Balance::LeastConn),
    ("p2c", Balance::P2c),
    ("random", Balance::Random),
];
const BALANCES_PLANNED: [&str; 1] = ["hash"];

const SERVERS_EXAMPLE: &str = r#"servers = [{ name = "a", addr = "127.0.0.1:9001" }]"#;

/// Parses and validates `text`; `origin` names it in the error.
pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let refuse = |problems| ConfigError {
        origin: origin.to_string(),
        problems,
    };
    let raw: RawConfig =
        toml::from_str(text).map_err(|error| refuse(vec![problem_from_toml(text, &error)]))?;
    let mut checker = Checker {
        text,
        problems: Vec::new(),
    };
    let config = checker.config(&raw);
    if checker.problems.is_empty() {
        return Ok(config);
    }
    checker
        .problems
        .sort_by_key(|problem| problem.line.unwrap_or(usize::MAX));
    Err(refuse(checker.problems))
}

/// Reads and validates a config file. A file that cannot be read is one problem with no key.
pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => from_toml(&text, &origin),
        Err(error) => Err(ConfigError {
            origin,
            problems: vec![ConfigProblem {
                key: String::new(),
                line: None,
                message: format!("cannot read the file: {error}"),
            }],
        }),
    }
}

/// What `herdsman check` prints for a valid config: workers, then each listener and pool, and
/// each pool's servers, one line each.
pub fn summary(config: &Config) -> String {
    let intake = INTAKE_MODES
        .iter()
        .find(|(_, mode)| *mode == config.intake)
        .map_or("?", |(word, _)| word);
    let mut lines = vec![format!("workers: {} (intake {intake})", config.workers)];
    for listener in &config.listeners {
        let pool = config
            .pools
            .get(listener.pool)
            .map_or("?", |pool| pool.name.as_str());
        lines.push(format!(
            "listener {}  {}  backlog {}  → pool {pool}",
            listener.name, listener.bind, listener.backlog
        ));
    }
    for pool in &config.pools {
        let balance = BALANCES
            .iter()
            .find(|(_, balance)| *balance == pool.balance)
            .map_or("?", |(word, _)| word);
        let count = pool.servers.len();
        let plural = if count == 1 { "" } else { "s" };
        lines.push(format!(
            "pool {}  {balance}  {count} server{plural}",
            pool.name
        ));
        for server in &pool.servers {
            lines.push(format!(
                "  server {}  {}  weight {}",
                server.name, server.addr, server.weight
            ));
        }
    }
    lines.join("\n")
}

/// The toml crate's error as one problem: its message kept (for an unknown key it already lists
/// the accepted ones), its span turned into a line and, where the text parses, a key path.
fn problem_from_toml(text: &str, error: &toml::de::Error) -> ConfigProblem {
    let span = error.span();
    let key = span
        .clone()
        .and_then(|span| raw::key_path_at(text, span))
        .unwrap_or_default();
    // Syntax messages run over several lines ("invalid table header\nexpected `.`, `]]`").
    let what = error
        .message()
        .trim()
        .lines()
        .collect::<Vec<_>>()
        .join("; ");
    let message = if key.is_empty() {
        what
    } else {
        format!("{key}: {what}")
    };
    ConfigProblem {
        key,
        line: span.map(|span| line_of(text, span.start)),
        message,
    }
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    let before = &text.as_bytes()[..offset.min(text.len())];
    before.iter().filter(|&&byte| byte == b'\n').count() + 1
}

fn quoted(text: &str) -> String {
    format!("{text:?}")
}

/// Whether a zero duration means something for a key.
#[derive(Clone, Copy, PartialEq)]
enum Zero {
    Allowed,
    Refused,
}

/// Whether a socket address may have port 0: a listener may (the kernel picks one; tests rely on
/// it), a server may not (nothing can be connected to there).
#[derive(Clone, Copy, PartialEq)]
enum PortZero {
    Allowed,
    Refused,
}

/// Holds each raw value to its rule, recording every problem instead of stopping at the first.
///
/// Each check returns a value even when it refuses one (a default or a stand-in such as
/// `0.0.0.0:0`) so that checking goes on; the `Config` built from stand-ins is thrown away
/// whenever a problem was recorded.
struct Checker<'a> {
    text: &'a str,
    problems: Vec<ConfigProblem>,
}

impl Checker<'_> {
    fn config(&mut self, raw: &RawConfig) -> Config {
        let workers = self.workers(raw.workers.as_ref());
        let intake = raw
            .intake
            .as_ref()
            .and_then(|intake| self.word("intake", intake, &INTAKE_MODES, &INTAKE_MODES_PLANNED))
            .unwrap_or(DEFAULT_INTAKE);
        let shutdown_grace = self.duration(
            "shutdown_grace",
            raw.shutdown_grace.as_ref(),
            DEFAULT_SHUTDOWN_GRACE,
            Zero::Allowed,
        );
        let timeouts = self.timeouts(&raw.timeouts);
        let limits = self.limits(&raw.limits);

        if raw.listener.is_empty() {
            self.report(
                "listener",
                None,
                "listener: none defined; add a [[listener]] with a name, bind and pool",
            );
        }
        let listeners = raw
            .listener
            .iter()
            .enumerate()
            .map(|(index, listener)| self.listener(index, listener, &raw.pool))
            .collect();
        self.unique(
            raw.listener
                .iter()
                .enumerate()
                .filter_map(|(index, listener)| {
                    Some((
                        format!("listener[{index}].name"),
                        listener.get_ref().name.as_ref()?,
                    ))
                }),
            "listener names must be unique",
        );

        if raw.pool.is_empty() {
            self.report(
                "pool",
                None,
                "pool: none defined; add a [[pool]] with a name and servers",
            );
        }
        let pools = raw
            .pool
            .iter()
            .enumerate()
            .map(|(index, pool)| self.pool(index, pool))
            .collect();
        self.unique(
            raw.pool.iter().enumerate().filter_map(|(index, pool)| {
                Some((format!("pool[{index}].name"), pool.get_ref().name.as_ref()?))
            }),
            "pool names must be unique",
        );

        Config {
            workers,
            intake,
            shutdown_grace,
            listeners,
            timeouts,
            limits,
            pools,
        }
    }

    fn workers(&mut self, raw: Option<&Spanned<toml::Value>>) -> usize {
        let Some(raw) = raw else {
            return auto_workers();
        };
        let why = match raw.get_ref() {
            toml::Value::String(word) if word == "auto" => return auto_workers(),
            toml::Value::Integer(count) if (1..=MAX_WORKERS).contains(count) => {
                return usize::try_from(*count).unwrap_or(1);
            }
            toml::Value::Integer(_) => "out of range",
            _ => "not a number of workers",
        };
        self.reject(
            "workers",
            raw.span(),
            &raw.get_ref().to_string(),
            format!(r#"{why}; accepted: "auto" or a number from 1 to {MAX_WORKERS}"#),
        );
        1
    }

    fn timeouts(&mut self, raw: &RawTimeouts) -> Timeouts {
        let default = Timeouts::default();
        let mut timeout = |key, value: &Option<Spanned<String>>, default| {
            self.duration(key, value.as_ref(), default, Zero::Refused)
        };
        Timeouts {
            connect: timeout("timeouts.connect", &raw.connect, default.connect),
            client_header: timeout(
                "timeouts.client_header",
                &raw.client_header,
                default.client_header,
            ),
            client_idle: timeout(
                "timeouts.client_idle",
                &raw.client_idle,
                default.client_idle,
            ),
            backend_response: timeout(
                "timeouts.backend_response",
                &raw.backend_response,
                default.backend_response,
            ),
            backend_idle: timeout(
                "timeouts.backend_idle",
                &raw.backend_idle,
                default.backend_idle,
            ),
        }
    }

    fn limits(&mut self, raw: &RawLimits) -> Limits {
        let default = Limits::default();
        Limits {
            max_header_bytes: self
                .integer(
                    "limits.max_header_bytes",
                    raw.max_header_bytes.as_ref(),
                    1024..=1_048_576,
                    "1024 to 1048576 (default 65536)",
                )
                .unwrap_or(default.max_header_bytes),
            max_body_bytes: self
                .integer(
                    "limits.max_body_bytes",
                    raw.max_body_bytes.as_ref(),
                    0..=i64::MAX,
                    "0 (no limit, the default) or a number of bytes",
                )
                .unwrap_or(default.max_body_bytes),
            max_idle_per_server: self
                .integer(
                    "limits.max_idle_per_server",
                    raw.max_idle_per_server.as_ref(),
                    0..=4096,
                    "0 to 4096 (default 64)",
                )
                .unwrap_or(default.max_idle_per_server),
        }
    }

    fn listener(
        &mut self,
        index: usize,
        raw: &Spanned<RawListener>,
        pools: &[Spanned<RawPool>],
    ) -> ListenerConfig {
        let key = format!("listener[{index}]");
        let table_line = line_of(self.text, raw.span().start);
        let listener = raw.get_ref();
        let name = self.name(
            &format!("{key}.name"),
            listener.name.as_ref(),
            table_line,
            r#""web""#,
        );
        let bind = match &listener.bind {
            Some(bind) => self.socket_addr(
                &format!("{key}.bind"),
                bind,
                "127.0.0.1:8080",
                PortZero::Allowed,
            ),
            None => {
                self.missing(
                    &format!("{key}.bind"),
                    table_line,
                    r#"write e.g. bind = "127.0.0.1:8080""#,
                );
                None
            }
        };
        let backlog = self
            .integer(
                &format!("{key}.backlog"),
                listener.backlog.as_ref(),
                1..=65535,
                "1 to 65535 (default 4096)",
            )
            .unwrap_or(DEFAULT_BACKLOG);
        let pool = match &listener.pool {
            Some(pool) => self.pool_index(&format!("{key}.pool"), pool, pools),
            None => {
                self.missing(
                    &format!("{key}.pool"),
                    table_line,
                    r#"write the name of a [[pool]], e.g. pool = "app""#,
                );
                None
            }
        };
        ListenerConfig {
            name,
            bind: bind.unwrap_or(STAND_IN_ADDR),
            backlog,
            pool: pool.unwrap_or(0),
        }
    }

    /// The index in `pools` of the first pool named `reference`.
    fn pool_index(
        &mut self,
        key: &str,
        reference: &Spanned<String>,
        pools: &[Spanned<RawPool>],
    ) -> Option<usize> {
        let named = |pool: &Spanned<RawPool>| pool.get_ref().name.clone().map(Spanned::into_inner);
        // A position in `pools`, not among the named ones: a pool missing its name must not
        // shift the indexes.
        let found = pools
            .iter()
            .position(|pool| named(pool).as_ref() == Some(reference.get_ref()));
        if found.is_none() {
            let defined = pools
                .iter()
                .filter_map(named)
                .collect::<Vec<_>>()
                .join(", ");
            let defined = if defined.is_empty() { "none" } else { &defined };
            self.reject(
                key,
                reference.span(),
                &quoted(reference.get_ref()),
                format!("no such pool; defined pools: {defined}"),
            );
        }
        found
    }

    fn pool(&mut self, index: usize, raw: &Spanned<RawPool>) -> PoolConfig {
        let key = format!("pool[{index}]");
        let table_line = line_of(self.text, raw.span().start);
        let pool = raw.get_ref();
        let name = self.name(
            &format!("{key}.name"),
            pool.name.as_ref(),
            table_line,
            r#""app""#,
        );
        let balance = pool
            .balance
            .as_ref()
            .and_then(|balance| {
                self.word(
                    &format!("{key}.balance"),
                    balance,
                    &BALANCES,
                    &BALANCES_PLANNED,
                )
            })
            .unwrap_or(DEFAULT_BALANCE);
        let servers_key = format!("{key}.servers");
        let servers = match &pool.servers {
            None => {
                self.missing(
                    &servers_key,
                    table_line,
                    &format!("a pool needs at least one server, e.g. {SERVERS_EXAMPLE}"),
                );
                Vec::new()
            }
            Some(servers) if servers.get_ref().is_empty() => {
                self.reject(
                    &servers_key,
                    servers.span(),
                    "[]",
                    format!("empty; a pool needs at least one server, e.g. {SERVERS_EXAMPLE}"),
                );
                Vec::new()
            }
            Some(servers) => {
                let servers = servers.get_ref();
                let checked = servers
                    .iter()
                    .enumerate()
                    .map(|(index, server)| self.server(&format!("{servers_key}[{index}]"), server))
                    .collect();
                self.unique(
                    servers.iter().enumerate().filter_map(|(index, server)| {
                        let name = server.get_ref().name.as_ref()?;
                        Some((format!("{servers_key}[{index}].name"), name))
                    }),
                    "server names must be unique within a pool",
                );
                checked
            }
        };
        PoolConfig {
            name,
            balance,
            servers,
        }
    }

    fn server(&mut self, key: &str, raw: &Spanned<RawServer>) -> ServerConfig {
        let table_line = line_of(self.text, raw.span().start);
        let server = raw.get_ref();
        let name = self.name(
            &format!("{key}.name"),
            server.name.as_ref(),
            table_line,
            r#""a""#,
        );
        let addr = match &server.addr {
            Some(addr) => self.socket_addr(
                &format!("{key}.addr"),
                addr,
                "127.0.0.1:9001",
                PortZero::Refused,
            ),
            None => {
                self.missing(
                    &format!("{key}.addr"),
                    table_line,
                    r#"write e.g. addr = "127.0.0.1:9001""#,
                );
                None
            }
        };
        let weight = self
            .integer(
                &format!("{key}.weight"),
                server.weight.as_ref(),
                0..=256,
                "0 to 256 (default 1; 0 takes no new requests)",
            )
            .unwrap_or(DEFAULT_WEIGHT);
        ServerConfig {
            name,
            addr: addr.unwrap_or(STAND_IN_ADDR),
            weight,
        }
    }

    /// A required name: present, not empty, made of `[A-Za-z0-9_.-]` (so it can stand in a URL
    /// path of the admin API and a metric label as it is).
    fn name(
        &mut self,
        key: &str,
        raw: Option<&Spanned<String>>,
        table_line: usize,
        example: &str,
    ) -> String {
        let Some(name) = raw else {
            self.missing(key, table_line, &format!("write e.g. name = {example}"));
            return String::new();
        };
        let text = name.get_ref();
        let is_name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        let why = if text.is_empty() {
            "empty"
        } else if !text.chars().all(is_name_char) {
            "not a valid name"
        } else {
            return text.clone();
        };
        self.reject(
            key,
            name.span(),
            &quoted(text),
            format!("{why}; use letters, digits, '_', '.' and '-', e.g. {example}"),
        );
        text.clone()
    }

    /// Reports each name equal to an earlier one, pointing at where the earlier one is.
    fn unique<'r>(
        &mut self,
        names: impl Iterator<Item = (String, &'r Spanned<String>)>,
        rule: &str,
    ) {
        let mut first_lines: HashMap<&str, usize> = HashMap::new();
        for (key, name) in names {
            let line = line_of(self.text, name.span().start);
            match first_lines.entry(name.get_ref()) {
                Entry::Vacant(entry) => {
                    entry.insert(line);
                }
                Entry::Occupied(entry) => self.reject(
                    &key,
                    name.span(),
                    &quoted(name.get_ref()),
                    format!("duplicate; {rule} (first at line {})", entry.get()),
                ),
            }
        }
    }

    /// One of the words in `accepted`.
    fn word<T: Copy>(
        &mut self,
        key: &str,
        raw: &Spanned<String>,
        accepted: &[(&str, T)],
        planned: &[&str],
    ) -> Option<T> {
        let text = raw.get_ref().as_str();
        if let Some((_, value)) = accepted.iter().find(|(word, _)| *word == text) {
            return Some(*value);
        }
        let why = if planned.contains(&text) {
            "not available yet"
        } else {
            "unknown"
        };
        let words = accepted
            .iter()
            .map(|(word, _)| *word)
            .collect::<Vec<_>>()
            .join(", ");
        self.reject(
            key,
            raw.span(),
            &quoted(text),
            format!("{why}; accepted: {words}"),
        );
        None
    }

    /// An optional integer within `range`; `None` when absent or refused (the caller's default).
    fn integer<T: TryFrom<i64>>(
        &mut self,
        key: &str,
        raw: Option<&Spanned<i64>>,
        range: RangeInclusive<i64>,
        accepted: &str,
    ) -> Option<T> {
        let raw = raw?;
        let value = *raw.get_ref();
        if range.contains(&value) {
            // Every range passed here fits T, so this conversion cannot fail.
            return T::try_from(value).ok();
        }
        self.reject(
            key,
            raw.span(),
            &value.to_string(),
            format!("out of range; accepted: {accepted}"),
        );
        None
    }

    /// An optional duration; `default` when absent or refused.
    fn duration(
        &mut self,
        key: &str,
        raw: Option<&Spanned<String>>,
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

    fn socket_addr(
        &mut self,
        key: &str,
        raw: &Spanned<String>,
        example: &str,
        port_zero: PortZero,
    ) -> Option<SocketAddr> {
        let text = raw.get_ref();
        let why = match text.parse::<SocketAddr>() {
            Ok(addr) if addr.port() == 0 && port_zero == PortZero::Refused => {
                format!(
                    r#"port 0 cannot be connected to; write the server's port, e.g. "{example}""#
                )
            }
            Ok(addr) => return Some(addr),
            Err(_) => not_a_socket_address(text, example),
        };
        self.reject(key, raw.span(), &quoted(text), why);
        None
    }

    /// Records `key = value: why`.
    fn reject(&mut self, key: &str, span: Range<usize>, value: &str, why: impl fmt::Display) {
        let line = line_of(self.text, span.start);
        self.report(key, Some(line), &format!("{key} = {value}: {why}"));
    }

    /// Records `key: missing; how` at the line of the table that lacks the key.
    fn missing(&mut self, key: &str, table_line: usize, how: &str) {
        self.report(key, Some(table_line), &format!("{key}: missing; {how}"));
    }

    fn report(&mut self, key: &str, line: Option<usize>, message: &str) {
        self.problems.push(ConfigProblem {
            key: key.to_string(),
            line,
            message: message.to_string(),
        });
    }
}

/// Put in place of a refused address so checking can go on; never in a returned `Config`.
const STAND_IN_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// "auto": the CPUs this process may run on (1 if that cannot be known), at most [`MAX_WORKERS`].
fn auto_workers() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    cpus.min(usize::try_from(MAX_WORKERS).unwrap_or(usize::MAX))
}

/// Why `text` is not a socket address, with the two mistakes worth naming: a host name (nothing
/// is looked up, so the address does not change under a running proxy) and a bare IPv6 address.
fn not_a_socket_address(text: &str, example: &str) -> String {
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

    /// Line numbers below count from this text's first line, which is empty.
    const VALID: &str = r#"
workers = 3
intake = "reuseport"
shutdown_grace = "15s"

[[listener]]
name = "web"
bind = "127.0.0.1:8080"
backlog = 1024
pool = "app"

[[listener]]
name = "internal"
bind = "[::1]:0"
pool = "api"

[timeouts]
connect = "1s"
client_header = "5s"
client_idle = "2m"
backend_response = "45s"
backend_idle = "3500ms"

[limits]
max_header_bytes = 16384
max_body_bytes = 1048576
max_idle_per_server = 8

[[pool]]
name = "app"
balance = "least-conn"
servers = [
  { name = "a", addr = "127.0.0.1:9001" },
  { name = "b", addr = "127.0.0.1:9002", weight = 2 },
]

[[pool]]
name = "api"
balance = "p2c"
servers = [{ name = "x", addr = "10.0.0.7:80", weight = 0 }]
"#;

    /// The smallest config: one listener, one pool of one server.
    const MINIMAL: &str = r#"
[[listener]]
name = "web"
bind = "127.0.0.1:8080"
pool = "app"

[[pool]]
name = "app"
servers = [{ name = "a", addr = "127.0.0.1:9001" }]
"#;

    fn problems(text: &str) -> Vec<ConfigProblem> {
        match from_toml(text, "test.toml") {
            Ok(config) => panic!("accepted: {config:#?}"),
            Err(error) => error.problems,
        }
    }

    fn only_problem(text: &str) -> ConfigProblem {
        let mut problems = problems(text);
        assert_eq!(problems.len(), 1, "{problems:#?}");
        problems.remove(0)
    }

    fn problem(key: &str, line: usize, message: &str) -> ConfigProblem {
        ConfigProblem {
            key: key.to_string(),
            line: Some(line),
            message: message.to_string(),
        }
    }

    /// `VALID` with one piece of text replaced, which must occur exactly once.
    fn valid_with(from: &str, to: &str) -> String {
        assert_eq!(VALID.matches(from).count(), 1, "{from}");
        VALID.replace(from, to)
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_full_config_becomes_exactly_that_config() {
        let config = from_toml(VALID, "test.toml").unwrap();
        let expected = Config {
            workers: 3,
            intake: IntakeMode::ReusePort,
            shutdown_grace: Duration::from_secs(15),
            listeners: vec![
                ListenerConfig {
                    name: "web".into(),
                    bind: addr("127.0.0.1:8080"),
                    backlog: 1024,
                    pool: 0,
                },
                ListenerConfig {
                    name: "internal".into(),
                    bind: addr("[::1]:0"),
                    backlog: 4096,
                    pool: 1,
                },
            ],
            timeouts: Timeouts {
                connect: Duration::from_secs(1),
                client_header: Duration::from_secs(5),
                client_idle: Duration::from_secs(120),
                backend_response: Duration::from_secs(45),
                backend_idle: Duration::from_millis(3500),
            },
            limits: Limits {
                max_header_bytes: 16384,
                max_body_bytes: 1_048_576,
                max_idle_per_server: 8,
            },
            pools: vec![
                PoolConfig {
                    name: "app".into(),
                    balance: Balance::LeastConn,
                    servers: vec![
                        ServerConfig {
                            name: "a".into(),
                            addr: addr("127.0.0.1:9001"),
                            weight: 1,
                        },
                        ServerConfig {
                            name: "b".into(),
                            addr: addr("127.0.0.1:9002"),
                            weight: 2,
                        },
                    ],
                },
                PoolConfig {
                    name: "api".into(),
                    balance: Balance::P2c,
                    servers: vec![ServerConfig {
                        name: "x".into(),
                        addr: addr("10.0.0.7:80"),
                        weight: 0,
                    }],
                },
            ],
        };
        assert_eq!(config, expected);
    }

    #[test]
    fn unwritten_keys_take_their_defaults() {
        let config = from_toml(MINIMAL, "test.toml").unwrap();
        assert_eq!(config.workers, auto_workers());
        assert!(config.workers >= 1);
        assert_eq!(config.intake, IntakeMode::ReusePort);
        assert_eq!(config.shutdown_grace, Duration::from_secs(10));
        assert_eq!(config.listeners[0].backlog, 4096);
        assert_eq!(config.timeouts, Timeouts::default());
        assert_eq!(config.limits, Limits::default());
        assert_eq!(config.pools[0].balance, Balance::RoundRobin);
        assert_eq!(config.pools[0].servers[0].weight, 1);
    }

    #[test]
    fn workers_auto_is_the_cpu_count() {
        let text = format!("workers = \"auto\"\n{MINIMAL}");
        let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(from_toml(&text, "t").unwrap().workers, cpus.min(1024));
    }

    #[test]
    fn an_address_without_a_port_is_named_with_key_line_and_example() {
        let text = valid_with("127.0.0.1:9002", "127.0.0.1");
        let found = only_problem(&text);
        assert_eq!(
            found,
            problem(
                "pool[0].servers[1].addr",
                34,
                r#"pool[0].servers[1].addr = "127.0.0.1": not a socket address; write host:port, e.g. "127.0.0.1:9001""#
            )
        );
        assert_eq!(
            found.to_string(),
            r#"line 34: pool[0].servers[1].addr = "127.0.0.1": not a socket address; write host:port, e.g. "127.0.0.1:9001""#
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
        let text = r#"
[[listener]]
name = "web"
bind = "127.0.0.1:8080"
pool = "app"

[[pool]]
name = "app"
servers = [{ name = "a", addr = "127.0.0.1:9001" }]

[[pool]]
name = "app"
servers = [{ name = "b", addr = "127.0.0.1:9002" }]
"#;
        assert_eq!(
            only_problem(text),
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
    fn a_listener_naming_a_missing_pool_lists_the_defined_ones() {
        assert_eq!(
            only_problem(&valid_with(r#"pool = "app""#, r#"pool = "nope""#)),
            problem(
                "listener[0].pool",
                10,
                r#"listener[0].pool = "nope": no such pool; defined pools: app, api"#
            )
        );
    }

    #[test]
    fn an_unknown_balance_lists_the_accepted_ones() {
        assert_eq!(
            only_problem(&valid_with(r#""least-conn""#, r#""fastest""#)),
            problem(
                "pool[0].balance",
                31,
                r#"pool[0].balance = "fastest": unknown; accepted: round-robin, least-conn, p2c, random"#
            )
        );
        let planned = only_problem(&valid_with(r#""p2c""#, r#""hash""#));
        assert_eq!(
            planned.message,
            r#"pool[1].balance = "hash": not available yet; accepted: round-robin, least-conn, p2c, random"#
        );
    }

    #[test]
    fn only_the_reuseport_intake_exists_yet() {
        assert_eq!(
            only_problem(&valid_with(r#""reuseport""#, r#""balanced""#)),
            problem(
                "intake",
                3,
                r#"intake = "balanced": not available yet; accepted: reuseport"#
            )
        );
        let unknown = only_problem(&valid_with(r#""reuseport""#, r#""fair""#));
        assert_eq!(
            unknown.message,
            r#"intake = "fair": unknown; accepted: reuseport"#
        );
    }

    #[test]
    fn every_problem_is_reported_at_once_in_line_order() {
        let text = valid_with("127.0.0.1:9002", "127.0.0.1")
            .replace(r#"name = "api""#, r#"name = "app""#)
            .replace(r#"connect = "1s""#, r#"connect = "1""#)
            .replace("workers = 3", "workers = 0");
        let found = problems(&text);
        let summary: Vec<_> = found
            .iter()
            .map(|problem| (problem.key.as_str(), problem.line))
            .collect();
        assert_eq!(
            summary,
            [
                ("workers", Some(2)),
                ("listener[1].pool", Some(15)),
                ("timeouts.connect", Some(18)),
                ("pool[0].servers[1].addr", Some(34)),
                ("pool[1].name", Some(38)),
            ]
        );
        assert_eq!(
            found[0].message,
            r#"workers = 0: out of range; accepted: "auto" or a number from 1 to 1024"#
        );
        assert_eq!(
            found[1].message,
            r#"listener[1].pool = "api": no such pool; defined pools: app, app"#
        );
        assert_eq!(
            found[2].message,
            r#"timeouts.connect = "1": no unit; write a number and a unit, e.g. "2s" or "150ms""#
        );
    }

    #[test]
    fn an_unknown_key_is_named_with_its_table_and_line() {
        let text = valid_with(r#"connect = "1s""#, r#"conect = "1s""#);
        let found = only_problem(&text);
        assert_eq!(found.key, "timeouts.conect");
        assert_eq!(found.line, Some(18));
        assert!(
            found
                .message
                .starts_with("timeouts.conect: unknown field `conect`, expected one of `connect`"),
            "{}",
            found.message
        );
    }

    #[test]
    fn keys_of_later_issues_are_refused_as_unknown_for_now() {
        for (table, line) in [("[admin]", 42), ("[log]", 42), ("[[route]]", 42)] {
            let text = format!("{VALID}\n{table}\npool = \"app\"\n");
            let found = only_problem(&text);
            assert_eq!(found.line, Some(line), "{table}");
            assert!(found.message.contains("unknown field"), "{}", found.message);
        }
        let sticky = format!("{VALID}\n[pool.sticky]\ncookie = \"HERDSMAN\"\n");
        let found = only_problem(&sticky);
        assert_eq!(found.key, "pool[1].sticky");
        assert!(found.message.contains("unknown field `sticky`"));
    }

    #[test]
    fn an_unknown_key_in_a_server_is_indexed() {
        let found = only_problem(&valid_with("weight = 2", "wieght = 2"));
        assert_eq!(found.key, "pool[0].servers[1].wieght");
        assert_eq!(found.line, Some(34));
        assert!(
            found
                .message
                .contains("unknown field `wieght`, expected one of `name`, `addr`, `weight`"),
            "{}",
            found.message
        );
    }

    #[test]
    fn a_wrong_type_is_named_with_its_key() {
        let found = only_problem(&valid_with(r#"bind = "127.0.0.1:8080""#, "bind = 8080"));
        assert_eq!(found.key, "listener[0].bind");
        assert_eq!(found.line, Some(8));
        assert_eq!(
            found.message,
            "listener[0].bind: invalid type: integer `8080`, expected a string"
        );
    }

    #[test]
    fn a_syntax_error_has_a_line_and_no_key() {
        let found = only_problem(&valid_with(
            "[[listener]]\nname = \"internal\"",
            "[[listener]\nname = \"internal\"",
        ));
        assert_eq!(found.key, "");
        assert_eq!(found.line, Some(12));
        assert!(!found.message.contains('\n'), "{}", found.message);
        assert!(
            found.message.starts_with("invalid table header"),
            "{}",
            found.message
        );
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

    #[test]
    fn numbers_out_of_range_say_what_is_accepted() {
        let cases = [
            ("backlog = 1024", "backlog = 0", "listener[0].backlog = 0: out of range; accepted: 1 to 65535 (default 4096)"),
            ("weight = 2", "weight = 257", "pool[0].servers[1].weight = 257: out of range; accepted: 0 to 256 (default 1; 0 takes no new requests)"),
            ("max_header_bytes = 16384", "max_header_bytes = 100", "limits.max_header_bytes = 100: out of range; accepted: 1024 to 1048576 (default 65536)"),
            ("max_body_bytes = 1048576", "max_body_bytes = -1", "limits.max_body_bytes = -1: out of range; accepted: 0 (no limit, the default) or a number of bytes"),
            ("max_idle_per_server = 8", "max_idle_per_server = 5000", "limits.max_idle_per_server = 5000: out of range; accepted: 0 to 4096 (default 64)"),
            ("workers = 3", "workers = 1025", r#"workers = 1025: out of range; accepted: "auto" or a number from 1 to 1024"#),
            ("workers = 3", r#"workers = "4""#, r#"workers = "4": not a number of workers; accepted: "auto" or a number from 1 to 1024"#),
        ];
        for (from, to, message) in cases {
            assert_eq!(only_problem(&valid_with(from, to)).message, message);
        }
    }

    #[test]
    fn bad_names_are_refused() {
        let spaced = only_problem(&valid_with(r#"name = "internal""#, r#"name = "in ternal""#));
        assert_eq!(
            spaced,
            problem(
                "listener[1].name",
                13,
                r#"listener[1].name = "in ternal": not a valid name; use letters, digits, '_', '.' and '-', e.g. "web""#
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
    fn missing_keys_are_reported_at_their_table() {
        let text = r#"
[[listener]]
name = "web"

[[pool]]
name = "app"
servers = [{ addr = "127.0.0.1:9001" }, { name = "b" }]

[[pool]]
servers = []
"#;
        assert_eq!(
            problems(text),
            [
                problem(
                    "listener[0].bind",
                    2,
                    r#"listener[0].bind: missing; write e.g. bind = "127.0.0.1:8080""#
                ),
                problem(
                    "listener[0].pool",
                    2,
                    r#"listener[0].pool: missing; write the name of a [[pool]], e.g. pool = "app""#
                ),
                problem(
                    "pool[0].servers[0].name",
                    7,
                    r#"pool[0].servers[0].name: missing; write e.g. name = "a""#
                ),
                problem(
                    "pool[0].servers[1].addr",
                    7,
                    r#"pool[0].servers[1].addr: missing; write e.g. addr = "127.0.0.1:9001""#
                ),
                problem(
                    "pool[1].name",
                    9,
                    r#"pool[1].name: missing; write e.g. name = "app""#
                ),
                problem(
                    "pool[1].servers",
                    10,
                    r#"pool[1].servers = []: empty; a pool needs at least one server, e.g. servers = [{ name = "a", addr = "127.0.0.1:9001" }]"#
                ),
            ]
        );
    }

    #[test]
    fn no_listener_and_no_pool_are_both_reported() {
        let found = problems("workers = 1\n");
        let expected = [
            ConfigProblem {
                key: "listener".into(),
                line: None,
                message: "listener: none defined; add a [[listener]] with a name, bind and pool"
                    .into(),
            },
            ConfigProblem {
                key: "pool".into(),
                line: None,
                message: "pool: none defined; add a [[pool]] with a name and servers".into(),
            },
        ];
        assert_eq!(found, expected);
        assert_eq!(problems("").len(), 2);
    }

    #[test]
    fn a_pool_without_servers_is_refused() {
        let text = MINIMAL.replace(r#"servers = [{ name = "a", addr = "127.0.0.1:9001" }]"#, "");
        assert_eq!(
            only_problem(&text),
            problem(
                "pool[0].servers",
                7,
                r#"pool[0].servers: missing; a pool needs at least one server, e.g. servers = [{ name = "a", addr = "127.0.0.1:9001" }]"#
            )
        );
    }

    #[test]
    fn the_error_names_its_origin_and_lists_each_problem_indented() {
        let text = valid_with("127.0.0.1:9002", "127.0.0.1").replace("workers = 3", "workers = 0");
        let error = from_toml(&text, "/etc/herdsman.toml").unwrap_err();
        assert_eq!(
            error.to_string(),
            "/etc/herdsman.toml: 2 problems\n  \
             line 2: workers = 0: out of range; accepted: \"auto\" or a number from 1 to 1024\n  \
             line 34: pool[0].servers[1].addr = \"127.0.0.1\": not a socket address; write host:port, e.g. \"127.0.0.1:9001\""
        );
        let one = from_toml("", "<demo>").unwrap_err();
        assert!(one
            .to_string()
            .starts_with("<demo>: 2 problems\n  listener: none defined"));
    }

    #[test]
    fn a_missing_file_is_one_problem_with_the_os_error() {
        let path = Path::new("/nonexistent/herdsman.toml");
        let error = from_file(path).unwrap_err();
        assert_eq!(error.origin, "/nonexistent/herdsman.toml");
        assert_eq!(error.problems.len(), 1);
        assert_eq!(error.problems[0].key, "");
        assert_eq!(error.problems[0].line, None);
        assert!(error.problems[0]
            .message
            .starts_with("cannot read the file: No such file or directory"));
        assert!(error
            .to_string()
            .starts_with("/nonexistent/herdsman.toml: 1 problem\n  cannot read the file:"));
    }

    #[test]
    fn a_file_on_disk_is_read_and_validated() {
        let path =
            std::env::temp_dir().join(format!("herdsman-config-{}.toml", std::process::id()));
        std::fs::write(&path, VALID).unwrap();
        let loaded = from_file(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(loaded.unwrap(), from_toml(VALID, "t").unwrap());
    }

    #[test]
    fn the_summary_has_one_line_per_listener_pool_and_server() {
        let config = from_toml(&valid_with("balance = \"least-conn\"\n", ""), "t").unwrap();
        assert_eq!(
            summary(&config),
            "workers: 3 (intake reuseport)\n\
             listener web  127.0.0.1:8080  backlog 1024  → pool app\n\
             listener internal  [::1]:0  backlog 4096  → pool api\n\
             pool app  round-robin  2 servers\n  \
             server a  127.0.0.1:9001  weight 1\n  \
             server b  127.0.0.1:9002  weight 2\n\
             pool api  p2c  1 server\n  \
             server x  10.0.0.7:80  weight 0"
        );
    }

    #[test]
    fn the_example_file_is_valid_and_uses_every_key() {
        let example = include_str!("../../examples/herdsman.toml");
        let config = from_toml(example, "examples/herdsman.toml").unwrap();
        assert_eq!(config.listeners.len(), 2);
        assert_eq!(config.pools.len(), 2);
        for key in [
            "workers",
            "intake",
            "shutdown_grace",
            "[[listener]]",
            "name",
            "bind",
            "backlog",
            "pool",
            "[timeouts]",
            "connect",
            "client_header",
            "client_idle",
            "backend_response",
            "backend_idle",
            "[limits]",
            "max_header_bytes",
            "max_body_bytes",
            "max_idle_per_server",
            "[[pool]]",
            "balance",
            "servers",
            "addr",
            "weight",
        ] {
            let written = example
                .lines()
                .filter(|line| !line.trim_start().starts_with('#'))
                .any(|line| line.contains(key));
            assert!(written, "the example does not use {key}");
        }
    }
}
