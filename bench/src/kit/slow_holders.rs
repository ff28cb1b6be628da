//! Holder processes of slow client connections, both ends, for the experiments that hold many of
//! them (`slowloris`, `slow-clients`). A holder is a hidden subcommand of this program that runs
//! its connections as tasks on one current-thread runtime, an equal share of each kind it is
//! asked for; what a kind does is its experiment's, what it saw is a `Tally`. It speaks as
//! `kit::holders` says:
//!
//! - `ready N`: each of the N connections has made its first connect (failures are counted in
//!   the tallies at the end);
//! - stdin closes, the parent dies, or `--hold-seconds` pass: time to finish;
//! - one line per kind asked for (`LABEL opened=… held=… ended=… …`, see `Tally::line`): what
//!   that kind saw, counted when told to finish.
//!
//! `SlowHolders` is the parent's handle: as few holders as `MAX_PER_PROCESS` allows, made ready,
//! told to finish, and their tallies summed.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::net::TcpStream;

use crate::kit::holders::{say, wait_until_told_to_finish, Holders};
use crate::kit::process::{option_args, split_evenly};

/// Slow connections one holder process runs at most: one descriptor each (a connection that
/// starts again opens its next only after closing the last), far under the 20,000 files a process
/// may open here.
pub const MAX_PER_PROCESS: u32 = 5000;

/// How long the holders may take to say `ready`: connects are spread over the first second or so
/// and each may take up to `slow_steps::CONNECT_LIMIT`; and a few milliseconds more per
/// connection (`ready_limit`), since a flood of 21,000 that the proxy sheds and the holders open
/// again keeps both CPUs in the kernel, and the last first connects then came after 26 s.
const READY_LIMIT: Duration = Duration::from_secs(30);

/// `READY_LIMIT` and 5 ms per connection: 35 s for a thousand, 135 s for 21,000.
fn ready_limit(count: u32) -> Duration {
    READY_LIMIT + Duration::from_millis(5 * u64::from(count))
}
/// How long they may take to finish once told to: every task notices at its next step.
const FINISH_LIMIT: Duration = Duration::from_secs(30);

/// A kind of slow connection, as its experiment defines it.
pub trait SlowKind: Copy + Send + 'static {
    /// The word that names the kind in the holder's options and report lines: no spaces.
    fn label(self) -> &'static str;
}

/// The options every holder subcommand takes; its experiment adds its kinds and its own.
#[derive(Debug, clap::Args)]
pub struct HolderArgs {
    /// The proxy's port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// Slow connections to run, an equal share of each kind asked for (at most MAX_PER_PROCESS).
    #[arg(long)]
    pub count: u32,
    /// Finish by itself after this many seconds, whatever the parent does.
    #[arg(long, default_value_t = 600)]
    pub hold_seconds: u64,
}

/// What the connections of one kind saw; summed over connections and holder processes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Connections opened (a kind that starts again: over all its cycles).
    pub opened: u32,
    /// Connects that failed or timed out.
    pub failed: u32,
    /// Open at the end, the proxy having neither closed them nor answered an unfinished request
    /// (a kind that starts again: the connection of a cycle still under way).
    pub held: u32,
    /// Ended by the proxy: a close, a reset, or an answer (such as 408) before the request was
    /// complete; a kind that starts again: cycles the proxy ended.
    pub ended: u32,
    /// Requests sent whole and answered 2xx (an upload that got through).
    pub completed: u32,
    /// Resets the client sent mid-upload.
    pub resets: u32,
    /// Responses whose status line arrived.
    pub started: u32,
    /// Bytes of responses read.
    pub bytes_read: u64,
    /// How the proxy ended the first connection it ended ("answered: HTTP/1.1 408 …", "closed"),
    /// or why the first connect failed.
    pub first_end: Option<String>,
}

impl Tally {
    pub fn add(&mut self, other: &Tally) {
        self.opened += other.opened;
        self.failed += other.failed;
        self.held += other.held;
        self.ended += other.ended;
        self.completed += other.completed;
        self.resets += other.resets;
        self.started += other.started;
        self.bytes_read += other.bytes_read;
        if self.first_end.is_none() {
            self.first_end.clone_from(&other.first_end);
        }
    }

    /// Counts a connection the proxy ended, and how, if it is the first.
    pub fn end(&mut self, how: String) {
        self.ended += 1;
        self.first_end.get_or_insert(how);
    }

    /// The holder's report line: `LABEL opened=… failed=… … first=TEXT` (TEXT to the end of line).
    pub fn line(&self, label: &str) -> String {
        format!(
            "{label} opened={} failed={} held={} ended={} completed={} resets={} started={} \
             bytes={} first={}",
            self.opened,
            self.failed,
            self.held,
            self.ended,
            self.completed,
            self.resets,
            self.started,
            self.bytes_read,
            self.first_end.as_deref().unwrap_or("")
        )
    }

    /// Reads a line written by `line`: its label and tally.
    pub fn parse(line: &str) -> Option<(&str, Tally)> {
        let (head, first) = line.split_once(" first=")?;
        let mut words = head.split_whitespace();
        let label = words.next()?;
        let mut tally = Tally {
            first_end: (!first.trim().is_empty()).then(|| first.trim().to_string()),
            ..Tally::default()
        };
        for word in words {
            let (key, value) = word.split_once('=')?;
            let number: u64 = value.parse().ok()?;
            let small = u32::try_from(number).ok();
            match key {
                "opened" => tally.opened = small?,
                "failed" => tally.failed = small?,
                "held" => tally.held = small?,
                "ended" => tally.ended = small?,
                "completed" => tally.completed = small?,
                "resets" => tally.resets = small?,
                "started" => tally.started = small?,
                "bytes" => tally.bytes_read = number,
                _ => return None,
            }
        }
        Some((label, tally))
    }
}

/// What every task of a holder process shares: where to connect, when to stop, how many
/// connections have made their first attempt (the holder is ready when all have), and the
/// connections already counted at the stop.
pub struct Shared {
    pub addr: SocketAddr,
    stop: AtomicBool,
    pub attempted: AtomicU32,
    /// Connections whose task has counted them at the stop, kept open until every task has: the
    /// tasks notice the stop at their own steps, up to a step apart, and a connection closed
    /// meanwhile would change what the others see (it frees a server's worker, and a slower
    /// task's last step would then read an answer it did not have when told to stop). The
    /// holder's tasks run on one thread, so the lock is never contended.
    kept: Mutex<Vec<TcpStream>>,
}

impl Shared {
    pub fn new(addr: SocketAddr) -> Shared {
        Shared {
            addr,
            stop: AtomicBool::new(false),
            attempted: AtomicU32::new(0),
            kept: Mutex::new(Vec::new()),
        }
    }

    fn close_kept(&self) {
        self.kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }

    /// What a task does with its connection once done with it: closes it, or when the holder is
    /// stopping (the connection was counted at the stop), keeps it open until every task has
    /// counted its own.
    pub fn close_or_keep(&self, stream: TcpStream) {
        if self.stopping() {
            self.kept
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(stream);
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A holder subcommand's whole life: runs `args.count` slow connections to 127.0.0.1:`args.port`
/// shared equally by `kinds` (each made by `connection(kind, shared, phase)`), says `ready` once
/// each has made its first connect, and when told to finish, or after `--hold-seconds`, one tally
/// line per kind, in the order of `kinds`.
pub fn serve<K, F, Fut>(
    args: &HolderArgs,
    kinds: &[K],
    spread: Duration,
    connection: F,
) -> anyhow::Result<()>
where
    K: SlowKind,
    F: Fn(K, Arc<Shared>, Duration) -> Fut,
    Fut: Future<Output = Tally> + Send + 'static,
{
    if args.count > MAX_PER_PROCESS {
        bail!(
            "{} slow connections are more than one process runs (at most {MAX_PER_PROCESS})",
            args.count
        );
    }
    if kinds.is_empty() {
        bail!("no kind of slow connection to run");
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
    let hold_limit = Duration::from_secs(args.hold_seconds);
    let tallies = runtime.block_on(hold(
        shared, args.count, kinds, hold_limit, spread, connection,
    ));
    for (kind, tally) in kinds.iter().zip(&tallies) {
        say(&tally.line(kind.label()));
    }
    Ok(())
}

/// Runs `count` slow connections, shared equally by `kinds`, until told to stop (or `hold_limit`
/// passes), then returns what each kind saw, in the order of `kinds`. The connections of a kind
/// start at phases spread evenly over `spread`, so that they open, and step, spread out rather
/// than in bursts.
pub async fn hold<K, F, Fut>(
    shared: Arc<Shared>,
    count: u32,
    kinds: &[K],
    hold_limit: Duration,
    spread: Duration,
    connection: F,
) -> Vec<Tally>
where
    K: SlowKind,
    F: Fn(K, Arc<Shared>, Duration) -> Fut,
    Fut: Future<Output = Tally> + Send + 'static,
{
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let shares = split_evenly(count, kinds.len() as u32);
    for (index, (&kind, share)) in kinds.iter().zip(shares).enumerate() {
        for place in 0..share {
            let phase = spread.mul_f64(f64::from(place) / f64::from(share));
            let task = connection(kind, Arc::clone(&shared), phase);
            tasks.spawn(async move { (index, task.await) });
        }
    }
    let mut said_ready = false;
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
    let mut tallies = vec![Tally::default(); kinds.len()];
    while let Some(joined) = tasks.join_next().await {
        if let Ok((index, tally)) = joined {
            tallies[index].add(&tally);
        }
    }
    // Every task has counted: now they may close.
    shared.close_kept();
    tallies
}

/// Runs `task`, given a holder's shared state for `addr`, on a current-thread runtime as a holder
/// does, tells it to stop after `stop_after`, and once it is done closes the connections kept at
/// the stop: for tests.
#[cfg(test)]
pub fn run_until_stopped<T, Fut: Future<Output = T>>(
    addr: SocketAddr,
    stop_after: Duration,
    task: impl FnOnce(Arc<Shared>) -> Fut,
) -> T {
    let shared = Arc::new(Shared::new(addr));
    let stopper = Arc::clone(&shared);
    std::thread::spawn(move || {
        std::thread::sleep(stop_after);
        stopper.stop();
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let output = runtime.block_on(task(Arc::clone(&shared)));
    shared.close_kept();
    output
}

/// Holder processes for `count` slow connections: as few as `MAX_PER_PROCESS` allows.
pub fn holders_for(count: u32) -> u32 {
    count.div_ceil(MAX_PER_PROCESS)
}

/// Slow connections run by holder processes; dropping it kills them.
pub struct SlowHolders {
    holders: Holders,
    labels: Vec<&'static str>,
}

impl SlowHolders {
    /// Starts holders (this program's `subcommand`) for `count` slow connections of `kinds` to
    /// 127.0.0.1:`port`, with `more_args` after the common options, and waits until every one has
    /// said `ready`. Each stops by itself after `hold`. Logs go into `dir`, named after the
    /// subcommand.
    pub fn open<K: SlowKind>(
        subcommand: &str,
        port: u16,
        count: u32,
        kinds: &[K],
        more_args: &[String],
        hold: Duration,
        dir: &Path,
    ) -> anyhow::Result<SlowHolders> {
        let labels: Vec<&'static str> = kinds.iter().map(|k| k.label()).collect();
        let mut args = option_args([
            ("--hold-seconds", hold.as_secs().max(1).to_string()),
            ("--kinds", labels.join(",")),
        ]);
        args.extend_from_slice(more_args);
        let mut holders = Holders::default();
        for (index, share) in split_evenly(count, holders_for(count))
            .into_iter()
            .enumerate()
        {
            let log = dir.join(format!("{subcommand}-{}-{index}.log", labels.join("-")));
            holders.start(subcommand, port, share, &args, &log)?;
        }
        let what = format!("{count} slow connections ({})", labels.join(", "));
        holders.wait_until_ready(&what, ready_limit(count))?;
        Ok(SlowHolders { holders, labels })
    }

    /// The holders' process ids, for their CPU time.
    pub fn pids(&self) -> Vec<u32> {
        self.holders.pids()
    }

    /// Tells every holder to finish and returns what each kind saw, summed over holders, in the
    /// order of the kinds opened.
    pub fn close(self) -> anyhow::Result<Vec<Tally>> {
        let mut sums = vec![Tally::default(); self.labels.len()];
        for holder in self.holders.finish(FINISH_LIMIT)? {
            for (label, sum) in self.labels.iter().zip(&mut sums) {
                let (_, tally) = holder
                    .said(&format!("{label} "))
                    .as_deref()
                    .and_then(Tally::parse)
                    .with_context(|| {
                        format!(
                            "{} ended without its {label} line: {}",
                            holder.label,
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

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Test {
        Quiet,
        Loud,
    }

    impl SlowKind for Test {
        fn label(self) -> &'static str {
            match self {
                Test::Quiet => "quiet",
                Test::Loud => "loud",
            }
        }
    }

    #[test]
    fn report_lines_are_read_back() {
        let tally = Tally {
            opened: 250,
            held: 248,
            ended: 2,
            completed: 3,
            bytes_read: 12_345_678_901,
            first_end: Some("answered: HTTP/1.1 408 Request Timeout".into()),
            ..Tally::default()
        };
        let line = tally.line("slow-head");
        assert!(line.starts_with("slow-head opened=250 "), "{line}");
        assert_eq!(Tally::parse(&line), Some(("slow-head", tally)));
        let quiet = Tally::default();
        assert_eq!(
            Tally::parse(&quiet.line("reset-upload")),
            Some(("reset-upload", quiet))
        );
        assert_eq!(Tally::parse("ready 1000"), None);
        assert_eq!(Tally::parse("slow-head opened=x first="), None);
    }

    #[test]
    fn tallies_add_up_and_keep_the_first_end() {
        let mut sum = Tally::default();
        sum.add(&Tally {
            opened: 1,
            held: 1,
            ..Tally::default()
        });
        sum.add(&Tally {
            opened: 1,
            ended: 1,
            first_end: Some("closed".into()),
            ..Tally::default()
        });
        sum.add(&Tally {
            ended: 1,
            first_end: Some("read: connection reset".into()),
            ..Tally::default()
        });
        assert_eq!((sum.opened, sum.held, sum.ended), (2, 1, 2));
        assert_eq!(sum.first_end.as_deref(), Some("closed"));
    }

    #[test]
    fn many_slow_connections_are_spread_over_holders() {
        assert_eq!(holders_for(200), 1);
        assert_eq!(holders_for(1000), 1);
        assert_eq!(holders_for(MAX_PER_PROCESS + 1), 2);
        assert!(split_evenly(30_000, holders_for(30_000))
            .iter()
            .all(|&share| share <= MAX_PER_PROCESS));
    }

    /// The hold loop shares the connections out by kind, waits for the stop, and sums each
    /// kind's tallies in the order of the kinds.
    #[test]
    fn the_hold_loop_shares_out_and_sums_by_kind() {
        let tallies = run_until_stopped(
            SocketAddr::from((Ipv4Addr::LOCALHOST, 9)),
            Duration::from_millis(300),
            |shared| {
                hold(
                    shared,
                    5,
                    &[Test::Loud, Test::Quiet],
                    Duration::from_secs(60),
                    Duration::from_millis(100),
                    |kind, shared, _phase| async move {
                        shared.attempted.fetch_add(1, Ordering::Relaxed);
                        Tally {
                            opened: 1,
                            ended: u32::from(kind == Test::Loud),
                            ..Tally::default()
                        }
                    },
                )
            },
        );
        let counts: Vec<(u32, u32)> = tallies.iter().map(|t| (t.opened, t.ended)).collect();
        assert_eq!(counts, vec![(3, 3), (2, 0)]);
    }
}
