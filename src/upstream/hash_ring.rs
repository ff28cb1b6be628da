//! Consistent hashing for `balance = "hash"`: the ring of server points ([`HashRing`]) and the
//! stable hash of a request's key ([`key_hash`]).
//!
//! Each server owns points on a ring of 2^64 positions; a key goes to the owner of the first point
//! at or after the key's hash, wrapping around. A server's points come from its name alone (a
//! stream seeded by the name's hash), never from its position in the pool, so adding or removing
//! one of N servers moves only the keys that land on that server's points — about 1/N of them —
//! and reordering the pool moves none.

/// Points a server gets per unit of weight while the ring fits in [`MAX_POINTS`].
///
/// A server's share of the ring varies with the luck of its points: its relative spread is about
/// sqrt((N-1)/(N·points)). With nginx's and ketama's 160, a server of three is 13% off its share
/// at two standard deviations; with 1024 it is 5%.
const POINTS_PER_WEIGHT: u64 = 1024;

/// Most points a ring holds (12 bytes each: 12 MiB), reached past a total weight of 1024 (say,
/// 1024 servers of weight 1, or 10 of weight 100).
///
/// Beyond it every server's points are halved until the ring fits (but a server always keeps at
/// least one point per unit of weight). Each server keeps the first half of its own points, yet
/// the keys on the dropped points go to whichever point follows, mostly another server's: a change
/// that takes the pool's total weight across a power of two above 1024 moves about half the keys,
/// not 1/N. Smaller changes in a pool that large move only the changed server's keys.
const MAX_POINTS: u64 = 1 << 20;

/// Consistent hashing over a pool's servers: adding or removing one of N servers remaps about 1/N
/// of the keys, and only keys of that server.
#[derive(Debug)]
pub struct HashRing {
    /// Each point's position on the ring, ascending.
    positions: Vec<u64>,
    /// `owners[i]`: the server at `positions[i]`, as an index into the slice given to `new`.
    owners: Vec<u32>,
}

impl HashRing {
    /// The ring over `servers`: the stable name and weight of each, in pool order. A server of
    /// weight 0 gets no points and is never picked (it still counts for the indices). Names are
    /// assumed distinct, as config requires within a pool.
    pub fn new(servers: &[(&str, u32)]) -> HashRing {
        let total_weight: u64 = servers.iter().map(|&(_, weight)| u64::from(weight)).sum();
        let mut points_per_weight = POINTS_PER_WEIGHT;
        while points_per_weight > 1 && total_weight * points_per_weight > MAX_POINTS {
            points_per_weight /= 2;
        }

        let mut points: Vec<(u64, u32)> =
            Vec::with_capacity((total_weight * points_per_weight) as usize);
        for (index, &(name, weight)) in servers.iter().enumerate() {
            let mut state = key_hash(name.as_bytes());
            for _ in 0..u64::from(weight) * points_per_weight {
                points.push((splitmix64(&mut state), index as u32));
            }
        }
        // Two servers at one position (rare) are ordered by name, so the order of `servers`
        // never decides which one the position's keys go to.
        points.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| servers[a.1 as usize].0.cmp(servers[b.1 as usize].0))
        });
        HashRing {
            positions: points.iter().map(|&(position, _)| position).collect(),
            owners: points.iter().map(|&(_, owner)| owner).collect(),
        }
    }

    /// The index (into the slice given to [`new`](Self::new)) of the server for a key whose
    /// [`key_hash`] is `key_hash`; `None` when no server has weight.
    pub fn pick(&self, key_hash: u64) -> Option<usize> {
        let first_at_or_after = self
            .positions
            .partition_point(|&position| position < key_hash);
        let point = if first_at_or_after == self.positions.len() {
            0
        } else {
            first_at_or_after
        };
        self.owners.get(point).map(|&owner| owner as usize)
    }

    /// Whether no server has points (every weight was 0, or there were no servers).
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
}

/// A stable 64-bit hash of a key's bytes: the same across runs, processes, platforms and
/// versions of Rust (unlike std's `RandomState`), because a key must keep its server when
/// herdsman restarts and across workers. Used for client addresses, header and cookie values.
///
/// Eight bytes at a time (little-endian) through a multiply and rotate, the length folded in,
/// then MurmurHash3's finalizer so every input bit reaches every output bit. Not keyed: a client
/// can choose a key that lands on a given server, as it could by trying keys anyway.
pub fn key_hash(bytes: &[u8]) -> u64 {
    const SEED: u64 = 0x243f_6a88_85a3_08d3; // The first digits of pi.
    const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15; // 2^64 divided by the golden ratio.
    let step = |hash: u64, word: u64| (hash ^ word).wrapping_mul(MULTIPLIER).rotate_left(29);

    let mut hash = SEED ^ (bytes.len() as u64).wrapping_mul(MULTIPLIER);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        hash = step(hash, u64::from_le_bytes(word.try_into().unwrap()));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        hash = step(hash, u64::from_le_bytes(last));
    }
    murmur3_finalize(hash)
}

/// MurmurHash3's 64-bit finalizer (fmix64): a bijection in which each input bit flips each output
/// bit with probability close to 1/2.
fn murmur3_finalize(mut hash: u64) -> u64 {
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// The next number of the SplitMix64 sequence at `state`: a server's ring positions, one per call.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: usize = 100_000;

    fn key_hashes() -> Vec<u64> {
        (0..KEYS)
            .map(|i| key_hash(format!("key-{i}").as_bytes()))
            .collect()
    }

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("app-{i}")).collect()
    }

    /// The name of the server each key goes to, over servers of weight 1.
    fn assign<'n>(names: &[&'n str], hashes: &[u64]) -> Vec<&'n str> {
        let servers: Vec<(&str, u32)> = names.iter().map(|&name| (name, 1)).collect();
        let ring = HashRing::new(&servers);
        hashes
            .iter()
            .map(|&hash| names[ring.pick(hash).unwrap()])
            .collect()
    }

    fn fraction_changed(before: &[&str], after: &[&str]) -> f64 {
        let changed = before.iter().zip(after).filter(|(b, a)| b != a).count();
        changed as f64 / before.len() as f64
    }

    #[test]
    fn removing_one_of_n_servers_moves_only_its_keys() {
        let hashes = key_hashes();
        for n in [3, 5, 10] {
            let names = names(n);
            let all: Vec<&str> = names.iter().map(String::as_str).collect();
            let before = assign(&all, &hashes);
            for removed in [0, n / 2, n - 1] {
                let mut fewer = all.clone();
                fewer.remove(removed);
                let after = assign(&fewer, &hashes);
                let changed = fraction_changed(&before, &after);
                assert!(
                    changed <= 1.0 / n as f64 + 0.02,
                    "n = {n}, removing {}: {changed} of keys moved",
                    all[removed]
                );
                for (b, a) in before.iter().zip(&after) {
                    assert!(b == a || *b == all[removed], "{b} -> {a}");
                }
            }
        }
    }

    #[test]
    fn adding_a_server_to_n_moves_only_keys_to_it() {
        let hashes = key_hashes();
        for n in [3, 5, 10] {
            let names = names(n + 1);
            let all: Vec<&str> = names.iter().map(String::as_str).collect();
            let before = assign(&all[..n], &hashes);
            let after = assign(&all, &hashes);
            let changed = fraction_changed(&before, &after);
            assert!(
                changed <= 1.0 / (n + 1) as f64 + 0.02,
                "n = {n}: {changed} of keys moved"
            );
            for (b, a) in before.iter().zip(&after) {
                assert!(b == a || *a == all[n], "{b} -> {a}");
            }
        }
    }

    #[test]
    fn weights_are_honoured() {
        let servers = [("light", 1), ("heavy", 3), ("middle", 2)];
        let ring = HashRing::new(&servers);
        let mut taken = [0usize; 3];
        for hash in key_hashes() {
            taken[ring.pick(hash).unwrap()] += 1;
        }
        let ratio = taken[1] as f64 / taken[0] as f64;
        assert!((3.0 * 0.85..=3.0 * 1.15).contains(&ratio), "{taken:?}");
        let ratio = taken[2] as f64 / taken[0] as f64;
        assert!((2.0 * 0.85..=2.0 * 1.15).contains(&ratio), "{taken:?}");
    }

    #[test]
    fn servers_of_weight_zero_are_never_picked() {
        let ring = HashRing::new(&[("drained", 0), ("ready", 1), ("off", 0)]);
        assert!(key_hashes().iter().all(|&hash| ring.pick(hash) == Some(1)));
    }

    #[test]
    fn an_empty_ring_picks_nothing() {
        for ring in [HashRing::new(&[]), HashRing::new(&[("a", 0), ("b", 0)])] {
            assert!(ring.is_empty());
            assert_eq!(ring.pick(0), None);
            assert_eq!(ring.pick(u64::MAX), None);
        }
    }

    #[test]
    fn a_single_server_takes_every_key() {
        let ring = HashRing::new(&[("only", 5)]);
        assert!(!ring.is_empty());
        for hash in [0, 1, u64::MAX / 2, u64::MAX]
            .into_iter()
            .chain(key_hashes())
        {
            assert_eq!(ring.pick(hash), Some(0));
        }
    }

    #[test]
    fn the_order_of_servers_does_not_matter() {
        let hashes = key_hashes();
        let names = names(7);
        let forward: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut shuffled = forward.clone();
        shuffled.reverse();
        shuffled.swap(1, 4);
        assert_eq!(assign(&forward, &hashes), assign(&shuffled, &hashes));
    }

    #[test]
    fn a_large_pool_fits_the_point_budget() {
        let names = names(600);
        let servers: Vec<(&str, u32)> = names.iter().map(|name| (name.as_str(), 256)).collect();
        let ring = HashRing::new(&servers);
        assert!(ring.positions.len() as u64 <= MAX_POINTS);
        let mut owns_points = vec![false; servers.len()];
        for &owner in &ring.owners {
            owns_points[owner as usize] = true;
        }
        assert!(owns_points.iter().all(|&owns| owns));
        assert!(ring.positions.windows(2).all(|pair| pair[0] <= pair[1]));
    }

    #[test]
    fn key_hash_is_stable() {
        // Fixed values (checked against an independent implementation): a change here would move
        // every hashed client to another server on upgrade.
        assert_eq!(key_hash(b""), murmur3_finalize(0x243f_6a88_85a3_08d3));
        assert_eq!(key_hash(b"10.0.0.1"), 6_659_364_142_136_941_120);
        assert_eq!(key_hash(&[10, 0, 0, 1]), 16_343_635_078_909_383_585);
        assert_ne!(key_hash(b"a"), key_hash(b"a\0"));
        assert_ne!(key_hash(b"abcdefgh"), key_hash(b"abcdefgh\0"));
    }
}
