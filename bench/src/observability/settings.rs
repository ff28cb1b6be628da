//! The options of `observability` and what they resolve to: the full run by default (five rounds
//! of 10 s runs per worker count), or with `--short` one round of 2 s runs, written under target/
//! for the test. An option given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use super::condition::Condition;
use crate::kit::settings;

/// Options of `observability`.
#[derive(Debug, clap::Args)]
pub struct ObservabilityArgs {
    /// herdsman's worker threads, comma-separated: each count is measured on its own, with its
    /// own verdict.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]", default_values_t = [1, 2],
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Vec<u32>,
    /// wrk's connections.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: u32,
    /// Seconds per wrk run. Default: 10; with --short, 2.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// Rounds; each has one run per condition, per worker count. Default: 5; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: Option<u32>,
    /// Also measure a third condition: the access log in JSON, with the same scraping.
    #[arg(long)]
    pub json: bool,
    /// One round of 2 s runs, written by default under target/ rather than over
    /// bench/results/observability.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    seconds: u32,
    rounds: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// Five rounds of 10 s runs: with two conditions and two worker counts, about four minutes.
const FULL: Defaults = Defaults {
    seconds: 10,
    rounds: 5,
    out: "bench/results/observability.md",
};

/// Enough to prove it still runs end to end, in about 20 s after the build.
const SHORT: Defaults = Defaults {
    seconds: 2,
    rounds: 1,
    out: "target/herdsman-bench/observability-short.md",
};

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Worker counts in the order given, without repeats; never empty.
    pub workers: Vec<u32>,
    pub connections: u32,
    pub seconds: u32,
    pub rounds: u32,
    /// Off and on, and json when asked for: in this order in odd rounds, reversed in even ones.
    pub conditions: Vec<Condition>,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &ObservabilityArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let workers = settings::without_repeats(&args.workers, &[1]);
        let mut conditions = vec![Condition::Off, Condition::On];
        if args.json {
            conditions.push(Condition::Json);
        }
        Settings {
            workers,
            connections: args.connections,
            seconds: args.seconds.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            conditions,
            out: args.output.results_file(workspace, defaults.out),
        }
    }

    /// The conditions of `round` (from 1), in the order they run: as listed in odd rounds,
    /// reversed in even ones, so that a drift over the whole run falls on every condition alike.
    pub fn order(&self, round: u32) -> Vec<Condition> {
        let mut order = self.conditions.clone();
        if round.is_multiple_of(2) {
            order.reverse();
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(
            &parse_args::<ObservabilityArgs>("observability", args).unwrap(),
            Path::new("/w"),
        )
    }

    #[test]
    fn the_defaults_are_the_issue_setup() {
        let s = resolve(&[]);
        assert_eq!((s.workers, s.connections), (vec![1, 2], 50));
        assert_eq!((s.seconds, s.rounds), (10, 5));
        assert_eq!(s.conditions, vec![Condition::Off, Condition::On]);
        assert_eq!(s.out, Path::new("/w/bench/results/observability.md"));
    }

    #[test]
    fn short_mode_is_brief_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!((s.seconds, s.rounds), (2, 1));
        assert!(s.out.starts_with("/w/target"));
        let s = resolve(&[
            "--short",
            "--seconds",
            "3",
            "--out",
            "x.md",
            "--workers",
            "2,2,1",
        ]);
        assert_eq!((s.seconds, s.out), (3, PathBuf::from("x.md")));
        assert_eq!(s.workers, vec![2, 1]);
    }

    #[test]
    fn the_order_alternates_so_drift_falls_on_every_condition() {
        let s = resolve(&["--json"]);
        use Condition::*;
        assert_eq!(s.order(1), vec![Off, On, Json]);
        assert_eq!(s.order(2), vec![Json, On, Off]);
        assert_eq!(s.order(3), vec![Off, On, Json]);
        assert_eq!(resolve(&[]).order(2), vec![On, Off]);
    }
}
