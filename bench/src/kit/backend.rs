//! The benchmark backend: a lean HTTP/1.1 keep-alive server that answers every request with the same
//! 19-byte body. It must cost far less per request than the proxies put in front of it, so it runs
//! one current-thread runtime, writes precomputed response bytes, and answers a whole batch of
//! pipelined requests with one write.
//!
//! Two paths behave otherwise, for `slowloris`: `/big` answers with a 1 MiB body (written from one
//! static chunk, so a thousand slow readers cost no per-connection copy), and `/upload` answers
//! only once the whole request body has arrived, as an application that reads its input first
//! does (every other path answers as soon as the head is in, and skips the body). A third,
//! `server_status::STATUS_PATH`, answers with the connections accepted and requests answered so
//! far, in nginx's stub_status shape, so that `compare` counts the connections each proxy opens.
//!
//! How it answers can change while it serves (`Conduct`): at once (always, for the `backend`
//! subcommand), late, or failing fast with 500s — `gray`'s sick server, which runs this server on
//! a thread of the benchmark (`thread_server`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::kit::process::{start_own_server, Supervised};
use crate::kit::server_status::{Counters, OpenConnection, STATUS_PATH};
use crate::kit::thread_server::accept_loop;

/// The body every request gets; 19 bytes, so results compare with BENCHMARKING.md's figures.
pub const BODY: &[u8] = b"hello from bench!!\n";

const OK_KEEP_ALIVE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 19\r\n\r\nhello from bench!!\n";
/// For HTTP/1.0 clients that asked for keep-alive: they need to be told it is granted.
const OK_KEEP_ALIVE_10: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 19\r\nConnection: keep-alive\r\n\r\nhello from bench!!\n";
/// The same answer, closing the connection.
pub const OK_CLOSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 19\r\nConnection: close\r\n\r\nhello from bench!!\n";
/// The body of `/big`, and the heads announcing it (the length is spelled out; a test checks it).
pub const BIG_BODY_LEN: usize = 1 << 20;
const BIG_KEEP_ALIVE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n";
const BIG_KEEP_ALIVE_10: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nConnection: keep-alive\r\n\r\n";
const BIG_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nConnection: close\r\n\r\n";
/// `/big`'s body is this chunk, written again and again.
static BIG_CHUNK: [u8; 64 * 1024] = [b'x'; 64 * 1024];
/// The small answer's failing counterpart, for a server failing fast (`Answering::Failing`): the
/// same body, status 500.
const FAILED_KEEP_ALIVE: &[u8] =
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 19\r\n\r\nhello from bench!!\n";
const FAILED_KEEP_ALIVE_10: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: \
    19\r\nConnection: keep-alive\r\n\r\nhello from bench!!\n";
const FAILED_CLOSE: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: \
    19\r\nConnection: close\r\n\r\nhello from bench!!\n";
/// Paths that do not get the small fixed answer.
const BIG_PATH: &str = "/big";
const UPLOAD_PATH: &str = "/upload";

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const NOT_IMPLEMENTED: &[u8] =
    b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Read buffer per connection; also the largest request head accepted.
const READ_BUFFER: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;

/// The listen queue: when a proxy opens a thousand server connections at once (c=1000), a short
/// queue overflows and the kernel drops SYNs, which the proxy's kernel retries after a second —
/// a one-second stall that measures the backend, not the proxy. tokio's own `bind` asks for 1024,
/// which the kernel caps at somaxconn (4096 here) — or lower on machines configured so. Every
/// server the benchmarks put behind a proxy listens with it (`servers`' nginx too).
pub const BACKLOG: u32 = 4096;

/// A listener on `listen` with the `BACKLOG` queue, for a server of the benchmarks that runs in a
/// tokio runtime (this backend, `cache`'s origin).
pub fn bind(listen: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if listen.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(listen)?;
    socket.listen(BACKLOG)
}

/// Starts this program's `backend` subcommand on 127.0.0.1:`port` as a supervised child, its log
/// in `dir`, and waits until it answers.
pub fn start(port: u16, dir: &Path) -> anyhow::Result<Supervised> {
    let listen = ["--listen".to_string(), format!("127.0.0.1:{port}")];
    start_own_server("backend", &listen, port, &dir.join("backend.log"))
}

/// The same, listening on 0.0.0.0:`port`, so that every loopback address reaches it: one backend
/// for a pool of many servers, each at an address of its own (`kit::loopback`).
pub fn start_for_every_address(port: u16, dir: &Path) -> anyhow::Result<Supervised> {
    let listen = ["--listen".to_string(), format!("0.0.0.0:{port}")];
    start_own_server("backend", &listen, port, &dir.join("backend.log"))
}

/// How a backend answers the requests it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answering {
    /// As soon as a request's head is in: the benchmarks' backend.
    AtOnce,
    /// This long after the requests read together came in, each on its own connection's time
    /// (a connection waits; the server does not): a slow server that still accepts and answers.
    Late(Duration),
    /// At once, with 500 and the same body: a server failing fast.
    Failing,
}

/// How a backend answers, changeable while it serves: read for every batch of requests, so a
/// change applies from the next request that comes in. One word: 0 at once, `u64::MAX` failing,
/// anything else the delay in µs. Relaxed ordering: nothing else is published with it.
#[derive(Debug, Default)]
pub struct Conduct(AtomicU64);

impl Conduct {
    const FAILING: u64 = u64::MAX;

    pub fn set(&self, answering: Answering) {
        let word = match answering {
            Answering::AtOnce => 0,
            Answering::Late(delay) => u64::try_from(delay.as_micros())
                .map_or(Self::FAILING - 1, |us| us.clamp(1, Self::FAILING - 1)),
            Answering::Failing => Self::FAILING,
        };
        self.0.store(word, Ordering::Relaxed);
    }

    pub fn get(&self) -> Answering {
        match self.0.load(Ordering::Relaxed) {
            0 => Answering::AtOnce,
            Self::FAILING => Answering::Failing,
            us => Answering::Late(Duration::from_micros(us)),
        }
    }
}

/// Serves until the process is killed; the compare command owns the process and stops it.
pub fn run(listen: SocketAddr) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("building the backend's runtime")?;
    runtime.block_on(async move {
        let listener = bind(listen).with_context(|| format!("binding {listen}"))?;
        eprintln!("herdsman-bench backend listening on {listen}");
        let counters = Arc::new(Counters::default());
        let conduct = Arc::new(Conduct::default());
        accept_loop(listener, |stream| {
            serve(stream, counters.accepted(), Arc::clone(&conduct))
        })
        .await;
        Ok(())
    })
}

/// One connection, answered as `conduct` says at the time each batch of requests is read; every
/// request counted in `connection`'s counters when its head is in.
pub async fn serve(mut stream: TcpStream, connection: OpenConnection, conduct: Arc<Conduct>) {
    let counters = connection.counters();
    let _ = stream.set_nodelay(true);
    let mut input = vec![0u8; READ_BUFFER];
    let mut filled = 0;
    let mut output = Vec::with_capacity(4096);
    let mut scanner = RequestScanner::default();
    loop {
        let n = match stream.read(&mut input[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        filled += n;
        let answering = conduct.get();
        scanner.failing = answering == Answering::Failing;
        // The scanner stops after the head of a `/big` response, whose body goes out here before
        // the requests after it are answered.
        let mut consumed = 0;
        loop {
            consumed += scanner.answer(&input[consumed..filled], &mut output);
            let answered = std::mem::take(&mut scanner.answered);
            counters.answered(answered);
            if let (Answering::Late(delay), 1..) = (answering, answered) {
                tokio::time::sleep(delay).await;
            }
            if std::mem::take(&mut scanner.status_due) {
                // Counted already, so the status includes its own request, as nginx's does.
                output.extend_from_slice(&status_response(counters, scanner.closing));
                continue;
            }
            if !output.is_empty() {
                if stream.write_all(&output).await.is_err() {
                    return;
                }
                output.clear();
            }
            if !scanner.big_body_due {
                break;
            }
            scanner.big_body_due = false;
            if write_big_body(&mut stream).await.is_err() {
                return;
            }
        }
        if scanner.closing {
            return;
        }
        input.copy_within(consumed..filled, 0);
        filled -= consumed;
        if filled == input.len() {
            // A head larger than the whole buffer: nothing a benchmark client sends.
            let _ = stream.write_all(BAD_REQUEST).await;
            return;
        }
    }
}

/// The answer to `STATUS_PATH`: the counts as text.
fn status_response(counters: &Counters, closing: bool) -> Vec<u8> {
    let body = counters.status_text();
    let connection = if closing { "Connection: close\r\n" } else { "" };
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{connection}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn write_big_body(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut left = BIG_BODY_LEN;
    while left > 0 {
        let n = left.min(BIG_CHUNK.len());
        stream.write_all(&BIG_CHUNK[..n]).await?;
        left -= n;
    }
    Ok(())
}

/// One response: its bytes (a whole response, or the head of `/big`), and what follows them.
#[derive(Debug, Clone, Copy)]
struct Answer {
    bytes: &'static [u8],
    /// The connection closes after it.
    close: bool,
    /// `/big`'s body is to be written after `bytes`.
    big_body: bool,
    /// The counts are to be written (by the caller, who has them) in place of `bytes`.
    status: bool,
}

impl Answer {
    fn small(bytes: &'static [u8], close: bool) -> Answer {
        Answer {
            bytes,
            close,
            big_body: false,
            status: false,
        }
    }
}

/// Finds the complete requests in a byte stream and queues one response per request, in order.
/// Survives requests split across reads at any byte, and skips Content-Length request bodies.
#[derive(Debug, Default)]
pub struct RequestScanner {
    /// Body bytes of the current request not yet received; skipped before the next head.
    body_remaining: u64,
    /// An `/upload` request's answer, held until its body has all arrived.
    after_body: Option<Answer>,
    /// Set once a response asked for the connection to close; nothing after it is answered.
    pub closing: bool,
    /// Set when the last bytes queued are the head of a `/big` response: its body must be written
    /// next, before anything else. `answer` queues nothing more while it is set.
    pub big_body_due: bool,
    /// Set when a `STATUS_PATH` request is next to be answered: the caller appends its answer
    /// and clears the flag. `answer` queues nothing more while it is set.
    pub status_due: bool,
    /// Requests answered (queued) since the caller last took this count.
    pub answered: u64,
    /// The small answer goes out as a 500 (`Answering::Failing`), set by the caller.
    pub failing: bool,
}

impl RequestScanner {
    /// Appends responses for every complete request in `input` to `output` and returns how many
    /// bytes of `input` were consumed; the rest is an incomplete head to keep for the next read.
    pub fn answer(&mut self, input: &[u8], output: &mut Vec<u8>) -> usize {
        let mut at = 0;
        while at < input.len() && !self.closing && !self.big_body_due && !self.status_due {
            if self.body_remaining > 0 {
                let skip = self.body_remaining.min((input.len() - at) as u64);
                self.body_remaining -= skip;
                at += skip as usize;
                if self.body_remaining == 0 {
                    if let Some(answer) = self.after_body.take() {
                        self.queue(answer, output);
                    }
                }
                continue;
            }
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut request = httparse::Request::new(&mut headers);
            match request.parse(&input[at..]) {
                Ok(httparse::Status::Complete(head_len)) => {
                    at += head_len;
                    let answer = self.response_for(&request);
                    // Refusals (400, 501) go out at once; a 200 to `/upload` waits.
                    let waits_for_body = request.path == Some(UPLOAD_PATH)
                        && self.body_remaining > 0
                        && answer.bytes.starts_with(b"HTTP/1.1 200");
                    if waits_for_body {
                        self.after_body = Some(answer);
                    } else {
                        self.queue(answer, output);
                    }
                }
                Ok(httparse::Status::Partial) => break,
                Err(_) => self.queue(Answer::small(BAD_REQUEST, true), output),
            }
        }
        at
    }

    fn queue(&mut self, answer: Answer, output: &mut Vec<u8>) {
        output.extend_from_slice(answer.bytes);
        self.closing |= answer.close;
        self.big_body_due |= answer.big_body;
        self.status_due |= answer.status;
        self.answered += 1;
    }

    fn response_for(&mut self, request: &httparse::Request) -> Answer {
        let http10 = request.version == Some(0);
        let mut keep_alive = !http10;
        for header in request.headers.iter() {
            if header.name.eq_ignore_ascii_case("content-length") {
                let parsed = std::str::from_utf8(header.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok());
                match parsed {
                    Some(length) => self.body_remaining = length,
                    None => return Answer::small(BAD_REQUEST, true),
                }
            } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                // Chunked uploads are not part of any benchmark here.
                return Answer::small(NOT_IMPLEMENTED, true);
            } else if header.name.eq_ignore_ascii_case("connection") {
                let value = header.value;
                if contains_token(value, b"close") {
                    keep_alive = false;
                } else if contains_token(value, b"keep-alive") {
                    keep_alive = true;
                }
            }
        }
        let head_only = request.method == Some("HEAD");
        if request.path == Some(BIG_PATH) {
            let head = match (keep_alive, http10) {
                (false, _) => BIG_CLOSE,
                (true, true) => BIG_KEEP_ALIVE_10,
                (true, false) => BIG_KEEP_ALIVE,
            };
            return Answer {
                bytes: head,
                close: !keep_alive,
                big_body: !head_only,
                status: false,
            };
        }
        if request.path == Some(STATUS_PATH) {
            return Answer {
                bytes: b"",
                close: !keep_alive,
                big_body: false,
                status: true,
            };
        }
        let bytes = match (self.failing, keep_alive, http10) {
            (false, false, _) => OK_CLOSE,
            (false, true, true) => OK_KEEP_ALIVE_10,
            (false, true, false) => OK_KEEP_ALIVE,
            (true, false, _) => FAILED_CLOSE,
            (true, true, true) => FAILED_KEEP_ALIVE_10,
            (true, true, false) => FAILED_KEEP_ALIVE,
        };
        Answer::small(without_body(bytes, head_only), !keep_alive)
    }
}

/// A HEAD response is the GET response's head alone.
fn without_body(response: &'static [u8], head_only: bool) -> &'static [u8] {
    if head_only {
        &response[..response.len() - BODY.len()]
    } else {
        response
    }
}

fn contains_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|part| part.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    #[test]
    fn body_is_19_bytes_and_matches_content_length() {
        assert_eq!(BODY.len(), 19);
        assert!(OK_KEEP_ALIVE.ends_with(BODY));
    }

    #[test]
    fn pipelined_requests_get_one_response_each() {
        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        let input = [GET, GET, GET].concat();
        assert_eq!(scanner.answer(&input, &mut out), input.len());
        assert_eq!(out, [OK_KEEP_ALIVE, OK_KEEP_ALIVE, OK_KEEP_ALIVE].concat());
    }

    #[test]
    fn a_request_split_at_every_byte_is_answered_once() {
        for split in 1..GET.len() {
            let mut scanner = RequestScanner::default();
            let mut out = Vec::new();
            assert_eq!(scanner.answer(&GET[..split], &mut out), 0);
            assert!(out.is_empty());
            assert_eq!(scanner.answer(GET, &mut out), GET.len());
            assert_eq!(out, OK_KEEP_ALIVE);
        }
    }

    #[test]
    fn bodies_are_skipped_even_across_reads() {
        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        let post = b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab";
        assert_eq!(scanner.answer(post, &mut out), post.len());
        let rest = [&b"cde"[..], GET].concat();
        assert_eq!(scanner.answer(&rest, &mut out), rest.len());
        assert_eq!(out, [OK_KEEP_ALIVE, OK_KEEP_ALIVE].concat());
    }

    #[test]
    fn connection_close_and_http10_are_honoured() {
        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        scanner.answer(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", &mut out);
        assert_eq!(out, OK_CLOSE);
        assert!(scanner.closing);

        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        scanner.answer(
            b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
            &mut out,
        );
        assert_eq!(out, OK_KEEP_ALIVE_10);
        assert!(!scanner.closing);
    }

    #[test]
    fn big_heads_announce_the_big_body() {
        for head in [BIG_KEEP_ALIVE, BIG_KEEP_ALIVE_10, BIG_CLOSE] {
            let text = std::str::from_utf8(head).unwrap();
            assert!(text.contains(&format!("Content-Length: {BIG_BODY_LEN}\r\n")));
        }
    }

    #[test]
    fn big_stops_the_scan_until_its_body_is_written() {
        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        let input = [&b"GET /big HTTP/1.1\r\n\r\n"[..], GET].concat();
        let consumed = scanner.answer(&input, &mut out);
        assert_eq!(out, BIG_KEEP_ALIVE);
        assert!(scanner.big_body_due && !scanner.closing);
        // The caller writes the body, clears the flag, and scans the rest.
        scanner.big_body_due = false;
        out.clear();
        assert_eq!(scanner.answer(&input[consumed..], &mut out), GET.len());
        assert_eq!(out, OK_KEEP_ALIVE);
        // HEAD /big: the head alone.
        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        scanner.answer(b"HEAD /big HTTP/1.1\r\n\r\n", &mut out);
        assert_eq!(out, BIG_KEEP_ALIVE);
        assert!(!scanner.big_body_due);
    }

    #[test]
    fn upload_is_answered_once_its_body_has_arrived() {
        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        let head = b"POST /upload HTTP/1.1\r\nContent-Length: 6\r\n\r\nabc";
        assert_eq!(scanner.answer(head, &mut out), head.len());
        assert!(out.is_empty());
        let rest = [&b"def"[..], GET].concat();
        assert_eq!(scanner.answer(&rest, &mut out), rest.len());
        assert_eq!(out, [OK_KEEP_ALIVE, OK_KEEP_ALIVE].concat());
        // Any other path answers at once.
        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        scanner.answer(b"POST / HTTP/1.1\r\nContent-Length: 6\r\n\r\n", &mut out);
        assert_eq!(out, OK_KEEP_ALIVE);
    }

    #[test]
    fn status_stops_the_scan_for_the_caller_to_answer() {
        let status = format!("GET {STATUS_PATH} HTTP/1.1\r\nConnection: close\r\n\r\n");
        let input = [GET, status.as_bytes(), GET].concat();
        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        let consumed = scanner.answer(&input, &mut out);
        assert_eq!(consumed, input.len() - GET.len());
        assert_eq!(out, OK_KEEP_ALIVE);
        assert!(scanner.status_due && scanner.closing);
        // The status request is counted among those answered, as nginx counts it.
        assert_eq!(scanner.answered, 2);
        let counters = Arc::new(Counters::default());
        let _open = counters.accepted();
        counters.answered(scanner.answered);
        let answer = String::from_utf8(status_response(&counters, true)).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.ends_with(&format!(
            "Content-Length: {}\r\nConnection: close",
            body.len()
        )));
        let counts = crate::kit::server_status::parse(body).unwrap();
        assert_eq!((counts.accepted, counts.requests), (1, 2));
    }

    #[test]
    fn a_failing_server_answers_500_with_the_same_framing() {
        let mut scanner = RequestScanner {
            failing: true,
            ..RequestScanner::default()
        };
        let mut out = Vec::new();
        scanner.answer(GET, &mut out);
        assert_eq!(out, FAILED_KEEP_ALIVE);
        for failed in [FAILED_KEEP_ALIVE, FAILED_KEEP_ALIVE_10, FAILED_CLOSE] {
            let text = std::str::from_utf8(failed).unwrap();
            assert!(text.starts_with("HTTP/1.1 500 "), "{text}");
            assert!(text.contains("Content-Length: 19\r\n") && failed.ends_with(BODY));
        }
        assert!(std::str::from_utf8(FAILED_CLOSE)
            .unwrap()
            .contains("Connection: close\r\n"));
    }

    #[test]
    fn a_conduct_reads_back_as_it_was_set() {
        let conduct = Conduct::default();
        assert_eq!(conduct.get(), Answering::AtOnce);
        for answering in [
            Answering::Late(Duration::from_millis(200)),
            Answering::Failing,
            Answering::Late(Duration::from_micros(1)),
            Answering::AtOnce,
        ] {
            conduct.set(answering);
            assert_eq!(conduct.get(), answering);
        }
        // A zero delay is the shortest one, not "at once".
        conduct.set(Answering::Late(Duration::ZERO));
        assert_eq!(conduct.get(), Answering::Late(Duration::from_micros(1)));
    }

    #[test]
    fn head_gets_no_body() {
        let mut scanner = RequestScanner::default();
        let mut out = Vec::new();
        scanner.answer(b"HEAD / HTTP/1.1\r\n\r\n", &mut out);
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nContent-Length: 19\r\n\r\n");
    }
}
