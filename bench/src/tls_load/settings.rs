//! The options of `tls-load` and what they resolve to: the full run by default (six paired rounds
//! of 20 s runs, 1,000 silent connections, herdsman's own 10 s `tls_handshake`), or with `--short`
//! one round of 3 s runs with `tls_handshake` lowered to 2 s, so that herdsman times the silent
//! connections out, and the holder opens them again, within the run; written under target/ for
//! the test. An option given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use crate::kit::settings;
use crate::kit::wrk::Load;

/// Options of `tls-load`.
#[derive(Debug, clap::Args)]
pub struct TlsLoadArgs {
    /// herdsman's worker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// Seconds of each wrk run. Default: 20 (two of herdsman's 10 s handshake timeouts); with
    /// --short, 3.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// Paired rounds of each measurement; each runs once without and once with its disturbance, in
    /// an order that turns. Default: 6 (the fewest for which the median's 95% interval is
    /// narrower than the rounds' whole range); with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=200))]
    pub rounds: Option<u32>,
    /// TLS connections that open and never send a ClientHello, held (and opened again whenever
    /// herdsman closes one) during the silent runs "with".
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=12_000))]
    pub silent: u32,
    /// wrk's keep-alive TLS connections beside the silent ones.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: u32,
    /// wrk's established keep-alive TLS connections beside the handshake storm.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub storm_connections: u32,
    /// The storm's clients (one holder process): each makes a full TLS handshake on a new
    /// connection, closes it and makes the next, for the whole run.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub storm_clients: u32,
    /// herdsman's `[timeouts] tls_handshake`, in seconds. Default: herdsman's own (10 s, not
    /// written in its configuration); with --short, 2.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub tls_handshake: Option<u32>,
    /// The herdsman binary to measure, instead of the release build in the target directory
    /// (CARGO_TARGET_DIR when set, else the workspace's target/), which is built first unless
    /// --no-build.
    #[arg(long, value_name = "PATH")]
    pub herdsman: Option<PathBuf>,
    /// One round of 3 s runs, `tls_handshake` lowered to 2 s, written by default under target/
    /// rather than over bench/results/tls-load.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// herdsman's own `tls_handshake` when the configuration leaves it out.
pub const HERDSMAN_TLS_HANDSHAKE_SECONDS: u32 = 10;

/// One set of defaults.
struct Defaults {
    seconds: u32,
    rounds: u32,
    /// None: herdsman's default.
    tls_handshake: Option<u32>,
    /// Seconds of keep-alive load before the first round.
    warm_up: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// The issue's setup: about ten minutes (six rounds of 54 s of silent runs and 42 s of storm runs).
const FULL: Defaults = Defaults {
    seconds: 20,
    rounds: 6,
    tls_handshake: None,
    warm_up: 2,
    out: "bench/results/tls-load.md",
};

/// Every figure produced, herdsman's timeouts and the holder's re-opening included, in about half
/// a minute.
const SHORT: Defaults = Defaults {
    seconds: 3,
    rounds: 1,
    tls_handshake: Some(2),
    warm_up: 0,
    out: "target/herdsman-bench/tls-load-short.md",
};

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub workers: u32,
    pub seconds: u32,
    pub rounds: u32,
    pub silent: u32,
    pub connections: u32,
    pub storm_connections: u32,
    pub storm_clients: u32,
    /// The `tls_handshake` written into herdsman's configuration; None leaves herdsman's default.
    pub tls_handshake: Option<u32>,
    pub warm_up: u32,
    pub short: bool,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &TlsLoadArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        Settings {
            workers: args.workers,
            seconds: args.seconds.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            silent: args.silent,
            connections: args.connections,
            storm_connections: args.storm_connections,
            storm_clients: args.storm_clients,
            tls_handshake: args.tls_handshake.or(defaults.tls_handshake),
            warm_up: defaults.warm_up,
            short: args.short,
            out: args.output.results_file(workspace, defaults.out),
        }
    }

    /// wrk's load with `connections` for a run's seconds.
    pub fn load(&self, connections: u32) -> Load {
        Load {
            connections,
            seconds: self.seconds,
        }
    }

    /// The handshake timeout herdsman runs with, in seconds.
    pub fn handshake_timeout(&self) -> u32 {
        self.tls_handshake.unwrap_or(HERDSMAN_TLS_HANDSHAKE_SECONDS)
    }

    /// Descriptors herdsman needs at the peak: the silent connections and wrk's beside them, or
    /// the storm's and wrk's; a backend connection per wrk connection; and spares.
    pub fn herdsman_descriptors(&self) -> u64 {
        let silent = u64::from(self.silent) + 2 * u64::from(self.connections);
        let storm = u64::from(self.storm_clients) + 2 * u64::from(self.storm_connections);
        silent.max(storm) + 100
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(
            &parse_args::<TlsLoadArgs>("tls-load", args).unwrap(),
            Path::new("/w"),
        )
    }

    #[test]
    fn the_defaults_are_the_issue_setup() {
        let s = resolve(&[]);
        assert_eq!((s.workers, s.silent, s.connections), (2, 1000, 50));
        assert_eq!((s.storm_connections, s.storm_clients), (20, 50));
        assert_eq!((s.seconds, s.rounds, s.tls_handshake), (20, 6, None));
        assert_eq!(s.handshake_timeout(), 10);
        assert_eq!(s.out, Path::new("/w/bench/results/tls-load.md"));
        assert_eq!(s.herdsman_descriptors(), 1000 + 100 + 100);
    }

    #[test]
    fn short_mode_is_brief_lowers_the_timeout_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!((s.seconds, s.rounds, s.warm_up), (3, 1, 0));
        assert_eq!(s.handshake_timeout(), 2);
        assert!(s.short && s.out.starts_with("/w/target"));
        let s = resolve(&["--short", "--tls-handshake", "5", "--out", "x.md"]);
        assert_eq!((s.tls_handshake, s.out), (Some(5), PathBuf::from("x.md")));
    }
}
