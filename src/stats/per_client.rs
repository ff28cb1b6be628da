//! `[limits] max_connections_per_client`: the client connections each address has open, over
//! the process, so that one address cannot take the descriptor budget (nginx's `limit_conn`,
//! HAProxy's `src_conn_cur`). Consulted only when the limit is set, once per connection (never
//! per request): a lock of one of 64 shards, uncontended but between workers that take a
//! connection of the same shard at the same instant.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 64;

/// Open connections by client address.
#[derive(Debug)]
pub struct PerClient {
    shards: Box<[Mutex<HashMap<IpAddr, u32>>]>,
    /// Connections closed at once because their address was at its limit, since the start.
    pub refused_total: AtomicU64,
}

impl Default for PerClient {
    fn default() -> Self {
        PerClient {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            refused_total: AtomicU64::new(0),
        }
    }
}

impl PerClient {
    fn shard(&self, address: IpAddr) -> &Mutex<HashMap<IpAddr, u32>> {
        let index = match address {
            IpAddr::V4(v4) => usize::from(v4.octets()[3]) ^ usize::from(v4.octets()[2]) << 2,
            IpAddr::V6(v6) => usize::from(v6.octets()[15]) ^ usize::from(v6.octets()[7]) << 2,
        };
        &self.shards[index % SHARDS]
    }

    /// Counts a connection of `address` if it has fewer than `limit` open; false (counted as
    /// refused) otherwise.
    pub fn enter(&self, address: IpAddr, limit: u32) -> bool {
        let mut shard = self
            .shard(address)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let open = shard.entry(address).or_insert(0);
        if *open >= limit {
            drop(shard);
            self.refused_total.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        *open += 1;
        true
    }

    /// A connection [`PerClient::enter`] counted has closed.
    pub fn leave(&self, address: IpAddr) {
        let mut shard = self
            .shard(address)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(open) = shard.get_mut(&address) {
            *open -= 1;
            if *open == 0 {
                shard.remove(&address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_limit_and_no_more_and_others_are_apart() {
        let table = PerClient::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert!(table.enter(a, 2) && table.enter(a, 2));
        assert!(!table.enter(a, 2));
        assert!(table.enter(b, 2));
        table.leave(a);
        assert!(table.enter(a, 2));
        assert_eq!(table.refused_total.load(Ordering::Relaxed), 1);
        for _ in 0..2 {
            table.leave(a);
        }
        table.leave(b);
        assert!(table.shards.iter().all(|s| s.lock().unwrap().is_empty()));
    }
}
