//! One sample of a running herdsman, as `top` reads it: `GET /api/workers` and `GET /api/pools`
//! asked back to back, every counter since herdsman started.

use std::time::Instant;

use serde::Deserialize;

use crate::cli::ctl::client::{get_json, CtlError};
use crate::cli::ctl::print::PoolsReply;

/// What the admin API said at one moment: every counter since herdsman started.
#[derive(Debug)]
pub struct Sample {
    /// When it was asked: just before the first of its two requests (each takes a millisecond
    /// or so on loopback, the same in every sample, so the span between samples is right).
    pub taken_at: Instant,
    pub workers: WorkersReply,
    pub pools: PoolsReply,
}

impl Sample {
    pub fn take(admin: &str, token: Option<&str>) -> Result<Sample, CtlError> {
        let taken_at = Instant::now();
        Ok(Sample {
            taken_at,
            workers: get_json(admin, token, "/api/workers")?,
            pools: get_json(admin, token, "/api/pools")?,
        })
    }
}

/// `GET /api/workers`, as far as `top` reads it (unknown fields ignored). Its own small types,
/// not `stats::WorkerReport`, because that report's /proc parts (`stats::procfs`) are written,
/// never read back.
#[derive(Debug, Deserialize)]
pub struct WorkersReply {
    /// The process; a different one in the next sample (a binary upgrade) starts from zero.
    pub pid: u32,
    pub intake: String,
    pub workers: Vec<WorkerFigures>,
    /// The network namespace's listen-queue counters; `None` where herdsman cannot read them.
    pub listen_queue: Option<ListenQueueFigures>,
}

/// One worker's counters since start, and its connections now.
#[derive(Debug, Default, Deserialize)]
pub struct WorkerFigures {
    pub worker: usize,
    /// Connections taken from a listening socket.
    pub accepted: u64,
    /// Client connections it owns now.
    pub active: u32,
    /// Requests finished, answered or not.
    pub requests: u64,
    /// Connections it opened to servers (idle ones reused are not counted).
    #[serde(default)]
    pub backend_connects: u64,
    /// Quiet connections it closed to make room at the client cap (absent before herdsman had
    /// a cap: none).
    #[serde(default)]
    pub shed_for_room: u64,
    /// Absent from herdsman before it read /proc for CPU: none.
    #[serde(default)]
    pub cpu: CpuFigures,
    /// Absent from herdsman before it spoke HTTP/2: none.
    #[serde(default)]
    pub http2: Http2Figures,
}

/// A worker's HTTP/2 client connections and streams open now (`top` shows only these two of
/// `/api/workers`' `http2` counters: what is in flight, beside CONNS).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct Http2Figures {
    pub connections_open: u32,
    pub streams_open: u32,
}

/// A worker thread's CPU time and run-queue wait since it started, in seconds.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct CpuFigures {
    pub user_seconds: f64,
    pub system_seconds: f64,
    /// `None` where the kernel keeps no scheduler statistics.
    pub run_queue_wait_seconds: Option<f64>,
}

/// The kernel's counts of connections lost before accept() (see `stats::procfs`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct ListenQueueFigures {
    pub overflows: u64,
    pub drops: u64,
}
