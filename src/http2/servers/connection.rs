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

use std::collections::HashMap;
use std::io;
use std::task::Waker;

use tokio::time::Instant;

use super::response::{trailer_field, HeadWriter, Malformed, ResponseFraming};
use crate::http1::chunked::put_size_line;
use crate::http2::frame::{
    self, code, fail, flag, goaway_last_stream, kind, setting, unpadded, ConnError, FrameHeader,
    HEADER_LEN,
};
use crate::http2::hpack::{DecodeError, Decoder};

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

/// What became of a DATA frame's bytes.
enum DataTaken {
    /// In the stream's input.
    Kept,
    /// For a stream herdsman no longer reads.
    Ignored,
    /// A stream error: the stream is reset with this code.
    Refused(u32),
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
        // herdsman accepts no stream from a server: the last it processed is 0.
        frame::put_goaway(&mut self.out, 0, error.code);
        self.end(Failed::RESET);
    }

    pub fn wake_blocked(&mut self) {
        for waker in self.blocked.drain(..) {
            waker.wake();
        }
    }

    /// Reads one frame from the front of `input`: the bytes it took (0: a whole frame is not
    /// there yet).
    pub fn read_frame(&mut self, input: &[u8]) -> Result<usize, ConnError> {
        if input.len() < HEADER_LEN {
            return Ok(0);
        }
        let header = FrameHeader::parse(input);
        let length = header.length as usize;
        if length > MAX_FRAME {
            return fail(
                code::FRAME_SIZE_ERROR,
                "a frame larger than SETTINGS_MAX_FRAME_SIZE",
            );
        }
        if input.len() < HEADER_LEN + length {
            return Ok(0);
        }
        let payload = &input[HEADER_LEN..HEADER_LEN + length];
        if !self.greeted {
            if header.kind != kind::SETTINGS || header.has(flag::ACK) {
                return fail(
                    code::PROTOCOL_ERROR,
                    "the server's first frame is not SETTINGS",
                );
            }
            self.greeted = true;
        }
        if let Some(continuation) = &self.continuation {
            if header.kind != kind::CONTINUATION || header.stream != continuation.stream {
                return fail(code::PROTOCOL_ERROR, "a frame inside a field block");
            }
        }
        match header.kind {
            kind::DATA => self.data(header, payload)?,
            kind::HEADERS => self.headers(header, payload)?,
            kind::PRIORITY if header.stream == 0 => {
                return fail(code::PROTOCOL_ERROR, "PRIORITY on stream 0");
            }
            kind::RST_STREAM => self.rst_stream(header, payload)?,
            kind::SETTINGS => self.settings(header, payload)?,
            kind::PUSH_PROMISE => return fail(code::PROTOCOL_ERROR, "PUSH_PROMISE, push disabled"),
            kind::PING => {
                if header.stream != 0 {
                    return fail(code::PROTOCOL_ERROR, "PING on a stream");
                }
                if length != 8 {
                    return fail(code::FRAME_SIZE_ERROR, "PING not 8 bytes long");
                }
                if !header.has(flag::ACK) {
                    let mut data = [0; 8];
                    data.copy_from_slice(payload);
                    frame::put_ping(&mut self.out, true, data);
                    self.wake_driver();
                }
            }
            kind::GOAWAY => self.goaway(header, payload)?,
            kind::WINDOW_UPDATE => self.window_update(header, payload)?,
            kind::CONTINUATION => self.continuation(header, payload)?,
            // Unknown frame types are ignored (§4.1).
            _ => {}
        }
        Ok(HEADER_LEN + length)
    }

    /// Whether `id` names a stream herdsman opened (open now or since closed).
    fn opened(&self, id: u32) -> bool {
        id % 2 == 1 && id < self.next_id
    }

    fn data(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnError> {
        if header.stream == 0 {
            return fail(code::PROTOCOL_ERROR, "DATA on stream 0");
        }
        let data = unpadded(header, payload)?;
        let length = payload.len() as u32;
        self.recv_window -= i64::from(length);
        if self.recv_window < 0 {
            return fail(
                code::FLOW_CONTROL_ERROR,
                "DATA beyond the connection's window",
            );
        }
        let id = header.stream;
        if !self.opened(id) {
            return fail(code::PROTOCOL_ERROR, "DATA on an idle stream");
        }
        match self.take_data(id, data, length, header.has(flag::END_STREAM)) {
            DataTaken::Kept => {}
            DataTaken::Ignored => self.connection_window_back(length),
            DataTaken::Refused(error) => {
                self.connection_window_back(length);
                self.reset_stream(id, error);
            }
        }
        Ok(())
    }

    /// Stream `id`'s share of a DATA frame: `data` (its padding stripped) of a frame of `length`
    /// bytes.
    fn take_data(&mut self, id: u32, data: &[u8], length: u32, end_stream: bool) -> DataTaken {
        // A stream herdsman forgot (reset, or abandoned): its window comes back at once.
        let Some(stream) = self.streams.get_mut(&id) else {
            return DataTaken::Ignored;
        };
        if stream.failed.is_some() {
            return DataTaken::Ignored;
        }
        let Phase::Body { framing, left } = &mut stream.phase else {
            // Before the head, or after the stream ended.
            return DataTaken::Refused(match stream.phase {
                Phase::Done => code::STREAM_CLOSED,
                _ => code::PROTOCOL_ERROR,
            });
        };
        stream.recv_window -= i64::from(length);
        if stream.recv_window < 0 {
            return DataTaken::Refused(code::FLOW_CONTROL_ERROR);
        }
        let framing = *framing;
        if let Some(left) = left {
            match left.checked_sub(data.len() as u64) {
                // Longer than its content-length, or shorter at its end: malformed (§8.1.1).
                None => return DataTaken::Refused(code::PROTOCOL_ERROR),
                Some(rest) if rest > 0 && end_stream => {
                    return DataTaken::Refused(code::PROTOCOL_ERROR)
                }
                Some(rest) => *left = rest,
            }
        }
        // The padding's share of the windows comes back with the data's, once read through.
        stream.data_unread += length;
        if !data.is_empty() {
            match framing {
                ResponseFraming::Chunked => {
                    put_size_line(&mut stream.input, data.len());
                    stream.input.extend_from_slice(data);
                    stream.input.extend_from_slice(b"\r\n");
                }
                ResponseFraming::Length => stream.input.extend_from_slice(data),
                // A body where none may be (a HEAD's, a 204's, a 304's): dropped.
                ResponseFraming::None => {}
            }
        }
        if end_stream {
            if framing == ResponseFraming::Chunked {
                stream.input.extend_from_slice(b"0\r\n\r\n");
            }
            stream.phase = Phase::Done;
        }
        stream.wake();
        if stream.at >= stream.input.len() {
            // Nothing for the exchange to read (a body dropped, or only padding).
            self.consumed(id);
        }
        DataTaken::Kept
    }

    fn headers(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnError> {
        let id = header.stream;
        if id == 0 {
            return fail(code::PROTOCOL_ERROR, "HEADERS on stream 0");
        }
        if !self.opened(id) {
            return fail(
                code::PROTOCOL_ERROR,
                "HEADERS on a stream herdsman did not open",
            );
        }
        let mut block = unpadded(header, payload)?;
        if header.has(flag::PRIORITY) {
            if block.len() < 5 {
                return fail(code::FRAME_SIZE_ERROR, "HEADERS too short for its priority");
            }
            block = &block[5..];
        }
        let end_stream = header.has(flag::END_STREAM);
        if header.has(flag::END_HEADERS) {
            return self.field_block(id, block, end_stream);
        }
        self.continuation = Some(Continuation {
            stream: id,
            block: block.to_vec(),
            end_stream,
        });
        Ok(())
    }

    fn continuation(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnError> {
        let Some(continuation) = &mut self.continuation else {
            return fail(code::PROTOCOL_ERROR, "CONTINUATION without HEADERS");
        };
        if continuation.block.len() + payload.len() > MAX_FIELD_BLOCK {
            return fail(code::ENHANCE_YOUR_CALM, "a field block without end");
        }
        continuation.block.extend_from_slice(payload);
        if !header.has(flag::END_HEADERS) {
            return Ok(());
        }
        let Some(whole) = self.continuation.take() else {
            return Ok(());
        };
        self.field_block(whole.stream, &whole.block, whole.end_stream)
    }

    /// A whole field block on stream `id`: the response's head, or its trailers.
    fn field_block(&mut self, id: u32, block: &[u8], end_stream: bool) -> Result<(), ConnError> {
        let decoder = &mut self.decoder;
        let scratch = &mut self.scratch;
        let Some(stream) = self.streams.get_mut(&id) else {
            // A stream herdsman forgot: the block is still decoded, for the table's sake (§4.3).
            return decoder
                .decode(block, scratch, |_, _| Ok::<(), Malformed>(()))
                .or_else(compression_only);
        };
        if stream.failed.is_some() {
            return decoder
                .decode(block, scratch, |_, _| Ok::<(), Malformed>(()))
                .or_else(compression_only);
        }
        let malformed = match stream.phase {
            Phase::AwaitingHead => {
                let mut head = HeadWriter::new(&mut stream.input);
                let decoded = decoder.decode(block, scratch, |name, value| head.field(name, value));
                match decoded {
                    Err(DecodeError::Compression(_)) => {
                        return fail(code::COMPRESSION_ERROR, "a response head's HPACK");
                    }
                    Err(DecodeError::Field(_)) => true,
                    Ok(()) => match head.finish(end_stream, stream.head_request) {
                        Err(_) => true,
                        Ok(head) if head.is_interim() => false,
                        Ok(head) => {
                            stream.phase = match end_stream {
                                true => Phase::Done,
                                false => Phase::Body {
                                    framing: head.framing,
                                    left: head.length,
                                },
                            };
                            stream.wake();
                            false
                        }
                    },
                }
            }
            Phase::Body { framing, left } => {
                // Trailers: they end the stream, and only the chunked coding has room for them.
                let start = stream.input.len();
                let chunked = framing == ResponseFraming::Chunked;
                if chunked {
                    stream.input.extend_from_slice(b"0\r\n");
                }
                let input = &mut stream.input;
                let decoded = decoder.decode(block, scratch, |name, value| {
                    if chunked {
                        trailer_field(input, name, value)
                    } else {
                        trailer_field(&mut Vec::new(), name, value)
                    }
                });
                match decoded {
                    Err(DecodeError::Compression(_)) => {
                        return fail(code::COMPRESSION_ERROR, "a response trailers' HPACK");
                    }
                    Err(DecodeError::Field(_)) => true,
                    Ok(()) if !end_stream || left.is_some_and(|left| left > 0) => {
                        stream.input.truncate(start);
                        true
                    }
                    Ok(()) => {
                        if chunked {
                            stream.input.extend_from_slice(b"\r\n");
                        }
                        stream.phase = Phase::Done;
                        stream.wake();
                        false
                    }
                }
            }
            Phase::Done => {
                return decoder
                    .decode(block, scratch, |_, _| Ok::<(), Malformed>(()))
                    .or_else(compression_only)
                    .map(|()| self.reset_stream(id, code::STREAM_CLOSED));
            }
        };
        if malformed {
            self.reset_stream(id, code::PROTOCOL_ERROR);
        }
        Ok(())
    }

    fn rst_stream(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnError> {
        if header.stream == 0 {
            return fail(code::PROTOCOL_ERROR, "RST_STREAM on stream 0");
        }
        if payload.len() != 4 {
            return fail(code::FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes long");
        }
        if !self.opened(header.stream) {
            return fail(code::PROTOCOL_ERROR, "RST_STREAM on an idle stream");
        }
        let error = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        let Some(stream) = self.streams.get_mut(&header.stream) else {
            return Ok(());
        };
        if stream.phase == Phase::Done && error == code::NO_ERROR {
            // The whole response came: the server wants no more of the request (§8.1).
            stream.sent_end = true;
        } else if stream.failed.is_none() {
            stream.failed = Some(if error == code::REFUSED_STREAM {
                Failed::UNPROCESSED
            } else {
                Failed::RESET
            });
        }
        stream.wake();
        Ok(())
    }

    fn settings(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnError> {
        if header.stream != 0 {
            return fail(code::PROTOCOL_ERROR, "SETTINGS on a stream");
        }
        if header.has(flag::ACK) {
            if !payload.is_empty() {
                return fail(code::FRAME_SIZE_ERROR, "a SETTINGS ack with a payload");
            }
            return Ok(());
        }
        if !payload.len().is_multiple_of(6) {
            return fail(code::FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes");
        }
        for pair in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([pair[0], pair[1]]);
            let value = u32::from_be_bytes([pair[2], pair[3], pair[4], pair[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return fail(code::PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH above 1");
                }
                setting::MAX_CONCURRENT_STREAMS => self.limit = value,
                setting::INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > frame::MAX_WINDOW {
                        return fail(code::FLOW_CONTROL_ERROR, "an initial window above 2^31-1");
                    }
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(value);
                    for stream in self.streams.values_mut() {
                        stream.send_window += delta;
                        if stream.send_window > frame::MAX_WINDOW {
                            return fail(code::FLOW_CONTROL_ERROR, "a stream window above 2^31-1");
                        }
                        if delta > 0 {
                            stream.wake();
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::MIN_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&value) {
                        return fail(code::PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range");
                    }
                    // herdsman's frames stay at 16 KiB: larger ones save little and delay others.
                    self.peer_max_frame = MAX_FRAME;
                }
                // The encoder is stateless (no table to size); the rest herdsman need not heed.
                _ => {}
            }
        }
        frame::put_settings_ack(&mut self.out);
        self.wake_driver();
        Ok(())
    }

    fn goaway(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnError> {
        let last = goaway_last_stream(header, payload)?;
        self.closing = true;
        for (&id, stream) in &mut self.streams {
            if id > last && stream.failed.is_none() {
                // Never processed: free to go to another server.
                stream.failed = Some(Failed::UNPROCESSED);
                stream.wake();
            }
        }
        Ok(())
    }

    fn window_update(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnError> {
        if payload.len() != 4 {
            return fail(code::FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes long");
        }
        let increment = i64::from(
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_STREAM_ID,
        );
        if header.stream == 0 {
            if increment == 0 {
                return fail(code::PROTOCOL_ERROR, "a connection WINDOW_UPDATE of 0");
            }
            self.send_window += increment;
            if self.send_window > frame::MAX_WINDOW {
                return fail(code::FLOW_CONTROL_ERROR, "a connection window above 2^31-1");
            }
            self.wake_blocked();
            return Ok(());
        }
        if !self.opened(header.stream) {
            return fail(code::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
        }
        let Some(stream) = self.streams.get_mut(&header.stream) else {
            return Ok(());
        };
        if increment == 0 {
            self.reset_stream(header.stream, code::PROTOCOL_ERROR);
            return Ok(());
        }
        stream.send_window += increment;
        if stream.send_window > frame::MAX_WINDOW {
            self.reset_stream(header.stream, code::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        stream.wake();
        Ok(())
    }
}

/// A field's refusal is nothing to a stream herdsman no longer reads; a compression error ends
/// the connection.
fn compression_only(error: DecodeError<Malformed>) -> Result<(), ConnError> {
    match error {
        DecodeError::Compression(_) => fail(code::COMPRESSION_ERROR, "a field block's HPACK"),
        DecodeError::Field(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::hpack::{encode_field, encode_indexed, encode_status};

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame::put_header(&mut out, payload.len(), kind, flags, stream);
        out.extend_from_slice(payload);
        out
    }

    fn head(status: u16, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        encode_status(&mut block, status);
        for (name, value) in fields {
            encode_field(&mut block, name.as_bytes(), value.as_bytes());
        }
        block
    }

    /// A connection whose server said SETTINGS, with `streams` GETs opened (1, 3, 5, …).
    fn connection(streams: usize) -> State {
        let settings = ConnectionSettings {
            stream_window: 65_535,
            connection_window: 1 << 20,
            idle: std::time::Duration::from_secs(60),
        };
        let mut state = State::new(settings, 100);
        feed(&mut state, &frame(kind::SETTINGS, 0, 0, &[])).unwrap();
        let mut request = Vec::new();
        encode_indexed(&mut request, 2);
        for _ in 0..streams {
            state.open_stream(&request, true, false).unwrap();
        }
        state.out.clear();
        state
    }

    fn feed(state: &mut State, mut bytes: &[u8]) -> Result<(), ConnError> {
        while !bytes.is_empty() {
            let n = state.read_frame(bytes)?;
            assert!(n > 0, "a partial frame");
            bytes = &bytes[n..];
        }
        Ok(())
    }

    fn input(state: &State, id: u32) -> String {
        String::from_utf8_lossy(&state.streams[&id].input).into_owned()
    }

    /// The frames in `out`, as (type, stream, payload).
    fn sent(state: &State) -> Vec<(u8, u32, Vec<u8>)> {
        let (mut frames, mut at) = (Vec::new(), 0);
        while at < state.out.len() {
            let header = FrameHeader::parse(&state.out[at..]);
            let payload = &state.out[at + HEADER_LEN..at + HEADER_LEN + header.length as usize];
            frames.push((header.kind, header.stream, payload.to_vec()));
            at += HEADER_LEN + header.length as usize;
        }
        frames
    }

    #[test]
    fn a_grpc_response_becomes_a_chunked_http1_response_with_its_trailers() {
        let mut state = connection(1);
        let mut bytes = frame(
            kind::HEADERS,
            flag::END_HEADERS,
            1,
            &head(200, &[("content-type", "application/grpc")]),
        );
        bytes.extend(frame(kind::DATA, 0, 1, b"\0\0\0\0\x02hi"));
        bytes.extend(frame(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            1,
            &head_fields(&[("grpc-status", "0")]),
        ));
        feed(&mut state, &bytes).unwrap();
        assert_eq!(
            input(&state, 1),
            "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ntransfer-encoding: chunked\r\n\
             \r\n7\r\n\0\0\0\0\x02hi\r\n0\r\ngrpc-status: 0\r\n\r\n"
        );
        assert_eq!(state.streams[&1].phase, Phase::Done);
    }

    fn head_fields(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        for (name, value) in fields {
            encode_field(&mut block, name.as_bytes(), value.as_bytes());
        }
        block
    }

    #[test]
    fn data_beyond_the_content_length_resets_the_stream_and_never_reaches_the_exchange() {
        let mut state = connection(1);
        let mut bytes = frame(
            kind::HEADERS,
            flag::END_HEADERS,
            1,
            &head(200, &[("content-length", "5")]),
        );
        // The first frame takes the whole length; the second is past it.
        bytes.extend(frame(kind::DATA, 0, 1, b"hello"));
        bytes.extend(frame(kind::DATA, flag::END_STREAM, 1, b"extra"));
        feed(&mut state, &bytes).unwrap();
        assert_eq!(
            input(&state, 1),
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
        );
        assert_eq!(state.streams[&1].failed, Some(Failed::RESET));
        let reset = (
            kind::RST_STREAM,
            1,
            code::PROTOCOL_ERROR.to_be_bytes().to_vec(),
        );
        assert!(sent(&state).contains(&reset), "{:?}", sent(&state));
    }

    #[test]
    fn the_window_the_exchange_read_goes_back_to_the_server() {
        let mut state = connection(1);
        let mut bytes = frame(kind::HEADERS, flag::END_HEADERS, 1, &head(200, &[]));
        bytes.extend(frame(kind::DATA, 0, 1, &[b'x'; 16_384]));
        bytes.extend(frame(kind::DATA, 0, 1, &[b'y'; 16_384]));
        feed(&mut state, &bytes).unwrap();
        assert!(
            sent(&state).is_empty(),
            "nothing read yet, nothing given back"
        );
        let stream = state.streams.get_mut(&1).unwrap();
        stream.at = stream.input.len();
        state.consumed(1);
        let updates: Vec<_> = sent(&state)
            .into_iter()
            .filter(|(kind, _, _)| *kind == kind::WINDOW_UPDATE)
            .map(|(_, stream, payload)| (stream, u32::from_be_bytes(payload.try_into().unwrap())))
            .collect();
        assert_eq!(
            updates,
            [(1, 32_768)],
            "half the stream's window, read (the connection's is 1 MiB)"
        );
        // More than the window announced is a stream error, not memory.
        let too_much = frame(kind::DATA, 0, 1, &[b'z'; 16_384]);
        for _ in 0..4 {
            let _ = feed(&mut state, &too_much);
        }
        assert_eq!(state.streams[&1].failed, Some(Failed::RESET));
    }

    #[test]
    fn a_goaway_or_a_refusal_leaves_the_streams_the_server_never_took_free_to_go_elsewhere() {
        let mut state = connection(3);
        let mut goaway = Vec::new();
        goaway.extend_from_slice(&1u32.to_be_bytes());
        goaway.extend_from_slice(&code::NO_ERROR.to_be_bytes());
        feed(&mut state, &frame(kind::GOAWAY, 0, 0, &goaway)).unwrap();
        assert_eq!(state.streams[&1].failed, None, "stream 1 is still served");
        assert_eq!(state.streams[&3].failed, Some(Failed::UNPROCESSED));
        assert_eq!(state.streams[&5].failed, Some(Failed::UNPROCESSED));
        assert!(!state.takes_a_stream());
        let mut state = connection(2);
        let refused = code::REFUSED_STREAM.to_be_bytes();
        let cancel = code::CANCEL.to_be_bytes();
        feed(&mut state, &frame(kind::RST_STREAM, 0, 1, &refused)).unwrap();
        feed(&mut state, &frame(kind::RST_STREAM, 0, 3, &cancel)).unwrap();
        assert_eq!(state.streams[&1].failed, Some(Failed::UNPROCESSED));
        assert_eq!(state.streams[&3].failed, Some(Failed::RESET));
    }

    #[test]
    fn what_a_server_may_not_send_ends_the_connection_with_the_code_the_rfc_names() {
        let push = frame(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]);
        let idle_headers = frame(kind::HEADERS, flag::END_HEADERS, 9, &head(200, &[]));
        let bad_hpack = frame(kind::HEADERS, flag::END_HEADERS, 1, &[0xff, 0xff, 0xff]);
        let interleaved = [
            frame(kind::HEADERS, 0, 1, &[0x88]),
            frame(kind::PING, 0, 0, &[0; 8]),
        ]
        .concat();
        for (bytes, expected) in [
            (push, code::PROTOCOL_ERROR),
            (idle_headers, code::PROTOCOL_ERROR),
            (bad_hpack, code::COMPRESSION_ERROR),
            (interleaved, code::PROTOCOL_ERROR),
        ] {
            let mut state = connection(1);
            assert_eq!(feed(&mut state, &bytes).map_err(|e| e.code), Err(expected));
        }
        let settings = ConnectionSettings {
            stream_window: 65_535,
            connection_window: 65_535,
            idle: std::time::Duration::from_secs(60),
        };
        let mut state = State::new(settings, 100);
        let first = feed(&mut state, &frame(kind::PING, 0, 0, &[0; 8]));
        assert_eq!(
            first.map_err(|e| e.code),
            Err(code::PROTOCOL_ERROR),
            "SETTINGS first"
        );
    }
}
