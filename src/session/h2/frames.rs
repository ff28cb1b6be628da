//! What a client's frames cost before any request: the frames that make a server work without
//! asking it anything (SETTINGS, PING, PRIORITY, WINDOW_UPDATE, RST_STREAM, DATA and
//! CONTINUATION without payload, unknown types) are counted as they pass, before the `h2` crate
//! reads them, against a budget that each new stream and each second refill. The attacks of
//! 2019 (CVE-2019-9512 to 9518: ping, settings, reset, empty-frame floods) and 2023 (rapid reset,
//! CVE-2023-44487: streams opened and reset at once) all spend it; a client that spends it all
//! is sent GOAWAY with ENHANCE_YOUR_CALM. A browser's cancelled streams and window updates stay
//! far inside it. Resets have a budget of their own besides, which new streams do not refill: a
//! stream opened earns more frames than its reset costs, so without it a client that opens each
//! stream, lets it reach a server and resets it could go on for ever.
//!
//! The same reading finds the frames whose header alone breaks RFC 9113 — a first frame that is
//! not SETTINGS (§3.4), a control frame of the wrong length (§6.3 to §6.9: FRAME_SIZE_ERROR),
//! DATA on a stream the client already ended (§5.1: STREAM_CLOSED) — and a
//! SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 (§6.5.2: FLOW_CONTROL_ERROR), before the
//! crate reads them: it would end the connection with PROTOCOL_ERROR, so herdsman keeps the
//! frame from it and ends the connection with the code the RFC names (`Breach`).

#[cfg(test)]
use std::time::Duration;

use tokio::time::Instant;

/// Frame types (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
/// END_STREAM on DATA and HEADERS.
const END_STREAM: u8 = 0x1;
/// ACK on SETTINGS and PING.
const ACK: u8 = 0x1;
/// END_HEADERS on HEADERS and CONTINUATION.
const END_HEADERS: u8 = 0x4;

/// The error codes (§7) of a `Breach`.
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const STREAM_CLOSED: u32 = 0x5;

/// How many of the streams the client ended last are remembered, for DATA after their end.
const ENDED_STREAMS: usize = 16;

/// SETTINGS_INITIAL_WINDOW_SIZE (§6.5.2), and the largest window it may set (§6.9.1).
const INITIAL_WINDOW_SIZE: u16 = 0x4;
const MAX_WINDOW: u32 = (1 << 31) - 1;

/// A frame that ends the connection by its header alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breach {
    /// The error code of the connection error (§7).
    pub code: u32,
    /// How many of the bytes given to the `saw` call that found it came before the frame (the
    /// crate may read those; none from the frame on).
    pub before: usize,
}

/// The limits of the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Frames a connection may spend before it has earned any: the burst a client may send.
    pub burst: u32,
    /// Frames each new stream (a HEADERS frame that opens one) earns: the window updates, the
    /// priority, the reset a request may bring with it.
    pub per_stream: u32,
    /// Frames each second earns (a keep-alive PING now and then, settings changes).
    pub per_second: u32,
    /// Streams the client may reset (RST_STREAM) before it has earned any, and each second's
    /// earnings: only time refills these.
    pub reset_burst: u32,
    pub resets_per_second: u32,
}

/// The defaults (`[http2]`'s): a burst of 1,000, 10 per stream, 100 a second; 100 resets, 10 a
/// second. A rapid-reset client (a HEADERS and a RST_STREAM per stream) earns 10 frames for each
/// reset it spends 1 on, so the frame budget alone does not end it: the reset budget does (after
/// 100 resets, plus 10 a second), and sooner the `h2` crate's limit on streams reset before they
/// are served (`max_pending_resets`, 20 at once).
#[cfg(test)]
pub const DEFAULT_BUDGET: Budget = Budget {
    burst: 1000,
    per_stream: 10,
    per_second: 100,
    reset_burst: 100,
    resets_per_second: 10,
};

/// Where the reading of the client's byte stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// In the connection preface, this many bytes of it left.
    Preface(usize),
    /// In a frame header, this many of its 9 bytes read.
    Header(usize),
    /// In a frame's payload, this many bytes left.
    Payload(u32),
}

/// Something a client may spend, `burst` at most, refilled by the clock (`per_second`) and
/// by whatever else earns it.
#[derive(Debug)]
struct Bucket {
    burst: u32,
    per_second: u32,
    /// Left to spend.
    left: u32,
    /// When `left` was last refilled by the clock.
    refilled: Instant,
}

impl Bucket {
    fn new(burst: u32, per_second: u32, now: Instant) -> Bucket {
        Bucket {
            burst,
            per_second,
            left: burst,
            refilled: now,
        }
    }

    fn earn(&mut self, units: u32) {
        self.left = self.left.saturating_add(units).min(self.burst);
    }

    /// Spends one; false when none is left, even after what the clock earned.
    fn spend(&mut self, now: Instant) -> bool {
        if self.left == 0 {
            let seconds = now.saturating_duration_since(self.refilled).as_secs_f64();
            let earned = (seconds * f64::from(self.per_second)) as u32;
            if earned > 0 {
                self.earn(earned);
                self.refilled = now;
            }
        }
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }
}

/// Counts a connection's frames as their bytes pass.
#[derive(Debug)]
pub struct FrameWatch {
    budget: Budget,
    position: Position,
    header: [u8; 9],
    /// Frames that ask nothing.
    frames: Bucket,
    /// Streams reset by the client.
    resets: Bucket,
    /// A budget ran out.
    spent: bool,
    /// The next frame is the client's first, which must be SETTINGS (§3.4).
    first: bool,
    /// The frame that broke the protocol, once one did: nothing after it is read.
    breach: Option<Breach>,
    /// Where in the bytes of this `saw` call the frame being read began (0: in an earlier one).
    frame_start: usize,
    /// In a SETTINGS frame's payload: the parameter being read and how many of its 6 bytes.
    setting: Option<([u8; 6], usize)>,
    /// The streams the client ended (END_STREAM) last, a ring (0: none), and where the next goes.
    ended: [u32; ENDED_STREAMS],
    ended_next: usize,
    /// A field block still open (HEADERS without END_HEADERS): its stream, and whether its
    /// HEADERS ended the stream (which it does once the block is whole).
    block: Option<(u32, bool)>,
}

impl FrameWatch {
    /// A watch starting after `preface` bytes that are not frames (the client preface, 24
    /// bytes; none when the preface was read elsewhere).
    pub fn new(budget: Budget, preface: usize, now: Instant) -> FrameWatch {
        FrameWatch {
            budget,
            position: match preface {
                0 => Position::Header(0),
                n => Position::Preface(n),
            },
            header: [0; 9],
            frames: Bucket::new(budget.burst, budget.per_second, now),
            resets: Bucket::new(budget.reset_burst, budget.resets_per_second, now),
            spent: false,
            first: preface > 0,
            breach: None,
            frame_start: 0,
            setting: None,
            ended: [0; ENDED_STREAMS],
            ended_next: 0,
            block: None,
        }
    }

    /// The frame that broke the protocol, if one did.
    pub fn breach(&self) -> Option<Breach> {
        self.breach
    }

    /// Whether the client spent its whole budget.
    pub fn spent(&self) -> bool {
        self.spent
    }

    /// Reads `bytes`, the next the client sent; true when the budget ran out in them.
    pub fn saw(&mut self, mut bytes: &[u8], now: Instant) -> bool {
        let given = bytes.len();
        self.frame_start = 0;
        while !bytes.is_empty() && self.breach.is_none() {
            match self.position {
                Position::Preface(left) => {
                    let take = left.min(bytes.len());
                    bytes = &bytes[take..];
                    self.position = match left - take {
                        0 => Position::Header(0),
                        rest => Position::Preface(rest),
                    };
                }
                Position::Header(read) => {
                    // A header begun in an earlier call has no byte before this one's start.
                    let before = given - bytes.len();
                    if read == 0 {
                        self.frame_start = before;
                    }
                    let take = (9 - read).min(bytes.len());
                    self.header[read..read + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if read + take < 9 {
                        self.position = Position::Header(read + take);
                        continue;
                    }
                    let length =
                        u32::from_be_bytes([0, self.header[0], self.header[1], self.header[2]]);
                    let stream = u32::from_be_bytes([
                        self.header[5],
                        self.header[6],
                        self.header[7],
                        self.header[8],
                    ]) & 0x7fff_ffff;
                    if let Some(code) = self.breaks(self.header[3], self.header[4], length, stream)
                    {
                        self.breach = Some(Breach { code, before });
                        break;
                    }
                    self.follow_ends(self.header[3], self.header[4], stream);
                    self.frame(self.header[3], self.header[4], length, now);
                    self.setting = (self.header[3] == SETTINGS).then_some(([0; 6], 0));
                    self.position = match length {
                        0 => Position::Header(0),
                        n => Position::Payload(n),
                    };
                }
                Position::Payload(left) => {
                    let take = (left as usize).min(bytes.len());
                    self.read_settings(&bytes[..take]);
                    bytes = &bytes[take..];
                    self.position = match left - take as u32 {
                        0 => Position::Header(0),
                        rest => Position::Payload(rest),
                    };
                }
            }
        }
        self.spent
    }

    /// Reads SETTINGS parameters as their bytes pass: an initial window size above the largest
    /// window is a breach (the frame's bytes withheld from its start).
    fn read_settings(&mut self, bytes: &[u8]) {
        let Some((mut setting, mut filled)) = self.setting else {
            return;
        };
        for &byte in bytes {
            setting[filled] = byte;
            filled += 1;
            if filled < 6 {
                continue;
            }
            filled = 0;
            let id = u16::from_be_bytes([setting[0], setting[1]]);
            let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
            if id == INITIAL_WINDOW_SIZE && value > MAX_WINDOW {
                self.breach = Some(Breach {
                    code: FLOW_CONTROL_ERROR,
                    before: self.frame_start,
                });
            }
        }
        self.setting = Some((setting, filled));
    }

    /// The connection error a frame's header alone makes it (§3.4, §5.1, and the fixed or
    /// bounded lengths of §6.3 to §6.9), if any.
    fn breaks(&mut self, kind: u8, flags: u8, length: u32, stream: u32) -> Option<u32> {
        if std::mem::take(&mut self.first) && (kind != SETTINGS || flags & ACK != 0) {
            return Some(PROTOCOL_ERROR);
        }
        // DATA after the client's END_STREAM: the stream is half-closed (remote) or closed,
        // STREAM_CLOSED either way (inside a field block, DATA is the crate's PROTOCOL_ERROR).
        if kind == DATA && stream != 0 && self.block.is_none() && self.ended.contains(&stream) {
            return Some(STREAM_CLOSED);
        }
        let wrong_length = match kind {
            PRIORITY => length != 5,
            RST_STREAM | WINDOW_UPDATE => length != 4,
            SETTINGS => !length.is_multiple_of(6) || (flags & ACK != 0 && length != 0),
            PING => length != 8,
            GOAWAY => length < 8,
            _ => false,
        };
        wrong_length.then_some(FRAME_SIZE_ERROR)
    }

    /// Notes the streams the client ends: by DATA or HEADERS with END_STREAM, the latter once
    /// its field block is whole.
    fn follow_ends(&mut self, kind: u8, flags: u8, stream: u32) {
        let ends = match kind {
            HEADERS if flags & END_HEADERS == 0 => {
                self.block = Some((stream, flags & END_STREAM != 0));
                false
            }
            HEADERS | DATA => flags & END_STREAM != 0,
            CONTINUATION if flags & END_HEADERS != 0 => {
                self.block.take().is_some_and(|(_, ended)| ended)
            }
            _ => false,
        };
        if ends {
            self.ended[self.ended_next] = stream;
            self.ended_next = (self.ended_next + 1) % ENDED_STREAMS;
        }
    }

    /// Counts one frame by its header.
    fn frame(&mut self, kind: u8, flags: u8, length: u32, now: Instant) {
        let costs = match kind {
            // A new stream's HEADERS earns; a trailer section's HEADERS (END_STREAM on an open
            // stream) is not told apart here and earns too, once per request at most.
            HEADERS => {
                self.frames.earn(self.budget.per_stream);
                false
            }
            DATA => length == 0 && flags & END_STREAM == 0,
            CONTINUATION => length == 0,
            RST_STREAM => {
                if !self.resets.spend(now) {
                    self.spent = true;
                }
                true
            }
            PRIORITY | SETTINGS | PING | WINDOW_UPDATE => true,
            // Unknown types are ignored by the h2 crate (§5.5) but still cost a read.
            _ => true,
        };
        if costs && !self.frames.spend(now) {
            self.spent = true;
        }
    }
}

/// How long a budget of `budget` lasts a client sending only costly frames at `rate` a second:
/// for the docs and tests.
#[cfg(test)]
fn lasts(budget: Budget, rate: u32) -> Option<Duration> {
    (rate > budget.per_second).then(|| {
        Duration::from_secs_f64(f64::from(budget.burst) / f64::from(rate - budget.per_second))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame header and an empty-enough payload of `length` zero bytes.
    fn frame(kind: u8, flags: u8, length: u32) -> Vec<u8> {
        let mut bytes = length.to_be_bytes()[1..].to_vec();
        bytes.extend_from_slice(&[kind, flags, 0, 0, 0, 1]);
        bytes.extend(std::iter::repeat_n(0, length as usize));
        bytes
    }

    const SMALL: Budget = Budget {
        burst: 10,
        per_stream: 2,
        per_second: 100,
        reset_burst: 100,
        resets_per_second: 10,
    };

    #[test]
    fn a_ping_flood_spends_the_budget_and_requests_earn_it_back() {
        let now = Instant::now();
        let mut watch = FrameWatch::new(SMALL, 24, now);
        assert!(!watch.saw(&[b'P'; 24], now), "the preface is not frames");
        // SETTINGS first (§3.4), then PINGs: ten frames, the whole burst.
        let mut pings = frame(SETTINGS, 0, 0);
        pings.extend((0..9).flat_map(|_| frame(PING, 0, 8)));
        assert!(!watch.saw(&pings, now));
        // A request earns two more; the frames it brings cost nothing.
        let mut request = frame(HEADERS, 0x4, 20);
        request.extend(frame(DATA, 0, 100));
        request.extend(frame(DATA, END_STREAM, 0));
        assert!(!watch.saw(&request, now));
        assert!(!watch.saw(&frame(WINDOW_UPDATE, 0, 4), now));
        assert!(!watch.saw(&frame(SETTINGS, 0, 0), now));
        assert!(watch.saw(&frame(PING, 0, 8), now), "the budget is spent");
        assert!(watch.spent());
    }

    #[test]
    fn a_frame_that_breaks_the_protocol_by_its_header_is_found_before_it() {
        let now = Instant::now();
        let mut watch = FrameWatch::new(SMALL, 24, now);
        let mut bytes = vec![b'P'; 24];
        bytes.extend(frame(SETTINGS, 0, 6));
        bytes.extend(frame(PING, 0, 8));
        let before = bytes.len();
        bytes.extend(frame(PING, 0, 7));
        bytes.extend(frame(PING, 0, 8));
        watch.saw(&bytes, now);
        let breach = Some(Breach {
            code: FRAME_SIZE_ERROR,
            before,
        });
        assert_eq!(watch.breach(), breach);
        // Byte by byte: the same frame, found with nothing of the call before it.
        let mut bytewise = FrameWatch::new(SMALL, 24, now);
        let found: Vec<Breach> = bytes
            .iter()
            .filter_map(|b| {
                bytewise.saw(std::slice::from_ref(b), now);
                bytewise.breach()
            })
            .collect();
        assert_eq!(
            found[0],
            Breach {
                code: FRAME_SIZE_ERROR,
                before: 0
            }
        );
        // A first frame other than SETTINGS is an invalid preface.
        let mut first = FrameWatch::new(SMALL, 24, now);
        let mut bytes = vec![b'P'; 24];
        bytes.extend(frame(PING, 0, 8));
        first.saw(&bytes, now);
        assert_eq!(
            first.breach(),
            Some(Breach {
                code: PROTOCOL_ERROR,
                before: 24
            })
        );
        // A window too large for §6.9.1, its SETTINGS frame split over two calls: withheld from
        // the frame's start, which the first call already passed.
        let mut window = FrameWatch::new(SMALL, 0, now);
        let mut settings = frame(SETTINGS, 0, 12);
        settings[9..21].copy_from_slice(&[0, 3, 0, 0, 0, 9, 0, 4, 0x80, 0, 0, 0]);
        window.saw(&settings[..15], now);
        assert_eq!(window.breach(), None);
        window.saw(&settings[15..], now);
        assert_eq!(
            window.breach(),
            Some(Breach {
                code: FLOW_CONTROL_ERROR,
                before: 0
            })
        );
        // DATA on a stream the client ended: STREAM_CLOSED; on one whose block is open, not
        // this watch's to judge.
        let mut after_end = FrameWatch::new(SMALL, 0, now);
        let mut bytes = frame(HEADERS, END_STREAM | END_HEADERS, 4);
        bytes.extend(frame(DATA, 0, 4));
        after_end.saw(&bytes, now);
        assert_eq!(after_end.breach().map(|b| b.code), Some(STREAM_CLOSED));
        let mut in_block = FrameWatch::new(SMALL, 0, now);
        let mut bytes = frame(HEADERS, END_STREAM, 4);
        bytes.extend(frame(DATA, 0, 4));
        in_block.saw(&bytes, now);
        assert_eq!(in_block.breach(), None);
        for (kind, flags, length) in [
            (SETTINGS, ACK, 6),
            (SETTINGS, 0, 4),
            (RST_STREAM, 0, 5),
            (WINDOW_UPDATE, 0, 3),
            (PRIORITY, 0, 6),
            (GOAWAY, 0, 7),
        ] {
            let mut watch = FrameWatch::new(SMALL, 0, now);
            watch.saw(&frame(kind, flags, length), now);
            assert_eq!(
                watch.breach().map(|b| b.code),
                Some(FRAME_SIZE_ERROR),
                "{kind}"
            );
        }
    }

    #[test]
    fn frames_split_anywhere_are_counted_alike_and_time_refills() {
        let now = Instant::now();
        let mut whole = FrameWatch::new(SMALL, 0, now);
        let mut split = FrameWatch::new(SMALL, 0, now);
        let bytes: Vec<u8> = (0..10)
            .flat_map(|_| {
                frame(DATA, 0, 0)
                    .into_iter()
                    .chain(frame(CONTINUATION, 0, 0))
            })
            .collect();
        whole.saw(&bytes, now);
        for byte in &bytes {
            split.saw(std::slice::from_ref(byte), now);
        }
        assert!(whole.spent() && split.spent());
        // Time earns frames back: 100 a second.
        let mut watch = FrameWatch::new(SMALL, 0, now);
        let ten: Vec<u8> = (0..10).flat_map(|_| frame(RST_STREAM, 0, 4)).collect();
        assert!(!watch.saw(&ten, now));
        let later = now + Duration::from_millis(50);
        assert!(
            !watch.saw(&frame(RST_STREAM, 0, 4), later),
            "five earned by then"
        );
        assert_eq!(lasts(DEFAULT_BUDGET, 1100), Some(Duration::from_secs(1)));
        assert_eq!(lasts(DEFAULT_BUDGET, 50), None);
    }

    #[test]
    fn streams_opened_do_not_refill_the_resets() {
        let now = Instant::now();
        let budget = Budget {
            reset_burst: 5,
            resets_per_second: 10,
            ..DEFAULT_BUDGET
        };
        let mut watch = FrameWatch::new(budget, 0, now);
        // Each stream opened and reset earns 10 frames and spends 1: the frame budget grows, the
        // resets run out at the sixth.
        let stream = |watch: &mut FrameWatch, at| {
            let mut bytes = frame(HEADERS, 0x5, 6);
            bytes.extend(frame(RST_STREAM, 0, 4));
            watch.saw(&bytes, at)
        };
        for _ in 0..5 {
            assert!(!stream(&mut watch, now));
        }
        assert!(stream(&mut watch, now), "the sixth reset is one too many");
        // A tenth of a second later, one more would have been earned.
        let mut watch = FrameWatch::new(budget, 0, now);
        for _ in 0..5 {
            stream(&mut watch, now);
        }
        assert!(!stream(&mut watch, now + Duration::from_millis(100)));
    }
}
