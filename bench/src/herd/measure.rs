//! One run: start a herd, tap it with K connections one at a time, and read what it cost the
//! waiting threads: the kernel's context-switch and CPU counters, the returns the threads saw, and
//! how long each connection took until every waiter was asleep again.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::tasks::{self, CpuSource, StateProbe, TaskCounters};
use super::waiters::{Herd, Method, Returns};
use crate::kit::stats::percentile_of;

/// Connections made before the counters are read, so that first-use costs (page faults in fresh
/// stacks, socket allocations) stay out of the figures.
pub const WARMUP_CONNECTIONS: usize = 5;
/// Passes over the sleeping herd timed for the settle-time floor; the median is kept.
const FLOOR_PASSES: usize = 15;
/// Bound on each client step and on each wait for the herd to fall asleep.
const STEP_LIMIT: Duration = Duration::from_secs(5);

/// What one (method, threads) run measured.
#[derive(Debug, Clone)]
pub struct RunFigures {
    pub method: Method,
    pub threads: usize,
    pub round: u32,
    /// Connections counted (the warm-up ones excluded).
    pub connections: usize,
    /// The waiters' kernel counters over the counted connections, summed over all waiters.
    pub counters: TaskCounters,
    /// What the waiters saw returned over the counted connections.
    pub returns: Returns,
    /// For each counted connection, µs from connect() until the client read the accepting
    /// thread's byte.
    pub answer_us: Vec<f64>,
    /// For each counted connection, µs from connect() until the herd was asleep again, as near as
    /// the client can tell: the later of its byte and the last sighting of an awake waiter.
    pub asleep_us: Vec<f64>,
    /// For each counted connection, µs from connect() until every waiter had been seen asleep:
    /// the herd had settled by then. At least one pass (`sweep_floor_us`) after the byte.
    pub confirmed_us: Vec<f64>,
    /// µs one pass over the already sleeping waiters takes.
    pub sweep_floor_us: f64,
    pub elapsed: Duration,
}

impl RunFigures {
    fn per_connection(&self, total: u64) -> f64 {
        total as f64 / self.connections.max(1) as f64
    }

    pub fn switches_per_connection(&self) -> f64 {
        self.per_connection(self.counters.switches())
    }

    pub fn voluntary_per_connection(&self) -> f64 {
        self.per_connection(self.counters.voluntary_switches)
    }

    pub fn involuntary_per_connection(&self) -> f64 {
        self.per_connection(self.counters.involuntary_switches)
    }

    pub fn wakeups_per_connection(&self) -> f64 {
        self.per_connection(self.returns.wakeups)
    }

    pub fn spurious_per_connection(&self) -> f64 {
        self.per_connection(self.returns.spurious)
    }

    pub fn cpu_us_per_connection(&self) -> f64 {
        self.per_connection(self.counters.cpu_ns) / 1000.0
    }

    pub fn answer_median_us(&self) -> f64 {
        median_or_zero(&self.answer_us)
    }

    pub fn asleep_median_us(&self) -> f64 {
        median_or_zero(&self.asleep_us)
    }

    pub fn confirmed_median_us(&self) -> f64 {
        median_or_zero(&self.confirmed_us)
    }
}

/// The median of `values` by nearest rank (`kit::stats`); 0 for none, as the table prints it.
fn median_or_zero(values: &[f64]) -> f64 {
    percentile_of(values, 50.0).unwrap_or(0.0)
}

/// Runs `connections` connections against `threads` waiters in `method`.
///
/// Each connection starts from a herd that is entirely asleep, as in 1999 (the client "tapped" an
/// idle server): the client connects, waits for the accepting thread's byte, closes, and then
/// waits until every waiter has been seen asleep before the next connection. So a connection's
/// counts are those of one wake-up of an idle herd, not of a storm in which threads still awake
/// from the last connection cannot be woken again.
pub fn run(
    method: Method,
    threads: usize,
    connections: usize,
    round: u32,
    cpu_source: CpuSource,
) -> anyhow::Result<RunFigures> {
    let started = Instant::now();
    let herd = Herd::start(method, threads)?;
    let tids = herd.tids()?;
    let mut probes = tids
        .iter()
        .map(|&tid| StateProbe::open(tid))
        .collect::<anyhow::Result<Vec<_>>>()?;
    tasks::wait_until_all_asleep(&mut probes, Instant::now() + STEP_LIMIT * 4)
        .context("waiting for the new herd to fall asleep")?;
    let addr = herd.addr();
    for _ in 0..WARMUP_CONNECTIONS {
        tap(addr)?;
        tasks::wait_until_all_asleep(&mut probes, Instant::now() + STEP_LIMIT)?;
    }
    let sweep_floor = tasks::sweep_floor(&mut probes, FLOOR_PASSES)?;

    let counters_before = tasks::sum_counters(&tids, cpu_source)?;
    let returns_before = herd.returns();
    let mut answer_us = Vec::with_capacity(connections);
    let mut asleep_us = Vec::with_capacity(connections);
    let mut confirmed_us = Vec::with_capacity(connections);
    let micros = |from: Instant, to: Instant| (to - from).as_secs_f64() * 1e6;
    for i in 0..connections {
        let start = Instant::now();
        tap(addr).with_context(|| format!("connection {} of {connections}", i + 1))?;
        let answered = Instant::now();
        let last_awake = tasks::wait_until_all_asleep(&mut probes, start + STEP_LIMIT)
            .with_context(|| format!("after connection {} of {connections}", i + 1))?;
        let asleep = Instant::now();
        answer_us.push(micros(start, answered));
        asleep_us.push(micros(
            start,
            last_awake.map_or(answered, |t| t.max(answered)),
        ));
        confirmed_us.push(micros(start, asleep));
    }
    let counters = tasks::sum_counters(&tids, cpu_source)?.since(counters_before);
    let returns = herd.returns().since(returns_before);
    drop(probes);
    herd.stop()?;
    if returns.accepted != connections as u64 {
        bail!(
            "the waiters accepted {} connections, the client made {connections}",
            returns.accepted
        );
    }
    Ok(RunFigures {
        method,
        threads,
        round,
        connections,
        counters,
        returns,
        answer_us,
        asleep_us,
        confirmed_us,
        sweep_floor_us: sweep_floor.as_secs_f64() * 1e6,
        elapsed: started.elapsed(),
    })
}

/// One client connection: connect, read the accepting thread's byte, close.
fn tap(addr: SocketAddr) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, STEP_LIMIT)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(STEP_LIMIT))?;
    let mut byte = [0u8; 1];
    stream
        .read_exact(&mut byte)
        .context("waiting for the accepting thread's byte")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_use_the_nearest_rank_and_none_is_zero() {
        assert_eq!(median_or_zero(&[5.0, 1.0, 4.0, 2.0, 3.0]), 3.0);
        assert_eq!(median_or_zero(&[4.0, 1.0]), 1.0);
        assert_eq!(median_or_zero(&[]), 0.0);
    }

    /// A small herd in each method: every connection is accepted once, and the figures are sane.
    #[test]
    fn a_small_run_counts_every_connection() {
        for method in Method::ALL {
            let figures = run(method, 8, 20, 1, CpuSource::detect()).unwrap();
            assert_eq!(figures.returns.accepted, 20);
            assert_eq!(figures.confirmed_us.len(), 20);
            assert!(figures.asleep_median_us() <= figures.confirmed_median_us());
            // The accepting thread at least blocks again after each connection.
            assert!(figures.switches_per_connection() >= 0.9, "{figures:?}");
            assert!(figures.wakeups_per_connection() >= 1.0, "{figures:?}");
        }
    }
}
