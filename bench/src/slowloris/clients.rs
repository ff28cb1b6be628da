//! The slow connections, both ends: the hidden `slow-clients` subcommand (one holder process
//! running up to `MAX_PER_PROCESS` of them, an equal share of each kind asked for) and `SlowClients`, the handle
//! `slowloris` starts enough holders through. They speak as `compare`'s idle clients do, by lines
//! on the holder's stdout and by its stdin:
//!
//! - `ready N`: each of the N connections has made its first connect (failures are counted in
//!   the report at the end).
//! - stdin closes, the parent dies, or `--hold-seconds` pass: time to finish.
//! - one line per kind (`slow-head opened=… held=… ended=… …`, see `kinds::Tally::line`): what
//!   that kind saw, counted when told to finish; every kind has its line, zeros for one not run.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::kinds::{self, Kind, Shared, Tally, TRICKLE};
use super::settings::parse_kind;
use crate::kit::holders::{say, wait_until_told_to_finish, Holders};
use crate::kit::process::split_evenly;

/// Slow connections one holder process runs at most: one descriptor each (the reset loop opens
/// its next connection only after closing the last), far under the 20,000 files a process may
/// open here.
pub const MAX_PER_PROCESS: u32 = 5000;

/// How long the holders may take to say `ready`: connects are spread over the first second and
/// each may take up to 5 s.
const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long they may take to finish once told to: every task notices at its next step.
const FINISH_LIMIT: Duration = Duration::from_secs(30);

/// Options of the hidden `slow-clients` subcommand.
#[derive(Debug, clap::Args)]
pub struct SlowClientsArgs {
    /// herdsman's port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// Slow connections to run, an equal share of each of --kinds (at most MAX_PER_PROCESS).
    #[arg(long)]
    pub count: u32,
    /// The kinds to run, comma-separated. Default: all four.
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    pub kinds: Vec<Kind>,
    /// Finish by itself after this many seconds, whatever the parent does.
    #[arg(long, default_value_t = 600)]
    pub hold_seconds: u64,
}

/// The `slow-clients` subcommand: open, say `ready`, trickle until told to finish, report.
pub fn run(args: SlowClientsArgs) -> anyhow::Result<()> {
    if args.count > MAX_PER_PROCESS {
        bail!(
            "{} slow connections are more than one process runs (at most {MAX_PER_PROCESS})",
            args.count
        );
    }
    let shared = Arc::new(Shared::new(SocketAddr::from((
        Ipv4Addr::LOCALHOST,
        args.port,
    ))));
    // stdin closes when the parent says so, or dies.
    let watcher = Arc::clone(&shared);
    std::thread::spawn(move || {
        wait_until_told_to_finish();
        watcher.stop();
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let kinds = if args.kinds.is_empty() {
        Kind::ALL.to_vec()
    } else {
        args.kinds
    };
    let tallies = runtime.block_on(hold(shared, args.count, &kinds, args.hold_seconds));
    for (kind, tally) in Kind::ALL.iter().zip(&tallies) {
        say(&tally.line(*kind));
    }
    Ok(())
}

/// Runs `count` slow connections, shared equally by `kinds`, until told to stop (or
/// `hold_seconds` pass), then returns what each kind saw, in `Kind::ALL` order.
async fn hold(shared: Arc<Shared>, count: u32, kinds: &[Kind], hold_seconds: u64) -> Vec<Tally> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let shares = split_evenly(count, kinds.len() as u32);
    for (&kind, share) in kinds.iter().zip(shares) {
        for index in 0..share {
            let shared = Arc::clone(&shared);
            let phase = TRICKLE.mul_f64(f64::from(index) / f64::from(share));
            tasks.spawn(async move { (kind, kinds::run(kind, &shared, phase).await) });
        }
    }
    let mut said_ready = false;
    let hold_limit = Duration::from_secs(hold_seconds);
    while !shared.stopping() {
        if !said_ready && shared.attempted.load(Ordering::Relaxed) >= count {
            say(&format!("ready {count}"));
            said_ready = true;
        }
        if started.elapsed() >= hold_limit {
            shared.stop();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut tallies = vec![Tally::default(); Kind::ALL.len()];
    while let Some(joined) = tasks.join_next().await {
        if let Ok((kind, tally)) = joined {
            let index = Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
            tallies[index].add(&tally);
        }
    }
    tallies
}

/// Holder processes for `count` slow connections: as few as `MAX_PER_PROCESS` allows.
pub fn holders_for(count: u32) -> u32 {
    count.div_ceil(MAX_PER_PROCESS)
}

/// Slow connections run by holder processes; dropping it kills them.
pub struct SlowClients {
    holders: Holders,
}

impl SlowClients {
    /// Starts holders for `count` slow connections of `kinds` to 127.0.0.1:`port` and waits until
    /// every one has said `ready`. Each stops by itself after `hold`. Logs go into `dir`.
    pub fn open(
        port: u16,
        count: u32,
        kinds: &[Kind],
        hold: Duration,
        dir: &Path,
    ) -> anyhow::Result<SlowClients> {
        let kinds: Vec<&str> = kinds.iter().map(|k| k.label()).collect();
        let mut holders = Holders::default();
        for (index, share) in split_evenly(count, holders_for(count))
            .into_iter()
            .enumerate()
        {
            holders.start(
                "slow-clients",
                port,
                share,
                &[
                    "--hold-seconds".to_string(),
                    hold.as_secs().max(1).to_string(),
                    "--kinds".to_string(),
                    kinds.join(","),
                ],
                &dir.join(format!("slow-clients-{index}.log")),
            )?;
        }
        holders.wait_until_ready(&format!("{count} slow connections"), READY_LIMIT)?;
        Ok(SlowClients { holders })
    }

    /// The holders' process ids, for their CPU time.
    pub fn pids(&self) -> Vec<u32> {
        self.holders.pids()
    }

    /// Tells every holder to finish and returns what each kind saw, summed over holders, in
    /// `Kind::ALL` order.
    pub fn close(self) -> anyhow::Result<Vec<(Kind, Tally)>> {
        let mut sums: Vec<(Kind, Tally)> =
            Kind::ALL.iter().map(|&k| (k, Tally::default())).collect();
        for holder in self.holders.finish(FINISH_LIMIT)? {
            for (kind, sum) in &mut sums {
                let (_, tally) = holder
                    .said(&format!("{} ", kind.label()))
                    .as_deref()
                    .and_then(Tally::parse)
                    .with_context(|| {
                        format!(
                            "a slow-clients process ended without its {} line: {}",
                            kind.label(),
                            holder.log_tail(3)
                        )
                    })?;
                sum.add(&tally);
            }
        }
        Ok(sums)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_slow_connections_are_spread_over_holders() {
        assert_eq!(holders_for(200), 1);
        assert_eq!(holders_for(1000), 1);
        assert_eq!(holders_for(MAX_PER_PROCESS + 1), 2);
        assert!(split_evenly(30_000, holders_for(30_000))
            .iter()
            .all(|&share| share <= MAX_PER_PROCESS));
    }

    /// A whole holder against a listener that accepts and never answers: every connection is
    /// opened and still held when the holder is told to stop.
    #[test]
    fn a_holder_holds_every_kind_against_a_silent_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // The kernel completes the connects; nothing is accepted, so nothing is answered.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared::new(addr));
        let stopper = Arc::clone(&shared);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            stopper.stop();
        });
        let tallies = runtime.block_on(hold(shared, 8, &Kind::ALL, 60));
        for (kind, tally) in Kind::ALL.iter().zip(&tallies) {
            assert_eq!(
                (tally.opened, tally.held, tally.ended, tally.failed),
                (2, 2, 0, 0),
                "{kind:?}: {tally:?}"
            );
        }
        drop(listener);
    }

    /// Kinds not asked for are not run, and still have their (empty) tally.
    #[test]
    fn a_holder_runs_only_the_kinds_asked_for() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared::new(listener.local_addr().unwrap()));
        let stopper = Arc::clone(&shared);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            stopper.stop();
        });
        let tallies = runtime.block_on(hold(shared, 3, &[Kind::SlowBody], 60));
        let opened: Vec<u32> = tallies.iter().map(|t| t.opened).collect();
        assert_eq!(opened, vec![0, 3, 0, 0]);
        drop(listener);
    }
}
