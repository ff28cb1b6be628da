//! One worker's idle keep-alive connections to servers, for reuse by its next requests, kept by
//! use.
//!
//! Owned by a single worker thread (no lock): keyed by server id, newest last, so the most
//! recently used — warmest — connection is reused first, and the oldest expire.
//!
//! How many are kept follows use, as HAProxy's idle pools do: a server's connections (in use
//! and idle) may number as many as the worker recently had in use at once, so the next burst finds
//! them open rather than paying a handshake and a close for each request beyond a constant (with
//! 64 kept, 1,000 clients cost herdsman 21 µs of kernel time a request against HAProxy's 14, issue
//! 50). Every [`PURGE_INTERVAL`] the estimate of need moves halfway down towards the period's
//! peak and half the connections beyond it are closed, oldest first, so a fall in use frees them
//! gradually; those no request reaches expire anyway after `backend_idle`. `max_idle_per_server`,
//! when set, caps the idle ones, and a server's `max_connections` all of them. A connection is
//! kept for at most `backend_idle`, which is shorter than common servers' own keep-alive, or
//! for less when its server's `Keep-Alive: timeout=N` says so, so that herdsman rather than the
//! server closes it. One that the server closed anyway is noticed before reuse: by its
//! readiness, which the runtime updates as the server's FIN arrives, and, for a connection idle
//! long enough that a server's timer may have fired, by asking the kernel directly. What is left
//! is a close that crosses a request on the wire; the exchange replays such a request when the
//! server's TCP took none of it (`transport::ServerStream`).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use crate::transport::Moment;

use crate::transport::{ConnectionsInUse, InUse, Stream};

struct IdleConnection {
    stream: Stream,
    since: Moment,
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

/// How often the estimate of each server's need is renewed and the surplus beyond it trimmed:
/// HAProxy's `pool-purge-delay` default, so a load that comes in bursts a few seconds apart keeps
/// its connections between them.
pub const PURGE_INTERVAL: Duration = Duration::from_secs(5);

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

/// One server's connections on this worker.
#[derive(Default)]
struct ServerConnections {
    /// Idle, oldest first.
    idle: VecDeque<IdleConnection>,
    /// Handed to exchanges and not yet back.
    in_use: ConnectionsInUse,
    /// The most in use at once since the last purge.
    peak: u32,
    /// How many the worker is estimated to need: renewed at each purge from the period's peak.
    need: u32,
}

/// What bounds a server's idle connections besides its use; made once per snapshot
/// (`upstream::Server::idle_caps`), so keeping a connection reads two numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleCaps {
    /// Idle connections kept at most: `max_idle_per_server`, or `usize::MAX` when the operator
    /// set none (use alone decides).
    pub max_idle: usize,
    /// Connections in use and idle at most: the server's `max_connections`, or `usize::MAX`.
    pub max_connections: usize,
}

impl IdleCaps {
    /// Use alone decides.
    pub const BY_USE: IdleCaps = IdleCaps {
        max_idle: usize::MAX,
        max_connections: usize::MAX,
    };

    /// The caps of `max_idle_per_server` (`None`: unset) and a server's `max_connections` (0:
    /// none).
    pub fn new(max_idle_per_server: Option<usize>, max_connections: u32) -> IdleCaps {
        IdleCaps {
            max_idle: max_idle_per_server.unwrap_or(usize::MAX),
            max_connections: match max_connections {
                0 => usize::MAX,
                most => most as usize,
            },
        }
    }
}

/// One server's figures on this worker.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct ServerUse {
    idle: usize,
    in_use: u32,
    /// The estimate the idle connections are sized by.
    need: u32,
}

#[derive(Default)]
pub struct IdleConnections {
    by_server: HashMap<u64, ServerConnections, BuildHasherDefault<ServerIdHasher>>,
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

    /// Hands out a connection to `server` for one exchange: the newest usable idle one, if any
    /// and if asked for (`max_idle`: dropping those idle that long by `now`, or that the server
    /// closed, or sent unasked-for bytes on, while idle), and the connection's share of the
    /// server's connections in use, which the exchange holds — on the idle connection, or on the
    /// one it opens instead — until it is done.
    pub fn take(
        &mut self,
        server: u64,
        max_idle: Option<Duration>,
        now: Moment,
    ) -> (Option<Stream>, InUse) {
        // Looked up first: `entry` would make room for an insertion on every call.
        let connections = match self.by_server.get_mut(&server) {
            Some(connections) => connections,
            None => self.by_server.entry(server).or_default(),
        };
        let (in_use, count) = connections.in_use.hand_out();
        connections.peak = connections.peak.max(count);
        let Some(max_idle) = max_idle else {
            return (None, in_use);
        };
        let queue = &mut connections.idle;
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
                return (Some(idle.stream), in_use);
            }
        }
        (None, in_use)
    }

    /// Keeps `stream`, idle `since` then and no longer in use, for reuse while `server`'s
    /// connections are no more than its recent use calls for and `caps` allow; otherwise it is
    /// closed (or, at the idle cap, the oldest idle one is, and this one kept). `limit`: the
    /// server's own bound on its idle time, when it gave one.
    pub fn put(
        &mut self,
        server: u64,
        stream: Stream,
        caps: IdleCaps,
        since: Moment,
        limit: Option<Duration>,
    ) {
        // A server forgotten meanwhile (removed from its pool) keeps nothing.
        let Some(connections) = self.by_server.get_mut(&server) else {
            return;
        };
        let held = connections.in_use.get() as usize + connections.idle.len();
        let by_use = connections.need.max(connections.peak) as usize;
        if held >= by_use.min(caps.max_connections) {
            return;
        }
        let queue = &mut connections.idle;
        if queue.len() >= caps.max_idle {
            if caps.max_idle == 0 {
                return;
            }
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
        let now = Moment::now();
        let mut closed = 0;
        for connections in self.by_server.values_mut() {
            let queue = &mut connections.idle;
            let before = queue.len();
            queue.retain(|idle| !idle.expired(max_idle, now.saturating_duration_since(idle.since)));
            closed += before - queue.len();
        }
        self.count -= closed;
    }

    /// Renews each server's estimate of need from the peak in use since the last purge — the
    /// peak itself, or halfway from the last estimate down to it — and closes half of the
    /// connections beyond it (rounded up), oldest first; forgets servers with nothing in use,
    /// nothing idle and no need left. Call every [`PURGE_INTERVAL`].
    pub fn purge(&mut self) {
        let mut closed = 0;
        self.by_server.retain(|_, connections| {
            let peak = connections.peak;
            connections.need = peak.max(connections.need.midpoint(peak));
            let in_use = connections.in_use.get();
            connections.peak = in_use;
            let held = in_use as usize + connections.idle.len();
            let surplus = held.saturating_sub(connections.need as usize);
            let closing = surplus.div_ceil(2).min(connections.idle.len());
            connections.idle.drain(..closing);
            closed += closing;
            in_use > 0 || !connections.idle.is_empty() || connections.need > 0
        });
        self.count -= closed;
    }

    /// Closes the connections to servers for which `keep` is false (removed or re-addressed).
    pub fn retain_servers(&mut self, keep: impl Fn(u64) -> bool) {
        let mut closed = 0;
        self.by_server.retain(|&server, connections| {
            let kept = keep(server);
            if !kept {
                closed += connections.idle.len();
            }
            kept
        });
        self.count -= closed;
    }

    /// Closes every idle connection (shutdown).
    pub fn clear(&mut self) {
        for connections in self.by_server.values_mut() {
            connections.idle.clear();
        }
        self.count = 0;
    }

    /// What this worker holds of `server` now.
    #[cfg(test)]
    fn server_use(&self, server: u64) -> ServerUse {
        self.by_server
            .get(&server)
            .map(|connections| ServerUse {
                idle: connections.idle.len(),
                in_use: connections.in_use.get(),
                need: connections.need.max(connections.peak),
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    const SERVER: u64 = 7;
    const BY_USE: IdleCaps = IdleCaps::BY_USE;
    const LONG: Duration = Duration::from_secs(60);

    /// `n` open connections to a loopback listener, with the server's ends (kept, so that the
    /// connections stay open).
    async fn connections(n: usize) -> (Vec<Stream>, Vec<TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..n {
            ours.push(Stream::Tcp(TcpStream::connect(addr).await.unwrap()));
            theirs.push(listener.accept().await.unwrap().0);
        }
        (ours, theirs)
    }

    /// A burst: `concurrency` exchanges at once, each on an idle connection if one is left or
    /// else on one from `supply` (opened for it); then every connection is put back. How many were
    /// opened.
    fn burst(
        idle: &mut IdleConnections,
        concurrency: usize,
        supply: &mut Vec<Stream>,
        caps: IdleCaps,
    ) -> usize {
        let now = Moment::now();
        let mut out = Vec::new();
        let mut opened = 0;
        for _ in 0..concurrency {
            let (reused, in_use) = idle.take(SERVER, Some(LONG), now);
            let stream = reused.unwrap_or_else(|| {
                opened += 1;
                supply.pop().expect("a fresh connection")
            });
            out.push((stream, in_use));
        }
        for (stream, in_use) in out {
            drop(in_use);
            idle.put(SERVER, stream, caps, now, None);
        }
        opened
    }

    #[tokio::test]
    async fn a_burst_finds_open_as_many_connections_as_the_last_one_used() {
        let (mut supply, _theirs) = connections(200).await;
        let mut idle = IdleConnections::new();
        assert_eq!(burst(&mut idle, 200, &mut supply, BY_USE), 200);
        assert_eq!(idle.len(), 200, "every connection the burst used is kept");
        for _ in 0..3 {
            assert_eq!(burst(&mut idle, 200, &mut Vec::new(), BY_USE), 0);
        }
        let used = idle.server_use(SERVER);
        assert_eq!((used.idle, used.in_use, used.need), (200, 0, 200));
    }

    #[tokio::test]
    async fn an_explicit_cap_keeps_no_more_than_it_says() {
        let (fresh, _theirs) = connections(100).await;
        let mut idle = IdleConnections::new();
        let caps = IdleCaps::new(Some(10), 0);
        let mut supply = fresh;
        assert_eq!(burst(&mut idle, 100, &mut supply, caps), 100);
        assert_eq!(idle.len(), 10);
        let none = IdleCaps::new(Some(0), 0);
        let (fresh, _more) = connections(1).await;
        let (taken, in_use) = idle.take(SERVER, None, Moment::now());
        assert!(taken.is_none(), "a fresh connection was asked for");
        drop(in_use);
        idle.put(
            SERVER,
            fresh.into_iter().next().unwrap(),
            none,
            Moment::now(),
            None,
        );
        assert_eq!(idle.len(), 10, "0 keeps none");
    }

    #[tokio::test]
    async fn a_server_max_connections_bounds_what_is_kept() {
        let (fresh, _theirs) = connections(50).await;
        let mut idle = IdleConnections::new();
        let caps = IdleCaps::new(None, 20);
        let mut supply = fresh;
        burst(&mut idle, 50, &mut supply, caps);
        assert_eq!(idle.len(), 20);
    }

    #[tokio::test]
    async fn when_use_falls_the_surplus_closes_by_halves_oldest_first() {
        let (fresh, _theirs) = connections(100).await;
        let mut idle = IdleConnections::new();
        let mut supply = fresh;
        burst(&mut idle, 100, &mut supply, BY_USE);
        assert_eq!(idle.len(), 100);
        // The period of the burst: its peak is the need; nothing is surplus.
        idle.purge();
        assert_eq!(idle.len(), 100);
        // Then one request at a time: the estimate halves towards 1 each period, half of what is
        // beyond it closes at each purge, and a connection put back beyond it is closed.
        let mut kept = Vec::new();
        for _ in 0..4 {
            let now = Moment::now();
            let (reused, in_use) = idle.take(SERVER, Some(LONG), now);
            drop(in_use);
            idle.put(SERVER, reused.expect("one kept"), BY_USE, now, None);
            idle.purge();
            kept.push((idle.len(), idle.server_use(SERVER).need));
        }
        // need 50: 100 held, 25 of the 50 beyond it closed; then the one put back is closed too
        // (74 held, need 25: 25 of 49 closed), 48 (need 13: 18 of 35), 29 (need 7: 11 of 22).
        assert_eq!(kept, [(75, 50), (49, 25), (30, 13), (18, 7)]);
        // Connections in use count toward what is held, and are never closed by a purge.
        let (_, in_use) = idle.take(SERVER, None, Moment::now());
        idle.purge();
        assert_eq!(idle.server_use(SERVER).in_use, 1);
        drop(in_use);
        assert_eq!(idle.server_use(SERVER).in_use, 0);
    }

    #[tokio::test]
    async fn a_server_no_longer_used_is_forgotten() {
        let (fresh, _theirs) = connections(1).await;
        let mut idle = IdleConnections::new();
        let mut supply = fresh;
        burst(&mut idle, 1, &mut supply, BY_USE);
        idle.close_expired(Duration::ZERO);
        assert!(idle.is_empty());
        // need 1 (the peak), then 0 (halfway from 1 to 0, rounded down): forgotten.
        idle.purge();
        assert_eq!(idle.by_server.len(), 1);
        idle.purge();
        assert!(idle.by_server.is_empty());
    }
}
