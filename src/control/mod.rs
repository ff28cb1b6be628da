//! Control of a running herdsman from outside: signals, the admin API, and the watch on the
//! kernel's listen queue (later: reload).

pub mod admin;
pub mod kernel_watch;
pub mod signals;
