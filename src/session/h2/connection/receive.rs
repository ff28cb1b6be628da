//! The client's frames, read into a connection's state (RFC 9113 as a server must check them):
//! HEADERS and CONTINUATION opening streams (their blocks decoded even for a stream refused, so
//! the HPACK table stays the client's), DATA into its stream's body, SETTINGS, PING, GOAWAY,
//! RST_STREAM, PRIORITY and WINDOW_UPDATE applied, each flood counted against its budget. A
//! connection error comes back as `ConnError`; a stream error resets its stream here.

use tokio::time::Instant;

use super::{Block, Connection, Opened, RemoteEnd, Step, StreamState};
use crate::http2::frame::{
    self, code, fail, flag, goaway_last_stream, kind, setting, unpadded, ConnError, FrameHeader,
    HEADER_LEN,
};
use crate::http2::hpack::{self, DecodeError};
use crate::http2::request_head::BodyFraming;

impl Connection {
    /// Reads one frame from the front of `input`, if a whole one is there.
    pub fn read_frame(&mut self, input: &[u8], now: Instant) -> Result<Step, ConnError> {
        if input.len() < HEADER_LEN {
            return Ok(Step::NeedMore);
        }
        let header = FrameHeader::parse(input);
        if header.length > self.limits.max_frame_size.max(frame::MIN_MAX_FRAME_SIZE) {
            return fail(
                code::FRAME_SIZE_ERROR,
                "a frame larger than SETTINGS_MAX_FRAME_SIZE",
            );
        }
        let size = HEADER_LEN + header.length as usize;
        if input.len() < size {
            return Ok(Step::NeedMore);
        }
        let payload = &input[HEADER_LEN..size];
        if std::mem::take(&mut self.first_frame)
            && (header.kind != kind::SETTINGS || header.has(flag::ACK))
        {
            return fail(code::PROTOCOL_ERROR, "the first frame is not SETTINGS");
        }
        if let Some(block) = &self.block {
            if header.kind != kind::CONTINUATION || header.stream != block.stream {
                return fail(code::PROTOCOL_ERROR, "a field block interrupted");
            }
        }
        let opened = match header.kind {
            kind::DATA => self.data(header, payload, now).map(|()| None),
            kind::HEADERS => self.headers(header, payload),
            kind::PRIORITY => self.priority(header, payload, now).map(|()| None),
            kind::RST_STREAM => self.rst_stream(header, payload, now).map(|()| None),
            kind::SETTINGS => self.settings(header, payload, now).map(|()| None),
            kind::PUSH_PROMISE => fail(code::PROTOCOL_ERROR, "PUSH_PROMISE from a client"),
            kind::PING => self.ping(header, payload, now).map(|()| None),
            kind::GOAWAY => self.goaway(header, payload).map(|()| None),
            kind::WINDOW_UPDATE => self.window_update(header, payload, now).map(|()| None),
            kind::CONTINUATION => self.continuation(header, payload, now),
            // §5.5: unknown types are ignored, but cost a read.
            _ => self.spend(now).map(|()| None),
        }?;
        Ok(match opened {
            Some(opened) => Step::Opened(size, opened),
            None => Step::Read(size),
        })
    }

    /// Whether a stream the client names is idle: never opened (§5.1).
    fn is_idle(&self, id: u32) -> bool {
        id > self.last_stream
    }

    fn data(&mut self, header: FrameHeader, payload: &[u8], now: Instant) -> Result<(), ConnError> {
        let id = header.stream;
        if id == 0 {
            return fail(code::PROTOCOL_ERROR, "DATA on stream 0");
        }
        if self.is_idle(id) {
            return fail(code::PROTOCOL_ERROR, "DATA on an idle stream");
        }
        let length = payload.len() as i64;
        // Flow control counts the whole payload, padding included (§6.9.1).
        self.recv_window -= length;
        if self.recv_window < 0 {
            return fail(
                code::FLOW_CONTROL_ERROR,
                "DATA beyond the connection's window",
            );
        }
        let data = unpadded(header, payload)?;
        if data.is_empty() && !header.has(flag::END_STREAM) {
            self.spend(now)?;
        }
        let Some(slot) = self.find(id) else {
            // Closed: the bytes go back to the window at once.
            self.give_back(payload.len() as u32);
            return self.stream_error(id, code::STREAM_CLOSED);
        };
        let stream = &mut self.streams[slot];
        if let Some((_, by_client)) = stream.reset {
            // After herdsman's reset, DATA already on its way is dropped (§5.1, closed); after
            // the client's own, it is an error.
            self.give_back(payload.len() as u32);
            return match by_client {
                true => self.stream_error(id, code::STREAM_CLOSED),
                false => Ok(()),
            };
        }
        if matches!(stream.remote, RemoteEnd::Ended(_)) {
            self.give_back(payload.len() as u32);
            return self.stream_error(id, code::STREAM_CLOSED);
        }
        stream.recv_window -= length;
        if stream.recv_window < 0 {
            self.give_back(payload.len() as u32);
            return self.stream_error(id, code::FLOW_CONTROL_ERROR);
        }
        stream.received += data.len() as u64;
        let ends = header.has(flag::END_STREAM);
        let length_wrong = stream.expected.is_some_and(|expected| {
            stream.received > expected || (ends && stream.received != expected)
        });
        if length_wrong {
            // §8.1.1: DATA that does not add up to content-length is malformed.
            self.give_back(payload.len() as u32);
            return self.stream_error(id, code::PROTOCOL_ERROR);
        }
        if stream.recv_at == stream.recv.len() {
            stream.recv.clear();
            stream.recv_at = 0;
        }
        stream.recv.extend_from_slice(data);
        let padding = payload.len() - data.len();
        if ends {
            stream.remote = RemoteEnd::Ended(stream.chunked.then(|| b"0\r\n\r\n".to_vec()));
        }
        if let Some(waker) = stream.waker.take() {
            waker.wake();
        }
        if padding > 0 {
            self.give_back(padding as u32);
        }
        Ok(())
    }

    fn headers(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
    ) -> Result<Option<Opened>, ConnError> {
        let id = header.stream;
        if id == 0 {
            return fail(code::PROTOCOL_ERROR, "HEADERS on stream 0");
        }
        let mut block = unpadded(header, payload)?;
        let mut self_dependent = false;
        if header.has(flag::PRIORITY) {
            if block.len() < 5 {
                return fail(code::FRAME_SIZE_ERROR, "HEADERS too short for its priority");
            }
            let depends =
                u32::from_be_bytes([block[0], block[1], block[2], block[3]]) & 0x7fff_ffff;
            block = &block[5..];
            self_dependent = depends == id;
        }
        let ends = header.has(flag::END_STREAM);
        if !header.has(flag::END_HEADERS) {
            let mut bytes = Vec::with_capacity(block.len() * 2);
            bytes.extend_from_slice(block);
            self.block = Some(Block {
                stream: id,
                ends,
                self_dependent,
                bytes,
            });
            return Ok(None);
        }
        self.field_block(id, ends, self_dependent, block)
    }

    fn continuation(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
        now: Instant,
    ) -> Result<Option<Opened>, ConnError> {
        let Some(mut block) = self.block.take() else {
            return fail(code::PROTOCOL_ERROR, "CONTINUATION without HEADERS");
        };
        if payload.is_empty() && !header.has(flag::END_HEADERS) {
            self.spend(now)?;
        }
        block.bytes.extend_from_slice(payload);
        // A block that never ends (CVE-2024-27316's family) is ended before it costs more than
        // two header lists' worth: past one it can only decode to a list over the limit (an
        // encoder uses Huffman only where it is shorter), which is 431 at best. (Four, before,
        // cost herdsman 900,000 instructions per attacking connection, most in copies.)
        if block.bytes.len() > 2 * self.max_header_list.max(16_384) as usize {
            return fail(code::ENHANCE_YOUR_CALM, "a field block that does not end");
        }
        if !header.has(flag::END_HEADERS) {
            self.block = Some(block);
            return Ok(None);
        }
        self.field_block(block.stream, block.ends, block.self_dependent, &block.bytes)
    }

    /// Decodes a block whose fields go nowhere: HPACK's table must see them all the same.
    fn decode_discarded(&mut self, block: &[u8]) -> Result<(), ConnError> {
        let limit = u64::from(self.max_header_list);
        decode_block(
            &mut self.decoder,
            &mut self.hpack_scratch,
            block,
            limit,
            |_, _| {},
        )
        .map(|_| ())
    }

    /// A whole field block for stream `id`: a new request, a trailer section, or one for a
    /// stream that is gone.
    fn field_block(
        &mut self,
        id: u32,
        ends: bool,
        self_dependent: bool,
        block: &[u8],
    ) -> Result<Option<Opened>, ConnError> {
        if self_dependent {
            // §5.3.1: a stream cannot depend on itself.
            self.decode_discarded(block)?;
            self.last_stream = self.last_stream.max(id);
            return self.stream_error(id, code::PROTOCOL_ERROR).map(|()| None);
        }
        if id.is_multiple_of(2) {
            return fail(
                code::PROTOCOL_ERROR,
                "a client opened an even-numbered stream",
            );
        }
        if !self.is_idle(id) {
            return self.trailer_block(id, ends, block).map(|()| None);
        }
        self.last_stream = id;
        self.frames.earn(self.per_stream);
        // Decoded whatever happens next: the table must stay whole.
        let limit = u64::from(self.max_header_list);
        let head = &mut self.head;
        head.begin();
        let size = decode_block(
            &mut self.decoder,
            &mut self.hpack_scratch,
            block,
            limit,
            |name, value| head.field(name, value),
        )?;
        if self.goaway_last.is_some_and(|last| id > last) || self.client_gone {
            // After GOAWAY, new streams are ignored (§6.8).
            self.remember_closed(id);
            return Ok(None);
        }
        if self.streams.len() >= self.limits.max_concurrent_streams as usize {
            self.reset_stream(id, code::REFUSED_STREAM);
            self.remember_closed(id);
            return Ok(None);
        }
        self.requests += 1;
        if size > limit {
            // Too large to serve, small enough to answer: 431, as for HTTP/1.1.
            let start = self.out.len();
            hpack::encode_status(&mut self.out, 431);
            let frame_size = self.peer_frame_size();
            frame::frame_field_block(&mut self.out, start, id, true, frame_size);
            if !ends {
                self.reset_stream(id, code::NO_ERROR);
            }
            self.remember_closed(id);
            self.wake_driver();
            return Ok(None);
        }
        let framing = match self.head.finish(ends) {
            Ok(framing) => framing,
            Err(problem) => {
                tracing::debug!(stream = id, %problem, "HTTP/2 request malformed");
                self.stream_error(id, code::PROTOCOL_ERROR)?;
                return Ok(None);
            }
        };
        let stream = StreamState {
            id,
            recv: Vec::new(),
            recv_at: 0,
            remote: match ends {
                true => RemoteEnd::Ended(None),
                false => RemoteEnd::Open,
            },
            recv_window: self.stream_recv_window(),
            recv_unacked: 0,
            expected: match framing {
                BodyFraming::Length(length) => Some(length),
                _ => self.head.content_length(),
            },
            received: 0,
            chunked: framing == BodyFraming::Chunked,
            send_window: i64::from(self.peer.initial_window),
            local_ended: false,
            pending: Vec::new(),
            end_queued: false,
            pending_trailers: None,
            head_sent: false,
            reset: None,
            task_live: true,
            task_started: false,
            waker: None,
            wants_room: false,
        };
        if ends && stream.expected.is_some_and(|expected| expected > 0) {
            // §8.1.1: a content-length the (absent) body does not match.
            self.stream_error(id, code::PROTOCOL_ERROR)?;
            return Ok(None);
        }
        let slot = self.streams.insert(stream);
        Ok(Some(Opened { slot, id, framing }))
    }

    /// The window a new stream starts with: herdsman's setting, or the protocol's default while
    /// the client may not have read it yet.
    fn stream_recv_window(&self) -> i64 {
        let window = self.limits.stream_window;
        i64::from(match self.settings_acked {
            true => window,
            false => window.max(frame::DEFAULT_WINDOW),
        })
    }

    /// A second field block on an open stream: its trailers (§8.1), which must end it.
    fn trailer_block(&mut self, id: u32, ends: bool, block: &[u8]) -> Result<(), ConnError> {
        let trailers = &mut self.trailers;
        trailers.begin();
        let limit = u64::from(self.max_header_list);
        let size = decode_block(
            &mut self.decoder,
            &mut self.hpack_scratch,
            block,
            limit,
            |name, value| trailers.field(name, value),
        )?;
        let Some(slot) = self.find(id) else {
            // §5.1.1: a stream herdsman does not know as closed was never opened (a skipped
            // identifier): a new stream's identifier must be above every earlier one.
            if !self.closed.contains(&id) {
                return fail(
                    code::PROTOCOL_ERROR,
                    "HEADERS on a stream below the last one",
                );
            }
            // §5.1, closed: the stream ended both ways; HEADERS cannot belong to it.
            return fail(code::STREAM_CLOSED, "HEADERS on a closed stream");
        };
        let stream = &self.streams[slot];
        if let Some((_, by_client)) = stream.reset {
            return match by_client {
                true => self.stream_error(id, code::STREAM_CLOSED),
                false => Ok(()),
            };
        }
        if matches!(stream.remote, RemoteEnd::Ended(_)) {
            return self.stream_error(id, code::STREAM_CLOSED);
        }
        if !ends {
            // §8.1: a HEADERS frame after the first that does not end the stream is malformed.
            return self.stream_error(id, code::PROTOCOL_ERROR);
        }
        if size > limit {
            // Too large to pass on, and too late for a 431: the request is reset.
            tracing::debug!(
                stream = id,
                size,
                "HTTP/2 trailers over max_header_list_size"
            );
            return self.stream_error(id, code::PROTOCOL_ERROR);
        }
        let ending = match self.trailers.finish() {
            Ok(ending) => ending.to_vec(),
            Err(_) => return self.stream_error(id, code::PROTOCOL_ERROR),
        };
        let stream = &mut self.streams[slot];
        if stream
            .expected
            .is_some_and(|expected| stream.received != expected)
        {
            return self.stream_error(id, code::PROTOCOL_ERROR);
        }
        // Trailers reach an HTTP/1.1 server only in a chunked body; otherwise they end it.
        stream.remote = RemoteEnd::Ended(stream.chunked.then_some(ending));
        if let Some(waker) = stream.waker.take() {
            waker.wake();
        }
        Ok(())
    }

    fn priority(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
        now: Instant,
    ) -> Result<(), ConnError> {
        if header.stream == 0 {
            return fail(code::PROTOCOL_ERROR, "PRIORITY on stream 0");
        }
        if payload.len() != 5 {
            // §6.3: a stream error; the frame changes nothing else.
            self.spend(now)?;
            return self.stream_error(header.stream, code::FRAME_SIZE_ERROR);
        }
        self.spend(now)?;
        let depends =
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
        if depends == header.stream {
            return self.stream_error(header.stream, code::PROTOCOL_ERROR);
        }
        Ok(())
    }

    fn rst_stream(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
        now: Instant,
    ) -> Result<(), ConnError> {
        let id = header.stream;
        if id == 0 {
            return fail(code::PROTOCOL_ERROR, "RST_STREAM on stream 0");
        }
        if payload.len() != 4 {
            return fail(
                code::FRAME_SIZE_ERROR,
                "RST_STREAM of a length other than 4",
            );
        }
        if self.is_idle(id) {
            return fail(code::PROTOCOL_ERROR, "RST_STREAM on an idle stream");
        }
        self.spend(now)?;
        if !self.resets.spend(now) {
            return fail(code::ENHANCE_YOUR_CALM, "rapid reset");
        }
        let error = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        let Some(slot) = self.find(id) else {
            return Ok(());
        };
        let stream = &mut self.streams[slot];
        if stream.reset.is_some() {
            return Ok(());
        }
        stream.reset = Some((error, true));
        self.resets_received.push(error);
        if !stream.task_started && !self.unserved_resets.spend(now) {
            return fail(
                code::ENHANCE_YOUR_CALM,
                "streams reset before they were served",
            );
        }
        if let Some(waker) = stream.waker.take() {
            waker.wake();
        }
        self.settle(slot);
        Ok(())
    }

    fn settings(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
        now: Instant,
    ) -> Result<(), ConnError> {
        if header.stream != 0 {
            return fail(code::PROTOCOL_ERROR, "SETTINGS on a stream");
        }
        if header.has(flag::ACK) {
            if !payload.is_empty() {
                return fail(code::FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload");
            }
            self.spend(now)?;
            if !self.settings_acked {
                // Herdsman's SETTINGS_HEADER_TABLE_SIZE holds from now on (a lower one cuts the
                // table, and the client's next block must say so first).
                self.decoder
                    .set_max_table_size(self.limits.header_table_size as usize);
            }
            self.settings_acked = true;
            return Ok(());
        }
        if !payload.len().is_multiple_of(6) {
            return fail(
                code::FRAME_SIZE_ERROR,
                "SETTINGS of a length not a multiple of 6",
            );
        }
        self.spend(now)?;
        for parameter in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([parameter[0], parameter[1]]);
            let value =
                u32::from_be_bytes([parameter[2], parameter[3], parameter[4], parameter[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return fail(code::PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH neither 0 nor 1");
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > frame::MAX_WINDOW {
                        return fail(
                            code::FLOW_CONTROL_ERROR,
                            "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
                        );
                    }
                    let delta = i64::from(value) - i64::from(self.peer.initial_window);
                    self.peer.initial_window = value;
                    for (_, stream) in self.streams.iter_mut() {
                        stream.send_window += delta;
                        if stream.send_window > frame::MAX_WINDOW {
                            return fail(code::FLOW_CONTROL_ERROR, "a window above 2^31-1");
                        }
                        if delta > 0 {
                            if let Some(waker) = stream.waker.take() {
                                waker.wake();
                            }
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::MIN_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&value) {
                        return fail(code::PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range");
                    }
                    self.peer.max_frame_size = value;
                }
                // The table size the client's decoder allows: herdsman's encoder keeps no table,
                // so any size does. Unknown settings are ignored (§6.5.2).
                _ => {}
            }
        }
        frame::put_settings_ack(&mut self.out);
        self.flush_all_pending();
        self.wake_driver();
        Ok(())
    }

    fn ping(&mut self, header: FrameHeader, payload: &[u8], now: Instant) -> Result<(), ConnError> {
        if header.stream != 0 {
            return fail(code::PROTOCOL_ERROR, "PING on a stream");
        }
        if payload.len() != 8 {
            return fail(code::FRAME_SIZE_ERROR, "PING of a length other than 8");
        }
        self.spend(now)?;
        let mut data = [0u8; 8];
        data.copy_from_slice(payload);
        if header.has(flag::ACK) {
            if self.ping_sent == Some(data) {
                self.ping_acked = true;
                self.notice = true;
            }
            return Ok(());
        }
        frame::put_ping(&mut self.out, true, data);
        self.wake_driver();
        Ok(())
    }

    fn goaway(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnError> {
        goaway_last_stream(header, payload)?;
        self.client_gone = true;
        self.notice = true;
        Ok(())
    }

    fn window_update(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
        now: Instant,
    ) -> Result<(), ConnError> {
        if payload.len() != 4 {
            return fail(
                code::FRAME_SIZE_ERROR,
                "WINDOW_UPDATE of a length other than 4",
            );
        }
        self.spend(now)?;
        let increment = i64::from(
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff,
        );
        let id = header.stream;
        if id == 0 {
            if increment == 0 {
                return fail(code::PROTOCOL_ERROR, "a connection WINDOW_UPDATE of 0");
            }
            self.send_window += increment;
            if self.send_window > frame::MAX_WINDOW {
                return fail(
                    code::FLOW_CONTROL_ERROR,
                    "the connection's window above 2^31-1",
                );
            }
            for (_, stream) in self.streams.iter_mut() {
                if let Some(waker) = stream.waker.take() {
                    waker.wake();
                }
            }
            self.flush_all_pending();
            return Ok(());
        }
        if self.is_idle(id) {
            return fail(code::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
        }
        let Some(slot) = self.find(id) else {
            return Ok(());
        };
        if increment == 0 {
            return self.stream_error(id, code::PROTOCOL_ERROR);
        }
        let stream = &mut self.streams[slot];
        stream.send_window += increment;
        if stream.send_window > frame::MAX_WINDOW {
            return self.stream_error(id, code::FLOW_CONTROL_ERROR);
        }
        if let Some(waker) = stream.waker.take() {
            waker.wake();
        }
        self.flush_pending(slot);
        Ok(())
    }
}

/// Decodes one field block, handing `field` each field while the list's size (RFC 9113 §6.5.2:
/// name, value and 32 a field) stays within `limit`. Returns the whole list's size; a list over
/// four times the limit (an HPACK bomb: a few bytes that decode to a huge list) is a flood, and
/// a block HPACK cannot decode a COMPRESSION_ERROR. The table takes the whole block either way.
fn decode_block(
    decoder: &mut hpack::Decoder,
    scratch: &mut Vec<u8>,
    block: &[u8],
    limit: u64,
    mut field: impl FnMut(&[u8], &[u8]),
) -> Result<u64, ConnError> {
    let mut size = 0u64;
    let decoded = decoder.decode(block, scratch, |name, value| {
        size += (name.len() + value.len() + 32) as u64;
        if size > 4 * limit {
            return Err(());
        }
        if size <= limit {
            field(name, value);
        }
        Ok(())
    });
    match decoded {
        Ok(()) => Ok(size),
        Err(DecodeError::Field(())) => fail(
            code::ENHANCE_YOUR_CALM,
            "a header list four times too large",
        ),
        Err(DecodeError::Compression(_)) => {
            fail(code::COMPRESSION_ERROR, "a field block HPACK cannot decode")
        }
    }
}
