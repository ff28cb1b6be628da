//! The GCRA state of one limit: each key's theoretical arrival time (TAT) in one 64-bit word of a
//! fixed table, changed by compare-and-swap. No lock, and no allocation once the table is made:
//! its size is set by `max_keys` (8 bytes a key, in buckets of one cache line), and a million
//! distinct keys use the same memory as a hundred.

use std::sync::atomic::{AtomicU64, Ordering};

/// Words in a bucket: one 64-byte cache line, scanned whole by a check.
const SLOTS: usize = 8;

/// A word is the key's 16-bit fingerprint over its TAT in microseconds of the monotonic clock
/// (48 bits: 8.9 years of uptime before it wraps).
const TAT_BITS: u32 = 48;
const TAT_MASK: u64 = (1 << TAT_BITS) - 1;

/// One cache line of slots: a key lives in the bucket its hash names, in any of its slots.
#[repr(align(64))]
#[derive(Default)]
struct Bucket([AtomicU64; SLOTS]);

/// What a check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let through; `remaining` more requests would be now.
    Allowed { remaining: u32 },
    /// Over the limit: the next request would be let through after this many microseconds.
    Limited { retry_after_micros: u64 },
}

/// A check's verdict, and whether it forgot another key for room (a full bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    pub verdict: Verdict,
    pub evicted: bool,
}

/// The TATs of one limit's keys.
///
/// A key is found by its hash: the low 32 bits choose the bucket, the high 16 are kept with the
/// TAT as a fingerprint. Two keys with the same bucket and fingerprint share a TAT (about one new
/// key in 8,000 meets another's in a full bucket); they are limited together, as if one client.
/// A key whose TAT is in the past is at its full burst, so its word is free for another key:
/// forgetting it changes nothing. When all eight of a bucket's keys are within their limits'
/// memory, the one whose TAT is earliest (the nearest to its full burst) is forgotten, and
/// comes back with a full burst: the table's bound is paid for in accuracy under pressure, never
/// in memory.
pub struct GcraTable {
    buckets: Box<[Bucket]>,
}

impl GcraTable {
    /// A table of at least `max_keys` slots (rounded up to whole buckets).
    pub fn new(max_keys: u32) -> GcraTable {
        let buckets = (max_keys as usize).div_ceil(SLOTS).max(1);
        GcraTable {
            buckets: (0..buckets).map(|_| Bucket::default()).collect(),
        }
    }

    /// The memory the table holds, in bytes: fixed when it is made.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets)
    }

    /// Counts one request of the key hashed to `hash` at `now_micros` against `interval_micros`
    /// a request and a burst of `burst`: GCRA. The key's TAT moves one interval on when the
    /// request is let through; a request that would take it more than `burst` intervals past
    /// now is refused and changes nothing.
    pub fn check(&self, hash: u64, now_micros: u64, interval_micros: u64, burst: u32) -> Checked {
        let (bucket, fingerprint) = self.locate(hash);
        let now = now_micros & TAT_MASK;
        let tolerance = interval_micros.saturating_mul(u64::from(burst));
        loop {
            let (slot, word, evicted) = choose_slot(bucket, fingerprint, now);
            let own = word >> TAT_BITS == fingerprint;
            let tat = if own { (word & TAT_MASK).max(now) } else { now };
            let next = tat + interval_micros;
            let ahead = next - now;
            if ahead > tolerance {
                return Checked {
                    verdict: Verdict::Limited {
                        retry_after_micros: ahead - tolerance,
                    },
                    evicted: false,
                };
            }
            let new_word = (fingerprint << TAT_BITS) | (next & TAT_MASK);
            // A lost race (another worker counted a request of a key in this slot, or took the
            // slot for another key) is checked again from the start.
            if bucket[slot]
                .compare_exchange(word, new_word, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let remaining = (tolerance - ahead) / interval_micros.max(1);
                return Checked {
                    verdict: Verdict::Allowed {
                        remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
                    },
                    evicted,
                };
            }
        }
    }
}

impl GcraTable {
    /// The bucket of the key hashed to `hash`, and its fingerprint there.
    fn locate(&self, hash: u64) -> (&[AtomicU64; SLOTS], u64) {
        // Multiply-shift rather than a mask: the bucket count need not be a power of two, so
        // `max_keys` is what the table holds.
        let index = ((hash & 0xffff_ffff) * self.buckets.len() as u64) >> 32;
        // Never 0: an empty slot's word is 0, and must not read as some key's.
        (&self.buckets[index as usize].0, (hash >> TAT_BITS).max(1))
    }

    /// Used as a memory of refusals rather than GCRA: the key hashed to `hash` is refused until
    /// `until_micros` (taking a slot as `check` does). Best effort: a lost race forgets it.
    pub fn hold(&self, hash: u64, now_micros: u64, until_micros: u64) {
        let (bucket, fingerprint) = self.locate(hash);
        let (slot, word, _) = choose_slot(bucket, fingerprint, now_micros & TAT_MASK);
        let held = (fingerprint << TAT_BITS) | (until_micros & TAT_MASK);
        let _ = bucket[slot].compare_exchange(word, held, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// How long the key hashed to `hash` is still held by [`GcraTable::hold`], in microseconds.
    pub fn held(&self, hash: u64, now_micros: u64) -> Option<u64> {
        let (bucket, fingerprint) = self.locate(hash);
        let now = now_micros & TAT_MASK;
        bucket.iter().find_map(|cell| {
            let word = cell.load(Ordering::Acquire);
            let until = word & TAT_MASK;
            (word >> TAT_BITS == fingerprint && until > now).then(|| until - now)
        })
    }
}

/// The slot of `bucket` for the key of `fingerprint`: its own, else a free one (a TAT not after
/// `now`), else the one with the earliest TAT (`true`: a key is forgotten). With the word read.
fn choose_slot(bucket: &[AtomicU64; SLOTS], fingerprint: u64, now: u64) -> (usize, u64, bool) {
    let mut free = None;
    let mut earliest = (0, u64::MAX, u64::MAX);
    for (slot, cell) in bucket.iter().enumerate() {
        let word = cell.load(Ordering::Acquire);
        if word >> TAT_BITS == fingerprint {
            return (slot, word, false);
        }
        let tat = word & TAT_MASK;
        if tat <= now {
            if free.is_none() {
                free = Some((slot, word));
            }
        } else if tat < earliest.2 {
            earliest = (slot, word, tat);
        }
    }
    match free {
        Some((slot, word)) => (slot, word, false),
        None => (earliest.0, earliest.1, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000;
    /// Two keys' hashes: the same bucket in a small table, different fingerprints.
    const SEVEN: u64 = (7 << TAT_BITS) | 7;
    const EIGHT: u64 = (8 << TAT_BITS) | 8;

    fn allowed(checked: Checked) -> bool {
        matches!(checked.verdict, Verdict::Allowed { .. })
    }

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let table = GcraTable::new(100);
        // 10 a second, a burst of 5: five at once, the sixth refused for a tenth of a second.
        let now = 50 * SECOND;
        for left in (0..5).rev() {
            let checked = table.check(SEVEN, now, SECOND / 10, 5);
            assert_eq!(checked.verdict, Verdict::Allowed { remaining: left });
        }
        assert_eq!(
            table.check(SEVEN, now, SECOND / 10, 5).verdict,
            Verdict::Limited {
                retry_after_micros: SECOND / 10
            }
        );
        // Another key has its own burst.
        assert!(allowed(table.check(EIGHT, now, SECOND / 10, 5)));
        // A tenth of a second later one more goes, and only one.
        let later = now + SECOND / 10;
        assert!(allowed(table.check(SEVEN, later, SECOND / 10, 5)));
        assert!(!allowed(table.check(SEVEN, later, SECOND / 10, 5)));
        // Over a second at the rate, ten go and no more.
        let mut passed = 0;
        for tick in 1..=100 {
            if allowed(table.check(SEVEN, later + tick * SECOND / 100, SECOND / 10, 5)) {
                passed += 1;
            }
        }
        assert_eq!(passed, 10);
    }

    #[test]
    fn a_million_keys_keep_the_tables_memory_and_limits() {
        let table = GcraTable::new(100_000);
        let bytes = table.bytes();
        // 100,000 keys at 8 bytes each, in whole buckets.
        assert_eq!(bytes, 12_500 * 64);
        let now = 10 * SECOND;
        let (mut passed, mut evicted) = (0, 0);
        for key in 0..1_000_000u64 {
            let hash = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let checked = table.check(hash, now, SECOND, 1);
            passed += u64::from(allowed(checked));
            evicted += u64::from(checked.evicted);
        }
        // A few met another key's fingerprint in their bucket and shared its TAT.
        assert!(passed > 999_000, "{passed}");
        assert_eq!(table.bytes(), bytes);
        // Each bucket kept its last eight keys: the rest were forgotten for them.
        assert!(evicted > 850_000, "{evicted}");
        // A key seen now is limited as ever.
        assert!(allowed(table.check(u64::MAX - 3, now, SECOND, 1)));
        assert!(!allowed(table.check(u64::MAX - 3, now, SECOND, 1)));
    }

    #[test]
    fn a_held_key_is_held_until_its_time() {
        let table = GcraTable::new(64);
        table.hold(SEVEN, 10 * SECOND, 12 * SECOND);
        assert_eq!(table.held(SEVEN, 11 * SECOND), Some(SECOND));
        assert_eq!(table.held(EIGHT, 11 * SECOND), None);
        assert_eq!(table.held(SEVEN, 12 * SECOND), None);
    }

    #[test]
    fn a_key_at_full_burst_is_forgotten_first() {
        let table = GcraTable::new(8);
        let now = 100 * SECOND;
        // Eight keys fill the one bucket, and are back at their full burst two seconds later.
        for key in 1..=8u64 {
            assert!(!table.check(key << TAT_BITS, now, SECOND, 1).evicted);
        }
        let later = now + 2 * SECOND;
        // A ninth key takes a free slot: none of the eight was within its memory.
        assert!(!table.check(9 << TAT_BITS, later, SECOND, 1).evicted);
        // Seven more take the other free slots; then the bucket is full, and each new key
        // forgets the one with the earliest TAT: the ninth, nearest its full burst.
        for key in 10..17u64 {
            assert!(!table.check(key << TAT_BITS, later, 10 * SECOND, 1).evicted);
        }
        assert!(table.check(17 << TAT_BITS, later, 10 * SECOND, 1).evicted);
        // Forgotten, the ninth has its burst again (remembered, it would wait a second).
        assert!(allowed(table.check(9 << TAT_BITS, later, SECOND, 1)));
    }
}
