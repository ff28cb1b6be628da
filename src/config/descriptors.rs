//! The descriptor budget: how many client connections the process's open-file limit allows,
//! keeping for each the server connection it may need, and for the rest of the process what it
//! needs whatever its clients do — so that a flood of idle connections can neither fail a client
//! already served (no descriptor left to reach a server) nor lock the operator out of the admin
//! API. HAProxy derives its `maxconn` from the limit the same way; nginx counts both sides of a
//! connection against `worker_connections`.
//!
//! ```text
//! clients = (limit − kept) / 2
//! kept    = 64 (the process: stdio, files a reload reads, ACME, an upgrade's pipe and sockets)
//!         + 64 (the admin API: its listeners and clients)
//!         + listeners × (workers + 1)      (a listening socket per worker, and the spare kept)
//!         + workers × 8                     (a runtime's epoll and wake-ups, the parking lot's
//!                                            epoll)
//!         + access-log files + servers with health checks (a probe each at a time)
//! ```
//!
//! Each client connection counts twice: itself, and a server connection — the one its request
//! in flight uses, or one kept idle (a worker keeps no more idle than it recently had in use,
//! `upstream::idle`). A buffered body's temporary file is not counted: one that cannot be made
//! streams instead.

use super::Config;

/// Descriptors each client connection may need at once.
pub const PER_CLIENT: u64 = 2;
/// Kept for the process itself.
const PROCESS: u64 = 64;
/// Kept for the admin API.
const ADMIN: u64 = 64;
/// Kept per worker: its runtime's and its parking lot's epoll instances and wake-ups.
/// Connections queued for it between workers are client connections, and count as such.
const PER_WORKER: u64 = 8;

/// The budget for one config under one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The open-file limit it is drawn from.
    pub limit: u64,
    /// What is kept for the rest of the process.
    pub kept: u64,
    /// Client connections the rest allows (at least 1).
    pub clients: u32,
}

impl Budget {
    /// The budget of `config` under an open-file limit of `limit`.
    pub fn of(config: &Config, limit: u64) -> Budget {
        let workers = config.workers as u64;
        let listeners = config.listeners.len() as u64;
        let log_files = config
            .listeners
            .iter()
            .filter(|listener| listener.access_log.is_some())
            .count() as u64;
        let checked: u64 = config
            .pools
            .iter()
            .filter(|pool| pool.health.is_some())
            .map(|pool| pool.servers.len() as u64)
            .sum();
        let kept = PROCESS
            + ADMIN
            + listeners * (workers + 1)
            + workers * PER_WORKER
            + log_files
            + checked;
        let clients = (limit.saturating_sub(kept) / PER_CLIENT).clamp(1, u64::from(u32::MAX));
        Budget {
            limit,
            kept,
            clients: clients as u32,
        }
    }

    /// The cap on client connections `config` runs with: its `max_client_connections`, or the
    /// budget's.
    pub fn cap(&self, config: &Config) -> u32 {
        config.limits.max_client_connections.unwrap_or(self.clients)
    }

    /// What `herdsman check` and the start say of it, with a warning when the config's own caps
    /// can take more than the limit allows.
    pub fn describe(&self, config: &Config) -> String {
        let mut text = format!(
            "descriptors: limit {}, {} kept for the process, {} client connections ({} each with its server connection)",
            self.limit, self.kept, self.clients, PER_CLIENT
        );
        if let Some(set) = config.limits.max_client_connections {
            if set > self.clients {
                text.push_str(&format!(
                    "; WARNING: max_client_connections = {set} exceeds it: a flood of idle clients can leave none for servers"
                ));
            } else {
                text.push_str(&format!("; max_client_connections = {set}"));
            }
        }
        let listener_caps: Option<u64> = config
            .listeners
            .iter()
            .map(|listener| {
                (listener.max_connections > 0).then_some(u64::from(listener.max_connections))
            })
            .sum();
        if let Some(sum) = listener_caps.filter(|sum| *sum > u64::from(self.clients)) {
            text.push_str(&format!(
                "; the listeners' max_connections add up to {sum}, more than the budget: it caps them"
            ));
        }
        text
    }
}

/// The process's open-file limit now (the soft one), as `herdsman check` reads it.
pub fn open_file_limit() -> (u64, u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return (1024, 1024);
    }
    (limit.rlim_cur, limit.rlim_max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::VALID;
    use crate::config::load::from_toml;

    #[test]
    fn the_budget_keeps_room_for_the_process_and_a_server_connection_per_client() {
        let config = from_toml(VALID, "t").unwrap();
        let budget = Budget::of(&config, 20_000);
        assert!(budget.kept > 64 + 64 && budget.kept < 2_000, "{budget:?}");
        assert_eq!(u64::from(budget.clients), (20_000 - budget.kept) / 2);
        assert_eq!(budget.cap(&config), budget.clients);
        // A limit below what is kept leaves one client, never none.
        assert_eq!(Budget::of(&config, 10).clients, 1);
    }
}
