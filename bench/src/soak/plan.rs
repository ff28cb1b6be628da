//! What both proxies under test are configured from, and the verbs they share, below both of
//! them: where they listen, the servers and their pool, the idle timeouts, the balance algorithm a
//! reload switches, and the server states the chaos sets.

use std::fmt;
use std::path::PathBuf;

/// The pool's name in the configuration.
pub const POOL: &str = "app";

/// Short idle timeouts: the short run measures descriptors back at their baseline a few seconds
/// after the load stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Idle {
    /// herdsman's `client_idle`, HAProxy's `timeout client` and `timeout http-keep-alive`.
    pub client_seconds: u32,
    /// herdsman's `backend_idle`.
    pub backend_seconds: u32,
}

/// herdsman's own defaults, used when the run sets none.
pub const HERDSMAN_IDLE: Idle = Idle {
    client_seconds: 60,
    backend_seconds: 4,
};

/// A server state both proxies know: herdsman's `ctl drain|maint|ready`, HAProxy's
/// `set server … state drain|maint|ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    Drain,
    Maint,
    Ready,
}

impl fmt::Display for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerState::Drain => "drain",
            ServerState::Maint => "maint",
            ServerState::Ready => "ready",
        })
    }
}

/// The balance algorithm, which a reload switches between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    RoundRobin,
    LeastConn,
}

impl Balance {
    pub fn other(self) -> Balance {
        match self {
            Balance::RoundRobin => Balance::LeastConn,
            Balance::LeastConn => Balance::RoundRobin,
        }
    }

    /// herdsman's name for it.
    pub fn herdsman(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round-robin",
            Balance::LeastConn => "least-conn",
        }
    }

    /// HAProxy's name for it.
    pub fn haproxy(self) -> &'static str {
        match self {
            Balance::RoundRobin => "roundrobin",
            Balance::LeastConn => "leastconn",
        }
    }
}

/// What both proxies' configurations are made from.
#[derive(Debug, Clone)]
pub struct Plan {
    pub workers: u32,
    /// The listener, on 127.0.0.1.
    pub port: u16,
    /// herdsman's admin API, on 127.0.0.1.
    pub admin_port: u16,
    /// (name, port on 127.0.0.1) of each server.
    pub servers: Vec<(String, u16)>,
    /// Idle timeouts to write; None: the proxy's defaults (herdsman's; HAProxy is given the same).
    pub idle: Option<Idle>,
    /// herdsman's `retry_budget_floor`; None leaves its default.
    pub retry_budget_floor: Option<u32>,
    /// The proxy's private directory: its configuration, logs, access log, sockets.
    pub dir: PathBuf,
}
