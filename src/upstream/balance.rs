//! Choosing a server for a request: smooth weighted round-robin, least-conn, power of two
//! choices (by load, or by latency and load: peak-ewma), weighted random, consistent hashing.
//!
//! All state a pick reads is in the snapshot: the precomputed round-robin sequence with one
//! shared cursor, least-conn's tree of loads (`load_tree.rs`), the per-server active counts
//! (shared by all workers where a pick reads them: least-conn, p2c, peak-ewma, a limit) and
//! latency estimates (`latency.rs`).
//! All are atomics: workers never take a lock to pick, and round-robin is one sequence for the
//! whole process (so consecutive requests rotate through the servers even when the kernel hands
//! them to different workers). Every pick costs the same whatever the pool's size, except a
//! retry's or a full server's `pick_other`, which scans.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::hash_ring::HashRing;
use super::latency::{Candidate, LatencyRules};
use super::load_tree::LoadTree;
use super::snapshot::Server;
use crate::config::Balance;
use crate::transport::Moment;

/// Longest round-robin sequence precomputed; weights are scaled down past it (only reachable
/// with hundreds of heavily weighted servers, where the rounding is below a percent).
const MAX_SEQUENCE: u64 = 1 << 16;

#[derive(Debug)]
pub struct Balancer {
    kind: Balance,
    /// Indices of servers with weight > 0; empty when no server may take requests.
    eligible: Vec<u32>,
    /// Round-robin: one cycle of nginx's smooth weighted order.
    sequence: Vec<u32>,
    /// Random: running sums of the eligible servers' weights.
    cumulative: Vec<u64>,
    /// Hash: the ring over the eligible servers (its picks index `eligible`).
    ring: Option<HashRing>,
    /// Least-conn: the servers ordered by load, kept across snapshots while the pool keeps its
    /// servers.
    load_tree: Option<Arc<LoadTree>>,
    /// Peak-ewma: how its servers' latency is weighed (from the pool's `latency_window`).
    latency: Option<LatencyRules>,
    cursor: PaddedCursor,
}

#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCursor(AtomicUsize);

impl Balancer {
    /// A balancer over `servers` — each one's name and the weight it takes new requests with
    /// (0: none) — in pool order. Least-conn needs `load_tree`, over the same servers and
    /// weights; the others ignore it. Peak-ewma weighs latency over `latency_window`; the others
    /// ignore it.
    pub fn new(
        kind: Balance,
        servers: &[(&str, u32)],
        load_tree: Option<Arc<LoadTree>>,
        latency_window: Duration,
    ) -> Balancer {
        assert!(
            kind != Balance::LeastConn || load_tree.is_some(),
            "least-conn picks from a load tree"
        );
        let weights: Vec<u32> = servers.iter().map(|&(_, weight)| weight).collect();
        let weights = weights.as_slice();
        let eligible: Vec<u32> = (0..weights.len() as u32)
            .filter(|&i| weights[i as usize] > 0)
            .collect();
        let ring = (kind == Balance::Hash).then(|| {
            let named: Vec<(&str, u32)> = eligible.iter().map(|&i| servers[i as usize]).collect();
            HashRing::new(&named)
        });
        let sequence = if kind == Balance::RoundRobin {
            smooth_weighted_sequence(weights)
        } else {
            Vec::new()
        };
        let mut total = 0u64;
        let cumulative = eligible
            .iter()
            .map(|&i| {
                total += u64::from(weights[i as usize]);
                total
            })
            .collect();
        Balancer {
            kind,
            eligible,
            sequence,
            cumulative,
            ring,
            load_tree: load_tree.filter(|_| kind == Balance::LeastConn),
            latency: (kind == Balance::PeakEwma).then(|| LatencyRules::new(latency_window)),
            cursor: PaddedCursor::default(),
        }
    }

    pub fn kind(&self) -> Balance {
        self.kind
    }

    /// Whether picks read the servers' loads (least-conn, power of two choices, peak-ewma): then
    /// a request in flight is counted where every worker sees it at once.
    pub fn weighs_loads(&self) -> bool {
        matches!(
            self.kind,
            Balance::LeastConn | Balance::P2c | Balance::PeakEwma
        )
    }

    /// Peak-ewma's rules for its servers' latency: the exchange records what each attempt
    /// showed only where this is `Some` (other pools pay one test of it).
    #[inline]
    pub fn latency(&self) -> Option<LatencyRules> {
        self.latency
    }

    /// Least-conn's tree, which a request's start and end on a server must be told of.
    pub fn load_tree(&self) -> Option<&LoadTree> {
        self.load_tree.as_deref()
    }

    /// The index of the server to use, or `None` when no server may take requests (503).
    /// `key_hash` is called only by `hash`, for the hash of the request's key; `now` (a recent
    /// reading: the request's start) is read only by peak-ewma, for its probes.
    pub fn pick(
        &self,
        servers: &[Server],
        rng: &mut fastrand::Rng,
        now: Moment,
        key_hash: impl FnOnce() -> u64,
    ) -> Option<usize> {
        if self.eligible.is_empty() {
            return None;
        }
        let index = match self.kind {
            Balance::RoundRobin => {
                let turn = self.cursor.0.fetch_add(1, Ordering::Relaxed);
                self.sequence[turn % self.sequence.len()]
            }
            Balance::LeastConn => {
                let tree = self.load_tree.as_ref().expect("least-conn has a load tree");
                return tree.lightest();
            }
            Balance::P2c | Balance::PeakEwma => {
                let n = self.eligible.len();
                if n == 1 {
                    self.eligible[0]
                } else {
                    let first = rng.usize(..n);
                    let second = (first + 1 + rng.usize(..n - 1)) % n;
                    let (a, b) = (self.eligible[first], self.eligible[second]);
                    let (first_server, second_server) =
                        (&servers[a as usize], &servers[b as usize]);
                    match self.latency {
                        // A p2c pool counts its requests in flight on the shared counts alone.
                        None => {
                            if lighter(second_server, first_server, |server| {
                                server.counters.active()
                            }) {
                                b
                            } else {
                                a
                            }
                        }
                        Some(rules) => {
                            let preference = rules.prefer(
                                candidate(first_server),
                                candidate(second_server),
                                now,
                            );
                            let taken = if preference.second { b } else { a };
                            if !preference.outclassed || n == 2 {
                                taken
                            } else {
                                // The other was an order of magnitude slower, which says
                                // nothing of how loaded the one taken is: it meets a third,
                                // so that a slow server in the pool does not turn two picks
                                // in three between the others into a coin toss.
                                let third = self.eligible[third_draw(first, second, n, rng)];
                                let rival = &servers[third as usize];
                                let taken_server = &servers[taken as usize];
                                if rules
                                    .prefer(candidate(taken_server), candidate(rival), now)
                                    .second
                                {
                                    third
                                } else {
                                    taken
                                }
                            }
                        }
                    }
                }
            }
            Balance::Random => {
                let total = *self.cumulative.last().expect("eligible is not empty");
                let point = rng.u64(..total);
                let slot = self.cumulative.partition_point(|&sum| sum <= point);
                self.eligible[slot]
            }
            Balance::Hash => {
                let ring = self.ring.as_ref().expect("hash balancers have a ring");
                self.eligible[ring.pick(key_hash())?]
            }
        };
        Some(index as usize)
    }
}

impl Balancer {
    /// The least loaded server (for peak-ewma, the cheapest) that may take new requests and has
    /// room under its `max_connections`, other than those in `tried` (ties broken by a random
    /// start): for a retry, or when the balancer's pick is full.
    pub fn pick_other(
        &self,
        servers: &[Server],
        rng: &mut fastrand::Rng,
        tried: &[usize],
    ) -> Option<usize> {
        let count = self.eligible.len();
        if count == 0 {
            return None;
        }
        let has_room = |index: usize| {
            let server = &servers[index];
            server.max_connections == 0 || server.active() < server.max_connections
        };
        // Least-conn's lightest server is the scan's answer unless it is the one to avoid.
        if let Some(lightest) = self.load_tree().and_then(LoadTree::lightest) {
            if !tried.contains(&lightest) && has_room(lightest) {
                return Some(lightest);
            }
        }
        let start = rng.usize(..count);
        let mut best: Option<usize> = None;
        for offset in 0..count {
            let index = self.eligible[(start + offset) % count] as usize;
            if !has_room(index) || tried.contains(&index) {
                continue;
            }
            let better = |best: usize| {
                let (this, best) = (&servers[index], &servers[best]);
                match self.latency {
                    None => lighter(this, best, Server::active),
                    Some(_) => LatencyRules::cheaper(candidate(this), candidate(best)),
                }
            };
            if best.is_none_or(better) {
                best = Some(index);
            }
        }
        best
    }
}

/// A random index under `n` (at least 3) other than `first` and `second` (which differ).
#[inline]
fn third_draw(first: usize, second: usize, n: usize, rng: &mut fastrand::Rng) -> usize {
    let (low, high) = (first.min(second), first.max(second));
    let mut third = rng.usize(..n - 2);
    if third >= low {
        third += 1;
    }
    if third >= high {
        third += 1;
    }
    third
}

/// A server as peak-ewma weighs it: its latency, its requests in flight over all workers (a
/// peak-ewma pool counts them on the shared counts alone), and the weight it takes new requests
/// with (less while it ramps up after slow start).
#[inline]
fn candidate(server: &Server) -> Candidate<'_> {
    Candidate {
        latency: &server.counters.latency,
        in_flight: server.counters.active(),
        weight: server.effective_weight,
    }
}

/// `a` carries fewer active requests (as `active` counts them) per unit of the weight it takes
/// new requests with (less while it ramps up after slow start) than `b`.
fn lighter(a: &Server, b: &Server, active: impl Fn(&Server) -> u32) -> bool {
    u64::from(active(a)) * u64::from(b.effective_weight)
        < u64::from(active(b)) * u64::from(a.effective_weight)
}

/// Above this many steps × servers, the cycle is ordered by `virtual_time_sequence` instead: the
/// smooth weighted scan costs that many steps (a second over a weighted pool of 10,000 servers,
/// rebuilt on every change to the pool).
const MOST_SCAN_STEPS: u64 = 1 << 22;

/// One cycle of smooth weighted round-robin (nginx's): each step every server gains its weight,
/// the one with the most is picked and loses the total. Weights 5,1,1 give a a b a c a a —
/// heavy servers interleaved, not in bursts.
fn smooth_weighted_sequence(weights: &[u32]) -> Vec<u32> {
    let divisor = weights.iter().fold(0u32, |g, &w| gcd(g, w)).max(1);
    let mut scaled: Vec<u64> = weights.iter().map(|&w| u64::from(w / divisor)).collect();
    let mut total: u64 = scaled.iter().sum();
    if total > MAX_SEQUENCE {
        for w in scaled.iter_mut().filter(|w| **w > 0) {
            *w = (*w * MAX_SEQUENCE / total).max(1);
        }
        total = scaled.iter().sum();
    }
    if scaled.iter().all(|&w| w <= 1) {
        // Equal weights: each server once, in order (what the scan gives, without its n² steps).
        return (0..weights.len() as u32)
            .filter(|&i| scaled[i as usize] == 1)
            .collect();
    }
    if total * weights.len() as u64 > MOST_SCAN_STEPS {
        return virtual_time_sequence(&scaled, total);
    }
    let mut current = vec![0i64; weights.len()];
    let mut sequence = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for i in 0..weights.len() {
            current[i] += scaled[i] as i64;
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total as i64;
        sequence.push(best as u32);
    }
    sequence
}

/// One cycle in which each server's k-th turn falls at (k + ½) / weight of the cycle, in that
/// order (ties by position): as smooth as nginx's order, in `total · log n` steps.
fn virtual_time_sequence(weights: &[u64], total: u64) -> Vec<u32> {
    use std::cmp::Reverse;
    // Turn times as fractions (2k + 1) / (2·weight), compared exactly by cross-multiplying.
    #[derive(PartialEq, Eq)]
    struct Turn {
        numerator: u64,
        denominator: u64,
        server: u32,
    }
    impl Ord for Turn {
        fn cmp(&self, other: &Turn) -> std::cmp::Ordering {
            (u128::from(self.numerator) * u128::from(other.denominator))
                .cmp(&(u128::from(other.numerator) * u128::from(self.denominator)))
                .then(self.server.cmp(&other.server))
        }
    }
    impl PartialOrd for Turn {
        fn partial_cmp(&self, other: &Turn) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    let mut turns: std::collections::BinaryHeap<Reverse<Turn>> = weights
        .iter()
        .enumerate()
        .filter(|&(_, &weight)| weight > 0)
        .map(|(server, &weight)| {
            Reverse(Turn {
                numerator: 1,
                denominator: 2 * weight,
                server: server as u32,
            })
        })
        .collect();
    let mut sequence = Vec::with_capacity(total as usize);
    while sequence.len() < total as usize {
        let Some(Reverse(mut turn)) = turns.pop() else {
            break;
        };
        sequence.push(turn.server);
        turn.numerator += 2;
        turns.push(Reverse(turn));
    }
    sequence
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerState;
    use crate::upstream::latency::Sample;
    use crate::upstream::snapshot::ActiveGuard;

    fn servers(weights: &[u32]) -> Vec<Server> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &weight)| Server {
                id: i as u64,
                name: format!("s{i}"),
                addr: "127.0.0.1:1".parse().unwrap(),
                weight,
                state: ServerState::Ready,
                available: true,
                health: crate::upstream::health::HealthView::Up,
                effective_weight: weight,
                max_connections: 0,
                idle_caps: crate::upstream::idle::IdleCaps::BY_USE,
                counters: Default::default(),
                traffic: std::sync::Arc::new(crate::stats::traffic::Traffic::new(1)),
                set_cookie: None,
                tls: None,
                protocol: crate::config::ServerProtocol::Http1,
                added_at_run_time: false,
            })
            .collect()
    }

    fn balancer(kind: Balance, servers: &[Server]) -> Balancer {
        let named: Vec<(&str, u32)> = servers
            .iter()
            .map(|s| (s.name.as_str(), s.weight))
            .collect();
        let loads: Vec<_> = servers
            .iter()
            .map(|s| (std::sync::Arc::clone(&s.counters), s.weight))
            .collect();
        let window = Duration::from_secs(10);
        Balancer::new(kind, &named, Some(Arc::new(LoadTree::new(&loads))), window)
    }

    fn pick(balancer: &Balancer, servers: &[Server], rng: &mut fastrand::Rng) -> Option<usize> {
        pick_at(balancer, servers, rng, Moment::now())
    }

    fn pick_at(
        balancer: &Balancer,
        servers: &[Server],
        rng: &mut fastrand::Rng,
        now: Moment,
    ) -> Option<usize> {
        let key = rng.u64(..);
        balancer.pick(servers, rng, now, || key)
    }

    fn shares(kind: Balance, weights: &[u32], picks: usize) -> Vec<usize> {
        let servers = servers(weights);
        let balancer = balancer(kind, &servers);
        let mut rng = fastrand::Rng::with_seed(7);
        let mut counts = vec![0; weights.len()];
        for _ in 0..picks {
            counts[pick(&balancer, &servers, &mut rng).unwrap()] += 1;
        }
        counts
    }

    #[test]
    fn smooth_round_robin_interleaves() {
        assert_eq!(
            smooth_weighted_sequence(&[5, 1, 1]),
            vec![0, 0, 1, 0, 2, 0, 0]
        );
        assert_eq!(smooth_weighted_sequence(&[2, 2, 2]), vec![0, 1, 2]);
        assert_eq!(smooth_weighted_sequence(&[0, 1]), vec![1]);
        assert_eq!(smooth_weighted_sequence(&[1, 0, 1]), vec![0, 2]);
        assert_eq!(
            shares(Balance::RoundRobin, &[2, 1, 0], 300),
            vec![200, 100, 0]
        );
    }

    /// A weighted pool too large for the scan (`cargo bench --bench pick` times both): every
    /// server gets its weight's share of each cycle, and a heavy server's turns spread through it
    /// rather than in a burst.
    #[test]
    fn large_weighted_pools_get_a_smooth_cycle() {
        let weights: Vec<u32> = (0..10_000).map(|i| 1 + i % 4).collect();
        let sequence = smooth_weighted_sequence(&weights);
        assert_eq!(sequence.len(), 25_000);
        let mut turns = vec![Vec::new(); weights.len()];
        for (step, &server) in sequence.iter().enumerate() {
            turns[server as usize].push(step);
        }
        for (server, steps) in turns.iter().enumerate() {
            assert_eq!(steps.len() as u32, weights[server], "server {server}");
            // A server of weight 4 has a turn in each quarter of the cycle.
            if weights[server] == 4 {
                let quarters: Vec<usize> = steps.iter().map(|step| step * 4 / 25_000).collect();
                assert_eq!(quarters, [0, 1, 2, 3], "server {server}");
            }
        }
        assert_eq!(virtual_time_sequence(&[5, 1, 1], 7), [0, 0, 0, 1, 2, 0, 0]);
    }

    #[test]
    fn random_and_p2c_follow_weights_and_skip_zero() {
        let random = shares(Balance::Random, &[3, 1, 0], 40_000);
        assert_eq!(random[2], 0);
        assert!((29_000..31_000).contains(&random[0]), "{random:?}");
        let p2c = shares(Balance::P2c, &[1, 1, 0], 1000);
        assert_eq!(p2c[2], 0);
        assert!(p2c[0] > 300 && p2c[1] > 300, "{p2c:?}");
    }

    /// Records an answer of `ms` from `server` at `at`, as the exchange does.
    fn answered(balancer: &Balancer, server: &Server, ms: u64, at: Moment) {
        let rules = balancer.latency().expect("a peak-ewma balancer");
        let took = Duration::from_millis(ms);
        server
            .counters
            .latency
            .record(rules, Sample::Answer(took), at);
    }

    /// Ten servers, one answering in 200 ms and nine in 1 ms, a pick a millisecond for 10 s, each
    /// answered at once: the slow one is picked only for its probes, about one a second (its
    /// estimate is a second old by then), and each comes soon after it is due although a pick
    /// looks at two servers of ten (one in five picks has it among them).
    #[test]
    fn peak_ewma_picks_a_slow_server_only_to_probe_it_about_once_a_second() {
        let servers = servers(&[1; 10]);
        let balancer = balancer(Balance::PeakEwma, &servers);
        let mut rng = fastrand::Rng::with_seed(3);
        let start = Moment::now();
        let slow = 4;
        for (index, server) in servers.iter().enumerate() {
            answered(
                &balancer,
                server,
                if index == slow { 200 } else { 1 },
                start,
            );
        }
        let mut probes = Vec::new();
        let mut last_answer = 0;
        for ms in 1..=10_000 {
            let now = start + Duration::from_millis(ms);
            let index = pick_at(&balancer, &servers, &mut rng, now).unwrap();
            answered(
                &balancer,
                &servers[index],
                if index == slow { 200 } else { 1 },
                now,
            );
            if index == slow {
                probes.push(ms - last_answer);
                last_answer = ms;
            }
        }
        // Due 1,000 ms after its last answer, and a candidate within 60 ms of that but once in
        // about 700 runs (0.8⁶⁰ ≈ 1.5e-6 a probe; the seed makes it the same every run).
        assert!((9..=10).contains(&probes.len()), "{probes:?}");
        assert!(
            probes.iter().all(|&gap| (1000..1060).contains(&gap)),
            "{probes:?}"
        );
    }

    #[test]
    fn peak_ewma_prefers_the_faster_and_less_loaded_by_weight() {
        let servers = servers(&[1, 1, 2, 0]);
        let balancer = balancer(Balance::PeakEwma, &servers);
        let mut rng = fastrand::Rng::with_seed(5);
        let now = Moment::now();
        // Before any answer, each is tried (an idle server without an estimate costs nothing).
        let mut picked = [0; 4];
        for _ in 0..30 {
            picked[pick_at(&balancer, &servers, &mut rng, now).unwrap()] += 1;
        }
        assert_eq!(picked[3], 0, "weight 0: {picked:?}");
        assert!(picked[..3].iter().all(|&n| n > 0), "{picked:?}");
        // s0 20 ms idle (cost 20), s1 10 ms with 2 in flight (30), s2 10 ms with 2 in flight
        // but weight 2 (15).
        answered(&balancer, &servers[0], 20, now);
        answered(&balancer, &servers[1], 10, now);
        answered(&balancer, &servers[2], 10, now);
        let _one: Vec<_> = (0..2)
            .map(|_| ActiveGuard::new(&servers[1].counters))
            .collect();
        let _two: Vec<_> = (0..2)
            .map(|_| ActiveGuard::new(&servers[2].counters))
            .collect();
        let mut picked = [0; 4];
        for _ in 0..3000 {
            picked[pick_at(&balancer, &servers, &mut rng, now).unwrap()] += 1;
        }
        // s2 wins both its pairs (two thirds of picks), s0 its pair with s1 (the other third).
        assert_eq!((picked[1], picked[3]), (0, 0), "{picked:?}");
        assert!((1800..2200).contains(&picked[2]), "{picked:?}");
        // A retry goes to the cheapest of the others.
        assert_eq!(balancer.pick_other(&servers, &mut rng, &[2]), Some(0));
        assert_eq!(balancer.pick_other(&servers, &mut rng, &[2, 0]), Some(1));
    }

    /// A server an order of magnitude slower is no rival: a pick that drew it compares the other
    /// with the third, so every pick goes to the less loaded of the fast two.
    #[test]
    fn peak_ewma_compares_the_fast_servers_when_a_draw_was_a_slow_one() {
        let servers = servers(&[1, 1, 1]);
        let balancer = balancer(Balance::PeakEwma, &servers);
        let mut rng = fastrand::Rng::with_seed(11);
        let now = Moment::now();
        answered(&balancer, &servers[0], 1, now);
        answered(&balancer, &servers[1], 1, now);
        answered(&balancer, &servers[2], 200, now);
        let _busy: Vec<_> = (0..3)
            .map(|_| ActiveGuard::new(&servers[0].counters))
            .collect();
        let mut picked = [0; 3];
        for _ in 0..300 {
            picked[pick_at(&balancer, &servers, &mut rng, now).unwrap()] += 1;
        }
        assert_eq!(picked, [0, 300, 0]);
    }

    #[test]
    fn the_third_draw_is_neither_of_the_first_two_and_each_other_alike() {
        let mut rng = fastrand::Rng::with_seed(2);
        for n in 3..7 {
            for first in 0..n {
                for second in (0..n).filter(|&second| second != first) {
                    let mut seen = vec![0; n];
                    for _ in 0..100 * n {
                        seen[third_draw(first, second, n, &mut rng)] += 1;
                    }
                    assert_eq!((seen[first], seen[second]), (0, 0), "{seen:?}");
                    assert!(
                        seen.iter()
                            .enumerate()
                            .all(|(i, &k)| i == first || i == second || k > 0),
                        "{seen:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn least_conn_avoids_the_busy_server() {
        let servers = servers(&[1, 1, 2]);
        let mut rng = fastrand::Rng::with_seed(1);
        let _busy: Vec<_> = (0..3)
            .map(|_| ActiveGuard::new(&servers[0].counters))
            .collect();
        let _one = ActiveGuard::new(&servers[1].counters);
        let _two: Vec<_> = (0..2)
            .map(|_| ActiveGuard::new(&servers[2].counters))
            .collect();
        // loads: s0 3/1, s1 1/1, s2 2/2 — s1 and s2 tie at 1 per weight, s0 is never chosen
        let balancer = balancer(Balance::LeastConn, &servers);
        for _ in 0..50 {
            assert_ne!(pick(&balancer, &servers, &mut rng), Some(0));
        }
    }

    #[test]
    fn no_eligible_server_is_none() {
        let servers = servers(&[0, 0]);
        for kind in [
            Balance::RoundRobin,
            Balance::LeastConn,
            Balance::P2c,
            Balance::Random,
            Balance::Hash,
            Balance::PeakEwma,
        ] {
            let balancer = balancer(kind, &servers);
            assert_eq!(pick(&balancer, &servers, &mut fastrand::Rng::new()), None);
        }
    }
}
