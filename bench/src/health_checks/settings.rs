//! The options of `health-checks` and what they resolve to: the full run by default (10,000
//! servers, two rounds of 20 s per scenario), or with `--short` 300 servers for 3 s, written under
//! target/ for the test. An option given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::kit::settings;

/// What the checks are and what they find in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// HTTP checks, every one passing.
    Steady,
    /// HTTP checks; some servers' fail at a time, another set every rotation: servers go down
    /// and come back.
    Changing,
    /// TCP checks (a connection that opens passes), every one passing: herdsman closes each
    /// connection first.
    Tcp,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::Steady, Scenario::Changing, Scenario::Tcp];

    /// `[pool.health] check`.
    pub fn check(self) -> &'static str {
        match self {
            Scenario::Steady | Scenario::Changing => "http",
            Scenario::Tcp => "tcp",
        }
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scenario::Steady => "steady",
            Scenario::Changing => "changing",
            Scenario::Tcp => "tcp",
        })
    }
}

/// Options of `health-checks`.
#[derive(Debug, clap::Args)]
pub struct HealthChecksArgs {
    /// Servers in the checked pool, each at a loopback address of its own (127.0.x.y) on one port.
    /// Default: 10,000; with --short, 300.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=60_000))]
    pub servers: Option<u32>,
    /// Seconds measured per run, after a warm-up of two intervals. Default: 20; with --short, 3.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// Rounds; each has a run of each scenario. Default: 2; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: Option<u32>,
    /// `[pool.health] interval`, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(10..=60_000))]
    pub interval_ms: u32,
    /// The scenarios, comma-separated, each run once per round.
    #[arg(long, value_delimiter = ',', value_name = "S[,S…]", default_values_t = Scenario::ALL)]
    pub scenarios: Vec<Scenario>,
    /// In the `changing` scenario, the share of the servers (percent) whose checks fail at a time;
    /// another set of them every five intervals.
    #[arg(long, default_value_t = 1.0)]
    pub failing_percent: f64,
    /// The herdsman binary to measure, instead of the workspace's release build (to compare two
    /// builds).
    #[arg(long, value_name = "PATH")]
    pub herdsman: Option<PathBuf>,
    /// 300 servers for 3 s, one round, written by default under target/ rather than over
    /// bench/results/health-checks.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    servers: u32,
    seconds: u32,
    rounds: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// The issue's figure: 10,000 servers at a 1 s interval; two rounds of both scenarios take about
/// two minutes.
const FULL: Defaults = Defaults {
    servers: 10_000,
    seconds: 20,
    rounds: 2,
    out: "bench/results/health-checks.md",
};

/// Enough to prove it runs end to end and that every server is checked, in about 15 s.
const SHORT: Defaults = Defaults {
    servers: 300,
    seconds: 3,
    rounds: 1,
    out: "target/herdsman-bench/health-checks-short.md",
};

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub servers: u32,
    pub seconds: u32,
    pub rounds: u32,
    pub interval: Duration,
    /// In the order given, without repeats; never empty.
    pub scenarios: Vec<Scenario>,
    /// Servers failing at a time in the `changing` scenario (at least one).
    pub failing: u32,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &HealthChecksArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let servers = args.servers.unwrap_or(defaults.servers);
        let failing = (f64::from(servers) * args.failing_percent / 100.0).round() as u32;
        let scenarios = settings::without_repeats(&args.scenarios, &Scenario::ALL);
        Settings {
            servers,
            seconds: args.seconds.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            interval: Duration::from_millis(u64::from(args.interval_ms)),
            scenarios,
            failing: failing.clamp(1, servers),
            out: args.output.results_file(workspace, defaults.out),
        }
    }

    /// How often the failing set changes in the `changing` scenario.
    pub fn rotation(&self) -> Duration {
        self.interval * 5
    }

    /// The wait between herdsman's start and a run's measurement: every server has been checked
    /// once after one interval (each server's first check comes within it), and the second
    /// interval lets the start settle.
    pub fn warm_up(&self) -> Duration {
        self.interval * 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(
            &parse_args::<HealthChecksArgs>("health-checks", args).unwrap(),
            Path::new("/w"),
        )
    }

    #[test]
    fn the_defaults_are_the_issue_setup() {
        let s = resolve(&[]);
        assert_eq!((s.servers, s.seconds, s.rounds), (10_000, 20, 2));
        assert_eq!(s.interval, Duration::from_secs(1));
        assert_eq!(s.failing, 100);
        assert_eq!(s.scenarios, Scenario::ALL);
        assert_eq!(s.rotation(), Duration::from_secs(5));
        assert_eq!(s.out, Path::new("/w/bench/results/health-checks.md"));
    }

    #[test]
    fn short_mode_is_small_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!((s.servers, s.seconds, s.rounds), (300, 3, 1));
        assert_eq!(s.failing, 3);
        assert!(s.out.starts_with("/w/target"));
        let s = resolve(&["--short", "--servers", "20", "--failing-percent", "0.1"]);
        assert_eq!((s.servers, s.failing), (20, 1));
        let s = resolve(&["--scenarios", "tcp,steady,tcp"]);
        assert_eq!(s.scenarios, [Scenario::Tcp, Scenario::Steady]);
    }
}
