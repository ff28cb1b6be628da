//! The options of `h2-attacks` and what they resolve to: the run by default (50
//! legitimate clients, a 10 s baseline, then each attack for 10 s, three rounds of that, then
//! each attack alone for 5 s), or with `--short` the same shape scaled down to fit a test (3 s
//! each, one round, 10 clients, and a slow-reader window of 1 s so a
//! stream never read is cut within the run), written under target/ for the test. An option given
//! explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use super::attacks::Attack;
use crate::kit::settings::{self, without_repeats};

/// Options of `h2-attacks`.
#[derive(Debug, clap::Args)]
pub struct H2AttacksArgs {
    /// The attacks to run, in turn. Default: all.
    #[arg(long, value_delimiter = ',', value_enum)]
    pub attacks: Vec<Attack>,
    /// Legitimate HTTP/2 clients (h2load connections, one request in flight on each). Default
    /// 50; with --short, 10.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub clients: Option<u32>,
    /// Seconds of the baseline and of each attack, a round. Default 10; with --short, 3.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// Rounds of the baseline and every attack. Default 3; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: Option<u32>,
    /// Connections an attack may open a second at most (each opened as soon as the last ended,
    /// but no sooner than this pace allows). Default 100.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub reconnects_per_second: Option<u32>,
    /// The herdsman binary to measure, instead of the release build in the target directory
    /// (built first unless --no-build).
    #[arg(long, value_name = "PATH")]
    pub herdsman: Option<PathBuf>,
    /// The scaled-down run, written by default under target/ rather than over
    /// bench/results/h2-attacks.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// The attacks' pace: a hundred connections a second from one attacker, one at a time. Faster, the
/// connections themselves are the attack (a bare connect-and-close loop at 11,000 a second cut
/// the legitimate clients to 40% of their requests/s here), whatever the proxy does with them.
const RECONNECTS_PER_SECOND: u32 = 100;

struct Defaults {
    clients: u32,
    seconds: u32,
    rounds: u32,
    /// Seconds of each attack alone, for its cost to herdsman.
    alone_seconds: u32,
    /// herdsman's `[buffering] response_min_rate_window`, when not its default.
    slow_reader_window: Option<&'static str>,
    out: &'static str,
}

const FULL: Defaults = Defaults {
    clients: 50,
    seconds: 10,
    rounds: 3,
    alone_seconds: 5,
    slow_reader_window: None,
    out: "bench/results/h2-attacks.md",
};

const SHORT: Defaults = Defaults {
    clients: 10,
    seconds: 3,
    rounds: 1,
    alone_seconds: 1,
    slow_reader_window: Some("1s"),
    out: "target/herdsman-bench/h2-attacks-short.md",
};

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub attacks: Vec<Attack>,
    pub clients: u32,
    pub seconds: u32,
    pub rounds: u32,
    pub alone_seconds: u32,
    pub reconnects_per_second: u32,
    pub slow_reader_window: Option<&'static str>,
    pub short: bool,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &H2AttacksArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let mut attacks = without_repeats(&args.attacks, &Attack::ALL);
        attacks.sort();
        Settings {
            attacks,
            clients: args.clients.unwrap_or(defaults.clients),
            seconds: args.seconds.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            alone_seconds: defaults.alone_seconds,
            reconnects_per_second: args.reconnects_per_second.unwrap_or(RECONNECTS_PER_SECOND),
            slow_reader_window: defaults.slow_reader_window,
            short: args.short,
            out: args.output.results_file(workspace, defaults.out),
        }
    }
}
