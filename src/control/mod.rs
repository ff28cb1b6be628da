//! Control of a running herdsman from outside: the pools' registry and reload, signals, the
//! admin API (`admin`, with its pool routes in `admin_pools`), its command-line client `ctl`,
//! and the watch on the kernel's listen queue.

pub mod admin;
mod admin_pools;
pub mod ctl;
pub mod health;
pub mod kernel_watch;
pub mod registry;
pub mod signals;
pub mod upgrade;
