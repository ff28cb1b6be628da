//! What an exchange needs of the worker it runs on: the snapshot in use, the worker's idle server
//! connections, its random numbers, its counters, the health checker's ear, its access log lines,
//! and whether a stop has begun. One per worker, reached through an `Rc`: nothing here is shared
//! with another thread except through atomics and channels, so the request path takes no lock.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use super::{Client, Downstream, Outcome};
use crate::access_log::{Entry, LogSink, Tls, WorkerAccessLog};
use crate::cache::shared::{CacheConfig, SharedStore};
use crate::cache::Store;
use crate::config::RouteCache;
use crate::http2::servers::ServerConnections;
use crate::rate_limit::{ActiveLimits, RateLimits, RedisLink};
use crate::rules::request_id::RequestIds;
use crate::stats::cache::CacheOutcome;
use crate::stats::traffic::{Ending, Took};
use crate::stats::{BufferUse, Stats, WorkerCounters, WorkerLoad};
use crate::transport::{InUse, Stream};
use crate::upstream::health::ServerReport;
use crate::upstream::idle::{IdleCaps, IdleConnections};
use crate::upstream::{Snapshot, SnapshotHandle};

/// What the cache store of `snapshot` is made for.
fn cache_config(snapshot: &Snapshot) -> CacheConfig {
    CacheConfig {
        settings: snapshot.cache.clone(),
        pools: snapshot
            .pools
            .iter()
            .filter_map(|pool| Some((pool.name.clone(), pool.cache.clone()?)))
            .chain(
                snapshot
                    .routes
                    .iter()
                    .filter_map(|route| match &route.cache {
                        RouteCache::On(rules) => {
                            let pool = &snapshot.pools.get(route.pool?)?.name;
                            Some((format!("{pool} (a route's)"), (**rules).clone()))
                        }
                        _ => None,
                    }),
            )
            .collect(),
    }
}

/// What every worker shares with the others and with the admin API, across reloads.
#[derive(Debug, Clone)]
pub struct ProcessShared {
    /// The cache store (made when a pool first caches).
    pub cache: Arc<SharedStore>,
    /// The rate limits, each kept while its rule is.
    pub rate_limits: Arc<RateLimits>,
}

/// The rate limits of `snapshot`, from the process's.
fn rate_limits_of(limits: &RateLimits, snapshot: &Snapshot) -> Option<Arc<ActiveLimits>> {
    let listeners: Vec<_> = snapshot
        .listener_rules
        .iter()
        .map(|rules| rules.rate_limit.as_deref())
        .collect();
    limits.follow(&snapshot.routes, &listeners)
}

/// The request-path half of a worker's state.
pub struct ProxyContext {
    /// The worker's index.
    pub index: usize,
    stats: Arc<Stats>,
    snapshot_cache: RefCell<arc_swap::Cache<SnapshotHandle, Arc<Snapshot>>>,
    /// The current snapshot wrapped in an `Rc`, so that tasks clone a thread-local count rather
    /// than the `Arc`'s shared one on every request (that count's cache line would otherwise
    /// bounce between cores once per request per worker).
    #[allow(clippy::redundant_allocation)]
    snapshot_local: RefCell<Rc<Arc<Snapshot>>>,
    idle: RefCell<IdleConnections>,
    idle_added: Notify,
    /// HTTP/2 connections to servers, each carrying many requests at once.
    http2_servers: ServerConnections,
    pub rng: RefCell<fastrand::Rng>,
    /// This worker's maker of request ids (`[request_id]`).
    pub request_ids: RequestIds,
    /// Fault injection: the next accept on this worker panics (see `/__herdsman/panic-accept`).
    #[cfg(feature = "fault-injection")]
    pub panic_next_accept: Cell<bool>,
    /// Fault injection: the worker's event loop panics (see `/__herdsman/panic-worker`).
    #[cfg(feature = "fault-injection")]
    pub panic_loop: Notify,
    failing: mpsc::UnboundedSender<ServerReport>,
    stopping: Cell<bool>,
    stop_notify: Notify,
    /// Set when the worker closes what is still open at a stop's deadline: why, as a tunnel's
    /// access log line says it (`shutdown`, `upgrade`).
    cut: Cell<Option<&'static str>>,
    cut_notify: Notify,
    /// This worker's access log lines, waiting for the writer.
    access_log: WorkerAccessLog,
    /// The process's cache store and rate limits, across reloads.
    shared: ProcessShared,
    /// The store for the snapshot in use (`None` when no pool caches), taken up with it: in an
    /// `Rc` as the snapshot is, so that a request clones a count of this thread's.
    #[allow(clippy::redundant_allocation)]
    cache: RefCell<Option<Rc<Arc<Store>>>>,
    /// The rate limits of the snapshot in use (`None` when it has none), taken up with it.
    rate_limits: RefCell<Option<Arc<ActiveLimits>>>,
    /// `rate_limits` is `Some`: what a request tests (one load, no borrow).
    rate_limited: Cell<bool>,
    /// This worker's connection to Redis, for limits counted there (`[rate_limit] redis`).
    redis: RedisLink,
    /// The worker's own handle on this context, for the tasks it starts apart from any
    /// connection ([`ProxyContext::spawn`]).
    me: Weak<ProxyContext>,
}

impl ProxyContext {
    pub fn new(
        index: usize,
        snapshot: SnapshotHandle,
        stats: Arc<Stats>,
        failing: mpsc::UnboundedSender<ServerReport>,
        access_log: Option<LogSink>,
        shared: ProcessShared,
        me: Weak<ProxyContext>,
    ) -> ProxyContext {
        let current = snapshot.load_full();
        let cache = shared.cache.follow(&cache_config(&current)).map(Rc::new);
        let rate_limits = rate_limits_of(&shared.rate_limits, &current);
        ProxyContext {
            index,
            stats,
            snapshot_cache: RefCell::new(arc_swap::Cache::new(snapshot)),
            snapshot_local: RefCell::new(Rc::new(current)),
            idle: RefCell::new(IdleConnections::new()),
            idle_added: Notify::new(),
            http2_servers: ServerConnections::default(),
            rng: RefCell::new(fastrand::Rng::new()),
            request_ids: RequestIds::new(index),
            #[cfg(feature = "fault-injection")]
            panic_next_accept: Cell::new(false),
            #[cfg(feature = "fault-injection")]
            panic_loop: Notify::new(),
            failing,
            stopping: Cell::new(false),
            stop_notify: Notify::new(),
            cut: Cell::new(None),
            cut_notify: Notify::new(),
            access_log: WorkerAccessLog::new(access_log),
            shared,
            cache: RefCell::new(cache),
            rate_limited: Cell::new(rate_limits.is_some()),
            rate_limits: RefCell::new(rate_limits),
            redis: RedisLink::default(),
            me,
        }
    }

    /// Runs `task` on this worker apart from any connection (a cache refresh no client waits
    /// for); it gets the context for its own.
    pub fn spawn<F>(&self, task: impl FnOnce(Rc<ProxyContext>) -> F)
    where
        F: Future<Output = ()> + 'static,
    {
        if let Some(context) = self.me.upgrade() {
            tokio::task::spawn_local(task(context));
        }
    }

    /// The snapshot to use for the next request.
    #[allow(clippy::redundant_allocation)]
    pub fn snapshot(&self) -> Rc<Arc<Snapshot>> {
        let mut cache = self.snapshot_cache.borrow_mut();
        let current = cache.load();
        let mut local = self.snapshot_local.borrow_mut();
        if !Arc::ptr_eq(&local, current) {
            *local = Rc::new(Arc::clone(current));
            // Connections to servers removed or re-addressed must not carry another request.
            let mut idle = self.idle.borrow_mut();
            idle.retain_servers(|server| current.has_server(server));
            self.publish_idle_count(&idle);
            let store = self.shared.cache.follow(&cache_config(current));
            *self.cache.borrow_mut() = store.map(Rc::new);
            let limits = rate_limits_of(&self.shared.rate_limits, current);
            self.rate_limited.set(limits.is_some());
            *self.rate_limits.borrow_mut() = limits;
        }
        Rc::clone(&local)
    }

    /// The cache store of the snapshot last taken up by [`ProxyContext::snapshot`].
    #[allow(clippy::redundant_allocation)]
    pub fn cache(&self) -> Option<Rc<Arc<Store>>> {
        self.cache.borrow().clone()
    }

    /// Whether the snapshot last taken up by [`ProxyContext::snapshot`] has rate limits.
    #[inline]
    pub fn rate_limited(&self) -> bool {
        self.rate_limited.get()
    }

    /// This worker's connection to Redis (made at its first check).
    pub fn redis(&self) -> &RedisLink {
        &self.redis
    }

    /// Its rate limits, `None` when it has none.
    pub fn rate_limits(&self) -> std::cell::Ref<'_, Option<Arc<ActiveLimits>>> {
        self.rate_limits.borrow()
    }

    /// Counts a failure a request met on `server`; the worker whose count reaches the pool's
    /// limit (or another multiple of it, should the server fail on after an ejection) tells the
    /// health checker, which decides on ejection.
    pub fn server_failed(
        &self,
        server: &crate::upstream::Server,
        passive: &crate::config::Passive,
    ) {
        let in_a_row = server.counters.failed();
        let limit = passive.consecutive_failures;
        if limit > 0 && in_a_row.is_multiple_of(limit) {
            let _ = self.failing.send(ServerReport::Failing(server.id));
        }
    }

    /// `server` refused a connection: the health checker takes it out of rotation until it
    /// listens again. Every refusal is told (the checker ignores those of a server it already
    /// took out), so none is lost between a snapshot and the next.
    pub fn server_refused(&self, server: &crate::upstream::Server) {
        let _ = self.failing.send(ServerReport::Refused(server.id));
    }

    /// True once a graceful stop has begun: finish what is in flight, start nothing new.
    pub fn is_stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Completes when a graceful stop begins.
    pub async fn stopped(&self) {
        // Single-threaded: the flag cannot be set between this check and the registration of
        // the `notified()` future, which happens in the same poll.
        if self.stopping.get() {
            return;
        }
        self.stop_notify.notified().await;
    }

    /// A stop's deadline has come and the worker is about to close what is still open: tunnels
    /// end now, saying `why` in their log lines, rather than vanish with the runtime.
    pub fn cut_tunnels(&self, why: &'static str) {
        self.cut.set(Some(why));
        self.cut_notify.notify_waiters();
    }

    /// Completes when [`ProxyContext::cut_tunnels`] is called, with its reason.
    pub async fn tunnels_cut(&self) -> &'static str {
        loop {
            // Single-threaded, as in `stopped`: no call can fall between check and registration.
            if let Some(why) = self.cut.get() {
                return why;
            }
            self.cut_notify.notified().await;
        }
    }

    /// Begins a graceful stop: wakes whoever waits in [`ProxyContext::stopped`] and closes the
    /// idle server connections (no request will take them).
    pub fn begin_stop(&self) {
        self.stopping.set(true);
        self.stop_notify.notify_waiters();
        // Connections between requests wait in the worker's wheel.
        crate::transport::deadline::stop_waits();
        let mut idle = self.idle.borrow_mut();
        idle.clear();
        self.publish_idle_count(&idle);
        self.http2_servers.stop();
    }

    /// Keeps a server connection, idle `since` then, for reuse by this worker's later requests,
    /// when its server's recent use calls for it within `caps`; for no longer than `limit` when
    /// its server said how long it keeps idle connections.
    pub fn keep_idle(
        &self,
        server: u64,
        stream: Stream,
        caps: IdleCaps,
        since: crate::transport::Moment,
        limit: Option<Duration>,
    ) {
        if self.stopping.get() {
            return;
        }
        let mut idle = self.idle.borrow_mut();
        let was_empty = idle.is_empty();
        idle.put(server, stream, caps, since, limit);
        self.publish_idle_count(&idle);
        if was_empty {
            self.idle_added.notify_one();
        }
    }

    /// A connection to `server` handed out for one exchange: an idle one kept by this worker, if
    /// one is fresher than `max_idle` at `now` (the caller's clock reading, which it uses for more
    /// than this; `None`: a fresh one is wanted), and in any case its share of the server's
    /// connections in use, which the connection the exchange uses (this one, or one it opens)
    /// carries until it is done.
    pub fn take_idle(
        &self,
        server: u64,
        max_idle: Option<Duration>,
        now: crate::transport::Moment,
    ) -> (Option<Stream>, InUse) {
        let mut idle = self.idle.borrow_mut();
        let taken = idle.take(server, max_idle, now);
        self.publish_idle_count(&idle);
        taken
    }

    /// Completes once this worker keeps an idle server connection (at once if it keeps some).
    pub async fn idle_kept(&self) {
        if self.idle.borrow().is_empty() {
            self.idle_added.notified().await;
        }
    }

    /// Closes the idle server connections that outlived `max_idle`, and, when `purge` is set,
    /// those beyond each server's renewed estimate of need (see `upstream::idle`).
    pub fn close_expired_idle(&self, max_idle: Duration, purge: bool) {
        let mut idle = self.idle.borrow_mut();
        idle.close_expired(max_idle);
        if purge {
            idle.purge();
        }
        self.publish_idle_count(&idle);
        self.http2_servers.forget_ended();
    }

    /// This worker's HTTP/2 connections to servers.
    pub fn http2_servers(&self) -> &ServerConnections {
        &self.http2_servers
    }

    /// Counts a finished exchange that `took` so long: in the worker's requests, and in its
    /// pool's and server's traffic when it was routed (and in its pool's cache counts, when the
    /// pool caches).
    pub fn record(&self, snapshot: &Snapshot, outcome: &Outcome, took: Duration) {
        let counters = self.counters();
        WorkerCounters::bump(&counters.requests);
        let (Some(pool), server) = outcome.routed(snapshot) else {
            WorkerCounters::bump(&counters.rejected);
            return;
        };
        let took = Took::of(took);
        pool.traffic.record_took(self.index, outcome.ending, took);
        if let Some(cache) = outcome.cache {
            pool.cache_counts.record(self.index, cache);
        }
        if let Some(server) = server {
            server.traffic.record_took(self.index, outcome.ending, took);
        }
    }

    /// Writes a finished exchange's line, when its listener keeps an access log (what the line
    /// needs of the request head was captured while it was read, for such listeners only).
    pub fn log_access<D: Downstream>(
        &self,
        snapshot: &Snapshot,
        listener: usize,
        client: &Client<D>,
        outcome: &Outcome,
        took: Duration,
    ) {
        let request = &client.request_log;
        let Some(log) = snapshot.access_log(listener) else {
            return;
        };
        let (pool, server) = outcome.routed(snapshot);
        let entry = Entry {
            client: client.address_text.as_bytes(),
            request,
            status: match outcome.ending {
                Ending::Status(status) => Some(status),
                Ending::Unanswered => None,
            },
            body_bytes: outcome.body_bytes,
            pool: pool.map(|pool| pool.name.as_str()),
            server: server.map(|server| server.name.as_str()),
            upstream: outcome.upstream,
            total: took,
            sticky: outcome.sticky,
            buffered: outcome.buffered,
            received: outcome.received,
            ended: outcome.ended,
            cache: outcome.cache.map(CacheOutcome::as_str),
            rule: outcome.rule.map(super::outcome::Rule::as_str),
            // Only where requests get ids: other lines stay as they were.
            request_id: snapshot
                .request_id
                .as_ref()
                .map(|_| client.request_id.as_bytes()),
            tls: client.downstream.tls().map(|facts| Tls {
                version: facts.version,
                cipher: facts.cipher,
                server_name: facts.server_name.as_deref(),
                client_certificate: facts.client_certificate.as_ref().map(|c| &*c.subject),
            }),
        };
        self.access_log.write(log, &entry);
    }

    /// This worker's access log lines, waiting for the writer.
    pub fn access_log(&self) -> &WorkerAccessLog {
        &self.access_log
    }

    /// Publishes how many idle server connections this worker keeps, for the metrics.
    fn publish_idle_count(&self, idle: &IdleConnections) {
        let count = u32::try_from(idle.len()).unwrap_or(u32::MAX);
        self.counters().idle_backend.store(count, Ordering::Relaxed);
    }

    /// This worker's own counters.
    /// What buffered bodies hold now, over the process.
    pub fn buffer_use(&self) -> &BufferUse {
        &self.stats.buffer_use
    }

    pub fn counters(&self) -> &WorkerCounters {
        &self.stats.counters[self.index]
    }

    /// This worker's load, as the intake weighs it.
    pub fn load(&self) -> &WorkerLoad {
        &self.stats.loads[self.index]
    }
}
