//! The options of `soak` and what they resolve to: the full soak by default (240 s, an event every
//! 7 s), or with `--short` 30 s with an event every 3 s, written under target/ for the tests. An
//! option given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use super::chaos::Kind;
use super::plan::{Idle, HERDSMAN_IDLE};
use crate::kit::settings;

/// Options of `soak`.
#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// Seconds of load, chaos included. Default: 240; with --short, 27.
    #[arg(long, value_parser = clap::value_parser!(u32).range(5..=3600))]
    pub duration: Option<u32>,
    /// Seconds between two chaos events. Default: 7; with --short, 3.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub every: Option<u32>,
    /// The proxy's worker threads (herdsman's `workers`, HAProxy's `nbthread`).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// Keep-alive client connections, each sending `GET /` in a loop.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: u32,
    /// The chaos events, comma-separated, taken in turn: graceful-restart, drain, reload,
    /// rotate-log, kill, upgrade, maint, kill-all. Default: all but kill-all, in that order.
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    pub chaos: Vec<Kind>,
    /// Also soak HAProxy through the same servers and chaos, after herdsman.
    #[arg(long, value_enum)]
    pub peer: Option<Peer>,
    /// herdsman's `retry_budget_floor` (retries a second allowed whatever the traffic). Default:
    /// herdsman's own (10); 0 makes the budget exactly 20% of the requests.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub retry_budget_floor: Option<u32>,
    /// 27 s with an event every 3 s (each kind at least once), short idle timeouts so that
    /// descriptors return to their baseline within seconds; written by default under target/
    /// rather than over bench/results/soak.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
    /// Keep the scratch directory (configurations, the proxies' and servers' logs, access logs)
    /// and print where it is.
    #[arg(long)]
    pub keep_files: bool,
}

/// A proxy soaked beside herdsman.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Peer {
    Haproxy,
}

pub fn parse_kind(label: &str) -> Result<Kind, String> {
    Kind::from_label(label).ok_or_else(|| {
        let known: Vec<&str> = Kind::all().map(Kind::label).collect();
        format!("no chaos event {label:?}; known: {}", known.join(", "))
    })
}

/// One set of defaults.
struct Defaults {
    seconds: u32,
    every: u32,
    /// herdsman's `client_idle` and `backend_idle`; None leaves its defaults (60 s and 4 s).
    idle: Option<Idle>,
    /// Relative to the workspace.
    out: &'static str,
}

/// The issue's soak: four minutes, an event every 7 s, every kind four or five times.
const FULL: Defaults = Defaults {
    seconds: 240,
    every: 7,
    idle: None,
    out: "bench/results/soak.md",
};

/// The same chaos in 27 s: an event every 3 s, so that each of the seven kinds comes once (and
/// the first again).
const SHORT: Defaults = Defaults {
    seconds: 27,
    every: 3,
    idle: Some(Idle {
        client_seconds: 3,
        backend_seconds: 1,
    }),
    out: "target/herdsman-bench/soak-short.md",
};

/// What a run does, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub seconds: u32,
    pub every: u32,
    pub workers: u32,
    pub connections: u32,
    /// Never empty; taken in turn.
    pub chaos: Vec<Kind>,
    pub peer: Option<Peer>,
    pub retry_budget_floor: Option<u32>,
    /// Idle timeouts written into the configurations; None: the proxies' defaults.
    pub idle: Option<Idle>,
    pub short: bool,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &SoakArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let mut chaos: Vec<Kind> = Vec::new();
        for kind in &args.chaos {
            if !chaos.contains(kind) {
                chaos.push(*kind);
            }
        }
        if chaos.is_empty() {
            chaos = Kind::SOAK.to_vec();
        }
        Settings {
            seconds: args.duration.unwrap_or(defaults.seconds),
            every: args.every.unwrap_or(defaults.every),
            workers: args.workers,
            connections: args.connections,
            chaos,
            peer: args.peer,
            retry_budget_floor: args.retry_budget_floor,
            idle: defaults.idle,
            short: args.short,
            out: args.output.results_file(workspace, defaults.out),
        }
    }

    /// The idle timeouts in force: those written, or herdsman's defaults.
    pub fn idle_in_force(&self) -> Idle {
        self.idle.unwrap_or(HERDSMAN_IDLE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(
            &parse_args::<SoakArgs>("soak", args).unwrap(),
            Path::new("/w"),
        )
    }

    #[test]
    fn the_defaults_are_the_issue_soak() {
        let s = resolve(&[]);
        assert_eq!(
            (s.seconds, s.every, s.workers, s.connections),
            (240, 7, 2, 200)
        );
        assert_eq!(s.chaos, Kind::SOAK.to_vec());
        assert_eq!((s.peer, s.idle, s.retry_budget_floor), (None, None, None));
        assert_eq!(s.out, Path::new("/w/bench/results/soak.md"));
        assert_eq!(s.idle_in_force(), HERDSMAN_IDLE);
    }

    #[test]
    fn short_mode_is_brief_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!((s.seconds, s.every), (27, 3));
        assert!(s.idle.is_some());
        assert!(s.out.starts_with("/w/target"));
        let s = resolve(&[
            "--short",
            "--chaos",
            "kill,kill-all,kill",
            "--duration",
            "12",
            "--retry-budget-floor",
            "0",
            "--peer",
            "haproxy",
        ]);
        assert_eq!(s.chaos, vec![Kind::Kill, Kind::KillAll]);
        assert_eq!((s.seconds, s.retry_budget_floor), (12, Some(0)));
        assert_eq!(s.peer, Some(Peer::Haproxy));
        assert!(parse_args::<SoakArgs>("soak", &["--chaos", "meteor"]).is_err());
    }
}
