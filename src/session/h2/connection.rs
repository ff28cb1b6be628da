//! The protocol state of one HTTP/2 client connection (RFC 9113), without I/O: the frames the
//! client sent go in (`read_frame`, one complete frame at a time), the frames herdsman sends
//! come out in `out`, and each stream's request body, response and flow control are kept here
//! for its exchange (`stream.rs`) to read and write. The connection's task (`mod.rs`) moves the
//! bytes and spawns a task per stream; both reach this state through one `RefCell`, each borrow
//! short and never held across a wait (one worker thread, no lock).
//!
//! Strict where the RFC says MUST: every connection error ends in GOAWAY with the code the RFC
//! names, every stream error in RST_STREAM with its code, and HPACK's table stays in step with
//! the client's even for the streams refused or reset (their field blocks are decoded all the
//! same). Nothing here keeps an encoder table: responses are encoded without indexing
//! (`hpack`), so a quiet connection's state is its settings, windows and the client's table.
//!
//! Here: the state and what the streams do through it (heads, bodies, trailers, windows);
//! `receive.rs`: the client's frames.

use std::io;
use std::task::{Context, Poll, Waker};

use tokio::time::Instant;

mod receive;

use super::budget::{Bucket, Budget};
use crate::config::Http2Limits;
use crate::http2::frame::{self, code, fail, setting, ConnError, HEADER_LEN};
use crate::http2::hpack;
use crate::http2::request_head::{BodyFraming, RequestHead, Trailers};

/// Bytes queued for the client beyond which body bytes wait (control frames never do): what a
/// client that does not read costs at most, beside its flow-control windows.
pub const MAX_OUT: usize = 64 * 1024;

/// Streams herdsman may reset for a client's errors before the connection ends (the same
/// defence against a client that provokes resets).
const MAX_ERROR_RESETS: u32 = 1024;

/// Recently closed streams remembered, to tell a frame on a closed stream from one on an idle
/// stream the client never opened.
const CLOSED_REMEMBERED: usize = 32;

/// What reading one frame made.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// No whole frame yet: read more (at most `HEADER_LEN` + the largest frame are held).
    NeedMore,
    /// A frame of this many bytes was handled.
    Read(usize),
    /// A frame of this many bytes opened a stream, its head in `Connection::head`.
    Opened(usize, Opened),
}

/// A stream the client opened, to be served.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened {
    pub slot: usize,
    pub id: u32,
    pub framing: BodyFraming,
}

/// How a stream's request body ends, once it has.
#[derive(Debug)]
enum RemoteEnd {
    Open,
    /// END_STREAM came; for a chunked body, the chunked ending (with the trailers) to give.
    Ended(Option<Vec<u8>>),
}

/// One stream, from its HEADERS until both sides are done with it and its task has ended.
#[derive(Debug)]
struct StreamState {
    id: u32,
    /// Request body bytes received and not yet read by the exchange (`recv[recv_at..]`).
    recv: Vec<u8>,
    recv_at: usize,
    remote: RemoteEnd,
    /// What the client may still send on the stream (its window as herdsman keeps it).
    recv_window: i64,
    /// Bytes the exchange took since the last WINDOW_UPDATE for the stream.
    recv_unacked: u32,
    /// The `content-length` the body must add up to, and what came so far (§8.1.1).
    expected: Option<u64>,
    received: u64,
    /// The chunked body's end: trailers become its trailer section.
    chunked: bool,
    /// What herdsman may still send on the stream.
    send_window: i64,
    /// Herdsman sent END_STREAM (or a reset).
    local_ended: bool,
    /// Body bytes the exchange handed over beyond the client's windows (its `send` of a head
    /// with the first body bytes), sent as the windows open; and whether the end (with
    /// trailers, encoded, when it has them) follows them.
    pending: Vec<u8>,
    end_queued: bool,
    pending_trailers: Option<Vec<u8>>,
    head_sent: bool,
    /// The stream was reset: by the client (`true`) or by herdsman, with this code.
    reset: Option<(u32, bool)>,
    /// The stream's task has not ended.
    task_live: bool,
    /// Its task has polled once (a reset before that never reached a server).
    task_started: bool,
    /// The stream's task, when it waits for something of this state.
    waker: Option<Waker>,
    /// Its task waits for room in `out`.
    wants_room: bool,
}

/// What the exchange's read of the request body finds.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyEvent {
    /// This many bytes are ready to read.
    Bytes(usize),
    /// The body ended; for a chunked body, the chunked ending follows in `take_ending`.
    Ended,
    /// The stream was reset (by the client, or by herdsman for the client's error).
    Reset,
}

/// A field block whose HEADERS came without END_HEADERS: its CONTINUATION frames follow.
#[derive(Debug)]
struct Block {
    stream: u32,
    /// Its HEADERS ended the stream.
    ends: bool,
    /// Its HEADERS made the stream depend on itself (§5.3.1): decoded, then the stream reset.
    self_dependent: bool,
    bytes: Vec<u8>,
}

/// The settings herdsman announced, and the client's.
#[derive(Debug, Clone, Copy)]
struct PeerSettings {
    initial_window: u32,
    max_frame_size: u32,
}

/// One HTTP/2 client connection's state.
#[derive(Debug)]
pub struct Connection {
    limits: Http2Limits,
    max_header_list: u32,
    peer: PeerSettings,
    /// The client acknowledged herdsman's SETTINGS: its limits hold from then on.
    settings_acked: bool,
    decoder: hpack::Decoder,
    /// The head of the stream being opened (`Step::Opened`), reused from stream to stream.
    pub head: RequestHead,
    trailers: Trailers,
    hpack_scratch: Vec<u8>,
    /// What the client may still send on the connection, and what the exchanges took since the
    /// last connection WINDOW_UPDATE.
    recv_window: i64,
    recv_unacked: u32,
    /// What herdsman may still send on the connection.
    send_window: i64,
    /// The highest stream the client opened.
    last_stream: u32,
    streams: slab::Slab<StreamState>,
    /// Streams closed lately (a ring), and where the next goes.
    closed: [u32; CLOSED_REMEMBERED],
    closed_next: usize,
    /// A field block still coming.
    block: Option<Block>,
    /// The client's first frame is still to come (it must be SETTINGS, §3.4).
    first_frame: bool,
    /// Frames for the client, written by the connection's task.
    pub out: Vec<u8>,
    /// The connection's task, woken when `out` has bytes or a stream ended.
    pub driver: Option<Waker>,
    /// Something the connection's task decides on changed (a stream ended, the client's PING
    /// ack or GOAWAY came): it looks again whether to close, stop or park.
    pub notice: bool,
    /// GOAWAY sent: the last stream it let through.
    goaway_last: Option<u32>,
    /// The client sent GOAWAY: no new stream comes.
    pub client_gone: bool,
    frames: Bucket,
    resets: Bucket,
    per_stream: u32,
    /// Streams opened, against `max_requests_per_connection`.
    pub requests: u32,
    /// Streams the client may yet reset before their task began (`max_pending_resets`, each
    /// second earning `resets_per_second` back): such a stream never reached a server, and only
    /// a flood sends a request and its reset in one breath.
    unserved_resets: Bucket,
    error_resets: u32,
    /// A PING herdsman sent, whose ACK ends a graceful close's first step.
    pub ping_sent: Option<[u8; 8]>,
    pub ping_acked: bool,
    /// Resets the client sent, by code, and that herdsman sent, for the counters.
    pub resets_received: Vec<u32>,
    pub resets_sent: Vec<u32>,
}

impl Connection {
    /// A new connection: herdsman's SETTINGS (and the connection window beyond the default)
    /// already in `out`.
    pub fn new(limits: Http2Limits, max_header_list: u32, now: Instant) -> Connection {
        let budget = Budget {
            burst: limits.frame_burst,
            per_stream: limits.frames_per_stream,
            per_second: limits.frames_per_second,
            reset_burst: limits.reset_burst,
            resets_per_second: limits.resets_per_second,
        };
        let mut out = Vec::with_capacity(64);
        let mut settings = vec![
            (
                setting::MAX_CONCURRENT_STREAMS,
                limits.max_concurrent_streams,
            ),
            (setting::INITIAL_WINDOW_SIZE, limits.stream_window),
            (setting::MAX_FRAME_SIZE, limits.max_frame_size),
            (setting::MAX_HEADER_LIST_SIZE, max_header_list),
            (setting::ENABLE_CONNECT_PROTOCOL, 1),
        ];
        if limits.header_table_size != 4096 {
            settings.push((setting::HEADER_TABLE_SIZE, limits.header_table_size));
        }
        frame::put_settings(&mut out, &settings);
        let extra = i64::from(limits.connection_window) - i64::from(frame::DEFAULT_WINDOW);
        if extra > 0 {
            frame::put_window_update(&mut out, 0, extra as u32);
        }
        Connection {
            limits,
            max_header_list,
            peer: PeerSettings {
                initial_window: frame::DEFAULT_WINDOW,
                max_frame_size: frame::MIN_MAX_FRAME_SIZE,
            },
            settings_acked: false,
            // The protocol's table size until the client acknowledges herdsman's SETTINGS.
            decoder: hpack::Decoder::new(4096),
            head: RequestHead::default(),
            trailers: Trailers::default(),
            hpack_scratch: Vec::new(),
            recv_window: i64::from(limits.connection_window.max(frame::DEFAULT_WINDOW)),
            recv_unacked: 0,
            send_window: i64::from(frame::DEFAULT_WINDOW),
            last_stream: 0,
            streams: slab::Slab::new(),
            closed: [0; CLOSED_REMEMBERED],
            closed_next: 0,
            block: None,
            first_frame: true,
            out,
            driver: None,
            notice: false,
            goaway_last: None,
            client_gone: false,
            frames: Bucket::new(budget.burst, budget.per_second, now),
            resets: Bucket::new(budget.reset_burst, budget.resets_per_second, now),
            per_stream: budget.per_stream,
            requests: 0,
            unserved_resets: Bucket::new(limits.max_pending_resets, budget.resets_per_second, now),
            error_resets: 0,
            ping_sent: None,
            ping_acked: false,
            resets_received: Vec::new(),
            resets_sent: Vec::new(),
        }
    }

    /// The limits the connection was opened with.
    pub fn limits(&self) -> Http2Limits {
        self.limits
    }

    /// Heap bytes the state holds beyond its own size (the client's HPACK table, buffers).
    pub fn heap_bytes(&self) -> usize {
        self.decoder.heap_bytes()
            + self.head.out.capacity()
            + self.hpack_scratch.capacity()
            + self.out.capacity()
            + self.streams.capacity() * std::mem::size_of::<StreamState>()
    }

    /// Streams not yet closed (their tasks included).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The largest frame the client may send, header included: what the read buffer must hold.
    pub fn max_frame_bytes(&self) -> usize {
        HEADER_LEN + self.limits.max_frame_size.max(frame::MIN_MAX_FRAME_SIZE) as usize
    }

    /// Whether nothing is under way: no stream, no field block half read, nothing to send.
    pub fn is_quiet(&self) -> bool {
        self.streams.is_empty() && self.block.is_none() && self.out.is_empty()
    }

    /// Gives back the memory a quiet connection does not need (before it parks).
    pub fn shrink(&mut self) {
        self.head = RequestHead::default();
        self.trailers = Trailers::default();
        self.hpack_scratch = Vec::new();
        self.out = Vec::new();
        self.streams.shrink_to_fit();
        self.resets_received = Vec::new();
        self.resets_sent = Vec::new();
        self.decoder.shrink_to_fit();
    }

    /// The last stream a GOAWAY names now.
    pub fn last_stream(&self) -> u32 {
        self.last_stream
    }

    /// Sends GOAWAY: the first step of a graceful close (`last` = 2^31-1, with a PING whose ACK
    /// tells when the client has seen it), or the last (`last_stream`), or an error's.
    pub fn send_goaway(&mut self, last: u32, error: u32) {
        let last = last.min(self.goaway_last.unwrap_or(u32::MAX));
        frame::put_goaway(&mut self.out, last, error);
        self.goaway_last = Some(last);
        self.wake_driver();
    }

    /// The first step of a graceful close (RFC 9113 §6.8).
    pub fn begin_goaway(&mut self) {
        self.send_goaway((1 << 31) - 1, code::NO_ERROR);
        let payload = *b"herdsman";
        frame::put_ping(&mut self.out, false, payload);
        self.ping_sent = Some(payload);
    }

    pub fn goaway_sent(&self) -> bool {
        self.goaway_last.is_some()
    }

    fn wake_driver(&self) {
        if let Some(waker) = &self.driver {
            waker.wake_by_ref();
        }
    }

    fn remember_closed(&mut self, id: u32) {
        self.closed[self.closed_next] = id;
        self.closed_next = (self.closed_next + 1) % CLOSED_REMEMBERED;
    }

    fn find(&self, id: u32) -> Option<usize> {
        self.streams
            .iter()
            .find(|(_, stream)| stream.id == id)
            .map(|(slot, _)| slot)
    }

    /// Removes a stream both sides and its task are done with.
    fn settle(&mut self, slot: usize) {
        let Some(stream) = self.streams.get(slot) else {
            return;
        };
        let remote_done = matches!(stream.remote, RemoteEnd::Ended(_)) || stream.reset.is_some();
        let local_done = stream.local_ended || stream.reset.is_some();
        if remote_done && local_done && !stream.task_live {
            let stream = self.streams.remove(slot);
            // What the exchange never read goes back to the connection's window.
            let unread = stream.recv.len() - stream.recv_at;
            self.give_back(unread as u32);
            self.remember_closed(stream.id);
            self.notice = true;
            self.wake_driver();
        }
    }

    /// Herdsman resets a stream (a stream error, or an exchange that could not finish).
    fn reset_stream(&mut self, id: u32, error: u32) {
        frame::put_reset(&mut self.out, id, error);
        self.resets_sent.push(error);
        self.wake_driver();
    }

    /// A stream error for the client's fault (§5.4.2): past `MAX_ERROR_RESETS` of them, the
    /// connection's (a client that provokes resets is a flood too).
    fn stream_error(&mut self, id: u32, error: u32) -> Result<(), ConnError> {
        self.reset_stream(id, error);
        self.error_resets += 1;
        if self.error_resets > MAX_ERROR_RESETS {
            return fail(code::ENHANCE_YOUR_CALM, "too many streams in error");
        }
        if let Some(slot) = self.find(id) {
            let stream = &mut self.streams[slot];
            stream.reset = Some((error, false));
            if let Some(waker) = stream.waker.take() {
                waker.wake();
            }
            self.settle(slot);
        } else {
            self.remember_closed(id);
        }
        Ok(())
    }

    /// Connection window the exchanges took (or that a frame never delivered used), given back
    /// in a WINDOW_UPDATE once half the window is used.
    fn give_back(&mut self, bytes: u32) {
        self.recv_unacked += bytes;
        let window = self.limits.connection_window.max(frame::DEFAULT_WINDOW);
        if self.recv_unacked >= window / 2 {
            frame::put_window_update(&mut self.out, 0, self.recv_unacked);
            self.recv_window += i64::from(self.recv_unacked);
            self.recv_unacked = 0;
            self.wake_driver();
        }
    }

    /// Spends one frame of the budget of frames that ask nothing.
    fn spend(&mut self, now: Instant) -> Result<(), ConnError> {
        match self.frames.spend(now) {
            true => Ok(()),
            false => fail(code::ENHANCE_YOUR_CALM, "flood of frames that ask nothing"),
        }
    }

    fn peer_frame_size(&self) -> usize {
        self.peer.max_frame_size as usize
    }

    // The stream's side: what its task reads and writes.

    /// The stream's task has begun.
    pub fn task_started(&mut self, slot: usize) {
        if let Some(stream) = self.streams.get_mut(slot) {
            stream.task_started = true;
        }
    }

    /// The stream's task ended: what it did not finish is reset, and the stream goes once the
    /// client is done with it too.
    pub fn task_ended(&mut self, slot: usize, error: u32) -> Option<u32> {
        let stream = self.streams.get_mut(slot)?;
        stream.task_live = false;
        let mut sent = None;
        if stream.reset.is_none() && !stream.local_ended && !stream.end_queued {
            let id = stream.id;
            stream.reset = Some((error, false));
            self.reset_stream(id, error);
            sent = Some(error);
        } else if stream.reset.is_none() && !matches!(stream.remote, RemoteEnd::Ended(_)) {
            // The response ended before the request body: the client is told to stop sending
            // it (§8.1), with NO_ERROR.
            let id = stream.id;
            stream.reset = Some((code::NO_ERROR, false));
            self.reset_stream(id, code::NO_ERROR);
        }
        self.settle(slot);
        sent
    }

    /// The client's reset of the stream, if one came.
    pub fn reset_by_client(&self, slot: usize) -> Option<u32> {
        match self.streams.get(slot)?.reset {
            Some((code, true)) => Some(code),
            _ => None,
        }
    }

    /// Completes (Ready) when the stream was reset, by either side.
    pub fn poll_reset(&mut self, slot: usize, cx: &mut Context<'_>) -> Poll<()> {
        match self.streams.get_mut(slot) {
            None => Poll::Ready(()),
            Some(stream) if stream.reset.is_some() => Poll::Ready(()),
            Some(stream) => {
                set_waker(&mut stream.waker, cx);
                Poll::Pending
            }
        }
    }

    /// Whether the response's head went.
    pub fn head_sent(&self, slot: usize) -> bool {
        self.streams
            .get(slot)
            .is_some_and(|stream| stream.head_sent)
    }

    /// What the request body has for the exchange now.
    pub fn poll_body(&mut self, slot: usize, cx: &mut Context<'_>) -> Poll<BodyEvent> {
        let Some(stream) = self.streams.get_mut(slot) else {
            return Poll::Ready(BodyEvent::Reset);
        };
        if stream.reset.is_some() {
            return Poll::Ready(BodyEvent::Reset);
        }
        let mut unread = stream.recv.len() - stream.recv_at;
        if matches!(stream.remote, RemoteEnd::Open)
            && stream
                .expected
                .is_some_and(|expected| stream.received >= expected)
        {
            // The last byte of a content-length body waits for END_STREAM: until the client
            // ends the stream, more DATA can still make the request malformed (§8.1.1), and a
            // server must not have answered a request that is then reset as malformed. Clients
            // end the stream with the last DATA frame, so this costs nothing.
            unread = unread.saturating_sub(1);
        }
        if unread > 0 {
            return Poll::Ready(BodyEvent::Bytes(unread));
        }
        if let RemoteEnd::Ended(_) = stream.remote {
            return Poll::Ready(BodyEvent::Ended);
        }
        set_waker(&mut stream.waker, cx);
        Poll::Pending
    }

    /// Copies body bytes into `out` (at most its length); the windows go back as they are read.
    pub fn read_body(&mut self, slot: usize, out: &mut [u8]) -> usize {
        let Some(stream) = self.streams.get_mut(slot) else {
            return 0;
        };
        let unread = &stream.recv[stream.recv_at..];
        let n = unread.len().min(out.len());
        out[..n].copy_from_slice(&unread[..n]);
        stream.recv_at += n;
        if stream.recv_at == stream.recv.len() {
            stream.recv.clear();
            stream.recv_at = 0;
            if stream.recv.capacity() > 64 * 1024 {
                stream.recv = Vec::new();
            }
        }
        stream.recv_unacked += n as u32;
        let window = self.limits.stream_window;
        if stream.recv_unacked >= window / 2 && matches!(stream.remote, RemoteEnd::Open) {
            let id = stream.id;
            let increment = stream.recv_unacked;
            stream.recv_window += i64::from(increment);
            stream.recv_unacked = 0;
            frame::put_window_update(&mut self.out, id, increment);
            self.wake_driver();
        }
        self.give_back(n as u32);
        n
    }

    /// The chunked ending (last chunk and trailers) of a body that ended, once.
    pub fn take_ending(&mut self, slot: usize) -> Option<Vec<u8>> {
        match &mut self.streams.get_mut(slot)?.remote {
            RemoteEnd::Ended(ending) => ending.take(),
            RemoteEnd::Open => None,
        }
    }

    /// Sends the response's head (or an interim one), its fields given by `encode`.
    pub fn send_head(
        &mut self,
        slot: usize,
        interim: bool,
        end: bool,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<()> {
        let frame_size = self.peer_frame_size();
        let stream = self.live_stream(slot)?;
        let id = stream.id;
        if !interim {
            stream.head_sent = true;
        }
        if end {
            stream.local_ended = true;
        }
        let start = self.out.len();
        encode(&mut self.out);
        frame::frame_field_block(&mut self.out, start, id, end, frame_size);
        self.wake_driver();
        Ok(())
    }

    /// The stream, unless it was reset (then the exchange's write fails as on a closed socket).
    fn live_stream(&mut self, slot: usize) -> io::Result<&mut StreamState> {
        match self.streams.get_mut(slot) {
            Some(stream) if stream.reset.is_none() && !stream.local_ended && !stream.end_queued => {
                Ok(stream)
            }
            _ => Err(io::ErrorKind::ConnectionReset.into()),
        }
    }

    /// How many body bytes the stream may send now: the smaller window, and the room in `out`;
    /// Pending (the task woken when that changes) when none.
    pub fn poll_send_room(&mut self, slot: usize, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let connection_window = self.send_window;
        let out_room = MAX_OUT.saturating_sub(self.out.len());
        let stream = match self.live_stream(slot) {
            Ok(stream) => stream,
            Err(error) => return Poll::Ready(Err(error)),
        };
        let room = match stream.pending.is_empty() {
            true => stream
                .send_window
                .min(connection_window)
                .min(out_room as i64),
            false => 0,
        };
        if room > 0 {
            stream.wants_room = false;
            return Poll::Ready(Ok(room as usize));
        }
        stream.wants_room = out_room == 0;
        set_waker(&mut stream.waker, cx);
        Poll::Pending
    }

    /// Sends body bytes, ending the stream when `end`: what the windows allow goes now (all of
    /// it, when `poll_send_room` said so), the rest as they open.
    pub fn send_data(&mut self, slot: usize, data: &[u8], end: bool) -> io::Result<()> {
        let connection_window = self.send_window;
        let stream = self.live_stream(slot)?;
        if end {
            stream.end_queued = true;
        }
        if stream.pending.is_empty() {
            // The usual case: no copy, the bytes go straight into frames.
            let room = stream.send_window.min(connection_window).max(0) as usize;
            let now = room.min(data.len());
            let ends = end && now == data.len();
            if now > 0 || ends {
                self.put_data(slot, &data[..now], ends);
            }
            self.streams[slot].pending.extend_from_slice(&data[now..]);
        } else {
            stream.pending.extend_from_slice(data);
        }
        self.flush_pending(slot);
        Ok(())
    }

    /// Frames `data` on the stream, the windows spent.
    fn put_data(&mut self, slot: usize, data: &[u8], end: bool) {
        let frame_size = self.peer_frame_size();
        let stream = &mut self.streams[slot];
        stream.send_window -= data.len() as i64;
        if end {
            stream.local_ended = true;
        }
        let id = stream.id;
        self.send_window -= data.len() as i64;
        frame::put_data(&mut self.out, id, data, end, frame_size);
        self.wake_driver();
    }

    /// Sends what the windows allow of the stream's pending bytes, then its end when they are
    /// all gone.
    fn flush_pending(&mut self, slot: usize) {
        let connection_window = self.send_window;
        let Some(stream) = self.streams.get_mut(slot) else {
            return;
        };
        if stream.local_ended || stream.reset.is_some() {
            return;
        }
        let mut pending = std::mem::take(&mut stream.pending);
        let room = stream.send_window.min(connection_window).max(0) as usize;
        let now = room.min(pending.len());
        let all = now == pending.len();
        let (end_queued, has_trailers) = (stream.end_queued, stream.pending_trailers.is_some());
        let ends = end_queued && all && !has_trailers;
        if now > 0 || ends {
            self.put_data(slot, &pending[..now], ends);
        }
        pending.drain(..now);
        let stream = &mut self.streams[slot];
        stream.pending = pending;
        if all && end_queued && has_trailers {
            if let Some(block) = stream.pending_trailers.take() {
                let id = stream.id;
                stream.local_ended = true;
                let frame_size = self.peer_frame_size();
                let start = self.out.len();
                self.out.extend_from_slice(&block);
                frame::frame_field_block(&mut self.out, start, id, true, frame_size);
                self.wake_driver();
            }
        }
        if self.streams[slot].local_ended {
            self.settle(slot);
        }
    }

    /// Sends what the windows allow of every stream's pending bytes (a window grew).
    fn flush_all_pending(&mut self) {
        let waiting = self
            .streams
            .iter()
            .filter(|(_, stream)| {
                !stream.local_ended && stream.end_queued || !stream.pending.is_empty()
            })
            .map(|(slot, _)| slot);
        // Few streams wait at once; their slots are copied out so each can be flushed.
        let slots: Vec<usize> = waiting.collect();
        for slot in slots {
            self.flush_pending(slot);
        }
    }

    /// Sends the trailers, which end the stream (after the pending bytes, if any).
    pub fn send_trailers(
        &mut self,
        slot: usize,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<()> {
        let stream = self.live_stream(slot)?;
        if stream.pending.is_empty() {
            self.send_head(slot, false, true, encode)?;
            self.settle(slot);
            return Ok(());
        }
        let mut block = Vec::new();
        encode(&mut block);
        stream.pending_trailers = Some(block);
        stream.end_queued = true;
        self.flush_pending(slot);
        Ok(())
    }

    /// `out` was written: streams that waited for room in it may go on.
    pub fn out_drained(&mut self) {
        // A connection with nothing left to do may now park or close.
        if self.streams.is_empty() && self.out.is_empty() {
            self.notice = true;
        }
        for (_, stream) in self.streams.iter_mut() {
            if stream.wants_room {
                stream.wants_room = false;
                if let Some(waker) = stream.waker.take() {
                    waker.wake();
                }
            }
        }
    }

    /// Ends every stream: the connection is going (its tasks see a reset).
    pub fn abandon_all(&mut self) {
        for (_, stream) in self.streams.iter_mut() {
            if stream.reset.is_none() {
                stream.reset = Some((code::CANCEL, false));
            }
            if let Some(waker) = stream.waker.take() {
                waker.wake();
            }
        }
    }
}

fn set_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}
