//! The config file read again (SIGHUP, `POST /api/reload`): merged with the run-time changes
//! that still apply, its new listeners bound before anything changes (a bind failure refuses the
//! reload) and its removed ones closed, then published.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::config::ticket_keys::TicketKeys;
use crate::config::{hold_back_restart_only, Config, ListenerConfig};
use crate::intake::{self, ListenerChange, ListenerLoad};
use crate::transport::{prepare_temp_dir, ListenSocket};
use crate::upstream::snapshot::ListenerRules;

use super::{key, ChangeError, ListenerSlot, Registry, Reloaded, State};

impl Registry {
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
        let temp_dir = &fresh.buffering.temp_dir;
        if *temp_dir != state.config.buffering.temp_dir {
            prepare_temp_dir(temp_dir).map_err(|error| {
                ChangeError::Invalid(format!(
                    "buffering.temp_dir = {:?}: cannot make temporary files there: {error}; the running config stays",
                    temp_dir.display()
                ))
            })?;
        }
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
        TicketKeys::global().install(&fresh.ticket_keys);
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
            let listener = state.config.listeners.iter().find(|l| l.name == name);
            let limit = listener.map_or(0, |l| l.max_connections);
            let tls = listener.and_then(|l| l.tls_description());
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
            match tls {
                Some(tls) => {
                    tracing::info!(listener = %name, addr = %bound, tls, "listener opened by reload")
                }
                None => {
                    tracing::info!(listener = %name, addr = %bound, "listener opened by reload")
                }
            }
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
        state.config.log_warnings(Some(path));
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
            Vec<(String, SocketAddr, Vec<ListenSocket>)>,
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
            let options = intake::listen_options(new);
            let sockets =
                intake::bind_listener(control.intake, new.bind, options, control.workers.len())
                    .map_err(bind_error)?;
            let bound = sockets[0].local_addr().map_err(bind_error)?;
            opening.push((new.name.clone(), bound, sockets));
        }
        Ok((opening, closing))
    }
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
                if new.bind != old.bind
                    || new.backlog != old.backlog
                    || new.defer_accept != old.defer_accept
                {
                    tracing::warn!(listener = %old.name, "bind, backlog and defer_accept changes take effect on restart");
                }
                crate::config::ListenerConfig {
                    pool: new.pool,
                    access_log: new.access_log.clone(),
                    upgrade: new.upgrade.clone(),
                    tls: new.tls.clone(),
                    redirect_https: new.redirect_https,
                    access: new.access.clone(),
                    h2c: new.h2c,
                    rate_limit: new.rate_limit.clone(),
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
    use crate::config::ServerState;
    use crate::upstream::registry::{NewServer, ServerView};
    use std::path::PathBuf;

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

    /// A ready server without a limit, to add through the registry.
    fn new_server(name: &str, addr: &str, weight: u32) -> NewServer {
        NewServer {
            name: name.into(),
            addr: addr.parse().unwrap(),
            weight,
            state: ServerState::Ready,
            max_connections: 0,
        }
    }

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
        let added = new_server("d", "127.0.0.1:9004", 2);
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
        let added = new_server("d", "127.0.0.1:9004", 1);
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
        let duplicate = new_server("b", "127.0.0.1:9009", 1);
        assert!(matches!(
            registry.add_server("app", duplicate),
            Err(ChangeError::Exists { .. })
        ));
        assert_eq!(fixture.servers(), before);
        assert_eq!(registry.pools().generation, generation);
    }

    /// A change that leaves the routes alone (a weight, here) shares the last snapshot's routes
    /// and index instead of copying and compiling them again; a reload that changes them does
    /// not, and shares the new config's routes.
    #[test]
    fn routes_are_compiled_once_per_change_of_routes() {
        let fixture = Fixture::new("routes-shared");
        let routed = |host: &str| format!("{FILE}\n[[route]]\nhost = \"{host}\"\npool = \"app\"\n");
        fixture.write(&routed("a.example.com"));
        let registry = &fixture.registry;
        registry.reload().unwrap();
        let before = registry.snapshot_handle().load_full();
        registry.set_weight("app", "b", 2).unwrap();
        let after = registry.snapshot_handle().load_full();
        assert!(after.generation > before.generation);
        assert!(Arc::ptr_eq(&before.routes, &after.routes));
        assert!(Arc::ptr_eq(&before.route_index, &after.route_index));
        fixture.write(&routed("b.example.com"));
        registry.reload().unwrap();
        let changed = registry.snapshot_handle().load_full();
        assert!(!Arc::ptr_eq(&after.route_index, &changed.route_index));
        // The snapshot holds the config's own routes, not a copy of them.
        assert!(Arc::ptr_eq(&registry.config().routes, &changed.routes));
        assert_eq!(changed.route_index.find(b"b.example.com", b"/"), Some(0));
        assert_eq!(changed.route_index.find(b"a.example.com", b"/"), None);
    }

    /// Least-conn's picks follow requests that started under an earlier snapshot: a weight
    /// change keeps the pool's load tree, a new server replaces it, and either way the end of a
    /// request taken before reaches the tree the next pick reads.
    #[test]
    fn least_conn_sees_requests_that_started_under_an_earlier_snapshot() {
        use crate::upstream::snapshot::ActiveGuard;
        let fixture = Fixture::new("least-conn");
        fixture.write(&FILE.replace(
            "pool = \"app\"\n\n[[pool]]\nname = \"app\"",
            "pool = \"app\"\n\n[[pool]]\nname = \"app\"\nbalance = \"least-conn\"",
        ));
        let registry = &fixture.registry;
        registry.reload().unwrap();
        let pick = || {
            let snapshot = registry.snapshot_handle().load_full();
            let pool = &snapshot.pools[0];
            let now = crate::transport::Moment::now();
            let index = pool
                .balancer
                .pick(&pool.servers, &mut fastrand::Rng::new(), now, || 0);
            index.map(|index| pool.servers[index].name.clone())
        };
        let first = registry.snapshot_handle().load_full();
        let on_a: Vec<_> = (0..2)
            .map(|_| ActiveGuard::try_take(&first.pools[0], 0, 0).unwrap())
            .collect();
        assert_eq!(pick().as_deref(), Some("b"));
        // Same servers, new weight: the tree is kept.
        registry.set_weight("app", "b", 2).unwrap();
        assert_eq!(pick().as_deref(), Some("b"));
        // A new server: a new tree, from the live counts.
        let added = new_server("c", "127.0.0.1:9003", 1);
        registry.add_server("app", added).unwrap();
        let latest = registry.snapshot_handle().load_full();
        let on_b = ActiveGuard::try_take(&latest.pools[0], 1, 0).unwrap();
        let on_c = ActiveGuard::try_take(&latest.pools[0], 2, 0).unwrap();
        // a: 2 (taken under the first snapshot), b: 1 of weight 2, c: 1.
        assert_eq!(pick().as_deref(), Some("b"));
        drop(on_a);
        // a's requests ended under the first snapshot's tree; the latest one must know.
        assert_eq!(pick().as_deref(), Some("a"));
        drop((on_b, on_c));
    }

    #[test]
    fn a_server_keeps_its_counters_across_changes_but_not_a_new_address() {
        let fixture = Fixture::new("counters");
        let registry = &fixture.registry;
        let counted = |name: &str| {
            let snapshot = registry.snapshot_handle().load_full();
            let pool = &snapshot.pools[0];
            let server = &pool.servers[pool.position(name).unwrap()];
            (server.id, Arc::clone(&server.traffic))
        };
        let (id, _) = counted("a");
        let snapshot = registry.snapshot_handle().load_full();
        let pool = &snapshot.pools[0];
        let a = pool.position("a").unwrap();
        let in_flight = crate::upstream::snapshot::ActiveGuard::try_take(pool, a, 0).unwrap();
        assert_eq!(pool.servers[a].active(), 1, "counted in flight");
        drop(in_flight);
        assert_eq!(pool.servers[a].active(), 0);
        registry.set_weight("app", "a", 3).unwrap();
        registry.reload().unwrap();
        assert_eq!(counted("a").0, id);
        assert_eq!(counted("a").1.started_total(), 1);
        fixture.write(&FILE.replace("127.0.0.1:9001", "127.0.0.1:9011"));
        registry.reload().unwrap();
        let (new_id, new_traffic) = counted("a");
        assert_ne!(new_id, id, "a re-addressed server is a new server");
        assert_eq!(new_traffic.started_total(), 0);
        assert!(!registry.snapshot_handle().load().has_server(id));
    }
}
