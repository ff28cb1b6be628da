//! Programmable mock backends on 127.0.0.1: each request handled by a closure, everything they
//! read recorded; and addresses where nothing listens.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::heads::Head;
use super::raw::{is_timeout, set_reset_on_close, Conn};
use super::sync::eventually;

/// How long a mock server waits on a silent connection before giving up on it.
const MOCK_IDLE: Duration = Duration::from_secs(30);

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

    /// After a 101: echoes the tunnel's bytes until the peer closes, then closes.
    pub fn echo_until_closed(&mut self) -> io::Result<Flow> {
        loop {
            let bytes = self.conn.read_some()?;
            if bytes.is_empty() {
                return Ok(Flow::Close);
            }
            self.write(&bytes)?;
        }
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

    /// Echoes each request's body, as [`Mock::echo`] does, first sending `100 Continue` to a
    /// request that expects one, as real servers do.
    pub fn continuing_echo() -> Mock {
        Mock::start(|ex| {
            if ex.head.has_token("expect", "100-continue") {
                ex.write(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            }
            let body = ex.read_body()?;
            ex.respond(200, &[], &body)?;
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

/// Sockets on this machine in TIME_WAIT whose remote end is `port` on 127.0.0.1 (/proc/net/tcp),
/// known by their local address: connections to a mock that herdsman closed first and holds for a
/// minute. A mock's port may have been another's a minute ago, so a test counts those that
/// appeared after it began ([`TimeWaits::new_since`]), not all of them.
pub struct TimeWaits {
    port: u16,
    earlier: Vec<String>,
}

impl TimeWaits {
    /// Those towards `port` now, for a later count of new ones.
    pub fn towards(port: u16) -> TimeWaits {
        TimeWaits {
            port,
            earlier: time_wait_local_ends(port),
        }
    }

    /// How many towards the port are in TIME_WAIT now that were not when this was made.
    pub fn new_since(&self) -> usize {
        time_wait_local_ends(self.port)
            .iter()
            .filter(|local| !self.earlier.contains(local))
            .count()
    }
}

fn time_wait_local_ends(port: u16) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(2) == Some(&remote.as_str()) && fields.get(3) == Some(&"06"))
                .then(|| fields[1].to_string())
        })
        .collect()
}
