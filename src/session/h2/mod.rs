//! An HTTP/2 client connection (RFC 9113), over TLS (ALPN `h2`) or cleartext with prior
//! knowledge (h2c): the `h2` crate speaks the protocol, and every stream is one request through
//! the same exchange as HTTP/1.1 (`stream`: the stream as a `Downstream`; `http2::request_head`
//! and `http2::response`: the heads and framing between the two forms), on a task of its own beside the
//! connection's. The connection's task reads and writes the frames of all its streams; a stop
//! sends GOAWAY in two steps (RFC 9113 §6.8) and lets the streams in flight finish.

// Public for the fuzz targets (fuzz/), which feed them arbitrary bytes.
pub mod frames;
mod stream;

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{timeout_at, Instant};

use crate::http1::Method;
use crate::http2::request_head::{write_request_head, BodyFraming};
use crate::http2::response::ResponseReader;
use crate::proxy::{serve_one, Client, Next, ProxyContext};
use crate::transport::{Buffer, Stream, TlsFacts};
use frames::{Budget, FrameWatch};
use stream::{H2Stream, RequestBody, ResponseSide};

/// The connection preface a client speaking HTTP/2 with prior knowledge starts with (§3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Streams herdsman may reset for a client's errors before the connection ends (the same
/// defence against a client that provokes resets).
const MAX_ERROR_RESETS: usize = 1024;

/// After a stop's first GOAWAY, how long a connection with no stream open waits for the client's
/// requests already on their way (as HTTP/1.1's last call) before its last GOAWAY and close.
const LAST_CALL: Duration = Duration::from_millis(250);

/// Bytes a stream may have queued for the client beyond its window.
const MAX_SEND_BUFFER: usize = 64 * 1024;

/// The preface's request line: no HTTP/1.1 client sends it.
const PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// What a cleartext client whose preface is broken gets before the close (§3.4): GOAWAY naming
/// no stream, PROTOCOL_ERROR.
pub const GOAWAY_BROKEN_PREFACE: [u8; 17] = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// Whether `received`, the first bytes of a cleartext connection, start HTTP/2's preface and then
/// differ from it: a client speaking HTTP/2 wrongly, not an HTTP/1.1 request to answer.
pub fn is_broken_preface(received: &[u8]) -> bool {
    received.starts_with(PREFACE_LINE) && !is_preface(received)
}

/// Whether `received`, the first bytes of a cleartext connection, begin (or may yet begin) the
/// HTTP/2 preface.
pub fn is_preface(received: &[u8]) -> bool {
    let n = received.len().min(PREFACE.len());
    n > 0 && received[..n] == PREFACE[..n]
}

/// Serves an HTTP/2 connection until the client or a stop ends it. `received`: its first bytes,
/// already read (the preface, on a cleartext listener).
pub async fn serve(
    context: &Rc<ProxyContext>,
    stream: Stream,
    received: Buffer,
    peer: SocketAddr,
    listener: usize,
) {
    let tls = stream.tls_facts().map(Rc::new);
    let snapshot = context.snapshot();
    let limits = snapshot.http2;
    let max_header = limits
        .max_header_list_size
        .unwrap_or_else(|| u32::try_from(snapshot.limits.max_header_bytes).unwrap_or(u32::MAX));
    let handshake_deadline = Instant::now() + snapshot.timeouts.client_header;
    let idle = snapshot.timeouts.client_idle;
    drop(snapshot);
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_window_size(limits.stream_window)
        .initial_connection_window_size(limits.connection_window)
        .max_header_list_size(max_header)
        .max_frame_size(limits.max_frame_size)
        .header_table_size(limits.header_table_size)
        .max_pending_accept_reset_streams(limits.max_pending_resets as usize)
        .max_local_error_reset_streams(Some(MAX_ERROR_RESETS))
        .max_send_buffer_size(MAX_SEND_BUFFER)
        // RFC 8441: WebSockets over HTTP/2, carried to HTTP/1.1 WebSocket servers.
        .enable_connect_protocol();
    let budget = Budget {
        burst: limits.frame_burst,
        per_stream: limits.frames_per_stream,
        per_second: limits.frames_per_second,
        reset_burst: limits.reset_burst,
        resets_per_second: limits.resets_per_second,
    };
    // The frames are counted from the start: the preface is not read here yet, whatever of it
    // came with the first bytes.
    let calm = Rc::new(Notify::new());
    let breach = Rc::new(Cell::new(None));
    let io = Prefixed {
        received,
        stream,
        watch: FrameWatch::new(budget, PREFACE.len(), Instant::now()),
        calm: Rc::clone(&calm),
        breach: Rc::clone(&breach),
    };
    let mut connection =
        match timeout_at(handshake_deadline, builder.handshake::<_, Bytes>(io)).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                tracing::debug!(client = %peer, %error, "HTTP/2 connection preface refused");
                return;
            }
            Err(_) => return,
        };
    let counters = &context.counters().http2;
    counters.connection_opened();
    let _open = OnDrop(|| counters.connection_closed());
    // Streams being served, and when the last one ended: a connection without streams for
    // `client_idle` is closed, as an idle HTTP/1.1 one is.
    let streams = Rc::new(Streams {
        open: Cell::new(0),
        quiet_since: Cell::new(Instant::now()),
    });
    let mut stopping = false;
    let mut calmed = false;
    // Streams accepted, against `max_requests_per_connection`.
    let mut requests = 0u32;
    // After a stop's first GOAWAY: when to look whether the connection can close.
    let mut last_call: Option<Instant> = None;
    loop {
        let idle_check = match streams.open.get() {
            0 => streams.quiet_since.get() + idle,
            _ => Instant::now() + idle,
        };
        let accepted = tokio::select! {
            accepted = connection.accept() => accepted,
            () = calm.notified(), if !calmed => {
                if let Some(code) = breach.get() {
                    // A frame that broke the protocol by its header (frames.rs).
                    tracing::debug!(client = %peer, code, "HTTP/2 connection error");
                    connection.abrupt_shutdown(h2::Reason::from(code));
                    counters.goaway_sent(code);
                    calmed = true;
                    stopping = true;
                    continue;
                }
                // The client spent its budget of frames that ask nothing (frames.rs).
                tracing::warn!(client = %peer, "HTTP/2 flood: GOAWAY with ENHANCE_YOUR_CALM");
                connection.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                counters.flood();
                counters.goaway_sent(h2::Reason::ENHANCE_YOUR_CALM.into());
                calmed = true;
                stopping = true;
                continue;
            }
            () = context.stopped(), if !stopping => {
                last_call = Some(close_gracefully(&mut connection, counters));
                stopping = true;
                continue;
            }
            () = sleep_until_some(last_call) => {
                // The second step waits for the client's PING ack; a client that sent nothing
                // since the first GOAWAY and has no stream open gets the last one now.
                if streams.open.get() == 0 {
                    connection.abrupt_shutdown(h2::Reason::NO_ERROR);
                    counters.goaway_sent(h2::Reason::NO_ERROR.into());
                    last_call = None;
                } else {
                    last_call = Some(Instant::now() + LAST_CALL);
                }
                continue;
            }
            () = tokio::time::sleep_until(idle_check), if !stopping => {
                if streams.open.get() == 0 && streams.quiet_since.get() + idle <= Instant::now() {
                    // No stream in flight to spare: one GOAWAY naming the last stream, and the
                    // close (the graceful two steps would wait for a quiet client's PING ack).
                    connection.abrupt_shutdown(h2::Reason::NO_ERROR);
                    counters.goaway_sent(h2::Reason::NO_ERROR.into());
                    stopping = true;
                }
                continue;
            }
        };
        match accepted {
            Some(Ok((request, respond))) => {
                requests += 1;
                if requests == limits.max_requests_per_connection && !stopping {
                    // The last request this connection may make: served, and the client told
                    // to go on on a new connection, as with HTTP/1.1's keep-alive limit.
                    last_call = Some(close_gracefully(&mut connection, counters));
                    stopping = true;
                }
                let context = Rc::clone(context);
                let tls = tls.clone();
                let streams = Rc::clone(&streams);
                streams.open.set(streams.open.get() + 1);
                counters.stream_opened();
                tokio::task::spawn_local(async move {
                    serve_stream(&context, request, respond, peer, tls, listener).await;
                    context.counters().http2.stream_closed();
                    streams.open.set(streams.open.get() - 1);
                    streams.quiet_since.set(Instant::now());
                });
            }
            Some(Err(error)) => {
                // A breach of the protocol the h2 crate answered with GOAWAY.
                if error.is_go_away() && !error.is_remote() {
                    let code = error.reason().unwrap_or(h2::Reason::PROTOCOL_ERROR);
                    counters.goaway_sent(code.into());
                    if code == h2::Reason::ENHANCE_YOUR_CALM {
                        // The crate's own flood limits: a CONTINUATION flood, a header list
                        // decoded four times larger than allowed (an HPACK bomb), streams reset
                        // faster than they are taken (`max_pending_resets`), too many streams
                        // reset for the client's errors.
                        tracing::warn!(client = %peer, %error, "HTTP/2 flood: GOAWAY with ENHANCE_YOUR_CALM");
                        counters.flood();
                    } else {
                        tracing::info!(client = %peer, %error, "HTTP/2 connection ended by a protocol error");
                    }
                    break;
                }
                tracing::debug!(client = %peer, %error, "HTTP/2 connection ended");
                break;
            }
            None => break,
        }
    }
}

/// Begins a graceful close (a stop's, or the last request a connection may make): GOAWAY with
/// the last stream id at 2^31-1, then, a round trip later, the real one (the h2 crate's two
/// steps); the streams in flight finish. Returns when to look whether a quiet client can be
/// given the last GOAWAY without waiting for its PING ack.
fn close_gracefully(
    connection: &mut h2::server::Connection<Prefixed, Bytes>,
    counters: &crate::stats::http2::Http2Counters,
) -> Instant {
    connection.graceful_shutdown();
    counters.goaway_sent(h2::Reason::NO_ERROR.into());
    Instant::now() + LAST_CALL
}

/// Completes at `deadline`; never without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The streams of one connection being served, for its idle timeout.
struct Streams {
    open: Cell<usize>,
    quiet_since: Cell<Instant>,
}

/// One stream: its head checked and written in HTTP/1.1 form, served as one exchange, then its
/// response ended (or reset, if the exchange could not finish it).
async fn serve_stream(
    context: &ProxyContext,
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    peer: SocketAddr,
    tls: Option<Rc<TlsFacts>>,
    listener: usize,
) {
    let (head, body) = request.into_parts();
    let mut head_bytes = Vec::new();
    let framing = match write_request_head(&head, body.is_end_stream(), &mut head_bytes) {
        Ok(framing) => framing,
        Err(problem) => {
            // Malformed (RFC 9113 §8.1.1): a stream error, as the h2 crate's own refusals are.
            tracing::debug!(client = %peer, %problem, "HTTP/2 request malformed");
            respond.send_reset(h2::Reason::PROTOCOL_ERROR);
            context
                .counters()
                .http2
                .reset_sent(h2::Reason::PROTOCOL_ERROR.into());
            return;
        }
    };
    let reader = match framing {
        BodyFraming::Tunnel => ResponseReader::for_tunnel(),
        _ => ResponseReader::new(Method::named(head.method.as_str())),
    };
    let response = Rc::new(RefCell::new(ResponseSide::new(respond, reader)));
    let stream = H2Stream::new(
        peer,
        tls,
        &head_bytes,
        RequestBody::new(body, framing),
        Rc::clone(&response),
    );
    let mut client = Client::new(stream);
    let snapshot = context.snapshot();
    // A stream the client resets before its answer began is abandoned where it is — queued,
    // uploading, or waiting for the server, whose connection is then reset (`ServerStream`) so
    // the server stops working on it. Without this, each stream of a rapid reset on streams
    // already taken would still cost a server a whole request. Once the answer began, the
    // exchange itself watches for the reset (`BodySource::closed`).
    let reset_before_answer = poll_fn(|cx| response.borrow_mut().poll_reset_before_head(cx));
    let next = tokio::select! {
        biased;
        (next, _) = serve_one(context, &mut client, &snapshot, listener) => Some(next),
        () = reset_before_answer => None,
    };
    drop(client);
    let counters = &context.counters().http2;
    let mut response = response.borrow_mut();
    if let Some(reset) = response.reset_by_client() {
        counters.reset_received(reset.into());
    } else if let Some(next) = next {
        let reason = match next {
            Next::Reset => h2::Reason::CANCEL,
            Next::KeepAlive | Next::Close { .. } => h2::Reason::INTERNAL_ERROR,
        };
        if let Some(sent) = response.finish(reason) {
            counters.reset_sent(sent.into());
        }
    }
}

/// Runs a closure when dropped: the end of a count, on every way out.
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// The connection's stream with the bytes already read from it in front, its frames counted as
/// they pass (`frames.rs`): once the client spent its budget, or sent a frame that breaks the
/// protocol by its header (kept from the crate, its error code put in `breach`), nothing more is
/// read from it, and `calm` wakes the connection's task to send GOAWAY.
struct Prefixed {
    received: Buffer,
    stream: Stream,
    watch: FrameWatch,
    calm: Rc<Notify>,
    breach: Rc<Cell<Option<u32>>>,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.watch.spent() || this.watch.breach().is_some() {
            // Nothing more from this client: the connection's task sends GOAWAY and closes.
            return Poll::Pending;
        }
        let before = out.filled().len();
        if !this.received.is_empty() {
            let take = this.received.len().min(out.remaining());
            out.put_slice(&this.received.data()[..take]);
            this.received.consume(take);
            this.received.release_if_empty();
        } else {
            ready!(Pin::new(&mut this.stream).poll_read(cx, out))?;
        }
        let spent = this.watch.saw(&out.filled()[before..], Instant::now());
        if let Some(breach) = this.watch.breach() {
            out.set_filled(before + breach.before);
            this.breach.set(Some(breach.code));
            this.calm.notify_one();
            if breach.before == 0 {
                // No bytes is not the end of the stream: the connection's task ends it.
                return Poll::Pending;
            }
        } else if spent {
            this.calm.notify_one();
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
