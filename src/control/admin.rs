//! The admin listener (`[admin] bind`): a minimal HTTP/1.1 server for operators and monitors.
//! `GET /api/workers` returns each worker's intake counters and the kernel's listen-queue losses
//! as JSON; `GET /healthz` says `ok`. A later issue adds the pool routes.
//!
//! It runs on an OS thread of its own with a current-thread runtime, never on a worker: the
//! admin API must never take time from a worker's connections, and a worker that is busy or
//! stalled — exactly when an operator looks at `/api/workers` — must not make the admin API
//! unreachable. The thread also runs the listen-queue watcher (`kernel_watch`), for the same
//! reason: reading /proc is blocking file I/O a worker should not do.
//!
//! Safe by default: without a token it only binds a loopback address, and with one every request
//! must carry it (`Authorization: Bearer <token>`), compared in constant time.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::kernel_watch;
use crate::http1::{self, error_response, Body, HeadError, Method, Request};
use crate::proxy::Buffer;
use crate::stats::procfs::{self, ListenQueueDrops};
use crate::stats::{Stats, WorkerReport};

/// A request head must arrive complete within this long of the previous response (or of the
/// connection opening); an idle keep-alive connection is closed after it too.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that does not read its response for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head; the admin routes need a request line and a few fields.
const MAX_HEAD: usize = 16 * 1024;
/// First read buffer size; grows up to `MAX_HEAD`.
const INITIAL_READ: usize = 1024;
/// Connections served at once. More wait in the listen queue, so a flood of connections costs
/// the admin thread no memory beyond this.
const MAX_CONNECTIONS: usize = 64;
/// How often the listen-queue counters are read.
const LISTEN_QUEUE_INTERVAL: Duration = Duration::from_secs(5);

/// What the admin listener needs; built from the validated `[admin]` section.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// `[admin] bind`. Must be a loopback address unless `token` is set.
    pub bind: SocketAddr,
    /// The token every request must present, read from the variable `[admin] token_env` names.
    /// `None`: no authentication, which is allowed only on loopback. Never empty.
    pub token: Option<String>,
    /// The intake mode's config name (`reuseport`, `balanced`, …), reported by `/api/workers`.
    pub intake: &'static str,
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
    #[error("cannot start the admin API's runtime: {0}")]
    Runtime(io::Error),
    #[error("cannot start the admin API's thread: {0}")]
    Thread(io::Error),
}

/// The running admin listener. It stops when the `stop` given to [`start`] becomes true.
#[derive(Debug)]
pub struct AdminHandle {
    /// The bound address (the real port when `[admin] bind` asked for port 0).
    pub local_addr: SocketAddr,
    thread: JoinHandle<()>,
}

impl AdminHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits for the admin thread to finish (after `stop`). A panic there is a bug; it is logged
    /// rather than passed on, so that it cannot interrupt the rest of a graceful stop.
    pub fn join(self) {
        if self.thread.join().is_err() {
            tracing::error!("the admin API's thread panicked");
        }
    }
}

/// Binds the admin listener and serves it on a new thread until `stop` becomes true or its
/// sender is dropped. Connections still open then are closed. Errors (an unsafe or unusable
/// address) are returned here, before any thread starts.
pub fn start(
    config: AdminConfig,
    stats: Arc<Stats>,
    stop: watch::Receiver<bool>,
) -> Result<AdminHandle, AdminError> {
    check_exposure(config.bind, config.token.as_deref())?;
    let bind_error = |error| AdminError::Bind {
        addr: config.bind,
        error,
    };
    let listener = StdTcpListener::bind(config.bind).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    let local_addr = listener.local_addr().map_err(bind_error)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AdminError::Runtime)?;
    // Registered with the admin runtime's reactor here, so that a failure is reported to the
    // caller rather than inside the thread.
    let listener = {
        let _entered = runtime.enter();
        TcpListener::from_std(listener).map_err(bind_error)?
    };
    let shared = Arc::new(Shared {
        token: config.token,
        intake: config.intake,
        stats,
    });
    let thread = std::thread::Builder::new()
        .name("herdsman-admin".into())
        .spawn(move || {
            runtime.block_on(async move {
                tokio::spawn(kernel_watch::watch_listen_queue(
                    LISTEN_QUEUE_INTERVAL,
                    stop.clone(),
                ));
                accept_until_stopped(listener, shared, stop).await;
            });
            // Dropping the runtime here cancels the watcher and any connection still open.
        })
        .map_err(AdminError::Thread)?;
    tracing::info!(addr = %local_addr, "admin API listening");
    Ok(AdminHandle { local_addr, thread })
}

/// Without a token, only loopback: the admin API reveals (and will later change) the proxy's
/// state, so exposing it must be a decision, made by setting a token.
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
    token: Option<String>,
    intake: &'static str,
    stats: Arc<Stats>,
}

async fn accept_until_stopped(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accept = async {
            // A slot first: with all taken, new connections wait in the listen queue.
            let slot = Arc::clone(&slots)
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            (slot, listener.accept().await)
        };
        let (slot, accepted) = tokio::select! {
            // Err: the sender is gone, which also means stop.
            _ = stop.wait_for(|stopped| *stopped) => return,
            accepted = accept => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                tokio::spawn(serve_connection(stream, Arc::clone(&shared), slot));
            }
            Err(error) => {
                // Usually out of file descriptors: pause rather than spin on the same error.
                tracing::warn!(%error, "admin API: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves requests on one connection until it closes, asks to close, errs or times out.
async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>, _slot: OwnedSemaphorePermit) {
    let _ = stream.set_nodelay(true);
    let mut buffer = Buffer::new();
    let mut out = Vec::new();
    loop {
        let read = read_and_answer(&mut stream, &mut buffer, &shared, &mut out);
        let keep_open = match tokio::time::timeout(HEADER_TIMEOUT, read).await {
            Ok(Ok(Exchange::Answered { keep_open })) => keep_open,
            Ok(Ok(Exchange::Refused)) => false,
            Ok(Ok(Exchange::Closed)) | Ok(Err(_)) => return,
            // Silent and idle: just close. Part of a head and then silence: say why.
            Err(_elapsed) if buffer.is_empty() => return,
            Err(_elapsed) => {
                error_response::write_error_response(
                    408,
                    "request head not received in time",
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
    /// The request was malformed or too large; an error response is in `out`, then close.
    Refused,
    /// The client closed before sending a request.
    Closed,
}

/// Reads until a whole request head is buffered, and writes its response into `out`.
async fn read_and_answer(
    stream: &mut TcpStream,
    buffer: &mut Buffer,
    shared: &Shared,
    out: &mut Vec<u8>,
) -> io::Result<Exchange> {
    loop {
        if let Some(done) = answer_buffered(buffer, shared, out) {
            return Ok(done);
        }
        // A head that fills MAX_HEAD bytes was refused above, so the buffer has room to read.
        if buffer.read_from(stream, INITIAL_READ, MAX_HEAD).await? == 0 {
            return Ok(Exchange::Closed);
        }
    }
}

/// Parses the head at the front of `buffer` and, when it is complete, answers it into `out` and
/// consumes it; `None` while it is incomplete. Kept synchronous so that the header array never
/// lives across an await.
fn answer_buffered(buffer: &mut Buffer, shared: &Shared, out: &mut Vec<u8>) -> Option<Exchange> {
    let mut headers = http1::header_slots();
    let (head_len, keep_open) = match http1::parse_request(buffer.data(), &mut headers, MAX_HEAD) {
        Ok(None) => return None,
        Ok(Some(request)) => {
            // The admin routes take no body, so a request with one is answered and the
            // connection closed, rather than guessing where the next request starts.
            let keep_open = request.keep_alive && request.body == Body::None && !request.upgrade;
            let answer = answer(&request, shared);
            answer.write(out, request.method == Method::Head, keep_open, &request);
            (request.head_len, keep_open)
        }
        Err(HeadError::TooLarge) => {
            error_response::write_error_response(431, "request head too large", false, out);
            return Some(Exchange::Refused);
        }
        Err(HeadError::Invalid(why)) => {
            error_response::write_error_response(400, why, false, out);
            return Some(Exchange::Refused);
        }
    };
    buffer.consume(head_len);
    Some(Exchange::Answered { keep_open })
}

/// A response before it is written: status, body and what kind of body it is.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: &'static str,
    /// Extra header lines, each ending in CRLF.
    extra_headers: &'static str,
    body: Vec<u8>,
}

impl Answer {
    fn text(status: u16, extra_headers: &'static str, body: &str) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            extra_headers,
            body: body.as_bytes().to_vec(),
        }
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
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        other => error_response::reason(other),
    }
}

/// The routes; each answers GET and HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Workers,
    Health,
}

impl Route {
    fn find(target: &str) -> Option<Route> {
        // A query string changes nothing on these routes.
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        match path {
            "/api/workers" => Some(Route::Workers),
            "/healthz" => Some(Route::Health),
            _ => None,
        }
    }
}

/// The body of `GET /api/workers`.
#[derive(Serialize)]
struct WorkersBody<'a> {
    intake: &'a str,
    workers: Vec<WorkerReport>,
    /// The kernel's counters for the whole network namespace; `null` when /proc is unreadable.
    listen_queue: Option<ListenQueueDrops>,
}

/// Decides the response to one request: authentication first (so an unauthenticated client
/// learns nothing, not even which paths exist), then the route, then the method.
fn answer(request: &Request, shared: &Shared) -> Answer {
    if let Some(token) = &shared.token {
        if !presents_token(request, token) {
            return Answer::text(
                401,
                "WWW-Authenticate: Bearer\r\n",
                "401 Unauthorized: send Authorization: Bearer <token>\n",
            );
        }
    }
    let Some(route) = Route::find(request.target) else {
        return Answer::text(404, "", "404 Not Found\n");
    };
    if !matches!(request.method, Method::Get | Method::Head) {
        return Answer::text(
            405,
            "Allow: GET, HEAD\r\n",
            "405 Method Not Allowed: this path answers GET and HEAD\n",
        );
    }
    match route {
        Route::Health => Answer::text(200, "", "ok\n"),
        Route::Workers => {
            let body = WorkersBody {
                intake: shared.intake,
                workers: shared.stats.report(),
                listen_queue: procfs::listen_queue_drops(),
            };
            match serde_json::to_vec(&body) {
                Ok(mut json) => {
                    json.push(b'\n');
                    Answer {
                        status: 200,
                        content_type: "application/json",
                        extra_headers: "",
                        body: json,
                    }
                }
                Err(error) => {
                    tracing::error!(%error, "admin API: cannot serialise /api/workers");
                    Answer::text(500, "", "500 Internal Server Error\n")
                }
            }
        }
    }
}

/// True when the request has exactly one Authorization field, `Bearer <token>` with the right
/// token. The scheme name is case-insensitive (RFC 9110 §11.1); the token is not.
fn presents_token(request: &Request, token: &str) -> bool {
    let mut fields = request
        .headers
        .iter()
        .filter(|header| header.name.eq_ignore_ascii_case("authorization"));
    let (Some(field), None) = (fields.next(), fields.next()) else {
        return false;
    };
    let value = field.value.trim_ascii();
    let Some(space) = value.iter().position(|&b| b == b' ') else {
        return false;
    };
    let (scheme, credentials) = value.split_at(space);
    scheme.eq_ignore_ascii_case(b"Bearer")
        && equal_in_constant_time(token.as_bytes(), credentials.trim_ascii())
}

/// Compares without stopping at the first difference, so the time taken reveals nothing about
/// how much of a guess was right: it depends only on the length of the secret.
fn equal_in_constant_time(secret: &[u8], guess: &[u8]) -> bool {
    let mut difference = secret.len() ^ guess.len();
    for (i, &byte) in secret.iter().enumerate() {
        difference |= usize::from(byte ^ guess.get(i).copied().unwrap_or(0));
    }
    // black_box: keep the optimiser from turning the loop back into an early exit.
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn shared(token: Option<&str>) -> Shared {
        let stats = Stats::new(2);
        stats.counters[1].accepted.store(7, Ordering::Relaxed);
        Shared {
            token: token.map(str::to_string),
            intake: "balanced",
            stats,
        }
    }

    /// The bytes written for `request` and whether the connection stays open.
    fn exchange(shared: &Shared, request: &str) -> (String, Option<bool>) {
        let mut buffer = Buffer::new();
        let mut source = request.as_bytes();
        read_everything(&mut buffer, &mut source);
        let mut out = Vec::new();
        let keep_open = match answer_buffered(&mut buffer, shared, &mut out) {
            Some(Exchange::Answered { keep_open }) => Some(keep_open),
            Some(Exchange::Refused) => None,
            Some(Exchange::Closed) | None => panic!("no answer to {request:?}"),
        };
        (String::from_utf8(out).unwrap(), keep_open)
    }

    fn read_everything(buffer: &mut Buffer, source: &mut &[u8]) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(async { while buffer.read_from(source, 64, MAX_HEAD).await.unwrap() > 0 {} });
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
    fn constant_time_comparison_is_still_a_comparison() {
        assert!(equal_in_constant_time(b"secret", b"secret"));
        assert!(!equal_in_constant_time(b"secret", b"secreT"));
        assert!(!equal_in_constant_time(b"secret", b"secret2"));
        assert!(!equal_in_constant_time(b"secret", b"secre"));
        assert!(!equal_in_constant_time(b"secret", b""));
    }

    #[test]
    fn workers_are_reported_as_json() {
        let shared = shared(None);
        let (response, keep_open) = exchange(
            &shared,
            "GET /api/workers?pretty HTTP/1.1\r\nHost: a\r\n\r\n",
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
                let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\n{authorization}\r\n");
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
            "GET /healthz HTTP/1.1\r\nHost: a\r\nauthorization: bearer  s3cret \r\n\r\n",
        );
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.ends_with("\r\n\r\nok\n"), "{response}");
    }

    #[test]
    fn unknown_paths_other_methods_and_bodies() {
        let shared = shared(None);
        let (response, _) = exchange(&shared, "GET /api/nothing HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(
            response.starts_with("HTTP/1.1 404 Not Found\r\n"),
            "{response}"
        );

        let (response, keep_open) = exchange(
            &shared,
            "POST /api/workers HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}",
        );
        assert!(response.starts_with("HTTP/1.1 405 "), "{response}");
        assert!(response.contains("Allow: GET, HEAD\r\n"), "{response}");
        // A body the admin API does not read: answer, then close.
        assert!(response.contains("Connection: close\r\n"), "{response}");
        assert_eq!(keep_open, Some(false));

        let (response, _) = exchange(&shared, "HEAD /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(response.contains("Content-Length: 3\r\n"), "{response}");
        assert!(response.ends_with("\r\n\r\n"), "{response}");
    }

    #[test]
    fn persistence_follows_the_client() {
        let shared = shared(None);
        let (response, keep_open) = exchange(
            &shared,
            "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
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
            "GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
            "x".repeat(MAX_HEAD)
        );
        let (response, keep_open) = exchange(&shared, &huge);
        assert_eq!(keep_open, None);
        assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
    }
}
