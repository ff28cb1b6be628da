//! The four kinds of slow client, each one connection's behaviour as a task on a current-thread
//! tokio runtime, and what it saw of herdsman: still held at the end, or ended by herdsman (a
//! close, a reset, or an answer to a request it had not finished sending) and how.
//!
//! Every task sleeps `TRICKLE` between two steps, so a thousand of them cost a few thousand
//! wake-ups per second and no CPU to speak of; every task ends at the first step after `stop`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{sleep, timeout};

/// The pause between two steps of every slow connection.
pub const TRICKLE: Duration = Duration::from_secs(1);

/// How long a connect may take before it counts as failed.
const CONNECT_LIMIT: Duration = Duration::from_secs(5);

/// The slow head: a request line and a header whose value never ends, sent one byte per step.
/// At one byte a second it would take 18 hours to reach herdsman's 64 KiB head limit.
const SLOW_HEAD: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
const SLOW_HEAD_PAD: u8 = b'a';

/// The never-finished body: a 1,000,000-byte upload that gets `BODY_TRICKLE` bytes per step.
/// `/upload` makes the backend wait for the whole body, as an application that reads its input
/// first would, so herdsman holds the upload (and its server connection) for as long as it lasts.
const SLOW_BODY_HEAD: &[u8] =
    b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n";
const BODY_TRICKLE: &[u8] = b"data";

/// The slow reader asks for the backend's 1 MiB answer and reads `READ_TRICKLE` bytes per step.
const SLOW_READER_REQUEST: &[u8] = b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
const READ_TRICKLE: usize = 16;
/// Its receive buffer (the kernel doubles it) and the segment size it announces. On loopback the
/// segment size is 64 KiB, and from it herdsman's kernel sizes the send buffer at up to 4 MiB:
/// the whole 1 MiB answer would then sit in the kernel and herdsman itself would feel nothing. With
/// the segment of an Ethernet path (1460 bytes), as a real slow reader has, herdsman's send buffer
/// stays near 100 KiB (measured here), so its own write waits and it holds the response and the
/// server connection behind it.
const SLOW_READER_RCVBUF: u32 = 4096;
const SLOW_READER_MSS: libc::c_int = 1460;

/// The reset loop: a 10 MB upload, `UPLOAD_PIECE` bytes at once and again after each step, then
/// a reset (SO_LINGER 0, close) after `UPLOAD_STEPS` steps, and a new connection straight away.
const RESET_HEAD: &[u8] =
    b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n\r\n";
const UPLOAD_PIECE: usize = 16 * 1024;
const UPLOAD_STEPS: u32 = 2;

/// The kinds, in the order of the mix (a quarter each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SlowHead,
    SlowBody,
    SlowReader,
    ResetUpload,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::SlowHead,
        Kind::SlowBody,
        Kind::SlowReader,
        Kind::ResetUpload,
    ];

    /// The word that names the kind in the holder's report lines and in the results.
    pub fn label(self) -> &'static str {
        match self {
            Kind::SlowHead => "slow-head",
            Kind::SlowBody => "slow-body",
            Kind::SlowReader => "slow-reader",
            Kind::ResetUpload => "reset-upload",
        }
    }

    /// What a connection of this kind does, for the results file.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::SlowHead => {
                "`GET /` whose head never ends (an `X-Slow:` header growing by one byte a second)"
            }
            Kind::SlowBody => {
                "`POST /upload` with `Content-Length: 1000000`, then 4 bytes of body a second \
                 (the backend answers `/upload` only after the whole body)"
            }
            Kind::SlowReader => {
                "`GET /big` (a 1 MiB answer), read 16 bytes a second, with SO_RCVBUF 4096 and \
                 TCP_MAXSEG 1460 so that herdsman's own write waits"
            }
            Kind::ResetUpload => {
                "`POST /upload` with `Content-Length: 10000000`, 16 KiB at once and 16 KiB a second \
                 later, then a reset (SO_LINGER 0, close) 2 s after connecting, and again"
            }
        }
    }

    pub fn from_label(label: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.label() == label)
    }
}

/// What the connections of one kind saw; summed over connections and holder processes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Connections opened (the reset loop: over all its cycles).
    pub opened: u32,
    /// Connects that failed or timed out.
    pub failed: u32,
    /// Open at the end, herdsman having neither closed them nor answered an unfinished request
    /// (the reset loop: the connection of a cycle still under way).
    pub held: u32,
    /// Ended by herdsman: a close, a reset, or (slow head and body) an answer before the request
    /// was complete; the reset loop: cycles herdsman ended before the client's reset.
    pub ended: u32,
    /// The reset loop: resets sent mid-upload.
    pub resets: u32,
    /// The slow reader: responses whose status line arrived.
    pub started: u32,
    /// The slow reader: bytes of the response read.
    pub bytes_read: u64,
    /// How herdsman ended the first connection it ended ("answered: HTTP/1.1 408 …", "closed").
    pub first_end: Option<String>,
}

impl Tally {
    pub fn add(&mut self, other: &Tally) {
        self.opened += other.opened;
        self.failed += other.failed;
        self.held += other.held;
        self.ended += other.ended;
        self.resets += other.resets;
        self.started += other.started;
        self.bytes_read += other.bytes_read;
        if self.first_end.is_none() {
            self.first_end.clone_from(&other.first_end);
        }
    }

    fn end(&mut self, how: String) {
        self.ended += 1;
        self.first_end.get_or_insert(how);
    }

    /// The holder's report line: `KIND opened=… failed=… … first=TEXT` (TEXT to the end of line).
    pub fn line(&self, kind: Kind) -> String {
        format!(
            "{} opened={} failed={} held={} ended={} resets={} started={} bytes={} first={}",
            kind.label(),
            self.opened,
            self.failed,
            self.held,
            self.ended,
            self.resets,
            self.started,
            self.bytes_read,
            self.first_end.as_deref().unwrap_or("")
        )
    }

    /// Reads a line written by `line`.
    pub fn parse(line: &str) -> Option<(Kind, Tally)> {
        let (head, first) = line.split_once(" first=")?;
        let mut words = head.split_whitespace();
        let kind = Kind::from_label(words.next()?)?;
        let mut tally = Tally {
            first_end: (!first.trim().is_empty()).then(|| first.trim().to_string()),
            ..Tally::default()
        };
        for word in words {
            let (key, value) = word.split_once('=')?;
            let number: u64 = value.parse().ok()?;
            let small = u32::try_from(number).ok();
            match key {
                "opened" => tally.opened = small?,
                "failed" => tally.failed = small?,
                "held" => tally.held = small?,
                "ended" => tally.ended = small?,
                "resets" => tally.resets = small?,
                "started" => tally.started = small?,
                "bytes" => tally.bytes_read = number,
                _ => return None,
            }
        }
        Some((kind, tally))
    }
}

/// What every task of a holder process shares: where to connect, when to stop, and how many
/// connections have made their first attempt (the holder is ready when all have).
pub struct Shared {
    pub addr: SocketAddr,
    stop: AtomicBool,
    pub attempted: AtomicU32,
}

impl Shared {
    pub fn new(addr: SocketAddr) -> Shared {
        Shared {
            addr,
            stop: AtomicBool::new(false),
            attempted: AtomicU32::new(0),
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// One slow connection of `kind` (the reset loop: one loop of them), started after `phase` so that
/// the connections of a holder open, and trickle, spread over a second rather than in bursts.
pub async fn run(kind: Kind, shared: &Shared, phase: Duration) -> Tally {
    sleep(phase).await;
    let mut tally = Tally::default();
    if kind == Kind::ResetUpload {
        reset_loop(shared, &mut tally).await;
        return tally;
    }
    let opened = open(shared.addr, kind == Kind::SlowReader).await;
    shared.attempted.fetch_add(1, Ordering::Relaxed);
    let stream = match opened {
        Ok(stream) => stream,
        Err(e) => {
            tally.failed = 1;
            tally.first_end = Some(format!("connect: {e}"));
            return tally;
        }
    };
    tally.opened = 1;
    match kind {
        Kind::SlowHead => {
            let bytes = SLOW_HEAD
                .iter()
                .copied()
                .chain(std::iter::repeat(SLOW_HEAD_PAD));
            trickle(stream, shared, bytes.map(|b| vec![b]), &mut tally).await;
        }
        Kind::SlowBody => {
            let pieces = std::iter::once(SLOW_BODY_HEAD.to_vec())
                .chain(std::iter::repeat(BODY_TRICKLE.to_vec()));
            trickle(stream, shared, pieces, &mut tally).await;
        }
        Kind::SlowReader => slow_reader(stream, shared, &mut tally).await,
        Kind::ResetUpload => unreachable!("handled above"),
    }
    tally
}

/// Sends one piece per step until herdsman ends the connection or `stop`; nothing herdsman sends
/// is expected, since the request is never complete.
async fn trickle(
    mut stream: TcpStream,
    shared: &Shared,
    pieces: impl Iterator<Item = Vec<u8>>,
    tally: &mut Tally,
) {
    for piece in pieces {
        if let Some(how) = ended_by_peer(&stream) {
            return tally.end(how);
        }
        if shared.stopping() {
            tally.held += 1;
            return;
        }
        // A write that waits past the step means herdsman is not reading yet: the next step
        // tries again.
        if let Ok(Err(e)) = timeout(TRICKLE, stream.write_all(&piece)).await {
            return tally.end(format!("write: {}", e.kind()));
        }
        sleep(TRICKLE).await;
    }
}

/// Asks for the big answer and reads a few bytes of it per step.
async fn slow_reader(mut stream: TcpStream, shared: &Shared, tally: &mut Tally) {
    if let Err(e) = stream.write_all(SLOW_READER_REQUEST).await {
        return tally.end(format!("write: {}", e.kind()));
    }
    let mut status_line = Vec::new();
    let mut buffer = [0u8; READ_TRICKLE];
    loop {
        sleep(TRICKLE).await;
        match stream.try_read(&mut buffer) {
            Ok(0) => return tally.end(format!("closed after {} bytes", tally.bytes_read)),
            Ok(n) => {
                tally.bytes_read += n as u64;
                if tally.started == 0 {
                    status_line.extend_from_slice(&buffer[..n]);
                    if status_line.windows(2).any(|w| w == b"\r\n") {
                        tally.started = 1;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return tally.end(format!("read: {}", e.kind())),
        }
        if shared.stopping() {
            tally.held += 1;
            return;
        }
    }
}

/// Uploads part of a large body and resets, over and over, until `stop`.
async fn reset_loop(shared: &Shared, tally: &mut Tally) {
    let mut first = true;
    let piece = vec![b'u'; UPLOAD_PIECE];
    'cycles: while !shared.stopping() {
        let opened = open(shared.addr, false).await;
        if std::mem::take(&mut first) {
            shared.attempted.fetch_add(1, Ordering::Relaxed);
        }
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(e) => {
                tally.failed += 1;
                tally.first_end.get_or_insert(format!("connect: {e}"));
                sleep(TRICKLE).await;
                continue;
            }
        };
        tally.opened += 1;
        let start = [RESET_HEAD, &piece].concat();
        if let Err(e) = stream.write_all(&start).await {
            tally.end(format!("write: {}", e.kind()));
            sleep(TRICKLE).await;
            continue;
        }
        for step in 1..=UPLOAD_STEPS {
            sleep(TRICKLE).await;
            if let Some(how) = ended_by_peer(&stream) {
                tally.end(how);
                continue 'cycles;
            }
            if shared.stopping() {
                tally.held += 1;
                break;
            }
            if step < UPLOAD_STEPS {
                if let Ok(Err(e)) = timeout(TRICKLE, stream.write_all(&piece)).await {
                    tally.end(format!("write: {}", e.kind()));
                    continue 'cycles;
                }
            }
        }
        // An abortive close: RST instead of FIN, mid-body.
        if stream.set_zero_linger().is_ok() && !shared.stopping() {
            tally.resets += 1;
        }
        drop(stream);
    }
}

/// Connects to `addr`; a slow reader first gets its small receive buffer and segment size.
async fn open(addr: SocketAddr, slow_reader: bool) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if slow_reader {
        socket.set_recv_buffer_size(SLOW_READER_RCVBUF)?;
        set_segment_size(&socket, SLOW_READER_MSS)?;
    }
    timeout(CONNECT_LIMIT, socket.connect(addr))
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection within {CONNECT_LIMIT:?}"),
            ))
        })
}

/// TCP_MAXSEG before connect: the segment size the SYN announces.
fn set_segment_size(socket: &TcpSocket, bytes: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live c_int; the descriptor is the
    // socket's own and open.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether herdsman has ended the connection, without waiting: a close, a reset, or bytes it sent
/// (an answer such as 408 to a request that is not complete). The task's runtime keeps the
/// socket's readiness current between steps, so a non-blocking read sees what arrived.
fn ended_by_peer(stream: &TcpStream) -> Option<String> {
    let mut buffer = [0u8; 256];
    match stream.try_read(&mut buffer) {
        Ok(0) => Some("closed".to_string()),
        Ok(n) => Some(format!("answered: {}", first_line(&buffer[..n]))),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => Some(format!("read: {}", e.kind())),
    }
}

fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines().next().unwrap_or_default().trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::Arc;

    #[test]
    fn report_lines_are_read_back() {
        let tally = Tally {
            opened: 250,
            held: 248,
            ended: 2,
            bytes_read: 12_345_678_901,
            first_end: Some("answered: HTTP/1.1 408 Request Timeout".into()),
            ..Tally::default()
        };
        let line = tally.line(Kind::SlowHead);
        assert!(line.starts_with("slow-head opened=250 "), "{line}");
        assert_eq!(Tally::parse(&line), Some((Kind::SlowHead, tally)));
        let quiet = Tally::default();
        assert_eq!(
            Tally::parse(&quiet.line(Kind::ResetUpload)),
            Some((Kind::ResetUpload, quiet))
        );
        assert_eq!(Tally::parse("ready 1000"), None);
        assert_eq!(Tally::parse("slow-head opened=x first="), None);
    }

    #[test]
    fn tallies_add_up_and_keep_the_first_end() {
        let mut sum = Tally::default();
        sum.add(&Tally {
            opened: 1,
            held: 1,
            ..Tally::default()
        });
        sum.add(&Tally {
            opened: 1,
            ended: 1,
            first_end: Some("closed".into()),
            ..Tally::default()
        });
        sum.add(&Tally {
            ended: 1,
            first_end: Some("read: connection reset".into()),
            ..Tally::default()
        });
        assert_eq!((sum.opened, sum.held, sum.ended), (2, 1, 2));
        assert_eq!(sum.first_end.as_deref(), Some("closed"));
    }

    #[test]
    fn labels_name_every_kind_once() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_label(kind.label()), Some(kind));
        }
    }

    /// A slow head against a server that answers 408 after its first bytes: the task sees the
    /// answer and counts the connection as ended, with the status line.
    #[test]
    fn a_slow_head_sees_the_server_end_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut byte = [0u8; 1];
            conn.read_exact(&mut byte).unwrap();
            conn.write_all(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n")
                .unwrap();
            byte
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared::new(addr));
        let tally = runtime.block_on(run(Kind::SlowHead, &shared, Duration::ZERO));
        assert_eq!(server.join().unwrap(), [b'G']);
        assert_eq!((tally.opened, tally.ended, tally.held), (1, 1, 0));
        assert_eq!(
            tally.first_end.as_deref(),
            Some("answered: HTTP/1.1 408 Request Timeout")
        );
    }

    /// A slow body against a server that reads and keeps the connection: held when told to stop.
    #[test]
    fn a_slow_body_that_the_server_keeps_is_held() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut head = vec![0u8; SLOW_BODY_HEAD.len()];
            conn.read_exact(&mut head).unwrap();
            // Hold it until the client has finished.
            let mut rest = Vec::new();
            let _ = conn.read_to_end(&mut rest);
            head
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared::new(addr));
        let stopper = Arc::clone(&shared);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            stopper.stop();
        });
        let tally = runtime.block_on(run(Kind::SlowBody, &shared, Duration::ZERO));
        assert_eq!((tally.opened, tally.held, tally.ended), (1, 1, 0));
        assert_eq!(server.join().unwrap(), SLOW_BODY_HEAD);
    }
}
