//! The options of `churn` and what they resolve to: the full run by default (1 and 2 workers,
//! five interleaved rounds of 5 s, syscalls counted over 3,000 serial connections), or with
//! `--short` one round of 1 s and 300 connections, written under target/ for the test. An option
//! given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use crate::kit::proxies::ProxyKind;
use crate::kit::settings;

/// Options of `churn`.
#[derive(Debug, clap::Args)]
pub struct ChurnArgs {
    /// Worker counts (threads or processes of each proxy), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]", default_values_t = [1, 2],
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Vec<u32>,
    /// The proxies, comma-separated, each measured in turn every round.
    #[arg(long, value_delimiter = ',', value_name = "P[,P…]",
          default_values_t = [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx])]
    pub proxies: Vec<ProxyKind>,
    /// Seconds of wrk per run. Default: 5; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// Rounds; each runs every proxy once per worker count, in an order that turns.
    /// Default: 5; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: Option<u32>,
    /// wrk's connections, each closed after one request (`Connection: close`).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: u32,
    /// Connections made one after another while strace counts each proxy's system calls, with
    /// one worker. Default: 3,000; with --short, 300. 0 leaves the count out.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub serial: Option<u32>,
    /// The herdsman binary to measure, instead of the workspace's release build.
    #[arg(long, value_name = "PATH")]
    pub herdsman: Option<PathBuf>,
    /// One round of 1 s and 300 serial connections, written by default under target/ rather
    /// than over bench/results/churn.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    seconds: u32,
    rounds: u32,
    serial: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// The issue's figures: at least five interleaved rounds; about ten minutes.
const FULL: Defaults = Defaults {
    seconds: 5,
    rounds: 5,
    serial: 3_000,
    out: "bench/results/churn.md",
};

/// Enough to prove it runs end to end, in about half a minute.
const SHORT: Defaults = Defaults {
    seconds: 1,
    rounds: 1,
    serial: 300,
    out: "target/herdsman-bench/churn-short.md",
};

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Without repeats, in the order given; never empty.
    pub workers: Vec<u32>,
    /// Without repeats, in the order given; never empty.
    pub proxies: Vec<ProxyKind>,
    pub seconds: u32,
    pub rounds: u32,
    pub connections: u32,
    pub serial: u32,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &ChurnArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        Settings {
            workers: settings::without_repeats(&args.workers, &[1]),
            proxies: settings::without_repeats(&args.proxies, &[ProxyKind::Herdsman]),
            seconds: args.seconds.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            connections: args.connections,
            serial: args.serial.unwrap_or(defaults.serial),
            out: args.output.results_file(workspace, defaults.out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(
            &parse_args::<ChurnArgs>("churn", args).unwrap(),
            Path::new("/w"),
        )
    }

    #[test]
    fn the_defaults_are_the_issue_setup() {
        let s = resolve(&[]);
        assert_eq!(s.workers, [1, 2]);
        assert_eq!(s.proxies.len(), 3);
        assert_eq!(
            (s.seconds, s.rounds, s.connections, s.serial),
            (5, 5, 50, 3_000)
        );
        assert_eq!(s.out, Path::new("/w/bench/results/churn.md"));
    }

    #[test]
    fn short_mode_is_small_and_writes_under_target() {
        let s = resolve(&["--short", "--workers", "2,1,2"]);
        assert_eq!(s.workers, [2, 1]);
        assert_eq!((s.seconds, s.rounds, s.serial), (1, 1, 300));
        assert!(s.out.starts_with("/w/target"));
    }
}
