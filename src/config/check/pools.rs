//! `[[pool]]`s: balance and hash key, sticky sessions (and that no two sticky pools share a
//! cookie), retries, queueing and the servers with their weights and states; a pool's health
//! checks are in `health.rs`.

use std::collections::HashMap;
use std::time::Duration;

use toml::Spanned;

use super::primitives::{is_token, quoted, Zero};
use super::words::{BALANCES, RETRY_CONDITIONS, SERVER_PROTOCOLS, SERVER_STATES};
use super::{Checker, Table};
use crate::config::problem::ConfigProblem;
use crate::config::raw::{RawPool, RawPoolCache, RawPoolTls, RawServer, RawSticky};
use crate::config::{
    Balance, HashKey, HealthKind, Passive, PoolCache, PoolConfig, RetryOn, ServerConfig,
    ServerProtocol, StickyConfig, POISONING_FIELDS,
};

/// A server's `weight` when not written (see `ServerConfig::weight`).
const DEFAULT_WEIGHT: u32 = 1;

/// Ends the message for a pool whose `servers` is missing or empty.
const NEED_A_SERVER: &str =
    r#"a pool needs at least one server, e.g. servers = [{ name = "a", addr = "127.0.0.1:9001" }]"#;

/// `latency_window` when not written: long enough that one slow answer among many fast ones is
/// soon outweighed, short enough that a server that recovers regains its share within seconds.
const DEFAULT_LATENCY_WINDOW: Duration = Duration::from_secs(10);

/// The shortest `latency_window`: a server is probed every tenth of it (every 10 ms here), which
/// is already a request every 10 ms to a server known to be slow.
const LEAST_LATENCY_WINDOW: Duration = Duration::from_millis(100);

/// The longest `latency_window`: a server that recovers takes about that long to regain its
/// share.
const MOST_LATENCY_WINDOW: Duration = Duration::from_secs(600);

/// `[pool.sticky] cookie` when not written.
const DEFAULT_STICKY_COOKIE: &str = "HERDSMAN";

impl Checker {
    pub(super) fn pool(&mut self, table: &Table, pool: &RawPool) -> PoolConfig {
        let name = self.name(table, &pool.name, "app");
        let balance = self.word(&table.key("balance"), &pool.balance, &BALANCES);
        let protocol = self.word(&table.key("protocol"), &pool.protocol, &SERVER_PROTOCOLS);
        let sub_table = |checker: &Self, field: &str, start: usize| Table {
            path: table.key(field),
            line: checker.lines.line_of(start),
        };
        let checked = PoolConfig {
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
            latency_window: self.latency_window(table, &pool.latency_window, balance),
            queue_timeout: self.duration(
                &table.key("queue_timeout"),
                &pool.queue_timeout,
                Duration::from_secs(2),
                Zero::Allowed,
            ),
            protocol,
            tls: match (&pool.tls, protocol) {
                (Some(_), ServerProtocol::H2c) => {
                    let why = "h2c is HTTP/2 in cleartext; for HTTP/2 over TLS write \"h2\", or \
                               remove [pool.tls]";
                    let value = pool.protocol.as_ref().expect("h2c was written");
                    self.reject(&table.key("protocol"), value.span(), "\"h2c\"", why);
                    None
                }
                (Some(tls), _) => {
                    let tls_table = sub_table(self, "tls", tls.span().start);
                    self.pool_tls(&tls_table, tls.get_ref(), protocol)
                }
                // HTTP/2 over TLS with the defaults an empty [pool.tls] has.
                (None, ServerProtocol::H2) => {
                    let at = pool.protocol.as_ref().map_or(0, |p| p.span().start);
                    let tls_table = sub_table(self, "tls", at);
                    self.pool_tls(&tls_table, &RawPoolTls::default(), protocol)
                }
                (None, _) => None,
            },
            servers: self.servers(table, &pool.servers),
            cache: pool.cache.as_ref().and_then(|cache| {
                let cache_table = sub_table(self, "cache", cache.span().start);
                self.pool_cache(&cache_table, cache.get_ref())
            }),
        };
        self.server_names(table, pool, &checked);
        let grpc_check = matches!(
            checked.health.as_ref().map(|h| &h.kind),
            Some(HealthKind::Grpc { .. })
        );
        if grpc_check && !protocol.is_http2() {
            let check = pool
                .health
                .as_ref()
                .and_then(|h| h.get_ref().check.as_ref());
            if let Some(check) = check {
                let why = "a gRPC check speaks HTTP/2: the pool needs protocol = \"h2c\" \
                           (or \"h2\" over TLS)";
                self.reject(&table.key("health.check"), check.span(), "\"grpc\"", why);
            }
        }
        checked
    }

    /// `[pool.cache]`: `None` when `enabled = false`.
    pub(super) fn pool_cache(&mut self, table: &Table, raw: &RawPoolCache) -> Option<PoolCache> {
        let default = PoolCache::default();
        let key_headers = self.field_names(table, "key_headers", &raw.key_headers);
        let key_cookies = self.cookie_names(table, &raw.key_cookies);
        let mut forward_unkeyed = self.field_names(table, "forward_unkeyed", &raw.forward_unkeyed);
        forward_unkeyed.retain(|name| {
            let line = raw.forward_unkeyed.as_ref().map(|names| {
                let at = names
                    .get_ref()
                    .iter()
                    .find(|raw| raw.get_ref().eq_ignore_ascii_case(name));
                self.lines
                    .line_of(at.map_or(names.span(), |raw| raw.span()).start)
            });
            let key = table.key("forward_unkeyed");
            if !POISONING_FIELDS.contains(&name.as_str()) {
                self.problems.push(ConfigProblem {
                    message: format!(
                        "{key}: {name:?} is forwarded anyway; only these are taken out of a \
                         cached pool's requests unless listed here: {}",
                        POISONING_FIELDS.join(", ")
                    ),
                    key,
                    line,
                });
                return false;
            }
            if key_headers.contains(name) {
                return false;
            }
            self.warnings.push(ConfigProblem {
                message: format!(
                    "{key}: {name} goes to the servers without being in the cache key: a client \
                     that sends it can make a server answer for another host or path, and the \
                     answer is stored for everyone (add it to key_headers instead)"
                ),
                key,
                line,
            });
            true
        });
        let stripped = POISONING_FIELDS
            .into_iter()
            .filter(|name| {
                !key_headers.iter().any(|keyed| keyed == name)
                    && !forward_unkeyed.iter().any(|forwarded| forwarded == name)
            })
            .collect();
        let checked = PoolCache {
            max_object_size: self.size(
                &table.key("max_object_size"),
                &raw.max_object_size,
                1..=(u64::from(u16::MAX) << 10) - (1 << 10),
                "1 byte to 67107840 (64 MiB less 1 KiB), as bytes or with a unit, e.g. \"16MiB\" \
                 (the default)",
                default.max_object_size,
            ),
            default_ttl: self.optional_duration(
                &table.key("default_ttl"),
                &raw.default_ttl,
                "2m",
                "no heuristic freshness (the default)",
            ),
            negative_ttl: self.optional_duration(
                &table.key("negative_ttl"),
                &raw.negative_ttl,
                "10s",
                "404 and 410 stored only with explicit freshness (the default)",
            ),
            grace: self.duration(
                &table.key("grace"),
                &raw.grace,
                Duration::ZERO,
                Zero::Allowed,
            ),
            store_set_cookie: raw
                .store_set_cookie
                .as_ref()
                .is_some_and(|store| *store.get_ref()),
            key_headers,
            key_cookies,
            forward_unkeyed,
            stripped,
            cache_status: raw.cache_status.as_ref().is_some_and(|on| *on.get_ref()),
            lock_timeout: self.duration(
                &table.key("lock_timeout"),
                &raw.lock_timeout,
                default.lock_timeout,
                Zero::Allowed,
            ),
        };
        let enabled = raw.enabled.as_ref().is_none_or(|on| *on.get_ref());
        enabled.then_some(checked)
    }

    /// A list of request field names at `name` in `table` (lower case); each that is not a
    /// field name is refused.
    fn field_names(
        &mut self,
        table: &Table,
        name: &str,
        raw: &Option<Spanned<Vec<Spanned<String>>>>,
    ) -> Vec<String> {
        let why = format!("not a field name; e.g. {name} = [\"X-Tenant\"]");
        self.token_list(table, name, raw, &why)
            .into_iter()
            .map(|field| field.to_ascii_lowercase())
            .collect()
    }

    /// `key_cookies`: cookie names (case kept); each that is not one is refused.
    fn cookie_names(
        &mut self,
        table: &Table,
        raw: &Option<Spanned<Vec<Spanned<String>>>>,
    ) -> Vec<String> {
        let why = "not a cookie name; e.g. key_cookies = [\"lang\"]";
        self.token_list(table, "key_cookies", raw, why)
    }

    /// A list of tokens at `name` in `table`; each that is not one is refused with `why`.
    fn token_list(
        &mut self,
        table: &Table,
        name: &str,
        raw: &Option<Spanned<Vec<Spanned<String>>>>,
        why: &str,
    ) -> Vec<String> {
        let Some(names) = raw else {
            return Vec::new();
        };
        names
            .get_ref()
            .iter()
            .filter_map(|token| {
                if is_token(token.get_ref()) {
                    return Some(token.get_ref().clone());
                }
                self.reject(
                    &table.key(name),
                    token.span(),
                    &quoted(token.get_ref()),
                    why,
                );
                None
            })
            .collect()
    }

    /// No two sticky pools may share a cookie name: a browser keeps one cookie per name and path,
    /// so a client of both would send each pool the other's cookie and be re-balanced every time.
    pub(super) fn unique_sticky_cookies(&mut self, raw: &[Spanned<RawPool>], pools: &[PoolConfig]) {
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
                    let line = self.lines.line_of(raw_sticky.span().start);
                    let message = format!("{key}: the default {:?} is {why}", sticky.cookie);
                    self.report(&key, Some(line), &message);
                }
            }
        }
    }

    /// A pool's `latency_window`: only with `balance = "peak-ewma"`, from
    /// [`LEAST_LATENCY_WINDOW`] to [`MOST_LATENCY_WINDOW`].
    fn latency_window(
        &mut self,
        table: &Table,
        raw: &Option<Spanned<String>>,
        balance: Balance,
    ) -> Duration {
        let key = table.key("latency_window");
        let Some(written) = raw else {
            return DEFAULT_LATENCY_WINDOW;
        };
        if balance != Balance::PeakEwma {
            let why =
                r#"only used with balance = "peak-ewma"; remove it or set balance = "peak-ewma""#;
            self.reject(&key, written.span(), &quoted(written.get_ref()), why);
            return DEFAULT_LATENCY_WINDOW;
        }
        // Zero, and what is not a duration, are refused here with their own messages.
        let window = self.duration(&key, raw, DEFAULT_LATENCY_WINDOW, Zero::Refused);
        if !(LEAST_LATENCY_WINDOW..=MOST_LATENCY_WINDOW).contains(&window) {
            let why = r#"from "100ms" to "10m" (default "10s"): a server not measured for a tenth of it is probed, and one that recovers takes about one to regain its share"#;
            self.reject(&key, written.span(), &quoted(written.get_ref()), why);
            return DEFAULT_LATENCY_WINDOW;
        }
        window
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
                    self.reject(
                        key,
                        word.span(),
                        &quoted(text),
                        format!(
                            "unknown; accepted: {}, or a status from 500 to 599",
                            RETRY_CONDITIONS.listed()
                        ),
                    );
                }
            }
        }
        retry_on
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
            addr: self.server_addr(table, &server.addr),
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
            sni: server.sni.as_ref().map(|sni| sni.get_ref().clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{only_problem, problem, valid_with, MINIMAL, VALID};
    use crate::config::load::from_toml;
    use crate::config::RetryCondition;

    #[test]
    fn a_cached_pool_strips_poisoning_fields_unless_keyed_and_warns_of_those_it_forwards() {
        let loaded = |lines: &str| from_toml(&format!("{MINIMAL}[pool.cache]\n{lines}"), "t");
        let config = loaded("").unwrap();
        let cache = config.pools[0].cache.clone().unwrap();
        assert_eq!(cache.stripped, POISONING_FIELDS);
        assert!(config.warnings.is_empty());
        let config = loaded(
            "key_headers = [\"X-Original-URL\"]\nforward_unkeyed = [\"X-Host\", \"x-original-url\"]\n",
        )
        .unwrap();
        let cache = config.pools[0].cache.clone().unwrap();
        assert!(!cache.stripped.contains(&"x-host") && !cache.stripped.contains(&"x-original-url"));
        assert!(cache.stripped.contains(&"x-rewrite-url"));
        assert_eq!(
            cache.forward_unkeyed,
            ["x-host"],
            "a keyed field is not unkeyed"
        );
        let [warning] = &config.warnings[..] else {
            panic!("{:?}", config.warnings);
        };
        assert_eq!(warning.key, "pool[0].cache.forward_unkeyed");
        assert!(warning.message.contains("x-host"), "{}", warning.message);
        let refused = only_problem(&format!(
            "{MINIMAL}[pool.cache]\nforward_unkeyed = [\"X-Tenant\"]\n"
        ));
        assert_eq!(refused.key, "pool[0].cache.forward_unkeyed");
        assert!(
            refused.message.contains("forwarded anyway"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn a_pool_cache_is_read_key_by_key_and_refused_by_name() {
        use crate::config::load::from_toml;
        let pool_cache = |lines: &str| {
            let config = from_toml(&format!("{MINIMAL}[pool.cache]\n{lines}"), "t").unwrap();
            config.pools[0].cache.clone()
        };
        assert_eq!(from_toml(MINIMAL, "t").unwrap().pools[0].cache, None);
        assert_eq!(pool_cache(""), Some(PoolCache::default()));
        assert_eq!(pool_cache("enabled = false\n"), None);
        let every = pool_cache(
            "max_object_size = \"1MiB\"\ndefault_ttl = \"2m\"\nnegative_ttl = \"10s\"\n\
             grace = \"30s\"\nstore_set_cookie = true\nkey_headers = [\"X-Tenant\"]\n\
             cache_status = true\nlock_timeout = \"1s\"\n",
        );
        let expected = PoolCache {
            max_object_size: 1 << 20,
            default_ttl: Some(Duration::from_secs(120)),
            negative_ttl: Some(Duration::from_secs(10)),
            grace: Duration::from_secs(30),
            store_set_cookie: true,
            key_headers: vec!["x-tenant".into()],
            cache_status: true,
            lock_timeout: Duration::from_secs(1),
            ..PoolCache::default()
        };
        assert_eq!(every, Some(expected));
        for (line, key) in [
            (
                "max_object_size = \"64MiB\"",
                "pool[0].cache.max_object_size",
            ),
            ("default_ttl = \"0s\"", "pool[0].cache.default_ttl"),
            (
                "key_headers = [\"not a name\"]",
                "pool[0].cache.key_headers",
            ),
            ("grace = \"soon\"", "pool[0].cache.grace"),
        ] {
            let refused = only_problem(&format!("{MINIMAL}[pool.cache]\n{line}\n"));
            assert_eq!(refused.key, key, "{line}");
            assert_eq!(refused.line, Some(11), "{line}");
        }
        let unknown = only_problem(&format!("{MINIMAL}[pool.cache]\nttl = \"1m\"\n"));
        assert!(unknown.message.contains("ttl"), "{}", unknown.message);
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
    fn a_latency_window_is_read_for_peak_ewma_and_refused_by_key_and_line_otherwise() {
        let api = r#"balance = "p2c""#;
        let window = |value: &str| {
            valid_with(
                api,
                &format!("balance = \"peak-ewma\"\nlatency_window = {value:?}"),
            )
        };
        let config = from_toml(&window("2s"), "t").unwrap();
        assert_eq!(config.pools[1].balance, Balance::PeakEwma);
        assert_eq!(config.pools[1].latency_window, Duration::from_secs(2));
        let unwritten = from_toml(&valid_with(api, r#"balance = "peak-ewma""#), "t").unwrap();
        assert_eq!(unwritten.pools[1].latency_window, Duration::from_secs(10));
        // VALID's pool "api" has its `balance` on line 39: `latency_window` is on line 40.
        let refused = |value: &str, why: &str| {
            let message = format!("pool[1].latency_window = {value:?}: {why}");
            assert_eq!(
                only_problem(&window(value)),
                problem("pool[1].latency_window", 40, &message)
            );
        };
        refused("0s", r#"must be more than 0, e.g. "10s" (the default)"#);
        let range = r#"from "100ms" to "10m" (default "10s"): a server not measured for a tenth of it is probed, and one that recovers takes about one to regain its share"#;
        refused("50ms", range);
        refused("2h", range);
        assert!(only_problem(&window("ten seconds"))
            .message
            .starts_with(r#"pool[1].latency_window = "ten seconds": "#));
        let elsewhere = only_problem(&valid_with(
            api,
            "balance = \"p2c\"\nlatency_window = \"5s\"",
        ));
        assert_eq!(
            elsewhere,
            problem(
                "pool[1].latency_window",
                40,
                r#"pool[1].latency_window = "5s": only used with balance = "peak-ewma"; remove it or set balance = "peak-ewma""#
            )
        );
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
}
