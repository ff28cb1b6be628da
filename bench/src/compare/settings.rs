//! The options of `compare` and what they resolve to: the full comparison of BENCHMARKING.md by
//! default, or with `--short` the few-seconds-per-case run CI uses so that the comparison cannot
//! rot. Any option given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::kit::proxies::{IntakeMode, ProxyKind};
use crate::kit::servers::ServerKind;
use crate::kit::settings;

/// Options of `compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Which proxies to measure, in this order.
    #[arg(long, value_delimiter = ',', default_value = "herdsman,haproxy,nginx")]
    pub proxies: Vec<ProxyKind>,
    /// The servers the proxies forward to, comma-separated: `own` (herdsman-bench's backend) and
    /// `nginx` (a real nginx answering the same 19 bytes). Each proxy and the server alone are
    /// measured against each, in every case; the idle sweep runs against the first.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "SERVER[,SERVER…]",
        default_value = "own,nginx"
    )]
    pub servers: Vec<ServerKind>,
    /// A herdsman binary to measure, as PATH or LABEL=PATH; repeat to compare builds (e.g.
    /// allocators) as extra rows. Default: this workspace's target/release/herdsman, built first.
    #[arg(long = "herdsman-bin", value_name = "[LABEL=]PATH")]
    pub herdsman_bins: Vec<String>,
    /// herdsman intake modes, comma-separated: each herdsman binary is measured once per mode, as
    /// rows labelled "herdsman (MODE)", with `intake = "MODE"` in its config; with several modes
    /// including reuseport, each mode ÷ reuseport is reported too. Default: herdsman's own default,
    /// one row labelled "herdsman".
    #[arg(long, value_delimiter = ',', value_name = "MODE[,MODE…]")]
    pub intake: Vec<IntakeMode>,
    /// Worker processes / threads, comma-separated: every proxy is started afresh with each count
    /// and measured at every connection count. Default: 1,2.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Option<Vec<u32>>,
    /// wrk connection counts, comma-separated; each is a separate set of runs. Default:
    /// 50,200,1000,5000.
    #[arg(long, value_delimiter = ',', value_name = "C[,C…]",
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: Option<Vec<u32>>,
    /// Seconds per wrk run ("10" or "10s"). Default: 10; with --short, 2.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub duration: Option<u32>,
    /// Rounds; in each, every target runs once per case. Default: 3; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: Option<u32>,
    /// Seconds of unrecorded load per target before the first round (0: none). Default: 1; with
    /// --short, 0.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub warmup: Option<u32>,
    /// Idle keep-alive client connections held open during the idle sweep, comma-separated; 0 (the
    /// baseline) is always measured too. Default: 0,1000,5000,15000; with --short, 0,1000. Each
    /// proxy process must be able to open this many files plus the active load's (20,000 here).
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]", conflicts_with = "no_idle",
          value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub idle: Option<Vec<u32>>,
    /// Skip the idle-connection sweep.
    #[arg(long)]
    pub no_idle: bool,
    /// A few seconds per case, one round: the whole comparison in about three minutes, written by
    /// default under target/ rather than over bench/results/compare.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults: the full comparison or the short one.
struct Defaults {
    workers: &'static [u32],
    connections: &'static [u32],
    seconds: u32,
    rounds: u32,
    warmup: u32,
    idle: &'static [u32],
    /// Relative to the workspace.
    out: &'static str,
}

/// BENCHMARKING.md's headline setup: 1 and 2 workers, 50/200/1,000/5,000 connections, 10 s runs,
/// three rounds, and the idle sweep up to 15,000 (under the 20,000-file limit of these machines:
/// the sweep's proxies are started apart from the main passes', so the two needs do not add up).
const FULL: Defaults = Defaults {
    workers: &[1, 2],
    connections: &[50, 200, 1000, 5000],
    seconds: 10,
    rounds: 3,
    warmup: 1,
    idle: &[0, 1000, 5000, 15_000],
    out: "bench/results/compare.md",
};

/// Every case of the full comparison, briefly: enough to prove it still runs end to end.
const SHORT: Defaults = Defaults {
    workers: &[1, 2],
    connections: &[50, 200, 1000, 5000],
    seconds: 2,
    rounds: 1,
    warmup: 0,
    idle: &[0, 1000],
    out: "target/herdsman-bench/compare-short.md",
};

/// What a comparison runs, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Each once, in the order asked for; never empty.
    pub servers: Vec<ServerKind>,
    pub workers: Vec<u32>,
    pub connections: Vec<u32>,
    pub seconds: u32,
    pub rounds: u32,
    pub warmup: u32,
    /// Idle counts for the sweep, ascending and each once, 0 first; empty: no sweep.
    pub idle: Vec<u32>,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &CompareArgs, workspace: &Path) -> anyhow::Result<Settings> {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let settings = Settings {
            servers: first_mentions(&args.servers),
            workers: args
                .workers
                .clone()
                .unwrap_or_else(|| defaults.workers.to_vec()),
            connections: args
                .connections
                .clone()
                .unwrap_or_else(|| defaults.connections.to_vec()),
            seconds: args.duration.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            warmup: args.warmup.unwrap_or(defaults.warmup),
            idle: if args.no_idle {
                Vec::new()
            } else {
                idle_counts(args.idle.as_deref().unwrap_or(defaults.idle))
            },
            out: args.output.results_file(workspace, defaults.out),
        };
        if settings.seconds == 0 {
            bail!("--duration must be at least 1 second");
        }
        if settings.workers.is_empty() || settings.connections.is_empty() {
            bail!("--workers and --connections each need at least one number");
        }
        if settings.servers.is_empty() {
            bail!("--servers needs at least one of own, nginx");
        }
        Ok(settings)
    }

    /// The largest wrk connection count.
    pub fn most_connections(&self) -> u32 {
        self.connections.iter().copied().max().unwrap_or(0)
    }

    /// The largest idle count (0 without a sweep).
    pub fn most_idle(&self) -> u32 {
        self.idle.iter().copied().max().unwrap_or(0)
    }

    /// The active load the idle sweep runs beside its idle clients: the smallest connection count.
    pub fn idle_load_connections(&self) -> u32 {
        self.connections.iter().copied().min().unwrap_or(1)
    }

    /// The worker count the idle sweep's proxies run: the first asked for.
    pub fn idle_workers(&self) -> u32 {
        self.workers[0]
    }

    /// The server the idle sweep's proxies forward to: the first asked for.
    pub fn idle_server(&self) -> ServerKind {
        self.servers[0]
    }
}

/// Each of `asked` once, first mention first.
pub fn first_mentions<T: Copy + PartialEq>(asked: &[T]) -> Vec<T> {
    let mut once = Vec::new();
    for &item in asked {
        if !once.contains(&item) {
            once.push(item);
        }
    }
    once
}

/// The sweep's counts: ascending, each once, with the 0 baseline that the throughput ratio needs.
/// Asking for none at all (an empty list) means no sweep.
fn idle_counts(asked: &[u32]) -> Vec<u32> {
    if asked.is_empty() {
        return Vec::new();
    }
    let mut counts: Vec<u32> = asked.iter().copied().chain([0]).collect();
    counts.sort_unstable();
    counts.dedup();
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn parse(args: &[&str]) -> Result<CompareArgs, clap::Error> {
        parse_args("compare", args)
    }

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(&parse(args).unwrap(), Path::new("/w")).unwrap()
    }

    #[test]
    fn the_defaults_are_the_full_comparison() {
        let s = resolve(&[]);
        assert_eq!(s.servers, vec![ServerKind::Own, ServerKind::Nginx]);
        assert_eq!(s.workers, vec![1, 2]);
        assert_eq!(s.connections, vec![50, 200, 1000, 5000]);
        assert_eq!((s.seconds, s.rounds, s.warmup), (10, 3, 1));
        assert_eq!(s.idle, vec![0, 1000, 5000, 15_000]);
        assert_eq!(s.out, Path::new("/w/bench/results/compare.md"));
        assert_eq!((s.idle_workers(), s.idle_load_connections()), (1, 50));
        assert_eq!((s.most_connections(), s.most_idle()), (5000, 15_000));
        assert_eq!(s.idle_server(), ServerKind::Own);
    }

    #[test]
    fn short_mode_shortens_every_case_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!(s.servers, vec![ServerKind::Own, ServerKind::Nginx]);
        assert_eq!(s.workers, vec![1, 2]);
        assert_eq!(s.connections, vec![50, 200, 1000, 5000]);
        assert_eq!((s.seconds, s.rounds, s.warmup), (2, 1, 0));
        assert_eq!(s.idle, vec![0, 1000]);
        assert!(s.out.starts_with("/w/target"));
        // An explicit option wins over the short defaults.
        let s = resolve(&["--short", "--rounds", "2", "--out", "x.md", "--idle", "500"]);
        assert_eq!((s.rounds, s.out), (2, PathBuf::from("x.md")));
        assert_eq!(s.idle, vec![0, 500]);
    }

    #[test]
    fn idle_counts_are_sorted_with_a_zero_baseline() {
        assert_eq!(
            resolve(&["--idle", "15000,1000,1000"]).idle,
            vec![0, 1000, 15_000]
        );
        assert!(resolve(&["--no-idle"]).idle.is_empty());
        assert!(parse(&["--no-idle", "--idle", "5"]).is_err());
        assert!(idle_counts(&[]).is_empty());
    }

    #[test]
    fn lists_are_comma_separated() {
        let s = resolve(&["--workers", "2,4", "--connections", "10"]);
        assert_eq!((s.workers, s.connections), (vec![2, 4], vec![10]));
        assert!(parse(&["--workers", "0"]).is_err());
        assert!(parse(&["--connections", "6000"]).is_err());
    }

    #[test]
    fn servers_are_chosen_by_name_each_once() {
        let s = resolve(&["--servers", "nginx,own,nginx"]);
        assert_eq!(s.servers, vec![ServerKind::Nginx, ServerKind::Own]);
        assert_eq!(s.idle_server(), ServerKind::Nginx);
        assert_eq!(
            resolve(&["--servers", "own"]).servers,
            vec![ServerKind::Own]
        );
        assert!(parse(&["--servers", "apache"]).is_err());
        assert!(parse(&["--servers", ""]).is_err());
    }

    #[test]
    fn intake_defaults_to_herdsman_own_default() {
        let args = parse(&[]).unwrap();
        assert!(args.intake.is_empty());
    }

    #[test]
    fn intake_takes_a_comma_separated_list_of_modes() {
        let args = parse(&["--intake", "balanced,reuseport"]).unwrap();
        assert_eq!(
            args.intake,
            vec![IntakeMode::Balanced, IntakeMode::Reuseport]
        );
        let args = parse(&["--intake", "shared", "--intake", "exclusive"]).unwrap();
        assert_eq!(args.intake, vec![IntakeMode::Shared, IntakeMode::Exclusive]);
        assert!(parse(&["--intake", "fair"]).is_err());
        assert!(parse(&["--intake", "balanced,"]).is_err());
    }

    #[test]
    fn a_zero_duration_is_refused() {
        assert!(Settings::resolve(&parse(&["--duration", "0"]).unwrap(), Path::new("/w")).is_err());
    }
}
