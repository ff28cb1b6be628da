//! One worker's idle keep-alive connections to servers, for reuse by its next requests.
//!
//! Owned by a single worker thread (no lock): keyed by server id, newest last, so the most
//! recently used — warmest — connection is reused first, and the oldest expire. A connection is
//! kept for at most `backend_idle`, which is shorter than common servers' own keep-alive, or
//! for less when its server's `Keep-Alive: timeout=N` says so, so that herdsman rather than the
//! server closes it. One that the server closed anyway is noticed before reuse: by its
//! readiness, which the runtime updates as the server's FIN arrives, and, for a connection idle
//! long enough that a server's timer may have fired, by asking the kernel directly. What is left
//! is a close that crosses a request on the wire; the exchange replays such a request when the
//! server's TCP took none of it (`transport::ServerStream`).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use crate::transport::Stream;

struct IdleConnection {
    stream: Stream,
    since: Instant,
    /// Its server's own bound on idle time (from a keep-alive hint), if it gave one.
    limit: Option<Duration>,
}

impl IdleConnection {
    /// Idle too long, having been idle `for_how_long`, given `backend_idle`.
    fn expired(&self, max_idle: Duration, for_how_long: Duration) -> bool {
        for_how_long >= self.limit.map_or(max_idle, |limit| limit.min(max_idle))
    }
}

/// Idle this long, a connection is checked with the kernel before reuse rather than trusted to
/// the runtime's last word on its readiness, which may predate a close the event loop has not
/// yet polled for: one `recv` more, paid only by connections quiet for a while (a busy one is
/// reused within microseconds). Far below any common server's keep-alive (1 s and up).
const ASK_THE_KERNEL_AFTER: Duration = Duration::from_millis(100);

/// Hashes server ids (distinct integers) with one multiplication: SipHash, the default, cost
/// about 160 instructions a request here (callgrind, bench/results/optimisation.md), and its
/// resistance to chosen keys buys nothing for ids herdsman assigns itself.
#[derive(Default)]
struct ServerIdHasher(u64);

impl Hasher for ServerIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(*byte));
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: the golden-ratio multiplier spreads consecutive ids over the
        // high bits, which the hash table uses.
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[derive(Default)]
pub struct IdleConnections {
    by_server: HashMap<u64, VecDeque<IdleConnection>, BuildHasherDefault<ServerIdHasher>>,
    count: usize,
}

impl IdleConnections {
    pub fn new() -> IdleConnections {
        IdleConnections::default()
    }

    /// Connections held now, over all servers.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Takes the newest usable connection to `server`, dropping any that expired by `now` or
    /// that the server closed (or sent unasked-for bytes on) while idle.
    pub fn take(&mut self, server: u64, max_idle: Duration, now: Instant) -> Option<Stream> {
        let queue = self.by_server.get_mut(&server)?;
        while let Some(idle) = queue.pop_back() {
            self.count -= 1;
            let for_how_long = now.saturating_duration_since(idle.since);
            if idle.expired(max_idle, for_how_long) {
                // Everything older is expired too (a server's hint is the same on each).
                self.count -= queue.len();
                queue.clear();
                break;
            }
            if idle.stream.still_open(for_how_long >= ASK_THE_KERNEL_AFTER) {
                return Some(idle.stream);
            }
        }
        None
    }

    /// Keeps `stream`, idle `since` then, for reuse unless `server` already has `max_per_server`
    /// idle connections, in which case the oldest is closed. `limit`: the server's own bound on
    /// its idle time, when it gave one.
    pub fn put(
        &mut self,
        server: u64,
        stream: Stream,
        max_per_server: usize,
        since: Instant,
        limit: Option<Duration>,
    ) {
        if max_per_server == 0 {
            return;
        }
        let queue = self.by_server.entry(server).or_default();
        if queue.len() >= max_per_server {
            queue.pop_front();
            self.count -= 1;
        }
        queue.push_back(IdleConnection {
            stream,
            since,
            limit,
        });
        self.count += 1;
    }

    /// Closes connections idle for `max_idle` or longer.
    pub fn close_expired(&mut self, max_idle: Duration) {
        let now = Instant::now();
        let mut closed = 0;
        self.by_server.retain(|_, queue| {
            let before = queue.len();
            queue.retain(|idle| !idle.expired(max_idle, now.saturating_duration_since(idle.since)));
            closed += before - queue.len();
            !queue.is_empty()
        });
        self.count -= closed;
    }

    /// Closes the connections to servers for which `keep` is false (removed or re-addressed).
    pub fn retain_servers(&mut self, keep: impl Fn(u64) -> bool) {
        let mut closed = 0;
        self.by_server.retain(|&server, queue| {
            let kept = keep(server);
            if !kept {
                closed += queue.len();
            }
            kept
        });
        self.count -= closed;
    }

    /// Closes every idle connection (shutdown).
    pub fn clear(&mut self) {
        self.by_server.clear();
        self.count = 0;
    }
}
