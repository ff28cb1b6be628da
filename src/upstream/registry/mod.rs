//! The pools as the operator has them now: the config file's, plus the changes made at run time
//! (servers added, removed, drained, reweighted), published to the workers as snapshots. This
//! file owns the [`Registry`] itself, the types its callers see, and publishing; the changes are
//! made in `changes` (at run time, through the admin API), `reload` (the config file read again)
//! and `reports` (what health checks and the request path report of a server).
//!
//! This is the control plane: every change takes the one mutex here, builds a whole new snapshot
//! and publishes it (what health checks find waits to be published a batch at a time, see
//! `reports`); the request path only ever loads the published snapshot, so it never waits on
//! this lock. A reload merges the file's new config with the run-time changes that still
//! apply: states and weights of servers that still exist, and added servers the file does not
//! now define itself. It also opens the listeners the file adds (binding them before anything
//! changes, so a bind failure refuses the reload) and closes those it removes.

mod changes;
mod reload;
mod reports;

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::config::certificates::CertificateStore;
use crate::config::server_tls::{PoolTls, Roots};
use crate::config::{Config, ConfigError, IntakeMode, ServerAddr, ServerConfig, ServerState};
use crate::intake::{ListenerChange, ListenerLoad};
use crate::stats::cache::{CacheHeld, PoolCacheView};
use crate::stats::traffic::{TrafficTotals, BUCKET_BOUNDS_US};
use crate::transport::ListenSocket;
use crate::upstream::health::HealthView;
use crate::upstream::snapshot::{Lineage, ListenerRules};
use crate::upstream::{Snapshot, SnapshotHandle};

/// Largest server weight.
pub const MAX_WEIGHT: u32 = 256;

/// A server to add at run time.
#[derive(Debug, Clone)]
pub struct NewServer {
    pub name: String,
    pub addr: ServerAddr,
    pub weight: u32,
    pub state: ServerState,
    /// 0: no limit.
    pub max_connections: u32,
}

/// Why a change was not made. Nothing changes when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("no pool named {0:?}")]
    NoPool(String),
    #[error("pool {pool:?} has no server named {server:?}")]
    NoServer { pool: String, server: String },
    #[error("pool {pool:?} already has a server named {server:?}")]
    Exists { pool: String, server: String },
    #[error("{0}")]
    Invalid(String),
    /// A reload found the file invalid (or unreadable); the running config stays.
    #[error("the new config was refused; the running one stays: {0}")]
    Refused(ConfigError),
    #[error("there is no config file to reload (this herdsman was started without one)")]
    NoConfigFile,
    #[error("cannot build the new snapshot: {0}")]
    Snapshot(io::Error),
    /// A reload's new listener could not be opened; the running config stays.
    #[error("listener {listener}: cannot bind {addr}: {error}; the running config stays")]
    Bind {
        listener: String,
        addr: SocketAddr,
        error: io::Error,
    },
}

/// A reload that applied: the generation it published, and the keys the file changes that wait
/// for a restart (see `config::hold_back_restart_only`). `POST /api/reload` answers with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reloaded {
    pub generation: u64,
    /// As the file writes them: `workers`, `[log] level`, `backlog of listener "web"`, …
    pub restart_required: Vec<String>,
}

/// How the registry reaches the workers' accept loops, to open and close listeners.
pub struct ListenerControl {
    pub intake: IntakeMode,
    /// One sender per worker, in worker order.
    pub workers: Vec<mpsc::UnboundedSender<ListenerChange>>,
}

/// `GET /api/pools`.
#[derive(Debug, Serialize)]
pub struct PoolsView {
    pub generation: u64,
    /// The upper bounds of the duration buckets in every `traffic.buckets` (the last bucket,
    /// past them all, is +Inf).
    pub bucket_bounds_us: &'static [u64],
    pub pools: Vec<PoolView>,
}

#[derive(Debug, Serialize)]
pub struct PoolView {
    pub name: String,
    pub balance: &'static str,
    pub sticky_cookie: Option<String>,
    /// Requests waiting now for a server below its `max_connections`.
    pub queued: u32,
    /// Requests that waited `queue_timeout` in vain (answered 503), since start.
    pub queue_timeouts: u64,
    /// Every request routed to the pool since start, by ending and duration.
    pub traffic: TrafficTotals,
    /// `[pool.tls]`: `null` for a pool its servers are spoken to in cleartext.
    pub tls: Option<PoolTlsView>,
    /// `null` for a pool without `[pool.cache]`. What the store holds of the pool (`held`) is
    /// the admin API's to fill in: the registry does not know the store.
    pub cache: Option<PoolCacheView>,
    pub servers: Vec<ServerView>,
}

/// A pool's `[pool.tls]` as the API shows it.
#[derive(Debug, Serialize)]
pub struct PoolTlsView {
    /// The CA file the servers' certificates must chain to, or `"system"` (the system's roots).
    pub ca: String,
    /// The pool's `sni`, if set (the name each server is asked for is its `tls_name`).
    pub sni: Option<String>,
    /// `false`: the servers' certificates are not checked.
    pub verify: bool,
    /// The chain file of the certificate herdsman presents to servers that ask for one (mTLS).
    pub client_certificate: Option<String>,
}

impl PoolTlsView {
    fn of(tls: &PoolTls) -> PoolTlsView {
        PoolTlsView {
            ca: match &tls.roots {
                Roots::File(path) => path.display().to_string(),
                Roots::System => "system".to_string(),
            },
            sni: tls.sni.clone(),
            verify: tls.verify,
            client_certificate: tls
                .client_certificate
                .as_ref()
                .map(|certificate| certificate.chain_file.display().to_string()),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerView {
    pub name: String,
    pub addr: String,
    pub state: &'static str,
    /// `"health": "up" | "down" (with "reason") | "ejected" (with "remaining_ms")`.
    #[serde(flatten)]
    pub health: HealthView,
    pub weight: u32,
    /// The weight it takes new sessions with now (below `weight` during slow start).
    pub effective_weight: u32,
    /// 0: no limit.
    pub max_connections: u32,
    pub active: u32,
    pub requests: u64,
    /// Peak-ewma's estimate of its time to a response head, in milliseconds (to the
    /// microsecond): `null` before its first answer, and in a pool balanced otherwise.
    pub latency_ms: Option<f64>,
    pub added_at_run_time: bool,
    /// In a pool with `[pool.tls]`: the name it is asked for in SNI and its certificate verified
    /// against (an address when neither it nor the pool has an `sni`). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_name: Option<String>,
    /// The requests it answered (or failed) since it joined, by ending and duration.
    pub traffic: TrafficTotals,
}

/// The control plane's record of the pools, and where snapshots are published.
pub struct Registry {
    state: Mutex<State>,
    snapshot: SnapshotHandle,
    /// The generation of the latest snapshot, for workers to notice a change promptly.
    published: watch::Sender<u64>,
    /// The file a reload reads; `None` for a config that did not come from a file (the demo).
    config_path: Option<PathBuf>,
    /// `None` when no workers listen (a registry on its own, in tests): reloads then leave
    /// listeners as they are.
    listener_control: Option<ListenerControl>,
    /// Reloads of the config file since start: applied, and refused.
    reloads: AtomicU64,
    failed_reloads: AtomicU64,
}

/// A listener as the workers know it (see `intake::ListenerChange`).
struct ListenerSlot {
    name: String,
    bound: SocketAddr,
    /// Its open connections and `max_connections`, shared with the workers.
    load: Arc<ListenerLoad>,
    /// A descriptor of its socket, to hand down at a binary upgrade (`None` in a registry with
    /// no workers).
    socket: Option<ListenSocket>,
    open: bool,
    /// Its pool's name: kept when the listener closes, so that connections it accepted before
    /// keep going to the same pool.
    pool: String,
    /// Its access log and allowed upgrades: kept when the listener closes, like `pool`, so that
    /// the requests of its remaining connections are still logged and treated alike.
    rules: ListenerRules,
}

struct State {
    /// The running config, run-time changes included; its listeners are the open ones.
    config: Config,
    /// Every listener slot ever opened, in slot order.
    slots: Vec<ListenerSlot>,
    lineage: Lineage,
    /// Servers added through the API: (pool, server) → how they were added. States and weights
    /// set later live in `states` and `weights`, which a reload applies to these too.
    added: HashMap<(String, String), ServerConfig>,
    /// States and weights set through the API, by (pool, server).
    states: HashMap<(String, String), ServerState>,
    weights: HashMap<(String, String), u32>,
    /// Checks changed a server's health since the last snapshot (see `publish_health`).
    health_waiting: bool,
}

/// The key of a server in the run-time change maps.
fn key(pool: &str, server: &str) -> (String, String) {
    (pool.to_string(), server.to_string())
}

impl Registry {
    /// The registry of `config`, with its first snapshot built and published. Its listeners
    /// take slots 0, 1, … in config order, at the addresses in `bound` (their real ports) with
    /// the loads the workers count on; at their configured addresses with loads of their own
    /// when `bound` is shorter.
    pub fn new(
        config: Config,
        config_path: Option<PathBuf>,
        listener_control: Option<ListenerControl>,
        bound: Vec<(SocketAddr, Arc<ListenerLoad>, Option<ListenSocket>)>,
    ) -> io::Result<Registry> {
        let mut bound = bound.into_iter();
        let slots: Vec<ListenerSlot> = config
            .listeners
            .iter()
            .map(|listener| {
                let (addr, load, socket) = bound.next().unwrap_or_else(|| {
                    let load = Arc::new(ListenerLoad::new(listener.max_connections));
                    (listener.bind, load, None)
                });
                ListenerSlot {
                    name: listener.name.clone(),
                    bound: addr,
                    load,
                    socket,
                    open: true,
                    pool: config.pools[listener.pool].name.clone(),
                    rules: ListenerRules::of(listener),
                }
            })
            .collect();
        let mut slots = slots;
        let mut lineage = Lineage::new();
        let first = lineage.next(
            &config,
            &HashSet::new(),
            listener_pools(&config, &mut slots),
            listener_rules(&config, &mut slots),
        )?;
        let (published, _) = watch::channel(first.generation);
        Ok(Registry {
            snapshot: Arc::new(arc_swap::ArcSwap::from_pointee(first)),
            published,
            config_path,
            listener_control,
            reloads: AtomicU64::new(0),
            failed_reloads: AtomicU64::new(0),
            state: Mutex::new(State {
                config,
                slots,
                lineage,
                added: HashMap::new(),
                states: HashMap::new(),
                weights: HashMap::new(),
                health_waiting: false,
            }),
        })
    }

    /// Where workers read the current snapshot.
    pub fn snapshot_handle(&self) -> SnapshotHandle {
        Arc::clone(&self.snapshot)
    }

    /// Changes to the generation published, for a worker to follow.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.published.subscribe()
    }

    /// Each TLS listener's name and certificates, as they serve now (for the metrics, the
    /// stats page and `herdsman ctl certs`).
    pub fn certificates(&self) -> Vec<(String, Arc<CertificateStore>)> {
        let state = self.lock();
        let listeners = state.config.listeners.iter();
        listeners
            .filter_map(|listener| {
                let tls = listener.tls.as_ref()?;
                Some((listener.name.clone(), Arc::clone(&tls.certificates)))
            })
            .collect()
    }

    /// Each TLS listener with `acme`: its name and the certificate ACME keeps for it (for the
    /// metrics, the stats page and `herdsman ctl certs`).
    pub fn acme_certificates(&self) -> Vec<(String, Arc<crate::config::acme::ManagedCertificate>)> {
        let state = self.lock();
        let listeners = state.config.listeners.iter();
        listeners
            .filter_map(|listener| {
                let acme = listener.tls.as_ref()?.acme.as_ref()?;
                Some((listener.name.clone(), Arc::clone(&acme.managed)))
            })
            .collect()
    }

    /// Every file the TLS listeners' certificates were read from (chains, keys, client CAs).
    pub fn certificate_files(&self) -> Vec<std::path::PathBuf> {
        let state = self.lock();
        let listeners = state.config.listeners.iter();
        listeners
            .filter_map(|listener| listener.tls.as_ref())
            .flat_map(|tls| tls.files())
            .collect()
    }

    /// Reads every TLS listener's certificates again from their files (which changed on disk)
    /// and serves them from the next handshake on: the number of listeners re-read. If any file
    /// does not load, nothing changes and the error names the listener, the file and the reason.
    pub fn reread_certificates(&self) -> Result<usize, String> {
        let mut state = self.lock();
        let mut fresh = Vec::new();
        for (index, listener) in state.config.listeners.iter().enumerate() {
            if let Some(tls) = &listener.tls {
                let again = tls
                    .read_again()
                    .map_err(|why| format!("listener {}: {why}", listener.name))?;
                fresh.push((index, again));
            }
        }
        let count = fresh.len();
        for (index, tls) in fresh {
            state.config.listeners[index].tls = Some(tls);
        }
        self.publish(&mut state)
            .map_err(|error| error.to_string())?;
        Ok(count)
    }

    /// The running config, run-time changes included.
    pub fn config(&self) -> Config {
        self.lock().config.clone()
    }

    /// Closes the descriptors kept for an upgrade (a stop): with the workers' closed too, the
    /// listening sockets close and new connections are refused.
    pub fn drop_listener_sockets(&self) {
        for slot in &mut self.lock().slots {
            slot.socket = None;
        }
    }

    /// Each open listener's name and socket descriptor, to hand down at a binary upgrade.
    pub fn listener_sockets(&self) -> Vec<(String, std::os::fd::RawFd)> {
        self.lock()
            .slots
            .iter()
            .filter(|slot| slot.open)
            .filter_map(|slot| {
                let socket = slot.socket.as_ref()?;
                Some((slot.name.clone(), std::os::fd::AsRawFd::as_raw_fd(socket)))
            })
            .collect()
    }

    /// The address an open listener is bound to (its real port when the config said port 0).
    pub fn listener_addr(&self, name: &str) -> Option<SocketAddr> {
        self.lock()
            .slots
            .iter()
            .find(|slot| slot.open && slot.name == name)
            .map(|slot| slot.bound)
    }

    /// Every pool and server as of the current snapshot, with live counters.
    pub fn pools(&self) -> PoolsView {
        let snapshot = self.snapshot.load();
        PoolsView {
            bucket_bounds_us: &BUCKET_BOUNDS_US,
            generation: snapshot.generation,
            pools: snapshot
                .pools
                .iter()
                .map(|pool| PoolView {
                    name: pool.name.clone(),
                    balance: pool.balance().name(),
                    sticky_cookie: pool.sticky_cookie.clone(),
                    queued: pool.queue.waiting(),
                    queue_timeouts: pool.queue.timed_out(),
                    traffic: pool.traffic.totals(),
                    tls: pool.tls.as_ref().map(PoolTlsView::of),
                    cache: pool.caches.then(|| {
                        let requests = pool.cache_counts.totals();
                        PoolCacheView {
                            requests,
                            hit_ratio: requests.hit_ratio(),
                            held: CacheHeld::default(),
                        }
                    }),
                    servers: pool.servers.iter().map(server_view).collect(),
                })
                .collect(),
        }
    }

    /// [`Registry::publish`] for changes nobody waits on: a failure is logged.
    fn publish_logged(&self, state: &mut State) -> Result<u64, ChangeError> {
        self.publish(state).inspect_err(|error| {
            tracing::error!("cannot publish a health change: {error}");
        })
    }

    /// Builds the snapshot of the running config and publishes it; returns its generation.
    fn publish(&self, state: &mut State) -> Result<u64, ChangeError> {
        let added: HashSet<(String, String)> = state.added.keys().cloned().collect();
        let pools = listener_pools(&state.config, &mut state.slots);
        let rules = listener_rules(&state.config, &mut state.slots);
        let snapshot = state
            .lineage
            .next(&state.config, &added, pools, rules)
            .map_err(ChangeError::Snapshot)?;
        let generation = snapshot.generation;
        // Whatever checks changed is in it.
        state.health_waiting = false;
        self.snapshot.store(Arc::new(snapshot));
        self.published.send_replace(generation);
        Ok(generation)
    }

    fn view(&self, pool: &str, name: &str) -> Result<ServerView, ChangeError> {
        let snapshot = self.snapshot.load();
        let (pool, index) = find(&snapshot, pool, name)?;
        Ok(server_view(&pool.servers[index]))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state as whole as any change leaves it:
        // every change is made to the config and then published in one step.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn server_view(server: &crate::upstream::Server) -> ServerView {
    ServerView {
        name: server.name.clone(),
        addr: server.addr.to_string(),
        state: server.state.word(),
        health: server.health.clone(),
        weight: server.weight,
        effective_weight: server.effective_weight,
        max_connections: server.max_connections,
        active: server.active(),
        requests: server.traffic.started_total(),
        latency_ms: server
            .counters
            .latency
            .read()
            .millis()
            .map(|ms| (ms * 1000.0).round() / 1000.0),
        added_at_run_time: server.added_at_run_time,
        tls_name: server
            .tls
            .as_ref()
            .map(|tls| tls.name.to_str().into_owned()),
        traffic: server.traffic.totals(),
    }
}

fn find<'s>(
    snapshot: &'s Snapshot,
    pool: &str,
    name: &str,
) -> Result<(&'s crate::upstream::Pool, usize), ChangeError> {
    let found = snapshot
        .pools
        .iter()
        .find(|p| p.name == pool)
        .ok_or_else(|| ChangeError::NoPool(pool.to_string()))?;
    let index = found.position(name).ok_or_else(|| ChangeError::NoServer {
        pool: pool.to_string(),
        server: name.to_string(),
    })?;
    Ok((found, index))
}

/// Each slot's pool, noting an open listener's pool name in its slot: a closed slot keeps the
/// pool it had (the first pool, should that one be gone too).
fn listener_pools(config: &Config, slots: &mut [ListenerSlot]) -> Vec<usize> {
    slots
        .iter_mut()
        .map(|slot| {
            let listener = config.listeners.iter().find(|l| l.name == slot.name);
            if let (true, Some(listener)) = (slot.open, listener) {
                slot.pool = config.pools[listener.pool].name.clone();
            }
            config
                .pools
                .iter()
                .position(|p| p.name == slot.pool)
                .unwrap_or(0)
        })
        .collect()
}

/// Each slot's rules, noting an open listener's in its slot: a closed slot keeps the ones it
/// had. A reload that changes a listener's `access_log` or `upgrade` thus applies to its next
/// request.
fn listener_rules(config: &Config, slots: &mut [ListenerSlot]) -> Vec<ListenerRules> {
    slots
        .iter_mut()
        .map(|slot| {
            let listener = config.listeners.iter().find(|l| l.name == slot.name);
            if let (true, Some(listener)) = (slot.open, listener) {
                slot.rules = ListenerRules::of(listener);
            }
            slot.rules.clone()
        })
        .collect()
}
