//! What the store holds, told the ways TinyUFO cannot tell it (TinyUFO keeps hashes, and cannot
//! be iterated): every entry in the order of its key, so that a prefix finds a URL's variants
//! or a host's paths; the entries of each surrogate key (tag); and each pool's objects, bytes
//! and evictions. The store keeps it beside TinyUFO under its write mutex, which only puts,
//! removes and the admin API take: a hit never touches it.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::sync::Arc;

use crate::stats::cache::CacheHeld;

use super::key::pool_of;
use super::store::Entry;

/// An entry as the index holds it: the same `Arc` TinyUFO holds, ordered, compared and hashed
/// by its key, so that the index copies no key and looks one up by its bytes.
#[derive(Debug, Clone)]
struct Indexed(Arc<Entry>);

impl Borrow<[u8]> for Indexed {
    fn borrow(&self) -> &[u8] {
        self.0.key()
    }
}

impl PartialEq for Indexed {
    fn eq(&self, other: &Indexed) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for Indexed {}

impl PartialOrd for Indexed {
    fn partial_cmp(&self, other: &Indexed) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Indexed {
    fn cmp(&self, other: &Indexed) -> std::cmp::Ordering {
        self.0.key().cmp(other.0.key())
    }
}

impl Hash for Indexed {
    // As `[u8]` hashes, which `Borrow` requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key().hash(state);
    }
}

/// The surrogate keys of an entry: an object's, space-separated as `fields.rs` wrote them.
fn tags_of(entry: &Entry) -> impl Iterator<Item = &[u8]> {
    let tags: &[u8] = match entry {
        Entry::Object(object) => &object.tags,
        Entry::Variants { .. } => &[],
    };
    tags.split(|&byte| byte == b' ')
        .filter(|tag| !tag.is_empty())
}

/// The store's index. Every method is called under the store's write mutex, with TinyUFO
/// changed in the same step, so that the two hold the same entries.
#[derive(Debug, Default)]
pub struct Index {
    keys: BTreeSet<Indexed>,
    tags: HashMap<Box<[u8]>, HashSet<Indexed>>,
    /// By pool name (a key's first part); a pool stays once seen, for its evictions' count.
    pools: HashMap<Box<[u8]>, CacheHeld>,
}

impl Index {
    /// `entry`, admitted into TinyUFO, counted as holding `bytes`.
    pub fn insert(&mut self, entry: &Arc<Entry>, bytes: u64) {
        for tag in tags_of(entry) {
            self.tags
                .entry(tag.into())
                .or_default()
                .insert(Indexed(Arc::clone(entry)));
        }
        let held = self.pool_mut(entry.key());
        held.bytes += bytes;
        if matches!(**entry, Entry::Object(_)) {
            held.objects += 1;
        }
        self.keys.insert(Indexed(Arc::clone(entry)));
    }

    /// `entry`, taken out of TinyUFO (removed or replaced), counted out as holding `bytes`.
    pub fn remove(&mut self, entry: &Entry, bytes: u64) {
        if self.keys.remove(entry.key()) {
            let held = self.pool_mut(entry.key());
            held.bytes = held.bytes.saturating_sub(bytes);
            if matches!(entry, Entry::Object(_)) {
                held.objects = held.objects.saturating_sub(1);
            }
        }
        for tag in tags_of(entry) {
            if let Some(tagged) = self.tags.get_mut(tag) {
                tagged.remove(entry.key());
                if tagged.is_empty() {
                    self.tags.remove(tag);
                }
            }
        }
    }

    /// `entry`, evicted by TinyUFO for room: removed, and counted in its pool's evictions.
    pub fn evicted(&mut self, entry: &Entry, bytes: u64) {
        self.remove(entry, bytes);
        self.pool_mut(entry.key()).evictions += 1;
    }

    /// The entries whose keys begin with `prefix`.
    pub fn with_prefix(&self, prefix: &[u8]) -> Vec<Arc<Entry>> {
        self.keys
            .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|indexed| indexed.0.key().starts_with(prefix))
            .map(|indexed| Arc::clone(&indexed.0))
            .collect()
    }

    /// The entries that carry the surrogate key `tag`.
    pub fn tagged(&self, tag: &[u8]) -> Vec<Arc<Entry>> {
        self.tags
            .get(tag)
            .map(|tagged| {
                tagged
                    .iter()
                    .map(|indexed| Arc::clone(&indexed.0))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What each pool that has stored anything holds now, by pool name.
    pub fn held_by_pool(&self) -> Vec<(String, CacheHeld)> {
        let mut pools: Vec<(String, CacheHeld)> = self
            .pools
            .iter()
            .map(|(pool, held)| (String::from_utf8_lossy(pool).into_owned(), *held))
            .collect();
        pools.sort_by(|a, b| a.0.cmp(&b.0));
        pools
    }

    fn pool_mut(&mut self, key: &[u8]) -> &mut CacheHeld {
        let pool = pool_of(key);
        if !self.pools.contains_key(pool) {
            self.pools.insert(pool.into(), CacheHeld::default());
        }
        self.pools.get_mut(pool).expect("inserted above")
    }
}
