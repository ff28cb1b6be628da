//! The pools as the operator has them now: the config file's, plus the changes made at run time
//! (servers added, removed, drained, reweighted), published to the workers as snapshots.
//!
//! This is the control plane: every change takes the one mutex here, builds a whole new snapshot
//! and publishes it; the request path only ever loads the published snapshot, so it never waits
//! on this lock. A reload merges the file's new config with the run-time changes that still
//! apply: states and weights of servers that still exist, and added servers the file does not
//! now define itself.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use tokio::sync::watch;

use crate::config::{is_valid_name, Config, ConfigError, ServerConfig, ServerState};
use crate::upstream::snapshot::Lineage;
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
}

/// `GET /api/pools`.
#[derive(Debug, Serialize)]
pub struct PoolsView {
    pub generation: u64,
    pub pools: Vec<PoolView>,
}

#[derive(Debug, Serialize)]
pub struct PoolView {
    pub name: String,
    pub balance: &'static str,
    pub sticky_cookie: Option<String>,
    pub servers: Vec<ServerView>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ServerView {
    pub name: String,
    pub addr: String,
    pub state: &'static str,
    pub weight: u32,
    pub active: u32,
    pub requests: u64,
    pub added_at_run_time: bool,
}

/// The control plane's record of the pools, and where snapshots are published.
pub struct Registry {
    state: Mutex<State>,
    snapshot: SnapshotHandle,
    /// The generation of the latest snapshot, for workers to notice a change promptly.
    published: watch::Sender<u64>,
    /// The file a reload reads; `None` for a config that did not come from a file (the demo).
    config_path: Option<PathBuf>,
}

struct State {
    /// The running config, run-time changes included.
    config: Config,
    lineage: Lineage,
    /// Servers added through the API: (pool, server) → how they were added.
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
    /// The registry of `config`, with its first snapshot built and published.
    pub fn new(config: Config, config_path: Option<PathBuf>) -> io::Result<Registry> {
        let mut lineage = Lineage::new();
        let first = lineage.next(&config, &HashSet::new())?;
        let (published, _) = watch::channel(first.generation);
        Ok(Registry {
            snapshot: Arc::new(arc_swap::ArcSwap::from_pointee(first)),
            published,
            config_path,
            state: Mutex::new(State {
                config,
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

    /// Every pool and server as of the current snapshot, with live counters.
    pub fn pools(&self) -> PoolsView {
        let snapshot = self.snapshot.load();
        PoolsView {
            generation: snapshot.generation,
            pools: snapshot
                .pools
                .iter()
                .map(|pool| PoolView {
                    name: pool.name.clone(),
                    balance: pool.balance().name(),
                    sticky_cookie: pool.sticky_cookie.clone(),
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
        if let Some(added) = state.added.get_mut(&key(pool, name)) {
            added.state = new_state;
        }
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
        if let Some(added) = state.added.get_mut(&key(pool, name)) {
            added.weight = weight;
        }
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
    /// Returns the new generation. A file that does not validate changes nothing.
    pub fn reload(&self) -> Result<u64, ChangeError> {
        let path = self.config_path.as_ref().ok_or(ChangeError::NoConfigFile)?;
        let mut fresh = Config::load(path).map_err(ChangeError::Refused)?;
        let mut state = self.lock();
        warn_about_restart_only_changes(&state.config, &fresh);
        fresh.listeners = running_listeners(&state.config, &fresh);
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
        let generation = self.publish(&mut state)?;
        tracing::info!(generation, path = %path.display(), "config reloaded");
        Ok(generation)
    }

    /// Builds the snapshot of the running config and publishes it; returns its generation.
    fn publish(&self, state: &mut State) -> Result<u64, ChangeError> {
        let added: HashSet<(String, String)> = state.added.keys().cloned().collect();
        let snapshot = state
            .lineage
            .next(&state.config, &added)
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
        weight: server.weight,
        active: server.counters.active(),
        requests: server.counters.requests(),
        added_at_run_time: server.added_at_run_time,
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

/// The listeners as running, in their running order (workers know them by position), each with
/// the file's new settings where the file still has it.
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

/// Settings a running herdsman cannot change: said in the log, so a reload that seems to ignore
/// them is explained.
fn warn_about_restart_only_changes(running: &Config, fresh: &Config) {
    if running.workers != fresh.workers {
        tracing::warn!(
            running = running.workers,
            file = fresh.workers,
            "workers changed: takes effect on restart"
        );
    }
    if running.intake != fresh.intake {
        tracing::warn!("intake changed: takes effect on restart");
    }
    if running.admin != fresh.admin {
        tracing::warn!("[admin] changed: takes effect on restart");
    }
}
