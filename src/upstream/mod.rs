//! Servers and how requests reach them: the published snapshot of pools ([`snapshot`]), the
//! balancing algorithms ([`balance`]), and each worker's idle connections ([`idle`]).

pub mod balance;
pub mod idle;
pub mod snapshot;

pub use snapshot::{Pool, Server, Snapshot, SnapshotHandle};
