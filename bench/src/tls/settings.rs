//! The options of `tls` and what they resolve to: the full run by default (1 and 2 workers, five
//! interleaved rounds of 5 s per figure, 10,000 idle TLS connections), or with `--short` one
//! worker, one round of 1 s and 1,000 idle connections, written under target/ for the test. An
//! option given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use crate::kit::proxies::ProxyKind;
use crate::kit::settings;

/// The most idle connections one holder process opens (one descriptor each, under the 20,000 a
/// process may open here), and so the most the idle figure asks for: the proxy holds them all
/// too, beside its backend connections.
pub const MAX_IDLE: u32 = 15_000;

/// Options of `tls`.
#[derive(Debug, clap::Args)]
pub struct TlsArgs {
    /// Worker counts (threads or processes of each proxy), comma-separated. Default: 1,2; with
    /// --short, 1.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Vec<u32>,
    /// The proxies, comma-separated, each measured in turn for every figure of every round.
    #[arg(long, value_delimiter = ',', value_name = "P[,P…]",
          default_values_t = [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx])]
    pub proxies: Vec<ProxyKind>,
    /// Seconds each figure runs against each proxy per round. Default: 5; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// Rounds; each runs every figure against every proxy once, in an order that turns, then
    /// holds the idle connections once per proxy. Default: 5; with --short, 1. At least 6 are
    /// needed for the median's 95% interval to be narrower than the rounds' whole range.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=200))]
    pub rounds: Option<u32>,
    /// wrk's connections for keep-alive requests over TLS.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: u32,
    /// wrk's connections for the 1 MiB answers (`/big`) over TLS.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub big_connections: u32,
    /// h2load's clients per batch for the full handshakes: each connects, makes one request and
    /// closes, all at once; batches follow one another for the run's seconds.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub batch: u32,
    /// `openssl s_time -reuse` processes at once for the resumed handshakes (each makes one
    /// connection after another, every one resumed from the session before).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub resuming_clients: u32,
    /// Idle TLS connections held open (one holder process) for the memory figure. Default:
    /// 10,000; with --short, 1,000.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_IDLE as i64))]
    pub idle: Option<u32>,
    /// The herdsman binary to measure, instead of the release build in the target directory
    /// (CARGO_TARGET_DIR when set, else the workspace's target/), which is built first unless
    /// --no-build.
    #[arg(long, value_name = "PATH")]
    pub herdsman: Option<PathBuf>,
    /// One worker, one round of 1 s, 1,000 idle connections, written by default under target/
    /// rather than over bench/results/tls.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    workers: &'static [u32],
    seconds: u32,
    rounds: u32,
    idle: u32,
    /// Seconds of keep-alive load through each proxy before the first round.
    warm_up: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// The issue's figures: about 25 minutes with five rounds.
const FULL: Defaults = Defaults {
    workers: &[1, 2],
    seconds: 5,
    rounds: 5,
    idle: 10_000,
    warm_up: 2,
    out: "bench/results/tls.md",
};

/// Enough to prove every figure is produced, in about half a minute.
const SHORT: Defaults = Defaults {
    workers: &[1],
    seconds: 1,
    rounds: 1,
    idle: 1_000,
    warm_up: 0,
    out: "target/herdsman-bench/tls-short.md",
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
    pub big_connections: u32,
    pub batch: u32,
    pub resuming_clients: u32,
    pub idle: u32,
    pub warm_up: u32,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &TlsArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        Settings {
            workers: settings::without_repeats(&args.workers, defaults.workers),
            proxies: settings::without_repeats(&args.proxies, &[ProxyKind::Herdsman]),
            seconds: args.seconds.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            connections: args.connections,
            big_connections: args.big_connections,
            batch: args.batch,
            resuming_clients: args.resuming_clients,
            idle: args.idle.unwrap_or(defaults.idle),
            warm_up: defaults.warm_up,
            out: args.output.results_file(workspace, defaults.out),
        }
    }

    /// The most client connections any run opens at once: the idle ones and, beside them, the
    /// largest active load. HAProxy's `maxconn` and nginx's `worker_connections` are sized from it.
    pub fn client_connections(&self) -> u32 {
        self.idle
            + [
                self.connections,
                self.big_connections,
                self.batch,
                self.resuming_clients,
            ]
            .into_iter()
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(
            &parse_args::<TlsArgs>("tls", args).unwrap(),
            Path::new("/w"),
        )
    }

    #[test]
    fn the_defaults_are_the_issue_setup() {
        let s = resolve(&[]);
        assert_eq!(s.workers, [1, 2]);
        assert_eq!(s.proxies.len(), 3);
        assert_eq!((s.seconds, s.rounds, s.idle), (5, 5, 10_000));
        assert_eq!(
            (
                s.connections,
                s.big_connections,
                s.batch,
                s.resuming_clients
            ),
            (50, 10, 100, 4)
        );
        assert_eq!(s.client_connections(), 10_100);
        assert_eq!(s.out, Path::new("/w/bench/results/tls.md"));
    }

    #[test]
    fn short_mode_is_small_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!(s.workers, [1]);
        assert_eq!((s.seconds, s.rounds, s.idle, s.warm_up), (1, 1, 1_000, 0));
        assert!(s.out.starts_with("/w/target"));
        let s = resolve(&["--short", "--workers", "2,1,2", "--idle", "50"]);
        assert_eq!(s.workers, [2, 1]);
        assert_eq!(s.idle, 50);
    }

    #[test]
    fn more_idle_connections_than_a_holder_opens_are_refused() {
        assert!(parse_args::<TlsArgs>("tls", &["--idle", "15001"]).is_err());
    }
}
