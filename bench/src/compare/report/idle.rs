//! The idle sweep's part of the results file: the same active load with 0, 1,000, … idle
//! keep-alive client connections held open, per proxy — requests/s and its ratio to none, CPU per
//! request, resident memory before and with the idle clients, memory per idle connection, and how
//! many idle connections the proxy verifiably held.

use std::fmt::Write as _;

use std::time::Duration;

use crate::compare::idle_clients::MAX_PER_PROCESS;
use crate::kit::markdown::{one_line, thousands, worker_count, write_details_table};
use crate::kit::proxies::CLIENT_IDLE_SECONDS;
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::WrkReport;

/// Seconds of the active load run, unrecorded, before the memory baseline is read: the proxy's
/// buffers and backend connections for that load then exist already and are not counted as the
/// idle connections' cost.
pub const WARMUP_SECONDS: u32 = 1;

/// How long the idle clients sit before memory is read and the load starts.
pub const SETTLE: Duration = Duration::from_secs(1);

/// One proxy with one idle count, in one round.
#[derive(Debug, Clone)]
pub struct IdleRun {
    pub round: u32,
    pub label: String,
    /// Idle client connections opened (each served one request) and held during the load.
    pub idle: u32,
    /// ESTABLISHED connections on the proxy's port once all were open, before the load: the idle
    /// connections the proxy verifiably held.
    pub held: usize,
    /// Idle connections the proxy had closed (or written to) by the end of the load.
    pub closed: u32,
    /// VmRSS of the proxy's process tree just before the idle clients opened, in KiB.
    pub rss_before_kib: u64,
    /// VmRSS with the idle clients open and settled, before the load, in KiB.
    pub rss_open_kib: u64,
    /// VmRSS after the load, the idle clients still open, in KiB: shows memory an allocator
    /// returned (or took) only once the process was busy again.
    pub rss_after_load_kib: u64,
    /// The active load beside the idle clients.
    pub wrk: WrkReport,
    pub cpu_us_per_request: f64,
}

impl IdleRun {
    /// (RSS with the idle clients open − RSS before) ÷ idle count, in bytes; None with no idle
    /// client. May be below zero when the proxy returned more memory than the clients took.
    pub fn rss_bytes_per_connection(&self) -> Option<f64> {
        (self.idle > 0).then(|| {
            (self.rss_open_kib as f64 - self.rss_before_kib as f64) * 1024.0 / f64::from(self.idle)
        })
    }

    /// Whether the proxy held every idle connection from opening to the end of the load.
    pub fn held_all(&self) -> bool {
        self.held >= self.idle as usize && self.closed == 0
    }

    pub fn errors(&self) -> u64 {
        self.wrk.socket_errors + self.wrk.bad_status
    }
}

/// An idle run that did not complete, and why.
#[derive(Debug, Clone)]
pub struct IdleFailure {
    pub round: u32,
    pub label: String,
    pub idle: u32,
    pub reason: String,
}

/// The whole sweep: its setup and every run.
#[derive(Debug, Clone, Default)]
pub struct IdleSweep {
    /// Ascending, 0 first.
    pub counts: Vec<u32>,
    pub workers: u32,
    /// The server behind the proxies, as results files write it ("own backend").
    pub server: String,
    /// wrk connections of the active load.
    pub connections: u32,
    pub seconds: u32,
    pub rounds: u32,
    /// Proxies measured, in order.
    pub labels: Vec<String>,
    pub runs: Vec<IdleRun>,
    pub failures: Vec<IdleFailure>,
}

/// Reads one figure out of an idle run.
pub type IdleExtract = fn(&IdleRun) -> Option<f64>;

pub const REQUESTS_PER_SEC: IdleExtract = |r| Some(r.wrk.requests_per_sec);
pub const RSS_PER_CONNECTION: IdleExtract = IdleRun::rss_bytes_per_connection;
pub const RSS_OPEN_MIB: IdleExtract = |r| Some(r.rss_open_kib as f64 / 1024.0);

impl IdleSweep {
    pub fn runs_of<'a>(&'a self, label: &'a str, idle: u32) -> impl Iterator<Item = &'a IdleRun> {
        self.runs
            .iter()
            .filter(move |r| r.label == label && r.idle == idle)
    }

    pub fn spread(&self, label: &str, idle: u32, value: IdleExtract) -> Option<Spread> {
        spread(
            &self
                .runs_of(label, idle)
                .filter_map(value)
                .collect::<Vec<_>>(),
        )
    }

    pub fn median(&self, label: &str, idle: u32, value: IdleExtract) -> Option<f64> {
        self.spread(label, idle, value).map(|s| s.median)
    }

    /// The largest idle count asked for, if any is above 0.
    pub fn largest(&self) -> Option<u32> {
        self.counts.iter().copied().filter(|&n| n > 0).max()
    }

    /// Idle connections `label` failed to hold at `idle` over all its rounds (not held when
    /// counted, or closed by the end), and runs at that count that did not complete.
    pub fn dropped(&self, label: &str, idle: u32) -> (u64, usize) {
        let dropped = self
            .runs_of(label, idle)
            .map(|r| (r.idle as usize).saturating_sub(r.held) as u64 + u64::from(r.closed))
            .sum();
        let failed = self
            .failures
            .iter()
            .filter(|f| f.label == label && f.idle == idle)
            .count();
        (dropped, failed)
    }
}

/// The sweep's section: method, then one table row per proxy and idle count.
pub fn write(md: &mut String, sweep: &IdleSweep) {
    let _ = writeln!(md, "## Idle keep-alive connections\n");
    let _ = writeln!(
        md,
        "Each proxy with {} (the first worker count), in front of the {} (the first server), \
         started afresh for every idle count so that memory freed by an earlier count cannot be reused by the next: one {} s warm-up of the \
         active load, then its resident memory (VmRSS summed over its process tree) is read, N \
         idle clients are opened — keep-alive connections from separate `herdsman-bench \
         idle-clients` processes (at most {} each, so no process comes near the 20,000-file \
         limit), each having sent one GET and read its whole response — and once all are open \
         and have sat for {} s, VmRSS is read again and the ESTABLISHED connections on the proxy's \
         port are counted (`held`). Then the same active load as in the tables above, \
         `wrk -t1 -c{} -d{}s`, runs beside them; at its end each idle-clients process checks \
         every connection with a non-blocking peek, and any the proxy had closed (or written to) \
         is counted in `closed`. RSS per idle connection = (RSS with N open − RSS before) ÷ N. \
         Every proxy keeps an idle client for {CLIENT_IDLE_SECONDS} s. {} round(s), the \
         proxies' order rotating by one each round; median and min–max over rounds.\n",
        worker_count(sweep.workers),
        sweep.server,
        WARMUP_SECONDS,
        thousands(f64::from(MAX_PER_PROCESS)),
        SETTLE.as_secs_f64(),
        sweep.connections,
        sweep.seconds,
        sweep.rounds,
    );
    let _ = writeln!(
        md,
        "nginx allocates its `worker_connections` connection structures when it starts, and \
         HAProxy its descriptor table for `maxconn`: that memory is in their RSS before the idle \
         clients open, not in the per-connection figure. herdsman allocates per connection. \
         nginx's `worker_connections` is 16/15 of what the run opens, because nginx closes idle \
         keep-alive clients once fewer than 1/16 of its connections are free. A proxy that did \
         not hold every idle connection is marked ⚠. Resident memory moves in whole pages, and \
         an allocator may take or return memory in steps of several MiB whenever it likes: at \
         small idle counts such a step can outweigh the connections themselves, so the targets \
         are judged at the largest count (every idle run below also gives the RSS after the \
         load).\n"
    );
    if !sweep.failures.is_empty() {
        let _ = writeln!(md, "Runs that did not complete:\n");
        for f in &sweep.failures {
            let _ = writeln!(
                md,
                "- **{}**, {} idle, round {}: {}",
                f.label,
                thousands(f64::from(f.idle)),
                f.round,
                one_line(&f.reason)
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(
        md,
        "| target | idle | req/s median | req/s min–max | ÷ 0 idle | CPU-µs/req | RSS before, MiB | RSS with idle open, MiB | RSS per idle connection, bytes | its min–max | held (fewest) | closed (most) | errors | n |"
    );
    let _ = writeln!(
        md,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for label in &sweep.labels {
        let baseline = sweep.median(label, 0, REQUESTS_PER_SEC);
        for &idle in &sweep.counts {
            write_row(md, sweep, label, idle, baseline);
        }
    }
    let _ = writeln!(md);
}

fn write_row(md: &mut String, sweep: &IdleSweep, label: &str, idle: u32, baseline: Option<f64>) {
    let runs: Vec<&IdleRun> = sweep.runs_of(label, idle).collect();
    let shown = thousands(f64::from(idle));
    let Some(rps) = sweep.spread(label, idle, REQUESTS_PER_SEC) else {
        let _ = writeln!(
            md,
            "| {label} | {shown} | not run | | | | | | | | | | | 0 |"
        );
        return;
    };
    let ratio = baseline.map_or("—".to_string(), |b| format!("{:.3}", rps.median / b));
    let figure = |value: IdleExtract, format: fn(f64) -> String| {
        sweep
            .median(label, idle, value)
            .map_or("—".to_string(), format)
    };
    let per_connection = sweep.spread(label, idle, RSS_PER_CONNECTION);
    let held = runs.iter().map(|r| r.held).min().unwrap_or(0);
    let closed = runs.iter().map(|r| r.closed).max().unwrap_or(0);
    let flag = if runs.iter().all(|r| r.held_all()) {
        ""
    } else {
        " ⚠"
    };
    let _ = writeln!(
        md,
        "| {label} | {shown} | {} | {}–{} | {ratio} | {} | {} | {} | {} | {} | {}{flag} | {closed}{flag} | {} | {} |",
        thousands(rps.median),
        thousands(rps.min),
        thousands(rps.max),
        figure(|r| Some(r.cpu_us_per_request), |v| format!("{v:.2}")),
        figure(|r| Some(r.rss_before_kib as f64 / 1024.0), |v| format!("{v:.1}")),
        figure(RSS_OPEN_MIB, |v| format!("{v:.1}")),
        per_connection.map_or("—".to_string(), |s| format!("{:.0}", s.median)),
        per_connection.map_or("—".to_string(), |s| format!("{:.0}–{:.0}", s.min, s.max)),
        thousands(held as f64),
        runs.iter().map(|r| r.errors()).max().unwrap_or(0),
        rps.count,
    );
}

/// Every idle run, in the order they ran.
pub fn write_runs(md: &mut String, sweep: &IdleSweep) {
    let rows = sweep.runs.iter().map(|r| {
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.2} | {} | {} |",
            r.round,
            r.label,
            r.idle,
            r.held,
            r.closed,
            r.rss_before_kib,
            r.rss_open_kib,
            r.rss_after_load_kib,
            r.rss_bytes_per_connection()
                .map_or("—".to_string(), |b| format!("{b:.0}")),
            thousands(r.wrk.requests_per_sec),
            r.wrk.p99_us,
            r.cpu_us_per_request,
            r.wrk.socket_errors,
            r.wrk.bad_status
        )
    });
    write_details_table(
        md,
        "Every idle run",
        "| round | target | idle | held | closed | RSS before KiB | RSS open KiB | RSS after load KiB | bytes/idle | req/s | p99 µs | CPU-µs/req | socket errors | status ≥ 400 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        rows,
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An idle run of `label` at `idle` whose RSS grew by `grown_kib` and which served `rps`.
    pub fn idle_run(label: &str, idle: u32, grown_kib: u64, rps: f64) -> IdleRun {
        IdleRun {
            round: 1,
            label: label.to_string(),
            idle,
            held: idle as usize,
            closed: 0,
            rss_before_kib: 10_000,
            rss_open_kib: 10_000 + grown_kib,
            rss_after_load_kib: 10_000 + grown_kib,
            wrk: crate::compare::report::tests::wrk_report(rps),
            cpu_us_per_request: 15.0,
        }
    }

    #[test]
    fn rss_per_connection_is_the_growth_over_the_count() {
        // 1,000 connections that took 1,000 KiB: 1,024 bytes each.
        let run = idle_run("nginx", 1000, 1000, 50_000.0);
        assert_eq!(run.rss_bytes_per_connection(), Some(1024.0));
        assert_eq!(
            idle_run("nginx", 0, 0, 1.0).rss_bytes_per_connection(),
            None
        );
        let shrunk = IdleRun {
            rss_open_kib: 9_000,
            ..run
        };
        assert_eq!(shrunk.rss_bytes_per_connection(), Some(-1024.0));
    }

    #[test]
    fn a_proxy_that_dropped_idle_clients_is_flagged() {
        let held = idle_run("haproxy", 1000, 800, 50_000.0);
        assert!(held.held_all());
        let short = IdleRun {
            held: 990,
            ..held.clone()
        };
        let closed = IdleRun {
            closed: 3,
            ..held.clone()
        };
        assert!(!short.held_all() && !closed.held_all());
        let sweep = IdleSweep {
            counts: vec![0, 1000],
            labels: vec!["haproxy".into()],
            runs: vec![idle_run("haproxy", 0, 0, 52_000.0), short, closed],
            rounds: 2,
            ..IdleSweep::default()
        };
        assert_eq!(sweep.dropped("haproxy", 1000), (13, 0));
        let mut md = String::new();
        write(&mut md, &sweep);
        assert!(md.contains("| 990 ⚠ | 3 ⚠ |"), "{md}");
    }

    #[test]
    fn the_table_has_a_row_per_proxy_and_count() {
        let sweep = IdleSweep {
            counts: vec![0, 1000],
            workers: 1,
            server: "own backend".into(),
            connections: 50,
            seconds: 2,
            rounds: 1,
            labels: vec!["herdsman".into(), "nginx".into()],
            runs: vec![
                idle_run("herdsman", 0, 0, 50_000.0),
                idle_run("herdsman", 1000, 500, 49_000.0),
                idle_run("nginx", 0, 0, 48_000.0),
            ],
            failures: vec![IdleFailure {
                round: 1,
                label: "nginx".into(),
                idle: 1000,
                reason: "refused".into(),
            }],
        };
        let mut md = String::new();
        write(&mut md, &sweep);
        assert!(md.contains(
            "| herdsman | 1,000 | 49,000 | 49,000–49,000 | 0.980 | 15.00 | 9.8 | 10.3 | 512 | 512–512 | 1,000 | 0 | 0 | 1 |"
        ), "{md}");
        assert!(md.contains("| nginx | 1,000 | not run |"));
        assert!(md.contains("- **nginx**, 1,000 idle, round 1: refused"));
        assert!(md.contains("in front of the own backend (the first server)"));
    }
}
