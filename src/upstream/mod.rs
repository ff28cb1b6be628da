//! Servers and how requests reach them: the published snapshot of pools ([`snapshot`]), the
//! balancing algorithms ([`balance`]), each worker's idle connections ([`idle`]), and the
//! [`registry`] that changes the pools at run time and by reload and publishes the snapshots.

pub mod balance;
pub mod choice;
pub mod hash_ring;
pub mod health;
pub mod idle;
pub mod load_tree;
pub mod registry;
pub mod retry_budget;
pub mod snapshot;
pub mod sticky;

// The routes compiled for lookup live with the routes (the config check uses them to find routes
// that can never match, and `config` imports nothing above it); `snapshot.rs` finds them here.
pub use crate::config::route_index;

pub use snapshot::{Pool, Server, Snapshot, SnapshotHandle};
