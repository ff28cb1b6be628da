//! Holding the raw structs of `raw.rs` to their rules and building the [`Config`] from them: every
//! value checked, every problem recorded with its key, line and fix, and checking goes on past each
//! one, so one `herdsman check` shows everything there is to fix.
//!
//! This file holds the walk over the whole document and how a problem is recorded; each part of
//! the document has a file of its own (`globals.rs`, `admin.rs`, `listeners.rs`, `routes.rs`,
//! `pools.rs`, `health.rs`), on the small checkers of `primitives.rs` and the word tables of
//! `words.rs`.

mod access;
mod acme;
mod admin;
mod answers;
mod compression;
mod conditions;
mod globals;
mod headers;
mod health;
mod listeners;
mod pools;
mod primitives;
mod rate_limit;
mod routes;
mod server_tls;
mod tls;
mod words;

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use super::problem::{ConfigProblem, Lines};
use super::raw::RawConfig;
use super::{CompressionRules, Config};
use globals::DEFAULT_SHUTDOWN_GRACE;
use primitives::Zero;

pub use primitives::is_valid_name;
pub(super) use words::{
    ACCESS_LOG_FORMATS, BALANCES, INTAKE_MODES, LOG_LEVELS, RETRY_CONDITIONS, SERVER_STATES,
};

/// Checks `raw`, read from `text`: the `Config`, or every problem found, in the order found.
pub(super) fn check(text: &str, raw: &RawConfig) -> Result<Config, Vec<ConfigProblem>> {
    let mut checker = Checker {
        lines: Lines::new(text),
        problems: Vec::new(),
        has_cleartext_listener: raw.listener.iter().any(|l| l.get_ref().tls.is_none()),
        warnings: Vec::new(),
    };
    let config = checker.config(raw);
    if checker.problems.is_empty() {
        Ok(config)
    } else {
        Err(checker.problems)
    }
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
struct Checker {
    lines: Lines,
    problems: Vec<ConfigProblem>,
    /// Whether the config has a listener without TLS (where HTTP-01 challenges are answered).
    has_cleartext_listener: bool,
    /// What is allowed but an operator must hear of (e.g. `verify = false`).
    warnings: Vec<ConfigProblem>,
}

impl Checker {
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
        let http2 = self.http2(&raw.http2);
        let buffering = self.buffering(&raw.buffering);
        let cache = self.cache(&raw.cache);
        let compression = match &raw.compression {
            Some(raw) => {
                let table = Table {
                    path: "compression".to_string(),
                    line: self.lines.line_of(raw.span().start),
                };
                self.compression(&table, raw.get_ref(), &CompressionRules::default())
            }
            None => CompressionRules::default(),
        };
        let enabled_compression = compression.enabled.then(|| Arc::new(compression.clone()));
        let real_ip = self.real_ip(&raw.real_ip);
        let request_id = self.request_id(&raw.request_id, real_ip.as_ref());
        let headers = raw
            .headers
            .as_ref()
            .and_then(|raw| self.header_rules("headers", raw.get_ref(), None, request_id.as_ref()));

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
        let route_tables: Vec<Table> = raw
            .route
            .iter()
            .enumerate()
            .map(|(index, route)| Table {
                path: format!("route[{index}]"),
                line: self.lines.line_of(route.span().start),
            })
            .collect();
        let routes: Vec<_> = raw
            .route
            .iter()
            .zip(&route_tables)
            .map(|(route, table)| {
                let compression = (&compression, &enabled_compression);
                let headers = (&headers, request_id.as_ref());
                self.route(
                    table,
                    route.get_ref(),
                    &raw.pool,
                    &timeouts,
                    compression,
                    headers,
                )
            })
            .collect();
        let pools = self.tables("pool", &raw.pool, "pool names must be unique", Self::pool);
        self.unique_sticky_cookies(&raw.pool, &pools);
        let admin = raw.admin.as_ref().map(|admin| self.admin(admin));
        let log = self.log(&raw.log);
        let ticket_keys = self.ticket_keys(&raw.tls);
        let acme_state_dir = self.acme_state_dir(&raw.tls);
        let rate_limit_redis = raw
            .rate_limit
            .as_ref()
            .and_then(|raw| self.rate_limit_settings(raw));
        // A refused config is not used, and its stand-ins would make warnings of their own.
        let warnings = if self.problems.is_empty() {
            let mut warnings = std::mem::take(&mut self.warnings);
            warnings.extend(routes::shadowed_routes(&routes, &route_tables));
            warnings
        } else {
            Vec::new()
        };

        Config {
            workers,
            intake,
            shutdown_grace,
            hard_stop_after,
            listeners,
            timeouts,
            limits,
            http2,
            buffering,
            cache,
            compression: enabled_compression,
            routes: Arc::new(routes),
            pools,
            admin,
            log,
            ticket_keys,
            acme_state_dir,
            rate_limit_redis,
            warnings,
            real_ip,
            headers,
            request_id,
        }
    }

    // A table's keys are checked in the order its struct literal lists them, and problems on one
    // line (every key missing from a table points at the table's line) keep the order found.

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
        let line = self.lines.line_of(span.start);
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::globals::auto_workers;
    use crate::config::fixtures::{addr, problem, problems, MINIMAL, VALID};
    use crate::config::load::from_toml;
    use crate::config::{
        Balance, Buffering, Config, ConfigProblem, ExchangeTimeouts, HashKey, HostPattern,
        IntakeMode, Limits, ListenerConfig, LogFormat, LogLevel, LogSettings, Passive, PoolConfig,
        RetryOn, RouteBuffering, RouteConfig, ServerConfig, ServerProtocol, ServerState,
        StickyConfig, Timeouts, UpgradeProtocols,
    };

    /// A pool of `VALID`, with the keys that `VALID` leaves out at their defaults.
    fn pool(
        name: &str,
        balance: Balance,
        hash_key: HashKey,
        sticky: Option<StickyConfig>,
        servers: Vec<ServerConfig>,
    ) -> PoolConfig {
        PoolConfig {
            name: name.into(),
            balance,
            hash_key,
            sticky,
            health: None,
            passive: Passive::default(),
            slow_start: Duration::ZERO,
            retries: 2,
            retry_on: RetryOn::default(),
            retry_budget_percent: 20,
            retry_budget_floor: 10,
            latency_window: Duration::from_secs(10),
            queue_timeout: Duration::from_secs(2),
            protocol: ServerProtocol::Http1,
            tls: None,
            servers,
            cache: None,
        }
    }

    /// A server of `VALID`, without a connection limit.
    fn server(name: &str, address: &str, weight: u32, state: ServerState) -> ServerConfig {
        ServerConfig {
            name: name.into(),
            addr: addr(address).into(),
            weight,
            state,
            max_connections: 0,
            sni: None,
        }
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
                    defer_accept: Duration::ZERO,
                    pool: 0,
                    max_connections: 0,
                    access_log: None,
                    upgrade: UpgradeProtocols::new(["websocket"]),
                    tls: None,
                    redirect_https: None,
                    access: None,
                    h2c: false,
                    rate_limit: None,
                },
                ListenerConfig {
                    name: "internal".into(),
                    bind: addr("[::1]:0"),
                    backlog: 4096,
                    defer_accept: Duration::ZERO,
                    pool: 1,
                    max_connections: 0,
                    access_log: None,
                    upgrade: UpgradeProtocols::new(["websocket"]),
                    tls: None,
                    redirect_https: None,
                    access: None,
                    h2c: false,
                    rate_limit: None,
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
                tls_handshake: Duration::from_secs(10),
                tunnel_idle: Duration::from_secs(3600),
            },
            limits: Limits {
                max_header_bytes: 16384,
                max_body_bytes: 1_048_576,
                max_idle_per_server: Some(8),
                max_client_connections: None,
                max_connections_per_client: 0,
            },
            http2: crate::config::Http2Limits::default(),
            buffering: Buffering::default(),
            cache: crate::config::CacheSettings::default(),
            compression: None,
            pools: vec![
                pool(
                    "app",
                    Balance::LeastConn,
                    HashKey::SourceIp,
                    None,
                    vec![
                        server("a", "127.0.0.1:9001", 1, ServerState::Ready),
                        server("b", "127.0.0.1:9002", 2, ServerState::Ready),
                    ],
                ),
                pool(
                    "api",
                    Balance::P2c,
                    HashKey::SourceIp,
                    None,
                    vec![server("x", "10.0.0.7:80", 0, ServerState::Ready)],
                ),
                pool(
                    "shop",
                    Balance::Hash,
                    HashKey::Header("x-user".into()),
                    Some(StickyConfig {
                        cookie: "SHOP".into(),
                        key_env: Some("SHOP_STICKY_KEY".into()),
                        max_age: Some(Duration::from_secs(3600)),
                    }),
                    vec![
                        server("s1", "127.0.0.1:9101", 1, ServerState::Ready),
                        server("s2", "127.0.0.1:9102", 1, ServerState::Drain),
                    ],
                ),
            ],
            routes: Arc::new(vec![
                RouteConfig {
                    host: Some(HostPattern::Subdomains(".example.com".into())),
                    path_prefix: Some("/api/".into()),
                    pool: Some(1),
                    answer: None,
                    rewrite: None,
                    timeouts: ExchangeTimeouts {
                        backend_response: Duration::from_secs(45),
                        backend_read: Duration::from_secs(60),
                        request: None,
                    },
                    buffering: RouteBuffering::default(),
                    cache: crate::config::RouteCache::Pool,
                    compression: None,
                    rate_limit: None,
                    when: None,
                    access: None,
                    headers: None,
                },
                RouteConfig {
                    host: Some(HostPattern::Exact("shop.example.com".into())),
                    path_prefix: None,
                    pool: Some(2),
                    answer: None,
                    rewrite: None,
                    timeouts: ExchangeTimeouts {
                        backend_response: Duration::from_secs(120),
                        backend_read: Duration::from_secs(600),
                        request: None,
                    },
                    buffering: RouteBuffering::default(),
                    cache: crate::config::RouteCache::Pool,
                    compression: None,
                    rate_limit: None,
                    when: None,
                    access: None,
                    headers: None,
                },
            ]),
            admin: None,
            log: LogSettings {
                level: LogLevel::Info,
                format: LogFormat::Text,
            },
            ticket_keys: Default::default(),
            acme_state_dir: "/var/lib/herdsman/acme".into(),
            rate_limit_redis: None,
            warnings: Vec::new(),
            real_ip: None,
            headers: None,
            request_id: None,
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
        assert_eq!(config.pools[0].balance, Balance::PeakEwma);
        assert_eq!(config.pools[0].servers[0].weight, 1);
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
                    r#"pool[0].servers[1].addr: missing; write e.g. addr = "127.0.0.1:9001" or addr = "unix:/run/app.sock""#
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
}
