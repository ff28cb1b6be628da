//! The immutable picture of pools and servers that workers read on every request.
//!
//! A change builds a whole new [`Snapshot`] with a higher generation and publishes it through
//! [`SnapshotHandle`] (an `ArcSwap`); a worker's reads never lock and never see a half-made
//! change. The only mutable parts are per-server atomics that must be shared across workers:
//! active request counts (least-conn, p2c) and the round-robin cursor.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::balance::Balancer;
use crate::config::{Balance, Config, Limits, Timeouts};

/// Everything the request path needs to know, as of one generation.
#[derive(Debug)]
pub struct Snapshot {
    pub generation: u64,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub pools: Vec<Pool>,
    /// For each listener (in config order), the index of its default pool.
    pub listener_pools: Vec<usize>,
}

#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub servers: Vec<Server>,
    pub balancer: Balancer,
}

/// One server of a pool.
#[derive(Debug)]
pub struct Server {
    /// Unique for the life of the process: a pooled connection belongs to exactly one server.
    pub id: u64,
    pub name: String,
    pub addr: SocketAddr,
    pub weight: u32,
    /// Requests in flight to this server, summed over all workers.
    pub active: ActiveCount,
}

/// A shared counter on its own cache line, so that workers updating different servers do not
/// contend on one line.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct ActiveCount(AtomicU32);

impl ActiveCount {
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Holds one server's active count up while a request is in flight.
pub struct ActiveGuard<'s>(&'s ActiveCount);

impl<'s> ActiveGuard<'s> {
    pub fn new(count: &'s ActiveCount) -> ActiveGuard<'s> {
        count.0.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(count)
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Snapshot {
    /// Builds generation `generation` from a validated config. Server ids start at `first_id`.
    pub fn build(config: &Config, generation: u64, first_id: u64) -> Snapshot {
        let mut next_id = first_id;
        let pools = config
            .pools
            .iter()
            .map(|pool| {
                let servers: Vec<Server> = pool
                    .servers
                    .iter()
                    .map(|server| {
                        next_id += 1;
                        Server {
                            id: next_id,
                            name: server.name.clone(),
                            addr: server.addr,
                            weight: server.weight,
                            active: ActiveCount::default(),
                        }
                    })
                    .collect();
                let weights: Vec<u32> = servers.iter().map(|s| s.weight).collect();
                Pool {
                    name: pool.name.clone(),
                    balancer: Balancer::new(pool.balance, &weights),
                    servers,
                }
            })
            .collect();
        Snapshot {
            generation,
            timeouts: config.timeouts,
            limits: config.limits,
            pools,
            listener_pools: config.listeners.iter().map(|l| l.pool).collect(),
        }
    }
}

impl Pool {
    pub fn balance(&self) -> Balance {
        self.balancer.kind()
    }
}

/// Where the current snapshot is published. Cloned into every worker.
pub type SnapshotHandle = Arc<ArcSwap<Snapshot>>;
