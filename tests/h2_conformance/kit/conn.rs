//! A raw HTTP/2 client connection to herdsman, over TCP or TLS: it writes whatever bytes a case
//! gives it and reads frames back, each wait bounded (a case that gets no answer fails in
//! seconds), and says what a case expects in one call: a connection error (GOAWAY with its
//! code, then the close §5.4.1 requires), a stream error (RST_STREAM with its code, the
//! connection still serving), a response, a PING or SETTINGS acknowledgement.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herdsman::stats::http2::CODES;
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};

use super::frame::*;
use super::hpack::{Block, Decoder};
use super::target::{address, Target, Transport, SERVER_NAME};
use crate::common::client_config;

/// How long a case waits for each answer it expects.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The payload of the PING that checks a connection still serves.
const ALIVE: [u8; 8] = *b"alive?!!";

/// The byte stream under the frames.
enum Io {
    Tcp(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Io {
    fn tcp(&self) -> &TcpStream {
        match self {
            Io::Tcp(tcp) => tcp,
            Io::Tls(tls) => &tls.sock,
        }
    }
}

impl Read for Io {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Io::Tcp(tcp) => tcp.read(buf),
            Io::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Io {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Io::Tcp(tcp) => tcp.write(buf),
            Io::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Io::Tcp(tcp) => tcp.flush(),
            Io::Tls(tls) => tls.flush(),
        }
    }
}

/// What reading from the connection gave.
#[derive(Debug)]
pub enum Event {
    /// A frame other than a field block's.
    Frame(Frame),
    /// A HEADERS frame and its CONTINUATION frames, the block decoded.
    Headers {
        stream: u32,
        end_stream: bool,
        fields: Vec<(String, String)>,
    },
    /// herdsman closed the connection.
    Closed,
    /// Nothing came in time.
    Timeout,
}

/// A response as the client read it.
#[derive(Debug, Default)]
pub struct Response {
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The DATA frames' payload lengths, in order (the empty one that may end the stream too).
    pub data_frames: Vec<usize>,
    pub trailers: Vec<(String, String)>,
}

impl Response {
    /// The value of field `name` in the head.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn status(&self) -> u16 {
        self.field(":status")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }
}

/// A raw client connection.
pub struct Conn {
    io: Io,
    /// Bytes read and not yet framed.
    received: Vec<u8>,
    decoder: Decoder,
    /// herdsman's SETTINGS, from its first frame (after [`Conn::handshake`]).
    pub settings: Vec<(u16, u32)>,
}

impl Conn {
    /// A connection to the default herdsman over `transport`, nothing sent yet.
    pub fn open(transport: Transport) -> Conn {
        Conn::open_to(Target::Default, transport)
    }

    /// A connection to herdsman for `target`, nothing sent yet (over TLS: the handshake done,
    /// `h2` agreed).
    pub fn open_to(target: Target, transport: Transport) -> Conn {
        let tcp = TcpStream::connect(address(target, transport)).unwrap();
        tcp.set_nodelay(true).unwrap();
        tcp.set_write_timeout(Some(ANSWER_WITHIN)).unwrap();
        let io = match transport {
            Transport::H2c => Io::Tcp(tcp),
            Transport::Tls => {
                let mut config = (*client_config()).clone();
                config.alpn_protocols = vec![b"h2".to_vec()];
                let name = ServerName::try_from(SERVER_NAME).unwrap();
                let client = ClientConnection::new(Arc::new(config), name).unwrap();
                let mut tls = StreamOwned::new(client, tcp);
                tls.sock.set_read_timeout(Some(ANSWER_WITHIN)).unwrap();
                while tls.conn.is_handshaking() {
                    tls.conn.complete_io(&mut tls.sock).unwrap();
                }
                assert_eq!(tls.conn.alpn_protocol(), Some(&b"h2"[..]), "ALPN h2");
                Io::Tls(Box::new(tls))
            }
        };
        Conn {
            io,
            received: Vec::new(),
            decoder: Decoder::default(),
            settings: Vec::new(),
        }
    }

    /// A connection to the default herdsman with the handshake done ([`Conn::handshake`]).
    pub fn start(transport: Transport) -> Conn {
        let mut conn = Conn::open(transport);
        conn.handshake(&[]);
        conn
    }

    /// The preface and a SETTINGS frame of `settings`; herdsman's SETTINGS read and
    /// acknowledged, and its acknowledgement of ours read.
    pub fn handshake(&mut self, settings: &[(u16, u32)]) {
        for &(id, value) in settings {
            if id == HEADER_TABLE_SIZE {
                self.decoder.allow(value as usize);
            }
        }
        self.send(PREFACE);
        self.send_frame(SETTINGS, 0, 0, &settings_payload(settings));
        match self.next() {
            Event::Frame(frame) if frame.kind == SETTINGS && !frame.has(ACK) => {
                self.settings = frame
                    .payload
                    .chunks(6)
                    .map(|p| {
                        (
                            u16::from_be_bytes([p[0], p[1]]),
                            u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
                        )
                    })
                    .collect();
            }
            other => panic!("herdsman's first frame should be SETTINGS, got {other:?}"),
        }
        self.send_frame(SETTINGS, ACK, 0, &[]);
        self.expect_settings_ack();
    }

    /// Writes `bytes`; a write herdsman no longer reads is no failure here (what it answered
    /// before is what the case checks).
    pub fn send(&mut self, bytes: &[u8]) {
        let _ = self.io.write_all(bytes).and_then(|()| self.io.flush());
    }

    pub fn send_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        self.send(&encode(kind, flags, stream, payload));
    }

    /// A HEADERS frame carrying `block`, with END_HEADERS and `flags`.
    pub fn send_headers(&mut self, stream: u32, flags: u8, block: &Block) {
        self.send_frame(HEADERS, END_HEADERS | flags, stream, &block.bytes);
    }

    /// GET `path` on `stream`, the request complete.
    pub fn send_get(&mut self, stream: u32, path: &str) {
        self.send_headers(stream, END_STREAM, &Block::get(path));
    }

    /// POST `body` to `path` on `stream`: the head, then one DATA frame that ends the stream.
    pub fn send_post(&mut self, stream: u32, path: &str, body: &[u8]) {
        self.send_post_head(stream, path);
        self.send_frame(DATA, END_STREAM, stream, body);
    }

    /// A POST to `path` on `stream` whose body is still to come.
    pub fn send_post_head(&mut self, stream: u32, path: &str) {
        self.send_headers(stream, 0, &Block::request("POST", path));
    }

    pub fn send_ping(&mut self, flags: u8, data: [u8; 8]) {
        self.send_frame(PING, flags, 0, &data);
    }

    pub fn send_settings(&mut self, pairs: &[(u16, u32)]) {
        self.send_frame(SETTINGS, 0, 0, &settings_payload(pairs));
    }

    pub fn send_window_update(&mut self, stream: u32, increment: u32) {
        self.send_frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes());
    }

    pub fn send_rst_stream(&mut self, stream: u32, code: u32) {
        self.send_frame(RST_STREAM, 0, stream, &code.to_be_bytes());
    }

    /// The next frame (a field block whole), or the close, or a timeout after `within`.
    pub fn next_within(&mut self, within: Duration) -> Event {
        let deadline = Instant::now() + within;
        let frame = match self.read_frame(deadline) {
            Ok(frame) => frame,
            Err(event) => return event,
        };
        if frame.kind != HEADERS {
            return Event::Frame(frame);
        }
        let stream = frame.stream;
        let end_stream = frame.has(END_STREAM);
        let mut block = field_block_fragment(&frame);
        let mut ended = frame.has(END_HEADERS);
        while !ended {
            match self.read_frame(deadline) {
                Ok(more) if more.kind == CONTINUATION && more.stream == stream => {
                    block.extend_from_slice(&more.payload);
                    ended = more.has(END_HEADERS);
                }
                Ok(other) => panic!("herdsman interleaved {other:?} in a field block"),
                Err(event) => return event,
            }
        }
        let fields = self.decoder.decode(&block);
        Event::Headers {
            stream,
            end_stream,
            fields,
        }
    }

    pub fn next(&mut self) -> Event {
        self.next_within(ANSWER_WITHIN)
    }

    fn read_frame(&mut self, deadline: Instant) -> Result<Frame, Event> {
        loop {
            if self.received.len() >= 9 {
                let length =
                    u32::from_be_bytes([0, self.received[0], self.received[1], self.received[2]])
                        as usize;
                if self.received.len() >= 9 + length {
                    let bytes: Vec<u8> = self.received.drain(..9 + length).collect();
                    return Ok(Frame {
                        kind: bytes[3],
                        flags: bytes[4],
                        stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]])
                            & 0x7fff_ffff,
                        payload: bytes[9..].to_vec(),
                    });
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Event::Timeout);
            }
            self.io.tcp().set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 16_384];
            match self.io.read(&mut chunk) {
                Ok(0) => return Err(Event::Closed),
                Ok(n) => self.received.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(Event::Timeout)
                }
                Err(_) => return Err(Event::Closed),
            }
        }
    }

    /// Reads until `wanted` picks an event, which it returns; panics, naming `what` and all
    /// that came, if the connection closes or nothing is picked in time. `wanted` sees every
    /// frame; it may panic itself on one that must not come.
    fn wait_for<T>(&mut self, what: &str, mut wanted: impl FnMut(&Event) -> Option<T>) -> T {
        let deadline = Instant::now() + ANSWER_WITHIN;
        let mut seen = Vec::new();
        loop {
            let event = self.next_within(deadline.saturating_duration_since(Instant::now()));
            if let Some(picked) = wanted(&event) {
                return picked;
            }
            match event {
                Event::Closed | Event::Timeout => {
                    panic!("expected {what}, got {seen:?} then {event:?}")
                }
                other => seen.push(other),
            }
        }
    }

    /// A connection error (§5.4.1): GOAWAY with `code`, then the connection closed.
    /// Returns the GOAWAY's last stream identifier.
    pub fn expect_goaway(&mut self, code: u32) -> u32 {
        let (got, last_stream) =
            self.wait_for(
                &format!("GOAWAY {}", code_name(code)),
                |event| match event {
                    Event::Frame(frame) if frame.kind == GOAWAY => {
                        let last = u32::from_be_bytes(frame.payload.get(..4)?.try_into().ok()?);
                        Some((frame.error_code()?, last & 0x7fff_ffff))
                    }
                    _ => None,
                },
            );
        assert_eq!(code_name(got), code_name(code), "GOAWAY's error code");
        self.expect_closed();
        last_stream
    }

    /// The connection closes (frames before the close are let pass).
    pub fn expect_closed(&mut self) {
        self.wait_for("the connection closed", |event| {
            matches!(event, Event::Closed).then_some(())
        });
    }

    /// A stream error (§5.4.2): RST_STREAM on `stream` with `code`; the connection still serves.
    pub fn expect_reset(&mut self, stream: u32, code: u32) {
        let got = self.wait_for(
            &format!("RST_STREAM {} on stream {stream}", code_name(code)),
            |event| match event {
                Event::Frame(frame) if frame.kind == RST_STREAM && frame.stream == stream => {
                    frame.error_code()
                }
                Event::Frame(frame) if frame.kind == GOAWAY => panic!(
                    "expected RST_STREAM {} on stream {stream}, got a connection error: GOAWAY {}",
                    code_name(code),
                    code_name(frame.error_code().unwrap_or(u32::MAX))
                ),
                _ => None,
            },
        );
        assert_eq!(code_name(got), code_name(code), "RST_STREAM's error code");
        self.expect_alive();
    }

    /// `code` as a stream error on `stream` or as a connection error: for what RFC 9113 makes
    /// either (a frame size error outside a field block, a frame on a stream closed or being
    /// closed, where the stream's state is a race the client cannot see), and for stream errors
    /// herdsman's h2 crate makes the connection's (§5.4.1: "an endpoint MAY choose to treat a
    /// stream error as a connection error").
    pub fn expect_stream_or_connection_error(&mut self, stream: u32, code: u32) {
        self.expect_stream_or_connection_error_among(stream, &[code]);
    }

    /// As [`Conn::expect_stream_or_connection_error`], with any of `codes`.
    pub fn expect_stream_or_connection_error_among(&mut self, stream: u32, codes: &[u32]) {
        let names: Vec<String> = codes.iter().map(|&c| code_name(c)).collect();
        let (kind, got) = self.wait_for(
            &format!("RST_STREAM or GOAWAY {}", names.join(" or ")),
            |event| match event {
                Event::Frame(frame)
                    if frame.kind == GOAWAY
                        || (frame.kind == RST_STREAM && frame.stream == stream) =>
                {
                    Some((frame.kind, frame.error_code()?))
                }
                _ => None,
            },
        );
        assert!(
            names.contains(&code_name(got)),
            "{} is not {names:?}",
            code_name(got)
        );
        match kind {
            GOAWAY => self.expect_closed(),
            _ => self.expect_alive(),
        }
    }

    /// The connection closes; a GOAWAY before the close (which may be left out, as after an
    /// invalid preface, §3.4) must carry `code`.
    pub fn expect_closed_or_goaway(&mut self, code: u32) {
        self.wait_for("the connection closed", |event| match event {
            Event::Frame(frame) if frame.kind == GOAWAY => {
                let got = frame.error_code().unwrap_or(u32::MAX);
                assert_eq!(code_name(got), code_name(code), "GOAWAY's error code");
                None
            }
            Event::Closed => Some(()),
            _ => None,
        });
    }

    /// A PING ACK with `data`, or a clean close (GOAWAY NO_ERROR or none): what a client may
    /// see after its own GOAWAY.
    pub fn expect_ping_ack_or_close(&mut self, data: [u8; 8]) {
        self.wait_for("PING ACK or the close", |event| match event {
            Event::Frame(frame) if frame.kind == PING && frame.has(ACK) => {
                assert_eq!(frame.payload, data, "the PING ACK's payload");
                Some(())
            }
            Event::Frame(frame) if frame.kind == GOAWAY => {
                let got = frame.error_code().unwrap_or(u32::MAX);
                assert_eq!(code_name(got), code_name(NO_ERROR), "GOAWAY's error code");
                None
            }
            Event::Closed => Some(()),
            _ => None,
        });
    }

    /// The response head on `stream` (its fields; interim heads skipped).
    pub fn expect_head(&mut self, stream: u32) -> Response {
        let fields =
            self.wait_for(
                &format!("a response head on stream {stream}"),
                |event| match event {
                    Event::Headers {
                        stream: s, fields, ..
                    } if *s == stream
                        && !fields
                            .iter()
                            .any(|(n, v)| n == ":status" && v.starts_with('1')) =>
                    {
                        Some(fields.clone())
                    }
                    _ => None,
                },
            );
        Response {
            fields,
            ..Response::default()
        }
    }

    /// An interim response with `status` on `stream`: a HEADERS frame without END_STREAM.
    pub fn expect_interim(&mut self, stream: u32, status: u16) {
        let (fields, end_stream) = self.wait_for(
            &format!("a {status} on stream {stream}"),
            |event| match event {
                Event::Headers {
                    stream: s,
                    end_stream,
                    fields,
                } if *s == stream => Some((fields.clone(), *end_stream)),
                _ => None,
            },
        );
        let head = Response {
            fields,
            ..Response::default()
        };
        assert_eq!(head.status(), status, "{head:?}");
        assert!(!end_stream, "an interim response does not end the stream");
    }

    /// The content of the next DATA frame with content on `stream`.
    pub fn expect_data(&mut self, stream: u32) -> Vec<u8> {
        self.wait_for(&format!("DATA on stream {stream}"), |event| match event {
            Event::Frame(frame) if frame.kind == DATA && frame.stream == stream => {
                let data = data_content(frame);
                (!data.is_empty()).then(|| data.to_vec())
            }
            Event::Frame(frame)
                if frame.kind == GOAWAY || (frame.kind == RST_STREAM && frame.stream == stream) =>
            {
                panic!("expected DATA on stream {stream}, got {frame:?}")
            }
            _ => None,
        })
    }

    /// The connection still serves: a PING is acknowledged.
    pub fn expect_alive(&mut self) {
        self.send_ping(0, ALIVE);
        self.expect_ping_ack(ALIVE);
    }

    /// A PING with ACK and `data` comes (another PING ACK first fails the case).
    pub fn expect_ping_ack(&mut self, data: [u8; 8]) {
        let got = self.wait_for("PING ACK", |event| match event {
            Event::Frame(frame) if frame.kind == PING && frame.has(ACK) => {
                Some(frame.payload.clone())
            }
            Event::Frame(frame) if frame.kind == GOAWAY => {
                panic!("expected PING ACK, got {frame:?}")
            }
            _ => None,
        });
        assert_eq!(got, data, "the PING ACK's payload");
    }

    /// A SETTINGS frame with ACK and no payload comes.
    pub fn expect_settings_ack(&mut self) {
        let payload = self.wait_for("SETTINGS ACK", |event| match event {
            Event::Frame(frame) if frame.kind == SETTINGS && frame.has(ACK) => {
                Some(frame.payload.clone())
            }
            Event::Frame(frame) if frame.kind == GOAWAY => {
                panic!("expected SETTINGS ACK, got {frame:?}")
            }
            _ => None,
        });
        assert!(payload.is_empty(), "a SETTINGS ACK has no payload");
    }

    /// The response on `stream`, whole (interim 1xx heads skipped): a reset or GOAWAY fails
    /// the case. The client's windows are given back as DATA comes.
    pub fn expect_response(&mut self, stream: u32) -> Response {
        let mut response = Response::default();
        let mut ended = false;
        while !ended {
            let update =
                self.wait_for(
                    &format!("the response on stream {stream}"),
                    |event| match event {
                        Event::Headers {
                            stream: s,
                            end_stream,
                            fields,
                        } if *s == stream => {
                            let interim = fields
                                .iter()
                                .any(|(n, v)| n == ":status" && v.starts_with('1'));
                            if response.fields.is_empty() && !interim {
                                response.fields = fields.clone();
                            } else if !interim {
                                response.trailers = fields.clone();
                            }
                            ended = *end_stream;
                            Some(0)
                        }
                        Event::Frame(frame) if frame.kind == DATA && frame.stream == stream => {
                            let data = data_content(frame);
                            response.data_frames.push(data.len());
                            response.body.extend_from_slice(data);
                            ended = frame.has(END_STREAM);
                            Some(frame.payload.len())
                        }
                        Event::Frame(frame)
                            if frame.kind == GOAWAY
                                || (frame.kind == RST_STREAM && frame.stream == stream) =>
                        {
                            panic!("expected the response on stream {stream}, got {frame:?}")
                        }
                        _ => None,
                    },
                );
            if update > 0 {
                let increment = update as u32;
                self.send_window_update(0, increment);
                if !ended {
                    self.send_window_update(stream, increment);
                }
            }
        }
        response
    }

    /// The response on `stream` is 200 from the server, which saw `method` and `path`.
    pub fn expect_ok(&mut self, stream: u32, method: &str, path: &str) -> Response {
        let response = self.expect_response(stream);
        assert_eq!(response.status(), 200, "{response:?}");
        assert_eq!(response.field("x-method"), Some(method), "{response:?}");
        assert_eq!(response.field("x-target"), Some(path), "{response:?}");
        response
    }

    /// The response on `stream` is 200 to a POST to `path`, whose body, `body`, the server
    /// echoed.
    pub fn expect_echo(&mut self, stream: u32, path: &str, body: &[u8]) -> Response {
        let response = self.expect_ok(stream, "POST", path);
        assert_eq!(response.body, body, "the body echoed");
        response
    }

    /// No frame at all on `stream` before a PING is acknowledged (herdsman answered nothing
    /// there, and the connection still serves).
    pub fn expect_silence_on(&mut self, stream: u32) {
        self.send_ping(0, ALIVE);
        self.wait_for("PING ACK", |event| match event {
            Event::Frame(frame) if frame.kind == PING && frame.has(ACK) => Some(()),
            Event::Frame(frame) if frame.stream == stream || frame.kind == GOAWAY => {
                panic!("expected nothing on stream {stream}, got {frame:?}")
            }
            Event::Headers { stream: s, .. } if *s == stream => {
                panic!("expected nothing on stream {stream}, got {event:?}")
            }
            _ => None,
        });
    }
}

/// A HEADERS frame's field block fragment: its padding and priority fields taken off.
fn field_block_fragment(frame: &Frame) -> Vec<u8> {
    let mut payload = &frame.payload[..];
    let mut padding = 0;
    if frame.has(PADDED) {
        padding = usize::from(payload[0]);
        payload = &payload[1..];
    }
    if frame.has(PRIORITY_FLAG) {
        payload = &payload[5..];
    }
    payload[..payload.len() - padding].to_vec()
}

/// A DATA frame's content, its padding taken off.
fn data_content(frame: &Frame) -> &[u8] {
    match frame.has(PADDED) {
        true => {
            let padding = usize::from(frame.payload[0]);
            &frame.payload[1..frame.payload.len() - padding]
        }
        false => &frame.payload,
    }
}

/// An error code's name (§7, as herdsman's counters name them), for messages.
pub fn code_name(code: u32) -> String {
    CODES
        .get(code as usize)
        .map_or_else(|| format!("{code:#x}"), |name| name.to_string())
}
