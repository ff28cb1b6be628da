//! One admin connection: accepted (within `MAX_CONNECTIONS` at once), its requests read whole
//! (head and body, within limits and time), each answered by `routes`, and closed when the
//! client asks, errs or goes quiet. A request that would change something is logged with who
//! made it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::answer::Answer;
use super::routes::{answer, is_stats_page, Shared};
use crate::http1::{self, error_response, Body, HeadError, Method, Request};
use crate::transport::Buffer;

/// A request (head and body) must arrive complete within this long of the previous response (or
/// of the connection opening); an idle keep-alive connection is closed after it too.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that does not read its response for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head; the admin routes need a request line and a few fields.
pub(super) const MAX_HEAD: usize = 16 * 1024;
/// Largest request body (Content-Length); the pool routes' JSON is a few dozen bytes.
pub(super) const MAX_BODY: usize = 64 * 1024;
/// First read buffer size; grows up to a whole head and body.
const INITIAL_READ: usize = 1024;

/// One of the admin API's listeners.
pub(super) enum AdminListener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// Who called: the peer's address, or on the UNIX socket the caller's uid and pid as the kernel
/// gives them (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Peer {
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

pub(super) async fn accept_until_stopped(
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
            // A stop first: once stopped, a connection still waiting in the listen queue is left
            // there, for the successor that shares the socket.
            biased;
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
pub(super) enum Exchange {
    /// A response is in `out`; `keep_open`: another request may follow on the connection.
    Answered { keep_open: bool },
    /// The request was malformed, too large or had a body the API does not read; an error
    /// response is in `out`, then close.
    Refused,
    /// The client closed before sending a whole request.
    Closed,
}

/// What the bytes buffered so far amount to.
pub(super) enum Buffered {
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
pub(super) fn answer_buffered(
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
