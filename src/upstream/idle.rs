//! One worker's idle keep-alive connections to servers, for reuse by its next requests.
//!
//! Owned by a single worker thread (no lock): keyed by server id, newest last, so the most
//! recently used — warmest — connection is reused first, and the oldest expire. A connection is
//! kept for at most `backend_idle`, which is shorter than common servers' own keep-alive, so
//! herdsman rather than the server closes it; one that the server closed anyway is noticed
//! before reuse when its readiness says so, and otherwise by the retry of an idempotent request.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

struct IdleConnection {
    stream: TcpStream,
    since: Instant,
}

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
    pub fn take(&mut self, server: u64, max_idle: Duration, now: Instant) -> Option<TcpStream> {
        let queue = self.by_server.get_mut(&server)?;
        while let Some(idle) = queue.pop_back() {
            self.count -= 1;
            if now.saturating_duration_since(idle.since) >= max_idle {
                // everything older is expired too
                self.count -= queue.len();
                queue.clear();
                break;
            }
            if still_open(&idle.stream) {
                return Some(idle.stream);
            }
        }
        None
    }

    /// Keeps `stream`, idle `since` then, for reuse unless `server` already has `max_per_server`
    /// idle connections, in which case the oldest is closed.
    pub fn put(&mut self, server: u64, stream: TcpStream, max_per_server: usize, since: Instant) {
        if max_per_server == 0 {
            return;
        }
        let queue = self.by_server.entry(server).or_default();
        if queue.len() >= max_per_server {
            queue.pop_front();
            self.count -= 1;
        }
        queue.push_back(IdleConnection { stream, since });
        self.count += 1;
    }

    /// Closes connections idle for `max_idle` or longer.
    pub fn close_expired(&mut self, max_idle: Duration) {
        let now = Instant::now();
        let mut closed = 0;
        self.by_server.retain(|_, queue| {
            let before = queue.len();
            queue.retain(|idle| now.duration_since(idle.since) < max_idle);
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

/// A pooled connection is usable if reading would block: no EOF, no error, and no bytes the
/// server sent outside a response. tokio answers from its cached readiness without a syscall
/// when the socket has not become readable since it was last drained.
fn still_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
