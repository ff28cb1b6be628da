//! The options of `gray` and what they resolve to: issue 39's matrix by default (50 and 200
//! connections, 1 and 2 workers, three rounds of 2 s runs, the recovering case 2 s sick then 10 s
//! recovered at 50 connections; about 25 minutes), or with `--short` one worker, 50 connections
//! and one round of 1 s runs (the recovering case 1 s sick, 1 s recovered), written under target/
//! for the test. An option given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::scenario::{Scenario, RUN_ORDER};
use crate::kit::proxies::{Plan, SPARE_DESCRIPTORS};
use crate::kit::settings;

/// Options of `gray`.
#[derive(Debug, clap::Args)]
pub struct GrayArgs {
    /// herdsman's balancing methods, comma-separated, each a row of its own (its pool's `balance`);
    /// issue 39's targets are judged for the first, against HAProxy's leastconn, herdsman's
    /// round-robin and itself.
    #[arg(long, value_delimiter = ',', value_name = "METHOD[,METHOD…]",
          default_value = "peak-ewma,round-robin,least-conn", value_parser = parse_method)]
    pub herdsman_methods: Vec<String>,
    /// wrk's keep-alive connections, comma-separated; each is a case of its own. Default: 50,200;
    /// with --short, 50.
    #[arg(long, value_delimiter = ',', value_name = "C[,C…]",
          value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub connections: Option<Vec<u32>>,
    /// Worker counts (herdsman's `workers`, HAProxy's `nbthread`, nginx's `worker_processes`),
    /// comma-separated: every proxy is started afresh with each. Default: 1,2; with --short, 1.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Option<Vec<u32>>,
    /// Rounds; in each, every proxy runs once per case, in an order that turns from round to
    /// round. Default: 3; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: Option<u32>,
    /// Seconds of wrk per run ("2" or "2s"), but for the recovering case. Default: 2; with
    /// --short, 1.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub seconds: Option<u32>,
    /// Seconds the recovering case's sick server answers 200 ms late before it recovers.
    /// Default: 2; with --short, 1.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub sick_seconds: Option<u32>,
    /// Seconds the recovering case runs on after its server recovered: at least the 10 s window
    /// for the recovery target to be judged. Default: 10; with --short, 1.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub recovered_seconds: Option<u32>,
    /// The connection counts the recovering case runs at (of --connections). Default: the first.
    #[arg(long, value_delimiter = ',', value_name = "C[,C…]",
          value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub recovering_connections: Option<Vec<u32>>,
    /// One worker, 50 connections, one round of 1 s runs: enough to prove the benchmark runs end
    /// to end, written by default under target/ rather than over bench/results/gray.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// A balancing method's name as herdsman's config writes it: lowercase letters, digits and
/// dashes (checked here so that it goes into the config as it is).
fn parse_method(text: &str) -> Result<String, String> {
    let fits = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if !text.is_empty() && text.chars().all(fits) {
        Ok(text.to_string())
    } else {
        Err(format!(
            "expected a balancing method such as peak-ewma, round-robin or least-conn, got \
             {text:?}"
        ))
    }
}

/// One set of defaults.
struct Defaults {
    connections: &'static [u32],
    workers: &'static [u32],
    rounds: u32,
    seconds: u32,
    sick_seconds: u32,
    recovered_seconds: u32,
    /// Seconds of unrecorded load each proxy takes once started, all servers healthy.
    warm_up_seconds: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// Issue 39's matrix in about 25 minutes on a 2-core machine: 7 rows × 2 worker counts × 2
/// connection counts × 3 rounds are 84 turns of 5 cases of 2 s, and half as many of the
/// recovering case's 12 s (at 50 connections only), with their overheads and warm-ups. 5 s
/// runs, or the recovering case at 200 connections too, would take 40 minutes or more.
const FULL: Defaults = Defaults {
    connections: &[50, 200],
    workers: &[1, 2],
    rounds: 3,
    seconds: 2,
    sick_seconds: 2,
    recovered_seconds: 10,
    warm_up_seconds: 1,
    out: "bench/results/gray.md",
};

/// Every case of one worker count and connection count once, briefly: about a minute.
const SHORT: Defaults = Defaults {
    connections: &[50],
    workers: &[1],
    rounds: 1,
    seconds: 1,
    sick_seconds: 1,
    recovered_seconds: 1,
    warm_up_seconds: 0,
    out: "target/herdsman-bench/gray-short.md",
};

/// Planned seconds a run costs beyond its wrk duration: wrk's start, /proc read twice, the wait
/// for the servers' counts.
pub const RUN_OVERHEAD_SECONDS: f64 = 0.25;

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Without repeats, in the order given; never empty.
    pub herdsman_methods: Vec<String>,
    /// Without repeats, in the order given; never empty.
    pub connections: Vec<u32>,
    /// Without repeats, in the order given; never empty.
    pub workers: Vec<u32>,
    pub rounds: u32,
    pub seconds: u32,
    pub sick_seconds: u32,
    pub recovered_seconds: u32,
    /// Of `connections`; never empty.
    pub recovering_connections: Vec<u32>,
    pub warm_up_seconds: u32,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &GrayArgs, workspace: &Path) -> anyhow::Result<Settings> {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let connections = settings::without_repeats(
            args.connections.as_deref().unwrap_or(defaults.connections),
            defaults.connections,
        );
        let recovering_connections = settings::without_repeats(
            args.recovering_connections.as_deref().unwrap_or(&[]),
            &connections[..1],
        );
        if let Some(c) = recovering_connections
            .iter()
            .find(|c| !connections.contains(c))
        {
            bail!("--recovering-connections {c} is not one of --connections");
        }
        let settings = Settings {
            herdsman_methods: settings::without_repeats(&args.herdsman_methods, &[]),
            connections,
            workers: settings::without_repeats(
                args.workers.as_deref().unwrap_or(defaults.workers),
                defaults.workers,
            ),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            seconds: args.seconds.unwrap_or(defaults.seconds),
            sick_seconds: args.sick_seconds.unwrap_or(defaults.sick_seconds),
            recovered_seconds: args.recovered_seconds.unwrap_or(defaults.recovered_seconds),
            recovering_connections,
            warm_up_seconds: defaults.warm_up_seconds,
            out: args.output.results_file(workspace, defaults.out),
        };
        if settings.herdsman_methods.is_empty() {
            bail!("--herdsman-methods needs at least one method");
        }
        if settings.seconds == 0 || settings.sick_seconds == 0 || settings.recovered_seconds == 0 {
            bail!("--seconds, --sick-seconds and --recovered-seconds must be at least 1");
        }
        Ok(settings)
    }

    /// Whether `scenario` runs at `connections`.
    pub fn runs(&self, scenario: Scenario, connections: u32) -> bool {
        scenario != Scenario::Recovering || self.recovering_connections.contains(&connections)
    }

    /// wrk's seconds for a run of `scenario`.
    pub fn seconds_of(&self, scenario: Scenario) -> u32 {
        match scenario {
            Scenario::Recovering => self.sick_seconds + self.recovered_seconds,
            _ => self.seconds,
        }
    }

    /// The most connections of any case.
    pub fn most_connections(&self) -> u32 {
        self.connections.iter().copied().max().unwrap_or(1)
    }

    /// A proxy's plan with `workers` on `port` (its servers are given apart): room for the most
    /// connections of any case, client and server side.
    pub fn plan(&self, workers: u32, port: u16, first_server: u16, descriptor_limit: u64) -> Plan {
        let most = self.most_connections();
        Plan {
            workers,
            port,
            backend_port: first_server,
            backend_idle: most.max(64),
            client_connections: most,
            descriptor_limit,
        }
    }

    /// Descriptors this program's servers may hold at once: every proxy started for a worker
    /// count (`proxies`) with a connection per client to each server, nginx one per worker.
    pub fn own_descriptors(&self, proxies: usize) -> u64 {
        let workers = self.workers.iter().copied().max().unwrap_or(1);
        proxies as u64 * u64::from(self.most_connections()) * u64::from(workers)
            + u64::from(SPARE_DESCRIPTORS)
    }

    /// The planned seconds of every step, in order, with `rows` rows (each started twice per
    /// worker count: with three servers and with two): the warm-ups, then the rounds' runs.
    pub fn planned_steps(&self, rows: usize) -> Vec<f64> {
        let mut steps = Vec::new();
        for _ in &self.workers {
            if self.warm_up_seconds > 0 {
                let warm_up = f64::from(self.warm_up_seconds) + RUN_OVERHEAD_SECONDS;
                steps.extend(std::iter::repeat_n(warm_up, 2 * rows));
            }
            for _ in 0..self.rounds {
                for scenario in RUN_ORDER {
                    for &connections in &self.connections {
                        if self.runs(scenario, connections) {
                            let run = f64::from(self.seconds_of(scenario)) + RUN_OVERHEAD_SECONDS;
                            steps.extend(std::iter::repeat_n(run, rows));
                        }
                    }
                }
            }
        }
        steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn parse(args: &[&str]) -> Result<GrayArgs, clap::Error> {
        parse_args("gray", args)
    }

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(&parse(args).unwrap(), Path::new("/w")).unwrap()
    }

    #[test]
    fn the_defaults_are_the_issue_s_matrix_in_about_25_minutes() {
        let s = resolve(&[]);
        assert_eq!(
            s.herdsman_methods,
            ["peak-ewma", "round-robin", "least-conn"]
        );
        assert_eq!(
            (s.connections.clone(), s.workers.clone()),
            (vec![50, 200], vec![1, 2])
        );
        assert_eq!(
            (s.rounds, s.seconds, s.sick_seconds, s.recovered_seconds),
            (3, 2, 2, 10)
        );
        assert_eq!(s.recovering_connections, [50]);
        assert!(s.runs(Scenario::Recovering, 50) && !s.runs(Scenario::Recovering, 200));
        assert!(s.runs(Scenario::Late200, 200));
        assert_eq!(s.seconds_of(Scenario::Recovering), 12);
        assert_eq!(s.out, Path::new("/w/bench/results/gray.md"));
        // 7 rows: per worker count 14 warm-ups, then 3 rounds × (5 cases × 2 connection counts
        // + the recovering case once) × 7.
        let steps = s.planned_steps(7);
        assert_eq!(steps.len(), 2 * (14 + 3 * 11 * 7));
        let minutes = steps.iter().sum::<f64>() / 60.0;
        assert!((20.0..25.5).contains(&minutes), "{minutes}");
    }

    #[test]
    fn short_mode_is_one_worker_one_round_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!(
            (s.connections.clone(), s.workers.clone()),
            (vec![50], vec![1])
        );
        assert_eq!((s.rounds, s.seconds, s.warm_up_seconds), (1, 1, 0));
        assert!(s.out.starts_with("/w/target"));
        let seconds = s.planned_steps(7).iter().sum::<f64>();
        assert!(seconds < 60.0, "{seconds}");
        // An explicit option wins.
        let s = resolve(&[
            "--short",
            "--herdsman-methods",
            "p2c,round-robin,p2c",
            "--connections",
            "200,50",
            "--recovering-connections",
            "50,200",
        ]);
        assert_eq!(s.herdsman_methods, ["p2c", "round-robin"]);
        assert_eq!(s.recovering_connections, [50, 200]);
    }

    #[test]
    fn wrong_options_are_refused() {
        assert!(parse(&["--herdsman-methods", "Peak EWMA"]).is_err());
        assert!(parse(&["--herdsman-methods", "a,,b"]).is_err());
        for args in [
            &["--recovering-connections", "100"][..],
            &["--seconds", "0"][..],
        ] {
            let parsed = parse(args).unwrap();
            assert!(
                Settings::resolve(&parsed, Path::new("/w")).is_err(),
                "{args:?}"
            );
        }
    }

    #[test]
    fn every_process_fits_the_open_files_limit() {
        let s = resolve(&[]);
        let plan = s.plan(2, 1, 2, 20_000);
        assert_eq!((plan.client_connections, plan.backend_idle), (200, 200));
        assert!(plan.descriptors_needed() < 20_000);
        assert!(s.own_descriptors(14) < 20_000);
    }
}
