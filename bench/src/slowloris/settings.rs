//! The options of `slowloris` and what they resolve to: the full run by default (three rounds of
//! 10 s runs, 1,000 slow connections of all four kinds), or with `--short` one round of 2 s runs
//! with 200, written under target/ for the test. An option given explicitly wins over either set
//! of defaults.

use std::path::{Path, PathBuf};

use super::kinds::Kind;
use crate::kit::settings;

/// Options of `slowloris`.
#[derive(Debug, clap::Args)]
pub struct SlowlorisArgs {
    /// Slow connections held open during the runs "with", an equal share of each of --kinds.
    /// Default: 1000; with --short, 200.
    #[arg(long, value_parser = clap::value_parser!(u32).range(4..=12_000))]
    pub slow: Option<u32>,
    /// herdsman's worker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// wrk's connections: the other clients, whose requests/s is measured.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: u32,
    /// Seconds per wrk run. Default: 10; with --short, 2.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub duration: Option<u32>,
    /// Rounds; each has one run without and one with the slow connections. Default: 3; with
    /// --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: Option<u32>,
    /// One round of 2 s runs with 200 slow connections, written by default under target/ rather
    /// than over bench/results/slowloris.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
    /// The kinds of slow connection, comma-separated, sharing --slow equally: slow-head,
    /// slow-body, slow-reader, reset-upload. Default: all four.
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    pub kinds: Vec<Kind>,
    /// No wrk runs: for each of --kinds alone (and all of them together, when there are several),
    /// in each round, a fresh herdsman after its warm-up, its RSS before and after --slow
    /// connections of that kind opened and settled; prints KiB per slow connection and writes
    /// no results file.
    #[arg(long)]
    pub memory_only: bool,
}

/// A kind of slow connection by its label.
pub fn parse_kind(label: &str) -> Result<Kind, String> {
    Kind::from_label(label).ok_or_else(|| {
        let known: Vec<&str> = Kind::ALL.iter().map(|k| k.label()).collect();
        format!("no kind {label:?}; the kinds are {}", known.join(", "))
    })
}

/// One set of defaults.
struct Defaults {
    slow: u32,
    seconds: u32,
    rounds: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// The issue's setup: 1,000 slow connections; three rounds of 10 s runs, about two minutes.
const FULL: Defaults = Defaults {
    slow: 1000,
    seconds: 10,
    rounds: 3,
    out: "bench/results/slowloris.md",
};

/// Enough to prove it still runs end to end, in about 15 s after the build.
const SHORT: Defaults = Defaults {
    slow: 200,
    seconds: 2,
    rounds: 1,
    out: "target/herdsman-bench/slowloris-short.md",
};

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub slow: u32,
    pub workers: u32,
    pub connections: u32,
    pub seconds: u32,
    pub rounds: u32,
    pub out: PathBuf,
    /// The kinds of slow connection, in `Kind::ALL` order, without repeats; never empty.
    pub kinds: Vec<Kind>,
    pub memory_only: bool,
}

impl Settings {
    pub fn resolve(args: &SlowlorisArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        Settings {
            slow: args.slow.unwrap_or(defaults.slow),
            workers: args.workers,
            connections: args.connections,
            seconds: args.duration.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            out: args.output.results_file(workspace, defaults.out),
            kinds: Kind::ALL
                .into_iter()
                .filter(|k| args.kinds.is_empty() || args.kinds.contains(k))
                .collect(),
            memory_only: args.memory_only,
        }
    }

    /// Descriptors herdsman needs at the peak: every client connection, a server connection for
    /// each slow connection that uploads or reads a response (all but the slow heads) and for each
    /// wrk connection, and spares.
    pub fn herdsman_descriptors(&self) -> u64 {
        let slow = u64::from(self.slow);
        let wrk = u64::from(self.connections);
        let with_server = self.kinds.iter().filter(|k| **k != Kind::SlowHead).count() as u64;
        slow + slow * with_server / self.kinds.len().max(1) as u64 + 2 * wrk + 100
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(
            &parse_args::<SlowlorisArgs>("slowloris", args).unwrap(),
            Path::new("/w"),
        )
    }

    #[test]
    fn the_defaults_are_the_issue_setup() {
        let s = resolve(&[]);
        assert_eq!((s.slow, s.workers, s.connections), (1000, 2, 50));
        assert_eq!((s.seconds, s.rounds), (10, 3));
        assert_eq!(s.out, Path::new("/w/bench/results/slowloris.md"));
        assert_eq!((s.kinds, s.memory_only), (Kind::ALL.to_vec(), false));
    }

    #[test]
    fn kinds_may_be_chosen_and_keep_their_order() {
        let s = resolve(&[
            "--kinds",
            "slow-reader,slow-head,slow-reader",
            "--memory-only",
        ]);
        assert_eq!(s.kinds, vec![Kind::SlowHead, Kind::SlowReader]);
        assert!(s.memory_only);
        let cli = parse_args::<SlowlorisArgs>("slowloris", &["--kinds", "slow-tail"]);
        assert!(cli.is_err());
    }

    #[test]
    fn short_mode_is_brief_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!((s.slow, s.seconds, s.rounds), (200, 2, 1));
        assert!(s.out.starts_with("/w/target"));
        let s = resolve(&["--short", "--slow", "400", "--out", "x.md"]);
        assert_eq!((s.slow, s.out), (400, PathBuf::from("x.md")));
    }

    #[test]
    fn herdsman_needs_a_descriptor_per_connection_and_per_held_server_connection() {
        assert_eq!(resolve(&[]).herdsman_descriptors(), 1000 + 750 + 100 + 100);
        let heads = resolve(&["--kinds", "slow-head"]);
        assert_eq!(heads.herdsman_descriptors(), 1000 + 100 + 100);
    }
}
