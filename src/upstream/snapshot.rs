//! The immutable picture of routes, pools and servers that workers read on every request, and the
//! lineage that carries server identities and pool keys from one picture to the next.
//!
//! A change (an admin API call, a reload) builds a whole new [`Snapshot`] with a higher
//! generation and publishes it through [`SnapshotHandle`] (an `ArcSwap`); a worker's reads never
//! lock and never see a half-made change. The only mutable parts are per-server atomics shared
//! across workers and across snapshots: active and total request counts, latency estimates, and
//! the round-robin cursor.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::balance::Balancer;
use super::health::{Health, HealthView};
use super::idle::IdleCaps;
use super::latency::Latency;
use super::load_tree::LoadTree;
use super::retry_budget::RetryBudget;
use super::sticky::{write_set_cookie, StickyKey};
use crate::config::access::{Access, RealIp};
use crate::config::answers::RouteAnswer;
use crate::config::server_tls::{PoolTls, ServerTls};
use crate::config::tls::ListenerTls;
use crate::config::{
    release_freed_memory, AccessLogConfig, Balance, Buffering, Config, ExchangeTimeouts, HashKey,
    HealthCheck, Limits, ListenerConfig, Passive, PoolCache, PoolConfig, RetryOn, RouteBuffering,
    RouteCache, RouteConfig, RouteIndex, ServerAddr, ServerProtocol, ServerState, Timeouts,
    UpgradeProtocols,
};
use crate::stats::cache::CacheCounts;
use crate::stats::rules::{Answered, KeptCounts, RuleCounts, Site};
use crate::stats::traffic::Traffic;

/// Everything the request path needs to know, as of one generation.
#[derive(Debug)]
pub struct Snapshot {
    pub generation: u64,
    pub timeouts: Timeouts,
    pub limits: Limits,
    /// `[http2]`: what a new HTTP/2 client connection may hold and spend.
    pub http2: crate::config::Http2Limits,
    /// The cap on client connections this config runs with (`config::descriptors`): its
    /// `max_client_connections`, or the budget of the open-file limit; applied by the workers
    /// as a snapshot arrives, so a reload changes it.
    pub client_cap: u32,
    pub buffering: Buffering,
    /// `[cache]`: the process's cache of responses, for the pools with `cache`.
    pub cache: crate::config::CacheSettings,
    /// `[rate_limit]`: the limits' counts kept in Redis, when set.
    pub rate_limit_redis: Option<crate::config::rate_limit::RedisSettings>,
    /// Some pool or route caches: without one, no request looks at the cache (a request to a
    /// config without a cache pays one test for it).
    pub caches: bool,
    /// `[compression]` when enabled: for the requests no route takes.
    pub compression: Option<Arc<crate::config::CompressionRules>>,
    /// It or some route compresses: without one, a request pays one test for compression.
    pub compresses: bool,
    /// Shared with the snapshots before and after while the routes do not change (a health or
    /// admin change to a config of 100,000 routes copies none of them).
    pub routes: Arc<Vec<RouteConfig>>,
    /// `routes` compiled for lookup (`route_index.rs`): the same answer as scanning them.
    pub route_index: Arc<RouteIndex>,
    pub pools: Vec<Pool>,
    /// For each listener slot (see `intake::ListenerChange`), the index of its default pool.
    pub listener_pools: Vec<usize>,
    /// For each listener slot, what its requests are held to.
    pub listener_rules: Vec<ListenerRules>,
    /// `[real_ip]`: the proxies whose word names the client; `None`: the peer is the client.
    pub real_ip: Option<RealIp>,
    /// `[headers]`: the header rules of requests no route takes (a route's are on it).
    pub headers: Option<Arc<crate::config::headers::HeaderRules>>,
    /// `[request_id]`, when requests get ids.
    pub request_id: Option<crate::config::headers::RequestIdSettings>,
    /// Some header rule or `[request_id]` changes heads: without, a request pays one test for
    /// them on each side.
    pub edits_heads: bool,
    /// The answers of each route's redirect or fixed response and each access rule's refusals,
    /// counted; kept across snapshots while the rule is.
    pub rule_counts: RuleCounts,
    /// Every server id in `pools`: a pooled connection whose server is not here is closed.
    server_ids: HashSet<u64>,
}

/// What a listener's requests are held to, apart from their default pool: kept by its slot when
/// the listener closes, so that the connections it accepted go on as before.
#[derive(Debug, Clone, Default)]
pub struct ListenerRules {
    /// The listener's name (what its rules' counters are labelled with).
    pub name: String,
    /// Its access log, if it has one.
    pub access_log: Option<AccessLogConfig>,
    /// The protocols its requests may upgrade to.
    pub upgrade: UpgradeProtocols,
    /// Its TLS settings and certificates, when it is a TLS listener.
    pub tls: Option<ListenerTls>,
    /// The HTTPS port its requests are redirected to (`redirect_https`), if they are.
    pub redirect_https: Option<u16>,
    /// It takes HTTP/2 with prior knowledge beside HTTP/1.1 (`h2c`).
    pub h2c: bool,
    /// Its `[listener.rate_limit]`, if it has one.
    pub rate_limit: Option<Box<crate::config::rate_limit::RateLimitRule>>,
    /// Which clients it serves (`[listener.access]`); `None`: all.
    pub access: Option<Access>,
}

impl ListenerRules {
    pub fn of(listener: &ListenerConfig) -> ListenerRules {
        ListenerRules {
            name: listener.name.clone(),
            access_log: listener.access_log.clone(),
            upgrade: listener.upgrade.clone(),
            tls: listener.tls.clone(),
            redirect_https: listener.redirect_https,
            h2c: listener.h2c,
            rate_limit: listener.rate_limit.clone(),
            access: listener.access.clone(),
        }
    }
}

/// What a slot the snapshot does not know gets (there is none: every slot has rules).
static NO_UPGRADES: UpgradeProtocols = UpgradeProtocols::none();

#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub servers: Vec<Server>,
    /// Picks among the servers that take new sessions (`ready`, weight above 0).
    pub balancer: Balancer,
    pub hash_key: HashKey,
    /// The cookie's name, when the pool is sticky.
    pub sticky_cookie: Option<String>,
    /// Some server is in the `test` state (otherwise requests are not searched for a token).
    pub has_test_servers: bool,
    /// Signs the pool's cookies and its servers' test tokens.
    pub key: Arc<StickyKey>,
    pub health: Option<HealthCheck>,
    pub passive: Passive,
    pub slow_start: std::time::Duration,
    pub retries: u32,
    pub retry_on: RetryOn,
    pub retry_budget_percent: u32,
    pub retry_budget_floor: u32,
    /// Each worker's window of requests and retries; kept across snapshots.
    pub retry_budget: Arc<RetryBudget>,
    /// Requests waiting for a server below its `max_connections`; kept across snapshots.
    pub queue: Arc<PoolQueue>,
    /// Every request routed to the pool, by ending and duration; kept across snapshots.
    pub traffic: Arc<Traffic>,
    /// Its requests by what the cache did for them (while it caches); kept across snapshots.
    pub cache_counts: Arc<CacheCounts>,
    pub queue_timeout: std::time::Duration,
    /// `[pool.tls]`, for the admin API to show (each server keeps what it connects with).
    pub tls: Option<PoolTls>,
    /// `[pool.cache]`: its responses are cached. `None`: never.
    pub cache: Option<crate::config::PoolCache>,
    /// Some of its requests are cached: it has `[pool.cache]`, or a route to it has its own.
    pub caches: bool,
}

/// A pool's queue: requests wait here, on any worker, when every server that may take them is
/// at its `max_connections`, and a request ending on a limited server wakes one of them.
#[derive(Debug, Default)]
pub struct PoolQueue {
    waiting: AtomicU32,
    timed_out: AtomicU64,
    freed: tokio::sync::Notify,
}

impl PoolQueue {
    /// Requests waiting now.
    pub fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Requests that waited `queue_timeout` in vain, since start.
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// Waits until `take` succeeds (it is tried again each time a slot frees) or `patience` runs
    /// out. Counts the wait in the queue's depth, and a timeout in `timed_out`.
    pub async fn wait_for<T>(
        &self,
        patience: std::time::Duration,
        mut take: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + patience;
        let taken = loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so that a slot freed in between is not missed.
            freed.as_mut().enable();
            if let Some(taken) = take() {
                break Some(taken);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                self.timed_out.fetch_add(1, Ordering::Relaxed);
                break None;
            }
        };
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        taken
    }

    /// A slot freed on one of the pool's limited servers: wakes a waiter, if there is one.
    fn slot_freed(&self) {
        if self.waiting.load(Ordering::Relaxed) > 0 {
            self.freed.notify_one();
        }
    }
}

/// One server of a pool.
#[derive(Debug)]
pub struct Server {
    /// Unique for the life of the process and kept across snapshots while the server keeps its
    /// pool, name and address: a pooled connection belongs to exactly one server.
    pub id: u64,
    pub name: String,
    pub addr: ServerAddr,
    pub weight: u32,
    pub state: ServerState,
    /// Neither down by active checks nor ejected by passive ones, as of this snapshot.
    pub available: bool,
    pub health: HealthView,
    /// `weight` scaled down while the server ramps up after coming back (slow start).
    pub effective_weight: u32,
    /// Requests at once, over all workers; 0: no limit.
    pub max_connections: u32,
    /// What bounds a worker's idle connections to it besides their use (`max_idle_per_server`,
    /// `max_connections`).
    pub idle_caps: IdleCaps,
    /// Counts every worker shares (requests in flight where they must be exact, failures in a
    /// row, the latency estimate); kept across snapshots.
    pub counters: Arc<ServerCounters>,
    /// Requests it answered (or failed), by ending and duration, and those started and in
    /// flight, a line per worker; kept across snapshots.
    pub traffic: Arc<Traffic>,
    /// The `Set-Cookie` lines that assign a client to this server (sticky pools only), for a
    /// cleartext request and then for one over TLS (`Secure`), made once per snapshot so that
    /// assigning costs no signing on the request path.
    pub set_cookie: Option<Box<[Box<[u8]>; 2]>>,
    /// How its connections start TLS, in a pool with `[pool.tls]`.
    pub tls: Option<ServerTls>,
    /// What it speaks (its pool's `protocol`).
    pub protocol: ServerProtocol,
    /// Added through the admin API rather than the config file.
    pub added_at_run_time: bool,
}

impl Server {
    /// Requests in flight, over all workers.
    pub fn active(&self) -> u32 {
        self.counters.active().wrapping_add(self.traffic.active())
    }
}

/// A server's counts shared by all workers, on a cache line of their own so that workers updating
/// different servers do not contend on one line. Its requests started, and those in flight that
/// nothing needs counted exactly across workers, are on each worker's own line of its `traffic`.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct ServerCounters {
    /// Requests in flight that a limit or a balancer weighing loads reads (see [`ActiveGuard`]).
    active: AtomicU32,
    /// Failures seen by requests since the last success (passive checks).
    consecutive_failures: AtomicU32,
    /// Its time to a response head, as peak-ewma weighs it (updated in peak-ewma pools only):
    /// beside `active`, which a peak-ewma pick reads with it, on the line that pick loads anyway.
    pub latency: Latency,
}

impl ServerCounters {
    /// Requests in flight counted here: all of them, in a pool that limits the server or weighs
    /// its load; none in one that does neither (`Server::active` sums both kinds).
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }

    /// Counts a failure a request met; returns the failures in a row so far.
    pub fn failed(&self) -> u32 {
        self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A request succeeded: the run of failures is over. Reads first, so that the usual case
    /// (no failures) does not write the shared line.
    pub fn succeeded(&self) {
        if self.consecutive_failures.load(Ordering::Relaxed) != 0 {
            self.consecutive_failures.store(0, Ordering::Relaxed);
        }
    }
}

/// Counts a request to a server and holds its active count up while it is in flight.
pub struct ActiveGuard<'s> {
    /// Where the request is counted in flight.
    count: InFlight<'s>,
    /// The pool's queue, for a server with a limit: told when this slot frees.
    queue: Option<&'s PoolQueue>,
    /// Least-conn's tree and the server's place in it: told when the load changes.
    load_tree: Option<(&'s LoadTree, usize)>,
}

/// Where a request in flight is counted.
enum InFlight<'s> {
    /// On the server's count shared by all workers, which a limit or a balancer weighing loads
    /// reads: a locked add and subtract on a line every worker writes.
    Shared(&'s ServerCounters),
    /// On its worker's own line of the server's traffic (a load and a store): a round-robin,
    /// random or hash pool reads the count only to show it, or to scan for a retry. With two
    /// workers on one server, the shared count's three locked operations a request moved its
    /// line between the cores (bench/results/diet.md has the paired rounds).
    Worker(&'s Traffic, usize),
}

impl<'s> ActiveGuard<'s> {
    /// Counted on the server's shared count, without a limit (also what the tests take).
    pub fn new(counters: &'s ServerCounters) -> ActiveGuard<'s> {
        counters.active.fetch_add(1, Ordering::Relaxed);
        ActiveGuard {
            count: InFlight::Shared(counters),
            queue: None,
            load_tree: None,
        }
    }

    /// A slot on the pool's server `index` for a request on `worker`, if it has one free
    /// (always, without a limit). Taking it and checking the limit are one step, so workers
    /// taking slots at once cannot pass the limit.
    pub fn try_take(pool: &'s Pool, index: usize, worker: usize) -> Option<ActiveGuard<'s>> {
        let server = &pool.servers[index];
        let max = server.max_connections;
        let weighs_loads = pool.balancer.weighs_loads();
        let mut guard = if max == 0 && !weighs_loads {
            server.traffic.started_in_flight(worker);
            ActiveGuard {
                count: InFlight::Worker(&server.traffic, worker),
                queue: None,
                load_tree: None,
            }
        } else if max == 0 {
            server.traffic.started(worker);
            ActiveGuard::new(&server.counters)
        } else {
            let counters = &server.counters;
            counters
                .active
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |active| {
                    (active < max).then_some(active + 1)
                })
                .ok()?;
            server.traffic.started(worker);
            ActiveGuard {
                count: InFlight::Shared(counters),
                queue: Some(&pool.queue),
                load_tree: None,
            }
        };
        if let Some(tree) = pool.balancer.load_tree() {
            tree.changed(index);
            guard.load_tree = Some((tree, index));
        }
        Some(guard)
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        match self.count {
            InFlight::Shared(counters) => {
                counters.active.fetch_sub(1, Ordering::Relaxed);
            }
            InFlight::Worker(traffic, worker) => traffic.finished(worker),
        }
        if let Some((tree, index)) = self.load_tree {
            tree.changed(index);
        }
        if let Some(queue) = self.queue {
            queue.slot_freed();
        }
    }
}

impl Snapshot {
    /// The access log of the listener in `slot`, if it has one.
    pub fn access_log(&self, slot: usize) -> Option<&AccessLogConfig> {
        self.listener_rules.get(slot)?.access_log.as_ref()
    }

    /// The TLS settings of the listener in `slot`, if it is a TLS listener.
    pub fn listener_tls(&self, slot: usize) -> Option<&ListenerTls> {
        self.listener_rules.get(slot)?.tls.as_ref()
    }

    /// Whether the cleartext listener in `slot` takes HTTP/2 with prior knowledge.
    pub fn listener_h2c(&self, slot: usize) -> bool {
        self.listener_rules.get(slot).is_some_and(|rules| rules.h2c)
    }

    /// Which clients the listener in `slot` serves (`[listener.access]`), if it says.
    pub fn listener_access(&self, slot: usize) -> Option<&Access> {
        self.listener_rules.get(slot)?.access.as_ref()
    }

    /// The HTTPS port requests on the listener in `slot` are redirected to, if they are.
    pub fn redirect_https(&self, slot: usize) -> Option<u16> {
        self.listener_rules.get(slot)?.redirect_https
    }

    /// The protocols requests on the listener in `slot` may upgrade to.
    pub fn upgrade_protocols(&self, slot: usize) -> &UpgradeProtocols {
        self.listener_rules
            .get(slot)
            .map_or(&NO_UPGRADES, |rules| &rules.upgrade)
    }

    /// The exchange timeouts of a request that `route` (an index into `routes`) matched, or
    /// `[timeouts]`'s when no route did.
    pub fn exchange_timeouts(&self, route: Option<usize>) -> ExchangeTimeouts {
        route
            .and_then(|index| self.routes.get(index))
            .map_or_else(|| self.timeouts.exchange(), |route| route.timeouts)
    }

    /// The cache rules of a request that `route` matched, routed to `pool`: its
    /// `[route.cache]`, else the pool's `[pool.cache]`; `None` when it is not cached.
    #[inline]
    pub fn cache_for(&self, route: Option<usize>, pool: usize) -> Option<&PoolCache> {
        if !self.caches {
            return None;
        }
        match route
            .and_then(|index| self.routes.get(index))
            .map(|route| &route.cache)
        {
            Some(RouteCache::Off) => None,
            Some(RouteCache::On(rules)) => Some(rules),
            Some(RouteCache::Pool) | None => self.pools.get(pool)?.cache.as_ref(),
        }
    }

    /// The compression a request's route gets (`[route.compression]` over `[compression]`), or
    /// `[compression]`'s for a request no route takes; `None` where it is not enabled.
    #[inline]
    pub fn compression_for(
        &self,
        route: Option<usize>,
    ) -> Option<&crate::config::CompressionRules> {
        if !self.compresses {
            return None;
        }
        match route.and_then(|index| self.routes.get(index)) {
            Some(route) => route.compression.as_deref(),
            None => self.compression.as_deref(),
        }
    }

    /// The header rules of a request that `route` matched (`[route.headers]` over `[headers]`),
    /// or `[headers]`' for a request no route took; `None` where there are none.
    #[inline]
    pub fn header_rules(
        &self,
        route: Option<usize>,
    ) -> Option<&crate::config::headers::HeaderRules> {
        match route.and_then(|index| self.routes.get(index)) {
            Some(route) => route.headers.as_deref(),
            None => self.headers.as_deref(),
        }
    }

    /// The buffering a request's route allows: its `[route.buffering]`, or both.
    pub fn route_buffering(&self, route: Option<usize>) -> RouteBuffering {
        route
            .and_then(|index| self.routes.get(index))
            .map_or_else(RouteBuffering::default, |route| route.buffering)
    }

    /// Whether a server with this id is in the snapshot.
    pub fn has_server(&self, id: u64) -> bool {
        self.server_ids.contains(&id)
    }
}

impl Pool {
    pub fn balance(&self) -> Balance {
        self.balancer.kind()
    }

    /// The index of the server named `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.servers.iter().position(|server| server.name == name)
    }
}

/// Where the current snapshot is published. Cloned into every worker.
pub type SnapshotHandle = Arc<ArcSwap<Snapshot>>;

/// What one snapshot hands on to the next: each server's id, counters and health (keyed by
/// pool, name, address and TLS settings, so a re-addressed server, or one spoken to another
/// way, is a new server whose pooled connections are not reused), each pool's signing key, and
/// the generation.
/// Pool, name, address, (for TLS) the pool's TLS fingerprint and the server's own SNI, and the
/// protocol.
type ServerIdentity = (
    String,
    String,
    ServerAddr,
    Option<(u64, Option<String>)>,
    ServerProtocol,
);

#[derive(Default)]
pub struct Lineage {
    generation: u64,
    next_id: u64,
    servers: HashMap<ServerIdentity, ServerRecord>,
    keys: HashMap<String, Arc<StickyKey>>,
    /// What is kept of each pool, by pool name.
    pools: HashMap<String, PoolRecord>,
    /// The last snapshot's routes and their index, for the next one if the routes are the same.
    routes: Option<(Arc<Vec<RouteConfig>>, Arc<RouteIndex>)>,
    /// The rules' answer counts, by site, label and answer.
    rule_counts: KeptCounts,
}

/// The rules whose answers are counted: each route's redirect or fixed response, each route's
/// and listener's access rule. One pass over the routes per snapshot (a reload, an admin
/// change), none per request.
fn counted_rules(
    routes: &[RouteConfig],
    listeners: &[ListenerRules],
) -> Vec<(Site, Answered, String)> {
    let mut rules = Vec::new();
    for (index, route) in routes.iter().enumerate() {
        let answered = match route.answer.as_deref() {
            Some(RouteAnswer::Redirect(_)) => Some(Answered::Redirect),
            Some(RouteAnswer::Respond(_)) => Some(Answered::Respond),
            None => None,
        };
        let denies = route.access.is_some().then_some(Answered::Deny);
        for answered in [answered, denies].into_iter().flatten() {
            rules.push((Site::Route(index), answered, format!("route[{index}]")));
        }
    }
    for (slot, listener) in listeners.iter().enumerate() {
        if listener.access.is_some() {
            rules.push((Site::Listener(slot), Answered::Deny, listener.name.clone()));
        }
    }
    rules
}

/// What is kept of one server from snapshot to snapshot.
#[derive(Clone)]
struct ServerRecord {
    id: u64,
    counters: Arc<ServerCounters>,
    traffic: Arc<Traffic>,
    health: Health,
}

/// What is kept of one pool from snapshot to snapshot.
struct PoolRecord {
    queue: Arc<PoolQueue>,
    traffic: Arc<Traffic>,
    cache_counts: Arc<CacheCounts>,
    retry_budget: Arc<RetryBudget>,
    /// Least-conn's tree, re-weighed while the pool keeps its servers, succeeded when not.
    load_tree: Option<Arc<LoadTree>>,
}

/// Least-conn's tree for a pool's next snapshot: the last one re-weighed if the pool has the same
/// servers, else a new one that the last one forwards to.
fn next_load_tree(
    last: Option<&Arc<LoadTree>>,
    servers: &[Server],
    candidates: &[(&str, u32)],
) -> Arc<LoadTree> {
    let weights: Vec<u32> = candidates.iter().map(|&(_, weight)| weight).collect();
    let counters: Vec<&Arc<ServerCounters>> = servers.iter().map(|s| &s.counters).collect();
    if let Some(last) = last.filter(|last| last.serves(&counters)) {
        last.reweigh(&weights);
        return Arc::clone(last);
    }
    let loads: Vec<(Arc<ServerCounters>, u32)> =
        counters.into_iter().map(Arc::clone).zip(weights).collect();
    match last {
        Some(last) => last.succeed(&loads),
        None => Arc::new(LoadTree::new(&loads)),
    }
}

impl Lineage {
    pub fn new() -> Lineage {
        Lineage::default()
    }

    /// The next snapshot of `config`, whose servers in `added_at_run_time` (pool, server names)
    /// are marked as added through the admin API; `listener_pools` gives each listener slot's
    /// pool, and `listener_rules` its other rules. Fails only when a pool needs a generated key and
    /// the system's random source cannot be read.
    pub fn next(
        &mut self,
        config: &Config,
        added_at_run_time: &HashSet<(String, String)>,
        listener_pools: Vec<usize>,
        listener_rules: Vec<ListenerRules>,
    ) -> io::Result<Snapshot> {
        self.generation += 1;
        let now = std::time::Instant::now();
        let mut seen = HashMap::new();
        let mut pools = Vec::with_capacity(config.pools.len());
        for (index, pool) in config.pools.iter().enumerate() {
            let key = self.key_for(pool)?;
            let servers: Vec<Server> = pool
                .servers
                .iter()
                .map(|server| {
                    // A server whose TLS settings changed is a new one: its idle connections
                    // were made with the old ones.
                    let tls = pool
                        .tls
                        .as_ref()
                        .map(|tls| tls.for_server(server.sni.as_deref(), &server.addr));
                    // Likewise one whose protocol changed: HTTP/1.1 idle connections are no
                    // HTTP/2 ones.
                    let identity = (
                        pool.name.clone(),
                        server.name.clone(),
                        server.addr.clone(),
                        pool.tls
                            .as_ref()
                            .map(|tls| (tls.fingerprint, server.sni.clone())),
                        pool.protocol,
                    );
                    let record = self.servers.remove(&identity).unwrap_or_else(|| {
                        self.next_id += 1;
                        ServerRecord {
                            id: self.next_id,
                            counters: Arc::default(),
                            traffic: Arc::new(Traffic::new(config.workers)),
                            health: Health::default(),
                        }
                    });
                    let (id, counters) = (record.id, Arc::clone(&record.counters));
                    let traffic = Arc::clone(&record.traffic);
                    let available = record.health.is_available(now);
                    let health = record.health.view(now);
                    let ramp = record.health.ramp(now, pool.slow_start);
                    let effective_weight = match server.weight {
                        0 => 0,
                        weight => ((f64::from(weight) * ramp).round() as u32).max(1),
                    };
                    seen.insert(identity, record);
                    let set_cookie = pool.sticky.as_ref().map(|sticky| {
                        let value = key.cookie_value(&server.name);
                        let line = |secure| {
                            let mut line = Vec::new();
                            write_set_cookie(
                                &mut line,
                                &sticky.cookie,
                                &value,
                                secure,
                                sticky.max_age.map(|age| age.as_secs()),
                            );
                            line.into_boxed_slice()
                        };
                        Box::new([line(false), line(true)])
                    });
                    Server {
                        id,
                        name: server.name.clone(),
                        addr: server.addr.clone(),
                        weight: server.weight,
                        state: server.state,
                        available,
                        health,
                        effective_weight,
                        max_connections: server.max_connections,
                        idle_caps: IdleCaps::new(
                            config.limits.max_idle_per_server,
                            server.max_connections,
                        ),
                        counters,
                        traffic,
                        set_cookie,
                        tls,
                        protocol: pool.protocol,
                        added_at_run_time: added_at_run_time
                            .contains(&(pool.name.clone(), server.name.clone())),
                    }
                })
                .collect();
            // Only ready, available servers take new sessions; the others are reached by cookie
            // or token, or not at all.
            let candidates: Vec<(&str, u32)> = servers
                .iter()
                .map(|server| {
                    let weight = if server.state == ServerState::Ready && server.available {
                        server.effective_weight
                    } else {
                        0
                    };
                    (server.name.as_str(), weight)
                })
                .collect();
            let record = self
                .pools
                .entry(pool.name.clone())
                .or_insert_with(|| PoolRecord {
                    queue: Arc::default(),
                    traffic: Arc::new(Traffic::new(config.workers)),
                    cache_counts: Arc::new(CacheCounts::new(config.workers)),
                    retry_budget: Arc::new(RetryBudget::new(config.workers)),
                    load_tree: None,
                });
            record.load_tree = (pool.balance == Balance::LeastConn)
                .then(|| next_load_tree(record.load_tree.as_ref(), &servers, &candidates));
            pools.push(Pool {
                name: pool.name.clone(),
                balancer: Balancer::new(
                    pool.balance,
                    &candidates,
                    record.load_tree.clone(),
                    pool.latency_window,
                ),
                hash_key: pool.hash_key.clone(),
                sticky_cookie: pool.sticky.as_ref().map(|sticky| sticky.cookie.clone()),
                has_test_servers: servers.iter().any(|s| s.state == ServerState::Test),
                key,
                health: pool.health.clone(),
                passive: pool.passive,
                slow_start: pool.slow_start,
                retries: pool.retries,
                retry_on: pool.retry_on,
                retry_budget_percent: pool.retry_budget_percent,
                retry_budget_floor: pool.retry_budget_floor,
                retry_budget: Arc::clone(&record.retry_budget),
                queue: Arc::clone(&record.queue),
                traffic: Arc::clone(&record.traffic),
                cache_counts: Arc::clone(&record.cache_counts),
                queue_timeout: pool.queue_timeout,
                tls: pool.tls.clone(),
                cache: pool.cache.clone(),
                caches: pool.cache.is_some()
                    || config.routes.iter().any(|route| {
                        route.pool == Some(index) && matches!(route.cache, RouteCache::On(_))
                    }),
                servers,
            });
        }
        // Servers no longer configured are forgotten: one added again later is a new server.
        self.servers = seen;
        self.pools
            .retain(|name, _| config.pools.iter().any(|pool| &pool.name == name));
        let server_ids = self.servers.values().map(|record| record.id).collect();
        let (routes, route_index) = self.routes_for(&config.routes);
        let rule_counts = RuleCounts::new(
            counted_rules(&routes, &listener_rules),
            &mut self.rule_counts,
            config.workers,
        );
        Ok(Snapshot {
            generation: self.generation,
            timeouts: config.timeouts,
            limits: config.limits,
            http2: config.http2,
            client_cap: {
                let (limit, _) = crate::config::descriptors::open_file_limit();
                crate::config::descriptors::Budget::of(config, limit).cap(config)
            },
            buffering: config.buffering.clone(),
            cache: config.cache.clone(),
            rate_limit_redis: config.rate_limit_redis,
            caches: pools.iter().any(|pool| pool.caches),
            compression: config.compression.clone(),
            compresses: config.compression.is_some()
                || config
                    .routes
                    .iter()
                    .any(|route| route.compression.is_some()),
            routes,
            route_index,
            pools,
            listener_pools,
            listener_rules,
            real_ip: config.real_ip.clone(),
            headers: config.headers.clone(),
            request_id: config.request_id.clone(),
            edits_heads: config.headers.is_some()
                || config.request_id.is_some()
                || config.routes.iter().any(|route| route.headers.is_some()),
            rule_counts,
            server_ids,
        })
    }

    /// `routes` and their index: the last snapshot's if they are the same, else compiled anew
    /// (and the memory the compiling freed given back: `config::release_freed_memory`).
    fn routes_for(
        &mut self,
        routes: &Arc<Vec<RouteConfig>>,
    ) -> (Arc<Vec<RouteConfig>>, Arc<RouteIndex>) {
        match &self.routes {
            Some((last, index)) if Arc::ptr_eq(last, routes) || last == routes => {
                (Arc::clone(last), Arc::clone(index))
            }
            _ => {
                let compiled = (Arc::clone(routes), Arc::new(RouteIndex::new(routes)));
                self.routes = Some(compiled.clone());
                release_freed_memory();
                compiled
            }
        }
    }

    /// The health of the server with this id, to change before the next snapshot.
    pub fn health_mut(&mut self, id: u64) -> Option<&mut Health> {
        self.servers
            .values_mut()
            .find(|record| record.id == id)
            .map(|record| &mut record.health)
    }

    /// Every server's pool name, id and health.
    pub fn healths(&self) -> impl Iterator<Item = (&str, u64, &Health)> {
        self.servers
            .iter()
            .map(|((pool, _, _, _, _), record)| (pool.as_str(), record.id, &record.health))
    }

    /// The pool's signing key: from the secret in its `key_env` variable, or else the one
    /// generated for the pool the first time it was seen (kept across reloads, lost on restart).
    fn key_for(&mut self, pool: &PoolConfig) -> io::Result<Arc<StickyKey>> {
        let key_env = pool.sticky.as_ref().and_then(|s| s.key_env.as_deref());
        let secret = key_env
            .and_then(|name| std::env::var(name).ok())
            .filter(|secret| !secret.is_empty());
        if let Some(secret) = secret {
            let key = Arc::new(StickyKey::from_secret(&secret));
            self.keys.insert(pool.name.clone(), Arc::clone(&key));
            return Ok(key);
        }
        if let Some(key) = self.keys.get(&pool.name) {
            return Ok(Arc::clone(key));
        }
        if let Some(sticky) = &pool.sticky {
            match key_env {
                Some(name) => tracing::warn!(
                    pool = %pool.name,
                    "the sticky key variable {name} is not set: using a generated key, so \
                     cookie {} will not survive a restart",
                    sticky.cookie
                ),
                None => tracing::warn!(
                    pool = %pool.name,
                    "no sticky key_env: using a generated key, so cookie {} will not survive a \
                     restart",
                    sticky.cookie
                ),
            }
        }
        let key = Arc::new(StickyKey::generate()?);
        self.keys.insert(pool.name.clone(), Arc::clone(&key));
        Ok(key)
    }
}
