//! A raw HTTP/1.1 connection with a read buffer, used by the test clients and by the mock
//! servers, every read bounded by [`IO_TIMEOUT`](super::IO_TIMEOUT); and the requests tests send.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::heads::{Framing, Head, Response};
use super::IO_TIMEOUT;

/// A TCP connection with a read buffer, speaking raw HTTP/1.1 bytes. Used by test clients and
/// by the mock servers.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    /// Counts every byte read, when set (mock servers use it).
    pub(super) received: Option<Arc<AtomicUsize>>,
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

    pub(super) fn buffered(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads more bytes into the buffer; 0 at end of stream.
    pub(super) fn fill(&mut self) -> io::Result<usize> {
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
    get_request_to("test.local", path, extra)
}

/// A GET request with `Host: host` and the given extra header lines (each ending in CRLF).
pub fn get_request_to(host: &str, path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n").into_bytes()
}

/// `GET path` of the admin API as `herdsman ctl` asks it (the API answers to `localhost`, not
/// to any name), on a connection closed after the answer.
pub fn admin_get_request(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").into_bytes()
}
