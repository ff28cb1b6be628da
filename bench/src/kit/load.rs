//! Closed-loop client load that classifies every failure (`soak`, `fd-flood`): connections to the
//! proxy, each sending `GET /` in a loop and reading each whole response, on one thread of this
//! program (a current-thread tokio runtime: the client shares the machine's two CPUs with the
//! proxy and the servers, so it is kept cheap — a static request, one buffer per connection, the
//! head parsed with httparse, two clock reads a request). Its `Shape` says whether each
//! connection is kept alive or carries one request (`Connection: close`, a new connection each),
//! whether a request that meets a keep-alive connection's idle close is sent again on a new one
//! (as browsers and curl do, and counted apart), and whether each answer's latency is kept.
//!
//! Every request that does not end in a whole 2xx response is a failure, classified: a status
//! (with the whole answer read), or a cause — the connection could not be made (refused, or failed
//! otherwise), it was closed or reset before a whole response head ("closed without an answer"),
//! it was cut inside the body ("cut mid-response"), no answer came in time, or the answer was not
//! HTTP/1.1 the client can read. A connection is made again after any close; one that refuses is
//! tried again after a pause. When told to stop, each connection finishes the request it has
//! sent and closes, so that no answer the proxy gave is left uncounted.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The request every keep-alive connection sends, again and again.
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
/// The one request of a connection of `Shape::new_connection_each`.
const REQUEST_AND_CLOSE: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
/// A connect taking longer fails.
const CONNECT_LIMIT: Duration = Duration::from_secs(3);
/// A request whose whole answer has not come after this long fails as a timeout.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);
/// After a failed connect, before the next: a proxy that refuses is not hammered in a loop.
const PAUSE_AFTER_CONNECT_FAILURE: Duration = Duration::from_millis(50);
/// Read buffer per connection: a response head must fit (answers here are under 300 bytes).
const READ_BUFFER: usize = 4096;

/// Why a request got no whole answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    ConnectRefused,
    ConnectFailed,
    /// Closed (FIN) before a whole response head.
    ClosedWithoutAnswer,
    /// Reset (or another socket error) before a whole response head.
    Reset,
    /// Closed or reset after the head, inside the body.
    CutMidResponse,
    Timeout,
    /// Not a response this client reads (malformed, chunked, longer than announced).
    BadResponse,
}

impl Cause {
    pub const ALL: [Cause; 7] = [
        Cause::ConnectRefused,
        Cause::ConnectFailed,
        Cause::ClosedWithoutAnswer,
        Cause::Reset,
        Cause::CutMidResponse,
        Cause::Timeout,
        Cause::BadResponse,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Cause::ConnectRefused => "connect refused",
            Cause::ConnectFailed => "connect failed",
            Cause::ClosedWithoutAnswer => "closed without an answer",
            Cause::Reset => "reset without an answer",
            Cause::CutMidResponse => "cut mid-response",
            Cause::Timeout => "timeout",
            Cause::BadResponse => "bad response",
        }
    }

    /// Whether the client connection ended before any whole response head: what "client
    /// connections closed without an answer" counts.
    pub fn closed_without_answer(self) -> bool {
        matches!(self, Cause::ClosedWithoutAnswer | Cause::Reset)
    }
}

/// How a failed request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failed {
    /// A whole answer that was not 2xx.
    Status(u16),
    Cause(Cause),
}

impl Failed {
    pub fn label(self) -> String {
        match self {
            Failed::Status(status) => status.to_string(),
            Failed::Cause(cause) => cause.label().to_string(),
        }
    }
}

/// One failed request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Failure {
    /// When it ended, after the load began.
    pub at: Duration,
    pub what: Failed,
    /// From sending the request (or starting the connect) to its end.
    pub latency: Duration,
}

/// What the load saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Requests that got a whole answer, whatever its status.
    pub answered: u64,
    /// Of those, 2xx.
    pub ok: u64,
    /// Every status answered, with its count.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests without a whole answer, by cause.
    pub causes: BTreeMap<Cause, u64>,
    /// Every failed request, in the order each connection met them.
    pub failures: Vec<Failure>,
    /// 2xx answers and failures in each second after the load began.
    pub ok_per_second: Vec<u64>,
    pub failed_per_second: Vec<u64>,
    pub connections_opened: u64,
    /// Requests that met a kept-alive connection's idle close before any byte of an answer and
    /// were sent again on a new connection (`Shape::retry_idle_close`); each is counted once more,
    /// as answered or failed, by how the second try ended.
    pub retried: u64,
    /// Every 2xx answer's time and latency, in the order each connection met them, when the
    /// shape keeps them (`Shape::keep_latencies`).
    pub latencies: Vec<Latency>,
    /// From the start to the last connection's end.
    pub seconds: f64,
}

/// When one 2xx answer came and how long it took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// When it ended, after the load began.
    pub at: Duration,
    /// From sending the request (or, for a new connection each, starting the connect) to the end
    /// of its answer.
    pub took: Duration,
}

/// How the load's connections behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    /// One request per connection, asking the proxy to close after it (`Connection: close`), and
    /// a new connection for the next: each latency then includes the connect.
    pub new_connection_each: bool,
    /// A request sent on a kept-alive connection that the proxy closes (or resets) before any byte
    /// of an answer is sent again once on a new connection, as browsers and curl do with an idle
    /// connection's close (RFC 9112 §9.3.1): counted in `retried`, not as a failure.
    pub retry_idle_close: bool,
    /// Keep every 2xx answer's time and latency.
    pub keep_latencies: bool,
}

impl Tally {
    /// Every request: answered or not, connects that failed included.
    pub fn requests(&self) -> u64 {
        self.answered + self.causes.values().sum::<u64>()
    }

    pub fn failed(&self) -> u64 {
        self.failures.len() as u64
    }

    /// Requests whose connection closed or was reset before a whole response head.
    pub fn closed_without_answer(&self) -> u64 {
        self.causes
            .iter()
            .filter(|(cause, _)| cause.closed_without_answer())
            .map(|(_, count)| count)
            .sum()
    }

    pub fn cause(&self, cause: Cause) -> u64 {
        self.causes.get(&cause).copied().unwrap_or(0)
    }

    fn answer(&mut self, began: Instant, sent: Instant, status: u16, keep_latency: bool) {
        self.answered += 1;
        *self.statuses.entry(status).or_default() += 1;
        if (200..300).contains(&status) {
            self.ok += 1;
            bump(&mut self.ok_per_second, began);
            if keep_latency {
                let now = Instant::now();
                self.latencies.push(Latency {
                    at: now - began,
                    took: now - sent,
                });
            }
        } else {
            self.fail(began, sent, Failed::Status(status));
        }
    }

    fn fail(&mut self, began: Instant, sent: Instant, what: Failed) {
        if let Failed::Cause(cause) = what {
            *self.causes.entry(cause).or_default() += 1;
        }
        let now = Instant::now();
        self.failures.push(Failure {
            at: now - began,
            what,
            latency: now - sent,
        });
        bump(&mut self.failed_per_second, began);
    }

    fn merge(&mut self, other: Tally) {
        self.answered += other.answered;
        self.ok += other.ok;
        for (status, count) in other.statuses {
            *self.statuses.entry(status).or_default() += count;
        }
        for (cause, count) in other.causes {
            *self.causes.entry(cause).or_default() += count;
        }
        self.failures.extend(other.failures);
        add_each(&mut self.ok_per_second, &other.ok_per_second);
        add_each(&mut self.failed_per_second, &other.failed_per_second);
        self.connections_opened += other.connections_opened;
        self.retried += other.retried;
        self.latencies.extend(other.latencies);
    }
}

/// One more in the second that is now.
fn bump(per_second: &mut Vec<u64>, began: Instant) {
    let second = began.elapsed().as_secs() as usize;
    if per_second.len() <= second {
        per_second.resize(second + 1, 0);
    }
    per_second[second] += 1;
}

fn add_each(sums: &mut Vec<u64>, more: &[u64]) {
    if sums.len() < more.len() {
        sums.resize(more.len(), 0);
    }
    for (sum, value) in sums.iter_mut().zip(more) {
        *sum += value;
    }
}

/// Counts so far, for progress lines while the load runs.
#[derive(Debug, Default)]
pub struct Live {
    pub answered: AtomicU64,
    pub failed: AtomicU64,
}

/// The load at work. `finish` stops it and returns what it saw.
pub struct Load {
    /// When the connections were started: every time in the run is counted from it.
    pub began: Instant,
    /// The same moment by the wall clock, to place the proxy's log lines in the run.
    pub began_wall: SystemTime,
    pub live: Arc<Live>,
    stop: Arc<AtomicBool>,
    /// Taken by `finish`.
    thread: Option<JoinHandle<anyhow::Result<Tally>>>,
}

impl Load {
    /// Starts `connections` keep-alive connections to 127.0.0.1:`port`, every failure counted as
    /// one, no latency kept.
    pub fn start(port: u16, connections: u32) -> anyhow::Result<Load> {
        Load::start_shaped(port, connections, Shape::default())
    }

    /// Starts `connections` connections of `shape` to 127.0.0.1:`port`.
    pub fn start_shaped(port: u16, connections: u32, shape: Shape) -> anyhow::Result<Load> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(Live::default());
        let began = Instant::now();
        let began_wall = SystemTime::now();
        let (task_stop, task_live) = (Arc::clone(&stop), Arc::clone(&live));
        let thread = thread::Builder::new()
            .name("soak-load".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(async move {
                    let mut tasks = tokio::task::JoinSet::new();
                    for _ in 0..connections {
                        tasks.spawn(connection(
                            addr,
                            shape,
                            began,
                            Arc::clone(&task_stop),
                            Arc::clone(&task_live),
                        ));
                    }
                    let mut total = Tally::default();
                    while let Some(joined) = tasks.join_next().await {
                        total.merge(joined.context("a load connection's task")?);
                    }
                    total.seconds = began.elapsed().as_secs_f64();
                    Ok(total)
                })
            })
            .context("starting the load's thread")?;
        Ok(Load {
            began,
            began_wall,
            live,
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the load (each connection after the request it has sent) and returns what it saw.
    pub fn finish(mut self) -> anyhow::Result<Tally> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(tally)) => tally,
            _ => bail!("the load's thread panicked"),
        }
    }
}

impl Drop for Load {
    /// A run that ends early stops its load too (the thread finishes on its own).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One connection's life: connect, requests until a close, again, until told to stop.
async fn connection(
    addr: SocketAddr,
    shape: Shape,
    began: Instant,
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
) -> Tally {
    let mut tally = Tally::default();
    let mut buffer = vec![0u8; READ_BUFFER];
    let request = if shape.new_connection_each {
        REQUEST_AND_CLOSE
    } else {
        REQUEST
    };
    // A request that met an idle close, sent again first on the next connection: when it was
    // first sent, for its latency.
    let mut again: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) || again.is_some() {
        let attempt = again.unwrap_or_else(Instant::now);
        let mut stream = match tokio::time::timeout(CONNECT_LIMIT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => stream,
            failed => {
                let cause = match failed {
                    Ok(Err(e)) if e.kind() == ErrorKind::ConnectionRefused => Cause::ConnectRefused,
                    _ => Cause::ConnectFailed,
                };
                again = None;
                tally.fail(began, attempt, Failed::Cause(cause));
                live.failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(PAUSE_AFTER_CONNECT_FAILURE).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tally.connections_opened += 1;
        let mut reused = false;
        while !stop.load(Ordering::Relaxed) || again.is_some() {
            // A new connection each: the latency includes the connect.
            let sent = again
                .take()
                .or(shape.new_connection_each.then_some(attempt))
                .unwrap_or_else(Instant::now);
            let outcome =
                tokio::time::timeout(ANSWER_LIMIT, exchange(&mut stream, request, &mut buffer))
                    .await
                    .unwrap_or(Err(Cause::Timeout));
            match outcome {
                Ok(answer) => {
                    tally.answer(began, sent, answer.status, shape.keep_latencies);
                    live.answered.fetch_add(1, Ordering::Relaxed);
                    if !(200..300).contains(&answer.status) {
                        live.failed.fetch_add(1, Ordering::Relaxed);
                    }
                    if answer.close {
                        break;
                    }
                    reused = true;
                }
                Err(cause) if reused && shape.retry_idle_close && cause.closed_without_answer() => {
                    tally.retried += 1;
                    again = Some(sent);
                    break;
                }
                Err(cause) => {
                    tally.fail(began, sent, Failed::Cause(cause));
                    live.failed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
    }
    tally
}

/// A whole answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    status: u16,
    /// The server closes after it: `Connection: close`, HTTP/1.0, or a body that ends with the
    /// connection.
    close: bool,
}

/// How a response's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Length(usize),
    UntilClose,
}

/// A whole response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    /// Bytes of the head, blank line included.
    length: usize,
    status: u16,
    body: Body,
    close: bool,
}

/// `request` and its whole answer on `stream`.
async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buffer: &mut [u8],
) -> Result<Answer, Cause> {
    stream
        .write_all(request)
        .await
        .map_err(|e| before_head(&e))?;
    let mut filled = 0;
    let head = loop {
        let read = stream
            .read(&mut buffer[filled..])
            .await
            .map_err(|e| before_head(&e))?;
        if read == 0 {
            return Err(Cause::ClosedWithoutAnswer);
        }
        filled += read;
        if let Some(head) = parse_head(&buffer[..filled])? {
            break head;
        }
        if filled == buffer.len() {
            return Err(Cause::BadResponse);
        }
    };
    let mut body = filled - head.length;
    match head.body {
        Body::Length(length) => {
            while body < length {
                match stream.read(buffer).await {
                    Ok(0) | Err(_) => return Err(Cause::CutMidResponse),
                    Ok(read) => body += read,
                }
            }
            if body > length {
                // Bytes beyond the announced body, to a client that never pipelines.
                return Err(Cause::BadResponse);
            }
        }
        Body::UntilClose => loop {
            match stream.read(buffer).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => return Err(Cause::CutMidResponse),
            }
        },
    }
    Ok(Answer {
        status: head.status,
        close: head.close,
    })
}

/// What a socket error before the whole head means: the peer had closed (a write after its
/// close), or reset.
fn before_head(error: &std::io::Error) -> Cause {
    match error.kind() {
        ErrorKind::BrokenPipe | ErrorKind::UnexpectedEof => Cause::ClosedWithoutAnswer,
        _ => Cause::Reset,
    }
}

/// The response head at the start of `bytes`, once it is all there.
fn parse_head(bytes: &[u8]) -> Result<Option<Head>, Cause> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Cause::BadResponse),
    };
    let status = response.code.ok_or(Cause::BadResponse)?;
    let mut content_length = None;
    let mut close = response.version == Some(0);
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value).map_err(|_| Cause::BadResponse)?;
        if header.name.eq_ignore_ascii_case("content-length") {
            content_length = Some(value.trim().parse().map_err(|_| Cause::BadResponse)?);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Cause::BadResponse);
        } else if header.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    close = false;
                }
            }
        }
    }
    let body = match content_length {
        Some(length) => Body::Length(length),
        None => {
            close = true;
            Body::UntilClose
        }
    };
    Ok(Some(Head {
        length,
        status,
        body,
        close,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn heads_are_read_with_their_framing() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\nhello from s1\n";
        assert_eq!(
            parse_head(ok),
            Ok(Some(Head {
                length: ok.len() - 14,
                status: 200,
                body: Body::Length(14),
                close: false
            }))
        );
        assert_eq!(parse_head(&ok[..20]), Ok(None));
        let closing = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\nConnection: close\r\n\r\n";
        let head = parse_head(closing).unwrap().unwrap();
        assert_eq!((head.status, head.close), (502, true));
        let old = b"HTTP/1.0 200 OK\r\n\r\n";
        let head = parse_head(old).unwrap().unwrap();
        assert_eq!((head.body, head.close), (Body::UntilClose, true));
        let kept = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n";
        assert!(!parse_head(kept).unwrap().unwrap().close);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse_head(chunked), Err(Cause::BadResponse));
        assert_eq!(parse_head(b"SSH-2.0-x\r\n\r\n"), Err(Cause::BadResponse));
    }

    /// A server for one connection that reads a request per entry of `answers` and sends the
    /// entry's bytes, or closes at `None`; it closes after the last entry too. Either way nothing
    /// is left unread, so the close is a FIN, not a reset.
    fn serve(answers: Vec<Option<&'static [u8]>>) -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; REQUEST.len()];
            for answer in answers {
                if stream.read_exact(&mut request).is_err() {
                    return;
                }
                match answer {
                    Some(bytes) => stream.write_all(bytes).unwrap(),
                    None => return,
                }
            }
        });
        port
    }

    fn exchanges(port: u16, count: usize) -> Vec<Result<Answer, Cause>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let mut buffer = vec![0u8; READ_BUFFER];
            let mut outcomes = Vec::new();
            for _ in 0..count {
                outcomes.push(exchange(&mut stream, REQUEST, &mut buffer).await);
            }
            outcomes
        })
    }

    #[test]
    fn every_ending_of_an_exchange_is_told_apart() {
        let port = serve(vec![
            Some(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
            Some(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"),
            Some(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"),
        ]);
        let outcomes = exchanges(port, 3);
        assert_eq!(
            outcomes,
            vec![
                Ok(Answer {
                    status: 200,
                    close: false
                }),
                Ok(Answer {
                    status: 503,
                    close: false
                }),
                Err(Cause::CutMidResponse),
            ]
        );
        // A close before any byte of the answer.
        let port = serve(vec![
            Some(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            None,
        ]);
        let outcomes = exchanges(port, 2);
        assert_eq!(outcomes[1], Err(Cause::ClosedWithoutAnswer));
    }

    /// A server that answers `per_connection` requests on each connection and then closes it, a
    /// request that asked to close after its answer included, for tests of the shapes.
    fn serve_each(per_connection: usize) -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    for _ in 0..per_connection {
                        head.clear();
                        while !head.ends_with(b"\r\n\r\n") {
                            match stream.read(&mut byte) {
                                Ok(1) => head.push(byte[0]),
                                _ => return,
                            }
                        }
                        let close = head.windows(17).any(|w| w == b"Connection: close");
                        let answer: &[u8] = if close {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                        } else {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                        };
                        let _ = stream.write_all(answer);
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    #[test]
    fn an_idle_close_is_retried_once_and_counted_apart_when_the_shape_says_so() {
        let port = serve_each(2);
        let shape = Shape {
            retry_idle_close: true,
            keep_latencies: true,
            ..Shape::default()
        };
        let load = Load::start_shaped(port, 2, shape).unwrap();
        thread::sleep(Duration::from_millis(300));
        let tally = load.finish().unwrap();
        // Every third request on a connection meets the close and is sent again on a new one.
        assert!(tally.retried > 0, "{tally:?}");
        assert_eq!(tally.failed(), 0, "{tally:?}");
        assert!(tally.connections_opened >= tally.retried, "{tally:?}");
        assert_eq!(tally.latencies.len() as u64, tally.ok);
        assert!(tally
            .latencies
            .iter()
            .all(|l| l.took < Duration::from_secs(1)));
    }

    #[test]
    fn a_new_connection_each_sends_one_request_per_connection() {
        let port = serve_each(100);
        let shape = Shape {
            new_connection_each: true,
            ..Shape::default()
        };
        let load = Load::start_shaped(port, 2, shape).unwrap();
        thread::sleep(Duration::from_millis(300));
        let tally = load.finish().unwrap();
        assert!(tally.ok > 10, "{tally:?}");
        // One connection per answer; each of the two may have connected just as the stop came.
        assert!(
            (tally.ok..=tally.ok + 2).contains(&tally.connections_opened),
            "{tally:?}"
        );
        assert_eq!((tally.failed(), tally.retried), (0, 0), "{tally:?}");
        assert!(tally.latencies.is_empty());
    }

    #[test]
    fn the_load_counts_answers_failures_and_refusals() {
        // A server that answers two requests per connection and closes.
        let port = serve_each(2);
        let load = Load::start(port, 2).unwrap();
        thread::sleep(Duration::from_millis(300));
        let tally = load.finish().unwrap();
        assert!(tally.ok > 10, "{tally:?}");
        assert_eq!(tally.answered, tally.ok);
        // Every third request of a connection meets the close (a FIN or, when the request came
        // first, a reset).
        assert!(tally.closed_without_answer() > 0, "{tally:?}");
        assert_eq!(tally.closed_without_answer(), tally.failed());
        assert_eq!(tally.requests(), tally.ok + tally.failed());
        assert_eq!(tally.ok_per_second.iter().sum::<u64>(), tally.ok);

        // Nothing listens: every connect is refused.
        let port = crate::kit::process::free_port().unwrap();
        let load = Load::start(port, 1).unwrap();
        thread::sleep(Duration::from_millis(200));
        let tally = load.finish().unwrap();
        assert!(tally.cause(Cause::ConnectRefused) >= 2, "{tally:?}");
        assert_eq!(tally.answered, 0);
        assert!(tally
            .failures
            .iter()
            .all(|f| f.latency < Duration::from_secs(1)));
    }
}
