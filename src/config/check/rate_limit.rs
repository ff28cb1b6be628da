//! `[route.rate_limit]` and `[listener.rate_limit]`: a rate ("100/s", "6000/m", "10/h"), a
//! burst, a key (`client`, `header:NAME`, `cookie:NAME`, `route`) and the keys kept; and
//! `[rate_limit]`, the Redis server that keeps their counts.

use std::time::Duration;

use toml::Spanned;

use super::primitives::{quoted, Zero};
use super::{Checker, Table};
use crate::config::rate_limit::{LimitKey, RateLimitRule, RedisSettings, DEFAULT_MAX_KEYS};
use crate::config::raw::{RawRateLimit, RawRateLimitSettings};
use crate::config::token::is_token;

/// `[rate_limit] timeout` when not written.
const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_millis(20);

/// The most requests a key may make a second: one a microsecond, the GCRA table's resolution.
const FASTEST_PER_SECOND: u64 = 1_000_000;

impl Checker {
    /// `[rate_limit]`: `redis` (required), `timeout`, `on_redis_error`.
    pub(super) fn rate_limit_settings(
        &mut self,
        raw: &Spanned<RawRateLimitSettings>,
    ) -> Option<RedisSettings> {
        let table = Table {
            path: "rate_limit".to_string(),
            line: self.lines.line_of(raw.span().start),
        };
        let raw = raw.get_ref();
        let timeout = self.duration(
            "rate_limit.timeout",
            &raw.timeout,
            DEFAULT_REDIS_TIMEOUT,
            Zero::Refused,
        );
        let fail_open = match &raw.on_redis_error {
            None => true,
            Some(word) => match word.get_ref().as_str() {
                "allow" => true,
                "deny" => false,
                other => {
                    let why = r#"unknown; accepted: "allow" (the default) or "deny""#;
                    self.reject(
                        "rate_limit.on_redis_error",
                        word.span(),
                        &quoted(other),
                        why,
                    );
                    true
                }
            },
        };
        let how = r#"write the Redis server, e.g. redis = "redis://127.0.0.1:6379""#;
        let url = self.required(&table, "redis", &raw.redis, how)?;
        let addr = url
            .get_ref()
            .strip_prefix("redis://")
            .and_then(|rest| rest.trim_end_matches('/').parse().ok());
        let Some(addr) = addr else {
            let why =
                "not redis://ADDRESS:PORT with an IP address, e.g. \"redis://127.0.0.1:6379\"";
            self.reject("rate_limit.redis", url.span(), &quoted(url.get_ref()), why);
            return None;
        };
        Some(RedisSettings {
            addr,
            timeout,
            fail_open,
        })
    }

    /// A route's or listener's `rate_limit` table, named `name` in the metrics and the answers.
    pub(super) fn rate_limit(
        &mut self,
        table: &Table,
        raw: &Option<Box<Spanned<RawRateLimit>>>,
        name: &str,
    ) -> Option<Box<RateLimitRule>> {
        let raw = raw.as_ref()?;
        let limit_table = Table {
            path: table.key("rate_limit"),
            line: self.lines.line_of(raw.span().start),
        };
        let raw = raw.get_ref();
        let (count, period) = self.rate(&limit_table, &raw.rate);
        let burst = self.integer(
            &limit_table.key("burst"),
            &raw.burst,
            1..=1_000_000,
            "1 to 1000000 (default: the rate's count)",
            count,
        );
        let key = self.limit_key(&limit_table, &raw.key);
        let max_keys = self.integer(
            &limit_table.key("max_keys"),
            &raw.max_keys,
            1..=100_000_000,
            "1 to 100000000 (default 100000)",
            DEFAULT_MAX_KEYS,
        );
        Some(Box::new(RateLimitRule {
            name: name.to_string(),
            count,
            period,
            burst,
            key,
            max_keys,
        }))
    }

    /// `rate`: required, `N/s`, `N/m` or `N/h` with N from 1; at most one a microsecond.
    fn rate(&mut self, table: &Table, raw: &Option<Spanned<String>>) -> (u32, Duration) {
        let stand_in = (1, Duration::from_secs(1));
        let how = r#"write requests per second, minute or hour, e.g. rate = "100/s" or "6000/m""#;
        let Some(raw) = self.required(table, "rate", raw, how) else {
            return stand_in;
        };
        let text = raw.get_ref().trim();
        let parsed = text.split_once('/').and_then(|(count, unit)| {
            let count: u32 = count.trim().parse().ok().filter(|&count| count > 0)?;
            let seconds = match unit.trim() {
                "s" | "second" => 1,
                "m" | "minute" => 60,
                "h" | "hour" => 3600,
                _ => return None,
            };
            Some((count, seconds))
        });
        let why = match parsed {
            Some((count, seconds)) if u64::from(count) <= FASTEST_PER_SECOND * seconds => {
                return (count, Duration::from_secs(seconds));
            }
            Some(_) => {
                "faster than one request a microsecond; accepted: up to 1000000/s".to_string()
            }
            None => format!("not a rate; {how}"),
        };
        self.reject(&table.key("rate"), raw.span(), &quoted(raw.get_ref()), why);
        stand_in
    }

    /// `key`: `client` (the default), `route`, `header:NAME` or `cookie:NAME`.
    fn limit_key(&mut self, table: &Table, raw: &Option<Spanned<String>>) -> LimitKey {
        let Some(raw) = raw else {
            return LimitKey::Client;
        };
        let text = raw.get_ref().as_str();
        let key = match text.split_once(':') {
            None if text == "client" => Some(LimitKey::Client),
            None if text == "route" => Some(LimitKey::Route),
            Some(("header", name)) if is_token(name) => {
                Some(LimitKey::Header(name.to_ascii_lowercase()))
            }
            Some(("cookie", name)) if is_token(name) => Some(LimitKey::Cookie(name.to_string())),
            _ => None,
        };
        if let Some(key) = key {
            return key;
        }
        self.reject(
            &table.key("key"),
            raw.span(),
            &quoted(text),
            r#"not a key; accepted: "client", "route", "header:NAME" or "cookie:NAME" (e.g. "header:X-Api-Key")"#,
        );
        LimitKey::Client
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{only_problem, problem, MINIMAL};
    use crate::config::load::from_toml;

    /// MINIMAL with a route carrying `lines` as its `[route.rate_limit]` (its table on line 13,
    /// `lines` from line 14).
    fn with_limit(lines: &str) -> String {
        format!("{MINIMAL}\n[[route]]\npool = \"app\"\n[route.rate_limit]\n{lines}\n")
    }

    #[test]
    fn a_limit_reads_its_rate_burst_key_and_keys_kept() {
        let text = with_limit("rate = \"6000/m\"\nburst = 20\nkey = \"header:X-Api-Key\"");
        let config = from_toml(&text, "t").unwrap();
        let rule = config.routes[0].rate_limit.as_deref().unwrap();
        assert_eq!(rule.name, "route[0]");
        assert_eq!((rule.count, rule.period), (6000, Duration::from_secs(60)));
        assert_eq!(rule.interval_micros(), 10_000);
        assert_eq!(rule.burst, 20);
        assert_eq!(rule.key, LimitKey::Header("x-api-key".into()));
        assert_eq!(rule.max_keys, DEFAULT_MAX_KEYS);
        assert_eq!(rule.rate_text(), "6000/m");
        // The burst is one period's worth unless written; the key the client's address.
        let text = with_limit("rate = \"100/s\"");
        let config = from_toml(&text, "t").unwrap();
        let rule = config.routes[0].rate_limit.as_deref().unwrap();
        assert_eq!((rule.burst, rule.key.clone()), (100, LimitKey::Client));
    }

    #[test]
    fn the_redis_settings_default_to_20ms_and_failing_open() {
        let text = format!("{MINIMAL}\n[rate_limit]\nredis = \"redis://127.0.0.1:6379\"\n");
        let settings = from_toml(&text, "t").unwrap().rate_limit_redis.unwrap();
        assert_eq!(settings.addr, "127.0.0.1:6379".parse().unwrap());
        assert_eq!(settings.timeout, Duration::from_millis(20));
        assert!(settings.fail_open);
        let text = format!(
            "{MINIMAL}\n[rate_limit]\nredis = \"redis://[::1]:7000/\"\ntimeout = \"5ms\"\non_redis_error = \"deny\"\n"
        );
        let settings = from_toml(&text, "t").unwrap().rate_limit_redis.unwrap();
        assert_eq!(settings.addr, "[::1]:7000".parse().unwrap());
        assert!(!settings.fail_open);
        let bad = only_problem(&format!("{MINIMAL}\n[rate_limit]\nredis = \"localhost\"\n"));
        assert_eq!(bad.key, "rate_limit.redis");
        assert_eq!(bad.line, Some(12));
        let missing = only_problem(&format!("{MINIMAL}\n[rate_limit]\ntimeout = \"1s\"\n"));
        assert_eq!(
            (missing.key.as_str(), missing.line),
            ("rate_limit.redis", Some(11))
        );
        let word = only_problem(&format!(
            "{MINIMAL}\n[rate_limit]\nredis = \"redis://127.0.0.1:1\"\non_redis_error = \"maybe\"\n"
        ));
        assert_eq!(word.key, "rate_limit.on_redis_error");
    }

    #[test]
    fn a_listener_limit_is_named_after_its_listener() {
        let text = MINIMAL.replacen(
            "pool = \"app\"\n",
            "pool = \"app\"\n[listener.rate_limit]\nrate = \"5/s\"\nkey = \"route\"\n",
            1,
        );
        let config = from_toml(&text, "t").unwrap();
        let rule = config.listeners[0].rate_limit.as_deref().unwrap();
        assert_eq!(rule.name, "listener web");
        assert_eq!(rule.key, LimitKey::Route);
    }

    #[test]
    fn bad_rates_and_keys_are_refused_with_key_and_line() {
        let text = with_limit("rate = \"abc\"");
        let rate = only_problem(&text);
        assert_eq!(rate.key, "route[0].rate_limit.rate");
        assert_eq!(rate.line, Some(14));
        assert!(rate.message.contains("not a rate"), "{}", rate.message);
        assert_eq!(
            only_problem(&with_limit("rate = \"10/s\"\nkey = \"foo:\"")),
            problem(
                "route[0].rate_limit.key",
                15,
                r#"route[0].rate_limit.key = "foo:": not a key; accepted: "client", "route", "header:NAME" or "cookie:NAME" (e.g. "header:X-Api-Key")"#
            )
        );
        assert_eq!(
            only_problem(&with_limit("rate = \"10/s\"\nkey = \"header:\"")).key,
            "route[0].rate_limit.key"
        );
        let fast = only_problem(&with_limit("rate = \"2000000/s\""));
        assert!(fast.message.contains("microsecond"), "{}", fast.message);
        let zero = only_problem(&with_limit("rate = \"0/s\""));
        assert!(zero.message.contains("not a rate"), "{}", zero.message);
        let missing = only_problem(&with_limit("burst = 5"));
        assert_eq!(missing.key, "route[0].rate_limit.rate");
        assert_eq!(missing.line, Some(13));
        let burst = only_problem(&with_limit("rate = \"1/s\"\nburst = 0"));
        assert_eq!(burst.key, "route[0].rate_limit.burst");
        let unknown = only_problem(&with_limit("rate = \"1/s\"\nsize = 3"));
        assert!(
            unknown.message.contains("unknown field `size`"),
            "{}",
            unknown.message
        );
    }
}
