//! HTTP/2 clients for tests: curl with prior knowledge, and raw frames written by hand over a
//! plain socket (a client herdsman must defend against does not use a library that behaves), with
//! a reader that parses what herdsman answers as it arrives.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::raw::{admin_get_request, Conn};
use super::start::Proxy;

/// The client's preface and an empty SETTINGS frame: how every raw HTTP/2 client here starts.
pub const PREFACE_AND_SETTINGS: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// Frame types (RFC 9113 §6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
/// Flags.
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// Error codes (RFC 9113 §7) the tests look for.
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const CANCEL: u32 = 0x8;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;
pub const COMPRESSION_ERROR: u32 = 0x9;

/// An HPACK block for `GET /` with `:authority` "a" (three indexed fields from the static table
/// and a literal without indexing): the smallest request.
pub const GET_BLOCK: &[u8] = &[0x82, 0x86, 0x84, 0x01, 0x01, b'a'];

/// One frame's bytes.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    bytes.push(kind);
    bytes.push(flags);
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// A frame as herdsman sent it.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// A GOAWAY's error code, or a RST_STREAM's.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            GOAWAY => 4,
            RST_STREAM => 0,
            _ => return None,
        };
        let code = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes(code.try_into().unwrap()))
    }

    /// A GOAWAY's last stream id.
    pub fn last_stream(&self) -> Option<u32> {
        let id = self.payload.get(..4).filter(|_| self.kind == GOAWAY)?;
        Some(u32::from_be_bytes(id.try_into().unwrap()) & 0x7fff_ffff)
    }
}

/// Splits `bytes` into the frames they hold whole; returns how many bytes those took.
pub fn parse_frames(bytes: &[u8], into: &mut Vec<Frame>) -> usize {
    let mut at = 0;
    while bytes.len() - at >= 9 {
        let head = &bytes[at..at + 9];
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        if bytes.len() - at - 9 < length {
            break;
        }
        into.push(Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
            payload: bytes[at + 9..at + 9 + length].to_vec(),
        });
        at += 9 + length;
    }
    at
}

/// A raw connection to `addr` with a 5 s read timeout; with the preface and SETTINGS sent when
/// `started`.
pub fn raw_connection(addr: SocketAddr, started: bool) -> TcpStream {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if started {
        conn.write_all(PREFACE_AND_SETTINGS).unwrap();
    }
    conn
}

/// Sends `bytes` on a fresh raw connection to `addr` (from a thread of its own: the write fails
/// once herdsman has closed, which is the point) and returns all herdsman sent until its close.
pub fn flood(addr: SocketAddr, bytes: Vec<u8>) -> Vec<u8> {
    let mut conn = raw_connection(addr, false);
    let writer = {
        let mut conn = conn.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = conn.write_all(&bytes);
        })
    };
    let mut got = Vec::new();
    let _ = conn.read_to_end(&mut got);
    writer.join().unwrap();
    got
}

/// Whether `got` holds a GOAWAY frame (type 7, stream 0) with error `code`.
pub fn has_goaway(got: &[u8], code: u8) -> bool {
    got.windows(17)
        .any(|w| w[3] == 7 && w[5..9] == [0, 0, 0, 0] && w[13..17] == [0, 0, 0, code])
}

/// What herdsman did to one attacking connection.
#[derive(Debug)]
pub struct Attacked {
    /// The GOAWAY's error code, if one came.
    pub goaway: Option<u32>,
    /// Attack frames written before the GOAWAY was read (or the connection failed, or all were
    /// sent): how far the budget let the attacker go, give or take the frames in flight.
    pub frames_sent: usize,
    /// From the first attack frame to the GOAWAY (or the end).
    pub took: Duration,
    /// Everything herdsman sent, until it closed or went quiet for 5 s.
    pub frames: Vec<Frame>,
}

/// Frames written between two looks at whether the GOAWAY came: the most an attacker may
/// overshoot its budget by here, beside what herdsman had not read yet.
const BATCH: usize = 20;

/// Attacks `addr` from one connection: `opening` (the preface and whatever sets the attack up),
/// then `frame(i)` for i from 0 until herdsman sends GOAWAY, closes, or `most` were sent, in
/// batches of 20 a millisecond apart (a flood, at a pace that lets the count say when it ended).
pub fn attack(
    addr: SocketAddr,
    opening: &[u8],
    frame: impl FnMut(usize) -> Vec<u8>,
    most: usize,
) -> Attacked {
    attack_in_batches(addr, opening, frame, most, BATCH)
}

/// As [`attack`], each frame written on its own before the next is made: for attacks that wait
/// between frames, and counts that must be exact.
pub fn attack_frame_by_frame(
    addr: SocketAddr,
    opening: &[u8],
    frame: impl FnMut(usize) -> Vec<u8>,
    most: usize,
) -> Attacked {
    attack_in_batches(addr, opening, frame, most, 1)
}

fn attack_in_batches(
    addr: SocketAddr,
    opening: &[u8],
    mut frame: impl FnMut(usize) -> Vec<u8>,
    most: usize,
    batch: usize,
) -> Attacked {
    let mut conn = raw_connection(addr, false);
    let goaway: Arc<Mutex<Option<(u32, Instant)>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let mut conn = conn.try_clone().unwrap();
        let (goaway, done) = (Arc::clone(&goaway), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let mut frames = Vec::new();
            let mut chunk = [0u8; 16384];
            loop {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => bytes.extend_from_slice(&chunk[..n]),
                }
                let used = parse_frames(&bytes, &mut frames);
                bytes.drain(..used);
                if let Some(code) = frames.iter().find(|f| f.kind == GOAWAY) {
                    let mut slot = goaway.lock().unwrap();
                    slot.get_or_insert((code.error_code().unwrap(), Instant::now()));
                }
            }
            done.store(true, Ordering::SeqCst);
            frames
        })
    };
    conn.write_all(opening).unwrap();
    let started = Instant::now();
    let mut frames_sent = 0;
    while frames_sent < most && goaway.lock().unwrap().is_none() && !done.load(Ordering::SeqCst) {
        let bytes: Vec<u8> = (frames_sent..(frames_sent + batch).min(most))
            .flat_map(&mut frame)
            .collect();
        if conn.write_all(&bytes).is_err() {
            break;
        }
        frames_sent = (frames_sent + batch).min(most);
        std::thread::sleep(Duration::from_millis(1));
    }
    let frames = reader.join().unwrap();
    let goaway = *goaway.lock().unwrap();
    Attacked {
        goaway: goaway.map(|(code, _)| code),
        frames_sent,
        took: goaway.map_or(started.elapsed(), |(_, at)| at - started),
        frames,
    }
}

/// The sum over workers of the /metrics samples named `name` whose labels include `label`.
pub fn metric(proxy: &Proxy, name: &str, label: &str) -> f64 {
    let admin = proxy.server().admin_addr().expect("an admin listener");
    let mut conn = Conn::connect(admin);
    let text = conn.roundtrip(&admin_get_request("/metrics")).body_text();
    text.lines()
        .filter(|line| {
            (line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} ")))
                && line.contains(label)
        })
        .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// curl with `args` against `url`, `stdin` piped in when given: (status line of `-w`, body).
pub fn curl(args: &[&str], url: &str, stdin: Option<&[u8]>) -> (String, Vec<u8>) {
    let mut child = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20"])
        .args(args)
        .args(["--write-out", "\n%{http_version} %{http_code}"])
        .arg(url)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("curl runs (scripts/test installs it)");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(bytes).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let mut body = output.stdout;
    let at = body
        .iter()
        .rposition(|&b| b == b'\n')
        .expect("curl's -w line");
    let status = String::from_utf8_lossy(&body[at + 1..]).into_owned();
    body.truncate(at);
    assert!(
        output.status.success(),
        "curl {args:?} {url} failed: {status} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (status, body)
}

/// An HTTP/2 GET with prior knowledge by curl: (`-w`'s "2 200", body).
pub fn h2c_get(addr: SocketAddr, path: &str) -> (String, Vec<u8>) {
    curl(
        &["--http2-prior-knowledge"],
        &format!("http://{addr}{path}"),
        None,
    )
}

/// Reads frames from `conn` until one matches `last` (which is returned last); fails after 5 s.
pub fn read_frames_until(conn: &mut impl Read, last: impl Fn(&Frame) -> bool) -> Vec<Frame> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut bytes, mut frames) = (Vec::new(), Vec::new());
    let mut chunk = [0u8; 16384];
    while Instant::now() < deadline {
        let n = conn.read(&mut chunk).expect("herdsman's frames");
        assert!(n > 0, "closed before the frame expected: {frames:?}");
        bytes.extend_from_slice(&chunk[..n]);
        let used = parse_frames(&bytes, &mut frames);
        bytes.drain(..used);
        if let Some(at) = frames.iter().position(&last) {
            frames.truncate(at + 1);
            return frames;
        }
    }
    panic!("no such frame in 5 s: {frames:?}");
}
