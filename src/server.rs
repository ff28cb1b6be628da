//! The running proxy: binds every listener, starts the workers, and stops them gracefully.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::access_log::{AccessLogWriter, LogFiles};
use crate::admin::{self, AdminConfig, AdminError, AdminHandle};
use crate::config::descriptors::Budget;
use crate::config::ticket_keys::TicketKeys;
use crate::config::{Config, IntakeMode};
use crate::health_check::{self, HealthHandle};
use crate::intake::{self, HandoffBoard, ListenerLoad};
use crate::process::drain::Predecessors;
use crate::process::upgrade::{self, Inherited};
use crate::process::{certificate_watch, descriptors, kernel_watch};
use crate::stats::Stats;
use crate::transport::{prepare_temp_dir, ListenSocket};
use crate::upstream::registry::{ListenerControl, Registry};
use crate::upstream::Snapshot;
use crate::worker::{self, Stopping, WorkerSetup};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    // The io::Error is named in the message and deliberately not a `source`: a chain printed
    // with `{:#}` would otherwise say it twice.
    #[error("listener {listener}: cannot bind {addr}: {error}")]
    Bind {
        listener: String,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    #[error("{0}")]
    Intake(String),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("cannot generate a signing key for sticky cookies: {0}")]
    Keys(std::io::Error),
    #[error("buffering.temp_dir = {:?}: cannot make temporary files there: {error}", path.display())]
    TempDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("listener {listener}: cannot open access log {}: {error}", path.display())]
    AccessLog {
        listener: String,
        path: std::sync::Arc<Path>,
        error: std::io::Error,
    },
}

/// A started proxy. Dropping it stops it; [`Server::stop`] then [`Server::wait`] does so
/// gracefully and waits.
pub struct Server {
    registry: Arc<Registry>,
    stats: Arc<Stats>,
    /// Ends the service threads (admin API, health checks) at once when a stop begins.
    stop: watch::Sender<bool>,
    /// Tells the workers a stop began, and until when their connections may go on.
    stopping: watch::Sender<Option<Stopping>>,
    workers: Vec<JoinHandle<()>>,
    admin: Option<AdminHandle>,
    health: Option<HealthHandle>,
    /// Ends after the workers, having written every line they handed it.
    access_log: Option<AccessLogWriter>,
    /// The older processes still draining, when a binary upgrade started this one.
    predecessors: Option<Arc<Predecessors>>,
}

impl Server {
    /// Binds every listener (all workers' sockets), starts the workers and returns. Connections
    /// are accepted from then on: the sockets listen before any worker runs, so the kernel queues
    /// early connections in the backlog. Without a config file, a reload is refused.
    pub fn start(config: Config) -> Result<Server, StartError> {
        Server::start_with_file(config, None)
    }

    /// Like [`Server::start`], for a config read from `path`, which a reload reads again.
    pub fn start_with_file(config: Config, path: Option<PathBuf>) -> Result<Server, StartError> {
        intake::check_supported(config.intake).map_err(StartError::Intake)?;
        config.log_warnings(path.as_deref());
        // Opened before anything listens, so that a log that cannot be written stops the start.
        let mut log_files = LogFiles::new();
        for listener in &config.listeners {
            if let Some(log) = &listener.access_log {
                log_files
                    .open(&log.path)
                    .map_err(|error| StartError::AccessLog {
                        listener: listener.name.clone(),
                        path: log.path.clone(),
                        error,
                    })?;
            }
        }
        // Buffered bodies' temporary files: the directory must take them, and what a crash left
        // there goes.
        let temp_dir = &config.buffering.temp_dir;
        match prepare_temp_dir(temp_dir) {
            Ok(0) => {}
            Ok(removed) => {
                tracing::info!(dir = %temp_dir.display(), removed, "removed temporary files a previous run left")
            }
            Err(error) => {
                return Err(StartError::TempDir {
                    path: temp_dir.clone(),
                    error,
                })
            }
        }
        let stats = Stats::new(config.workers);
        // Raised before the registry's first snapshot, which draws the client cap from it.
        let limit = descriptors::raise_open_file_limit();
        tracing::info!("{}", Budget::of(&config, limit).describe(&config));
        let access_log =
            AccessLogWriter::start(log_files, Arc::clone(&stats.access_log_dropped_lines))
                .map_err(StartError::Thread)?;
        let mut sockets_by_worker: Vec<Vec<(usize, ListenSocket, Arc<ListenerLoad>)>> =
            (0..config.workers).map(|_| Vec::new()).collect();
        let mut listener_addrs = Vec::with_capacity(config.listeners.len());
        // Sockets handed down by the process this one replaces (a binary upgrade), if any, and
        // the pipe on which it reports its drain.
        let mut inherited = Inherited::from_env();
        let predecessors =
            upgrade::take_predecessor_pipe().map(|(pid, pipe)| Predecessors::follow(pid, pipe));
        // Ticket keys: the predecessor's, so that its clients resume here, unless the config
        // names a file (which every instance shares).
        if upgrade::take_ticket_keys() {
            tracing::info!("TLS session ticket keys handed down by the previous process");
        }
        TicketKeys::global().install(&config.ticket_keys);
        for (index, listener) in config.listeners.iter().enumerate() {
            let bind_error = |error| StartError::Bind {
                listener: listener.name.clone(),
                addr: listener.bind,
                error,
            };
            let options = intake::listen_options(listener);
            let sockets = match inherited.take_listener(&listener.name, listener.bind) {
                Some(socket) => {
                    tracing::info!(listener = %listener.name, "listening socket handed down by the previous process");
                    ListenSocket::adopt(socket, options.defer_accept).and_then(|socket| {
                        intake::adopt_listener(config.intake, socket, options, config.workers)
                    })
                }
                None => intake::bind_listener(config.intake, listener.bind, options, config.workers),
            }
            .map_err(bind_error)?;
            // Kept for a later upgrade, which hands it down in turn.
            let kept = sockets[0].try_clone().map_err(bind_error)?;
            let bound = sockets[0].local_addr().map_err(bind_error)?;
            let load = Arc::new(ListenerLoad::new(listener.max_connections));
            listener_addrs.push((listener.name.clone(), bound, Arc::clone(&load), kept));
            for (worker, socket) in sockets.into_iter().enumerate() {
                sockets_by_worker[worker].push((index, socket, Arc::clone(&load)));
            }
        }
        let backlogs: Vec<(String, u32)> = config
            .listeners
            .iter()
            .map(|l| (l.name.clone(), l.backlog))
            .collect();
        kernel_watch::warn_if_backlog_capped(&backlogs);
        let (change_senders, mut change_receivers): (Vec<_>, Vec<_>) = (0..config.workers)
            .map(|_| tokio::sync::mpsc::unbounded_channel())
            .unzip();
        let control = ListenerControl {
            intake: config.intake,
            workers: change_senders,
        };
        let names: Vec<(String, SocketAddr)> = listener_addrs
            .iter()
            .map(|(name, addr, _, _)| (name.clone(), *addr))
            .collect();
        let bound: Vec<(SocketAddr, Arc<ListenerLoad>, Option<ListenSocket>)> = listener_addrs
            .into_iter()
            .map(|(_, addr, load, kept)| (addr, load, Some(kept)))
            .collect();
        let registry = Arc::new(
            Registry::new(config.clone(), path, Some(control), bound).map_err(StartError::Keys)?,
        );
        // The cap the snapshot carries, as every later snapshot sets it (`worker::tasks`).
        stats
            .client_cap
            .set(registry.snapshot_handle().load().client_cap);
        // Certificate files changed on disk are read again without a reload.
        certificate_watch::start(&registry).map_err(StartError::Thread)?;
        let (stop, stop_receiver) = watch::channel(false);
        // Certificates obtained by ACME: those stored installed now, the rest ordered, until the
        // process stops or hands over (its successor orders from then on).
        crate::acme::start(&registry, stop_receiver.clone()).map_err(StartError::Thread)?;
        let (stopping, stopping_receiver) = watch::channel(None);
        let (failing, failing_receiver) = tokio::sync::mpsc::unbounded_channel();
        let health = health_check::start(
            Arc::clone(&registry),
            failing_receiver,
            stop_receiver.clone(),
            Arc::clone(&stats),
        )
        .map_err(StartError::Thread)?;
        // The cache store every worker shares (made when a pool first caches); the admin API
        // purges it.
        let cache = crate::cache::shared::SharedStore::new();
        // The rate limits every worker shares (made when a config first limits); the admin
        // API and the metrics show them.
        let rate_limits = crate::rate_limit::RateLimits::new(config.workers);
        let admin = match &config.admin {
            Some(settings) => Some(admin::start(
                AdminConfig {
                    bind: settings.bind,
                    socket: settings.socket.clone(),
                    allowed_hosts: settings.allowed_hosts.clone(),
                    token: settings.token(),
                    intake: config.intake.name(),
                    inherited: settings
                        .bind
                        .and_then(|bind| inherited.take_admin(bind))
                        .map(Arc::new),
                    inherited_socket: settings
                        .socket
                        .as_ref()
                        .and_then(|socket| inherited.take_admin_socket(&socket.path))
                        .map(Arc::new),
                    predecessors: predecessors.clone(),
                },
                Arc::clone(&stats),
                Arc::clone(&registry),
                Arc::clone(&cache),
                Arc::clone(&rate_limits),
                stop_receiver.clone(),
            )?),
            None => None,
        };
        let mut handoff = match config.intake {
            IntakeMode::Balanced => {
                let (board, inboxes) = HandoffBoard::new(Arc::clone(&stats));
                inboxes
                    .into_iter()
                    .map(|inbox| Some((Arc::clone(&board), inbox)))
                    .collect()
            }
            _ => Vec::new(),
        };
        handoff.resize_with(config.workers, || None);
        let mut workers = Vec::with_capacity(config.workers);
        for ((index, listeners), handoff) in sockets_by_worker.into_iter().enumerate().zip(handoff)
        {
            let setup = WorkerSetup {
                index,
                listeners,
                listener_changes: change_receivers.remove(0),
                intake: config.intake,
                handoff,
                stats: Arc::clone(&stats),
                snapshot: registry.snapshot_handle(),
                published: registry.subscribe(),
                failing: failing.clone(),
                stop: stopping_receiver.clone(),
                access_log: access_log.sink(),
                shared: crate::proxy::ProcessShared {
                    cache: Arc::clone(&cache),
                    rate_limits: Arc::clone(&rate_limits),
                },
            };
            workers.push(worker::spawn(setup).map_err(StartError::Thread)?);
        }
        for (name, addr) in &names {
            let tls = config
                .listeners
                .iter()
                .find(|listener| &listener.name == name)
                .and_then(|listener| listener.tls_description());
            let (workers, intake) = (config.workers, config.intake.name());
            match tls {
                Some(tls) => {
                    tracing::info!(listener = %name, %addr, workers, intake, tls, "listening")
                }
                None => tracing::info!(listener = %name, %addr, workers, intake, "listening"),
            }
        }
        Ok(Server {
            registry,
            stats,
            stop,
            stopping,
            workers,
            admin,
            health: Some(health),
            access_log: Some(access_log),
            predecessors,
        })
    }

    /// Opens every access log file again by path (SIGUSR1, after a rotation). Returns at once;
    /// lines written from then on go to the new files.
    pub fn reopen_access_logs(&self) {
        if let Some(writer) = &self.access_log {
            writer.reopen();
        }
    }

    /// The admin API's address, when the config has `[admin]`.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(AdminHandle::local_addr)
    }

    /// Every worker's counters and loads.
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// The address an open listener is bound to (its real port when the config said port 0),
    /// including listeners a reload opened.
    pub fn listener_addr(&self, name: &str) -> Option<SocketAddr> {
        self.registry.listener_addr(name)
    }

    /// The snapshot the workers read now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.registry.snapshot_handle().load_full()
    }

    /// The listening sockets to hand down at a binary upgrade: each open listener's and the
    /// admin API's, by name, as descriptors this process keeps open.
    pub fn upgrade_sockets(&self) -> Vec<(String, std::os::fd::RawFd)> {
        let mut sockets = self.registry.listener_sockets();
        if let Some(admin) = &self.admin {
            if let Some(fd) = admin.socket_fd() {
                sockets.push((upgrade::ADMIN_SOCKET.to_string(), fd));
            }
            if let Some(fd) = admin.unix_socket_fd() {
                sockets.push((upgrade::ADMIN_UNIX_SOCKET.to_string(), fd));
            }
        }
        sockets
    }

    /// The pools as the operator changes them (the admin API's and reload's way in).
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// Begins a graceful stop: stop accepting, close idle connections, let requests in flight
    /// finish up to `shutdown_grace` (its value now, reloads included). During a hand-over's
    /// drain, brings its end forward to that. Returns at once; [`Server::wait`] blocks until done.
    pub fn stop(&self) {
        let grace = self.registry.config().shutdown_grace;
        self.begin_stop(Stopping::within(Some(grace), "shutdown_grace"));
    }

    /// Stops after a binary upgrade handed the listening sockets to a successor: stop accepting,
    /// close idle connections and keep-alive ones after their response, and let the others —
    /// downloads, streams, tunnels — run to their end, for at most `hard_stop_after` (its value
    /// now; none: no limit). Returns at once; [`Server::wait`] blocks until done.
    pub fn hand_over(&self) {
        if let Some(admin) = &self.admin {
            admin.handed_over();
        }
        let limit = self.registry.config().hard_stop_after;
        self.begin_stop(Stopping::within(limit, worker::HARD_STOP_AFTER));
    }

    /// The older processes still draining, when a binary upgrade started this one.
    pub fn predecessors(&self) -> Option<&Predecessors> {
        self.predecessors.as_deref()
    }

    /// Client connections open now, over all workers.
    pub fn open_connections(&self) -> u64 {
        self.stats.open_connections()
    }

    /// Whether every worker has exited (after a stop: all its connections closed).
    pub fn workers_finished(&self) -> bool {
        self.workers.iter().all(JoinHandle::is_finished)
    }

    /// Sends `stopping` to the workers unless a stop that ends sooner is already under way.
    fn begin_stop(&self, stopping: Stopping) {
        self.registry.drop_listener_sockets();
        self.stopping.send_if_modified(|current| match current {
            Some(under_way) if under_way.ends_no_later_than(&stopping) => false,
            _ => {
                *current = Some(stopping);
                true
            }
        });
        self.stop.send_replace(true);
    }

    /// Blocks until every worker has exited.
    pub fn wait(mut self) {
        for worker in self.workers.drain(..) {
            if worker.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
        if let Some(writer) = self.access_log.take() {
            writer.finish();
        }
        if let Some(health) = self.health.take() {
            health.join();
        }
        if let Some(admin) = self.admin.take() {
            admin.join();
        }
    }
}

impl Drop for Server {
    /// A server dropped without [`Server::wait`] stops gracefully, without waiting.
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            self.stop();
        }
    }
}
