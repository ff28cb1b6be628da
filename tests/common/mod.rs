//! Shared integration-test infrastructure: programmable mock servers, a raw HTTP/1.1 connection
//! (used by both the test clients and the mocks), and helpers that start herdsman in-process or
//! as the binary. Every socket read is bounded by a timeout so a proxy bug fails, never hangs.
#![allow(dead_code)]

use std::fmt::Display;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Every read and write a test makes gives up after this long.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a mock server waits on a silent connection before giving up on it.
const MOCK_IDLE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Heads

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body at all.
    None,
    Length(u64),
    Chunked,
    /// Response body runs until the connection closes.
    Close,
}

/// A request or response head as received: the raw bytes and a lenient parse of them.
#[derive(Debug, Clone)]
pub struct Head {
    /// The head exactly as received, including the final empty line.
    pub raw: Vec<u8>,
    pub first_line: String,
    /// Header fields in the order received; values with surrounding whitespace trimmed.
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn parse(raw: Vec<u8>) -> Head {
        let text = String::from_utf8_lossy(&raw).into_owned();
        let mut lines = text.split("\r\n");
        let first_line = lines.next().unwrap_or("").to_string();
        let headers = lines
            .filter(|line| !line.is_empty())
            .map(|line| match line.split_once(':') {
                Some((name, value)) => (name.to_string(), value.trim().to_string()),
                None => (line.to_string(), String::new()),
            })
            .collect();
        Head {
            raw,
            first_line,
            headers,
        }
    }

    /// The first value of a header field (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a header field, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    /// Whether a comma-separated header field lists `token` (case-insensitive), in any line.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.header_all(name)
            .iter()
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    fn part(&self, index: usize) -> &str {
        self.first_line.splitn(3, ' ').nth(index).unwrap_or("")
    }

    /// Request method.
    pub fn method(&self) -> &str {
        self.part(0)
    }

    /// Request target.
    pub fn target(&self) -> &str {
        self.part(1)
    }

    /// Response version ("HTTP/1.1").
    pub fn version(&self) -> &str {
        self.part(0)
    }

    /// Response status code (0 when unparsable).
    pub fn status(&self) -> u16 {
        self.part(1).parse().unwrap_or(0)
    }

    /// Response reason phrase.
    pub fn reason(&self) -> &str {
        self.part(2)
    }

    /// Body framing of a request (RFC 9112 §6.3, for well-formed requests).
    pub fn request_framing(&self) -> Framing {
        if self.has("transfer-encoding") {
            Framing::Chunked
        } else if let Some(len) = self.header("content-length") {
            Framing::Length(len.parse().expect("numeric content-length"))
        } else {
            Framing::None
        }
    }

    /// Body framing of a response to a request that was (or not) a HEAD.
    pub fn response_framing(&self, head_request: bool) -> Framing {
        let status = self.status();
        if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
            Framing::None
        } else if self.has("transfer-encoding") {
            if self.has_token("transfer-encoding", "chunked") {
                Framing::Chunked
            } else {
                Framing::Close
            }
        } else if let Some(len) = self.header("content-length") {
            Framing::Length(len.parse().expect("numeric content-length"))
        } else {
            Framing::Close
        }
    }
}

/// A complete response as read by a client.
#[derive(Debug, Clone)]
pub struct Response {
    pub head: Head,
    pub framing: Framing,
    pub body: Vec<u8>,
}

impl Response {
    pub fn status(&self) -> u16 {
        self.head.status()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Whether the response announces that the connection closes after it.
    pub fn says_close(&self) -> bool {
        self.head.has_token("connection", "close")
    }
}

/// Asserts a herdsman error response: the status, a short `text/plain` body starting with
/// `"<code> "`, and a Content-Length that matches the body.
pub fn assert_error_response(response: &Response, code: u16) {
    assert_eq!(
        response.status(),
        code,
        "expected a {code} response, got: {}",
        response.head.first_line
    );
    assert!(
        response
            .head
            .first_line
            .starts_with(&format!("HTTP/1.1 {code} ")),
        "status line: {:?}",
        response.head.first_line
    );
    let content_type = response.header("content-type").unwrap_or("");
    assert!(
        content_type.starts_with("text/plain"),
        "{code} response Content-Type is {content_type:?}, expected text/plain"
    );
    let length = response
        .header("content-length")
        .unwrap_or_else(|| panic!("{code} response has no Content-Length"));
    assert_eq!(length, response.body.len().to_string(), "Content-Length");
    assert!(
        response.body_text().starts_with(&format!("{code} ")),
        "{code} response body should start with \"{code} \", got {:?}",
        response.body_text()
    );
    assert!(
        response.body.len() < 1024,
        "error body should be short, got {} bytes",
        response.body.len()
    );
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Is this error the read timeout firing?
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

// ---------------------------------------------------------------------------------------------
// Raw connections

/// A TCP connection with a read buffer, speaking raw HTTP/1.1 bytes. Used by test clients and
/// by the mock servers.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    /// Counts every byte read, when set (mock servers use it).
    received: Option<Arc<AtomicUsize>>,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Conn {
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            buf: Vec::new(),
            start: 0,
            received: None,
        }
    }

    /// Connects or panics.
    pub fn connect(addr: SocketAddr) -> Conn {
        Conn::try_connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
    }

    pub fn try_connect(addr: SocketAddr) -> io::Result<Conn> {
        Ok(Conn::new(TcpStream::connect_timeout(&addr, IO_TIMEOUT)?))
    }

    pub fn set_read_timeout(&self, timeout: Duration) {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
    }

    /// Writes all bytes or panics.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("writing {} bytes: {e}", bytes.len()));
    }

    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Half-closes the connection (sends FIN).
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }

    fn buffered(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads more bytes into the buffer; 0 at end of stream.
    fn fill(&mut self) -> io::Result<usize> {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let mut chunk = [0u8; 64 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if let Some(counter) = &self.received {
            counter.fetch_add(n, Ordering::SeqCst);
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Reads one head (up to and including the empty line). `None` on a clean end of stream
    /// before any byte of it.
    pub fn read_head(&mut self) -> io::Result<Option<Head>> {
        loop {
            if let Some(i) = find(self.buffered(), b"\r\n\r\n") {
                let raw = self.buffered()[..i + 4].to_vec();
                self.consume(i + 4);
                return Ok(Some(Head::parse(raw)));
            }
            if self.buffered().len() > 1 << 20 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "head over 1 MiB",
                ));
            }
            if self.fill()? == 0 {
                if self.buffered().is_empty() {
                    return Ok(None);
                }
                let partial = String::from_utf8_lossy(self.buffered()).into_owned();
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("end of stream inside a head: {partial:?}"),
                ));
            }
        }
    }

    /// Reads one CRLF-terminated line, without the CRLF.
    pub fn read_line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = find(self.buffered(), b"\r\n") {
                let line = self.buffered()[..i].to_vec();
                self.consume(i + 2);
                return Ok(line);
            }
            if self.buffered().len() > 64 * 1024 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "line over 64 KiB",
                ));
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "end of stream inside a line",
                ));
            }
        }
    }

    /// Reads exactly `n` bytes, handing them to `sink` piece by piece.
    pub fn read_exact_with(&mut self, n: u64, sink: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        let mut left = n;
        while left > 0 {
            if self.buffered().is_empty() && self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("end of stream with {left} of {n} body bytes missing"),
                ));
            }
            let take = (self.buffered().len() as u64).min(left) as usize;
            sink(&self.buffered()[..take]);
            self.consume(take);
            left -= take as u64;
        }
        Ok(())
    }

    pub fn read_exact_vec(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(n);
        self.read_exact_with(n as u64, &mut |b| out.extend_from_slice(b))?;
        Ok(out)
    }

    /// Reads until the peer closes, handing bytes to `sink`. A reset counts as the end.
    pub fn read_to_eof_with(&mut self, sink: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        loop {
            if !self.buffered().is_empty() {
                sink(self.buffered());
                let n = self.buffered().len();
                self.consume(n);
            }
            match self.fill() {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if is_reset(&e) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Decodes a chunked body, handing the data to `sink`; returns the trailer fields.
    pub fn read_chunked_with(
        &mut self,
        sink: &mut dyn FnMut(&[u8]),
    ) -> io::Result<Vec<(String, String)>> {
        loop {
            let line = self.read_line()?;
            let line = String::from_utf8_lossy(&line).into_owned();
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size_text, 16).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad chunk size line {line:?}"),
                )
            })?;
            if size == 0 {
                let mut trailers = Vec::new();
                loop {
                    let field = self.read_line()?;
                    if field.is_empty() {
                        return Ok(trailers);
                    }
                    let field = String::from_utf8_lossy(&field).into_owned();
                    let (name, value) = field.split_once(':').unwrap_or((&field, ""));
                    trailers.push((name.to_string(), value.trim().to_string()));
                }
            }
            self.read_exact_with(size, sink)?;
            let end = self.read_line()?;
            if !end.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "chunk data not followed by CRLF",
                ));
            }
        }
    }

    pub fn read_body_with(
        &mut self,
        framing: Framing,
        sink: &mut dyn FnMut(&[u8]),
    ) -> io::Result<()> {
        match framing {
            Framing::None => Ok(()),
            Framing::Length(n) => self.read_exact_with(n, sink),
            Framing::Chunked => self.read_chunked_with(sink).map(|_| ()),
            Framing::Close => self.read_to_eof_with(sink),
        }
    }

    pub fn read_body(&mut self, framing: Framing) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        self.read_body_with(framing, &mut |b| body.extend_from_slice(b))?;
        Ok(body)
    }

    /// Reads one response (a 1xx counts as a response of its own).
    pub fn read_response(&mut self, head_request: bool) -> io::Result<Response> {
        let head = self.read_head()?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before a response",
            )
        })?;
        if !head.first_line.starts_with("HTTP/") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a status line: {:?}", head.first_line),
            ));
        }
        let framing = head.response_framing(head_request);
        let body = self.read_body(framing)?;
        Ok(Response {
            head,
            framing,
            body,
        })
    }

    /// Reads one response to a non-HEAD request, or panics saying why not.
    pub fn response(&mut self) -> Response {
        self.read_response(false)
            .unwrap_or_else(|e| panic!("reading a response: {}", describe(&e)))
    }

    /// Reads one response head (leaving its body unread), or panics saying why not.
    pub fn response_head(&mut self) -> Head {
        self.read_head()
            .unwrap_or_else(|e| panic!("reading a response head: {}", describe(&e)))
            .expect("connection closed before a response head")
    }

    /// Sends a request and reads its response.
    pub fn roundtrip(&mut self, request: &[u8]) -> Response {
        self.send(request);
        self.response()
    }

    /// Reads until the peer closes the connection (end of stream or reset) and returns what
    /// arrived on the way; panics if it stays open for `IO_TIMEOUT`.
    pub fn read_until_closed(&mut self) -> Vec<u8> {
        let mut rest = Vec::new();
        match self.read_to_eof_with(&mut |b| rest.extend_from_slice(b)) {
            Ok(()) => rest,
            Err(e) => panic!(
                "connection not closed: {} (received meanwhile: {:?})",
                describe(&e),
                String::from_utf8_lossy(&rest)
            ),
        }
    }

    /// Asserts the peer closes the connection without sending anything more.
    pub fn expect_closed(&mut self) {
        let rest = self.read_until_closed();
        assert!(
            rest.is_empty(),
            "expected the connection to close, got {} more bytes: {:?}",
            rest.len(),
            String::from_utf8_lossy(&rest)
        );
    }

    /// Whether the peer closes the connection within `timeout` (bytes arriving meanwhile are
    /// discarded).
    pub fn closes_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            self.set_read_timeout(deadline - now);
            let n = self.buffered().len();
            self.consume(n);
            match self.fill() {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if is_reset(&e) => return true,
                Err(_) => return false,
            }
        }
    }

    /// Returns the next bytes available (buffered first, else one read); empty at end of stream.
    pub fn read_some(&mut self) -> io::Result<Vec<u8>> {
        if self.buffered().is_empty() {
            self.fill()?;
        }
        let data = self.buffered().to_vec();
        self.consume(data.len());
        Ok(data)
    }

    /// Bytes already received but not yet consumed.
    pub fn pending(&self) -> &[u8] {
        self.buffered()
    }
}

/// A readable description of an io error, naming timeouts as such.
pub fn describe(e: &io::Error) -> String {
    if is_timeout(e) {
        format!("timed out after {IO_TIMEOUT:?} waiting for the peer")
    } else {
        e.to_string()
    }
}

/// Makes the next close of this socket send RST instead of FIN (SO_LINGER with zero timeout).
pub fn set_reset_on_close(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the fd is a live socket owned by `stream`; the option value is a valid `linger`.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(SO_LINGER)");
}

/// A GET request with the given extra header lines (each ending in CRLF).
pub fn get_request(path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: test.local\r\n{extra}\r\n").into_bytes()
}

/// `GET path` of the admin API as `herdsman ctl` asks it (the API answers to `localhost`, not
/// to any name), on a connection closed after the answer.
pub fn admin_get_request(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").into_bytes()
}

// ---------------------------------------------------------------------------------------------
// Synchronisation

/// A one-way latch: tests and mocks use it to hold a step until another side has reached a
/// point ("the server has seen the first body bytes").
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    pub fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    pub fn is_open(&self) -> bool {
        *self.0 .0.lock().unwrap()
    }

    /// Waits until open; false on timeout.
    pub fn wait(&self, timeout: Duration) -> bool {
        let guard = self.0 .0.lock().unwrap();
        let (guard, _) = self
            .0
             .1
            .wait_timeout_while(guard, timeout, |open| !*open)
            .unwrap();
        *guard
    }
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes.
pub fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------------------------
// Mock servers

/// A complete request as a mock server received it (head and decoded body).
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Which accepted connection (0-based, in accept order) it came on.
    pub conn: usize,
    pub head: Head,
    pub body: Vec<u8>,
}

#[derive(Default)]
pub struct MockStats {
    connections: AtomicUsize,
    /// Connections the peer (herdsman) closed cleanly between requests.
    closed_by_peer: AtomicUsize,
    bytes: Arc<AtomicUsize>,
    heads: Mutex<Vec<(usize, Head)>>,
    complete: Mutex<Vec<Recorded>>,
}

/// What a mock does with the connection after handling one request.
#[derive(Debug, Clone, Copy)]
pub enum Flow {
    /// Read the next request.
    KeepAlive,
    /// Close the connection (FIN).
    Close,
    /// Reset the connection (RST).
    Reset,
}

/// One request being handled by a mock: its head, the connection to read the body from and to
/// answer on.
pub struct Exchange<'a> {
    pub conn: &'a mut Conn,
    pub head: Head,
    /// 0-based index of the connection in accept order.
    pub conn_id: usize,
    /// 0-based index of this request on its connection.
    pub index: usize,
    stats: &'a MockStats,
}

impl Exchange<'_> {
    /// Reads the whole body (per the request's framing) and records the request as complete.
    pub fn read_body(&mut self) -> io::Result<Vec<u8>> {
        let body = self.conn.read_body(self.head.request_framing())?;
        self.record(body.clone());
        Ok(body)
    }

    /// Records the request as completely received, with this body.
    pub fn record(&self, body: Vec<u8>) {
        self.stats.complete.lock().unwrap().push(Recorded {
            conn: self.conn_id,
            head: self.head.clone(),
            body,
        });
    }

    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.conn.stream.write_all(bytes)
    }

    /// Answers with a Content-Length response.
    pub fn respond(
        &mut self,
        status: u16,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<()> {
        let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
        for (name, value) in headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(body);
        self.write(&bytes)
    }

    /// Blocks until the peer closes the connection (or `limit` passes), discarding input.
    pub fn wait_for_close(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            match self.conn.fill() {
                Ok(0) => return,
                Ok(_) => {
                    let n = self.conn.buffered().len();
                    self.conn.consume(n);
                }
                Err(e) if is_timeout(&e) => {}
                Err(_) => return,
            }
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        204 => "No Content",
        304 => "Not Modified",
        404 => "Not Found",
        _ => "Whatever",
    }
}

type Handler = dyn Fn(&mut Exchange<'_>) -> io::Result<Flow> + Send + Sync;

/// A programmable backend server on 127.0.0.1 (std threads, one per connection). It records
/// every head it reads, every request completely received, the connections it accepted and
/// the bytes it read.
pub struct Mock {
    pub addr: SocketAddr,
    stats: Arc<MockStats>,
    stop: Arc<AtomicBool>,
}

impl Mock {
    /// Starts a mock whose connections call `handler` for each request head read.
    pub fn start<F>(handler: F) -> Mock
    where
        F: Fn(&mut Exchange<'_>) -> io::Result<Flow> + Send + Sync + 'static,
    {
        Mock::start_on("127.0.0.1:0".parse().unwrap(), handler)
    }

    /// Like [`Mock::start`], listening on `addr` (e.g. a server coming back on its old port).
    pub fn start_on<F>(addr: SocketAddr, handler: F) -> Mock
    where
        F: Fn(&mut Exchange<'_>) -> io::Result<Flow> + Send + Sync + 'static,
    {
        let listener = TcpListener::bind(addr).unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(MockStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let (accept_stats, accept_stop) = (stats.clone(), stop.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let conn_id = accept_stats.connections.fetch_add(1, Ordering::SeqCst);
                let (stats, handler) = (accept_stats.clone(), handler.clone());
                thread::spawn(move || serve_mock_connection(stream, conn_id, &stats, &*handler));
            }
        });
        Mock { addr, stats, stop }
    }

    /// Answers every request with 200 and the body `name`, plus `X-Server: name`.
    pub fn named(name: &str) -> Mock {
        let name = name.to_string();
        Mock::start(move |ex| {
            ex.read_body()?;
            ex.respond(200, &[("X-Server", &name)], name.as_bytes())?;
            Ok(Flow::KeepAlive)
        })
    }

    /// Answers every request with 200 and the request body as the response body.
    pub fn echo() -> Mock {
        Mock::start(|ex| {
            let body = ex.read_body()?;
            let (method, target) = (ex.head.method().to_string(), ex.head.target().to_string());
            ex.respond(200, &[("X-Method", &method), ("X-Target", &target)], &body)?;
            Ok(Flow::KeepAlive)
        })
    }

    /// Answers every request, once its body is read, with exactly the bytes `response` (which
    /// need not be valid HTTP), then does with the connection what `then` says.
    pub fn raw_reply(response: &'static [u8], then: Flow) -> Mock {
        Mock::start(move |ex| {
            ex.read_body()?;
            ex.write(response)?;
            Ok(then)
        })
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.stats.connections.load(Ordering::SeqCst)
    }

    /// Connections the peer closed between requests so far.
    pub fn closed_by_peer(&self) -> usize {
        self.stats.closed_by_peer.load(Ordering::SeqCst)
    }

    /// Bytes read from all connections so far.
    pub fn bytes_received(&self) -> usize {
        self.stats.bytes.load(Ordering::SeqCst)
    }

    /// Every request head read so far (complete or not).
    pub fn heads(&self) -> Vec<Head> {
        self.stats
            .heads
            .lock()
            .unwrap()
            .iter()
            .map(|(_, h)| h.clone())
            .collect()
    }

    /// The target of every request head read so far, in order.
    pub fn targets(&self) -> Vec<String> {
        self.heads()
            .iter()
            .map(|h| h.target().to_string())
            .collect()
    }

    /// Requests received completely (head and body) so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.stats.complete.lock().unwrap().clone()
    }

    /// Waits until at least `n` heads have been read.
    pub fn wait_for_heads(&self, n: usize, timeout: Duration) -> bool {
        eventually(timeout, || self.stats.heads.lock().unwrap().len() >= n)
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag and drops the listener.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn serve_mock_connection(stream: TcpStream, conn_id: usize, stats: &MockStats, handler: &Handler) {
    let mut conn = Conn::new(stream);
    conn.set_read_timeout(MOCK_IDLE);
    conn.received = Some(stats.bytes.clone());
    let mut index = 0;
    loop {
        let head = match conn.read_head() {
            Ok(Some(head)) => head,
            Ok(None) => {
                stats.closed_by_peer.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Err(_) => return,
        };
        stats.heads.lock().unwrap().push((conn_id, head.clone()));
        let mut exchange = Exchange {
            conn: &mut conn,
            head,
            conn_id,
            index,
            stats,
        };
        match handler(&mut exchange) {
            Ok(Flow::KeepAlive) => index += 1,
            Ok(Flow::Close) | Err(_) => return,
            Ok(Flow::Reset) => {
                set_reset_on_close(&conn.stream);
                return;
            }
        }
    }
}

/// An address on 127.0.0.1 where nothing listens (connections are refused).
pub fn refusing_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A port that was free a moment ago (for the binary, which cannot report a port-0 bind).
pub fn free_port() -> u16 {
    refusing_addr().port()
}

// ---------------------------------------------------------------------------------------------
// Deterministic body content

/// An endless deterministic byte stream (xorshift), so large bodies are generated and checked
/// on the fly rather than held in memory.
pub struct Pattern {
    state: u64,
    word: [u8; 8],
    used: usize,
    /// Bytes produced or checked so far.
    pub offset: u64,
}

impl Pattern {
    pub fn new(seed: u64) -> Pattern {
        Pattern {
            state: seed | 1,
            word: [0; 8],
            used: 8,
            offset: 0,
        }
    }

    fn next_byte(&mut self) -> u8 {
        if self.used == 8 {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            self.word = self.state.to_le_bytes();
            self.used = 0;
        }
        let b = self.word[self.used];
        self.used += 1;
        b
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf.iter_mut() {
            *b = self.next_byte();
        }
        self.offset += buf.len() as u64;
    }

    /// Checks the next bytes of the stream; on a mismatch returns its absolute offset.
    pub fn check(&mut self, data: &[u8]) -> Result<(), u64> {
        for (i, b) in data.iter().enumerate() {
            if *b != self.next_byte() {
                return Err(self.offset + i as u64);
            }
        }
        self.offset += data.len() as u64;
        Ok(())
    }

    /// Produces the next `len` bytes of the stream in pieces of at most `piece_len` bytes, handing
    /// each to `write`; stops at the first error.
    pub fn write_in_pieces(
        &mut self,
        len: u64,
        piece_len: usize,
        write: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut piece = vec![0u8; piece_len];
        let mut left = len;
        while left > 0 {
            let n = left.min(piece_len as u64) as usize;
            self.fill(&mut piece[..n]);
            write(&piece[..n])?;
            left -= n as u64;
        }
        Ok(())
    }

    /// The first `n` bytes of the stream for `seed`.
    pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut out = vec![0; n];
        Pattern::new(seed).fill(&mut out);
        out
    }
}

/// Checks a stream of pieces against a pattern, remembering the first mismatch.
pub struct PatternCheck {
    pattern: Pattern,
    pub mismatch: Option<u64>,
    pub received: u64,
}

impl PatternCheck {
    pub fn new(seed: u64) -> PatternCheck {
        PatternCheck {
            pattern: Pattern::new(seed),
            mismatch: None,
            received: 0,
        }
    }

    pub fn feed(&mut self, data: &[u8]) {
        self.received += data.len() as u64;
        if self.mismatch.is_none() {
            if let Err(at) = self.pattern.check(data) {
                self.mismatch = Some(at);
            }
        }
    }

    /// "<bytes received> <first mismatch>", what a mock answers after checking an upload: an
    /// intact upload of `len` bytes reads `"{len} None"`.
    pub fn report(&self) -> String {
        format!("{} {:?}", self.received, self.mismatch)
    }
}

// ---------------------------------------------------------------------------------------------
// Starting herdsman

/// Builds a one-listener ("web"), one-pool ("app") config and starts herdsman with it.
pub struct Setup {
    workers: usize,
    grace: String,
    balance: String,
    servers: Vec<(String, SocketAddr, Option<u32>)>,
    timeouts: Vec<(String, String)>,
    limits: Vec<(String, String)>,
    intake: Option<String>,
    admin: Option<String>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup::new()
    }
}

impl Setup {
    pub fn new() -> Setup {
        Setup {
            workers: 2,
            grace: "5s".into(),
            balance: "round-robin".into(),
            servers: Vec::new(),
            timeouts: Vec::new(),
            limits: Vec::new(),
            intake: None,
            admin: None,
        }
    }

    /// Sets `intake = "mode"` (otherwise the default, balanced).
    pub fn intake(mut self, mode: &str) -> Setup {
        self.intake = Some(mode.into());
        self
    }

    /// Adds `[admin] bind = "127.0.0.1:0"`.
    pub fn admin(mut self) -> Setup {
        self.admin = Some("127.0.0.1:0".into());
        self
    }

    /// Adds `[admin] bind = "addr"`: for the binary, which cannot report where a port-0 bind
    /// went (see [`free_port`]).
    pub fn admin_at(mut self, addr: SocketAddr) -> Setup {
        self.admin = Some(addr.to_string());
        self
    }

    /// Adds a server without a weight (the default, 1).
    pub fn server(mut self, name: &str, addr: SocketAddr) -> Setup {
        self.servers.push((name.into(), addr, None));
        self
    }

    pub fn weighted(mut self, name: &str, addr: SocketAddr, weight: u32) -> Setup {
        self.servers.push((name.into(), addr, Some(weight)));
        self
    }

    pub fn balance(mut self, balance: &str) -> Setup {
        self.balance = balance.into();
        self
    }

    /// Sets `[timeouts] key = "value"`.
    pub fn timeout(mut self, key: &str, value: &str) -> Setup {
        self.timeouts.push((key.into(), format!("{value:?}")));
        self
    }

    /// Sets `[limits] key = value`.
    pub fn limit(mut self, key: &str, value: impl Display) -> Setup {
        self.limits.push((key.into(), value.to_string()));
        self
    }

    pub fn grace(mut self, value: &str) -> Setup {
        self.grace = value.into();
        self
    }

    pub fn workers(mut self, workers: usize) -> Setup {
        self.workers = workers;
        self
    }

    /// The config text, with the listener bound to `bind`.
    pub fn toml(&self, bind: &str) -> String {
        let mut text = format!(
            "workers = {}\nshutdown_grace = {:?}\n\n[[listener]]\nname = \"web\"\nbind = {bind:?}\npool = \"app\"\n\n",
            self.workers, self.grace
        );
        if let Some(intake) = &self.intake {
            text.insert_str(0, &format!("intake = {intake:?}\n"));
        }
        if let Some(admin) = &self.admin {
            text.push_str(&format!("[admin]\nbind = {admin:?}\n\n"));
        }
        if !self.timeouts.is_empty() {
            text.push_str("[timeouts]\n");
            for (key, value) in &self.timeouts {
                text.push_str(&format!("{key} = {value}\n"));
            }
            text.push('\n');
        }
        if !self.limits.is_empty() {
            text.push_str("[limits]\n");
            for (key, value) in &self.limits {
                text.push_str(&format!("{key} = {value}\n"));
            }
            text.push('\n');
        }
        text.push_str(&format!(
            "[[pool]]\nname = \"app\"\nbalance = {:?}\nservers = [\n",
            self.balance
        ));
        for (name, addr, weight) in &self.servers {
            let weight = weight
                .map(|w| format!(", weight = {w}"))
                .unwrap_or_default();
            text.push_str(&format!(
                "  {{ name = {name:?}, addr = \"{addr}\"{weight} }},\n"
            ));
        }
        text.push_str("]\n");
        text
    }

    /// Starts herdsman in-process on 127.0.0.1:0.
    pub fn start(self) -> Proxy {
        Proxy::start(&self.toml("127.0.0.1:0"))
    }

    /// Starts the binary (`herdsman run`, output discarded) on a free port; returns the process
    /// and the address it accepts connections on, once it does.
    pub fn start_binary(self) -> (ChildGuard, SocketAddr) {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let path = write_temp("run.toml", &self.toml(&addr.to_string()));
        let child = run_binary_with(&path);
        assert!(
            wait_listening(addr, Duration::from_secs(10)),
            "herdsman run is not listening on {addr}"
        );
        (child, addr)
    }
}

/// herdsman running in this process. Dropping it stops it (bounded wait).
pub struct Proxy {
    server: Option<herdsman::Server>,
    /// Where the "web" listener accepts connections.
    pub addr: SocketAddr,
}

impl Proxy {
    pub fn start(toml: &str) -> Proxy {
        let config = herdsman::Config::from_toml(toml, "test")
            .unwrap_or_else(|e| panic!("config rejected: {e:?}\n{toml}"));
        let server = herdsman::Server::start(config).expect("herdsman starts");
        let addr = server
            .listener_addr("web")
            .expect("listener \"web\" has an address");
        assert_ne!(addr.port(), 0, "listener_addr must give the real port");
        Proxy {
            server: Some(server),
            addr,
        }
    }

    pub fn connect(&self) -> Conn {
        Conn::connect(self.addr)
    }

    /// The running server, to read its counters or its admin address.
    pub fn server(&self) -> &herdsman::Server {
        self.server.as_ref().expect("running")
    }

    /// GET `path` on a new connection that asks to be closed after the response.
    pub fn get(&self, path: &str) -> Response {
        let mut conn = self.connect();
        conn.roundtrip(&get_request(path, "Connection: close\r\n"))
    }

    /// Begins a graceful stop.
    pub fn stop(&self) {
        self.server.as_ref().expect("running").stop();
    }

    /// Calls `Server::wait` on another thread; true if it returned within `timeout`.
    pub fn wait_stopped(mut self, timeout: Duration) -> bool {
        let server = self.server.take().expect("running");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            server.wait();
            let _ = tx.send(());
        });
        rx.recv_timeout(timeout).is_ok()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        // On another thread, so that a panic or hang in stop/wait cannot abort or block the
        // test (a panic while unwinding would abort the whole test binary).
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            server.stop();
            server.wait();
            let _ = tx.send(());
        });
        let stopped = rx.recv_timeout(Duration::from_secs(15)).is_ok();
        if !stopped && !thread::panicking() {
            panic!("herdsman did not stop within 15 s of Server::stop");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The binary

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_herdsman")
}

/// Writes `text` to a fresh file under cargo's temporary directory for integration tests
/// (`target/tmp`, emptied by `cargo clean`, rather than leaving files in /tmp) and returns its
/// path.
pub fn write_temp(name: &str, text: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("herdsman-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{n}-{name}"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts `herdsman run -c path` (output discarded) and returns at once.
pub fn run_binary_with(path: &Path) -> ChildGuard {
    run_binary_with_env(path, &[])
}

/// Like [`run_binary_with`], with `env` added to the inherited environment (e.g. a
/// `NOTIFY_SOCKET` for a test that plays systemd).
pub fn run_binary_with_env(path: &Path, env: &[(&str, &std::ffi::OsStr)]) -> ChildGuard {
    spawn_run(path, env, Stdio::null())
}

/// Like [`run_binary_with_env`], with herdsman's own log (stderr) written to `log`, for a test
/// that reads what it logged.
pub fn run_binary_logged(path: &Path, env: &[(&str, &std::ffi::OsStr)], log: &Path) -> ChildGuard {
    let file = std::fs::File::create(log).expect("the log file");
    spawn_run(path, env, Stdio::from(file))
}

fn spawn_run(path: &Path, env: &[(&str, &std::ffi::OsStr)], stderr: Stdio) -> ChildGuard {
    let child = Command::new(binary())
        .args(["run", "-c", path.to_str().unwrap()])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn herdsman run");
    ChildGuard(child)
}

/// Runs the binary to completion with a timeout; returns (exit code, stdout + stderr).
pub fn run_binary(args: &[&str]) -> (Option<i32>, String) {
    let child = Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn herdsman");
    let mut child = ChildGuard(child);
    let status = child
        .wait_timeout(Duration::from_secs(20))
        .unwrap_or_else(|| {
            panic!("herdsman {args:?} did not exit within 20 s");
        });
    let mut out = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    (status.code(), out)
}

/// A child process that is killed when dropped.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// Waits for exit up to `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.0.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.0.id());
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The pid serving the admin API at `admin`, asked until it answers (for up to 10 s): the admin
/// listener opens after the proxy's, so on a busy machine it may not answer at once.
pub fn serving_pid(admin: SocketAddr) -> Option<u64> {
    let mut pid = None;
    eventually(Duration::from_secs(10), || {
        pid = workers(admin).and_then(|json| json["pid"].as_u64());
        pid.is_some()
    });
    pid
}

/// `GET /api/workers` at `admin`, once; `None` when it does not answer with JSON.
pub fn workers(admin: SocketAddr) -> Option<serde_json::Value> {
    let mut conn = Conn::try_connect(admin).ok()?;
    conn.set_read_timeout(Duration::from_secs(2));
    conn.try_send(&admin_get_request("/api/workers")).ok()?;
    let response = conn.read_response(false).ok()?;
    serde_json::from_str(&response.body_text()).ok()
}

/// The pid of the process that took over from `old` at `admin` (asked for up to 15 s), guarded
/// so that it is killed should the test fail before stopping it.
pub fn successor_of(admin: SocketAddr, old: u64) -> Successor {
    let mut pid = None;
    eventually(Duration::from_secs(15), || {
        pid = workers(admin)
            .and_then(|json| json["pid"].as_u64())
            .filter(|&pid| pid != old);
        pid.is_some()
    });
    let pid = pid.unwrap_or_else(|| panic!("no new process took over from pid {old}"));
    // Its admin API answers before it handles signals (see `Binary::start`).
    for signal in [libc::SIGHUP, libc::SIGUSR2] {
        assert!(wait_pid_catches(
            pid as u32,
            signal,
            Duration::from_secs(10)
        ));
    }
    Successor(pid as libc::pid_t)
}

/// `herdsman run` (the binary) with listener "web" and the admin API on ports of their own, in
/// front of `backend`, with `top_keys` (lines such as `shutdown_grace = "1s"`) added.
pub struct Binary {
    pub process: ChildGuard,
    /// Where listener "web" accepts connections.
    pub web: SocketAddr,
    /// Where the admin API listens.
    pub admin: SocketAddr,
    /// Its config file.
    pub path: PathBuf,
}

impl Binary {
    pub fn start(backend: &Mock, top_keys: &str) -> Binary {
        let (web, admin): (SocketAddr, SocketAddr) = (
            format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        );
        let config = format!(
            "workers = 2\n{top_keys}\n[[listener]]\nname = \"web\"\nbind = \"{web}\"\npool = \"app\"\n\
             [admin]\nbind = \"{admin}\"\n\
             [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
            backend.addr
        );
        let path = write_temp("binary.toml", &config);
        let process = run_binary_with(&path);
        assert!(wait_listening(web, Duration::from_secs(10)));
        assert_eq!(serving_pid(admin), Some(u64::from(process.0.id())));
        // It listens before it handles signals: a SIGHUP or SIGUSR2 sent between would end it.
        for signal in [libc::SIGHUP, libc::SIGUSR2] {
            assert!(wait_pid_catches(
                process.0.id(),
                signal,
                Duration::from_secs(10)
            ));
        }
        Binary {
            process,
            web,
            admin,
            path,
        }
    }

    pub fn pid(&self) -> u64 {
        u64::from(self.process.0.id())
    }

    /// Applies `edit` to the config file's text, sends SIGHUP, and waits (up to 10 s) until the
    /// reload has been applied.
    pub fn reload(&self, edit: impl FnOnce(String) -> String) {
        let text = std::fs::read_to_string(&self.path).unwrap();
        std::fs::write(&self.path, edit(text)).unwrap();
        let before = self.reloads();
        self.process.signal(libc::SIGHUP);
        assert!(
            eventually(Duration::from_secs(10), || self.reloads() > before),
            "the reload was not applied"
        );
    }

    /// Reloads applied so far, as `/metrics` counts them.
    fn reloads(&self) -> u64 {
        let metrics = Conn::connect(self.admin)
            .roundtrip(&admin_get_request("/metrics"))
            .body_text();
        metrics
            .lines()
            .find_map(|line| line.strip_prefix("herdsman_config_reloads_total "))
            .and_then(|count| count.trim().parse().ok())
            .expect("herdsman_config_reloads_total in /metrics")
    }

    /// Sends SIGUSR2 and returns the process that took over.
    pub fn upgrade(&self) -> Successor {
        self.process.signal(libc::SIGUSR2);
        successor_of(self.admin, self.pid())
    }
}

/// Asserts that a new connection to `web` is served.
pub fn serves(web: SocketAddr) {
    let response = Conn::connect(web).roundtrip(&get_request("/", "Connection: close\r\n"));
    assert_eq!(response.status(), 200);
}

/// A process a binary upgrade started: not this test's child, so not a `ChildGuard`; killed if
/// the test ends before stopping it.
pub struct Successor(pub libc::pid_t);

impl Successor {
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the pid of a process this test's herdsman started.
        let rc = unsafe { libc::kill(self.0, signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.0);
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a process this test's herdsman started.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// Waits until something accepts connections at `addr`.
pub fn wait_listening(addr: SocketAddr, timeout: Duration) -> bool {
    eventually(timeout, || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
    })
}

/// Waits until the process `child` catches `signal` (Linux: its `SigCgt` mask in /proc). A
/// signal whose default action ends the process (SIGUSR1, SIGHUP) must not be sent before then.
pub fn wait_signal_caught(child: &ChildGuard, signal: libc::c_int, timeout: Duration) -> bool {
    wait_pid_catches(child.0.id(), signal, timeout)
}

/// [`wait_signal_caught`] for any process, by pid.
pub fn wait_pid_catches(pid: u32, signal: libc::c_int, timeout: Duration) -> bool {
    let status = format!("/proc/{pid}/status");
    eventually(timeout, || {
        let Ok(text) = std::fs::read_to_string(&status) else {
            return false;
        };
        text.lines()
            .find_map(|line| line.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
    })
}
