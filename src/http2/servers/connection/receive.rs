//! The server's frames, read into a connection's state (RFC 9113 as a client must check them):
//! DATA into its stream's input in the framing its head announced, a head or trailers decoded
//! straight into HTTP/1.1, SETTINGS, PING, GOAWAY, RST_STREAM and WINDOW_UPDATE applied. A
//! connection error comes back as `ConnError`; a stream error resets its stream here.

use super::{Continuation, Failed, Phase, State, MAX_FIELD_BLOCK, MAX_FRAME, MAX_STREAM_ID};
use crate::http1::chunked::put_size_line;
use crate::http2::frame::{
    self, code, fail, flag, goaway_last_stream, kind, setting, unpadded, ConnError, FrameHeader,
    HEADER_LEN,
};
use crate::http2::hpack::DecodeError;
use crate::http2::servers::response::{trailer_field, HeadWriter, Malformed, ResponseFraming};

/// What became of a DATA frame's bytes.
enum DataTaken {
    /// In the stream's input.
    Kept,
    /// For a stream herdsman no longer reads.
    Ignored,
    /// A stream error: the stream is reset with this code.
    Refused(u32),
}

impl State {
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
