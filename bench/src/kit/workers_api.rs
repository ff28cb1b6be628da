//! Reading herdsman's per-worker counters: `GET /api/workers` on the admin listener, parsed into a
//! snapshot, and the difference between two snapshots (what one run added); and the pid of the
//! process serving (another after a binary upgrade).

use anyhow::Context;

use crate::kit::admin_api;
use crate::kit::json::{self, Json};

/// One worker's counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerCounters {
    pub worker: usize,
    /// Connections this worker took from a listening socket.
    pub accepted: u64,
    /// Requests this worker finished.
    pub requests: u64,
    /// Connections open on this worker now.
    pub active: u64,
    pub pending_handoffs: u64,
    pub handoffs_sent: u64,
    pub handoffs_received: u64,
    pub spurious_wakeups: u64,
    /// Voluntary + involuntary context switches of the worker thread.
    pub context_switches: u64,
}

impl WorkerCounters {
    /// Connections this worker ended up serving: those it accepted and kept, plus those handed to it.
    pub fn served(&self) -> u64 {
        (self.accepted + self.handoffs_received).saturating_sub(self.handoffs_sent)
    }
}

/// `/api/workers` at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub intake: String,
    pub workers: Vec<WorkerCounters>,
    /// The kernel's ListenOverflows counter (machine-wide, from /proc/net/netstat).
    pub listen_overflows: u64,
    pub listen_drops: u64,
}

impl Snapshot {
    /// The counters that grew between `self` (earlier) and `later`, per worker; `active` and
    /// `pending_handoffs` are gauges and are taken from `later`.
    pub fn delta(&self, later: &Snapshot) -> Snapshot {
        let workers = later
            .workers
            .iter()
            .map(|after| {
                let before = self
                    .workers
                    .iter()
                    .find(|w| w.worker == after.worker)
                    .copied()
                    .unwrap_or_default();
                WorkerCounters {
                    worker: after.worker,
                    accepted: after.accepted.saturating_sub(before.accepted),
                    requests: after.requests.saturating_sub(before.requests),
                    active: after.active,
                    pending_handoffs: after.pending_handoffs,
                    handoffs_sent: after.handoffs_sent.saturating_sub(before.handoffs_sent),
                    handoffs_received: after
                        .handoffs_received
                        .saturating_sub(before.handoffs_received),
                    spurious_wakeups: after
                        .spurious_wakeups
                        .saturating_sub(before.spurious_wakeups),
                    context_switches: after
                        .context_switches
                        .saturating_sub(before.context_switches),
                }
            })
            .collect();
        Snapshot {
            intake: later.intake.clone(),
            workers,
            listen_overflows: later.listen_overflows.saturating_sub(self.listen_overflows),
            listen_drops: later.listen_drops.saturating_sub(self.listen_drops),
        }
    }

    pub fn total(&self, field: impl Fn(&WorkerCounters) -> u64) -> u64 {
        self.workers.iter().map(field).sum()
    }

    pub fn per_worker(&self, field: impl Fn(&WorkerCounters) -> u64) -> Vec<u64> {
        self.workers.iter().map(field).collect()
    }
}

/// Reads `/api/workers` from the admin listener on `port`.
pub fn read_workers(port: u16) -> anyhow::Result<Snapshot> {
    let body = admin_api::get(port, "/api/workers")?;
    parse_workers(&String::from_utf8_lossy(&body)).context("reading /api/workers")
}

/// The snapshot in an `/api/workers` body.
pub fn parse_workers(body: &str) -> anyhow::Result<Snapshot> {
    let json = json::parse(body).map_err(|e| anyhow::anyhow!("not JSON: {e}"))?;
    let workers = json
        .get("workers")
        .and_then(Json::as_array)
        .context("no \"workers\" array")?;
    let field = |worker: &Json, path: &[&str]| {
        worker
            .u64_at(path)
            .with_context(|| format!("a worker lacks the number {}", path.join(".")))
    };
    let mut snapshot = Snapshot {
        intake: json
            .get("intake")
            .and_then(Json::as_str)
            .unwrap_or("?")
            .to_string(),
        listen_overflows: json.u64_at(&["listen_queue", "overflows"]).unwrap_or(0),
        listen_drops: json.u64_at(&["listen_queue", "drops"]).unwrap_or(0),
        workers: Vec::with_capacity(workers.len()),
    };
    for worker in workers {
        snapshot.workers.push(WorkerCounters {
            worker: field(worker, &["worker"])? as usize,
            accepted: field(worker, &["accepted"])?,
            requests: field(worker, &["requests"])?,
            active: field(worker, &["active"])?,
            pending_handoffs: field(worker, &["pending_handoffs"])?,
            handoffs_sent: field(worker, &["handoffs_sent"])?,
            handoffs_received: field(worker, &["handoffs_received"])?,
            spurious_wakeups: field(worker, &["spurious_wakeups"])?,
            context_switches: field(worker, &["context_switches", "voluntary"])?
                + field(worker, &["context_switches", "involuntary"])?,
        });
    }
    Ok(snapshot)
}

/// The pid of the process serving now, as `GET /api/workers` gives it.
pub fn serving_pid(admin_port: u16) -> anyhow::Result<u32> {
    let body = admin_api::get(admin_port, "/api/workers")?;
    let answer = json::parse(&String::from_utf8_lossy(&body))
        .map_err(|e| anyhow::anyhow!("/api/workers is not JSON: {e}"))?;
    let pid = answer.u64_at(&["pid"]).context("/api/workers has no pid")?;
    Ok(pid as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"intake":"balanced","workers":[
        {"worker":0,"tid":11,"accepted":10,"requests":30,"active":2,"pending_handoffs":0,"handoffs_sent":4,
         "handoffs_received":1,"spurious_wakeups":3,"handoff_wait_us":{"count":1,"total":5,"max":5},
         "context_switches":{"voluntary":20,"involuntary":2}},
        {"worker":1,"tid":12,"accepted":0,"requests":4,"active":1,"pending_handoffs":1,"handoffs_sent":0,
         "handoffs_received":3,"spurious_wakeups":0,"handoff_wait_us":{"count":3,"total":9,"max":4},
         "context_switches":{"voluntary":7,"involuntary":0}}],
        "listen_queue":{"overflows":5,"drops":6}}"#;

    #[test]
    fn the_admin_answer_becomes_per_worker_counters() {
        let snapshot = parse_workers(BODY).unwrap();
        assert_eq!(snapshot.intake, "balanced");
        assert_eq!(snapshot.workers.len(), 2);
        assert_eq!(snapshot.workers[0].context_switches, 22);
        assert_eq!(snapshot.workers[0].served(), 7);
        assert_eq!(snapshot.workers[1].served(), 3);
        assert_eq!(snapshot.listen_overflows, 5);
        assert_eq!(snapshot.total(|w| w.accepted), 10);
        assert_eq!(snapshot.total(|w| w.requests), 34);
    }

    #[test]
    fn a_delta_subtracts_counters_but_keeps_gauges() {
        let before = parse_workers(BODY).unwrap();
        let mut after = before.clone();
        after.workers[0].accepted += 5;
        after.workers[0].active = 9;
        after.workers[0].requests += 7;
        after.workers[1].context_switches += 4;
        after.listen_overflows += 1;
        let delta = before.delta(&after);
        assert_eq!(delta.per_worker(|w| w.accepted), vec![5, 0]);
        assert_eq!(delta.per_worker(|w| w.active), vec![9, 1]);
        assert_eq!(delta.per_worker(|w| w.requests), vec![7, 0]);
        assert_eq!(delta.per_worker(|w| w.context_switches), vec![0, 4]);
        assert_eq!(delta.listen_overflows, 1);
    }

    #[test]
    fn a_missing_counter_is_named() {
        let error = parse_workers(r#"{"workers":[{"worker":0}]}"#).unwrap_err();
        assert!(format!("{error:#}").contains("accepted"), "{error:#}");
    }
}
