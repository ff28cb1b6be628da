//! Raw serde structs mirroring the TOML file, before validation, and the map from a byte offset
//! back to the dotted key path (for the toml crate's errors, which carry a span but no path).
//!
//! Every value that `check/` checks is `Spanned`, so a problem found after parsing still points
//! at its line. Integers are read as `i64` (TOML's own integer) so that a negative or oversized
//! number reaches the range check and its message, instead of a bare "expected u32".

use std::ops::Range;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// The whole file. Every top-level key is optional here; "at least one listener and one pool" is
/// checked in `check/`, where it can be reported alongside everything else.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// "auto" or an integer; any other TOML value is reported by `check/`.
    pub workers: Option<Spanned<toml::Value>>,
    pub intake: Option<Spanned<String>>,
    pub shutdown_grace: Option<Spanned<String>>,
    pub hard_stop_after: Option<Spanned<String>>,
    #[serde(default)]
    pub listener: Vec<Spanned<RawListener>>,
    #[serde(default)]
    pub timeouts: RawTimeouts,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub http2: RawHttp2,
    #[serde(default)]
    pub buffering: RawBuffering,
    #[serde(default)]
    pub cache: RawCache,
    pub compression: Option<Spanned<RawCompression>>,
    #[serde(default)]
    pub route: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    pub pool: Vec<Spanned<RawPool>>,
    pub admin: Option<Spanned<RawAdmin>>,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub tls: RawTls,
    pub rate_limit: Option<Spanned<RawRateLimitSettings>>,
    pub real_ip: Option<Spanned<RawRealIp>>,
    pub headers: Option<Spanned<RawHeaders>>,
    pub request_id: Option<Spanned<RawRequestId>>,
}

/// `[headers]` or a route's `[route.headers]`: fields changed towards servers and clients.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaders {
    pub request: Option<Spanned<RawFieldRules>>,
    pub response: Option<Spanned<RawFieldRules>>,
}

/// `[headers.request]`, `[headers.response]` (and a route's): fields set, added, removed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFieldRules {
    pub set: Option<Spanned<RawFields>>,
    pub add: Option<Spanned<RawFields>>,
    pub remove: Option<Spanned<Vec<Spanned<String>>>>,
}

/// A table of field names and values (`{ "X-Frame-Options" = "DENY" }`), in the order written,
/// each name and value with its place in the file.
#[derive(Debug, Default)]
pub struct RawFields(pub Vec<(Spanned<String>, Spanned<String>)>);

impl<'de> Deserialize<'de> for RawFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = RawFields;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    r#"a table of field names and values, e.g. { "X-Frame-Options" = "DENY" }"#,
                )
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawFields, A::Error> {
                let mut fields = Vec::new();
                while let Some(name) = map.next_key::<Spanned<String>>()? {
                    fields.push((name, map.next_value()?));
                }
                Ok(RawFields(fields))
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

/// `[request_id]`: an id for every request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequestId {
    pub header: Option<Spanned<String>>,
    pub trusted: Option<Spanned<Vec<Spanned<String>>>>,
    pub respond: Option<Spanned<bool>>,
}

/// `[rate_limit]`: the limits' counts shared through Redis.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimitSettings {
    pub redis: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub on_redis_error: Option<Spanned<String>>,
}

/// `[real_ip]`: the proxies in front trusted to name the client, and the header they name it in.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRealIp {
    pub trusted: Option<Spanned<Vec<Spanned<String>>>>,
    pub header: Option<Spanned<String>>,
}

/// `[listener.access]`, `[route.access]`: which clients are served, and how the others are told.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccess {
    pub allow: Option<Spanned<Vec<Spanned<String>>>>,
    pub deny: Option<Spanned<Vec<Spanned<String>>>>,
    pub refuse: Option<Spanned<String>>,
}

/// `[tls]`: what every TLS listener of the process shares.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub ticket_key_file: Option<Spanned<String>>,
    pub acme_state_dir: Option<Spanned<String>>,
}

/// `[log]`: herdsman's own log of errors and events (stderr).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub level: Option<Spanned<String>>,
    pub format: Option<Spanned<String>>,
}

/// `[admin]`: the admin API's listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub bind: Option<Spanned<String>>,
    pub socket: Option<Spanned<String>>,
    pub socket_mode: Option<Spanned<String>>,
    pub socket_owner: Option<Spanned<String>>,
    pub socket_group: Option<Spanned<String>>,
    pub allowed_hosts: Option<Spanned<Vec<Spanned<String>>>>,
    pub token_env: Option<Spanned<String>>,
}

/// One `[[listener]]`. Required keys are `Option` so that every missing one is reported at once.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListener {
    pub name: Option<Spanned<String>>,
    pub bind: Option<Spanned<String>>,
    pub backlog: Option<Spanned<i64>>,
    pub defer_accept: Option<Spanned<String>>,
    pub pool: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    pub access_log: Option<Spanned<String>>,
    pub access_log_format: Option<Spanned<String>>,
    pub upgrade: Option<Spanned<Vec<Spanned<String>>>>,
    pub tls: Option<Spanned<RawListenerTls>>,
    pub redirect_https: Option<Spanned<bool>>,
    pub redirect_https_port: Option<Spanned<i64>>,
    pub http2: Option<Spanned<bool>>,
    pub h2c: Option<Spanned<bool>>,
    pub rate_limit: Option<Box<Spanned<RawRateLimit>>>,
    pub access: Option<Spanned<RawAccess>>,
}

/// A listener's `[listener.tls]`: HTTPS on it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListenerTls {
    pub certificates: Option<Spanned<Vec<Spanned<RawCertificate>>>>,
    pub unknown_name: Option<Spanned<String>>,
    pub min_version: Option<Spanned<String>>,
    pub hsts: Option<Spanned<String>>,
    pub client_ca: Option<Spanned<String>>,
    pub client_auth: Option<Spanned<String>>,
    pub acme: Option<Spanned<RawAcme>>,
}

/// A listener's `[listener.tls] acme`: a certificate herdsman obtains itself.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    pub directory: Option<Spanned<String>>,
    pub contact: Option<Spanned<Vec<Spanned<String>>>>,
    pub names: Option<Spanned<Vec<Spanned<String>>>>,
    pub challenge: Option<Spanned<String>>,
    pub directory_ca: Option<Spanned<String>>,
}

/// One of `[listener.tls] certificates`: a PEM chain and its key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertificate {
    pub chain: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
}

/// One `[[route]]`. The tables a route rarely has are boxed: a config may hold 100,000 routes,
/// and unboxed they made each 336 bytes instead of 152, copied as the list grew while it was read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub host: Option<Spanned<String>>,
    pub path_prefix: Option<Spanned<String>>,
    pub pool: Option<Spanned<String>>,
    pub timeouts: Option<Box<Spanned<RawRouteTimeouts>>>,
    pub buffering: Option<Box<Spanned<RawRouteBuffering>>>,
    pub cache: Option<Box<Spanned<RawPoolCache>>>,
    pub rate_limit: Option<Box<Spanned<RawRateLimit>>>,
    /// The condition a request must also meet (`config::condition`), read by hand from its
    /// inline table so that a problem can name the key inside it.
    pub when: Option<Box<Spanned<toml::Value>>>,
    pub access: Option<Box<Spanned<RawAccess>>>,
    pub compression: Option<Box<Spanned<RawCompression>>>,
    pub headers: Option<Box<Spanned<RawHeaders>>>,
    pub redirect: Option<Box<Spanned<RawRedirect>>>,
    pub respond: Option<Box<Spanned<RawRespond>>>,
    pub rewrite: Option<Box<Spanned<RawRewrite>>>,
}

/// `[route.redirect]`: the route answers with a redirect built from the request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedirect {
    pub status: Option<Spanned<i64>>,
    pub to: Option<Spanned<String>>,
    pub query: Option<Spanned<String>>,
}

/// `[route.respond]`: the route answers with a fixed response.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRespond {
    pub status: Option<Spanned<i64>>,
    pub content_type: Option<Spanned<String>>,
    pub body: Option<Spanned<String>>,
    pub body_file: Option<Spanned<String>>,
    /// Field names and values; written in the order of their names.
    pub headers: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
}

/// `[route.rewrite]`: the target the route's server is sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRewrite {
    pub path_prefix: Option<Spanned<String>>,
    pub path_regex: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
}

/// `[route.rate_limit]` or `[listener.rate_limit]`: a limit on requests per key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    pub rate: Option<Spanned<String>>,
    pub burst: Option<Spanned<i64>>,
    pub key: Option<Spanned<String>>,
    pub max_keys: Option<Spanned<i64>>,
}

/// `[compression]`, and a route's `[route.compression]` over it: each key a route writes
/// replaces the top-level one.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCompression {
    pub enabled: Option<Spanned<bool>>,
    pub algorithms: Option<Spanned<Vec<Spanned<String>>>>,
    pub types: Option<Spanned<Vec<Spanned<String>>>>,
    /// Bytes, or a size with a unit ("1KiB").
    pub min_length: Option<Spanned<toml::Value>>,
    pub zstd_level: Option<Spanned<i64>>,
    pub brotli_level: Option<Spanned<i64>>,
    pub gzip_level: Option<Spanned<i64>>,
}

/// A route's `[route.buffering]`: request or response buffering turned off for it (streaming
/// uploads, gRPC, long polls).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteBuffering {
    pub request: Option<Spanned<bool>>,
    pub response: Option<Spanned<bool>>,
}

/// A route's `[route.timeouts]`: the exchange timeouts it sets apart from `[timeouts]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteTimeouts {
    pub backend_response: Option<Spanned<String>>,
    pub backend_read: Option<Spanned<String>>,
    pub request: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeouts {
    pub connect: Option<Spanned<String>>,
    pub tls_handshake: Option<Spanned<String>>,
    pub client_header: Option<Spanned<String>>,
    pub client_idle: Option<Spanned<String>>,
    pub backend_response: Option<Spanned<String>>,
    pub backend_read: Option<Spanned<String>>,
    pub request: Option<Spanned<String>>,
    pub backend_idle: Option<Spanned<String>>,
    pub tunnel_idle: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_header_bytes: Option<Spanned<i64>>,
    pub max_body_bytes: Option<Spanned<i64>>,
    /// "auto" or a number.
    pub max_idle_per_server: Option<Spanned<toml::Value>>,
    /// "auto" or a number.
    pub max_client_connections: Option<Spanned<toml::Value>>,
    pub max_connections_per_client: Option<Spanned<i64>>,
}

/// `[http2]`: the limits of HTTP/2 client connections.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp2 {
    pub max_concurrent_streams: Option<Spanned<i64>>,
    pub stream_window: Option<Spanned<i64>>,
    pub connection_window: Option<Spanned<i64>>,
    pub max_pending_resets: Option<Spanned<i64>>,
    pub frame_burst: Option<Spanned<i64>>,
    pub frames_per_stream: Option<Spanned<i64>>,
    pub frames_per_second: Option<Spanned<i64>>,
    pub reset_burst: Option<Spanned<i64>>,
    pub resets_per_second: Option<Spanned<i64>>,
    pub max_requests_per_connection: Option<Spanned<i64>>,
    pub max_frame_size: Option<Spanned<i64>>,
    pub max_header_list_size: Option<Spanned<i64>>,
    pub header_table_size: Option<Spanned<i64>>,
}

/// `[buffering]`: what herdsman reads from a client before a server is involved.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBuffering {
    pub request_buffer_memory: Option<Spanned<i64>>,
    pub request_min_rate: Option<Spanned<i64>>,
    pub request_stream_rate: Option<Spanned<i64>>,
    pub request_min_rate_grace: Option<Spanned<String>>,
    pub request_buffer_max: Option<Spanned<i64>>,
    pub response_buffer_memory: Option<Spanned<i64>>,
    pub response_buffer_max: Option<Spanned<i64>>,
    pub response_min_rate: Option<Spanned<i64>>,
    pub response_min_rate_window: Option<Spanned<String>>,
    pub memory_total: Option<Spanned<i64>>,
    pub disk_total: Option<Spanned<i64>>,
    pub temp_dir: Option<Spanned<String>>,
}

/// `[cache]`: the process's cache of responses, which every pool with `[pool.cache]` shares.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// Bytes, or a size with a unit ("256MiB").
    pub memory: Option<Spanned<toml::Value>>,
    pub disk: Option<Spanned<RawCacheDisk>>,
}

/// `[cache.disk]`: the cache's objects kept on disk as well, across restarts.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCacheDisk {
    pub path: Option<Spanned<String>>,
    pub size: Option<Spanned<toml::Value>>,
}

/// A pool's `[pool.cache]`: its responses are kept and served again.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPoolCache {
    pub enabled: Option<Spanned<bool>>,
    pub max_object_size: Option<Spanned<toml::Value>>,
    pub default_ttl: Option<Spanned<String>>,
    pub negative_ttl: Option<Spanned<String>>,
    pub grace: Option<Spanned<String>>,
    pub store_set_cookie: Option<Spanned<bool>>,
    pub key_headers: Option<Spanned<Vec<Spanned<String>>>>,
    pub key_cookies: Option<Spanned<Vec<Spanned<String>>>>,
    pub forward_unkeyed: Option<Spanned<Vec<Spanned<String>>>>,
    pub cache_status: Option<Spanned<bool>>,
    pub lock_timeout: Option<Spanned<String>>,
}

/// One `[[pool]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    pub name: Option<Spanned<String>>,
    pub balance: Option<Spanned<String>>,
    pub hash_key: Option<Spanned<String>>,
    pub servers: Option<Spanned<Vec<Spanned<RawServer>>>>,
    pub slow_start: Option<Spanned<String>>,
    pub retries: Option<Spanned<i64>>,
    pub retry_on: Option<Spanned<Vec<Spanned<String>>>>,
    pub queue_timeout: Option<Spanned<String>>,
    pub retry_budget_percent: Option<Spanned<i64>>,
    pub retry_budget_floor: Option<Spanned<i64>>,
    pub latency_window: Option<Spanned<String>>,
    pub sticky: Option<Spanned<RawSticky>>,
    pub health: Option<Spanned<RawHealth>>,
    pub passive: Option<Spanned<RawPassive>>,
    pub protocol: Option<Spanned<String>>,
    pub tls: Option<Spanned<RawPoolTls>>,
    pub cache: Option<Spanned<RawPoolCache>>,
}

/// A pool's `[pool.tls]`: TLS to its servers.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPoolTls {
    pub ca: Option<Spanned<String>>,
    pub sni: Option<Spanned<String>>,
    pub verify: Option<Spanned<bool>>,
    pub certificate: Option<Spanned<RawCertificate>>,
}

/// A pool's `[pool.health]`: active checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    pub check: Option<Spanned<String>>,
    pub service: Option<Spanned<String>>,
    pub method: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub expect: Option<Spanned<String>>,
    pub interval: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub rise: Option<Spanned<i64>>,
    pub fall: Option<Spanned<i64>>,
}

/// A pool's `[pool.passive]`: ejection on failures seen by requests.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPassive {
    pub consecutive_failures: Option<Spanned<i64>>,
    pub count_5xx: Option<Spanned<bool>>,
    pub ejection: Option<Spanned<String>>,
    pub max_ejection: Option<Spanned<String>>,
    pub max_ejected_percent: Option<Spanned<i64>>,
}

/// A pool's `[pool.sticky]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSticky {
    pub cookie: Option<Spanned<String>>,
    pub key_env: Option<Spanned<String>>,
    pub max_age: Option<Spanned<String>>,
}

/// One entry of a pool's `servers` array (an inline table).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub name: Option<Spanned<String>>,
    pub addr: Option<Spanned<String>>,
    pub weight: Option<Spanned<i64>>,
    pub state: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    pub sni: Option<Spanned<String>>,
}

/// A table whose `name` must differ from those of the other tables in its array: a listener, a
/// pool, a server.
pub trait Named {
    fn name(&self) -> Option<&Spanned<String>>;
}

impl Named for RawListener {
    fn name(&self) -> Option<&Spanned<String>> {
        self.name.as_ref()
    }
}

impl Named for RawPool {
    fn name(&self) -> Option<&Spanned<String>> {
        self.name.as_ref()
    }
}

impl Named for RawServer {
    fn name(&self) -> Option<&Spanned<String>> {
        self.name.as_ref()
    }
}

/// The dotted key path at `span` in `text` — `pool[0].servers[1].wieght` — or `None` when the text
/// does not parse as TOML at all (a syntax error has no key to name).
///
/// The toml crate points an unknown-key error at the key, a wrong-type error at the value and a
/// missing-key error at the table (its header), so all three are found here by span alone.
pub fn key_path_at(text: &str, span: Range<usize>) -> Option<String> {
    let root: Shape = toml::from_str(text).ok()?;
    let root = Spanned::new(0..text.len(), root);
    let finder = KeyFinder { text, target: span };
    let (_, path) = finder.deepest(&root, String::new(), 0)?;
    Some(path).filter(|path| !path.is_empty())
}

/// The shape of any TOML document, with the span of every value; keys are plain strings because
/// the toml crate cannot give spans for the parts of a dotted key.
enum Shape {
    Table(Vec<(String, Spanned<Shape>)>),
    Array(Vec<Spanned<Shape>>),
    Scalar,
}

struct KeyFinder<'t> {
    text: &'t str,
    target: Range<usize>,
}

impl KeyFinder<'_> {
    /// The deepest value under `node` (itself at `path`, `depth` deep) that contains the target,
    /// with its depth. Every child is searched, not only those whose span contains the target: the
    /// span of a `[[pool]]` table stops before a later `[pool.sticky]` that belongs to it.
    fn deepest(
        &self,
        node: &Spanned<Shape>,
        path: String,
        depth: usize,
    ) -> Option<(usize, String)> {
        let below = match node.get_ref() {
            Shape::Scalar => None,
            Shape::Array(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| self.deepest(item, format!("{path}[{i}]"), depth + 1))
                .max_by_key(|(depth, _)| *depth),
            Shape::Table(entries) => entries
                .iter()
                .filter_map(|(key, value)| self.deepest(value, join(&path, key), depth + 1))
                .max_by_key(|(depth, _)| *depth),
        };
        if below.is_some() {
            return below;
        }
        let (start, end) = (node.span().start, end_of(node));
        if !(start <= self.target.start && self.target.end <= end) {
            return None;
        }
        // In this value but in none of its values: one of its keys, or the value itself.
        if let Shape::Table(entries) = node.get_ref() {
            if let Some(key) = self.key_at_target(entries) {
                return Some((depth + 1, join(&path, key)));
            }
        }
        Some((depth, path))
    }

    /// The key of `entries` at the target: the one whose value follows it after only `=` and
    /// blanks. (A header such as `[pool.sticky]` is followed by a newline: it names the table.)
    fn key_at_target<'e>(&self, entries: &'e [(String, Spanned<Shape>)]) -> Option<&'e str> {
        let (key, value) = entries
            .iter()
            .filter(|(_, value)| value.span().start >= self.target.end)
            .min_by_key(|(_, value)| value.span().start)?;
        let between = self.text.get(self.target.end..value.span().start)?;
        let only_equals = between.trim_matches([' ', '\t']) == "=";
        only_equals.then_some(key.as_str())
    }
}

/// Where `node` ends in the text: a table's span is its header alone (`[timeouts]`), so a table
/// or an array reaches as far as the furthest value in it.
fn end_of(node: &Spanned<Shape>) -> usize {
    let inner = match node.get_ref() {
        Shape::Scalar => None,
        Shape::Array(items) => items.iter().map(end_of).max(),
        Shape::Table(entries) => entries.iter().map(|(_, value)| end_of(value)).max(),
    };
    inner.map_or(node.span().end, |end| end.max(node.span().end))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

/// The toml crate hands a datetime over as a one-entry map under this key.
const TOML_DATETIME_KEY: &str = "$__toml_private_datetime";

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any TOML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Scalar)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Scalar)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Scalar)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Scalar)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Scalar)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Shape::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == TOML_DATETIME_KEY {
                map.next_value::<IgnoredAny>()?;
                return Ok(Shape::Scalar);
            }
            entries.push((key, map.next_value()?));
        }
        Ok(Shape::Table(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100,000 routes are parsed at once: each field costs 100,000 of it. `cache`,
    /// `rate_limit`, `when`, `access`, `compression`, `headers`, `redirect`, `respond` and
    /// `rewrite` are boxes (8 bytes each), like `timeouts` and `buffering`, as most routes have
    /// none.
    #[test]
    fn a_route_stays_small() {
        assert_eq!(std::mem::size_of::<Spanned<RawRoute>>(), 224);
    }

    /// The path at the first occurrence of `needle` in `text`.
    fn path_at(text: &str, needle: &str) -> Option<String> {
        let start = text.find(needle).expect(needle);
        key_path_at(text, start..start + needle.len())
    }

    #[test]
    fn a_key_in_a_table_is_named_with_its_table() {
        let text = "workers = 2\n[timeouts]\nconect = \"2s\"\n";
        assert_eq!(path_at(text, "conect").as_deref(), Some("timeouts.conect"));
        assert_eq!(path_at(text, "\"2s\"").as_deref(), Some("timeouts.conect"));
        assert_eq!(path_at(text, "workers").as_deref(), Some("workers"));
    }

    #[test]
    fn arrays_of_tables_and_inline_tables_are_indexed() {
        let text = "[[listener]]\nname = \"a\"\n[timeouts]\nconnect = \"1s\"\n\
                    [[listener]]\nname = \"b\"\n\
                    [[pool]]\nname = \"p\"\nservers = [\n  { name = \"x\" },\n  { name = \"y\", wieght = 2 },\n]\n";
        assert_eq!(path_at(text, "\"b\"").as_deref(), Some("listener[1].name"));
        assert_eq!(
            path_at(text, "connect").as_deref(),
            Some("timeouts.connect")
        );
        assert_eq!(
            path_at(text, "wieght").as_deref(),
            Some("pool[0].servers[1].wieght")
        );
        assert_eq!(
            path_at(text, "{ name = \"x\" }").as_deref(),
            Some("pool[0].servers[0]")
        );
    }

    #[test]
    fn a_sub_table_header_after_an_array_of_tables_is_indexed() {
        let text =
            "[[pool]]\nname = \"a\"\n[[pool]]\nname = \"b\"\n\n[pool.sticky]\ncookie = \"H\"\n";
        assert_eq!(path_at(text, "sticky").as_deref(), Some("pool[1].sticky"));
        assert_eq!(
            path_at(text, "cookie").as_deref(),
            Some("pool[1].sticky.cookie")
        );
    }

    #[test]
    fn a_syntax_error_has_no_path() {
        assert_eq!(key_path_at("[[listener]\n", 10..11), None);
    }

    #[test]
    fn datetimes_do_not_hide_the_path() {
        let text = "when = 1979-05-27T07:32:00Z\n[limits]\nmax = 1\n";
        assert_eq!(path_at(text, "max").as_deref(), Some("limits.max"));
    }
}
