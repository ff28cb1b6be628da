//! Servers and how requests reach them: the published snapshot of pools ([`snapshot`]), the
//! balancing algorithms ([`balance`], with peak-ewma's latency estimates in [`latency`]), each
//! worker's idle connections ([`idle`]), and the [`registry`] that changes the pools at run time
//! and by reload and publishes the snapshots.

pub mod balance;
pub mod choice;
pub mod hash_ring;
pub mod health;
pub mod idle;
pub mod latency;
pub mod load_tree;
pub mod registry;
pub mod retry_budget;
pub mod snapshot;
pub mod sticky;

pub use snapshot::{Pool, Server, Snapshot, SnapshotHandle};
