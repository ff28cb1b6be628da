//! Holding the raw structs of `raw.rs` to their rules and building the [`Config`] from them: every
//! value checked, every problem recorded with its key, line and fix, and checking goes on past each
//! one, so one `herdsman check` shows everything there is to fix.

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::ops::{Range, RangeInclusive};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use super::duration::{format_duration, parse_duration};
use super::load::{line_of, ConfigProblem};
use super::raw::{
    Named, RawAdmin, RawConfig, RawHealth, RawLimits, RawListener, RawLog, RawPassive, RawPool,
    RawRoute, RawServer, RawSticky, RawTimeouts,
};
use super::{
    AccessLogConfig, AccessLogFormat, AdminSettings, AdminSocket, Balance, Config,
    ExchangeTimeouts, HashKey, HealthCheck, HealthKind, HostPattern, IntakeMode, Limits,
    ListenerConfig, LogLevel, LogSettings, Passive, PoolConfig, RetryCondition, RetryOn,
    RouteConfig, ServerConfig, ServerState, StickyConfig, Timeouts, UpgradeProtocols,
    STANDARD_OUTPUT,
};
use crate::http1::upgrade;

/// Most worker threads accepted; also the cap on "auto".
const MAX_WORKERS: i64 = 1024;
/// `shutdown_grace` when not written (see `Config::shutdown_grace`).
const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// `backlog` when not written (see `ListenerConfig::backlog`).
const DEFAULT_BACKLOG: u32 = 4096;
/// A listener's `upgrade` when not written: WebSocket, the upgrade browsers make, and the one
/// herdsman was built to tunnel (see `ListenerConfig::upgrade`).
const DEFAULT_UPGRADE: [&str; 1] = ["websocket"];
/// A server's `weight` when not written (see `ServerConfig::weight`).
const DEFAULT_WEIGHT: u32 = 1;

/// Ends the message for a pool whose `servers` is missing or empty.
const NEED_A_SERVER: &str =
    r#"a pool needs at least one server, e.g. servers = [{ name = "a", addr = "127.0.0.1:9001" }]"#;

/// The words a key accepts, each with the value it stands for.
pub(super) struct Words<T: 'static> {
    accepted: &'static [(&'static str, T)],
    /// The value when the key is not written.
    default: T,
}

impl<T: Copy + PartialEq> Words<T> {
    /// The word that stands for `value`, as `herdsman check` prints it.
    pub(super) fn word_for(&self, value: T) -> &'static str {
        self.accepted
            .iter()
            .find(|(_, candidate)| *candidate == value)
            .map_or("?", |(word, _)| *word)
    }

    /// Every accepted word, in the table's order.
    pub(super) fn words(&self) -> impl Iterator<Item = &'static str> {
        self.accepted.iter().map(|(word, _)| *word)
    }

    /// The value `word` stands for, if it is one of the accepted words.
    pub(super) fn value_of(&self, word: &str) -> Option<T> {
        self.accepted
            .iter()
            .find(|(candidate, _)| *candidate == word)
            .map(|(_, value)| *value)
    }
}

/// `intake`: how new connections reach workers.
pub(super) const INTAKE_MODES: Words<IntakeMode> = Words {
    accepted: &[
        ("balanced", IntakeMode::Balanced),
        ("reuseport", IntakeMode::ReusePort),
        ("exclusive", IntakeMode::Exclusive),
        ("shared", IntakeMode::Shared),
    ],
    // No herd and a spread by load; see src/intake/handoff.rs.
    default: IntakeMode::Balanced,
};

/// A pool's `balance`.
pub(super) const BALANCES: Words<Balance> = Words {
    accepted: &[
        ("round-robin", Balance::RoundRobin),
        ("least-conn", Balance::LeastConn),
        ("p2c", Balance::P2c),
        ("random", Balance::Random),
        ("hash", Balance::Hash),
    ],
    default: Balance::RoundRobin,
};

/// A server's `state`.
pub(super) const SERVER_STATES: Words<ServerState> = Words {
    accepted: &[
        ("ready", ServerState::Ready),
        ("drain", ServerState::Drain),
        ("maint", ServerState::Maint),
        ("test", ServerState::Test),
    ],
    default: ServerState::Ready,
};

/// A listener's `access_log_format`.
pub(super) const ACCESS_LOG_FORMATS: Words<AccessLogFormat> = Words {
    accepted: &[
        ("combined", AccessLogFormat::Combined),
        ("json", AccessLogFormat::Json),
    ],
    // What nginx and Apache write, and what log analysers read first.
    default: AccessLogFormat::Combined,
};

/// The conditions a pool's `retry_on` may list (beside 5xx statuses).
pub(super) const RETRY_CONDITIONS: Words<RetryCondition> = Words {
    accepted: &[
        ("connect-failure", RetryCondition::ConnectFailure),
        ("empty-response", RetryCondition::EmptyResponse),
        ("reset-before-response", RetryCondition::ResetBeforeResponse),
        ("response-timeout", RetryCondition::ResponseTimeout),
    ],
    // Unused: `retry_on` is a list, whose default is `RetryOn::default()`.
    default: RetryCondition::ConnectFailure,
};

/// `[log] level`.
pub(super) const LOG_LEVELS: Words<LogLevel> = Words {
    accepted: &[
        ("error", LogLevel::Error),
        ("warn", LogLevel::Warn),
        ("info", LogLevel::Info),
        ("debug", LogLevel::Debug),
        ("trace", LogLevel::Trace),
    ],
    // Starts, stops, reloads, listeners and server state changes; not one line per request.
    default: LogLevel::Info,
};

/// `[pool.sticky] cookie` when not written.
const DEFAULT_STICKY_COOKIE: &str = "HERDSMAN";

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
const STAND_IN_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// Checks `raw`, read from `text`: the `Config`, or every problem found, in the order found.
pub(super) fn check(text: &str, raw: &RawConfig) -> Result<Config, Vec<ConfigProblem>> {
    let mut checker = Checker {
        text,
        problems: Vec::new(),
    };
    let config = checker.config(raw);
    if checker.problems.is_empty() {
        Ok(config)
    } else {
        Err(checker.problems)
    }
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

/// One table being checked — a listener, a pool, a server — as its problems name it.
struct Table {
    /// Its key path: `listener[0]`, `pool[1].servers[2]`.
    path: String,
    /// The line it starts at, where a key missing from it is reported.
    line: usize,
}

impl Table {
    /// The key path of one of its keys: `listener[0].bind`.
    fn key(&self, field: &str) -> String {
        format!("{}.{field}", self.path)
    }
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
        let workers = self.workers(&raw.workers);
        let intake = self.word("intake", &raw.intake, &INTAKE_MODES);
        let shutdown_grace = self.duration(
            "shutdown_grace",
            &raw.shutdown_grace,
            DEFAULT_SHUTDOWN_GRACE,
            Zero::Allowed,
        );
        let hard_stop_after = self.optional_duration(
            "hard_stop_after",
            &raw.hard_stop_after,
            "30m",
            "no limit (the default)",
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
        let listeners = self.tables(
            "listener",
            &raw.listener,
            "listener names must be unique",
            |checker, table, listener| checker.listener(table, listener, &raw.pool),
        );
        self.one_format_per_access_log(&raw.listener, &listeners);

        if raw.pool.is_empty() {
            self.report(
                "pool",
                None,
                "pool: none defined; add a [[pool]] with a name and servers",
            );
        }
        let routes = raw
            .route
            .iter()
            .enumerate()
            .map(|(index, route)| {
                let table = Table {
                    path: format!("route[{index}]"),
                    line: line_of(self.text, route.span().start),
                };
                self.route(&table, route.get_ref(), &raw.pool, &timeouts)
            })
            .collect();
        let pools = self.tables("pool", &raw.pool, "pool names must be unique", Self::pool);
        self.unique_sticky_cookies(&raw.pool, &pools);
        let admin = raw.admin.as_ref().map(|admin| self.admin(admin));
        let log = self.log(&raw.log);

        Config {
            workers,
            intake,
            shutdown_grace,
            hard_stop_after,
            listeners,
            timeouts,
            limits,
            routes,
            pools,
            admin,
            log,
        }
    }

    fn log(&mut self, raw: &RawLog) -> LogSettings {
        LogSettings {
            level: self.word("log.level", &raw.level, &LOG_LEVELS),
        }
    }

    fn route(
        &mut self,
        table: &Table,
        route: &RawRoute,
        pools: &[Spanned<RawPool>],
        timeouts: &Timeouts,
    ) -> RouteConfig {
        let host = route.host.as_ref().map(|raw| {
            let text = raw.get_ref().to_ascii_lowercase();
            let (pattern, name) = match text.strip_prefix("*.") {
                Some(rest) => (HostPattern::Subdomains(format!(".{rest}")), rest),
                None => (HostPattern::Exact(text.clone()), text.as_str()),
            };
            let is_host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.');
            let why = if name.is_empty() {
                Some("empty; write e.g. host = \"api.example.com\" or \"*.example.com\"")
            } else if name.contains(':') {
                Some("a host name without a port (a request's port is ignored when matching)")
            } else if !name.chars().all(is_host_char) {
                Some("not a host name; write e.g. \"api.example.com\", or \"*.example.com\" for every name under it")
            } else {
                None
            };
            if let Some(why) = why {
                self.reject(&table.key("host"), raw.span(), &quoted(raw.get_ref()), why);
            }
            pattern
        });
        let path_prefix = route.path_prefix.as_ref().map(|raw| {
            let text = raw.get_ref();
            if !text.starts_with('/') {
                self.reject(
                    &table.key("path_prefix"),
                    raw.span(),
                    &quoted(text),
                    "must start with '/', e.g. path_prefix = \"/api/\"",
                );
            }
            text.clone()
        });
        let global = timeouts.exchange();
        let timeouts = match &route.timeouts {
            Some(raw) => {
                let path = table.key("timeouts");
                let raw = raw.get_ref();
                let key = |field: &str| format!("{path}.{field}");
                ExchangeTimeouts {
                    backend_response: self.duration(
                        &key("backend_response"),
                        &raw.backend_response,
                        global.backend_response,
                        Zero::Refused,
                    ),
                    backend_read: self.duration(
                        &key("backend_read"),
                        &raw.backend_read,
                        global.backend_read,
                        Zero::Refused,
                    ),
                    request: self
                        .optional_duration(&key("request"), &raw.request, "30s", "[timeouts]' own")
                        .or(global.request),
                }
            }
            None => global,
        };
        RouteConfig {
            host,
            path_prefix,
            pool: self.pool_index(table, &route.pool, pools),
            timeouts,
        }
    }

    fn admin(&mut self, raw: &Spanned<RawAdmin>) -> AdminSettings {
        let table = Table {
            path: "admin".to_string(),
            line: line_of(self.text, raw.span().start),
        };
        let admin = raw.get_ref();
        // `bind` is required unless the API is on a socket only.
        let bind = (admin.bind.is_some() || admin.socket.is_none()).then(|| {
            self.socket_addr(
                &table,
                "bind",
                &admin.bind,
                "127.0.0.1:9900",
                PortZero::Allowed,
            )
        });
        let socket = admin.socket.as_ref().map(|path| AdminSocket {
            path: self.socket_path(&table.key("socket"), path),
            mode: self.file_mode(&table.key("socket_mode"), &admin.socket_mode),
            owner: self.account(&table.key("socket_owner"), &admin.socket_owner),
            group: self.account(&table.key("socket_group"), &admin.socket_group),
        });
        if socket.is_none() {
            for key in ["socket_mode", "socket_owner", "socket_group"] {
                let present = match key {
                    "socket_mode" => &admin.socket_mode,
                    "socket_owner" => &admin.socket_owner,
                    _ => &admin.socket_group,
                };
                if let Some(raw) = present {
                    self.reject(
                        &table.key(key),
                        raw.span(),
                        &quoted(raw.get_ref()),
                        r#"applies to a socket: set socket = "/run/herdsman/admin.sock" too"#,
                    );
                }
            }
        }
        let allowed_hosts = self.allowed_hosts(&table.key("allowed_hosts"), &admin.allowed_hosts);
        let token_env = self.env_name(
            &table.key("token_env"),
            &admin.token_env,
            "HERDSMAN_ADMIN_TOKEN",
        );
        AdminSettings {
            bind,
            socket,
            allowed_hosts,
            token_env,
        }
    }

    /// `[admin] socket`: an absolute path.
    fn socket_path(&mut self, key: &str, raw: &Spanned<String>) -> std::path::PathBuf {
        let path = std::path::PathBuf::from(raw.get_ref());
        if !path.is_absolute() || raw.get_ref().ends_with('/') {
            self.reject(
                key,
                raw.span(),
                &quoted(raw.get_ref()),
                r#"not an absolute file path; write e.g. socket = "/run/herdsman/admin.sock""#,
            );
        }
        path
    }

    /// `[admin] socket_mode`: octal permission bits, default 0600.
    fn file_mode(&mut self, key: &str, raw: &Option<Spanned<String>>) -> u32 {
        const DEFAULT: u32 = 0o600;
        let Some(raw) = raw else {
            return DEFAULT;
        };
        let text = raw.get_ref();
        match u32::from_str_radix(text, 8) {
            Ok(mode) if mode <= 0o777 && !text.is_empty() => mode,
            _ => {
                self.reject(
                    key,
                    raw.span(),
                    &quoted(text),
                    r#"not a file mode; write octal permission bits, e.g. "0600" (the default) or "0660" for the socket's group too"#,
                );
                DEFAULT
            }
        }
    }

    /// `[admin] socket_owner` or `socket_group`: a user or group name, or a number. Whether it
    /// exists is checked when the socket is made, on the machine that runs herdsman.
    fn account(&mut self, key: &str, raw: &Option<Spanned<String>>) -> Option<String> {
        let raw = raw.as_ref()?;
        let text = raw.get_ref();
        let valid = !text.is_empty()
            && text.len() <= 32
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            self.reject(
                key,
                raw.span(),
                &quoted(text),
                r#"not a user or group name; write e.g. "herdsman" or a number such as "998""#,
            );
        }
        Some(text.clone())
    }

    /// `[admin] allowed_hosts`: host names, lowercased, without ports.
    fn allowed_hosts(
        &mut self,
        key: &str,
        raw: &Option<Spanned<Vec<Spanned<String>>>>,
    ) -> Vec<String> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        let is_host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.');
        raw.get_ref()
            .iter()
            .filter_map(|name| {
                let text = name.get_ref().to_ascii_lowercase();
                if text.is_empty() || !text.chars().all(is_host_char) {
                    self.reject(
                        key,
                        name.span(),
                        &quoted(name.get_ref()),
                        r#"not a host name (no port, no wildcard); write e.g. allowed_hosts = ["herdsman-admin.internal"]"#,
                    );
                    return None;
                }
                Some(text)
            })
            .collect()
    }

    fn workers(&mut self, raw: &Option<Spanned<toml::Value>>) -> usize {
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
        let mut timeout = |key, value, default| self.duration(key, value, default, Zero::Refused);
        let timeouts = Timeouts {
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
            backend_read: timeout(
                "timeouts.backend_read",
                &raw.backend_read,
                default.backend_read,
            ),
            backend_idle: timeout(
                "timeouts.backend_idle",
                &raw.backend_idle,
                default.backend_idle,
            ),
            request: None,
        };
        Timeouts {
            request: self.optional_duration(
                "timeouts.request",
                &raw.request,
                "30s",
                "no limit (the default)",
            ),
            ..timeouts
        }
    }

    fn limits(&mut self, raw: &RawLimits) -> Limits {
        let default = Limits::default();
        Limits {
            max_header_bytes: self.integer(
                "limits.max_header_bytes",
                &raw.max_header_bytes,
                1024..=1_048_576,
                "1024 to 1048576 (default 65536)",
                default.max_header_bytes,
            ),
            max_body_bytes: self.integer(
                "limits.max_body_bytes",
                &raw.max_body_bytes,
                0..=i64::MAX,
                "0 (no limit, the default) or a number of bytes",
                default.max_body_bytes,
            ),
            max_idle_per_server: self.integer(
                "limits.max_idle_per_server",
                &raw.max_idle_per_server,
                0..=4096,
                "0 to 4096 (default 64)",
                default.max_idle_per_server,
            ),
        }
    }

    // A table's keys are checked in the order its struct literal lists them, and problems on one
    // line (every key missing from a table points at the table's line) keep the order found.

    fn listener(
        &mut self,
        table: &Table,
        listener: &RawListener,
        pools: &[Spanned<RawPool>],
    ) -> ListenerConfig {
        ListenerConfig {
            name: self.name(table, &listener.name, "web"),
            bind: self.socket_addr(
                table,
                "bind",
                &listener.bind,
                "127.0.0.1:8080",
                PortZero::Allowed,
            ),
            backlog: self.integer(
                &table.key("backlog"),
                &listener.backlog,
                1..=65535,
                "1 to 65535 (default 4096)",
                DEFAULT_BACKLOG,
            ),
            pool: self.pool_index(table, &listener.pool, pools),
            max_connections: self.integer(
                &table.key("max_connections"),
                &listener.max_connections,
                0..=10_000_000,
                "0 (no limit, the default) to 10000000",
                0,
            ),
            access_log: self.access_log(table, listener),
            upgrade: self.upgrade_protocols(table, &listener.upgrade),
        }
    }

    /// A listener's `upgrade`: protocol names, each a token without a version, never HTTP/2;
    /// [`DEFAULT_UPGRADE`] when absent.
    fn upgrade_protocols(
        &mut self,
        table: &Table,
        raw: &Option<Spanned<Vec<Spanned<String>>>>,
    ) -> UpgradeProtocols {
        let Some(raw) = raw else {
            return UpgradeProtocols::new(DEFAULT_UPGRADE);
        };
        for name in raw.get_ref() {
            if let Some(why) = upgrade::refusal(name.get_ref()) {
                self.reject(
                    &table.key("upgrade"),
                    name.span(),
                    &quoted(name.get_ref()),
                    why,
                );
            }
        }
        UpgradeProtocols::new(raw.get_ref().iter().map(|name| name.get_ref().as_str()))
    }

    /// A listener's `access_log` and `access_log_format`: a log when the path is written (the
    /// format alone is ignored, so that commenting out the path turns the log off).
    fn access_log(&mut self, table: &Table, listener: &RawListener) -> Option<AccessLogConfig> {
        let format = self.word(
            &table.key("access_log_format"),
            &listener.access_log_format,
            &ACCESS_LOG_FORMATS,
        );
        let raw = listener.access_log.as_ref()?;
        let text = raw.get_ref();
        let why = if text.is_empty() {
            r#"empty; write an absolute path, e.g. "/var/log/herdsman/access.log", "-" for standard output, or remove the key for no access log"#
        } else if text == STANDARD_OUTPUT {
            return Some(AccessLogConfig {
                path: Arc::from(Path::new(text)),
                format,
            });
        } else if text.contains('\0') {
            "a path cannot contain a NUL character"
        } else if !Path::new(text).is_absolute() {
            // A relative path would depend on the working directory of whoever started herdsman
            // (systemd's is /), and a reload or a SIGUSR1 could reopen another file.
            r#"not an absolute path; write e.g. "/var/log/herdsman/access.log", or "-" for standard output"#
        } else if text.ends_with('/') {
            r#"names a directory; write a file's path, e.g. "/var/log/herdsman/access.log""#
        } else {
            return Some(AccessLogConfig {
                path: Arc::from(Path::new(text)),
                format,
            });
        };
        self.reject(&table.key("access_log"), raw.span(), &quoted(text), why);
        None
    }

    /// Listeners may share an access log file only in one format: a file of mixed lines would
    /// defeat whatever reads it.
    fn one_format_per_access_log(
        &mut self,
        raw: &[Spanned<RawListener>],
        listeners: &[ListenerConfig],
    ) {
        for (index, listener) in listeners.iter().enumerate() {
            let Some(log) = &listener.access_log else {
                continue;
            };
            let first = listeners[..index].iter().find(|other| {
                other
                    .access_log
                    .as_ref()
                    .is_some_and(|o| o.path == log.path)
            });
            let Some(first) = first else {
                continue;
            };
            let first_format = first.access_log.as_ref().map_or(log.format, |o| o.format);
            if first_format == log.format {
                continue;
            }
            let Some(path) = raw[index].get_ref().access_log.as_ref() else {
                continue;
            };
            self.reject(
                &format!("listener[{index}].access_log"),
                path.span(),
                &quoted(path.get_ref()),
                format!(
                    "also the access log of listener {}, in format {}; listeners sharing a file \
                     must share its access_log_format, or write to files of their own",
                    first.name,
                    ACCESS_LOG_FORMATS.word_for(first_format),
                ),
            );
        }
    }

    /// A listener's `pool`: the index in `pools` of the first pool of that name (0, a stand-in,
    /// when missing or unknown).
    fn pool_index(
        &mut self,
        table: &Table,
        raw: &Option<Spanned<String>>,
        pools: &[Spanned<RawPool>],
    ) -> usize {
        let how = r#"write the name of a [[pool]], e.g. pool = "app""#;
        let Some(reference) = self.required(table, "pool", raw, how) else {
            return 0;
        };
        let named = |pool: &Spanned<RawPool>| pool.get_ref().name.clone().map(Spanned::into_inner);
        // A position in `pools`, not among the named ones: a pool missing its name must not
        // shift the indexes.
        let found = pools
            .iter()
            .position(|pool| named(pool).as_ref() == Some(reference.get_ref()));
        if let Some(index) = found {
            return index;
        }
        let defined = pools
            .iter()
            .filter_map(named)
            .collect::<Vec<_>>()
            .join(", ");
        let defined = if defined.is_empty() { "none" } else { &defined };
        self.reject(
            &table.key("pool"),
            reference.span(),
            &quoted(reference.get_ref()),
            format!("no such pool; defined pools: {defined}"),
        );
        0
    }

    fn pool(&mut self, table: &Table, pool: &RawPool) -> PoolConfig {
        let name = self.name(table, &pool.name, "app");
        let balance = self.word(&table.key("balance"), &pool.balance, &BALANCES);
        let sub_table = |checker: &Self, field: &str, start: usize| Table {
            path: table.key(field),
            line: line_of(checker.text, start),
        };
        PoolConfig {
            name,
            balance,
            hash_key: self.hash_key(table, &pool.hash_key, balance),
            sticky: pool.sticky.as_ref().map(|sticky| {
                let sticky_table = sub_table(self, "sticky", sticky.span().start);
                self.sticky(&sticky_table, sticky.get_ref())
            }),
            health: pool.health.as_ref().map(|health| {
                let health_table = sub_table(self, "health", health.span().start);
                self.health(&health_table, health.get_ref())
            }),
            passive: match &pool.passive {
                Some(passive) => {
                    let passive_table = sub_table(self, "passive", passive.span().start);
                    self.passive(&passive_table, passive.get_ref())
                }
                None => Passive::default(),
            },
            slow_start: self.duration(
                &table.key("slow_start"),
                &pool.slow_start,
                Duration::ZERO,
                Zero::Allowed,
            ),
            retries: self.integer(
                &table.key("retries"),
                &pool.retries,
                0..=10,
                "0 to 10 (default 2)",
                2,
            ),
            retry_on: self.retry_on(&table.key("retry_on"), &pool.retry_on),
            retry_budget_percent: self.integer(
                &table.key("retry_budget_percent"),
                &pool.retry_budget_percent,
                0..=100,
                "0 to 100 (default 20)",
                20,
            ),
            retry_budget_floor: self.integer(
                &table.key("retry_budget_floor"),
                &pool.retry_budget_floor,
                0..=100_000,
                "0 to 100000 retries a second (default 10)",
                10,
            ),
            queue_timeout: self.duration(
                &table.key("queue_timeout"),
                &pool.queue_timeout,
                Duration::from_secs(2),
                Zero::Allowed,
            ),
            servers: self.servers(table, &pool.servers),
        }
    }

    fn health(&mut self, table: &Table, raw: &RawHealth) -> HealthCheck {
        let kind = match raw.check.as_ref().map(|c| c.get_ref().as_str()) {
            Some("tcp") => HealthKind::Tcp,
            None | Some("http") => HealthKind::Http {
                method: self.health_method(table, &raw.method),
                path: self.health_path(table, &raw.path),
                host: raw.host.as_ref().map(|host| host.get_ref().clone()),
                expect: self.status_range(table, &raw.expect),
            },
            Some(other) => {
                let check = raw.check.as_ref().expect("matched Some");
                self.reject(
                    &table.key("check"),
                    check.span(),
                    &quoted(other),
                    "unknown; accepted: http, tcp",
                );
                HealthKind::Tcp
            }
        };
        let default = HealthCheck {
            kind: HealthKind::Tcp,
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
        };
        HealthCheck {
            kind,
            interval: self.duration(
                &table.key("interval"),
                &raw.interval,
                default.interval,
                Zero::Refused,
            ),
            timeout: self.duration(
                &table.key("timeout"),
                &raw.timeout,
                default.timeout,
                Zero::Refused,
            ),
            rise: self.integer(
                &table.key("rise"),
                &raw.rise,
                1..=100,
                "1 to 100 (default 2)",
                default.rise,
            ),
            fall: self.integer(
                &table.key("fall"),
                &raw.fall,
                1..=100,
                "1 to 100 (default 3)",
                default.fall,
            ),
        }
    }

    fn health_method(&mut self, table: &Table, raw: &Option<Spanned<String>>) -> String {
        let Some(method) = raw else {
            return "GET".to_string();
        };
        let text = method.get_ref();
        if !matches!(text.as_str(), "GET" | "HEAD" | "OPTIONS") {
            self.reject(
                &table.key("method"),
                method.span(),
                &quoted(text),
                "accepted: GET (the default), HEAD, OPTIONS",
            );
        }
        text.clone()
    }

    fn health_path(&mut self, table: &Table, raw: &Option<Spanned<String>>) -> String {
        let Some(path) = raw else {
            return "/".to_string();
        };
        let text = path.get_ref();
        let printable = text.bytes().all(|b| b.is_ascii_graphic());
        if !text.starts_with('/') || !printable {
            self.reject(
                &table.key("path"),
                path.span(),
                &quoted(text),
                "a path starting with '/', without spaces, e.g. path = \"/healthz\"",
            );
        }
        text.clone()
    }

    /// `expect`: "200", or a range "200-399".
    fn status_range(&mut self, table: &Table, raw: &Option<Spanned<String>>) -> (u16, u16) {
        let Some(expect) = raw else {
            return (200, 399);
        };
        let text = expect.get_ref();
        let (low, high) = text.split_once('-').unwrap_or((text, text));
        let status = |s: &str| {
            s.trim()
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=599).contains(c))
        };
        if let (Some(low), Some(high)) = (status(low), status(high)) {
            if low <= high {
                return (low, high);
            }
        }
        self.reject(
            &table.key("expect"),
            expect.span(),
            &quoted(text),
            "a status or an inclusive range of statuses, e.g. \"200\" or \"200-399\" (the default)",
        );
        (200, 399)
    }

    fn passive(&mut self, table: &Table, raw: &RawPassive) -> Passive {
        let default = Passive::default();
        let ejection = self.duration(
            &table.key("ejection"),
            &raw.ejection,
            default.ejection,
            Zero::Refused,
        );
        Passive {
            consecutive_failures: self.integer(
                &table.key("consecutive_failures"),
                &raw.consecutive_failures,
                0..=1000,
                "0 (off) to 1000 (default 5)",
                default.consecutive_failures,
            ),
            count_5xx: raw
                .count_5xx
                .as_ref()
                .map_or(default.count_5xx, |b| *b.get_ref()),
            ejection,
            max_ejection: self.duration(
                &table.key("max_ejection"),
                &raw.max_ejection,
                default.max_ejection.max(ejection),
                Zero::Refused,
            ),
            max_ejected_percent: self.integer(
                &table.key("max_ejected_percent"),
                &raw.max_ejected_percent,
                0..=100,
                "0 to 100 (default 50)",
                default.max_ejected_percent,
            ),
        }
    }

    /// No two sticky pools may share a cookie name: a browser keeps one cookie per name and path,
    /// so a client of both would send each pool the other's cookie and be re-balanced every time.
    fn unique_sticky_cookies(&mut self, raw: &[Spanned<RawPool>], pools: &[PoolConfig]) {
        let mut first: HashMap<&str, &str> = HashMap::new();
        for (index, (raw_pool, pool)) in raw.iter().zip(pools).enumerate() {
            let (Some(sticky), Some(raw_sticky)) = (&pool.sticky, &raw_pool.get_ref().sticky)
            else {
                continue;
            };
            let Some(earlier) = first.get(sticky.cookie.as_str()) else {
                first.insert(&sticky.cookie, &pool.name);
                continue;
            };
            let key = format!("pool[{index}].sticky.cookie");
            let suggestion = format!("{}_{}", sticky.cookie, pool.name.to_ascii_uppercase());
            let why = format!(
                "also the cookie of pool {earlier:?}; a browser keeps one cookie per name, so \
                 each sticky pool needs its own, e.g. cookie = {suggestion:?}"
            );
            match &raw_sticky.get_ref().cookie {
                Some(cookie) => self.reject(&key, cookie.span(), &quoted(cookie.get_ref()), why),
                None => {
                    let line = line_of(self.text, raw_sticky.span().start);
                    let message = format!("{key}: the default {:?} is {why}", sticky.cookie);
                    self.report(&key, Some(line), &message);
                }
            }
        }
    }

    /// A pool's `hash_key`: only with `balance = "hash"`.
    fn hash_key(
        &mut self,
        table: &Table,
        raw: &Option<Spanned<String>>,
        balance: Balance,
    ) -> HashKey {
        let Some(raw) = raw else {
            return HashKey::SourceIp;
        };
        let text = raw.get_ref();
        let key = match text.split_once(':') {
            None if text == "source-ip" => Some(HashKey::SourceIp),
            Some(("header", name)) if is_token(name) => {
                Some(HashKey::Header(name.to_ascii_lowercase()))
            }
            Some(("cookie", name)) if is_token(name) => Some(HashKey::Cookie(name.to_string())),
            _ => None,
        };
        let why = match key {
            None => r#"accepted: "source-ip", "header:NAME" or "cookie:NAME""#,
            Some(_) if balance != Balance::Hash => {
                r#"only used with balance = "hash"; remove it or set balance = "hash""#
            }
            Some(key) => return key,
        };
        self.reject(&table.key("hash_key"), raw.span(), &quoted(text), why);
        HashKey::SourceIp
    }

    fn sticky(&mut self, table: &Table, raw: &RawSticky) -> StickyConfig {
        let cookie = match &raw.cookie {
            None => DEFAULT_STICKY_COOKIE.to_string(),
            Some(cookie) => {
                if !is_token(cookie.get_ref()) {
                    self.reject(
                        &table.key("cookie"),
                        cookie.span(),
                        &quoted(cookie.get_ref()),
                        r#"not a cookie name (letters, digits and !#$%&'*+-.^_`|~), e.g. cookie = "HERDSMAN""#,
                    );
                }
                cookie.get_ref().clone()
            }
        };
        let key_env = self.env_name(&table.key("key_env"), &raw.key_env, "HERDSMAN_STICKY_KEY");
        let max_age = raw.max_age.as_ref().map(|_| {
            self.duration(
                &table.key("max_age"),
                &raw.max_age,
                Duration::from_secs(3600),
                Zero::Refused,
            )
        });
        StickyConfig {
            cookie,
            key_env,
            max_age,
        }
    }

    /// An optional environment variable's name (`token_env`, `key_env`).
    fn env_name(
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

    /// A pool's `servers`: at least one.
    fn servers(
        &mut self,
        pool: &Table,
        raw: &Option<Spanned<Vec<Spanned<RawServer>>>>,
    ) -> Vec<ServerConfig> {
        let Some(servers) = self.required(pool, "servers", raw, NEED_A_SERVER) else {
            return Vec::new();
        };
        let key = pool.key("servers");
        if servers.get_ref().is_empty() {
            self.reject(
                &key,
                servers.span(),
                "[]",
                format!("empty; {NEED_A_SERVER}"),
            );
            return Vec::new();
        }
        self.tables(
            &key,
            servers.get_ref(),
            "server names must be unique within a pool",
            Self::server,
        )
    }

    fn server(&mut self, table: &Table, server: &RawServer) -> ServerConfig {
        ServerConfig {
            name: self.name(table, &server.name, "a"),
            addr: self.socket_addr(
                table,
                "addr",
                &server.addr,
                "127.0.0.1:9001",
                PortZero::Refused,
            ),
            weight: self.integer(
                &table.key("weight"),
                &server.weight,
                0..=256,
                "0 to 256 (default 1; 0 takes no new requests)",
                DEFAULT_WEIGHT,
            ),
            state: self.word(&table.key("state"), &server.state, &SERVER_STATES),
            max_connections: self.integer(
                &table.key("max_connections"),
                &server.max_connections,
                0..=1_000_000,
                "0 (no limit, the default) to 1000000",
                0,
            ),
        }
    }

    /// Checks each table of the array at `key` — `listener`, `pool`, a pool's `servers` — with
    /// `check`, then that no two of them share a name (`rule` says so in the message).
    fn tables<R: Named, T>(
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
                    line: line_of(self.text, entry.span().start),
                };
                check(self, &table, entry.get_ref())
            })
            .collect();
        self.unique_names(key, raw, rule);
        checked
    }

    /// Reports each name in the array at `key` that equals an earlier one, pointing at where the
    /// earlier one is.
    fn unique_names<R: Named>(&mut self, key: &str, raw: &[Spanned<R>], rule: &str) {
        let mut first_lines: HashMap<&str, usize> = HashMap::new();
        for (index, entry) in raw.iter().enumerate() {
            let Some(name) = entry.get_ref().name() else {
                continue;
            };
            let line = line_of(self.text, name.span().start);
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
    fn name(&mut self, table: &Table, raw: &Option<Spanned<String>>, example: &str) -> String {
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

    /// A required socket address (`bind`, `addr`), with port 0 only where `port_zero` allows it.
    /// Messages suggest `"example"`; [`STAND_IN_ADDR`] when missing or refused.
    fn socket_addr(
        &mut self,
        table: &Table,
        field: &str,
        raw: &Option<Spanned<String>>,
        example: &str,
        port_zero: PortZero,
    ) -> SocketAddr {
        let how = format!(r#"write e.g. {field} = "{example}""#);
        let Some(raw) = self.required(table, field, raw, &how) else {
            return STAND_IN_ADDR;
        };
        let text = raw.get_ref();
        let why = match text.parse::<SocketAddr>() {
            Ok(addr) if addr.port() == 0 && port_zero == PortZero::Refused => {
                format!(
                    r#"port 0 cannot be connected to; write the server's port, e.g. "{example}""#
                )
            }
            Ok(addr) => return addr,
            Err(_) => not_a_socket_address(text, example),
        };
        self.reject(&table.key(field), raw.span(), &quoted(text), why);
        STAND_IN_ADDR
    }

    /// One of the words in `words`; its default when absent or refused.
    fn word<T: Copy>(&mut self, key: &str, raw: &Option<Spanned<String>>, words: &Words<T>) -> T {
        let Some(raw) = raw else {
            return words.default;
        };
        let text = raw.get_ref().as_str();
        if let Some((_, value)) = words.accepted.iter().find(|(word, _)| *word == text) {
            return *value;
        }
        let why = "unknown";
        let accepted = words
            .accepted
            .iter()
            .map(|(word, _)| *word)
            .collect::<Vec<_>>()
            .join(", ");
        self.reject(
            key,
            raw.span(),
            &quoted(text),
            format!("{why}; accepted: {accepted}"),
        );
        words.default
    }

    /// An optional integer within `range`; `default` when absent or refused.
    fn integer<T: TryFrom<i64>>(
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

    /// An optional duration; `default` when absent or refused.
    fn duration(
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
    fn optional_duration(
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

    /// A pool's `retry_on`: each word a condition or a 5xx status.
    fn retry_on(&mut self, key: &str, raw: &Option<Spanned<Vec<Spanned<String>>>>) -> RetryOn {
        let Some(raw) = raw else {
            return RetryOn::default();
        };
        let mut retry_on = RetryOn::NONE;
        for word in raw.get_ref() {
            let text = word.get_ref().as_str();
            if let Some(condition) = RETRY_CONDITIONS.value_of(text) {
                retry_on = retry_on.with(condition);
                continue;
            }
            match text.parse::<u16>() {
                Ok(status) if (500..=599).contains(&status) => {
                    retry_on = retry_on.with_status(status);
                }
                _ => {
                    let accepted = RETRY_CONDITIONS.words().collect::<Vec<_>>().join(", ");
                    self.reject(
                        key,
                        word.span(),
                        &quoted(text),
                        format!("unknown; accepted: {accepted}, or a status from 500 to 599"),
                    );
                }
            }
        }
        retry_on
    }

    /// `raw` when present; otherwise `None`, after recording `key: missing; how` at the line of
    /// the table that lacks the key.
    fn required<'r, T>(
        &mut self,
        table: &Table,
        field: &str,
        raw: &'r Option<T>,
        how: &str,
    ) -> Option<&'r T> {
        if raw.is_none() {
            let key = table.key(field);
            self.report(&key, Some(table.line), &format!("{key}: missing; {how}"));
        }
        raw.as_ref()
    }

    /// Records `key = value: why`.
    fn reject(&mut self, key: &str, span: Range<usize>, value: &str, why: impl fmt::Display) {
        let line = line_of(self.text, span.start);
        self.report(key, Some(line), &format!("{key} = {value}: {why}"));
    }

    fn report(&mut self, key: &str, line: Option<usize>, message: &str) {
        self.problems.push(ConfigProblem {
            key: key.to_string(),
            line,
            message: message.to_string(),
        });
    }
}

/// An RFC 9110 token: a header field name, a cookie name.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn quoted(text: &str) -> String {
    format!("{text:?}")
}

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
    use crate::config::fixtures::{only_problem, problem, problems, valid_with, MINIMAL, VALID};
    use crate::config::load::from_toml;

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
            hard_stop_after: None,
            listeners: vec![
                ListenerConfig {
                    name: "web".into(),
                    bind: addr("127.0.0.1:8080"),
                    backlog: 1024,
                    pool: 0,
                    max_connections: 0,
                    access_log: None,
                    upgrade: UpgradeProtocols::new(["websocket"]),
                },
                ListenerConfig {
                    name: "internal".into(),
                    bind: addr("[::1]:0"),
                    backlog: 4096,
                    pool: 1,
                    max_connections: 0,
                    access_log: None,
                    upgrade: UpgradeProtocols::new(["websocket"]),
                },
            ],
            timeouts: Timeouts {
                connect: Duration::from_secs(1),
                client_header: Duration::from_secs(5),
                client_idle: Duration::from_secs(120),
                backend_response: Duration::from_secs(45),
                backend_read: Duration::from_secs(60),
                request: None,
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
                    hash_key: HashKey::SourceIp,
                    sticky: None,
                    health: None,
                    passive: Passive::default(),
                    slow_start: Duration::ZERO,
                    retries: 2,
                    retry_on: RetryOn::default(),
                    retry_budget_percent: 20,
                    retry_budget_floor: 10,
                    queue_timeout: Duration::from_secs(2),
                    servers: vec![
                        ServerConfig {
                            name: "a".into(),
                            addr: addr("127.0.0.1:9001"),
                            weight: 1,
                            state: ServerState::Ready,
                            max_connections: 0,
                        },
                        ServerConfig {
                            name: "b".into(),
                            addr: addr("127.0.0.1:9002"),
                            weight: 2,
                            state: ServerState::Ready,
                            max_connections: 0,
                        },
                    ],
                },
                PoolConfig {
                    name: "api".into(),
                    balance: Balance::P2c,
                    hash_key: HashKey::SourceIp,
                    sticky: None,
                    health: None,
                    passive: Passive::default(),
                    slow_start: Duration::ZERO,
                    retries: 2,
                    retry_on: RetryOn::default(),
                    retry_budget_percent: 20,
                    retry_budget_floor: 10,
                    queue_timeout: Duration::from_secs(2),
                    servers: vec![ServerConfig {
                        name: "x".into(),
                        addr: addr("10.0.0.7:80"),
                        weight: 0,
                        state: ServerState::Ready,
                        max_connections: 0,
                    }],
                },
                PoolConfig {
                    name: "shop".into(),
                    balance: Balance::Hash,
                    hash_key: HashKey::Header("x-user".into()),
                    sticky: Some(StickyConfig {
                        cookie: "SHOP".into(),
                        key_env: Some("SHOP_STICKY_KEY".into()),
                        max_age: Some(Duration::from_secs(3600)),
                    }),
                    health: None,
                    passive: Passive::default(),
                    slow_start: Duration::ZERO,
                    retries: 2,
                    retry_on: RetryOn::default(),
                    retry_budget_percent: 20,
                    retry_budget_floor: 10,
                    queue_timeout: Duration::from_secs(2),
                    servers: vec![
                        ServerConfig {
                            name: "s1".into(),
                            addr: addr("127.0.0.1:9101"),
                            weight: 1,
                            state: ServerState::Ready,
                            max_connections: 0,
                        },
                        ServerConfig {
                            name: "s2".into(),
                            addr: addr("127.0.0.1:9102"),
                            weight: 1,
                            state: ServerState::Drain,
                            max_connections: 0,
                        },
                    ],
                },
            ],
            routes: vec![
                RouteConfig {
                    host: Some(HostPattern::Subdomains(".example.com".into())),
                    path_prefix: Some("/api/".into()),
                    pool: 1,
                    timeouts: ExchangeTimeouts {
                        backend_response: Duration::from_secs(45),
                        backend_read: Duration::from_secs(60),
                        request: None,
                    },
                },
                RouteConfig {
                    host: Some(HostPattern::Exact("shop.example.com".into())),
                    path_prefix: None,
                    pool: 2,
                    timeouts: ExchangeTimeouts {
                        backend_response: Duration::from_secs(120),
                        backend_read: Duration::from_secs(600),
                        request: None,
                    },
                },
            ],
            admin: None,
            log: LogSettings {
                level: LogLevel::Info,
            },
        };
        assert_eq!(config, expected);
    }

    #[test]
    fn unwritten_keys_take_their_defaults() {
        let config = from_toml(MINIMAL, "test.toml").unwrap();
        assert_eq!(config.workers, auto_workers());
        assert!(config.workers >= 1);
        assert_eq!(config.intake, IntakeMode::Balanced);
        assert_eq!(config.shutdown_grace, Duration::from_secs(10));
        assert_eq!(config.hard_stop_after, None);
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
    fn a_listener_naming_a_missing_pool_lists_the_defined_ones() {
        assert_eq!(
            only_problem(&valid_with(r#"pool = "app""#, r#"pool = "nope""#)),
            problem(
                "listener[0].pool",
                10,
                r#"listener[0].pool = "nope": no such pool; defined pools: app, api, shop"#
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
                r#"pool[0].balance = "fastest": unknown; accepted: round-robin, least-conn, p2c, random, hash"#
            )
        );
    }

    #[test]
    fn routes_sticky_hash_keys_and_states_are_held_to_their_rules() {
        for (from, to, key, why) in [
            (
                r#"host = "shop.example.com""#,
                r#"host = "shop.example.com:80""#,
                "route[1].host",
                "without a port",
            ),
            (
                r#"host = "shop.example.com""#,
                r#"host = "shop example""#,
                "route[1].host",
                "not a host name",
            ),
            (
                r#"host = "*.Example.com""#,
                r#"host = "*.""#,
                "route[0].host",
                "empty",
            ),
            (
                r#"path_prefix = "/api/""#,
                r#"path_prefix = "api/""#,
                "route[0].path_prefix",
                "must start with '/'",
            ),
            (
                r#"pool = "shop"
"#,
                r#"pool = "shoes"
"#,
                "route[1].pool",
                "no such pool; defined pools: app, api, shop",
            ),
            (
                r#"hash_key = "header:X-User""#,
                r#"hash_key = "body""#,
                "pool[2].hash_key",
                "accepted: \"source-ip\"",
            ),
            (
                r#"balance = "hash""#,
                r#"balance = "random""#,
                "pool[2].hash_key",
                "only used with balance = \"hash\"",
            ),
            (
                r#"cookie = "SHOP""#,
                r#"cookie = "SH OP""#,
                "pool[2].sticky.cookie",
                "not a cookie name",
            ),
            (
                r#"key_env = "SHOP_STICKY_KEY""#,
                r#"key_env = "1KEY""#,
                "pool[2].sticky.key_env",
                "not an environment variable name",
            ),
            (
                r#"max_age = "1h""#,
                r#"max_age = "0s""#,
                "pool[2].sticky.max_age",
                "must be more than 0",
            ),
            (
                r#"state = "drain""#,
                r#"state = "drained""#,
                "pool[2].servers[1].state",
                "unknown; accepted: ready, drain, maint, test",
            ),
        ] {
            let found = only_problem(&valid_with(from, to));
            assert_eq!(found.key, key, "{to}");
            assert!(found.message.contains(why), "{to}: {}", found.message);
        }
        let unknown = only_problem(&valid_with("path_prefix = \"/api/\"", "path = \"/api/\""));
        assert_eq!(unknown.key, "route[0].path");
    }

    #[test]
    fn health_passive_and_slow_start_are_read_and_held_to_their_rules() {
        let text = format!(
            "{MINIMAL}slow_start = \"30s\"\n[pool.health]\npath = \"/healthz\"\nexpect = \"200-299\"\n\
             interval = \"5s\"\nfall = 2\n[pool.passive]\nconsecutive_failures = 3\ncount_5xx = true\n"
        );
        let pool = from_toml(&text, "t").unwrap().pools.remove(0);
        assert_eq!(pool.slow_start, Duration::from_secs(30));
        assert_eq!(
            pool.health,
            Some(HealthCheck {
                kind: HealthKind::Http {
                    method: "GET".into(),
                    path: "/healthz".into(),
                    host: None,
                    expect: (200, 299),
                },
                interval: Duration::from_secs(5),
                timeout: Duration::from_secs(1),
                rise: 2,
                fall: 2,
            })
        );
        assert_eq!(
            pool.passive,
            Passive {
                consecutive_failures: 3,
                count_5xx: true,
                ..Passive::default()
            }
        );
        for (bad, key, why) in [
            (
                "check = \"icmp\"",
                "pool[0].health.check",
                "accepted: http, tcp",
            ),
            (
                "path = \"healthz\"",
                "pool[0].health.path",
                "starting with '/'",
            ),
            (
                "expect = \"299-200\"",
                "pool[0].health.expect",
                "inclusive range",
            ),
            (
                "method = \"POST\"",
                "pool[0].health.method",
                "accepted: GET",
            ),
            ("fall = 0", "pool[0].health.fall", "1 to 100"),
            (
                "interval = \"0s\"",
                "pool[0].health.interval",
                "more than 0",
            ),
        ] {
            let found = only_problem(&format!("{MINIMAL}[pool.health]\n{bad}\n"));
            assert_eq!(found.key, key, "{bad}");
            assert!(found.message.contains(why), "{bad}: {}", found.message);
        }
        let percent = only_problem(&format!(
            "{MINIMAL}[pool.passive]\nmax_ejected_percent = 101\n"
        ));
        assert_eq!(percent.key, "pool[0].passive.max_ejected_percent");
    }

    #[test]
    fn two_sticky_pools_need_two_cookie_names() {
        let sticky_api = valid_with(
            "servers = [{ name = \"x\", addr = \"10.0.0.7:80\", weight = 0 }]\n",
            "servers = [{ name = \"x\", addr = \"10.0.0.7:80\", weight = 0 }]\n[pool.sticky]\n",
        );
        from_toml(&sticky_api, "t").expect("HERDSMAN and SHOP differ");
        let clash = only_problem(&sticky_api.replace("cookie = \"SHOP\"", "cookie = \"HERDSMAN\""));
        assert_eq!(clash.key, "pool[2].sticky.cookie");
        assert!(
            clash.message.contains(r#"also the cookie of pool "api""#)
                && clash.message.contains(r#"e.g. cookie = "HERDSMAN_SHOP""#),
            "{}",
            clash.message
        );
    }

    #[test]
    fn host_patterns_ignore_case_and_port() {
        let exact = HostPattern::Exact("api.example.com".into());
        assert!(exact.matches(b"API.Example.com"));
        assert!(exact.matches(b"api.example.com:8080"));
        assert!(!exact.matches(b"api.example.com.evil"));
        assert!(!exact.matches(b"x.api.example.com"));
        let any = HostPattern::Subdomains(".example.com".into());
        assert!(any.matches(b"a.example.com"));
        assert!(any.matches(b"A.B.EXAMPLE.COM:443"));
        assert!(!any.matches(b"example.com"));
        assert!(!any.matches(b"badexample.com"));
        let v6 = HostPattern::Exact("[::1]".into());
        assert!(v6.matches(b"[::1]:8080"));
        assert!(v6.matches(b"[::1]"));
    }

    #[test]
    fn the_admin_table_names_its_bind_and_token_variable() {
        let with_admin = |table: &str| format!("{MINIMAL}\n[admin]\n{table}\n");
        let config = from_toml(
            &with_admin("bind = \"127.0.0.1:9900\"\ntoken_env = \"HERDSMAN_ADMIN_TOKEN\""),
            "test.toml",
        )
        .unwrap();
        assert_eq!(
            config.admin,
            Some(AdminSettings {
                bind: Some(addr("127.0.0.1:9900")),
                socket: None,
                allowed_hosts: Vec::new(),
                token_env: Some("HERDSMAN_ADMIN_TOKEN".to_string()),
            })
        );
        assert_eq!(from_toml(MINIMAL, "test.toml").unwrap().admin, None);
        let bad = only_problem(&with_admin(
            "bind = \"127.0.0.1:9900\"\ntoken_env = \"my token\"",
        ));
        assert_eq!(bad.key, "admin.token_env");
        assert!(
            bad.message.contains("not an environment variable name"),
            "{}",
            bad.message
        );
        let missing = only_problem(&with_admin("token_env = \"T\""));
        assert_eq!(missing.key, "admin.bind");
        // A socket alone will do; its mode, owner and group; hosts lowercased.
        let socket = from_toml(
            &with_admin(
                "socket = \"/run/herdsman/admin.sock\"\nsocket_mode = \"0660\"\n\
                 socket_group = \"adm\"\nallowed_hosts = [\"Admin.Internal\"]",
            ),
            "t",
        )
        .unwrap()
        .admin
        .unwrap();
        assert_eq!(socket.bind, None);
        assert_eq!(
            socket.socket,
            Some(AdminSocket {
                path: "/run/herdsman/admin.sock".into(),
                mode: 0o660,
                owner: None,
                group: Some("adm".into()),
            })
        );
        assert_eq!(socket.allowed_hosts, ["admin.internal"]);
        for (table, key, why) in [
            (
                "socket = \"admin.sock\"",
                "admin.socket",
                "not an absolute file path",
            ),
            (
                "socket = \"/run/a.sock\"\nsocket_mode = \"0999\"",
                "admin.socket_mode",
                "not a file mode",
            ),
            (
                "bind = \"127.0.0.1:9900\"\nsocket_mode = \"0600\"",
                "admin.socket_mode",
                "applies to a socket",
            ),
            (
                "bind = \"127.0.0.1:9900\"\nallowed_hosts = [\"evil.example:80\"]",
                "admin.allowed_hosts",
                "not a host name",
            ),
        ] {
            let problem = only_problem(&with_admin(table));
            assert_eq!(problem.key, key, "{table}");
            assert!(problem.message.contains(why), "{}", problem.message);
        }
    }

    #[test]
    fn every_intake_mode_is_accepted_and_others_are_named() {
        for (word, mode) in [
            ("balanced", IntakeMode::Balanced),
            ("reuseport", IntakeMode::ReusePort),
            ("exclusive", IntakeMode::Exclusive),
            ("shared", IntakeMode::Shared),
        ] {
            let text = valid_with(r#""reuseport""#, &format!("\"{word}\""));
            assert_eq!(from_toml(&text, "test.toml").unwrap().intake, mode);
            assert_eq!(mode.name(), word);
        }
        let unknown = only_problem(&valid_with(r#""reuseport""#, r#""fair""#));
        assert_eq!(
            unknown.message,
            r#"intake = "fair": unknown; accepted: balanced, reuseport, exclusive, shared"#
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
    fn exchange_timeouts_are_global_or_a_routes_own() {
        let text = valid_with(
            r#"backend_idle = "3500ms""#,
            "backend_idle = \"3500ms\"\nbackend_read = \"90s\"\nrequest = \"2m\"",
        );
        let config = from_toml(&text, "t").unwrap();
        assert_eq!(config.timeouts.backend_read, Duration::from_secs(90));
        assert_eq!(config.timeouts.request, Some(Duration::from_secs(120)));
        // The first route sets none of its own; the second its response and read timeouts only.
        assert_eq!(config.routes[0].timeouts, config.timeouts.exchange());
        let own = config.routes[1].timeouts;
        assert_eq!(own.backend_response, Duration::from_secs(120));
        assert_eq!(own.backend_read, Duration::from_secs(600));
        assert_eq!(own.request, Some(Duration::from_secs(120)));
        let unset = from_toml(VALID, "t").unwrap();
        assert_eq!(unset.timeouts.request, None);
        let zero = only_problem(&valid_with(
            r#"backend_read = "10m""#,
            r#"backend_read = "0s""#,
        ));
        assert_eq!(zero.key, "route[1].timeouts.backend_read");
        assert_eq!(zero.line, Some(65));
        let unknown = only_problem(&valid_with(r#"backend_read = "10m""#, r#"connect = "1s""#));
        assert!(
            unknown.message.contains("unknown field `connect`"),
            "{}",
            unknown.message
        );
    }

    #[test]
    fn retry_on_lists_conditions_and_5xx_statuses() {
        let pool_line = r#"balance = "p2c""#;
        let listed = valid_with(
            pool_line,
            "balance = \"p2c\"\nretry_on = [\"connect-failure\", \"response-timeout\", \"503\"]",
        );
        let retry_on = from_toml(&listed, "t").unwrap().pools[1].retry_on;
        assert!(retry_on.has(RetryCondition::ConnectFailure));
        assert!(retry_on.has(RetryCondition::ResponseTimeout));
        assert!(!retry_on.has(RetryCondition::EmptyResponse));
        assert!(retry_on.has_status(503) && !retry_on.has_status(502));
        assert_eq!(
            retry_on.words(),
            ["connect-failure", "response-timeout", "503"]
        );
        let default = from_toml(VALID, "t").unwrap().pools[1].retry_on;
        assert_eq!(
            default.words(),
            ["connect-failure", "empty-response", "reset-before-response"]
        );
        let none = valid_with(pool_line, "balance = \"p2c\"\nretry_on = []");
        assert_eq!(
            from_toml(&none, "t").unwrap().pools[1].retry_on,
            RetryOn::NONE
        );
        for bad in ["404", "timeout", "600"] {
            let text = valid_with(
                pool_line,
                &format!("balance = \"p2c\"\nretry_on = [\"{bad}\"]"),
            );
            assert_eq!(
                only_problem(&text),
                problem(
                    "pool[1].retry_on",
                    40,
                    &format!(
                        "pool[1].retry_on = \"{bad}\": unknown; accepted: connect-failure, \
                         empty-response, reset-before-response, response-timeout, or a status \
                         from 500 to 599"
                    )
                )
            );
        }
    }

    #[test]
    fn hard_stop_after_is_a_duration_above_zero_or_absent() {
        let with = |value: &str| format!("hard_stop_after = {value:?}\n{MINIMAL}");
        let config = from_toml(&with("30m"), "t").unwrap();
        assert_eq!(config.hard_stop_after, Some(Duration::from_secs(1800)));
        let zero = only_problem(&with("0s"));
        assert_eq!(
            (zero.key.as_str(), zero.line, zero.message.as_str()),
            (
                "hard_stop_after",
                Some(1),
                r#"hard_stop_after = "0s": must be more than 0, e.g. "30m"; leave it out for no limit (the default)"#
            )
        );
        let bad = only_problem(&with("forever"));
        assert_eq!(bad.key, "hard_stop_after");
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

    /// `MINIMAL` with `keys` added to its listener (at line 6 onwards).
    fn minimal_listener_with(keys: &str) -> String {
        let end_of_listener = "pool = \"app\"\n\n[[pool]]";
        assert_eq!(MINIMAL.matches(end_of_listener).count(), 1);
        MINIMAL.replace(
            end_of_listener,
            &format!("pool = \"app\"\n{keys}\n[[pool]]"),
        )
    }

    #[test]
    fn an_access_log_is_read_with_its_format_defaulting_to_combined() {
        let config = from_toml(MINIMAL, "t").unwrap();
        assert_eq!(config.listeners[0].access_log, None);
        let log = |keys: &str| {
            from_toml(&minimal_listener_with(keys), "t")
                .unwrap()
                .listeners[0]
                .access_log
                .clone()
        };
        let path: Arc<Path> = Arc::from(Path::new("/var/log/herdsman/web.log"));
        assert_eq!(
            log("access_log = \"/var/log/herdsman/web.log\"\n"),
            Some(AccessLogConfig {
                path: Arc::clone(&path),
                format: AccessLogFormat::Combined,
            })
        );
        assert_eq!(
            log("access_log = \"/var/log/herdsman/web.log\"\naccess_log_format = \"json\"\n"),
            Some(AccessLogConfig {
                path,
                format: AccessLogFormat::Json,
            })
        );
        // The format alone: commenting out the path turns the log off.
        assert_eq!(log("access_log_format = \"json\"\n"), None);
    }

    #[test]
    fn access_log_keys_are_held_to_their_rules() {
        let cases = [
            (
                "access_log = \"/tmp/a.log\"\naccess_log_format = \"apache\"\n",
                "listener[0].access_log_format",
                7,
                r#"listener[0].access_log_format = "apache": unknown; accepted: combined, json"#,
            ),
            (
                "access_log = \"logs/web.log\"\n",
                "listener[0].access_log",
                6,
                r#"listener[0].access_log = "logs/web.log": not an absolute path; write e.g. "/var/log/herdsman/access.log", or "-" for standard output"#,
            ),
            (
                "access_log = \"\"\n",
                "listener[0].access_log",
                6,
                r#"listener[0].access_log = "": empty; write an absolute path, e.g. "/var/log/herdsman/access.log", "-" for standard output, or remove the key for no access log"#,
            ),
            (
                "access_log = \"/var/log/herdsman/\"\n",
                "listener[0].access_log",
                6,
                r#"listener[0].access_log = "/var/log/herdsman/": names a directory; write a file's path, e.g. "/var/log/herdsman/access.log""#,
            ),
        ];
        for (keys, key, line, message) in cases {
            assert_eq!(
                only_problem(&minimal_listener_with(keys)),
                problem(key, line, message),
                "{keys}"
            );
        }
    }

    #[test]
    fn upgrade_defaults_to_websocket_and_an_empty_list_allows_none() {
        let upgrade = |keys: &str| {
            from_toml(&minimal_listener_with(keys), "t")
                .unwrap()
                .listeners[0]
                .upgrade
                .clone()
        };
        assert_eq!(upgrade(""), UpgradeProtocols::new(["websocket"]));
        assert_eq!(upgrade("upgrade = []\n"), UpgradeProtocols::none());
        assert_eq!(
            upgrade("upgrade = [\"WebSocket\", \"my-proto\"]\n"),
            UpgradeProtocols::new(["websocket", "my-proto"])
        );
    }

    #[test]
    fn upgrade_never_lists_http2_or_a_version() {
        let cases = [
            (
                "upgrade = [\"websocket\", \"h2c\"]\n",
                r#"listener[0].upgrade = "h2c": HTTP/2 is never tunnelled: requests inside it would bypass routing, access logs, X-Forwarded-For and limits (h2c smuggling); remove it"#,
            ),
            (
                "upgrade = [\"websocket/13\"]\n",
                r#"listener[0].upgrade = "websocket/13": write the protocol name without a version, e.g. "websocket""#,
            ),
        ];
        for (keys, message) in cases {
            assert_eq!(
                only_problem(&minimal_listener_with(keys)),
                problem("listener[0].upgrade", 6, message),
                "{keys}"
            );
        }
    }

    #[test]
    fn listeners_may_share_an_access_log_only_in_one_format() {
        let second = |format: &str| {
            format!(
                "access_log = \"/var/log/h.log\"\n\n[[listener]]\nname = \"api\"\n\
                 bind = \"127.0.0.1:8081\"\npool = \"app\"\naccess_log = \"/var/log/h.log\"\n\
                 access_log_format = \"{format}\"\n"
            )
        };
        let shared = from_toml(&minimal_listener_with(&second("combined")), "t").unwrap();
        assert_eq!(
            shared.listeners[0].access_log,
            shared.listeners[1].access_log
        );
        assert_eq!(
            only_problem(&minimal_listener_with(&second("json"))),
            problem(
                "listener[1].access_log",
                12,
                r#"listener[1].access_log = "/var/log/h.log": also the access log of listener web, in format combined; listeners sharing a file must share its access_log_format, or write to files of their own"#
            )
        );
    }

    #[test]
    fn the_log_level_is_one_of_tracings_levels() {
        assert_eq!(from_toml(MINIMAL, "t").unwrap().log.level, LogLevel::Info);
        let with = |level: &str| format!("{MINIMAL}\n[log]\nlevel = \"{level}\"\n");
        for (word, level) in [("error", LogLevel::Error), ("trace", LogLevel::Trace)] {
            assert_eq!(from_toml(&with(word), "t").unwrap().log.level, level);
            assert_eq!(level.name(), word);
        }
        assert_eq!(
            only_problem(&with("loud")),
            problem(
                "log.level",
                12,
                r#"log.level = "loud": unknown; accepted: error, warn, info, debug, trace"#
            )
        );
    }
}
