//! The options of `rules` and what they resolve to: issue 42's three parts (header rules and a
//! limit against the peers, compression, a limit shared through Redis), 1 and 2 workers, 50
//! connections, five interleaved rounds of 10 s by default; with `--short` one worker, one round
//! of 1 s, written under target/ for the test. An option given explicitly wins over either set
//! of defaults.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::kit::settings;

/// A part of the benchmark, run on its own proxies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Part {
    /// Ten header rules and a rate limit: herdsman against HAProxy, nginx and Caddy, and
    /// against herdsman without rules.
    Headers,
    /// A ~600 KiB JSON answer compressed: herdsman's gzip, brotli and zstd at their default
    /// levels against nginx's gzip (levels 1 and 5) and Caddy's `encode gzip zstd`.
    Compression,
    /// A rate limit counted in Redis against the local limit alone, and Redis 1 ms away.
    Redis,
}

impl Part {
    /// As the results' headings name it.
    pub fn title(self) -> &'static str {
        match self {
            Part::Headers => "Header rules and a rate limit",
            Part::Compression => "Compression",
            Part::Redis => "A rate limit shared through Redis",
        }
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Headers => "headers",
            Part::Compression => "compression",
            Part::Redis => "redis",
        })
    }
}

/// Options of `rules`.
#[derive(Debug, clap::Args)]
pub struct RulesArgs {
    /// The parts to run, comma-separated. Default: all three.
    #[arg(long, value_delimiter = ',', value_name = "PART[,PART…]",
          default_values_t = [Part::Headers, Part::Compression, Part::Redis])]
    pub parts: Vec<Part>,
    /// Worker counts (threads or processes of each proxy), comma-separated: every proxy is
    /// started afresh with each. Default: 1,2; with --short, 1.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Option<Vec<u32>>,
    /// wrk's keep-alive connections. Default: 50.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: Option<u32>,
    /// Rounds; in each, every row runs once per case, in an order that turns from round to
    /// round. Default: 5; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: Option<u32>,
    /// Seconds of wrk per run ("10" or "10s"). Default: 10; with --short, 1.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub duration: Option<u32>,
    /// The herdsman binary, as PATH. Default: this workspace's target/release/herdsman, built
    /// first unless --no-build.
    #[arg(long = "herdsman-bin", value_name = "PATH")]
    pub herdsman_bin: Option<String>,
    /// One worker, one round of 1 s per run: enough to prove the benchmark runs end to end (in
    /// under a minute), written by default under target/ rather than over
    /// bench/results/rules.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    workers: &'static [u32],
    rounds: u32,
    duration: u32,
    /// Relative to the workspace.
    out: &'static str,
}

const FULL: Defaults = Defaults {
    workers: &[1, 2],
    rounds: 5,
    duration: 10,
    out: "bench/results/rules.md",
};

const SHORT: Defaults = Defaults {
    workers: &[1],
    rounds: 1,
    duration: 1,
    out: "target/herdsman-bench/rules-short.md",
};

/// wrk's connections unless told otherwise: BENCHMARKING.md's load.
const CONNECTIONS: u32 = 50;

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Without repeats, in the order given; never empty.
    pub parts: Vec<Part>,
    /// Without repeats, in the order given; never empty.
    pub workers: Vec<u32>,
    pub connections: u32,
    pub rounds: u32,
    pub duration: u32,
    pub short: bool,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &RulesArgs, workspace: &Path) -> anyhow::Result<Settings> {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let settings = Settings {
            parts: settings::without_repeats(&args.parts, &[Part::Headers]),
            workers: settings::without_repeats(
                args.workers.as_deref().unwrap_or(defaults.workers),
                defaults.workers,
            ),
            connections: args.connections.unwrap_or(CONNECTIONS),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            duration: args.duration.unwrap_or(defaults.duration),
            short: args.short,
            out: args.output.results_file(workspace, defaults.out),
        };
        if settings.duration == 0 {
            bail!("--duration must be at least 1 second");
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RulesArgs,
    }

    fn resolve(line: &[&str]) -> Settings {
        let cli = Cli::parse_from([&["rules"], line].concat());
        Settings::resolve(&cli.args, Path::new("/w")).unwrap()
    }

    #[test]
    fn short_runs_one_worker_once_and_options_win() {
        let full = resolve(&[]);
        assert_eq!(full.parts, [Part::Headers, Part::Compression, Part::Redis]);
        assert_eq!(
            (full.workers.as_slice(), full.rounds, full.duration),
            (&[1, 2][..], 5, 10)
        );
        assert_eq!(full.out, Path::new("/w/bench/results/rules.md"));
        let short = resolve(&["--short", "--parts", "redis,redis"]);
        assert_eq!(short.parts, [Part::Redis]);
        assert_eq!(
            (short.workers.as_slice(), short.rounds, short.duration),
            (&[1][..], 1, 1)
        );
        assert_eq!(resolve(&["--short", "--rounds", "3"]).rounds, 3);
    }
}
