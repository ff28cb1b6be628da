//! The one store of the process, as the workers reach it across reloads: made when a config
//! first caches, kept while `[cache]` and every pool's `[pool.cache]` stay as they were, made
//! anew (empty) when they change, and let go when no pool caches any more. The disk tier
//! (`[cache.disk]`) outlasts the stores: a new store takes up the one there is while its path
//! and size stay the same, so what it kept is still read back.

use std::sync::{Arc, Mutex};

use crate::config::{CacheSettings, DiskSettings, PoolCache};

use super::disk::Disk;
use super::store::Store;

/// What a store was made for: a change to any of it empties the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    pub settings: CacheSettings,
    /// Each caching pool's name and `[pool.cache]`.
    pub pools: Vec<(String, PoolCache)>,
}

/// The process's store, shared by every worker.
#[derive(Debug, Default)]
pub struct SharedStore {
    current: Mutex<Option<(CacheConfig, Arc<Store>)>>,
    disk: Mutex<Option<(DiskSettings, Arc<Disk>)>>,
}

impl SharedStore {
    pub fn new() -> Arc<SharedStore> {
        Arc::new(SharedStore::default())
    }

    /// The store for `config` (`None` when no pool caches): the one there is while its config is
    /// the same, else a new one. Called by a worker when it takes up a new snapshot, not per
    /// request; the lock is held for a comparison.
    pub fn follow(&self, config: &CacheConfig) -> Option<Arc<Store>> {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if config.pools.is_empty() {
            *current = None;
            return None;
        }
        if let Some((made_for, store)) = current.as_ref() {
            if made_for == config {
                return Some(Arc::clone(store));
            }
        }
        let disk = config
            .settings
            .disk
            .as_ref()
            .and_then(|settings| self.disk(settings));
        let store = Arc::new(Store::with_disk(config.settings.memory, disk));
        *current = Some((config.clone(), Arc::clone(&store)));
        Some(store)
    }

    /// The disk tier for `settings`: the one there is while they are the same, else opened.
    fn disk(&self, settings: &DiskSettings) -> Option<Arc<Disk>> {
        let mut current = self
            .disk
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((opened_for, disk)) = current.as_ref() {
            if opened_for == settings {
                return Some(Arc::clone(disk));
            }
        }
        match Disk::open(&settings.path, settings.size) {
            Ok(disk) => {
                *current = Some((settings.clone(), Arc::clone(&disk)));
                Some(disk)
            }
            Err(error) => {
                tracing::error!(path = %settings.path.display(), %error, "[cache.disk]: cannot use this folder; the cache keeps to memory");
                *current = None;
                None
            }
        }
    }

    /// The store there is now, if any (for the admin API and the metrics).
    pub fn current(&self) -> Option<Arc<Store>> {
        let current = self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        current.as_ref().map(|(_, store)| Arc::clone(store))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(memory: u64, pools: &[&str]) -> CacheConfig {
        CacheConfig {
            settings: CacheSettings { memory, disk: None },
            pools: pools
                .iter()
                .map(|name| (name.to_string(), PoolCache::default()))
                .collect(),
        }
    }

    #[test]
    fn the_store_lasts_while_its_config_does() {
        let shared = SharedStore::new();
        assert!(shared.follow(&config(1 << 20, &[])).is_none());
        let first = shared.follow(&config(1 << 20, &["web"])).unwrap();
        let again = shared.follow(&config(1 << 20, &["web"])).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let bigger = shared.follow(&config(2 << 20, &["web"])).unwrap();
        assert!(!Arc::ptr_eq(&first, &bigger));
        assert_eq!(bigger.memory(), 2 << 20);
        let other_pool = shared.follow(&config(2 << 20, &["web", "api"])).unwrap();
        assert!(!Arc::ptr_eq(&bigger, &other_pool));
        assert!(shared.follow(&config(2 << 20, &[])).is_none());
        assert!(shared.current().is_none());
    }
}
