//! An HTTP/2 client connection (RFC 9113), over TLS (ALPN `h2`) or cleartext with prior
//! knowledge (h2c), spoken by herdsman's own code: `connection` keeps the protocol's state
//! without I/O, `stream` is a stream as the exchange's `Downstream`, and this module is the
//! connection's task — it moves the bytes (all the frames of a turn in one write), spawns a task
//! per stream (one request through the same exchange as HTTP/1.1), closes a connection idle for
//! `client_idle`, stops in two GOAWAY steps (RFC 9113 §6.8) letting the streams in flight
//! finish, and parks a quiet connection like an HTTP/1.1 one: its socket goes to the worker's
//! lot with its state (settings, windows, the client's HPACK table), its buffers freed.

mod budget;
mod connection;
mod stream;

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::http1::Method;
use crate::http2::frame::{self, code};
use crate::http2::request_head::BodyFraming;
use crate::http2::response::ResponseReader;
use crate::proxy::{serve_one, Client, ProxyContext};
use crate::stats::http2::Http2Counters;
use crate::transport::deadline::timeout_at;
use crate::transport::recycle::Recycled;
use crate::transport::{Buffer, Detached, Moment, Stream, TlsFacts};
// Public for the fuzz target h2_frames, which feeds the state arbitrary frames.
pub use crate::http2::frame::ConnError;
pub use connection::{Connection, Opened, Step};
use stream::{H2Stream, RequestBody, ResponseSide, StreamRef};

pub use frame::PREFACE;

/// After a stop's first GOAWAY, how long a connection waits for the client's PING ack (its
/// requests already on their way) before its last GOAWAY.
const LAST_CALL: Duration = Duration::from_millis(250);

/// How long the last frames (a GOAWAY) may take to go out before the close.
const LAST_WRITE: Duration = Duration::from_secs(1);

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

/// A quiet HTTP/2 connection's state while its socket waits in the worker's parking lot.
pub struct Parked {
    connection: Box<Connection>,
    /// Its idle timeout passed in the lot: resumed only to send GOAWAY and close.
    expired: bool,
    /// Counts the connection as open while it waits (a parked connection is open).
    open: Open,
}

/// Counts an HTTP/2 connection as open in its worker's counters until dropped: parked or
/// served, closed in the lot or by its task.
struct Open(Rc<ProxyContext>);

impl Open {
    fn new(context: &Rc<ProxyContext>) -> Open {
        context.counters().http2.connection_opened();
        Open(Rc::clone(context))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.counters().http2.connection_closed();
    }
}

impl Parked {
    /// Marks the connection as past its idle timeout.
    pub fn expire(&mut self) {
        self.expired = true;
    }

    /// Bytes the parked state holds (the connection's state and the client's HPACK table).
    pub fn size(&self) -> usize {
        std::mem::size_of::<Connection>() + self.connection.heap_bytes()
    }
}

/// Serves an HTTP/2 connection until the client or a stop ends it, or it parks. `received`: its
/// first bytes, already read (the preface, on a cleartext listener). `resumed`: the state of a
/// parked connection that woke.
pub async fn serve<Q>(
    context: &Rc<ProxyContext>,
    stream: Stream,
    received: Buffer,
    peer: SocketAddr,
    listener: usize,
    resumed: Option<Parked>,
    quiet: Option<Q>,
) where
    Q: FnOnce(Detached, Option<Parked>, Instant),
{
    let snapshot = context.snapshot();
    let limits = snapshot.http2;
    let max_header = limits
        .max_header_list_size
        .unwrap_or_else(|| u32::try_from(snapshot.limits.max_header_bytes).unwrap_or(u32::MAX));
    let handshake_deadline = Moment::now() + snapshot.timeouts.client_header;
    let idle = snapshot.timeouts.client_idle;
    drop(snapshot);
    let counters = &context.counters().http2;
    let fresh = resumed.is_none();
    let expired = resumed.as_ref().is_some_and(|parked| parked.expired);
    let (connection, open) = match resumed {
        Some(parked) => (parked.connection, parked.open),
        None => (
            Box::new(Connection::new(limits, max_header, Instant::now())),
            Open::new(context),
        ),
    };
    let mut task = Task {
        context,
        connection: Rc::new(RefCell::new(*connection)),
        io: Io {
            tls: stream.tls_facts().map(Rc::new),
            stream,
            input: Vec::new(),
            input_at: 0,
            writing: Vec::new(),
            written: 0,
            preface_left: if fresh { PREFACE.len() } else { 0 },
        },
        peer,
        listener,
        counters,
    };
    let mut received = received;
    task.io.input.extend_from_slice(received.data());
    received.consume(received.len());
    received.release_if_empty();
    if expired {
        // Idle past `client_idle` in the lot: one GOAWAY naming the last stream, and the close.
        {
            let mut connection = task.connection.borrow_mut();
            let last = connection.last_stream();
            connection.send_goaway(last, code::NO_ERROR);
        }
        counters.goaway_sent(code::NO_ERROR);
        task.flush_last().await;
        return;
    }
    let ended = task.run(idle, handshake_deadline, quiet.is_some()).await;
    if let (Ended::Quiet(deadline), Some(quiet)) = (ended, quiet) {
        let Task { connection, io, .. } = task;
        // The stream tasks have all ended: the state is the task's alone again.
        if let Ok(connection) = Rc::try_unwrap(connection) {
            let mut connection = connection.into_inner();
            connection.shrink();
            connection.driver = None;
            if let Ok(detached) = io.stream.detach() {
                let parked = Parked {
                    connection: Box::new(connection),
                    expired: false,
                    open,
                };
                quiet(detached, Some(parked), deadline.to_instant());
            }
        }
    }
}

/// The connection's socket and its bytes.
struct Io {
    stream: Stream,
    tls: Option<Rc<TlsFacts>>,
    /// Bytes read and not yet made into frames (`input[input_at..]`).
    input: Vec<u8>,
    input_at: usize,
    /// Frames being written (taken from the connection's `out` whole), and how much of them is.
    writing: Vec<u8>,
    written: usize,
    /// Bytes of the client's preface still to read.
    preface_left: usize,
}

/// What the connection's task does after a turn.
enum Next {
    Go,
    /// Begin a graceful close (the connection's last request came).
    BeginGoaway,
    /// Write what is queued, then close.
    Close,
}

/// How the connection's task ended.
enum Ended {
    Closed,
    /// Quiet: to be parked until this deadline (its idle timeout).
    Quiet(Moment),
}

/// What ended a turn of the connection's I/O.
enum Turn {
    /// The task must look again at what it decides on (`Connection::notice`).
    Notice,
    /// The client closed, or the connection failed.
    Gone,
    /// The client broke the protocol (or spent a budget).
    Error(ConnError),
}

struct Task<'a> {
    context: &'a Rc<ProxyContext>,
    connection: Rc<RefCell<Connection>>,
    io: Io,
    peer: SocketAddr,
    listener: usize,
    counters: &'a Http2Counters,
}

impl Task<'_> {
    /// Runs the connection until it ends, or is quiet long enough to park (`parks`).
    async fn run(&mut self, idle: Duration, first_frames_by: Moment, parks: bool) -> Ended {
        let mut stopping = false;
        // After a stop's first GOAWAY: when to send the last one even without the PING's ack.
        let mut last_call: Option<Moment> = None;
        let mut quiet_since = Moment::now();
        let parks = parks && idle > super::PARK_AFTER;
        let max_requests = self
            .connection
            .borrow()
            .limits()
            .max_requests_per_connection;
        loop {
            let is_quiet = self.connection.borrow().is_quiet();
            let quiet_now = is_quiet && self.io.is_idle();
            let deadline = match (stopping, last_call) {
                (_, Some(at)) => at,
                (true, None) => Moment::now() + idle,
                (false, None) if !quiet_now => Moment::now() + idle,
                (false, None) if self.io.preface_left > 0 => first_frames_by,
                (false, None) if parks => quiet_since + super::PARK_AFTER,
                (false, None) => quiet_since + idle,
            };
            let context = self.context;
            let stop = tokio::select! {
                turn = poll_fn(|cx| self.poll_turn(cx)) => match turn {
                    Turn::Notice => false,
                    Turn::Gone => break,
                    Turn::Error(error) => {
                        self.end_with(error).await;
                        break;
                    }
                },
                () = context.stopped(), if !stopping => true,
                () = crate::transport::deadline::sleep_until(deadline) => false,
            };
            if stop {
                stopping = true;
                last_call = Some(self.begin_goaway());
            }
            let now = Moment::now();
            let next = {
                let mut connection = self.connection.borrow_mut();
                if connection.open_streams() > 0 || !connection.is_quiet() {
                    quiet_since = now;
                }
                if !stopping && connection.requests >= max_requests {
                    // The last request this connection may make: served, and the client told to
                    // go on on a new connection, as with HTTP/1.1's keep-alive limit.
                    Next::BeginGoaway
                } else {
                    if let Some(at) = last_call {
                        if connection.ping_acked || at <= now {
                            // The second step: the real last stream.
                            let last = connection.last_stream();
                            connection.send_goaway(last, code::NO_ERROR);
                            self.counters.goaway_sent(code::NO_ERROR);
                            last_call = None;
                        }
                    }
                    let ending = connection.client_gone || (stopping && last_call.is_none());
                    let quiet = !stopping && connection.is_quiet() && self.io.is_idle();
                    if ending && connection.open_streams() == 0 {
                        // Nothing in flight is left: the last frames go out, then the close.
                        Next::Close
                    } else if self.io.preface_left > 0 && now >= first_frames_by {
                        Next::Close
                    } else if quiet && quiet_since + idle <= now {
                        // Idle: one GOAWAY naming the last stream, and the close.
                        let last = connection.last_stream();
                        connection.send_goaway(last, code::NO_ERROR);
                        self.counters.goaway_sent(code::NO_ERROR);
                        Next::Close
                    } else if quiet
                        && parks
                        && quiet_since + super::PARK_AFTER <= now
                        && self.io.preface_left == 0
                    {
                        return Ended::Quiet(quiet_since + idle);
                    } else {
                        Next::Go
                    }
                }
            };
            match next {
                Next::Go => {}
                Next::BeginGoaway => {
                    stopping = true;
                    last_call = Some(self.begin_goaway());
                }
                Next::Close => {
                    self.flush_last().await;
                    break;
                }
            }
        }
        self.connection.borrow_mut().abandon_all();
        Ended::Closed
    }

    /// The first step of a graceful close.
    fn begin_goaway(&mut self) -> Moment {
        self.connection.borrow_mut().begin_goaway();
        self.counters.goaway_sent(code::NO_ERROR);
        Moment::now() + LAST_CALL
    }

    /// A connection error: GOAWAY with its code, sent before the close.
    async fn end_with(&mut self, error: ConnError) {
        if error.code == code::ENHANCE_YOUR_CALM {
            tracing::warn!(client = %self.peer, reason = error.reason, "HTTP/2 flood: GOAWAY with ENHANCE_YOUR_CALM");
            self.counters.flood();
        } else {
            tracing::info!(client = %self.peer, code = frame::code::name(error.code), reason = error.reason, "HTTP/2 connection error");
        }
        {
            let mut connection = self.connection.borrow_mut();
            let last = connection.last_stream();
            connection.send_goaway(last, error.code);
            connection.abandon_all();
        }
        self.counters.goaway_sent(error.code);
        self.flush_last().await;
    }

    /// Writes what is queued, for at most `LAST_WRITE`, before a close.
    async fn flush_last(&mut self) {
        let deadline = Moment::now() + LAST_WRITE;
        let _ = timeout_at(
            deadline,
            poll_fn(|cx| loop {
                match self.poll_write_out(cx) {
                    Poll::Ready(Ok(true)) => continue,
                    Poll::Ready(Ok(false)) => return Poll::Ready(()),
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }),
        )
        .await;
    }

    /// Writes queued frames: Ready(true) when it wrote something, Ready(false) when nothing is
    /// queued.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let io = &mut self.io;
        if io.writing.is_empty() {
            let mut connection = self.connection.borrow_mut();
            if connection.out.is_empty() {
                return Poll::Ready(Ok(false));
            }
            std::mem::swap(&mut connection.out, &mut io.writing);
            io.written = 0;
        }
        let n = match Pin::new(&mut io.stream).poll_write(cx, &io.writing[io.written..]) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
            Poll::Pending => return Poll::Pending,
        };
        io.written += n;
        if io.written == io.writing.len() {
            let _ = Pin::new(&mut io.stream).poll_flush(cx)?;
            io.writing.clear();
            io.written = 0;
            if io.writing.capacity() > 4 * connection::MAX_OUT {
                io.writing = Vec::new();
            }
            self.connection.borrow_mut().out_drained();
        }
        Poll::Ready(Ok(true))
    }

    /// Moves bytes both ways until nothing more can be done now: Pending then (woken by the
    /// socket or a stream), Ready when the connection must end.
    fn poll_turn(&mut self, cx: &mut Context<'_>) -> Poll<Turn> {
        {
            let mut connection = self.connection.borrow_mut();
            match &connection.driver {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => connection.driver = Some(cx.waker().clone()),
            }
        }
        loop {
            if std::mem::take(&mut self.connection.borrow_mut().notice) {
                return Poll::Ready(Turn::Notice);
            }
            let mut progress = false;
            match self.poll_write_out(cx) {
                Poll::Ready(Ok(wrote)) => progress |= wrote,
                Poll::Ready(Err(_)) => return Poll::Ready(Turn::Gone),
                Poll::Pending => {}
            }
            // A client that does not read what it asks for (PING acks, SETTINGS acks) is not
            // read from until it does.
            let backlog = self.connection.borrow().out.len() + self.io.writing.len();
            if backlog <= 4 * connection::MAX_OUT {
                match self.poll_read_frames(cx) {
                    Poll::Ready(Ok(true)) => progress = true,
                    Poll::Ready(Ok(false)) => return Poll::Ready(Turn::Gone),
                    Poll::Ready(Err(turn)) => return Poll::Ready(turn),
                    Poll::Pending => {}
                }
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// Handles the whole frames held, or else reads what the socket has: Ready(true) when
    /// either did something, Ready(false) at the end of the stream.
    fn poll_read_frames(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, Turn>> {
        if self.handle_frames(Instant::now())? {
            return Poll::Ready(Ok(true));
        }
        let max_frame = self.connection.borrow().max_frame_bytes();
        let io = &mut self.io;
        // Room for a whole frame beside what is held (a partial frame), the rest compacted.
        if io.input_at > 0 {
            io.input.drain(..io.input_at);
            io.input_at = 0;
        }
        let held = io.input.len();
        let want = max_frame.min(held + 16 * 1024).max(held + 4096);
        io.input.reserve(want - held);
        let spare = io.input.spare_capacity_mut();
        let mut buf = ReadBuf::uninit(spare);
        match Pin::new(&mut io.stream).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len();
                if n == 0 {
                    return Poll::Ready(Ok(false));
                }
                // SAFETY: `poll_read` initialised the first `n` bytes of the spare capacity.
                unsafe { io.input.set_len(held + n) };
                Poll::Ready(Ok(true))
            }
            Poll::Ready(Err(_)) => Poll::Ready(Ok(false)),
            Poll::Pending => {
                if io.input.is_empty() && io.input.capacity() > 0 {
                    // Nothing held while the client is quiet.
                    io.input = Vec::new();
                }
                Poll::Pending
            }
        }
    }

    /// Handles the whole frames held (the preface first, on a new connection); true when it
    /// used any bytes.
    fn handle_frames(&mut self, now: Instant) -> Result<bool, Turn> {
        let mut handled = false;
        if self.io.preface_left > 0 {
            let io = &mut self.io;
            let take = io.preface_left.min(io.input.len() - io.input_at);
            let at = PREFACE.len() - io.preface_left;
            if io.input[io.input_at..io.input_at + take] != PREFACE[at..at + take] {
                return Err(Turn::Error(ConnError {
                    code: code::PROTOCOL_ERROR,
                    reason: "a broken connection preface",
                }));
            }
            io.preface_left -= take;
            io.input_at += take;
            if io.preface_left > 0 {
                return Ok(take > 0);
            }
            handled = take > 0;
        }
        loop {
            let step = {
                let mut connection = self.connection.borrow_mut();
                connection.read_frame(&self.io.input[self.io.input_at..], now)
            };
            match step.map_err(Turn::Error)? {
                Step::NeedMore => return Ok(handled),
                Step::Read(n) => self.io.input_at += n,
                Step::Opened(n, opened) => {
                    self.io.input_at += n;
                    self.spawn_stream(opened);
                }
            }
            handled = true;
        }
    }

    /// Serves a stream the client opened, in a task of its own.
    fn spawn_stream(&self, opened: Opened) {
        let connection = self.connection.borrow();
        let head = &connection.head;
        let reader = match opened.framing {
            BodyFraming::Tunnel => ResponseReader::for_tunnel(),
            _ => {
                let method = std::str::from_utf8(head.method()).unwrap_or("");
                ResponseReader::new(Method::named(method))
            }
        };
        let stream_ref = StreamRef {
            connection: Rc::clone(&self.connection),
            slot: opened.slot,
        };
        let response = Rc::new(RefCell::new(ResponseSide::new(stream_ref.clone(), reader)));
        let stream = H2Stream::new(
            self.peer,
            self.io.tls.clone(),
            &head.out,
            opened.id,
            RequestBody::new(stream_ref.clone(), opened.framing),
            Rc::clone(&response),
        );
        drop(connection);
        let context = Rc::clone(self.context);
        let listener = self.listener;
        self.counters.stream_opened();
        // The stream's future (the exchange's within it, some 2 KiB) lives in a recycled block:
        // the task moves only a pointer, and the block is reused from stream to stream.
        tokio::task::spawn_local(Recycled::new(move || async move {
            stream_ref
                .connection
                .borrow_mut()
                .task_started(stream_ref.slot);
            serve_stream(&context, stream, response, &stream_ref, listener).await;
            context.counters().http2.stream_closed();
        }));
    }
}

impl Io {
    /// Nothing read and unhandled, nothing being written.
    fn is_idle(&self) -> bool {
        self.input_at == self.input.len() && self.writing.is_empty()
    }
}

/// One stream served as one exchange, then its response ended (or reset, if the exchange could
/// not finish it).
async fn serve_stream(
    context: &ProxyContext,
    stream: H2Stream,
    response: Rc<RefCell<ResponseSide>>,
    stream_ref: &StreamRef,
    listener: usize,
) {
    let mut client = Client::new(stream);
    let snapshot = context.snapshot();
    // A stream the client resets before its answer began is abandoned where it is — queued,
    // uploading, or waiting for the server, whose connection is then reset (`ServerStream`) so
    // the server stops working on it. Without this, each stream of a rapid reset on streams
    // already taken would still cost a server a whole request. Once the answer began, the
    // exchange itself watches for the reset (`BodySource::closed`). The reset is looked at
    // first: a stream reset in the same read as its HEADERS (a rapid reset, CVE-2023-44487) is
    // never routed, and opens no connection to a server (each did, before: 2.4 ms of herdsman's
    // CPU per attacking connection, 30 server connections opened and dropped).
    let reset_before_answer = poll_fn(|cx| response.borrow_mut().poll_reset_before_head(cx));
    let next = tokio::select! {
        biased;
        () = reset_before_answer => None,
        (next, _) = serve_one(context, &mut client, &snapshot, listener) => Some(next),
    };
    drop(client);
    drop(snapshot);
    let finished = response.borrow_mut().finish();
    let counters = &context.counters().http2;
    let mut connection = stream_ref.connection.borrow_mut();
    if let Some(reset) = connection.reset_by_client(stream_ref.slot) {
        counters.reset_received(reset);
    }
    let error = match next {
        Some(crate::proxy::Next::Reset) => code::CANCEL,
        _ if finished => code::NO_ERROR,
        _ => code::INTERNAL_ERROR,
    };
    if let Some(sent) = connection.task_ended(stream_ref.slot, error) {
        counters.reset_sent(sent);
    }
}
