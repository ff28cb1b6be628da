//! One HTTP/2 connection to a server, as state without I/O: the streams herdsman opened on it
//! (each one exchange's request), the frames waiting to go out, both directions' flow-control
//! windows and the server's SETTINGS. `mod.rs`'s task moves the bytes; `stream.rs` writes the
//! requests and reads the responses through it. The server's frames are checked as RFC 9113
//! says a client must: a connection error ends in GOAWAY with its code and fails every stream; a
//! stream error resets that stream alone.
//!
//! Response bytes are written for the exchange as HTTP/1.1 (`response.rs`): a stream's `input`
//! holds its head, its DATA in the framing the head announced, and its trailers. The window a
//! stream's DATA took is given back once the exchange has read it, so that a server can have no
//! more in herdsman's memory than the windows herdsman announced.
//!
//! Here: the state and what the streams do through it (open, send, read, close); `receive.rs`:
//! the server's frames.

use std::collections::HashMap;
use std::io;
use std::task::Waker;

use tokio::time::Instant;

mod receive;

use super::response::ResponseFraming;
use crate::http2::frame::{self, code, setting, ConnError};
use crate::http2::hpack::Decoder;

/// Bytes waiting to be written before a stream writing a body waits for the task to send them.
pub const MAX_OUT: usize = 256 * 1024;

/// The largest frame herdsman takes (SETTINGS_MAX_FRAME_SIZE's default, which it keeps).
pub const MAX_FRAME: usize = frame::MIN_MAX_FRAME_SIZE as usize;

/// The largest response head or trailers (with their CONTINUATIONs) a server may send: past it
/// the connection ends (ENHANCE_YOUR_CALM): it is a flood, not a response.
const MAX_FIELD_BLOCK: usize = 256 * 1024;

/// The highest stream identifier (2^31 − 1).
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// How a stream failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed {
    /// The server certainly did not process the request (refused, or beyond the last stream a
    /// GOAWAY named, or never opened): it may go again elsewhere whatever its method.
    pub unprocessed: bool,
    pub kind: io::ErrorKind,
}

impl Failed {
    const UNPROCESSED: Failed = Failed {
        unprocessed: true,
        kind: io::ErrorKind::ConnectionReset,
    };
    const RESET: Failed = Failed {
        unprocessed: false,
        kind: io::ErrorKind::ConnectionReset,
    };
}

/// Where a stream's response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No final head yet.
    AwaitingHead,
    /// DATA comes, in `framing`; `left`: the bytes `content-length` still promises.
    Body {
        framing: ResponseFraming,
        left: Option<u64>,
    },
    /// The server ended the stream.
    Done,
}

/// One stream's state.
#[derive(Debug)]
pub struct StreamState {
    /// What the server's window lets herdsman send on it.
    pub send_window: i64,
    /// What herdsman's window still lets the server send on it.
    recv_window: i64,
    /// DATA bytes in `input` the exchange has not read through yet.
    data_unread: u32,
    /// Window read by the exchange and not yet given back.
    recv_unacked: u32,
    pub phase: Phase,
    /// The response's HTTP/1.1 bytes for the exchange, from `at`.
    pub input: Vec<u8>,
    pub at: usize,
    /// herdsman sent END_STREAM (or need send nothing more).
    pub sent_end: bool,
    pub failed: Option<Failed>,
    /// A HEAD request: its response has no body.
    head_request: bool,
    /// The exchange's task, waiting to read or to write.
    pub waker: Option<Waker>,
}

impl StreamState {
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Nothing more moves either way.
    pub fn is_finished(&self) -> bool {
        self.failed.is_some() || (self.phase == Phase::Done && self.sent_end)
    }
}

/// A field block still coming in CONTINUATION frames.
#[derive(Debug)]
struct Continuation {
    stream: u32,
    block: Vec<u8>,
    end_stream: bool,
}

/// The windows herdsman announces and the connection's life.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    pub stream_window: u32,
    pub connection_window: u32,
    /// Without a stream for this long, the connection closes.
    pub idle: std::time::Duration,
}

/// One connection's state.
#[derive(Debug)]
pub struct State {
    /// Frames to write.
    pub out: Vec<u8>,
    decoder: Decoder,
    scratch: Vec<u8>,
    pub streams: HashMap<u32, StreamState, foldhash::fast::RandomState>,
    next_id: u32,
    /// Streams counted open by the exchange (a stream is counted before its head is sent).
    pub open: u32,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (assumed until its SETTINGS come).
    pub limit: u32,
    peer_initial_window: i64,
    peer_max_frame: usize,
    /// What the server's connection window lets herdsman send.
    pub send_window: i64,
    /// What herdsman's connection window still lets the server send.
    recv_window: i64,
    recv_unacked: u32,
    settings: ConnectionSettings,
    continuation: Option<Continuation>,
    /// GOAWAY came (or was sent): no new stream.
    pub closing: bool,
    /// The connection ended: how its streams failed.
    pub ended: Option<Failed>,
    /// The server's first frame (its SETTINGS) came.
    greeted: bool,
    /// The connection's task, woken when there is something to write.
    pub driver: Option<Waker>,
    /// Streams waiting for room in `out` or in the connection's window.
    pub blocked: Vec<Waker>,
    pub quiet_since: Instant,
}

impl State {
    /// A new connection: its preface, SETTINGS and connection window already in `out`.
    pub fn new(settings: ConnectionSettings, assumed_limit: u32) -> State {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(frame::PREFACE);
        frame::put_settings(
            &mut out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, settings.stream_window),
            ],
        );
        let extra = settings
            .connection_window
            .saturating_sub(frame::DEFAULT_WINDOW);
        if extra > 0 {
            frame::put_window_update(&mut out, 0, extra);
        }
        State {
            out,
            decoder: Decoder::new(4096),
            scratch: Vec::new(),
            streams: HashMap::default(),
            next_id: 1,
            open: 0,
            limit: assumed_limit,
            peer_initial_window: i64::from(frame::DEFAULT_WINDOW),
            peer_max_frame: MAX_FRAME,
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(settings.connection_window.max(frame::DEFAULT_WINDOW)),
            recv_unacked: 0,
            settings,
            continuation: None,
            closing: false,
            ended: None,
            greeted: false,
            driver: None,
            blocked: Vec::new(),
            quiet_since: Instant::now(),
        }
    }

    pub fn wake_driver(&mut self) {
        if let Some(driver) = &self.driver {
            driver.wake_by_ref();
        }
    }

    /// Whether a new stream may open now.
    pub fn takes_a_stream(&self) -> bool {
        !self.closing && self.ended.is_none() && self.open < self.limit
    }

    /// Opens a stream with the request head `block` (END_STREAM when `ends`): its identifier.
    pub fn open_stream(
        &mut self,
        block: &[u8],
        ends: bool,
        head_request: bool,
    ) -> Result<u32, Failed> {
        if let Some(failed) = self.ended {
            return Err(Failed {
                unprocessed: true,
                ..failed
            });
        }
        if self.closing || self.next_id > MAX_STREAM_ID {
            self.closing = true;
            return Err(Failed::UNPROCESSED);
        }
        let id = self.next_id;
        self.next_id += 2;
        self.streams.insert(
            id,
            StreamState {
                send_window: self.peer_initial_window,
                recv_window: i64::from(self.settings.stream_window),
                data_unread: 0,
                recv_unacked: 0,
                phase: Phase::AwaitingHead,
                input: Vec::new(),
                at: 0,
                sent_end: ends,
                failed: None,
                head_request,
                waker: None,
            },
        );
        self.put_field_block(id, block, ends);
        Ok(id)
    }

    fn put_field_block(&mut self, id: u32, block: &[u8], end_stream: bool) {
        let start = self.out.len();
        self.out.extend_from_slice(block);
        frame::frame_field_block(&mut self.out, start, id, end_stream, self.peer_max_frame);
        self.wake_driver();
    }

    /// How many body bytes stream `id` may send now: its window and the connection's, and the
    /// room in `out`.
    pub fn room(&self, id: u32) -> usize {
        let Some(stream) = self.streams.get(&id) else {
            return 0;
        };
        let window = stream.send_window.min(self.send_window).max(0) as usize;
        window.min(MAX_OUT.saturating_sub(self.out.len()))
    }

    /// Sends `data` (no more than `room`) on stream `id`, with END_STREAM when `last`.
    pub fn send_data(&mut self, id: u32, data: &[u8], last: bool) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        if stream.sent_end {
            return;
        }
        stream.send_window -= data.len() as i64;
        stream.sent_end = last;
        self.send_window -= data.len() as i64;
        frame::put_data(&mut self.out, id, data, last, self.peer_max_frame);
        self.wake_driver();
    }

    /// Sends the request's trailers (`block`), ending the stream.
    pub fn send_trailers(&mut self, id: u32, block: &[u8]) {
        match self.streams.get_mut(&id) {
            Some(stream) if !stream.sent_end => stream.sent_end = true,
            _ => return,
        }
        self.put_field_block(id, block, true);
    }

    /// The exchange read `n` bytes of stream `id`'s response: the window its DATA took is given
    /// back once its input is read through (WINDOW_UPDATE when half a window is owed).
    pub fn consumed(&mut self, id: u32) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        if stream.at < stream.input.len() {
            return;
        }
        stream.input.clear();
        stream.at = 0;
        let returned = std::mem::take(&mut stream.data_unread);
        if returned == 0 {
            return;
        }
        if stream.phase != Phase::Done && stream.failed.is_none() {
            stream.recv_unacked += returned;
            if stream.recv_unacked >= self.settings.stream_window / 2 {
                let increment = std::mem::take(&mut stream.recv_unacked);
                stream.recv_window += i64::from(increment);
                frame::put_window_update(&mut self.out, id, increment);
                self.wake_driver();
            }
        }
        self.connection_window_back(returned);
    }

    fn connection_window_back(&mut self, bytes: u32) {
        self.recv_unacked += bytes;
        let target = self.settings.connection_window.max(frame::DEFAULT_WINDOW);
        if self.recv_unacked >= target / 2 {
            let increment = std::mem::take(&mut self.recv_unacked);
            self.recv_window += i64::from(increment);
            frame::put_window_update(&mut self.out, 0, increment);
            self.wake_driver();
        }
    }

    /// Stream `id` is dropped by the exchange: reset (CANCEL) unless finished, and forgotten.
    pub fn close_stream(&mut self, id: u32) {
        let Some(stream) = self.streams.remove(&id) else {
            return;
        };
        if !stream.is_finished() && self.ended.is_none() {
            frame::put_reset(&mut self.out, id, code::CANCEL);
            self.wake_driver();
        }
        // What it held of the connection's window is given back.
        self.connection_window_back(stream.data_unread);
    }

    /// A stream error: RST_STREAM with `code`, the stream failed.
    fn reset_stream(&mut self, id: u32, error: u32) {
        frame::put_reset(&mut self.out, id, error);
        if let Some(stream) = self.streams.get_mut(&id) {
            stream.failed = Some(Failed::RESET);
            stream.wake();
        }
    }

    /// The connection ended (`failed` says how for its streams): every stream not finished
    /// fails, and every waiting task is woken.
    pub fn end(&mut self, failed: Failed) {
        self.closing = true;
        if self.ended.is_none() {
            self.ended = Some(failed);
        }
        for stream in self.streams.values_mut() {
            if stream.phase != Phase::Done && stream.failed.is_none() {
                stream.failed = Some(failed);
            }
            stream.wake();
        }
        self.wake_blocked();
    }

    /// A connection error herdsman found: GOAWAY with its code, and the end.
    pub fn connection_error(&mut self, error: ConnError) {
        self.go_away(error.code, Failed::RESET);
    }

    /// Quiet, and closing: GOAWAY says so before the close (§6.8). A stream still counted open
    /// (none should be) fails as never processed.
    pub fn close_quietly(&mut self) {
        self.go_away(
            code::NO_ERROR,
            Failed {
                unprocessed: true,
                kind: io::ErrorKind::ConnectionAborted,
            },
        );
    }

    fn go_away(&mut self, error: u32, failed: Failed) {
        // herdsman accepts no stream from a server: the last it processed is 0.
        frame::put_goaway(&mut self.out, 0, error);
        self.end(failed);
    }

    pub fn wake_blocked(&mut self) {
        for waker in self.blocked.drain(..) {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests;
