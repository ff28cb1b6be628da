//! The pools as the operator has them now: the config file's, plus the changes made at run time
//! (servers added, removed, drained, reweighted), published to the workers as snapshots.
//!
//! This is the control plane: every change takes the one mutex here, builds a whole new snapshot
//! and publishes it; the request path only ever loads the published snapshot, so it never waits
//! on this lock. A reload merges the file's new config with the run-time changes that still
//! apply: states and weights of servers that still exist, and added servers the file does not
//! now define itself. It also opens the listeners the file adds (binding them before anything
//! changes, so a bind failure refuses the reload) and closes those it removes.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::config::{
    hold_back_restart_only, is_valid_name, Config, ConfigError, IntakeMode, ListenerConfig,
    ServerConfig, ServerState,
};
use crate::intake::{self, ListenerChange, ListenerLoad};
use crate::stats::traffic::{TrafficTotals, BUCKET_BOUNDS_US};
use crate::upstream::health::HealthView;
use crate::upstream::snapshot::{Lineage, ListenerRules};
use crate::upstream::{Snapshot, SnapshotHandle};

/// Largest server weight.
pub const MAX_WEIGHT: u32 = 256;

/// A server to add at run time.
#[derive(Debug, Clone)]
pub struct NewServer {
    pub name: String,
    pub addr: SocketAddr,
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
    pub servers: Vec<ServerView>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
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
    pub added_at_run_time: bool,
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
    socket: Option<socket2::Socket>,
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
        bound: Vec<(SocketAddr, Arc<ListenerLoad>, Option<socket2::Socket>)>,
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
                    servers: pool.servers.iter().map(server_view).collect(),
                })
                .collect(),
        }
    }

    pub fn add_server(&self, pool: &str, server: NewServer) -> Result<ServerView, ChangeError> {
        if !is_valid_name(&server.name) {
            return Err(ChangeError::Invalid(format!(
                "server name {:?} is not valid: use up to 255 letters, digits, '_', '.' and '-'",
                server.name
            )));
        }
        check_weight(server.weight)?;
        if server.addr.port() == 0 {
            return Err(ChangeError::Invalid(format!(
                "address {} has port 0, which cannot be connected to",
                server.addr
            )));
        }
        let mut state = self.lock();
        let servers = &mut pool_mut(&mut state.config, pool)?.servers;
        if servers.iter().any(|s| s.name == server.name) {
            return Err(ChangeError::Exists {
                pool: pool.to_string(),
                server: server.name,
            });
        }
        let added = ServerConfig {
            name: server.name.clone(),
            addr: server.addr,
            weight: server.weight,
            state: server.state,
            max_connections: server.max_connections,
        };
        servers.push(added.clone());
        state.added.insert(key(pool, &server.name), added);
        self.publish(&mut state)?;
        tracing::info!(pool, server = %server.name, addr = %server.addr, "server added");
        self.view(pool, &server.name)
    }

    /// Removes a server: it gets no new requests; those in flight finish.
    pub fn remove_server(&self, pool: &str, name: &str) -> Result<ServerView, ChangeError> {
        let removed = self.view(pool, name)?;
        let mut state = self.lock();
        let servers = &mut pool_mut(&mut state.config, pool)?.servers;
        let index = position(servers, pool, name)?;
        servers.remove(index);
        let server_key = key(pool, name);
        state.added.remove(&server_key);
        state.states.remove(&server_key);
        state.weights.remove(&server_key);
        self.publish(&mut state)?;
        tracing::info!(pool, server = name, "server removed");
        Ok(removed)
    }

    pub fn set_state(
        &self,
        pool: &str,
        name: &str,
        new_state: ServerState,
    ) -> Result<ServerView, ChangeError> {
        let mut state = self.lock();
        let servers = &mut pool_mut(&mut state.config, pool)?.servers;
        let index = position(servers, pool, name)?;
        servers[index].state = new_state;
        state.states.insert(key(pool, name), new_state);
        self.publish(&mut state)?;
        tracing::info!(
            pool,
            server = name,
            state = new_state.word(),
            "server state set"
        );
        drop(state);
        self.view(pool, name)
    }

    pub fn set_weight(
        &self,
        pool: &str,
        name: &str,
        weight: u32,
    ) -> Result<ServerView, ChangeError> {
        check_weight(weight)?;
        let mut state = self.lock();
        let servers = &mut pool_mut(&mut state.config, pool)?.servers;
        let index = position(servers, pool, name)?;
        servers[index].weight = weight;
        state.weights.insert(key(pool, name), weight);
        self.publish(&mut state)?;
        tracing::info!(pool, server = name, weight, "server weight set");
        drop(state);
        self.view(pool, name)
    }

    /// The `X-Herdsman-Test` value that reaches `name` while it is in the `test` state.
    pub fn test_token(&self, pool: &str, name: &str) -> Result<String, ChangeError> {
        let snapshot = self.snapshot.load();
        let (pool, index) = find(&snapshot, pool, name)?;
        Ok(pool.key.test_token(&pool.name, &pool.servers[index].name))
    }

    /// Re-reads the config file and applies it with the run-time changes that still apply.
    /// Returns the new generation and the keys that wait for a restart (each logged too). A file
    /// that does not validate changes nothing. Counted, applied or refused.
    pub fn reload(&self) -> Result<Reloaded, ChangeError> {
        let reloaded = self.apply_config_file();
        let count = if reloaded.is_ok() {
            &self.reloads
        } else {
            &self.failed_reloads
        };
        count.fetch_add(1, Ordering::Relaxed);
        reloaded
    }

    /// Reloads since start: (applied, refused).
    pub fn reload_counts(&self) -> (u64, u64) {
        (
            self.reloads.load(Ordering::Relaxed),
            self.failed_reloads.load(Ordering::Relaxed),
        )
    }

    fn apply_config_file(&self) -> Result<Reloaded, ChangeError> {
        let path = self.config_path.as_ref().ok_or(ChangeError::NoConfigFile)?;
        let mut fresh = Config::load(path).map_err(ChangeError::Refused)?;
        let mut state = self.lock();
        let restart_required = hold_back_restart_only(&state.config, &mut fresh);
        let (opening, closing) = self.listener_changes(&state.config, &mut fresh)?;
        let State {
            added,
            states,
            weights,
            ..
        } = &mut *state;
        // Added servers stay unless the file now defines one of that name (or drops the pool).
        added.retain(|(pool, server), _| {
            fresh
                .pools
                .iter()
                .find(|p| &p.name == pool)
                .is_some_and(|p| p.servers.iter().all(|s| &s.name != server))
        });
        for ((pool, _), server) in added.iter() {
            if let Some(p) = fresh.pools.iter_mut().find(|p| &p.name == pool) {
                p.servers.push(server.clone());
            }
        }
        // States and weights set at run time stay for servers that still exist.
        let mut still_there = HashSet::new();
        for pool in &mut fresh.pools {
            for server in &mut pool.servers {
                let server_key = key(&pool.name, &server.name);
                if let Some(&set) = states.get(&server_key) {
                    server.state = set;
                }
                if let Some(&set) = weights.get(&server_key) {
                    server.weight = set;
                }
                still_there.insert(server_key);
            }
        }
        states.retain(|server_key, _| still_there.contains(server_key));
        weights.retain(|server_key, _| still_there.contains(server_key));
        state.config = fresh;
        // Slots first, so that the snapshot maps each new listener to its pool before any
        // worker accepts on it.
        let mut closed = Vec::new();
        for (index, slot) in state.slots.iter_mut().enumerate() {
            if slot.open && closing.contains(&slot.name) {
                slot.open = false;
                slot.socket = None;
                closed.push(index);
                tracing::info!(listener = %slot.name, addr = %slot.bound, "listener closed by reload");
            }
        }
        // Open listeners take the file's max_connections, new ones with a load of their own.
        for slot in state.slots.iter().filter(|slot| slot.open) {
            if let Some(listener) = state.config.listeners.iter().find(|l| l.name == slot.name) {
                slot.load.set_limit(listener.max_connections);
            }
        }
        let mut opened = Vec::new();
        for (name, bound, sockets) in opening {
            let limit = state
                .config
                .listeners
                .iter()
                .find(|l| l.name == name)
                .map_or(0, |l| l.max_connections);
            let load = Arc::new(ListenerLoad::new(limit));
            let socket = sockets.first().and_then(|first| first.try_clone().ok());
            opened.push((state.slots.len(), sockets, Arc::clone(&load)));
            state.slots.push(ListenerSlot {
                name: name.clone(),
                bound,
                load,
                socket,
                open: true,
                pool: String::new(),
                rules: ListenerRules::default(),
            });
            tracing::info!(listener = %name, addr = %bound, "listener opened by reload");
        }
        let generation = self.publish(&mut state)?;
        if let Some(control) = &self.listener_control {
            for (slot, sockets, load) in opened {
                for (worker, socket) in control.workers.iter().zip(sockets) {
                    let load = Arc::clone(&load);
                    let _ = worker.send(ListenerChange::Open { slot, socket, load });
                }
            }
            for slot in closed {
                for worker in &control.workers {
                    let _ = worker.send(ListenerChange::Close { slot });
                }
            }
        }
        for key in &restart_required {
            tracing::warn!(%key, "changed in the file: takes effect on restart (or binary upgrade)");
        }
        tracing::info!(generation, path = %path.display(), "config reloaded");
        Ok(Reloaded {
            generation,
            restart_required,
        })
    }

    /// The listeners a reload to `fresh` opens (bound now: name, address, one socket per
    /// worker) and closes (names). A listener whose address changed is closed and opened anew;
    /// `fresh.listeners` keeps only listeners that will be open. Binds nothing, and changes
    /// nothing, without workers to give sockets to.
    #[allow(clippy::type_complexity)]
    fn listener_changes(
        &self,
        running: &Config,
        fresh: &mut Config,
    ) -> Result<
        (
            Vec<(String, SocketAddr, Vec<socket2::Socket>)>,
            HashSet<String>,
        ),
        ChangeError,
    > {
        let Some(control) = &self.listener_control else {
            fresh.listeners = running_listeners(running, fresh);
            return Ok((Vec::new(), HashSet::new()));
        };
        let same = |new: &ListenerConfig| {
            running
                .listeners
                .iter()
                .find(|old| old.name == new.name)
                .is_some_and(|old| old.bind == new.bind)
        };
        let closing: HashSet<String> = running
            .listeners
            .iter()
            .filter(|old| {
                !fresh
                    .listeners
                    .iter()
                    .any(|new| new.name == old.name && same(new))
            })
            .map(|old| old.name.clone())
            .collect();
        let mut opening = Vec::new();
        for new in fresh.listeners.iter().filter(|new| !same(new)) {
            let bind_error = |error| ChangeError::Bind {
                listener: new.name.clone(),
                addr: new.bind,
                error,
            };
            let sockets =
                intake::bind_listener(control.intake, new.bind, new.backlog, control.workers.len())
                    .map_err(bind_error)?;
            let bound = sockets[0]
                .local_addr()
                .map_err(bind_error)?
                .as_socket()
                .unwrap_or(new.bind);
            opening.push((new.name.clone(), bound, sockets));
        }
        Ok((opening, closing))
    }

    /// Active checks: marks the server with this id down, with the reason, or (`None`) up again.
    /// Changes nothing, and publishes nothing, when it already was.
    pub fn set_down(&self, id: u64, reason: Option<String>) {
        let mut state = self.lock();
        let Some(health) = state.lineage.health_mut(id) else {
            return;
        };
        if health.down == reason {
            return;
        }
        let name = self.name_of(id);
        match &reason {
            Some(why) => tracing::warn!(server = %name, reason = %why, "server down"),
            None => {
                tracing::info!(server = %name, "server up again");
                health.back_since = Some(std::time::Instant::now());
            }
        }
        health.down = reason;
        let _ = self.publish_logged(&mut state);
    }

    /// The server with this id refused a connection: it takes no new requests until a connection
    /// to it opens again ([`Registry::listening`]). No cap applies (unlike ejection): a refusal
    /// is certain, and a pool whose every server refuses has nothing to offer anyway. Returns
    /// the server's address when this took it out of rotation, for the caller to probe.
    pub fn refused(&self, id: u64) -> Option<std::net::SocketAddr> {
        let addr = self.addr_of(id)?;
        let mut state = self.lock();
        let health = state.lineage.health_mut(id)?;
        if health.refused {
            return None;
        }
        health.refused = true;
        tracing::warn!(server = %self.name_of(id), "server refused a connection: out of rotation until it listens again");
        let _ = self.publish_logged(&mut state);
        Some(addr)
    }

    /// Whether the server with this id is out of rotation for a refusal (false for a server that
    /// is gone).
    pub fn is_refused(&self, id: u64) -> bool {
        let mut state = self.lock();
        state
            .lineage
            .health_mut(id)
            .is_some_and(|health| health.refused)
    }

    /// A connection to the server with this id opened (a probe, or an active check): back in
    /// rotation if a refusal took it out.
    pub fn listening(&self, id: u64) {
        let mut state = self.lock();
        let Some(health) = state.lineage.health_mut(id) else {
            return;
        };
        if !health.refused {
            return;
        }
        health.refused = false;
        health.back_since = Some(std::time::Instant::now());
        tracing::info!(server = %self.name_of(id), "server listens again");
        let _ = self.publish_logged(&mut state);
    }

    /// Active checks of the server with this id passed `rise` times in a row since it was
    /// ejected: the ejection ends now. Passive and active checks agree on a server that is well
    /// again, and a recovered server no longer holds one of its pool's ejection slots.
    pub fn checks_pass(&self, id: u64) {
        let now = std::time::Instant::now();
        let mut state = self.lock();
        let Some(health) = state.lineage.health_mut(id) else {
            return;
        };
        if !health.is_ejected(now) {
            return;
        }
        health.ejected_until = Some(now);
        health.end_ejection(now);
        tracing::info!(server = %self.name_of(id), "ejection over: active checks pass");
        let _ = self.publish_logged(&mut state);
    }

    /// Passive checks: ejects the server with this id for its back-off, unless that would eject
    /// more than its pool's `max_ejected_percent`. Returns how long, if it was ejected.
    pub fn eject(&self, id: u64) -> Option<std::time::Duration> {
        let now = std::time::Instant::now();
        let snapshot = self.snapshot.load_full();
        let pool = snapshot
            .pools
            .iter()
            .find(|pool| pool.servers.iter().any(|s| s.id == id))?;
        let ids: HashSet<u64> = pool.servers.iter().map(|s| s.id).collect();
        let mut state = self.lock();
        let ejected = state
            .lineage
            .healths()
            .filter(|(_, other, health)| ids.contains(other) && health.is_ejected(now))
            .count();
        let allowed = pool.servers.len() * pool.passive.max_ejected_percent as usize / 100;
        let name = self.name_of(id);
        if ejected + 1 > allowed {
            tracing::warn!(
                server = %name,
                ejected,
                allowed,
                "server failing, but not ejected: the pool's max_ejected_percent is reached"
            );
            return None;
        }
        let health = state.lineage.health_mut(id)?;
        if health.is_ejected(now) {
            return None;
        }
        let length = health.eject(now, &pool.passive);
        tracing::warn!(server = %name, seconds = length.as_secs_f64(), "server ejected after consecutive failures");
        let _ = self.publish_logged(&mut state);
        Some(length)
    }

    /// Ends ejections whose time is up and steps slow-start ramps, publishing when anything
    /// changed. Returns when it next needs calling (`None`: nothing pending).
    pub fn tick(&self) -> Option<std::time::Instant> {
        let now = std::time::Instant::now();
        let snapshot = self.snapshot.load_full();
        let mut state = self.lock();
        let mut changed = false;
        let mut due: Option<std::time::Instant> = None;
        let mut next = |at: std::time::Instant| due = Some(due.map_or(at, |d| d.min(at)));
        for pool in &snapshot.pools {
            for server in &pool.servers {
                let Some(health) = state.lineage.health_mut(server.id) else {
                    continue;
                };
                if health.end_ejection(now) {
                    tracing::info!(pool = %pool.name, server = %server.name, "ejection over");
                    changed = true;
                }
                if let Some(until) = health.ejected_until {
                    next(until);
                }
                let ramping = health.ramp(now, pool.slow_start) < 1.0;
                if ramping || server.effective_weight != server.weight && health.is_available(now) {
                    // Each second of a ramp, a new weight.
                    changed = true;
                    if ramping {
                        next(now + std::time::Duration::from_secs(1));
                    }
                }
            }
        }
        if changed {
            let _ = self.publish_logged(&mut state);
        }
        due
    }

    /// The address of the server with this id.
    fn addr_of(&self, id: u64) -> Option<std::net::SocketAddr> {
        let snapshot = self.snapshot.load();
        snapshot
            .pools
            .iter()
            .flat_map(|pool| &pool.servers)
            .find(|server| server.id == id)
            .map(|server| server.addr)
    }

    /// "pool/server" for the server with this id, for logs.
    fn name_of(&self, id: u64) -> String {
        let snapshot = self.snapshot.load();
        snapshot
            .pools
            .iter()
            .find_map(|pool| {
                let server = pool.servers.iter().find(|s| s.id == id)?;
                Some(format!("{}/{}", pool.name, server.name))
            })
            .unwrap_or_else(|| format!("#{id}"))
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
        active: server.counters.active(),
        requests: server.counters.requests(),
        added_at_run_time: server.added_at_run_time,
        traffic: server.traffic.totals(),
    }
}

fn check_weight(weight: u32) -> Result<(), ChangeError> {
    if weight > MAX_WEIGHT {
        return Err(ChangeError::Invalid(format!(
            "weight {weight} is out of range: 0 to {MAX_WEIGHT} (0 takes no new requests)"
        )));
    }
    Ok(())
}

fn pool_mut<'c>(
    config: &'c mut Config,
    pool: &str,
) -> Result<&'c mut crate::config::PoolConfig, ChangeError> {
    config
        .pools
        .iter_mut()
        .find(|p| p.name == pool)
        .ok_or_else(|| ChangeError::NoPool(pool.to_string()))
}

fn position(servers: &[ServerConfig], pool: &str, name: &str) -> Result<usize, ChangeError> {
    servers
        .iter()
        .position(|s| s.name == name)
        .ok_or_else(|| ChangeError::NoServer {
            pool: pool.to_string(),
            server: name.to_string(),
        })
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

/// Without workers to open listeners for: the listeners as running, each with the file's new
/// pool, access log and upgrades where the file still has it.
fn running_listeners(running: &Config, fresh: &Config) -> Vec<crate::config::ListenerConfig> {
    for listener in &fresh.listeners {
        if !running.listeners.iter().any(|l| l.name == listener.name) {
            tracing::warn!(listener = %listener.name, "new listener: opened on restart");
        }
    }
    running
        .listeners
        .iter()
        .map(|old| match fresh.listeners.iter().find(|l| l.name == old.name) {
            Some(new) => {
                if new.bind != old.bind || new.backlog != old.backlog {
                    tracing::warn!(listener = %old.name, "bind and backlog changes take effect on restart");
                }
                crate::config::ListenerConfig {
                    pool: new.pool,
                    access_log: new.access_log.clone(),
                    upgrade: new.upgrade.clone(),
                    ..old.clone()
                }
            }
            None => {
                tracing::warn!(listener = %old.name, "listener removed from the file: closed on restart");
                // Its pool by name in the new file; the first pool if that one is gone too.
                let pool_name = &running.pools[old.pool].name;
                let pool = fresh
                    .pools
                    .iter()
                    .position(|p| &p.name == pool_name)
                    .unwrap_or(0);
                crate::config::ListenerConfig {
                    pool,
                    ..old.clone()
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[[listener]]
name = "web"
bind = "127.0.0.1:0"
pool = "app"

[[pool]]
name = "app"
servers = [
  { name = "a", addr = "127.0.0.1:9001" },
  { name = "b", addr = "127.0.0.1:9002" },
]
"#;

    /// A registry of the config in a file of its own, which `write` replaces.
    struct Fixture {
        registry: Registry,
        path: PathBuf,
    }

    impl Fixture {
        fn new(name: &str) -> Fixture {
            let path = std::env::temp_dir().join(format!(
                "herdsman-registry-{name}-{}.toml",
                std::process::id()
            ));
            std::fs::write(&path, FILE).unwrap();
            let config = Config::load(&path).unwrap();
            let registry = Registry::new(config, Some(path.clone()), None, Vec::new()).unwrap();
            Fixture { registry, path }
        }

        fn write(&self, text: &str) {
            std::fs::write(&self.path, text).unwrap();
        }

        /// (name, addr, state, weight, added at run time) of pool app's servers.
        fn servers(&self) -> Vec<(String, String, &'static str, u32, bool)> {
            let pools = self.registry.pools();
            pools.pools[0]
                .servers
                .iter()
                .map(|s| {
                    let ServerView {
                        name,
                        addr,
                        state,
                        weight,
                        added_at_run_time,
                        ..
                    } = s.clone();
                    (name, addr, state, weight, added_at_run_time)
                })
                .collect()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn server(
        name: &str,
        addr: &str,
        state: &'static str,
        weight: u32,
        added: bool,
    ) -> (String, String, &'static str, u32, bool) {
        (name.into(), addr.into(), state, weight, added)
    }

    #[test]
    fn run_time_changes_survive_a_reload_while_their_servers_do() {
        let fixture = Fixture::new("survive");
        let registry = &fixture.registry;
        registry.set_state("app", "a", ServerState::Drain).unwrap();
        registry.set_weight("app", "b", 5).unwrap();
        let added = NewServer {
            name: "d".into(),
            addr: "127.0.0.1:9004".parse().unwrap(),
            weight: 2,
            state: ServerState::Ready,
            max_connections: 0,
        };
        registry.add_server("app", added).unwrap();
        registry.reload().unwrap();
        assert_eq!(
            fixture.servers(),
            [
                server("a", "127.0.0.1:9001", "drain", 1, false),
                server("b", "127.0.0.1:9002", "ready", 5, false),
                server("d", "127.0.0.1:9004", "ready", 2, true),
            ]
        );

        // The file now defines d itself and drops a: the file's d wins, a's drain is forgotten.
        fixture.write(&FILE.replace(
            r#"{ name = "a", addr = "127.0.0.1:9001" },"#,
            r#"{ name = "d", addr = "127.0.0.1:9104" },"#,
        ));
        registry.reload().unwrap();
        assert_eq!(
            fixture.servers(),
            [
                server("d", "127.0.0.1:9104", "ready", 1, false),
                server("b", "127.0.0.1:9002", "ready", 5, false),
            ]
        );
        // a comes back as the file says: ready.
        fixture.write(FILE);
        registry.reload().unwrap();
        assert_eq!(
            fixture.servers()[0],
            server("a", "127.0.0.1:9001", "ready", 1, false)
        );
    }

    #[test]
    fn changes_to_a_server_added_at_run_time_survive_a_reload() {
        let fixture = Fixture::new("added");
        let registry = &fixture.registry;
        let added = NewServer {
            name: "d".into(),
            addr: "127.0.0.1:9004".parse().unwrap(),
            weight: 1,
            state: ServerState::Ready,
            max_connections: 0,
        };
        registry.add_server("app", added).unwrap();
        registry.set_state("app", "d", ServerState::Drain).unwrap();
        registry.set_weight("app", "d", 7).unwrap();
        registry.reload().unwrap();
        assert_eq!(
            fixture.servers()[2],
            server("d", "127.0.0.1:9004", "drain", 7, true)
        );
    }

    #[test]
    fn a_refused_change_changes_nothing() {
        let fixture = Fixture::new("refused");
        let registry = &fixture.registry;
        let before = fixture.servers();
        let generation = registry.pools().generation;
        fixture.write(&FILE.replace("127.0.0.1:9002", "nowhere"));
        assert!(matches!(registry.reload(), Err(ChangeError::Refused(_))));
        assert!(matches!(
            registry.set_weight("app", "a", 257),
            Err(ChangeError::Invalid(_))
        ));
        assert!(matches!(
            registry.set_state("app", "zz", ServerState::Drain),
            Err(ChangeError::NoServer { .. })
        ));
        assert!(matches!(
            registry.remove_server("shop", "a"),
            Err(ChangeError::NoPool(_))
        ));
        let duplicate = NewServer {
            name: "b".into(),
            addr: "127.0.0.1:9009".parse().unwrap(),
            weight: 1,
            state: ServerState::Ready,
            max_connections: 0,
        };
        assert!(matches!(
            registry.add_server("app", duplicate),
            Err(ChangeError::Exists { .. })
        ));
        assert_eq!(fixture.servers(), before);
        assert_eq!(registry.pools().generation, generation);
    }

    #[test]
    fn a_server_keeps_its_counters_across_changes_but_not_a_new_address() {
        let fixture = Fixture::new("counters");
        let registry = &fixture.registry;
        let counted = |name: &str| {
            let snapshot = registry.snapshot_handle().load_full();
            let pool = &snapshot.pools[0];
            let server = &pool.servers[pool.position(name).unwrap()];
            (server.id, Arc::clone(&server.counters))
        };
        let (id, counters) = counted("a");
        drop(crate::upstream::snapshot::ActiveGuard::new(&counters));
        registry.set_weight("app", "a", 3).unwrap();
        registry.reload().unwrap();
        assert_eq!(counted("a").0, id);
        assert_eq!(counted("a").1.requests(), 1);
        fixture.write(&FILE.replace("127.0.0.1:9001", "127.0.0.1:9011"));
        registry.reload().unwrap();
        let (new_id, new_counters) = counted("a");
        assert_ne!(new_id, id, "a re-addressed server is a new server");
        assert_eq!(new_counters.requests(), 0);
        assert!(!registry.snapshot_handle().load().has_server(id));
    }
}
