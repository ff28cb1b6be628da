//! `[cache]` and a pool's `[pool.cache]` as checked: the cache of responses the pools share, and
//! what each caching pool stores and for how long.

use std::path::PathBuf;
use std::time::Duration;

/// `[cache]`: the cache of responses every pool with `[pool.cache]` shares, one per process (a
/// hit rate does not divide by the worker count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// The most memory the stored responses take, in bytes: their keys, heads and bodies, and
    /// 576 bytes of bookkeeping each. Default 256 MiB. Taken only when some pool caches.
    pub memory: u64,
    /// `[cache.disk]`: the objects kept on disk as well. `None` (the default): memory only.
    pub disk: Option<DiskSettings>,
}

/// `[cache.disk]`: where the cache keeps its objects on disk, and how much of the disk they may
/// take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSettings {
    /// A folder of herdsman's own (made if missing).
    pub path: PathBuf,
    /// Bytes the files may take in all. Default 1 GiB.
    pub size: u64,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            memory: 256 << 20,
            disk: None,
        }
    }
}

/// Request fields known to make servers and frameworks answer for another host, path or scheme
/// than the request's (the "unkeyed input" of cache poisoning): a cached pool takes them out of
/// the requests it forwards unless they are in its key (`key_headers`) or the operator forwards
/// them regardless (`forward_unkeyed`).
pub const POISONING_FIELDS: [&str; 6] = [
    "x-host",
    "x-forwarded-server",
    "x-original-url",
    "x-rewrite-url",
    "x-forwarded-scheme",
    "x-http-host-override",
];

/// A route's `[route.cache]`: its own cache rules in place of its pool's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RouteCache {
    /// No `[route.cache]`: the pool's.
    #[default]
    Pool,
    /// `enabled = false`: nothing of the route is cached, whatever its pool does.
    Off,
    /// The route's requests are cached with these rules (under its pool's name in the key).
    On(Box<PoolCache>),
}

/// A pool's `[pool.cache]`: its GET responses are stored as RFC 9111 allows a shared cache, and
/// served again without a server while fresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolCache {
    /// A response with a larger body passes through without being stored. Default 16 MiB (at
    /// most 64 MiB less a KiB, the store's heaviest object).
    pub max_object_size: u64,
    /// Freshness for a response without explicit freshness whose status allows heuristic
    /// freshness (RFC 9111 §4.2.2); with `Last-Modified`, 10% of its age, at most this. `None`
    /// (the default): such responses are not stored.
    pub default_ttl: Option<Duration>,
    /// Freshness for a 404 or 410 without explicit freshness. `None` (the default): not stored.
    pub negative_ttl: Option<Duration>,
    /// How long past its freshness a response may still be served (at once, while one request
    /// refreshes it; or when its server fails), unless it forbids serving stale. Default 0.
    pub grace: Duration,
    /// Store responses that set a cookie (the stored copy never hands the cookie on). Default
    /// false: they are not stored.
    pub store_set_cookie: bool,
    /// Request fields added to the key (lower case): a response is served only to requests with
    /// the same values of them.
    pub key_headers: Vec<String>,
    /// Cookies whose values are added to the key (as the request's `Cookie` names them, case
    /// kept): a stored response is served only to requests with the same values of them.
    pub key_cookies: Vec<String>,
    /// Of [`POISONING_FIELDS`], those the operator has the pool forward though they are not in
    /// the key (lower case); `check` warns of each.
    pub forward_unkeyed: Vec<String>,
    /// Of [`POISONING_FIELDS`], those taken out of every request to the pool: neither keyed
    /// nor in `forward_unkeyed` (lower case).
    pub stripped: Vec<&'static str>,
    /// Send a `Cache-Status` field (RFC 9211) on every response of the pool. Default false.
    pub cache_status: bool,
    /// How long a miss waits for another request's fetch of the same object before it goes to
    /// the server itself. Default 5 s (nginx's `proxy_cache_lock_timeout`).
    pub lock_timeout: Duration,
}

impl Default for PoolCache {
    fn default() -> Self {
        PoolCache {
            max_object_size: 16 << 20,
            default_ttl: None,
            negative_ttl: None,
            grace: Duration::ZERO,
            store_set_cookie: false,
            key_headers: Vec::new(),
            key_cookies: Vec::new(),
            forward_unkeyed: Vec::new(),
            stripped: POISONING_FIELDS.to_vec(),
            cache_status: false,
            lock_timeout: Duration::from_secs(5),
        }
    }
}
