//! `[route.rate_limit]` and `[listener.rate_limit]` as checked: how many requests a key may make
//! (a rate and a burst, enforced by `crate::rate_limit`'s GCRA) and what the key is.

use std::net::SocketAddr;
use std::time::Duration;

/// The `max_keys` a limit keeps when it does not say: 100,000 keys, 8 bytes each (800 KB).
pub const DEFAULT_MAX_KEYS: u32 = 100_000;

/// One limit on requests, checked. Two limits are the same limit (and keep their counts across
/// a reload) when every field is the same, `name` included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitRule {
    /// What the metrics, the admin API and the `RateLimit-Policy` field call it: `route[2]` or
    /// `listener web`.
    pub name: String,
    /// `rate`: `count` requests per `period` ("100/s": 100 per second), sustained.
    pub count: u32,
    pub period: Duration,
    /// `burst`: requests a key may make at once after a quiet spell. Default: `count`.
    pub burst: u32,
    pub key: LimitKey,
    /// `max_keys`: the keys kept at once; beyond them the one nearest its full burst is
    /// forgotten. Default [`DEFAULT_MAX_KEYS`].
    pub max_keys: u32,
}

impl RateLimitRule {
    /// The time one request costs (GCRA's emission interval), in microseconds, at least 1: the
    /// period divided by the count (the config refuses rates faster than one a microsecond).
    pub fn interval_micros(&self) -> u64 {
        let period = u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX);
        (period / u64::from(self.count.max(1))).max(1)
    }

    /// Its `rate` as written back: `100/s`, `6000/m`, `10/h`.
    pub fn rate_text(&self) -> String {
        let unit = match self.period.as_secs() {
            60 => "m",
            3600 => "h",
            _ => "s",
        };
        format!("{}/{unit}", self.count)
    }
}

/// What a limit counts requests by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKey {
    /// `client`: the client's address (what the access log shows).
    Client,
    /// `header:NAME`: the value of the request's field NAME (lowercased here; field names are
    /// compared ignoring case).
    Header(String),
    /// `cookie:NAME`: the value of the request's cookie NAME (compared exactly).
    Cookie(String),
    /// `route`: one count for every request the route (or listener) takes.
    Route,
}

impl LimitKey {
    /// As written in the config: `client`, `header:x-api-key`, `cookie:session`, `route`.
    pub fn text(&self) -> String {
        match self {
            LimitKey::Client => "client".to_string(),
            LimitKey::Header(name) => format!("header:{name}"),
            LimitKey::Cookie(name) => format!("cookie:{name}"),
            LimitKey::Route => "route".to_string(),
        }
    }
}

/// `[rate_limit]`: every limit's counts kept in Redis, shared by the herdsman instances that use
/// the same server, with the local limit in front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisSettings {
    /// `redis = "redis://127.0.0.1:6379"`: an IP address and port (no names, no password).
    pub addr: SocketAddr,
    /// `timeout`: the most a check may wait for Redis, connecting included. Default 20 ms.
    pub timeout: Duration,
    /// `on_redis_error = "allow"` (the default: fail open) or `"deny"`: what a request gets when
    /// Redis cannot answer within `timeout`.
    pub fail_open: bool,
}
