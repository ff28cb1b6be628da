//! The admin listener (`[admin] bind`): a minimal HTTP/1.1 server for operators, monitors and
//! `herdsman ctl`. `GET /healthz` says `ok`; `GET /api/workers` returns each worker's counters,
//! CPU and the kernel's listen-queue losses, and the old processes still draining after a binary
//! upgrade (`predecessors`); the pool routes (`/api/pools…`, `/api/reload`, in
//! `admin_pools`) show and change the pools through the [`Registry`]; `GET /metrics` is the
//! Prometheus text format (`metrics`) and `GET /stats` the live stats page. Every other answer is
//! JSON, errors included: `{"error": "<what is wrong>"}`.
//!
//! It runs on an OS thread of its own with a current-thread runtime, never on a worker: the
//! admin API must never take time from a worker's connections, and a worker that is busy or
//! stalled — exactly when an operator looks at `/api/workers` — must not make the admin API
//! unreachable. The thread also runs the listen-queue watcher (`kernel_watch`), for the same
//! reason: reading /proc is blocking file I/O a worker should not do. The registry's calls are
//! made directly from the connection tasks: they take the control plane's mutex, never one the
//! request path takes, and a reload's file read blocks only this thread.
//!
//! It listens on TCP (`[admin] bind`), on a UNIX socket (`[admin] socket`, whose file mode keeps
//! other local users out; `admin_socket`), or both. Safe by default: without a token the TCP
//! listener only binds a loopback address; with one every request must carry it
//! (`Authorization: Bearer <token>`), compared in constant time. Before anything else each
//! request passes `admin_guard`: a foreign Host (DNS rebinding), a page on another origin
//! (cross-site request forgery) or a change without a JSON body type is refused, so a refused
//! client learns nothing and changes nothing. The one exception to the token is `GET /stats`, the
//! live stats page (`stats_page.html`): it holds no data, only the script that asks the API for
//! it, with the token, and a browser cannot send a token with a page navigation. Every request
//! that would change something is logged with who made it (address, or uid and pid on the
//! socket) and its outcome.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::admin_guard::Guard;
use super::admin_pools::{self, ApiError};
use super::admin_socket;
use super::metrics;
use crate::config::{is_valid_name, AdminSocket};
use crate::http1::{self, error_response, Body, HeadError, Method, Request};
use crate::process::drain::{Draining, Predecessors};
use crate::process::kernel_watch;
use crate::proxy::Buffer;
use crate::stats::procfs::{self, ListenQueueDrops};
use crate::stats::{Stats, WorkerReport};
use crate::upstream::registry::Registry;

/// A request (head and body) must arrive complete within this long of the previous response (or
/// of the connection opening); an idle keep-alive connection is closed after it too.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that does not read its response for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head; the admin routes need a request line and a few fields.
const MAX_HEAD: usize = 16 * 1024;
/// Largest request body (Content-Length); the pool routes' JSON is a few dozen bytes.
const MAX_BODY: usize = 64 * 1024;
/// First read buffer size; grows up to a whole head and body.
const INITIAL_READ: usize = 1024;
/// Connections served at once. More wait in the listen queue, so a flood of connections costs
/// the admin thread no memory beyond this.
const MAX_CONNECTIONS: usize = 64;
/// How often the listen-queue counters are read.
const LISTEN_QUEUE_INTERVAL: Duration = Duration::from_secs(5);

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
    });
    let thread = std::thread::Builder::new()
        .name("herdsman-admin".into())
        .spawn(move || {
            runtime.block_on(async move {
                tokio::spawn(kernel_watch::watch_listen_queue(
                    LISTEN_QUEUE_INTERVAL,
                    stop.clone(),
                ));
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
        None => admin_socket::listen(socket),
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

/// What every connection needs; immutable once the listener starts.
struct Shared {
    guard: Guard,
    intake: &'static str,
    stats: Arc<Stats>,
    /// The pools; the pool routes read and change them.
    registry: Arc<Registry>,
    predecessors: Option<Arc<Predecessors>>,
}

/// One of the admin API's listeners.
enum AdminListener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// Who called: the peer's address, or on the UNIX socket the caller's uid and pid as the kernel
/// gives them (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy)]
enum Peer {
    Tcp(SocketAddr),
    Local { uid: u32, pid: Option<i32> },
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Local {
                uid,
                pid: Some(pid),
            } => write!(f, "uid {uid} (pid {pid})"),
            Peer::Local { uid, pid: None } => write!(f, "uid {uid}"),
        }
    }
}

impl AdminListener {
    /// Accepts the next connection and serves it in a task of its own, holding `slot`.
    async fn accept_and_serve(
        &self,
        shared: &Arc<Shared>,
        slot: OwnedSemaphorePermit,
    ) -> io::Result<()> {
        match self {
            AdminListener::Tcp(listener) => {
                let (stream, addr) = listener.accept().await?;
                let _ = stream.set_nodelay(true);
                let served = serve_connection(stream, Peer::Tcp(addr), Arc::clone(shared), slot);
                tokio::spawn(served);
            }
            AdminListener::Unix(listener) => {
                let (stream, _) = listener.accept().await?;
                let credentials = stream.peer_cred()?;
                let peer = Peer::Local {
                    uid: credentials.uid(),
                    pid: credentials.pid(),
                };
                tokio::spawn(serve_connection(stream, peer, Arc::clone(shared), slot));
            }
        }
        Ok(())
    }
}

async fn accept_until_stopped(
    listener: AdminListener,
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accept = async {
            // A slot first: with all taken, new connections wait in the listen queue.
            let slot = Arc::clone(&slots)
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            listener.accept_and_serve(&shared, slot).await
        };
        let accepted = tokio::select! {
            // Err: the sender is gone, which also means stop.
            _ = stop.wait_for(|stopped| *stopped) => return,
            accepted = accept => accepted,
        };
        if let Err(error) = accepted {
            // Usually out of file descriptors: pause rather than spin on the same error.
            tracing::warn!(%error, "admin API: accept failed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Serves requests on one connection until it closes, asks to close, errs or times out.
async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: Peer,
    shared: Arc<Shared>,
    _slot: OwnedSemaphorePermit,
) {
    let mut buffer = Buffer::new();
    let mut out = Vec::new();
    loop {
        let read = read_and_answer(&mut stream, &mut buffer, &shared, peer, &mut out);
        let keep_open = match tokio::time::timeout(HEADER_TIMEOUT, read).await {
            Ok(Ok(Exchange::Answered { keep_open })) => keep_open,
            Ok(Ok(Exchange::Refused)) => false,
            Ok(Ok(Exchange::Closed)) | Ok(Err(_)) => return,
            // Silent and idle: just close. Part of a request and then silence: say why.
            Err(_elapsed) if buffer.is_empty() => return,
            Err(_elapsed) => {
                error_response::write_error_response(
                    408,
                    "request not received in time",
                    false,
                    &mut out,
                );
                false
            }
        };
        let written = tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&out)).await;
        if !matches!(written, Ok(Ok(()))) || !keep_open {
            let _ = tokio::time::timeout(WRITE_TIMEOUT, stream.shutdown()).await;
            return;
        }
        out.clear();
        buffer.release_if_empty();
    }
}

/// How reading one request ended.
enum Exchange {
    /// A response is in `out`; `keep_open`: another request may follow on the connection.
    Answered { keep_open: bool },
    /// The request was malformed, too large or had a body the API does not read; an error
    /// response is in `out`, then close.
    Refused,
    /// The client closed before sending a whole request.
    Closed,
}

/// What the bytes buffered so far amount to.
enum Buffered {
    /// Not a whole request yet. `expects_continue`: the head is complete and its client waits
    /// for `100 Continue` before sending the body.
    Incomplete {
        expects_continue: bool,
    },
    Done(Exchange),
}

/// Reads until a whole request (head and body) is buffered, and writes its response into `out`.
async fn read_and_answer<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    buffer: &mut Buffer,
    shared: &Shared,
    peer: Peer,
    out: &mut Vec<u8>,
) -> io::Result<Exchange> {
    let mut continued = false;
    loop {
        match answer_buffered(buffer, shared, peer, out) {
            Buffered::Done(done) => return Ok(done),
            Buffered::Incomplete { expects_continue } if expects_continue && !continued => {
                stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
                continued = true;
            }
            Buffered::Incomplete { .. } => {}
        }
        // Room to read: a head that fills MAX_HEAD bytes and a body over MAX_BODY were refused
        // above, and a whole request was answered and consumed.
        if buffer
            .read_from(stream, INITIAL_READ, MAX_HEAD + MAX_BODY)
            .await?
            == 0
        {
            return Ok(Exchange::Closed);
        }
    }
}

/// Parses the request at the front of `buffer` and, when it is complete, answers it into `out`
/// and consumes it. Kept synchronous so that the header array never lives across an await. The
/// head is parsed again after each read while the body arrives: at most 64 KiB, on the admin
/// thread, is not worth remembering the parse for.
fn answer_buffered(
    buffer: &mut Buffer,
    shared: &Shared,
    peer: Peer,
    out: &mut Vec<u8>,
) -> Buffered {
    let mut headers = http1::header_slots();
    let data = buffer.data();
    let request = match http1::parse_request(data, &mut headers, MAX_HEAD) {
        Ok(None) => {
            return Buffered::Incomplete {
                expects_continue: false,
            }
        }
        Ok(Some(request)) => request,
        Err(HeadError::TooLarge) => {
            error_response::write_error_response(431, "request head too large", false, out);
            return Buffered::Done(Exchange::Refused);
        }
        Err(HeadError::LaterMinorVersion { digit_at }) => {
            http1::head::read_as_http11(buffer.data_mut(), digit_at);
            return answer_buffered(buffer, shared, peer, out);
        }
        Err(HeadError::Invalid(why)) => {
            error_response::write_error_response(400, why, false, out);
            return Buffered::Done(Exchange::Refused);
        }
        Err(HeadError::NotImplemented(why)) => {
            error_response::write_error_response(501, why, false, out);
            return Buffered::Done(Exchange::Refused);
        }
        Err(HeadError::VersionNotSupported) => {
            error_response::write_error_response(505, "HTTP/1.x only", false, out);
            return Buffered::Done(Exchange::Refused);
        }
    };
    let head_only = request.method == Method::Head;
    let body_len = match request.body {
        // UntilClose is for responses only.
        Body::None | Body::UntilClose => 0,
        Body::Length(length) if length <= MAX_BODY as u64 => length as usize,
        framing => {
            // Answered without reading the body, then closed: its end cannot be found (chunked,
            // not read here) or is too far away to be worth reading.
            let refusal = refuse_unread_body(&request, framing, shared);
            log_change(&request, peer, &refusal);
            refusal.write(out, head_only, false, &request);
            return Buffered::Done(Exchange::Refused);
        }
    };
    let Some(body) = data.get(request.head_len..request.head_len + body_len) else {
        if request.expect_continue {
            // The client waits for `100 Continue` before sending the body. When the answer will
            // be a refusal anyway, give it now rather than invite a body only to refuse it; then
            // close, since the client may send the body or not.
            if let Some(refusal) = shared.guard.check(&request, is_stats_page(&request)) {
                log_change(&request, peer, &refusal);
                refusal.write(out, head_only, false, &request);
                return Buffered::Done(Exchange::Refused);
            }
        }
        return Buffered::Incomplete {
            expects_continue: request.expect_continue,
        };
    };
    // After an upgrade request the client may switch protocols without waiting; close instead.
    let keep_open = request.keep_alive && !request.upgrade;
    let answer = answer(&request, body, shared);
    log_change(&request, peer, &answer);
    answer.write(out, head_only, keep_open, &request);
    let used = request.head_len + body_len;
    buffer.consume(used);
    Buffered::Done(Exchange::Answered { keep_open })
}

/// A response before it is written: status, body and what kind of body it is.
#[derive(Debug)]
pub(super) struct Answer {
    status: u16,
    content_type: &'static str,
    /// Extra header lines, each ending in CRLF.
    extra_headers: &'static str,
    pub(super) body: Vec<u8>,
}

impl Answer {
    fn text(status: u16, body: &str) -> Answer {
        Answer::typed(
            status,
            "text/plain; charset=utf-8",
            body.as_bytes().to_vec(),
        )
    }

    fn typed(status: u16, content_type: &'static str, body: Vec<u8>) -> Answer {
        Answer {
            status,
            content_type,
            extra_headers: "",
            body,
        }
    }

    /// `value` as JSON, or a 500 in the unlikely case it cannot be serialised.
    pub(super) fn json(status: u16, value: &impl Serialize) -> Answer {
        match serde_json::to_vec(value) {
            Ok(mut body) => {
                body.push(b'\n');
                Answer {
                    status,
                    content_type: "application/json",
                    extra_headers: "",
                    body,
                }
            }
            Err(error) => {
                tracing::error!(%error, "admin API: cannot serialise a response");
                Answer::error(500, "cannot serialise the response; see herdsman's log")
            }
        }
    }

    /// `{"error": message}`.
    pub(super) fn error(status: u16, message: &str) -> Answer {
        Answer::json(status, &json!({ "error": message }))
    }

    /// The status it answers with.
    pub(super) fn status(&self) -> u16 {
        self.status
    }

    pub(super) fn with_headers(mut self, extra_headers: &'static str) -> Answer {
        self.extra_headers = extra_headers;
        self
    }

    fn write(&self, out: &mut Vec<u8>, head_only: bool, keep_open: bool, request: &Request) {
        let status = self.status;
        let reason = reason(status);
        let connection = match (keep_open, request.minor_version) {
            (false, _) => "Connection: close\r\n",
            // An HTTP/1.0 client assumes close unless told otherwise.
            (true, 0) => "Connection: keep-alive\r\n",
            (true, _) => "",
        };
        let _ = write!(
            out,
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\n{}{connection}\r\n",
            self.content_type,
            self.body.len(),
            self.extra_headers,
        );
        if !head_only {
            out.extend_from_slice(&self.body);
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        other => error_response::reason(other),
    }
}

/// The live stats page: HTML, CSS and the script that polls `/api/pools` and `/api/workers`,
/// all in one file so that it needs nothing from elsewhere.
const STATS_PAGE: &str = include_str!("stats_page.html");

/// What a browser may do with the stats page: run its own inline script and style, call this
/// listener and nothing else (no other host, no plugin, no framing, whose clicks on the page's
/// buttons could be hijacked).
const STATS_PAGE_HEADERS: &str = "Content-Security-Policy: default-src 'none'; \
    script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; \
    img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n";

/// The paths. Names in them are config names (`[A-Za-z0-9_.-]`), so no percent-decoding: a
/// segment with any other byte matches no route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'t> {
    Health,
    /// `/stats`, the live stats page for a browser.
    StatsPage,
    /// `/metrics`, for Prometheus.
    Metrics,
    Workers,
    /// `/api/pools`
    Pools,
    /// `/api/reload`
    Reload,
    /// `/api/upgrade`
    Upgrade,
    /// `/api/pools/{pool}/servers`
    Servers {
        pool: &'t str,
    },
    /// `/api/pools/{pool}/servers/{server}` and the paths under it.
    Server {
        pool: &'t str,
        server: &'t str,
        part: ServerPart,
    },
}

/// Which path under `/api/pools/{pool}/servers/{server}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerPart {
    /// The server itself (DELETE removes it).
    Whole,
    State,
    Weight,
    TestToken,
}

/// The methods a route answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Allowed {
    /// GET and HEAD.
    Read,
    Post,
    Put,
    Delete,
}

impl Allowed {
    fn permits(self, method: Method) -> bool {
        match self {
            Allowed::Read => matches!(method, Method::Get | Method::Head),
            Allowed::Post => method == Method::Post,
            Allowed::Put => method == Method::Put,
            Allowed::Delete => method == Method::Delete,
        }
    }

    /// The `Allow` field of a 405 (RFC 9110 §15.5.6), and the same list for its message.
    fn field(self) -> (&'static str, &'static str) {
        match self {
            Allowed::Read => ("Allow: GET, HEAD\r\n", "GET and HEAD"),
            Allowed::Post => ("Allow: POST\r\n", "POST"),
            Allowed::Put => ("Allow: PUT\r\n", "PUT"),
            Allowed::Delete => ("Allow: DELETE\r\n", "DELETE"),
        }
    }
}

impl<'t> Route<'t> {
    fn find(target: &'t str) -> Option<Route<'t>> {
        // A query string changes nothing on these routes.
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        match path {
            "/healthz" => return Some(Route::Health),
            "/stats" => return Some(Route::StatsPage),
            "/metrics" => return Some(Route::Metrics),
            "/api/workers" => return Some(Route::Workers),
            "/api/pools" => return Some(Route::Pools),
            "/api/reload" => return Some(Route::Reload),
            "/api/upgrade" => return Some(Route::Upgrade),
            _ => {}
        }
        let mut segments = path.strip_prefix("/api/pools/")?.split('/');
        let (pool, servers) = (segments.next()?, segments.next()?);
        let server = segments.next();
        let part = match (segments.next(), segments.next()) {
            (None, _) => ServerPart::Whole,
            (Some("state"), None) => ServerPart::State,
            (Some("weight"), None) => ServerPart::Weight,
            (Some("test-token"), None) => ServerPart::TestToken,
            _ => return None,
        };
        if servers != "servers" || !is_valid_name(pool) {
            return None;
        }
        match server {
            None => Some(Route::Servers { pool }),
            Some(server) if is_valid_name(server) => Some(Route::Server { pool, server, part }),
            Some(_) => None,
        }
    }

    fn allowed(self) -> Allowed {
        match self {
            Route::Health | Route::StatsPage | Route::Metrics | Route::Workers | Route::Pools => {
                Allowed::Read
            }
            Route::Reload | Route::Upgrade | Route::Servers { .. } => Allowed::Post,
            Route::Server { part, .. } => match part {
                ServerPart::Whole => Allowed::Delete,
                ServerPart::State | ServerPart::Weight => Allowed::Put,
                ServerPart::TestToken => Allowed::Read,
            },
        }
    }
}

/// The body of `GET /api/workers`.
#[derive(Serialize)]
struct WorkersBody<'a> {
    /// This process: it changes with a binary upgrade.
    pid: u32,
    intake: &'a str,
    workers: Vec<WorkerReport>,
    /// The kernel's counters for the whole network namespace; `null` when /proc is unreadable.
    listen_queue: Option<ListenQueueDrops>,
    /// The older processes still finishing their connections after binary upgrades (nearest
    /// first: the one this process replaced, then any it had replaced and still heard from);
    /// empty when all have exited.
    predecessors: Vec<Draining>,
}

/// Decides the response to one request: the guard first (so a refused client learns nothing,
/// not even which paths exist, and changes nothing; the stats page needs no token, and only it),
/// then the route, then the method, then what the route does with the body.
fn answer(request: &Request, body: &[u8], shared: &Shared) -> Answer {
    if let Some(refusal) = shared.guard.check(request, is_stats_page(request)) {
        return refusal;
    }
    let Some(route) = Route::find(request.target) else {
        return Answer::error(404, "no such path; the API's paths start with /api/");
    };
    let allowed = route.allowed();
    if !allowed.permits(request.method) {
        let (field, methods) = allowed.field();
        let message = format!("this path answers {methods}, not {}", request.method_text);
        return Answer::error(405, &message).with_headers(field);
    }
    let registry = &shared.registry;
    let result: Result<Answer, ApiError> = match route {
        Route::Health => Ok(Answer::text(200, "ok\n")),
        Route::StatsPage => Ok(Answer::typed(
            200,
            "text/html; charset=utf-8",
            STATS_PAGE.as_bytes().to_vec(),
        )
        .with_headers(STATS_PAGE_HEADERS)),
        Route::Metrics => Ok(Answer::typed(
            200,
            metrics::CONTENT_TYPE,
            metrics::render(&shared.stats, registry).into_bytes(),
        )),
        Route::Workers => Ok(Answer::json(
            200,
            &WorkersBody {
                pid: std::process::id(),
                intake: shared.intake,
                workers: shared.stats.report(),
                listen_queue: procfs::listen_queue_drops(),
                predecessors: shared
                    .predecessors
                    .as_deref()
                    .map(Predecessors::draining)
                    .unwrap_or_default(),
            },
        )),
        Route::Pools => Ok(Answer::json(200, &registry.pools())),
        Route::Reload => admin_pools::reload(registry),
        // The upgrade is the signal's: the main thread starts the new binary, and this process
        // stops once that one serves. 202: asked, not done.
        Route::Upgrade => {
            // SAFETY: kill with this process's own id and a signal it handles.
            let sent = unsafe { libc::kill(libc::getpid(), libc::SIGUSR2) } == 0;
            Ok(if sent {
                Answer::json(202, &serde_json::json!({ "upgrading": true }))
            } else {
                Answer::error(500, "cannot signal this process")
            })
        }
        Route::Servers { pool } => admin_pools::add_server(registry, pool, body),
        Route::Server { pool, server, part } => match part {
            ServerPart::Whole => admin_pools::remove_server(registry, pool, server),
            ServerPart::State => admin_pools::set_state(registry, pool, server, body),
            ServerPart::Weight => admin_pools::set_weight(registry, pool, server, body),
            ServerPart::TestToken => admin_pools::test_token(registry, pool, server),
        },
    };
    result.unwrap_or_else(ApiError::into_answer)
}

/// The answer to a request whose body is not read (chunked, or over `MAX_BODY`): the guard's
/// refusal, as for every request, else the reason the body is refused.
fn refuse_unread_body(request: &Request, framing: Body, shared: &Shared) -> Answer {
    if let Some(refusal) = shared.guard.check(request, is_stats_page(request)) {
        return refusal;
    }
    match framing {
        Body::Chunked => Answer::error(
            411,
            "chunked request bodies are not accepted: send the body with Content-Length",
        ),
        _ => Answer::error(
            413,
            &format!("the request body is larger than the admin API reads ({MAX_BODY} bytes)"),
        ),
    }
}

/// Logs a request that would change something (any method but GET and HEAD): who made it, what
/// it asked, and how it was answered. A refusal is a warning: someone tried.
fn log_change(request: &Request, peer: Peer, answer: &Answer) {
    if matches!(request.method, Method::Get | Method::Head) {
        return;
    }
    let (method, path, status) = (request.method_text, request.target, answer.status());
    if (200..300).contains(&status) {
        tracing::info!(who = %peer, method, path, status, "admin API: change made");
    } else {
        tracing::warn!(who = %peer, method, path, status, "admin API: change refused");
    }
}

/// The one request served without the token: `GET` (or `HEAD`) `/stats`. The page is the same
/// for everyone and holds no data: its script fetches every figure from the API with the token,
/// which it asks the user for. And it must be so, since a browser cannot attach
/// `Authorization: Bearer` to a page it navigates to. Any other method on `/stats` is still
/// refused with 401, like every other path.
fn is_stats_page(request: &Request) -> bool {
    Route::find(request.target) == Some(Route::StatsPage) && Allowed::Read.permits(request.method)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    const TEST_PEER: Peer = Peer::Local { uid: 0, pid: None };

    /// A pool "app" of two servers, "a" and "b" (weight 2).
    fn registry() -> Arc<Registry> {
        let config = crate::Config::from_toml(
            r#"
            [[listener]]
            name = "web"
            bind = "127.0.0.1:0"
            pool = "app"

            [[pool]]
            name = "app"
            servers = [
              { name = "a", addr = "127.0.0.1:9001" },
              { name = "b", addr = "127.0.0.1:9002", weight = 2 },
            ]
            "#,
            "test",
        )
        .unwrap();
        Arc::new(Registry::new(config, None, None, Vec::new()).unwrap())
    }

    fn shared(token: Option<&str>) -> Shared {
        let stats = Stats::new(2);
        stats.counters[1].accepted.store(7, Ordering::Relaxed);
        Shared {
            guard: Guard {
                allowed_hosts: Vec::new(),
                token: token.map(str::to_string),
            },
            intake: "balanced",
            stats,
            registry: registry(),
            predecessors: None,
        }
    }

    /// The bytes written for `request` and whether the connection stays open.
    fn exchange(shared: &Shared, request: &str) -> (String, Option<bool>) {
        let mut buffer = Buffer::new();
        let mut source = request.as_bytes();
        read_everything(&mut buffer, &mut source);
        let mut out = Vec::new();
        let keep_open = match answer_buffered(&mut buffer, shared, TEST_PEER, &mut out) {
            Buffered::Done(Exchange::Answered { keep_open }) => Some(keep_open),
            Buffered::Done(Exchange::Refused) => None,
            Buffered::Done(Exchange::Closed) | Buffered::Incomplete { .. } => {
                panic!("no answer to {request:?}")
            }
        };
        (String::from_utf8(out).unwrap(), keep_open)
    }

    fn read_everything(buffer: &mut Buffer, source: &mut &[u8]) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            while buffer
                .read_from(source, 64, MAX_HEAD + MAX_BODY)
                .await
                .unwrap()
                > 0
            {}
        });
    }

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

    #[test]
    fn workers_are_reported_as_json() {
        let shared = shared(None);
        let (response, keep_open) = exchange(
            &shared,
            "GET /api/workers?pretty HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
        );
        assert_eq!(keep_open, Some(true));
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.contains("Content-Type: application/json\r\n"),
            "{head}"
        );
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(!head.contains("Connection:"), "{head}");
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["intake"], "balanced");
        assert_eq!(json["workers"].as_array().unwrap().len(), 2);
        assert_eq!(json["workers"][1]["accepted"], 7);
    }

    #[test]
    fn the_token_is_checked_before_anything_else() {
        let shared = shared(Some("s3cret"));
        for authorization in [
            "",
            "Authorization: Bearer wrong\r\n",
            "Authorization: Basic s3cret\r\n",
            "Authorization: Bearer\r\n",
            "Authorization: Bearer s3cret\r\nAuthorization: Bearer s3cret\r\n",
        ] {
            for path in ["/api/workers", "/nowhere"] {
                let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{authorization}\r\n");
                let (response, keep_open) = exchange(&shared, &request);
                assert!(
                    response.starts_with("HTTP/1.1 401 "),
                    "{request:?}: {response}"
                );
                assert!(response.contains("WWW-Authenticate: Bearer\r\n"));
                assert_eq!(keep_open, Some(true));
            }
        }
        let (response, _) = exchange(
            &shared,
            "GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nauthorization: bearer  s3cret \r\n\r\n",
        );
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.ends_with("\r\n\r\nok\n"), "{response}");
    }

    #[test]
    fn unknown_paths_other_methods_and_bodies() {
        let shared = shared(None);
        let (response, _) = exchange(&shared, "GET /api/nothing HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n");
        assert!(
            response.starts_with("HTTP/1.1 404 Not Found\r\n"),
            "{response}"
        );

        let (response, keep_open) = exchange(
            &shared,
            "POST /api/workers HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        );
        assert!(response.starts_with("HTTP/1.1 405 "), "{response}");
        assert!(response.contains("Allow: GET, HEAD\r\n"), "{response}");
        assert!(response.contains(r#""error":"#), "{response}");
        // The body was read, so the next request's start is known.
        assert_eq!(keep_open, Some(true));

        let (response, _) = exchange(
            &shared,
            "HEAD /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
        );
        assert!(response.contains("Content-Length: 3\r\n"), "{response}");
        assert!(response.ends_with("\r\n\r\n"), "{response}");
    }

    #[test]
    fn persistence_follows_the_client() {
        let shared = shared(None);
        let (response, keep_open) = exchange(
            &shared,
            "GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(keep_open, Some(false));
        assert!(response.contains("Connection: close\r\n"), "{response}");
        let (response, keep_open) = exchange(&shared, "GET /healthz HTTP/1.0\r\n\r\n");
        assert_eq!(keep_open, Some(false));
        assert!(response.contains("Connection: close\r\n"), "{response}");
        let (response, keep_open) = exchange(
            &shared,
            "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        );
        assert_eq!(keep_open, Some(true));
        assert!(
            response.contains("Connection: keep-alive\r\n"),
            "{response}"
        );
    }

    #[test]
    fn malformed_and_oversized_heads_are_refused() {
        let shared = shared(None);
        let (response, keep_open) = exchange(&shared, "GET /healthz HTTP/1.1\r\n\r\n");
        assert_eq!(keep_open, None);
        assert!(response.starts_with("HTTP/1.1 400 "), "{response}");
        assert!(response.contains("Connection: close\r\n"), "{response}");

        let huge = format!(
            "GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-Big: {}\r\n\r\n",
            "x".repeat(MAX_HEAD)
        );
        let (response, keep_open) = exchange(&shared, &huge);
        assert_eq!(keep_open, None);
        assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
    }

    /// Status and JSON body of one request with `body`, on a new connection.
    fn call(shared: &Shared, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let (response, _) = exchange(shared, &request);
        let status = response[9..12].parse().unwrap();
        let (_, json) = response.split_once("\r\n\r\n").unwrap();
        let json = serde_json::from_str(json).unwrap_or_else(|_| panic!("not JSON: {response}"));
        (status, json)
    }

    #[test]
    fn routes_take_names_and_nothing_else() {
        use Route::*;
        let server = |part| Server {
            pool: "app",
            server: "b-1.x_y",
            part,
        };
        for (target, route) in [
            ("/healthz", Some(Health)),
            ("/stats", Some(StatsPage)),
            ("/stats?token=x", Some(StatsPage)),
            ("/stats/", None),
            ("/api/workers?x", Some(Workers)),
            ("/api/pools", Some(Pools)),
            ("/api/reload", Some(Reload)),
            ("/api/pools/app/servers", Some(Servers { pool: "app" })),
            (
                "/api/pools/app/servers/b-1.x_y",
                Some(server(ServerPart::Whole)),
            ),
            (
                "/api/pools/app/servers/b-1.x_y/state",
                Some(server(ServerPart::State)),
            ),
            (
                "/api/pools/app/servers/b-1.x_y/weight?",
                Some(server(ServerPart::Weight)),
            ),
            (
                "/api/pools/app/servers/b-1.x_y/test-token",
                Some(server(ServerPart::TestToken)),
            ),
            ("/api/pools/", None),
            ("/api/pools/app", None),
            ("/api/pools/app/", None),
            ("/api/pools/app/servers/", None),
            ("/api/pools/app/server/b", None),
            ("/api/pools/app/servers/b/", None),
            ("/api/pools/app/servers/b/colour", None),
            ("/api/pools/app/servers/b/state/x", None),
            ("/api/pools/a%70p/servers/b", None),
            ("/api/pools/app/servers/b%20c", None),
            ("/api/pools//servers/b", None),
            ("/api/pools/app/servers/b:80", None),
        ] {
            assert_eq!(Route::find(target), route, "{target}");
        }
    }

    #[test]
    fn bodies_are_read_by_length_and_only_so() {
        let shared = shared(None);
        // A body in two reads, with a pipelined request after it.
        let mut buffer = Buffer::new();
        let mut first: &[u8] = b"PUT /api/pools/app/servers/b/weight HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
            Content-Length: 12\r\nExpect: 100-continue\r\n\r\n{\"weig";
        read_everything(&mut buffer, &mut first);
        let mut out = Vec::new();
        assert!(matches!(
            answer_buffered(&mut buffer, &shared, TEST_PEER, &mut out),
            Buffered::Incomplete {
                expects_continue: true
            }
        ));
        assert!(out.is_empty());
        let mut rest: &[u8] = b"ht\":3}GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n";
        read_everything(&mut buffer, &mut rest);
        assert!(matches!(
            answer_buffered(&mut buffer, &shared, TEST_PEER, &mut out),
            Buffered::Done(Exchange::Answered { keep_open: true })
        ));
        let response = String::from_utf8(std::mem::take(&mut out)).unwrap();
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.contains(r#""weight":3"#), "{response}");
        assert!(matches!(
            answer_buffered(&mut buffer, &shared, TEST_PEER, &mut out),
            Buffered::Done(Exchange::Answered { keep_open: true })
        ));
        assert!(String::from_utf8(out).unwrap().ends_with("ok\n"));

        let (response, keep_open) = exchange(
            &shared,
            "POST /api/pools/app/servers HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        );
        assert!(
            response.starts_with("HTTP/1.1 411 Length Required\r\n"),
            "{response}"
        );
        assert!(response.contains("Content-Length"), "{response}");
        assert_eq!(keep_open, None);

        let (response, keep_open) = exchange(
            &shared,
            &format!(
                "POST /api/pools/app/servers HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                MAX_BODY + 1
            ),
        );
        assert!(response.starts_with("HTTP/1.1 413 "), "{response}");
        assert_eq!(keep_open, None);
        // Exactly the limit is read.
        let body = format!("{{\"weight\":3{}}}", " ".repeat(MAX_BODY - 12));
        assert_eq!(body.len(), MAX_BODY);
        let (status, json) = call(&shared, "PUT", "/api/pools/app/servers/a/weight", &body);
        assert_eq!((status, &json["weight"]), (200, &serde_json::json!(3)));
    }

    #[test]
    fn without_the_token_nothing_is_read_or_changed() {
        let shared = shared(Some("s3cret"));
        let (response, keep_open) = exchange(
            &shared,
            "PUT /api/pools/app/servers/b/state HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"state\":\"maint\"}",
        );
        assert!(response.starts_with("HTTP/1.1 401 "), "{response}");
        assert_eq!(keep_open, Some(true));
        let (response, _) = exchange(
            &shared,
            "POST /api/pools/app/servers HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        assert!(response.starts_with("HTTP/1.1 401 "), "{response}");
        // Waiting for 100 Continue: refused at once, without inviting the body.
        let mut buffer = Buffer::new();
        let mut head: &[u8] = b"PUT /api/pools/app/servers/b/state HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
            Content-Length: 17\r\nExpect: 100-continue\r\n\r\n";
        read_everything(&mut buffer, &mut head);
        let mut out = Vec::new();
        assert!(matches!(
            answer_buffered(&mut buffer, &shared, TEST_PEER, &mut out),
            Buffered::Done(Exchange::Refused)
        ));
        let response = String::from_utf8(out).unwrap();
        assert!(response.starts_with("HTTP/1.1 401 "), "{response}");
        assert!(response.contains("Connection: close\r\n"), "{response}");

        let servers = shared.registry.pools().pools[0].servers.clone();
        assert!(servers.iter().all(|s| s.state == "ready"), "{servers:?}");
    }

    #[test]
    fn pool_routes_change_the_registry() {
        let shared = shared(None);
        let (status, json) = call(&shared, "GET", "/api/pools", "");
        assert_eq!(status, 200);
        assert_eq!(json["pools"][0]["name"], "app");
        assert_eq!(json["pools"][0]["servers"][1]["weight"], 2);

        let (status, json) = call(
            &shared,
            "PUT",
            "/api/pools/app/servers/b/state",
            r#"{"state":"drain"}"#,
        );
        assert_eq!((status, json["state"].as_str()), (200, Some("drain")));

        let added = r#"{"name":"c","addr":"127.0.0.1:9003"}"#;
        let (status, json) = call(&shared, "POST", "/api/pools/app/servers", added);
        assert_eq!(status, 201, "{json}");
        assert_eq!(
            (&json["weight"], &json["state"], &json["added_at_run_time"]),
            (
                &serde_json::json!(1),
                &serde_json::json!("ready"),
                &serde_json::json!(true)
            )
        );
        let (status, json) = call(&shared, "POST", "/api/pools/app/servers", added);
        assert_eq!(status, 409, "{json}");
        assert!(json["error"].as_str().unwrap().contains("\"c\""), "{json}");

        let (status, json) = call(&shared, "GET", "/api/pools/app/servers/c/test-token", "");
        assert_eq!(status, 200);
        assert_eq!(json["header"], "X-Herdsman-Test");
        assert!(!json["token"].as_str().unwrap().is_empty());

        let (status, json) = call(&shared, "DELETE", "/api/pools/app/servers/c", "");
        assert_eq!((status, json["name"].as_str()), (200, Some("c")));
        assert_eq!(shared.registry.pools().pools[0].servers.len(), 2);

        for (method, path, body, expected) in [
            ("DELETE", "/api/pools/app/servers/c", "", 404),
            ("DELETE", "/api/pools/web/servers/a", "", 404),
            (
                "PUT",
                "/api/pools/app/servers/zz/weight",
                r#"{"weight":1}"#,
                404,
            ),
            (
                "PUT",
                "/api/pools/app/servers/a/weight",
                r#"{"weight":300}"#,
                400,
            ),
            (
                "PUT",
                "/api/pools/app/servers/a/state",
                r#"{"state":"asleep"}"#,
                400,
            ),
            ("PUT", "/api/pools/app/servers/a/state", "{", 400),
            ("GET", "/api/pools/app/servers/a/state", "", 405),
            ("POST", "/api/reload", "", 409),
        ] {
            let (status, json) = call(&shared, method, path, body);
            assert_eq!(status, expected, "{method} {path} {body}: {json}");
            assert!(json["error"].is_string(), "{json}");
        }
    }

    #[test]
    fn the_stats_page_is_served_without_the_token_and_nothing_else_is() {
        let with_token = shared(Some("s3cret"));
        for method in ["GET", "HEAD"] {
            let (response, keep_open) = exchange(
                &with_token,
                &format!("{method} /stats?refresh HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n"),
            );
            assert_eq!(keep_open, Some(true));
            let (head, body) = response.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{method}: {head}");
            assert!(
                head.contains("\r\nContent-Type: text/html; charset=utf-8\r\n"),
                "{head}"
            );
            assert!(
                head.contains(&format!("\r\nContent-Length: {}\r\n", STATS_PAGE.len())),
                "{head}"
            );
            let policy = head
                .lines()
                .find_map(|line| line.strip_prefix("Content-Security-Policy: "))
                .unwrap_or_else(|| panic!("no CSP: {head}"));
            for directive in [
                "default-src 'none'",
                "script-src 'unsafe-inline'",
                "style-src 'unsafe-inline'",
                "connect-src 'self'",
                "img-src 'self' data:",
                "frame-ancestors 'none'",
            ] {
                assert!(
                    policy.split("; ").any(|part| part == directive),
                    "{directive} in {policy}"
                );
            }
            let expected = if method == "GET" { STATS_PAGE } else { "" };
            assert!(body == expected, "{method}: the body is not the page");
        }
        // What the page shows comes from the API, which still wants the token; so do other
        // methods on /stats and paths that merely look like it.
        for request in [
            "GET /api/pools HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
            "GET /stats/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
            "GET /stats.html HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
            "GET /Stats HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
            "POST /stats HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n",
            "PUT /stats HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        ] {
            let (response, _) = exchange(&with_token, request);
            assert!(
                response.starts_with("HTTP/1.1 401 "),
                "{request:?}: {response}"
            );
        }
        // Without a token configured, the page answers reads only, like the other pages.
        let without_token = shared(None);
        let (response, _) = exchange(
            &without_token,
            "POST /stats HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n",
        );
        assert!(response.starts_with("HTTP/1.1 405 "), "{response}");
        assert!(response.contains("Allow: GET, HEAD\r\n"), "{response}");
    }

    #[test]
    fn the_stats_page_is_self_contained() {
        // Nothing from another host: no absolute URL at all, so no script, style, font or image
        // is fetched from elsewhere (the CSP would block it, and the page would break).
        for scheme in ["http://", "https://", "//cdn", "ws://", "wss://"] {
            assert!(!STATS_PAGE.contains(scheme), "the page refers to {scheme}");
        }
        // Nor from this listener: everything is inline, and the only URLs are the API's.
        let lower = STATS_PAGE.to_ascii_lowercase();
        for reference in [" src=", "@import", "url(", "rel=\"stylesheet\""] {
            assert!(!lower.contains(reference), "the page has {reference}");
        }
        for endpoint in ["\"/api/pools\"", "\"/api/workers\"", "/state\""] {
            assert!(
                STATS_PAGE.contains(endpoint),
                "the page never calls {endpoint}"
            );
        }
    }

    #[test]
    fn a_405_says_what_the_path_answers() {
        let shared = shared(None);
        for (method, path, allow) in [
            ("GET", "/api/pools/app/servers", "Allow: POST\r\n"),
            ("GET", "/api/reload", "Allow: POST\r\n"),
            ("POST", "/api/pools", "Allow: GET, HEAD\r\n"),
            ("PUT", "/api/pools/app/servers/a", "Allow: DELETE\r\n"),
            ("POST", "/api/pools/app/servers/a/weight", "Allow: PUT\r\n"),
        ] {
            let (response, _) = exchange(
                &shared,
                &format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n"),
            );
            assert!(
                response.starts_with("HTTP/1.1 405 "),
                "{method} {path}: {response}"
            );
            assert!(response.contains(allow), "{method} {path}: {response}");
        }
    }
}
