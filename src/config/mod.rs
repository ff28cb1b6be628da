//! The configuration: TOML text → raw serde structs (`raw.rs`) → checked, immutable [`Config`].
//!
//! Everything downstream reads only the types in this file: once a `Config` exists, every address
//! parsed, every duration positive, every name unique and every reference resolved. Which keys a
//! reload applies and which wait for a restart is decided in `reload_scope.rs`.

pub mod acme;
pub mod answers;
mod buffering;
pub use buffering::{Buffering, RouteBuffering};
mod cache;
pub use cache::{CacheSettings, DiskSettings, PoolCache, RouteCache, POISONING_FIELDS};
pub mod access;
pub mod certificates;
mod check;
pub mod cidr;
mod compression;
pub mod condition;
pub use compression::{Algorithm, CompressionRules};
pub mod descriptors;
mod duration;
#[cfg(test)]
mod fixtures;
pub mod headers;
mod load;
mod problem;
pub mod rate_limit;
mod raw;
mod reload_scope;
pub mod route_index;
mod server_addr;
pub mod server_tls;
pub use server_addr::ServerAddr;
mod summary;
pub mod template;
pub mod ticket_keys;
pub mod tls;
pub mod token;
pub mod upgrade;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use condition::Condition;

pub use check::is_valid_name;
pub use duration::parse_duration;
pub use load::release_freed_memory;
pub use problem::{ConfigError, ConfigProblem};
pub use reload_scope::hold_back_restart_only;
pub use route_index::RouteIndex;

/// Warnings logged at start and reload before the rest are only counted.
const LOGGED_WARNINGS: usize = 10;
pub use upgrade::UpgradeProtocols;

/// A whole, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Worker threads; "auto" resolves to the number of CPUs the process may run on. At least 1.
    pub workers: usize,
    /// How new connections reach workers. Default `balanced`.
    pub intake: IntakeMode,
    /// How long a graceful stop (SIGTERM, SIGINT) waits for requests in flight before closing
    /// them. Default 10s. The value in force when the stop begins counts (a reload applies it).
    pub shutdown_grace: Duration,
    /// After a binary upgrade hands over, how long the old process goes on serving the
    /// connections it has (downloads, streams, tunnels) before it closes those still open.
    /// `None` (the default): they run to their end. Read when the hand-over begins.
    pub hard_stop_after: Option<Duration>,
    /// At least one; names unique.
    pub listeners: Vec<ListenerConfig>,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub http2: Http2Limits,
    pub buffering: Buffering,
    /// `[cache]`: the process's cache of responses.
    pub cache: CacheSettings,
    /// `[compression]`: the answers compressed for requests no route takes (and each route's
    /// starting point); `None` while not enabled.
    pub compression: Option<Arc<CompressionRules>>,
    /// `[[route]]`s in file order; the first that matches a request picks its pool. Shared with
    /// the snapshots made of this config rather than copied (100,000 routes are some 15 MB).
    pub routes: Arc<Vec<RouteConfig>>,
    /// At least one; names unique; every listener's and route's `pool` names one of them.
    pub pools: Vec<PoolConfig>,
    /// The admin API's listener; `None` when the config has no `[admin]`.
    pub admin: Option<AdminSettings>,
    /// `[log]`: herdsman's own log.
    pub log: LogSettings,
    /// `[tls] ticket_key_file`: where the TLS session ticket keys come from (generated and
    /// rotated by herdsman, the default, or a file shared by several instances).
    pub ticket_keys: ticket_keys::TicketKeySource,
    /// `[tls] acme_state_dir`: where ACME keeps its accounts, the certificates it obtained and
    /// their keys, so that a restart serves them rather than ordering again. Default
    /// `/var/lib/herdsman/acme`; made (mode 0700) when first needed.
    pub acme_state_dir: std::path::PathBuf,
    /// `[rate_limit]`: the limits' counts kept in Redis; `None` (the default): each process
    /// counts alone.
    pub rate_limit_redis: Option<rate_limit::RedisSettings>,
    /// What the check found pointless though valid, each named by its key and line as a problem
    /// is: routes that can never match, since an earlier route takes every request they would.
    /// `herdsman check` prints them; `herdsman run` logs them at start and at each reload.
    pub warnings: Vec<ConfigProblem>,
    /// `[real_ip]`: the proxies in front whose X-Forwarded-For or Forwarded names the client.
    /// `None` (the default): the client is the TCP peer.
    pub real_ip: Option<access::RealIp>,
    /// `[headers]`: fields the requests no route takes lose and gain, towards servers and
    /// towards clients (each route's, over these, is on its `RouteConfig`). `None` (the
    /// default): none.
    pub headers: Option<Arc<headers::HeaderRules>>,
    /// `[request_id]`: an id for every request. `None` (the default): none.
    pub request_id: Option<headers::RequestIdSettings>,
}

/// `[log]`: herdsman's own log of errors and events, written to stderr through `tracing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogSettings {
    /// The least severe events written. Default `info`. `RUST_LOG`, when set, wins. Read at
    /// start; a reload that changes it says it takes effect on restart.
    pub level: LogLevel,
    /// Lines of text (the default) or one JSON object a line; either way each names the process
    /// that wrote it, so that two generations writing to one stderr during a binary upgrade are
    /// told apart. Read at start, as `level` is.
    pub format: LogFormat,
}

/// `[log] format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `[log] level`: tracing's levels, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// The word the config uses, which is also a filter `tracing_subscriber::EnvFilter` reads.
    pub fn name(self) -> &'static str {
        check::LOG_LEVELS.word_for(self)
    }
}

/// `[admin]`: where the admin API listens, whom it answers, and where its token comes from. At
/// least one of `bind` and `socket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    /// The TCP listener, if any. Without a token it may only be a loopback address.
    pub bind: Option<SocketAddr>,
    /// The UNIX socket listener, if any: other local users are kept out by its file mode.
    pub socket: Option<AdminSocket>,
    /// Host names (lowercase, no port) the API answers besides IP literals and `localhost`;
    /// a request naming any other host is refused (DNS rebinding). Default none.
    pub allowed_hosts: Vec<String>,
    /// The environment variable holding the bearer token; when set, every request on either
    /// listener must carry it.
    pub token_env: Option<String>,
}

/// `[admin] socket` and the file's mode and ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSocket {
    /// An absolute path; its directory must exist.
    pub path: std::path::PathBuf,
    /// The file's permission bits. Default 0600: only the owner (herdsman's user) may connect.
    pub mode: u32,
    /// The file's owner and group, by name or number; default herdsman's own.
    pub owner: Option<String>,
    pub group: Option<String>,
}

impl AdminSettings {
    /// The token, read from the environment now (so a restart picks up a changed secret).
    pub fn token(&self) -> Option<String> {
        let name = self.token_env.as_ref()?;
        std::env::var(name).ok().filter(|token| !token.is_empty())
    }
}

/// How a listener's new connections reach workers (see `src/intake/mod.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntakeMode {
    /// One SO_REUSEPORT socket per worker; the kernel spreads connections by hash.
    ReusePort,
    /// One shared socket, EPOLLEXCLUSIVE: one idle worker is woken per connection.
    Exclusive,
    /// One shared socket in every worker without EPOLLEXCLUSIVE: the herd, kept as a baseline.
    Shared,
    /// `exclusive`, then a hand-off to the lighter of two workers. The default.
    Balanced,
}

impl Balance {
    /// The word the config uses for this algorithm.
    pub fn name(self) -> &'static str {
        check::BALANCES.word_for(self)
    }
}

impl IntakeMode {
    /// The word the config uses for this mode.
    pub fn name(self) -> &'static str {
        check::INTAKE_MODES.word_for(self)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ListenerConfig {
    pub name: String,
    pub bind: SocketAddr,
    /// listen(2) backlog. Default 4096 (the kernel caps it at net.core.somaxconn).
    pub backlog: u32,
    /// TCP_DEFER_ACCEPT (nginx's `deferred`, HAProxy's `defer-accept`): a connection is accepted
    /// once its first bytes have come, or this long after its handshake (whole seconds, a part
    /// counting as one). Zero (the default): at once. Linux only.
    pub defer_accept: Duration,
    /// Index into `Config::pools` of the pool used when no route matches.
    pub pool: usize,
    /// Client connections open at once, over all workers; at the limit herdsman stops accepting
    /// (new connections wait in the kernel's backlog). 0 (the default): no limit.
    pub max_connections: u32,
    /// Where a line per request goes, and in which format; `None` (the default): no access log.
    pub access_log: Option<AccessLogConfig>,
    /// The protocols a request may upgrade its connection to (a 101, then a tunnel). Default
    /// `websocket`; an empty list allows none. Never HTTP/2 (`h2c`): the config check refuses
    /// it. A request offering others is forwarded as a plain request, without its Upgrade.
    pub upgrade: UpgradeProtocols,
    /// HTTPS (`[listener.tls]`): every connection starts with a TLS handshake. `None` (the
    /// default): cleartext HTTP.
    pub tls: Option<tls::ListenerTls>,
    /// `redirect_https`: a cleartext listener answers every request with a 308 to the same host
    /// and path over HTTPS, on this port (443, the default, is left out of the URL). `None`
    /// (the default): requests are served.
    pub redirect_https: Option<u16>,
    /// `[listener.access]`: which clients its requests are served for. `None` (the default): all.
    pub access: Option<access::Access>,
    /// A cleartext listener takes HTTP/2 with prior knowledge (h2c) beside HTTP/1.1, told apart
    /// by the connection preface. (A TLS listener offers HTTP/2 by ALPN: `ListenerTls::http2`.)
    pub h2c: bool,
    /// `[listener.rate_limit]`: a limit on every request the listener takes, per key, checked
    /// before a route's own. `None` (the default): none.
    pub rate_limit: Option<Box<rate_limit::RateLimitRule>>,
}

/// The `access_log` that means standard output rather than a file.
impl ListenerConfig {
    /// Its TLS as the `listening` log line says it (`ListenerTls::describe`); `None` for
    /// cleartext.
    pub fn tls_description(&self) -> Option<String> {
        let now = std::time::SystemTime::now();
        self.tls.as_ref().map(|tls| tls.describe(now))
    }
}

pub const STANDARD_OUTPUT: &str = "-";

/// A listener's access log (see `crate::access_log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogConfig {
    /// An absolute path, or [`STANDARD_OUTPUT`]. A file is opened with O_APPEND|O_CREAT, mode
    /// 0640, at start, and again by path on SIGUSR1. Several listeners may share a file (or
    /// standard output) if they share its format.
    pub path: Arc<Path>,
    /// Default `combined`.
    pub format: AccessLogFormat,
}

/// How an access log line reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// nginx's and Apache's `combined`, then herdsman's own fields as `key=value`.
    Combined,
    /// One JSON object per line.
    Json,
}

impl AccessLogFormat {
    /// The word the config uses for this format.
    pub fn name(self) -> &'static str {
        check::ACCESS_LOG_FORMATS.word_for(self)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting to a server. Default 2s. On expiry: 504.
    pub connect: Duration,
    /// From the first byte of a request head to its last. Default 10s. On expiry: 408, closed.
    pub client_header: Duration,
    /// A keep-alive client may stay silent this long between requests, and may stall a body or
    /// stop reading a response this long. Default 60s.
    pub client_idle: Duration,
    /// From sending a request to a server (after connecting) until its response head has come.
    /// Default 60s, nginx's `proxy_read_timeout`: a long-poll that answers within a minute
    /// survives it. On expiry: 504. A route may set its own (`[route.timeouts]`).
    pub backend_response: Duration,
    /// The longest a server may stay silent inside a response body (between two reads), or
    /// leave a request body unread. Default 60s: a Server-Sent Events stream with a heartbeat
    /// of less than a minute survives it. On expiry the response ends where it stands. A route
    /// may set its own.
    pub backend_read: Duration,
    /// The longest from a request head to the response head, over queueing, connecting and every
    /// retry; `None` (the default): no bound but each attempt's own. On expiry: 504, and no
    /// further retry. A route may set its own.
    pub request: Option<Duration>,
    /// An idle pooled connection to a server is closed after this long, or sooner when the
    /// server's `Keep-Alive: timeout=N` says it closes sooner. Default 4s: shorter than the 5s
    /// keep-alive of Node.js and Apache, the shortest common server defaults, so herdsman closes
    /// first. A server that closes sooner without saying so is noticed as it closes (the
    /// connection is not reused), and a request that crosses its close on the wire before the
    /// server took a byte of it goes again on a new connection.
    pub backend_idle: Duration,
    /// A TLS listener's handshake must finish within this long of the connection's accept, or
    /// the connection is closed. Default 10s.
    pub tls_handshake: Duration,
    /// A tunnel (what follows a 101: a WebSocket) through which no byte has passed either way
    /// for this long is closed, and its access-log line says `ended=idle_timeout`. Default 1h
    /// (HAProxy's advice for `timeout tunnel`): a WebSocket that pings survives it, one whose
    /// peers vanished without a close does not hold its sockets for ever.
    pub tunnel_idle: Duration,
}

/// The timeouts of one exchange with a server: `[timeouts]`, or a route's own where it sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangeTimeouts {
    pub backend_response: Duration,
    pub backend_read: Duration,
    pub request: Option<Duration>,
}

impl Timeouts {
    /// The exchange timeouts of a request no route sets its own for.
    pub fn exchange(&self) -> ExchangeTimeouts {
        ExchangeTimeouts {
            backend_response: self.backend_response,
            backend_read: self.backend_read,
            request: self.request,
        }
    }
}

/// `[http2]`: what an HTTP/2 client connection may hold and spend. A new connection takes the
/// values in force when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams a client may have open at once. Default 128
    /// (nginx's and HAProxy's).
    pub max_concurrent_streams: u32,
    /// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE), bytes. Default 1 MiB.
    pub stream_window: u32,
    /// The connection's receive window, bytes. Default 4 MiB.
    pub connection_window: u32,
    /// Streams the client may reset before herdsman began serving them (such a stream is never
    /// routed), each second earning `resets_per_second` back; more is GOAWAY ENHANCE_YOUR_CALM
    /// (the rapid-reset defence). Default 20.
    pub max_pending_resets: u32,
    /// The budget of frames that ask nothing (SETTINGS, PING, PRIORITY, WINDOW_UPDATE,
    /// RST_STREAM, empty DATA and CONTINUATION): what a connection may spend at once, and what
    /// each new stream and each second earn. Defaults 1000, 10, 100.
    pub frame_burst: u32,
    pub frames_per_stream: u32,
    pub frames_per_second: u32,
    /// The budget of streams the client resets (RST_STREAM), beside the frame budget, since a
    /// stream opened earns more frames than its reset costs: what a connection may reset at
    /// once, and what each second earns back. Spent: GOAWAY ENHANCE_YOUR_CALM (rapid reset on
    /// streams already taken, CVE-2023-44487). Defaults 100 and 10.
    pub reset_burst: u32,
    pub resets_per_second: u32,
    /// Streams (requests) one connection may open; at the last, GOAWAY NO_ERROR and the streams
    /// in flight finish, as an HTTP/1.1 keep-alive limit (nginx's `keepalive_requests`, which
    /// HTTP/2 follows there too). Default 1000.
    pub max_requests_per_connection: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame payload a client may send, bytes. Default 16384
    /// (the protocol's least, every client's default).
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a request's decoded header list, bytes (RFC 9113 §6.5.2,
    /// each field's name and value and 32). Larger gets 431; four times larger (an HPACK bomb:
    /// a few bytes that decode to a large list) ends the connection. Default `None`:
    /// `[limits] max_header_bytes`, as HTTP/1.1's heads.
    pub max_header_list_size: Option<u32>,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table the client may fill, bytes; a table
    /// size update above it is a connection error. Default 4096 (the protocol's).
    pub header_table_size: u32,
}

impl Default for Http2Limits {
    fn default() -> Self {
        Http2Limits {
            max_concurrent_streams: 128,
            stream_window: 1 << 20,
            connection_window: 4 << 20,
            max_pending_resets: 20,
            frame_burst: 1000,
            frames_per_stream: 10,
            frames_per_second: 100,
            reset_burst: 100,
            resets_per_second: 10,
            max_requests_per_connection: 1000,
            max_frame_size: 16_384,
            max_header_list_size: None,
            header_table_size: 4096,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line + headers) accepted; larger: 431. Default 65536.
    pub max_header_bytes: usize,
    /// Largest request body accepted; larger: 413. 0 means no limit (the default).
    pub max_body_bytes: u64,
    /// Idle connections kept per server per worker at most. Default `None`: as many as recent
    /// use calls for (`upstream::idle`).
    pub max_idle_per_server: Option<usize>,
    /// Client connections open at once over the process. Default `None` ("auto"): the
    /// descriptor budget's (`descriptors::Budget`), which keeps room for a server connection
    /// each and for the rest of the process; a number sets it (`herdsman check` warns when it
    /// exceeds the budget).
    pub max_client_connections: Option<u32>,
    /// Client connections one address may have open at once; more are closed as they are
    /// accepted. 0 (the default): no limit.
    pub max_connections_per_client: u32,
}

/// One `[[route]]`: requests whose host and path match go to `pool`. A route without `host`
/// matches every host; without `path_prefix`, every path.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    pub host: Option<HostPattern>,
    /// Starts with '/'; matched byte for byte against the start of the request target.
    pub path_prefix: Option<String>,
    /// Index into `Config::pools`; `None` exactly when the route answers itself (`answer`).
    pub pool: Option<usize>,
    /// `[route.redirect]` or `[route.respond]`: the route answers every request it takes, no
    /// pool involved. Boxed: most routes have none.
    pub answer: Option<Box<answers::RouteAnswer>>,
    /// `[route.rewrite]`: the target its server gets instead of the client's (routing, the
    /// access log and the rules saw the client's). Boxed: most routes have none.
    pub rewrite: Option<Box<answers::Rewrite>>,
    /// `[route.timeouts]` over `[timeouts]`: a streaming or long-poll endpoint can wait longer
    /// than the rest.
    pub timeouts: ExchangeTimeouts,
    /// `[route.buffering]`: request or response buffering off for this route.
    pub buffering: RouteBuffering,
    /// `[route.cache]`: the route's cache rules over its pool's.
    pub cache: RouteCache,
    /// `[route.rate_limit]`: a limit on the requests the route takes, per key. Boxed: most
    /// routes have none, and a config may hold 100,000 routes.
    pub rate_limit: Option<Box<rate_limit::RateLimitRule>>,
    /// `when`: what a request must also meet for this route to take it; one that does not goes
    /// on to the next route its host and path match. Boxed: most routes have none.
    pub when: Option<Box<Condition>>,
    /// `[route.access]`: which clients the route serves, tested once the route is chosen.
    /// Boxed: most routes have none.
    pub access: Option<Box<access::Access>>,
    /// `[route.compression]` over `[compression]`, resolved: `None` while not enabled for it.
    pub compression: Option<Arc<CompressionRules>>,
    /// `[route.headers]` over `[headers]`, resolved: `None` when neither has a rule.
    pub headers: Option<Arc<headers::HeaderRules>>,
}

impl RouteConfig {
    /// A route of `host` and `path_prefix` to the first pool, with the default timeouts and
    /// buffering: what the route index's tests and fuzz target build.
    pub fn to_first_pool(host: Option<HostPattern>, path_prefix: Option<&str>) -> RouteConfig {
        RouteConfig {
            host,
            path_prefix: path_prefix.map(str::to_string),
            pool: Some(0),
            answer: None,
            rewrite: None,
            timeouts: Timeouts::default().exchange(),
            buffering: RouteBuffering::default(),
            cache: RouteCache::Pool,
            rate_limit: None,
            when: None,
            access: None,
            compression: None,
            headers: None,
        }
    }

    /// Its host as `herdsman check` names it: `any host`, `host api.example.com`,
    /// `host *.example.com`.
    fn host_words(&self) -> String {
        match &self.host {
            None => "any host".to_string(),
            Some(HostPattern::Exact(name)) => format!("host {name}"),
            Some(HostPattern::Subdomains(suffix)) => format!("host *{suffix}"),
        }
    }
}

/// A route's `host`, lowercased: `api.example.com`, or `*.example.com` for any name under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    /// The suffix with its leading dot (`.example.com`); the bare `example.com` does not match.
    Subdomains(String),
}

impl HostPattern {
    /// Whether a request's Host matches: case ignored, and a `:port` suffix ignored.
    pub fn matches(&self, host: &[u8]) -> bool {
        let name = strip_port(host);
        match self {
            HostPattern::Exact(exact) => name.eq_ignore_ascii_case(exact.as_bytes()),
            HostPattern::Subdomains(suffix) => {
                name.len() > suffix.len()
                    && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
            }
        }
    }
}

/// A Host value without its port: `example.com:8080` → `example.com`, `[::1]:80` → `[::1]`.
pub fn strip_port(host: &[u8]) -> &[u8] {
    match host.iter().rposition(|&b| b == b':') {
        Some(colon)
            if !host[colon + 1..].is_empty() && host[colon + 1..].iter().all(u8::is_ascii_digit)
            // An IPv6 literal has colons inside its brackets; only one after `]` is a port.
            && (host[0] != b'[' || host[..colon].ends_with(b"]")) =>
        {
            &host[..colon]
        }
        _ => host,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    pub name: String,
    pub balance: Balance,
    /// What `balance = "hash"` hashes. Default the client's address.
    pub hash_key: HashKey,
    /// `[pool.sticky]`: a signed cookie keeps a client on the server it was first sent to.
    pub sticky: Option<StickyConfig>,
    /// `[pool.health]`: active checks, run by one checker for the whole process.
    pub health: Option<HealthCheck>,
    /// `[pool.passive]`: ejection of a server on consecutive failures seen by requests.
    pub passive: Passive,
    /// A server returning to service ramps its weight from low to full over this long. Zero
    /// (the default): at once.
    pub slow_start: Duration,
    /// Other servers a request is tried on after a failure `retry_on` lists. Default 2.
    pub retries: u32,
    /// Which failures send a request to another server. Default: connect failures, empty
    /// responses and resets before any response byte.
    pub retry_on: RetryOn,
    /// Retries add at most this percentage to the pool's requests over the last ten seconds.
    /// Default 20.
    pub retry_budget_percent: u32,
    /// Retries a second the pool may make whatever its traffic, so that a quiet pool can retry
    /// its few requests. Default 10 (Finagle's `minRetriesPerSec`).
    pub retry_budget_floor: u32,
    /// `balance = "peak-ewma"`: how long a server's latency is remembered — an answer this old
    /// weighs under 1% of its estimate, and a server not measured for a tenth of it is probed.
    /// Default 10s.
    pub latency_window: Duration,
    /// How long a request waits for a server below its `max_connections` before it gets 503.
    /// Default 2s.
    pub queue_timeout: Duration,
    /// `protocol`: what the servers speak. Default HTTP/1.1.
    pub protocol: ServerProtocol,
    /// `[pool.tls]`: TLS to the pool's servers (always for `protocol = "h2"`). `None` (the
    /// default): cleartext.
    pub tls: Option<server_tls::PoolTls>,
    /// At least one; names unique within the pool.
    pub servers: Vec<ServerConfig>,
    /// `[pool.cache]`: its responses are cached. `None` (the default): never.
    pub cache: Option<PoolCache>,
}

/// A pool's `retry_on`: the failures after which a request goes to another server, in the manner
/// of HAProxy's `retry-on`. Whatever is listed, a request that may have reached its server goes
/// again only when it is idempotent and all of it is at hand (no body still streaming); a
/// connect failure reached nothing, so any request may go again after one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryOn {
    /// One bit per [`RetryCondition`].
    conditions: u8,
    /// One bit per 5xx status (bit `status - 500`).
    statuses: u128,
}

/// A failure `retry_on` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryCondition {
    /// Connecting failed or timed out (`connect-failure`): nothing reached the server.
    ConnectFailure,
    /// The server closed the connection without a response byte (`empty-response`).
    EmptyResponse,
    /// The connection was reset, or failed otherwise, before a response byte
    /// (`reset-before-response`).
    ResetBeforeResponse,
    /// No response head within `backend_response` (`response-timeout`). Not in the default:
    /// the request probably reached the server and may still run there, and a retry multiplies
    /// the client's wait and the load on a pool that is already slow.
    ResponseTimeout,
}

impl RetryOn {
    /// Nothing is retried.
    pub const NONE: RetryOn = RetryOn {
        conditions: 0,
        statuses: 0,
    };

    pub fn with(self, condition: RetryCondition) -> RetryOn {
        RetryOn {
            conditions: self.conditions | 1 << condition as u8,
            ..self
        }
    }

    /// Also retried: a response with `status` (500–599; others are ignored).
    pub fn with_status(self, status: u16) -> RetryOn {
        match status.checked_sub(500).filter(|bit| *bit < 100) {
            Some(bit) => RetryOn {
                statuses: self.statuses | 1 << bit,
                ..self
            },
            None => self,
        }
    }

    pub fn has(self, condition: RetryCondition) -> bool {
        self.conditions & 1 << condition as u8 != 0
    }

    pub fn has_status(self, status: u16) -> bool {
        status
            .checked_sub(500)
            .filter(|bit| *bit < 100)
            .is_some_and(|bit| self.statuses & 1 << bit != 0)
    }

    /// Some status is listed.
    pub fn has_statuses(self) -> bool {
        self.statuses != 0
    }

    /// The listed conditions and statuses, as the config writes them.
    pub fn words(self) -> Vec<String> {
        let conditions = check::RETRY_CONDITIONS
            .words()
            .filter(|word| {
                check::RETRY_CONDITIONS
                    .value_of(word)
                    .is_some_and(|condition| self.has(condition))
            })
            .map(str::to_string);
        let statuses = (500..600)
            .filter(|status| self.has_status(*status))
            .map(|status| status.to_string());
        conditions.chain(statuses).collect()
    }
}

impl Default for RetryOn {
    /// What can fail before a server did anything with the request: it could not be reached, or
    /// it closed or reset the connection without answering (an idempotent request only).
    fn default() -> RetryOn {
        RetryOn::NONE
            .with(RetryCondition::ConnectFailure)
            .with(RetryCondition::EmptyResponse)
            .with(RetryCondition::ResetBeforeResponse)
    }
}

/// `[pool.health]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub kind: HealthKind,
    /// Between the starts of two checks of one server, give or take a tenth. Default 2s.
    pub interval: Duration,
    /// A check that takes longer fails. Default 1s.
    pub timeout: Duration,
    /// Consecutive successes that bring a down server back. Default 2.
    pub rise: u32,
    /// Consecutive failures that take a server down. Default 3.
    pub fall: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthKind {
    /// A connection that opens is a success.
    Tcp,
    /// A request whose response status is within `expect`.
    Http {
        method: String,
        path: String,
        /// The Host sent; the server's address when `None`.
        host: Option<String>,
        /// Inclusive. Default 200–399.
        expect: (u16, u16),
    },
    /// The gRPC health checking protocol (`grpc.health.v1.Health/Check`), for pools that speak
    /// HTTP/2: the server must answer SERVING for `service` (empty: the server as a whole).
    Grpc { service: String },
}

/// `[pool.passive]`: how requests' failures eject a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passive {
    /// Consecutive failures (connect failures, resets, timeouts) that eject a server; 0 turns
    /// passive ejection off. Default 5.
    pub consecutive_failures: u32,
    /// 5xx responses count as failures too. Default false.
    pub count_5xx: bool,
    /// The first ejection's length; each further one doubles it. Default 10s.
    pub ejection: Duration,
    /// The longest an ejection lasts. Default 5m.
    pub max_ejection: Duration,
    /// At most this share of a pool's servers is ejected at once, so that a pool never empties
    /// itself on a transient fault. Default 50.
    pub max_ejected_percent: u32,
}

impl Default for Passive {
    fn default() -> Passive {
        Passive {
            consecutive_failures: 5,
            count_5xx: false,
            ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(300),
            max_ejected_percent: 50,
        }
    }
}

/// `hash_key`: the part of a request `balance = "hash"` hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The client's IP address (`source-ip`).
    SourceIp,
    /// A request header's value (`header:NAME`), name lowercased; absent: the client's address.
    Header(String),
    /// A cookie's value (`cookie:NAME`); absent: the client's address.
    Cookie(String),
}

/// `[pool.sticky]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyConfig {
    /// The cookie's name. Default `HERDSMAN`.
    pub cookie: String,
    /// The environment variable holding the signing secret. Unset (or the variable empty): a
    /// key generated at start, so cookies do not survive a restart.
    pub key_env: Option<String>,
    /// The cookie's Max-Age; `None`: a session cookie (the default).
    pub max_age: Option<Duration>,
}

/// What a pool's servers speak (`protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ServerProtocol {
    /// HTTP/1.1 (the default): one request at a time per connection, idle connections reused.
    #[default]
    Http1,
    /// HTTP/2 over TLS, agreed by ALPN (`"h2"`): the pool speaks TLS whether or not it has a
    /// `[pool.tls]` table (which then only tunes it).
    H2,
    /// HTTP/2 in cleartext with prior knowledge (`"h2c"`), as gRPC servers speak it.
    H2c,
}

impl ServerProtocol {
    /// HTTP/2 either way: streams multiplexed over a few connections per worker.
    pub fn is_http2(self) -> bool {
        self != ServerProtocol::Http1
    }
}

/// How a pool picks a server for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Smooth weighted round-robin (nginx's), one sequence shared by all workers.
    RoundRobin,
    /// Fewest active requests relative to weight, counted across all workers.
    LeastConn,
    /// Power of two choices: the less loaded (active ÷ weight) of two random servers.
    P2c,
    /// Weighted random.
    Random,
    /// Consistent hashing of `hash_key`: the same key reaches the same server, and adding or
    /// removing one of N servers moves about 1/N of keys.
    Hash,
    /// Power of two choices weighed by latency: the cheaper of two random servers, a server's
    /// cost its peak-sensitive moving average of time to a response head times its requests in
    /// flight (+1), per unit of weight (Finagle's and Linkerd's peak EWMA; `upstream/latency.rs`).
    PeakEwma,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Stable identity of the server; unique within its pool.
    pub name: String,
    pub addr: ServerAddr,
    /// 0–256, default 1. Weight 0 takes no new requests.
    pub weight: u32,
    /// The state it starts in. Default `ready`.
    pub state: ServerState,
    /// Requests it is sent at once, over all workers; 0 (the default): no limit. When every
    /// server that may take a request is at its limit, the request waits in the pool's queue.
    pub max_connections: u32,
    /// The name asked for in TLS (SNI) and verified, over the pool's `[pool.tls] sni`; only in
    /// a pool with `[pool.tls]`.
    pub sni: Option<String>,
}

/// What a server may be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerState {
    /// Everything: new sessions and sticky ones.
    Ready,
    /// Only requests with a sticky cookie for it (and those in flight): no new sessions.
    Drain,
    /// Nothing new; requests in flight finish.
    Maint,
    /// Only requests that carry its test token in `X-Herdsman-Test`.
    Test,
}

impl ServerState {
    /// The word the config and the admin API use.
    pub fn word(self) -> &'static str {
        check::SERVER_STATES.word_for(self)
    }

    pub fn from_word(word: &str) -> Option<ServerState> {
        check::SERVER_STATES.value_of(word)
    }

    /// The words of every state.
    pub fn words() -> impl Iterator<Item = &'static str> {
        check::SERVER_STATES.words()
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(2),
            client_header: Duration::from_secs(10),
            client_idle: Duration::from_secs(60),
            backend_response: Duration::from_secs(60),
            backend_read: Duration::from_secs(60),
            request: None,
            backend_idle: Duration::from_secs(4),
            tls_handshake: Duration::from_secs(10),
            tunnel_idle: Duration::from_secs(3600),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 65536,
            max_body_bytes: 0,
            max_idle_per_server: None,
            max_client_connections: None,
            max_connections_per_client: 0,
        }
    }
}

impl Config {
    /// Parses and validates TOML text. `origin` names the text in errors (a path, or "<demo>").
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        load::from_toml(text, origin)
    }

    /// Reads and validates a config file.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        load::from_file(path)
    }

    /// A short human summary: listeners, pools and servers, one line each. Printed by `check`.
    pub fn summary(&self) -> String {
        summary::summary(self)
    }

    /// Its `warnings` as `herdsman check` prints them — `origin: 1 warning`, then each on a line of
    /// its own — or `None` when there are none.
    pub fn warnings_listed(&self, origin: &str) -> Option<String> {
        let mut text = String::new();
        let _ = problem::write_list(&mut text, origin, "warning", &self.warnings);
        (!self.warnings.is_empty()).then_some(text)
    }

    /// Logs its `warnings` (at start and at each reload), naming the file they are of: at most
    /// `LOGGED_WARNINGS` of them (a config of 100,000 routes may shadow thousands, at every start
    /// and reload), then how many more.
    pub fn log_warnings(&self, file: Option<&Path>) {
        let file = file.unwrap_or(Path::new("(no file)")).display();
        for warning in self.warnings.iter().take(LOGGED_WARNINGS) {
            tracing::warn!(config = %file, "{warning}");
        }
        if let Some(more) = self
            .warnings
            .len()
            .checked_sub(LOGGED_WARNINGS)
            .filter(|&n| n > 0)
        {
            tracing::warn!(
                config = %file,
                "… and {more} more warnings: `herdsman check` lists them all"
            );
        }
    }
}
