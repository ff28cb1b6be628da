//! The admin listener (`[admin] bind`): a minimal HTTP/1.1 server for operators, monitors and
//! `herdsman ctl`. `GET /healthz` says `ok`; `GET /api/workers` returns each worker's counters,
//! CPU and the kernel's listen-queue losses, and the old processes still draining after a binary
//! upgrade (`predecessors`); the pool routes (`/api/pools…`, `/api/reload`, in `pools`) show and
//! change the pools through the [`Registry`]; the cache routes (`/api/cache/…`, in `cache`)
//! purge the cache's store; `GET /metrics` is the Prometheus text format
//! (`metrics`) and `GET /stats` the live stats page. Every other answer is JSON, errors included:
//! `{"error": "<what is wrong>"}`.
//!
//! This file binds the listeners and starts the thread; `connection` accepts and serves each
//! connection (reading a request, writing its answer); `routes` decides the answer to a request;
//! `answer` is that response before it is written; `guard` is whom the API answers; `socket`
//! makes the UNIX socket.
//!
//! It runs on an OS thread of its own with a current-thread runtime, never on a worker: the
//! admin API must never take time from a worker's connections, and a worker that is busy or
//! stalled — exactly when an operator looks at `/api/workers` — must not make the admin API
//! unreachable. The thread also runs the listen-queue watcher (`process::kernel_watch`), for the
//! same reason: reading /proc is blocking file I/O a worker should not do. The registry's calls
//! are made directly from the connection tasks: they take the control plane's mutex, never one
//! the request path takes, and a reload's file read blocks only this thread.
//!
//! It listens on TCP (`[admin] bind`), on a UNIX socket (`[admin] socket`, whose file mode keeps
//! other local users out; `socket`), or both. Safe by default: without a token the TCP
//! listener only binds a loopback address; with one every request must carry it
//! (`Authorization: Bearer <token>`), compared in constant time. Before anything else each
//! request passes `guard`: a foreign Host (DNS rebinding), a page on another origin
//! (cross-site request forgery) or a change without a JSON body type is refused, so a refused
//! client learns nothing and changes nothing. The one exception to the token is `GET /stats`, the
//! live stats page (`stats_page.html`): it holds no data, only the script that asks the API for
//! it, with the token, and a browser cannot send a token with a page navigation. Every request
//! that would change something is logged with who made it (address, or uid and pid on the
//! socket) and its outcome.
//!
//! After a binary upgrade the old and the new process share the listening sockets, and the new
//! one begins answering only once the old one has stopped accepting: one process answers at a
//! time, so that a `ctl upgrade` that has seen the new pid never reaches the old one again.

mod answer;
mod cache;
mod certificates;
mod connection;
#[cfg(test)]
mod exchange_tests;
mod exposition;
mod guard;
mod metrics;
mod pools;
mod routes;
mod rule_metrics;
mod socket;

use std::io;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};

use crate::cache::shared::SharedStore;
use crate::config::AdminSocket;
use crate::process::drain::Predecessors;
use crate::process::kernel_watch;
use crate::stats::Stats;
use crate::upstream::registry::Registry;
use connection::{accept_until_stopped, AdminListener};
use guard::Guard;
use routes::Shared;

/// Connections served at once. More wait in the listen queue, so a flood of connections costs
/// the admin thread no memory beyond this.
const MAX_CONNECTIONS: usize = 64;
/// How often the listen-queue counters are read.
const LISTEN_QUEUE_INTERVAL: Duration = Duration::from_secs(5);
/// After a binary upgrade, how long the API waits for the old process to stop accepting (it does
/// within milliseconds of the new one serving) before answering anyway.
const HAND_OVER_WAIT: Duration = Duration::from_secs(5);

/// What the admin listener needs; built from the validated `[admin]` section.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// `[admin] bind`, if the API listens on TCP. Must be a loopback address unless `token` is
    /// set.
    pub bind: Option<SocketAddr>,
    /// `[admin] socket`, if the API listens on a UNIX socket.
    pub socket: Option<AdminSocket>,
    /// `[admin] allowed_hosts`: host names answered besides IP literals and `localhost`.
    pub allowed_hosts: Vec<String>,
    /// The token every request must present, read from the variable `[admin] token_env` names.
    /// `None`: no authentication, which is allowed only on loopback and the socket. Never empty.
    pub token: Option<String>,
    /// The intake mode's config name (`reuseport`, `balanced`, …), reported by `/api/workers`.
    pub intake: &'static str,
    /// A listening socket on `bind` handed down by the process this one replaces (a binary
    /// upgrade), used instead of binding.
    pub inherited: Option<Arc<StdTcpListener>>,
    /// Likewise the UNIX socket on `socket`'s path.
    pub inherited_socket: Option<Arc<StdUnixListener>>,
    /// The older processes still draining after the upgrade that started this one, reported by
    /// `/api/workers`; `None` when no upgrade started it.
    pub predecessors: Option<Arc<Predecessors>>,
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(
        "refusing to serve the admin API on {addr} without a token: anyone who can reach that \
         address could use it. Set `[admin] token_env` to the name of an environment variable \
         holding a token, or set `[admin] bind` to a loopback address such as 127.0.0.1:9900"
    )]
    UnprotectedBind { addr: SocketAddr },
    #[error(
        "the admin token is empty: set the environment variable named by `[admin] token_env` \
         to a non-empty token"
    )]
    EmptyToken,
    // Each io::Error is named in its message and deliberately not a `source`: a chain printed
    // with `{:#}` would otherwise say it twice.
    #[error("cannot bind the admin API to {addr} (`[admin] bind`): {error}")]
    Bind { addr: SocketAddr, error: io::Error },
    #[error("cannot make the admin API's socket {} (`[admin] socket`): {error}", path.display())]
    Socket { path: PathBuf, error: io::Error },
    #[error("cannot start the admin API's runtime: {0}")]
    Runtime(io::Error),
    #[error("cannot start the admin API's thread: {0}")]
    Thread(io::Error),
}

/// The running admin listener. It stops when the `stop` given to [`start`] becomes true.
#[derive(Debug)]
pub struct AdminHandle {
    /// The bound address (the real port when `[admin] bind` asked for port 0), if on TCP.
    local_addr: Option<SocketAddr>,
    thread: JoinHandle<()>,
    /// A descriptor of each listening socket, to hand down at a binary upgrade.
    kept: Option<StdTcpListener>,
    kept_socket: Option<StdUnixListener>,
    /// The UNIX socket's path, removed at a stop unless a successor took the socket over.
    socket_path: Option<PathBuf>,
    handed_over: AtomicBool,
}

impl AdminHandle {
    /// The TCP listening socket's descriptor, for a binary upgrade.
    pub fn socket_fd(&self) -> Option<std::os::fd::RawFd> {
        self.kept.as_ref().map(std::os::fd::AsRawFd::as_raw_fd)
    }

    /// The UNIX listening socket's descriptor, for a binary upgrade.
    pub fn unix_socket_fd(&self) -> Option<std::os::fd::RawFd> {
        self.kept_socket
            .as_ref()
            .map(std::os::fd::AsRawFd::as_raw_fd)
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// A successor serves the API's sockets now: the socket file is its, not to be removed.
    pub fn handed_over(&self) {
        self.handed_over.store(true, Ordering::Relaxed);
    }

    /// Waits for the admin thread to finish (after `stop`). A panic there is a bug; it is logged
    /// rather than passed on, so that it cannot interrupt the rest of a graceful stop.
    pub fn join(self) {
        if self.thread.join().is_err() {
            tracing::error!("the admin API's thread panicked");
        }
        if let (Some(path), false) = (&self.socket_path, self.handed_over.load(Ordering::Relaxed)) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds the admin listeners and serves them on a new thread until `stop` becomes true or its
/// sender is dropped. Connections still open then are closed. Errors (an unsafe or unusable
/// address or socket) are returned here, before any thread starts.
pub fn start(
    config: AdminConfig,
    stats: Arc<Stats>,
    registry: Arc<Registry>,
    cache: Arc<SharedStore>,
    rate_limits: Arc<crate::rate_limit::RateLimits>,
    stop: watch::Receiver<bool>,
) -> Result<AdminHandle, AdminError> {
    let tcp = match config.bind {
        Some(bind) => {
            check_exposure(bind, config.token.as_deref())?;
            Some(bind_tcp(bind, config.inherited.as_deref())?)
        }
        None => None,
    };
    let unix = match &config.socket {
        Some(socket) => Some(listen_unix(socket, config.inherited_socket.as_deref())?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AdminError::Runtime)?;
    let mut listeners = Vec::new();
    let (mut local_addr, mut kept, mut kept_socket) = (None, None, None);
    // Registered with the admin runtime's reactor here, so that a failure is reported to the
    // caller rather than inside the thread.
    let _entered = runtime.enter();
    if let (Some(listener), Some(bind)) = (tcp, config.bind) {
        let bind_error = |error| AdminError::Bind { addr: bind, error };
        local_addr = Some(listener.local_addr().map_err(bind_error)?);
        kept = Some(listener.try_clone().map_err(bind_error)?);
        listeners.push(AdminListener::Tcp(
            TcpListener::from_std(listener).map_err(bind_error)?,
        ));
    }
    if let (Some(listener), Some(socket)) = (unix, &config.socket) {
        let socket_error = |error| AdminError::Socket {
            path: socket.path.clone(),
            error,
        };
        kept_socket = Some(listener.try_clone().map_err(socket_error)?);
        listeners.push(AdminListener::Unix(
            UnixListener::from_std(listener).map_err(socket_error)?,
        ));
    }
    drop(_entered);
    let shared = Arc::new(Shared {
        guard: Guard {
            allowed_hosts: config.allowed_hosts,
            token: config.token,
        },
        intake: config.intake,
        stats,
        registry,
        predecessors: config.predecessors,
        cache,
        rate_limits,
    });
    let thread = std::thread::Builder::new()
        .name("herdsman-admin".into())
        .spawn(move || {
            runtime.block_on(async move {
                tokio::spawn(kernel_watch::watch_listen_queue(
                    LISTEN_QUEUE_INTERVAL,
                    stop.clone(),
                ));
                if !after_the_predecessor(shared.predecessors.as_deref(), stop.clone()).await {
                    return;
                }
                let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
                let accepting: Vec<_> = listeners
                    .into_iter()
                    .map(|listener| {
                        let accept = accept_until_stopped(
                            listener,
                            Arc::clone(&shared),
                            Arc::clone(&slots),
                            stop.clone(),
                        );
                        tokio::spawn(accept)
                    })
                    .collect();
                for accept in accepting {
                    let _ = accept.await;
                }
            });
            // Dropping the runtime here cancels the watcher and any connection still open.
        })
        .map_err(AdminError::Thread)?;
    if let Some(addr) = local_addr {
        tracing::info!(%addr, "admin API listening");
    }
    if let Some(socket) = &config.socket {
        tracing::info!(socket = %socket.path.display(), mode = format!("{:04o}", socket.mode), "admin API listening");
    }
    Ok(AdminHandle {
        local_addr,
        thread,
        kept,
        kept_socket,
        socket_path: config.socket.map(|socket| socket.path),
        handed_over: AtomicBool::new(false),
    })
}

/// After a binary upgrade, waits until the process this one replaced has stopped accepting (for
/// at most [`HAND_OVER_WAIT`]), so that the API is answered by one process at a time: a client
/// that has heard from the new process never hears from the old one again. The sockets are
/// shared, so connections wait in the listen queue meanwhile rather than being refused. False
/// when a stop came first.
async fn after_the_predecessor(
    predecessors: Option<&Predecessors>,
    mut stop: watch::Receiver<bool>,
) -> bool {
    let Some(predecessors) = predecessors else {
        return true;
    };
    tokio::select! {
        _ = stop.wait_for(|stopped| *stopped) => false,
        waited = tokio::time::timeout(HAND_OVER_WAIT, predecessors.handed_over()) => {
            if waited.is_err() {
                tracing::warn!(
                    wait = ?HAND_OVER_WAIT,
                    "admin API: the previous process has not said it stopped accepting; answering anyway"
                );
            }
            true
        }
    }
}

/// The TCP listener on `bind`: the one handed down at an upgrade, or a new one.
fn bind_tcp(
    bind: SocketAddr,
    inherited: Option<&StdTcpListener>,
) -> Result<StdTcpListener, AdminError> {
    let bind_error = |error| AdminError::Bind { addr: bind, error };
    let listener = match inherited {
        Some(inherited) => inherited.try_clone(),
        None => StdTcpListener::bind(bind),
    }
    .map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}

/// The UNIX listener on `socket`'s path: the one handed down at an upgrade, or a new one.
fn listen_unix(
    socket: &AdminSocket,
    inherited: Option<&StdUnixListener>,
) -> Result<StdUnixListener, AdminError> {
    let socket_error = |error| AdminError::Socket {
        path: socket.path.clone(),
        error,
    };
    let listener = match inherited {
        Some(inherited) => inherited.try_clone(),
        None => socket::listen(socket),
    }
    .map_err(socket_error)?;
    listener.set_nonblocking(true).map_err(socket_error)?;
    Ok(listener)
}

/// Without a token, only loopback: the admin API reveals and changes the proxy's state, so
/// exposing it must be a decision, made by setting a token.
fn check_exposure(bind: SocketAddr, token: Option<&str>) -> Result<(), AdminError> {
    match token {
        Some("") => Err(AdminError::EmptyToken),
        Some(_) => Ok(()),
        // to_canonical: ::ffff:127.0.0.1 is loopback too.
        None if bind.ip().to_canonical().is_loopback() => Ok(()),
        None => Err(AdminError::UnprotectedBind { addr: bind }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_without_a_token_any_address_with_one() {
        let loopback: SocketAddr = "127.0.0.1:9900".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:9900".parse().unwrap();
        let v6: SocketAddr = "[::1]:9900".parse().unwrap();
        let everywhere: SocketAddr = "0.0.0.0:9900".parse().unwrap();
        assert!(check_exposure(loopback, None).is_ok());
        assert!(check_exposure(mapped, None).is_ok());
        assert!(check_exposure(v6, None).is_ok());
        let refusal = check_exposure(everywhere, None).unwrap_err().to_string();
        assert!(refusal.contains("[admin] bind"), "{refusal}");
        assert!(refusal.contains("token_env"), "{refusal}");
        assert!(check_exposure(everywhere, Some("secret")).is_ok());
        assert!(matches!(
            check_exposure(loopback, Some("")),
            Err(AdminError::EmptyToken)
        ));
    }
}
