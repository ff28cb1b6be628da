//! Control of a running herdsman from outside: signals (and, later, the admin API and reload).

pub mod signals;
