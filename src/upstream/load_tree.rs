//! Least-conn's index: a tree over a pool's servers in which every node holds the least load
//! below it, so that a pick finds the least loaded server in a few atomic reads whatever the
//! pool's size, and a request's start or end re-plays only its server's path towards the root,
//! stopping where nothing changes (about four levels under wrk's 50 connections over 10,000
//! servers, where the servers taken last sit side by side; one where a server's neighbours idle).
//!
//! HAProxy keeps its servers in a tree ordered by load under a lock; here every node is one atomic
//! — its subtree's least load — so workers never lock, and re-playing a path compares sibling
//! nodes that share a cache line rather than visiting each server's counters. A load is active
//! requests per unit of weight as a 32.32 fixed-point number, which orders servers exactly as
//! comparing the fractions would for weights up to 65,536 (herdsman's top is 256). Two workers
//! re-playing paths at once may leave a node a request or two behind; the next change under that
//! node repairs it, and two workers picking at once may take the same server; the request path
//! tolerates a pick that is a request off (the scan it replaced read the counts without any
//! snapshot of them either).
//!
//! A server is lighter than another when its active requests per unit of (effective) weight are
//! fewer. Among equals, a pick takes the first at or after the cursor — one past the server
//! picked last — in pool order, so that ties (every server idle, at low load) rotate through the
//! servers in turn instead of landing on the first. That keeps ties as cheap as the rest: an
//! earlier version broke them by when each server was last taken, which changed the winner of
//! every node on the taken server's path at every pick (about 900 instructions a request over
//! 10,000 servers, `bench/results/pick.md`); here a pick that finds its server at the cursor
//! reads three atomics and writes one.
//!
//! A tree lives as long as its pool keeps the same servers (`snapshot::Lineage` hands it from one
//! snapshot to the next and only re-weighs it). When the servers change, the new tree is built
//! from the live counts and the old one forwards to it: a request that started under the old tree
//! and ends later re-plays its server's path in both.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use super::snapshot::ServerCounters;

/// An index that names no server (a server that left the pool, in a successor's map).
const NONE: u32 = u32::MAX;

/// The load of a server that takes no new requests (and of padding past the last server): above
/// any other.
const UNAVAILABLE: u64 = u64::MAX;

/// How many times a pick repairs the path that misled it and looks again, when the tree changed
/// under its search (another worker took or released a server on the way); then it takes the
/// server it reached.
const SEARCHES: usize = 4;

#[derive(Debug)]
pub struct LoadTree {
    /// Each server's counters, in pool order (shared with the snapshots' `Server`s).
    counters: Box<[Arc<ServerCounters>]>,
    /// The weight each server takes new requests with; 0: none (down, drained, ramping from 0).
    weights: Box<[AtomicU32]>,
    /// Where the next pick starts looking: one past the server picked last.
    cursor: PaddedCursor,
    /// Each node's least load below it: leaves at `width..2 * width` (server `i` at `width + i`),
    /// the root at 1; eight nodes to a cache line.
    loads: Box<[AtomicU64]>,
    width: usize,
    /// Set when the pool's servers change: the tree that replaced this one, and for each of this
    /// tree's servers its index there (`NONE` if it left).
    successor: OnceLock<(Arc<LoadTree>, Box<[u32]>)>,
}

#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCursor(AtomicUsize);

impl LoadTree {
    /// A tree over `servers` — each one's counters and the weight it takes new requests with.
    pub fn new(servers: &[(Arc<ServerCounters>, u32)]) -> LoadTree {
        // At least two leaves, so that the root is an inner node.
        let width = servers.len().next_power_of_two().max(2);
        let tree = LoadTree {
            counters: servers.iter().map(|(c, _)| Arc::clone(c)).collect(),
            weights: servers.iter().map(|&(_, w)| AtomicU32::new(w)).collect(),
            cursor: PaddedCursor::default(),
            loads: (0..2 * width)
                .map(|_| AtomicU64::new(UNAVAILABLE))
                .collect(),
            width,
            successor: OnceLock::new(),
        };
        tree.rebuild();
        tree
    }

    /// Whether this tree is over exactly these counters, in this order (then it can serve the
    /// next snapshot of the pool with new weights).
    pub fn serves(&self, counters: &[&Arc<ServerCounters>]) -> bool {
        self.counters.len() == counters.len()
            && self
                .counters
                .iter()
                .zip(counters)
                .all(|(own, other)| Arc::ptr_eq(own, other))
    }

    /// New weights for the same servers (slow start, health, a drain): every node recomputed.
    pub fn reweigh(&self, weights: &[u32]) {
        for (own, &weight) in self.weights.iter().zip(weights) {
            own.store(weight, Ordering::Relaxed);
        }
        self.rebuild();
    }

    /// The tree that replaces this one, built for `servers`; this one forwards its changes to it
    /// from now on.
    pub fn succeed(&self, servers: &[(Arc<ServerCounters>, u32)]) -> Arc<LoadTree> {
        let next = Arc::new(LoadTree::new(servers));
        let positions: std::collections::HashMap<*const ServerCounters, u32> = next
            .counters
            .iter()
            .enumerate()
            .map(|(i, counters)| (Arc::as_ptr(counters), i as u32))
            .collect();
        let map = self
            .counters
            .iter()
            .map(|counters| *positions.get(&Arc::as_ptr(counters)).unwrap_or(&NONE))
            .collect();
        // Set once: a tree is replaced once (its pool's next servers get the next tree).
        let _ = self.successor.set((Arc::clone(&next), map));
        next
    }

    /// The lightest server that takes new requests, if any: among equals the first at or after
    /// the cursor, which then moves past it.
    #[inline]
    pub fn lightest(&self) -> Option<usize> {
        let mut reached = None;
        for _ in 0..SEARCHES {
            let least = self.loads[1].load(Ordering::Relaxed);
            if least == UNAVAILABLE {
                return None;
            }
            let start = self.cursor.0.load(Ordering::Relaxed);
            let start = if start < self.counters.len() {
                start
            } else {
                0
            };
            match self.first_at_most(start, least) {
                Ok(found) => {
                    self.cursor.0.store(found + 1, Ordering::Relaxed);
                    return Some(found);
                }
                Err(leaf) => {
                    // A node on the way promised a load that no server below it has: two
                    // re-plays raced past each other. Its path is worked out again, and the
                    // search made again.
                    self.repair_path(leaf);
                    reached = Some(leaf);
                }
            }
        }
        // Changes keep racing the search: the server it reached, if that one takes requests (a
        // pick a request or two off, never a 503 while a server is available).
        reached.filter(|&leaf| {
            leaf < self.counters.len()
                && self.loads[self.width + leaf].load(Ordering::Relaxed) != UNAVAILABLE
        })
    }

    /// The first server at or after `start`, else the first of all, whose load is at most
    /// `least` (the root's, so never `UNAVAILABLE`: a server found takes requests). When a node
    /// is stale (a concurrent change, or two that raced), the search may reach a leaf that is
    /// heavier after all: `Err` with it.
    fn first_at_most(&self, start: usize, least: u64) -> Result<usize, usize> {
        let load = |node: usize| self.loads[node].load(Ordering::Relaxed);
        let mut node = self.width + start;
        if load(node) <= least {
            return Ok(start);
        }
        // Up until a right sibling holds one (the servers just after those below `node`), …
        while node > 1 {
            if node.is_multiple_of(2) && load(node + 1) <= least {
                node += 1;
                break;
            }
            node /= 2;
        }
        // … or from the root when none after `start` does; then down to its first (or, should
        // neither child keep the node's promise, to the lighter).
        while node < self.width {
            let (left, right) = (load(2 * node), load(2 * node + 1));
            node = if left <= least || (right > least && left <= right) {
                2 * node
            } else {
                2 * node + 1
            };
        }
        let index = node - self.width;
        if load(node) <= least {
            Ok(index)
        } else {
            Err(index)
        }
    }

    /// Every node on leaf `index`'s path worked out again from its children, to the root.
    #[cold]
    fn repair_path(&self, index: usize) {
        let mut node = (self.width + index) / 2;
        while node >= 1 {
            self.recompute(node);
            node /= 2;
        }
    }

    /// Inner node `node`'s least load, from its two children.
    fn recompute(&self, node: usize) {
        let load = |node: usize| self.loads[node].load(Ordering::Relaxed);
        let least = load(2 * node).min(load(2 * node + 1));
        self.loads[node].store(least, Ordering::Relaxed);
    }

    /// Server `index`'s load changed (a request on it started or ended): its path is played again
    /// towards the root, in this tree and in any that replaced it.
    pub fn changed(&self, index: usize) {
        self.replay_path(index);
        let mut tree = self;
        let mut index = index as u32;
        while let Some((next, map)) = tree.successor.get() {
            index = map[index as usize];
            if index == NONE {
                return;
            }
            next.replay_path(index as usize);
            tree = next;
        }
    }

    fn replay_path(&self, index: usize) {
        let mut node = self.width + index;
        let mut least = self.load(index);
        self.loads[node].store(least, Ordering::Relaxed);
        while node > 1 {
            least = least.min(self.loads[node ^ 1].load(Ordering::Relaxed));
            node /= 2;
            if self.loads[node].load(Ordering::Relaxed) == least {
                // Nothing changed here, so nothing above changes either.
                return;
            }
            self.loads[node].store(least, Ordering::Relaxed);
        }
    }

    /// Every node from the leaves up.
    fn rebuild(&self) {
        for index in 0..self.counters.len() {
            self.loads[self.width + index].store(self.load(index), Ordering::Relaxed);
        }
        for node in (1..self.width).rev() {
            self.recompute(node);
        }
    }

    /// Server `index`'s active requests per unit of weight, in 32.32 fixed point.
    fn load(&self, index: usize) -> u64 {
        match self.weights[index].load(Ordering::Relaxed) {
            0 => UNAVAILABLE,
            weight => (u64::from(self.counters[index].active()) << 32) / u64::from(weight),
        }
    }

    #[cfg(test)]
    fn weight(&self, index: usize) -> u64 {
        u64::from(self.weights[index].load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::snapshot::ActiveGuard;
    use proptest::prelude::*;

    fn counters(count: usize) -> Vec<Arc<ServerCounters>> {
        (0..count).map(|_| Arc::default()).collect()
    }

    fn with_weights(counters: &[Arc<ServerCounters>], weights: &[u32]) -> LoadTree {
        let servers: Vec<_> = counters
            .iter()
            .zip(weights)
            .map(|(c, &w)| (Arc::clone(c), w))
            .collect();
        LoadTree::new(&servers)
    }

    /// The scan the tree replaces: the least active requests per unit of weight among servers
    /// with weight, as a fraction to compare exactly.
    fn least_load_by_scan(counters: &[Arc<ServerCounters>], weights: &[u32]) -> Option<(u64, u64)> {
        counters
            .iter()
            .zip(weights)
            .filter(|(_, &w)| w > 0)
            .map(|(c, &w)| (u64::from(c.active()), u64::from(w)))
            .min_by(|(a, wa), (b, wb)| (a * wb).cmp(&(b * wa)))
    }

    fn load_of(tree: &LoadTree, counters: &[Arc<ServerCounters>], index: usize) -> (u64, u64) {
        (u64::from(counters[index].active()), tree.weight(index))
    }

    /// Takes a request on `index` as the request path does (the guard's end is told to the
    /// tree by the caller).
    fn take<'c>(
        tree: &LoadTree,
        counters: &'c [Arc<ServerCounters>],
        index: usize,
    ) -> ActiveGuard<'c> {
        let guard = ActiveGuard::new(&counters[index]);
        tree.changed(index);
        guard
    }

    #[test]
    fn idle_servers_take_turns() {
        let counters = counters(5);
        let tree = with_weights(&counters, &[1, 1, 0, 1, 1]);
        let mut order = Vec::new();
        for _ in 0..8 {
            let index = tree.lightest().unwrap();
            order.push(index);
            // Taken and finished at once: every server stays idle.
            drop(take(&tree, &counters, index));
            tree.changed(index);
        }
        assert_eq!(order, [0, 1, 3, 4, 0, 1, 3, 4]);
    }

    #[test]
    fn ties_take_turns_past_busy_servers_and_a_lighter_one_comes_first() {
        let counters = counters(11);
        let tree = with_weights(&counters, &[1; 11]);
        // Servers 1, 4, 5 and 6 busy: the idle ones take turns in pool order, round the end.
        let _busy: Vec<_> = [1, 4, 5, 6]
            .iter()
            .map(|&index| take(&tree, &counters, index))
            .collect();
        let mut order = Vec::new();
        for _ in 0..9 {
            let index = tree.lightest().unwrap();
            order.push(index);
            drop(take(&tree, &counters, index));
            tree.changed(index);
        }
        assert_eq!(order, [0, 2, 3, 7, 8, 9, 10, 0, 2]);
        // Every server but 9 busy, and the cursor at 3: the search passes the end's busy servers
        // and finds 9; then, with 9 busy too and the first ones idle again, it wraps round.
        let _ten = take(&tree, &counters, 10);
        let more: Vec<_> = [0, 2, 3, 7, 8]
            .iter()
            .map(|&index| take(&tree, &counters, index))
            .collect();
        assert_eq!(tree.lightest(), Some(9));
        let _nine = take(&tree, &counters, 9);
        drop(more);
        for index in [0, 2, 3, 7, 8] {
            tree.changed(index);
        }
        // The cursor is at 10, busy, the last: round to 0.
        assert_eq!(tree.lightest(), Some(0));
        assert_eq!(tree.lightest(), Some(2));
        // With a weight of 2, server 3 carries two requests as lightly as the others carry one.
        tree.reweigh(&[1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1]);
        let _on_three = take(&tree, &counters, 3);
        let everyone: Vec<_> = (0..11)
            .filter(|&index| index != 3)
            .map(|index| take(&tree, &counters, index))
            .collect();
        assert_eq!(tree.lightest(), Some(3));
        drop(everyone);
    }

    #[test]
    fn a_node_left_behind_by_racing_changes_is_repaired_rather_than_answered_503() {
        let counters = counters(4);
        let tree = with_weights(&counters, &[1; 4]);
        let _busy: Vec<_> = (0..4).map(|index| take(&tree, &counters, index)).collect();
        // What two workers' re-plays can leave when servers 0 and 1, siblings, are taken at
        // once: each re-play reads the other's leaf before it changes, finds their parent
        // unchanged at 0 and stops there; the root says 0 too. (The soak's 503s, "no server
        // available", with three servers up.)
        tree.loads[2].store(0, Ordering::Relaxed);
        tree.loads[1].store(0, Ordering::Relaxed);
        assert!(tree.lightest().is_some());
        assert_eq!(
            tree.loads[1].load(Ordering::Relaxed),
            1 << 32,
            "the root is repaired"
        );
        assert_eq!(tree.loads[2].load(Ordering::Relaxed), 1 << 32);
    }

    #[test]
    fn no_weight_no_pick() {
        let counters = counters(3);
        let tree = with_weights(&counters, &[0, 0, 0]);
        assert_eq!(tree.lightest(), None);
        tree.reweigh(&[0, 2, 0]);
        assert_eq!(tree.lightest(), Some(1));
        assert_eq!(with_weights(&[], &[]).lightest(), None);
    }

    #[test]
    fn a_request_ending_under_an_old_tree_reaches_the_new_one() {
        let counters = counters(4);
        let old = with_weights(&counters, &[1; 4]);
        // Server 0 busy with 3 requests, taken under the old tree.
        let guards: Vec<_> = (0..3).map(|_| take(&old, &counters, 0)).collect();
        for index in 1..4 {
            let _one = take(&old, &counters, index);
            let _two = take(&old, &counters, index);
            // … and the others with two each, which end now: all at 0 except server 0.
        }
        // Server 3 leaves; the new tree, over 0..3, is built from the live counts.
        let kept: Vec<_> = counters[..3].iter().map(|c| (Arc::clone(c), 1)).collect();
        let new = old.succeed(&kept);
        assert_ne!(new.lightest(), Some(0));
        // A second request each on 1 and 2 under the new tree; server 0's three end under the
        // old one: the new tree must see it idle again.
        let _on_1 = take(&new, &counters, 1);
        let _on_2 = take(&new, &counters, 2);
        for guard in guards {
            drop(guard);
            old.changed(0);
        }
        assert_eq!(new.lightest(), Some(0));
    }

    proptest! {
        /// After any sequence of requests starting and ending, on any weights (changed on the
        /// way, as slow start and health do), the tree's pick carries the least load the scan
        /// finds, and is a server with weight.
        #[test]
        fn the_pick_is_as_light_as_the_scans(
            weights in proptest::collection::vec(0u32..4, 1..40),
            steps in proptest::collection::vec((any::<u16>(), any::<bool>(), any::<u8>()), 0..300),
        ) {
            let count = weights.len();
            let counters = counters(count);
            let tree = with_weights(&counters, &weights);
            let mut weights = weights;
            let mut held: Vec<Vec<ActiveGuard<'_>>> = (0..count).map(|_| Vec::new()).collect();
            for (server, start, reweigh) in steps {
                let index = usize::from(server) % count;
                if reweigh < 8 {
                    weights[index] = u32::from(server % 3);
                    tree.reweigh(&weights);
                } else if start {
                    let picked = tree.lightest().unwrap_or(index);
                    held[picked].push(take(&tree, &counters, picked));
                } else if held[index].pop().is_some() {
                    tree.changed(index);
                }
                let best = least_load_by_scan(&counters, &weights);
                match tree.lightest() {
                    None => prop_assert!(best.is_none()),
                    Some(picked) => {
                        prop_assert!(weights[picked] > 0);
                        let (load, weight) = load_of(&tree, &counters, picked);
                        let (best_load, best_weight) = best.unwrap();
                        prop_assert_eq!(load * best_weight, best_load * weight);
                    }
                }
            }
        }
    }
}
