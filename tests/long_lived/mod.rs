//! Long-lived exchanges through herdsman, for the tests of what a stop, a binary upgrade or a
//! reload does to connections that outlive `shutdown_grace`: a download, a stream of
//! server-sent events and an upgraded (WebSocket-like) connection that echoes both ways, each
//! spread over a [`Pace`] by one mock backend, each checked byte for byte by its client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::common::{
    get_request, Binary, Conn, Flow, Gate, Head, Mock, Pattern, PatternCheck, IO_TIMEOUT,
};

/// How a long-lived exchange is spread out: `steps` pieces (download pieces, events, echoes),
/// `every` apart.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub steps: usize,
    pub every: Duration,
}

impl Pace {
    /// How long an exchange takes, near enough.
    pub fn span(&self) -> Duration {
        self.every * self.steps as u32
    }

    fn download_len(&self) -> u64 {
        (self.steps * DOWNLOAD_PIECE) as u64
    }
}

/// Bytes of the download sent per step.
const DOWNLOAD_PIECE: usize = 256 * 1024;
/// The download's content (see `Pattern`).
const DOWNLOAD_SEED: u64 = 14;
/// What the client of the upgraded connection sends last; echoed, after which the server closes.
const CLOSE: &[u8] = b"CLOSE\n";

/// The backend of all three: `GET /download` (a Content-Length body sent a piece per step),
/// `GET /events` (a chunked `text/event-stream`, an event per step), `GET /socket` with
/// `Upgrade: websocket` (101, then every byte echoed until the client sends [`CLOSE`]); anything
/// else gets 200 `ok` at once.
pub fn backend(pace: Pace) -> Mock {
    Mock::start(move |ex| {
        ex.read_body()?;
        match ex.head.target() {
            "/download" => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                    pace.download_len()
                );
                ex.write(head.as_bytes())?;
                let mut pattern = Pattern::new(DOWNLOAD_SEED);
                for _ in 0..pace.steps {
                    pattern.write_in_pieces(
                        DOWNLOAD_PIECE as u64,
                        DOWNLOAD_PIECE,
                        &mut |piece| ex.write(piece),
                    )?;
                    thread::sleep(pace.every);
                }
                Ok(Flow::KeepAlive)
            }
            "/events" => {
                ex.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                      Transfer-Encoding: chunked\r\n\r\n",
                )?;
                for i in 0..pace.steps {
                    let event = event(i);
                    ex.write(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())?;
                    thread::sleep(pace.every);
                }
                ex.write(b"0\r\n\r\n")?;
                Ok(Flow::KeepAlive)
            }
            "/socket" if ex.head.has_token("connection", "upgrade") => {
                ex.write(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                      Connection: Upgrade\r\n\r\n",
                )?;
                let mut seen = Vec::new();
                loop {
                    let bytes = ex.conn.read_some()?;
                    if bytes.is_empty() {
                        return Ok(Flow::Close);
                    }
                    ex.write(&bytes)?;
                    seen.extend_from_slice(&bytes);
                    if seen.ends_with(CLOSE) {
                        return Ok(Flow::Close);
                    }
                }
            }
            _ => {
                ex.respond(200, &[], b"ok")?;
                Ok(Flow::KeepAlive)
            }
        }
    })
}

fn event(i: usize) -> String {
    format!("id: {i}\ndata: event {i}\n\n")
}

/// One client's exchange, run on a thread of its own.
pub struct LongLived {
    started: Gate,
    done: JoinHandle<Result<(), String>>,
}

impl LongLived {
    /// `GET /download` through `proxy`: every byte, in order, and nothing more.
    pub fn download(proxy: SocketAddr, pace: Pace) -> LongLived {
        LongLived::run(proxy, move |conn, started| {
            let head = send_for_head(conn, &get_request("/download", ""), 200, "download")?;
            started.open();
            let mut check = PatternCheck::new(DOWNLOAD_SEED);
            let read =
                conn.read_body_with(head.response_framing(false), &mut |piece| check.feed(piece));
            let expected = pace.download_len();
            match (read, check.mismatch) {
                (Ok(()), None) if check.received == expected => Ok(()),
                (read, mismatch) => Err(format!(
                    "download: {} of {expected} bytes, first wrong byte at {mismatch:?}, then {read:?}",
                    check.received
                )),
            }
        })
    }

    /// `GET /events` through `proxy`: every event, in order, then the end of the stream.
    pub fn events(proxy: SocketAddr, pace: Pace) -> LongLived {
        LongLived::run(proxy, move |conn, started| {
            let request = get_request("/events", "Accept: text/event-stream\r\n");
            let head = send_for_head(conn, &request, 200, "events")?;
            let mut received = String::new();
            let read = conn.read_body_with(head.response_framing(false), &mut |piece| {
                received.push_str(&String::from_utf8_lossy(piece));
                started.open();
            });
            let expected: String = (0..pace.steps).map(event).collect();
            if read.is_ok() && received == expected {
                return Ok(());
            }
            let events = received.matches("data: ").count();
            Err(format!(
                "events: {events} of {} events, then {read:?}",
                pace.steps
            ))
        })
    }

    /// `GET /socket` with `Upgrade: websocket` through `proxy`: after the 101, a message a step
    /// each echoed back whole, then [`CLOSE`] from the client, echoed, and the connection's end.
    pub fn socket(proxy: SocketAddr, pace: Pace) -> LongLived {
        LongLived::run(proxy, move |conn, started| {
            let request = get_request("/socket", "Connection: Upgrade\r\nUpgrade: websocket\r\n");
            send_for_head(conn, &request, 101, "socket")?;
            for i in 0..pace.steps {
                let message = format!("message {i}\n");
                let echoed = conn
                    .try_send(message.as_bytes())
                    .and_then(|()| conn.read_exact_vec(message.len()));
                match echoed {
                    Ok(echo) if echo == message.as_bytes() => started.open(),
                    other => {
                        return Err(format!(
                            "socket: {i} of {} echoes, then {other:?}",
                            pace.steps
                        ))
                    }
                }
                thread::sleep(pace.every);
            }
            let closed = conn
                .try_send(CLOSE)
                .and_then(|()| conn.read_exact_vec(CLOSE.len()));
            match closed {
                Ok(echo) if echo == CLOSE => {}
                other => return Err(format!("socket: no echo of the close: {other:?}")),
            }
            // The server closes after the close; the client closes its side in turn.
            match conn.read_some() {
                Ok(rest) if rest.is_empty() => Ok(()),
                other => Err(format!("socket: not closed after the close: {other:?}")),
            }
        })
    }

    fn run(
        proxy: SocketAddr,
        exchange: impl FnOnce(&mut Conn, &Gate) -> Result<(), String> + Send + 'static,
    ) -> LongLived {
        let started = Gate::new();
        let gate = started.clone();
        let done = thread::spawn(move || {
            let mut conn = Conn::try_connect(proxy).map_err(|e| e.to_string())?;
            exchange(&mut conn, &gate)
        });
        LongLived { started, done }
    }

    /// Waits until the first bytes of the exchange came back (false after `IO_TIMEOUT`).
    pub fn wait_started(&self) -> bool {
        self.started.wait(IO_TIMEOUT)
    }

    /// Waits for the exchange's end: `Ok` when it was complete and exact, else what went wrong.
    pub fn finish(self) -> Result<(), String> {
        self.done
            .join()
            .unwrap_or_else(|_| Err("the client panicked".to_string()))
    }
}

/// Sends `request` and reads the response head, which must have `status`; `what` names the
/// exchange in the error otherwise.
fn send_for_head(conn: &mut Conn, request: &[u8], status: u16, what: &str) -> Result<Head, String> {
    conn.try_send(request).map_err(|e| format!("{what}: {e}"))?;
    match conn.read_head() {
        Ok(Some(head)) if head.status() == status => Ok(head),
        Ok(Some(head)) => Err(format!("{what}: {}", head.first_line)),
        Ok(None) => Err(format!("{what}: closed before a response")),
        Err(error) => Err(format!("{what}: {error}")),
    }
}

/// Starts all three at `proxy` and waits until each is under way.
pub fn start_all(proxy: SocketAddr, pace: Pace) -> Vec<LongLived> {
    let all = vec![
        LongLived::download(proxy, pace),
        LongLived::events(proxy, pace),
        LongLived::socket(proxy, pace),
    ];
    for exchange in &all {
        assert!(exchange.wait_started(), "an exchange did not start");
    }
    all
}

/// Waits for all of `exchanges`; each one's outcome, in order.
pub fn finish_all(exchanges: Vec<LongLived>) -> Vec<Result<(), String>> {
    exchanges.into_iter().map(LongLived::finish).collect()
}

/// Twenty steps half a second apart: 10 s, longer than any bound the tests set.
pub const OUTLIVES_ANY_BOUND: Pace = Pace {
    steps: 20,
    every: Duration::from_millis(500),
};

/// Starts all three exchanges through `binary`, then `stop`s it (a signal, an upgrade…), and
/// asserts that they were cut short and its process exited, all within 6 s of the stop (`why`:
/// the bound at work, for the messages). Returns what `stop` returned.
pub fn assert_cut_short<T>(binary: &mut Binary, why: &str, stop: impl FnOnce(&Binary) -> T) -> T {
    let exchanges = start_all(binary.web, OUTLIVES_ANY_BOUND);
    let stopped = Instant::now();
    let returned = stop(binary);
    let outcomes = finish_all(exchanges);
    assert!(
        outcomes.iter().all(Result::is_err),
        "{why} did not end them: {outcomes:?}"
    );
    assert!(
        binary
            .process
            .wait_timeout(Duration::from_secs(5))
            .is_some(),
        "the process did not exit ({why})"
    );
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "ended {took:?} after the stop ({why})"
    );
    returned
}
