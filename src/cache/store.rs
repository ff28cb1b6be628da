//! The process's cache of responses, shared by every worker: objects by key in TinyUFO
//! (S3-FIFO eviction with TinyLFU admission, Cloudflare's crate from Pingora), within a memory
//! budget counted in KiB.
//!
//! Why TinyUFO: its reads take no lock — a hit is a lookup in a concurrent hash map and one
//! relaxed atomic on the object's use count, so two workers hitting the same object contend on
//! nothing but that count's cache line and the object's reference count; and on a Zipf(1.0)
//! replay its hit ratio is well above LRU's (`herdsman-bench cache-replay`,
//! `bench/results/cache-hit-ratio.md`).
//!
//! A key is hashed to 64 bits for TinyUFO, which keeps only the hash; each object keeps its whole
//! key and a lookup compares it, so two keys whose hashes collide cost a miss, never the wrong
//! answer.
//!
//! A response with `Vary` is kept as two entries: under its key, the names it varies on
//! ([`Entry::Variants`]); under its key and the request's values for those names, the object.
//!
//! Beside TinyUFO, under the write mutex, an [`Index`] of the same entries by key, by tag and
//! by pool: what the admin API's purges and the per-pool figures need, and TinyUFO cannot give.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tinyufo::TinyUfo;

use super::disk::Disk;
use super::flight::Flights;
use super::index::Index;
use super::object::Object;
use crate::stats::cache::CacheHeld;

/// The unit of TinyUFO's weights: an object weighs its bytes (with [`ENTRY_OVERHEAD`]) in KiB,
/// rounded up. TinyUFO's weights are 16 bits, so no object is heavier than 64 MiB less a KiB.
const WEIGHT_UNIT: u64 = 1024;

/// Bytes an entry costs beyond its key, head and body: the object's own fields, its `Arc`,
/// TinyUFO's bucket and queue entries, and the index's (`index.rs`: a pointer in its ordered
/// set, one in a set per tag, with their tables' slack). What the process's RSS does with it is
/// measured in `tests/cache_memory.rs`: offered three times the budget in 8 KiB objects, peak RSS
/// grew 44 MiB for a 32 MiB budget and 133 MiB for a 128 MiB one (within the budget and the
/// README's stated 24 MiB).
pub const ENTRY_OVERHEAD: u64 = 576;

/// The heaviest object the store takes, in bytes.
pub const MAX_OBJECT_BYTES: u64 = (u16::MAX as u64) * WEIGHT_UNIT - ENTRY_OVERHEAD;

/// What one key holds.
#[derive(Debug)]
pub enum Entry {
    /// A response.
    Object(Object),
    /// The field names the response at this key varies on (lower case, comma-separated, as
    /// the variant's key spells them); its variants are kept under their own keys.
    Variants { key: Box<[u8]>, names: Box<[u8]> },
}

impl Entry {
    /// The whole key it is stored under.
    pub fn key(&self) -> &[u8] {
        match self {
            Entry::Object(object) => &object.key,
            Entry::Variants { key, .. } => key,
        }
    }

    /// The bytes it is counted as holding: its own, with [`ENTRY_OVERHEAD`].
    pub fn bytes(&self) -> u64 {
        let own = match self {
            Entry::Object(object) => object.bytes(),
            Entry::Variants { key, names } => (key.len() + names.len()) as u64,
        };
        own + ENTRY_OVERHEAD
    }
}

/// The process's objects.
pub struct Store {
    entries: TinyUfo<u64, Arc<Entry>>,
    /// Seeded per process: which keys collide is not something a client can plan.
    hasher: foldhash::fast::RandomState,
    /// What the budget allows, in bytes.
    memory: u64,
    /// Bytes held by the entries kept (their weights' sum, in bytes rather than KiB).
    held: AtomicU64,
    /// Entries held.
    count: AtomicU64,
    /// Entries evicted to make room, since start.
    evicted: AtomicU64,
    /// Puts and removes one at a time, so that what is counted held and what the index holds
    /// are what TinyUFO holds. A put follows a server's answer (a miss), never a hit: reads take
    /// no lock. The admin API takes it to purge and to read the index's figures.
    writing: Mutex<Index>,
    /// The fetches in the air, one per key missed (`flight.rs`).
    pub flights: Arc<Flights>,
    /// `[cache.disk]`: every entry put is written there too, and a miss in memory may be read
    /// back from it.
    disk: Option<Arc<Disk>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("memory", &self.memory)
            .field("held", &self.held.load(Relaxed))
            .field("count", &self.count.load(Relaxed))
            .finish()
    }
}

/// How many responses a purge took: those it took from memory, and those only on disk.
fn count_once(memory: Vec<Box<[u8]>>, disk: Option<Vec<Box<[u8]>>>) -> u64 {
    let mut keys: std::collections::HashSet<Box<[u8]>> = memory.into_iter().collect();
    keys.extend(disk.into_iter().flatten());
    keys.len() as u64
}

/// The weight TinyUFO counts for `bytes`.
fn weight(bytes: u64) -> u16 {
    bytes.div_ceil(WEIGHT_UNIT).clamp(1, u64::from(u16::MAX)) as u16
}

impl Store {
    /// A store that holds at most `memory` bytes of entries (their keys, heads, bodies and
    /// [`ENTRY_OVERHEAD`] each).
    pub fn new(memory: u64) -> Store {
        Store::with_disk(memory, None)
    }

    /// A store that also keeps its entries in `disk`.
    pub fn with_disk(memory: u64, disk: Option<Arc<Disk>>) -> Store {
        let units = (memory / WEIGHT_UNIT).max(1) as usize;
        // TinyUFO sizes its frequency sketch and its map by the number of objects it expects:
        // one per 8 KiB of budget, at least a thousand.
        let expected = (memory / (8 * WEIGHT_UNIT)).max(1024) as usize;
        Store {
            entries: TinyUfo::new(units, expected),
            hasher: foldhash::fast::RandomState::default(),
            memory,
            held: AtomicU64::new(0),
            count: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            writing: Mutex::default(),
            flights: Arc::default(),
            disk,
        }
    }

    /// The disk tier, when there is one.
    pub fn disk(&self) -> Option<&Arc<Disk>> {
        self.disk.as_ref()
    }

    /// Whether a miss in memory for `key` may be read back from the disk.
    pub fn on_disk(&self, key: &[u8]) -> bool {
        self.disk.as_ref().is_some_and(|disk| disk.has(key))
    }

    /// The entry at `key`, if one is held (its whole key compared).
    pub fn get(&self, key: &[u8]) -> Option<Arc<Entry>> {
        let entry = self.entries.get(&self.hasher.hash_one(key))?;
        (entry.key() == key).then_some(entry)
    }

    /// Keeps `entry` under its key, replacing what was there, evicting others as the budget
    /// needs. TinyLFU's admission may turn away a newcomer less popular than what it would
    /// evict: `false` then. An entry heavier than [`MAX_OBJECT_BYTES`] is refused.
    pub fn put(&self, entry: Arc<Entry>) -> bool {
        if let Some(disk) = &self.disk {
            disk.save(Arc::clone(&entry));
        }
        self.keep(entry)
    }

    /// [`Store::put`] in memory only: an entry read back from the disk.
    pub fn keep(&self, entry: Arc<Entry>) -> bool {
        let bytes = entry.bytes();
        if bytes > MAX_OBJECT_BYTES + ENTRY_OVERHEAD || bytes > self.memory {
            return false;
        }
        let hash = self.hasher.hash_one(entry.key());
        let mut index = self.lock();
        self.take(&mut index, hash);
        let evicted = self.entries.put(hash, Arc::clone(&entry), weight(bytes));
        let mut admitted = true;
        for gone in &evicted {
            if Arc::ptr_eq(&gone.data, &entry) {
                // Turned away at admission (or evicted at once): never counted in.
                admitted = false;
                continue;
            }
            let gone_bytes = gone.data.bytes();
            index.evicted(&gone.data, gone_bytes);
            self.forget(gone_bytes);
            self.evicted.fetch_add(1, Relaxed);
        }
        if admitted {
            index.insert(&entry, bytes);
            self.held.fetch_add(bytes, Relaxed);
            self.count.fetch_add(1, Relaxed);
        }
        admitted
    }

    /// Removes what is at `key`; whether there was something.
    pub fn remove(&self, key: &[u8]) -> bool {
        if let Some(disk) = &self.disk {
            disk.remove(key);
        }
        let hash = self.hasher.hash_one(key);
        let mut index = self.lock();
        match self.entries.get(&hash) {
            Some(entry) if entry.key() == key => self.take(&mut index, hash).is_some(),
            _ => false,
        }
    }

    /// Removes every entry whose key begins with one of `prefixes` (see `key.rs`: a URL's
    /// primary key, a host's path prefix); how many responses went (the names a varying
    /// response keeps are removed with it, not counted).
    pub fn remove_prefixed(&self, prefixes: &[Vec<u8>]) -> u64 {
        let mut index = self.lock();
        let found: Vec<Arc<Entry>> = prefixes
            .iter()
            .flat_map(|prefix| index.with_prefix(prefix))
            .collect();
        let removed = self.remove_found(&mut index, found);
        drop(index);
        let on_disk = self
            .disk
            .as_ref()
            .map(|disk| disk.remove_prefixed(prefixes));
        count_once(removed, on_disk)
    }

    /// Removes every response carrying the surrogate key `tag`; how many went.
    pub fn remove_tagged(&self, tag: &[u8]) -> u64 {
        let mut index = self.lock();
        let found = index.tagged(tag);
        let removed = self.remove_found(&mut index, found);
        drop(index);
        let on_disk = self.disk.as_ref().map(|disk| disk.remove_tagged(tag));
        count_once(removed, on_disk)
    }

    /// What each pool holds now, and its evictions since this store was made, by pool name.
    pub fn held_by_pool(&self) -> Vec<(String, CacheHeld)> {
        self.lock().held_by_pool()
    }

    /// Takes `found` (from the index, under the same lock) out; the keys of the responses
    /// among them.
    fn remove_found(&self, index: &mut Index, found: Vec<Arc<Entry>>) -> Vec<Box<[u8]>> {
        let mut objects = Vec::new();
        for entry in found {
            let hash = self.hasher.hash_one(entry.key());
            // The index holds what TinyUFO holds, so the entry at its hash is this one (unless
            // two prefixes found it, and it went already).
            if self.take(index, hash).is_some() && matches!(*entry, Entry::Object(_)) {
                objects.push(entry.key().into());
            }
        }
        objects
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.writing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the entry at `hash` out, whoever's it is, counting it out. Under `writing`.
    fn take(&self, index: &mut Index, hash: u64) -> Option<Arc<Entry>> {
        let entry = self.entries.remove(&hash)?;
        let bytes = entry.bytes();
        index.remove(&entry, bytes);
        self.forget(bytes);
        Some(entry)
    }

    fn forget(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Relaxed);
        self.count.fetch_sub(1, Relaxed);
    }

    /// The bytes of the budget `entry` takes: its bytes with [`ENTRY_OVERHEAD`], rounded up to
    /// whole KiB as TinyUFO weighs it.
    pub fn counted_bytes(entry: &Entry) -> u64 {
        u64::from(weight(entry.bytes())) * WEIGHT_UNIT
    }

    /// Bytes the entries held take (their own bytes with [`ENTRY_OVERHEAD`] each).
    pub fn held_bytes(&self) -> u64 {
        self.held.load(Relaxed)
    }

    /// Entries held.
    pub fn len(&self) -> u64 {
        self.count.load(Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries evicted for room since start.
    pub fn evictions(&self) -> u64 {
        self.evicted.load(Relaxed)
    }

    /// The budget, in bytes.
    pub fn memory(&self) -> u64 {
        self.memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(key: &str, body_bytes: usize) -> Entry {
        Entry::Object(Object::for_test(key.as_bytes(), vec![b'x'; body_bytes]))
    }

    #[test]
    fn an_object_is_found_by_its_whole_key() {
        let store = Store::new(1 << 20);
        assert!(store.put(Arc::new(object("GET example.com /a", 100))));
        let Some(found) = store.get(b"GET example.com /a") else {
            panic!("not found");
        };
        assert_eq!(found.key(), b"GET example.com /a");
        assert!(store.get(b"GET example.com /b").is_none());
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_second_put_replaces_the_first_and_counts_once() {
        let store = Store::new(1 << 20);
        store.put(Arc::new(object("k", 100)));
        store.put(Arc::new(object("k", 300)));
        assert_eq!(store.len(), 1);
        assert_eq!(
            store.held_bytes(),
            300 + 1 + ENTRY_OVERHEAD + test_head_len()
        );
        assert!(store.remove(b"k"));
        assert!(!store.remove(b"k"));
        assert_eq!((store.len(), store.held_bytes()), (0, 0));
    }

    fn test_head_len() -> u64 {
        let Entry::Object(object) = object("", 0) else {
            unreachable!()
        };
        object.bytes()
    }

    #[test]
    fn the_budget_holds_however_many_objects_come() {
        let budget = 256 * 1024;
        let store = Store::new(budget);
        for n in 0..2_000 {
            store.put(Arc::new(object(&format!("object {n}"), 4_000)));
        }
        assert!(store.held_bytes() <= budget, "{} held", store.held_bytes());
        assert!(store.len() > 10, "only {} kept", store.len());
        assert!(store.evictions() > 1_000);
    }

    fn tagged(key: &[u8], tags: &str) -> Arc<Entry> {
        let mut object = Object::for_test(key, vec![b'x'; 10]);
        object.tags = tags.as_bytes().into();
        Arc::new(Entry::Object(object))
    }

    fn key(pool: &str, host: &str, target: &str, variant: &str) -> Vec<u8> {
        let mut key = Vec::new();
        super::super::key::write_primary(&mut key, pool, false, host.as_bytes(), target.as_bytes());
        key.extend_from_slice(variant.as_bytes());
        key
    }

    #[test]
    fn purges_take_what_their_prefix_or_tag_names_and_nothing_else() {
        let store = Store::new(1 << 20);
        let a = key("web", "h", "/a", "");
        store.put(Arc::new(Entry::Variants {
            key: a.clone().into(),
            names: b"accept-encoding".as_slice().into(),
        }));
        store.put(tagged(
            &key("web", "h", "/a", "vary\0accept-encoding=gzip\0"),
            "t1 t2",
        ));
        store.put(tagged(
            &key("web", "h", "/a", "vary\0accept-encoding=\0"),
            "t1",
        ));
        store.put(tagged(&key("web", "h", "/ab", ""), "t2"));
        store.put(tagged(&key("api", "h", "/a", ""), "t2"));
        assert_eq!(store.len(), 5);
        let held = store.held_by_pool();
        assert_eq!(held[0].0, "api");
        assert_eq!((held[1].0.as_str(), held[1].1.objects), ("web", 3));
        assert_eq!(
            held.iter().map(|(_, held)| held.bytes).sum::<u64>(),
            store.held_bytes()
        );

        // A URL's key with both its variants and its names; not /ab, not another pool's.
        assert_eq!(store.remove_prefixed(&[a.clone(), a]), 2);
        assert_eq!(store.len(), 2);
        assert!(store.get(&key("web", "h", "/ab", "")).is_some());
        // The tag index forgot the purged objects: only those left carry t2.
        assert_eq!(store.remove_tagged(b"t1"), 0);
        assert_eq!(store.remove_tagged(b"t2"), 2);
        assert_eq!(store.remove_tagged(b"t"), 0);
        assert!(store.is_empty());
        assert_eq!(store.held_bytes(), 0);
        assert!(store
            .held_by_pool()
            .iter()
            .all(|(_, held)| held.objects == 0 && held.bytes == 0));
    }

    #[test]
    fn evictions_leave_the_index_and_count_for_their_pool() {
        let store = Store::new(256 * 1024);
        for n in 0..500 {
            store.put(tagged(&key("web", "h", &format!("/{n}"), ""), "all"));
        }
        let held = store.held_by_pool();
        let (_, web) = &held[0];
        assert_eq!(web.objects, store.len());
        assert_eq!(web.bytes, store.held_bytes());
        assert_eq!(web.evictions, store.evictions());
        assert!(web.evictions > 0);
        assert_eq!(store.remove_tagged(b"all"), web.objects);
        assert!(store.is_empty());
    }

    #[test]
    fn an_object_larger_than_the_budget_is_refused() {
        let store = Store::new(64 * 1024);
        assert!(!store.put(Arc::new(object("big", 100 * 1024))));
        assert!(store.is_empty());
    }
}
