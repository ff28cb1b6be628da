//! The options of `cache` and what they resolve to: issue 38's matrix by default (1 KiB and 64 KiB
//! hits, 1 and 2 workers, three interleaved rounds of 10 s runs; three expiries of each stampede
//! with 1,000 clients), or with `--short` one worker, one round of 1 s runs and one expiry of
//! each, written under target/ for the test. An option given explicitly wins over either set.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::caches::Cacher;
use crate::kit::proxies::{Plan, SPARE_DESCRIPTORS};
use crate::kit::settings;

/// Options of `cache`.
#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    /// Worker counts (herdsman's `workers`, nginx's `worker_processes`, HAProxy's `nbthread`,
    /// Varnish's `thread_pools`), comma-separated: every cache is started afresh with each.
    /// Default: 1,2; with --short, 1.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Option<Vec<u32>>,
    /// Rounds of hits; in each, every cache runs once per case, in an order that turns from
    /// round to round. Default: 3; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: Option<u32>,
    /// Seconds of wrk per hits run ("10" or "10s"). Default: 10; with --short, 1.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub duration: Option<u32>,
    /// Expiries of each stampede per cache and worker count. Default: 3; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub expiries: Option<u32>,
    /// Clients of the stampede, each on a connection of its own, released at once.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub clients: u32,
    /// The caches, comma-separated, in the order of the results' rows.
    #[arg(long, value_delimiter = ',', value_name = "C[,C…]",
          default_values_t = Cacher::ALL)]
    pub caches: Vec<Cacher>,
    /// One worker, one round of 1 s runs, one expiry of each stampede: enough to prove the
    /// benchmark runs end to end, written by default under target/ rather than over
    /// bench/results/cache.md.
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
    expiries: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// Issue 38's matrix: about 20 minutes.
const FULL: Defaults = Defaults {
    workers: &[1, 2],
    rounds: 3,
    duration: 10,
    expiries: 3,
    out: "bench/results/cache.md",
};

/// Every case of one worker count once, briefly: about a minute.
const SHORT: Defaults = Defaults {
    workers: &[1],
    rounds: 1,
    duration: 1,
    expiries: 1,
    out: "target/herdsman-bench/cache-short.md",
};

/// The sizes of the objects hit, in bytes.
pub const SIZES: [usize; 2] = [1024, 64 * 1024];

/// wrk's keep-alive connections for the hits.
pub const CONNECTIONS: u32 = 50;

/// Seconds of unrecorded hits each cache takes per object before the rounds: the first request
/// stores it, the rest warm the cache's own memory.
pub const WARM_UP_SECONDS: u32 = 1;

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Without repeats, in the order given; never empty.
    pub workers: Vec<u32>,
    /// Without repeats, in the order given; never empty.
    pub caches: Vec<Cacher>,
    pub rounds: u32,
    pub duration: u32,
    pub expiries: u32,
    pub clients: u32,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &CacheArgs, workspace: &Path) -> anyhow::Result<Settings> {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let settings = Settings {
            workers: settings::without_repeats(
                args.workers.as_deref().unwrap_or(defaults.workers),
                defaults.workers,
            ),
            caches: settings::without_repeats(&args.caches, &Cacher::ALL),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            duration: args.duration.unwrap_or(defaults.duration),
            expiries: args.expiries.unwrap_or(defaults.expiries),
            clients: args.clients,
            out: args.output.results_file(workspace, defaults.out),
        };
        if settings.duration == 0 {
            bail!("--duration must be at least 1 second");
        }
        Ok(settings)
    }

    /// A cache's plan with `workers` on `port` in front of the origin on `origin_port`: room for
    /// the stampede's clients beside wrk's, and a server connection for each (HAProxy, which
    /// collapses nothing, opens one per client; nginx may keep as many idle).
    pub fn plan(&self, workers: u32, port: u16, origin_port: u16, descriptor_limit: u64) -> Plan {
        let clients = self.clients.max(CONNECTIONS);
        Plan {
            workers,
            port,
            backend_port: origin_port,
            backend_idle: clients.max(64),
            client_connections: clients + CONNECTIONS,
            descriptor_limit,
        }
    }

    /// Descriptors this program needs at the stampede: a connection per client, and as many at
    /// the origin (which runs here), beside the spare allowance.
    pub fn own_descriptors(&self) -> u64 {
        2 * u64::from(self.clients) + u64::from(SPARE_DESCRIPTORS)
    }

    /// The planned seconds of each step, in order: per worker count, the warm-ups, the rounds'
    /// runs (every cache, and herdsman's proxied requests), then the expiries.
    pub fn planned_steps(&self) -> Vec<f64> {
        let caches = self.caches.len();
        let rows = caches + usize::from(self.caches.contains(&Cacher::Herdsman));
        let per_run = f64::from(self.duration) + RUN_OVERHEAD_SECONDS;
        let per_warm_up = f64::from(WARM_UP_SECONDS) + RUN_OVERHEAD_SECONDS;
        let mut steps = Vec::new();
        for _ in &self.workers {
            steps.extend(std::iter::repeat_n(per_warm_up, caches * SIZES.len()));
            steps.extend(std::iter::repeat_n(
                per_run,
                self.rounds as usize * SIZES.len() * rows,
            ));
            steps.extend(std::iter::repeat_n(
                EXPIRY_SECONDS,
                self.expiries as usize * caches * super::STAMPEDES.len(),
            ));
        }
        steps
    }
}

/// Planned seconds a wrk run costs beyond its duration.
pub const RUN_OVERHEAD_SECONDS: f64 = 0.5;

/// Planned seconds of one expiry: the first fetch, the wait for staleness, the clients, the
/// wait for a background fetch.
pub const EXPIRY_SECONDS: f64 = 4.5;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        let args: CacheArgs = parse_args("cache", args).unwrap();
        Settings::resolve(&args, Path::new("/w")).unwrap()
    }

    #[test]
    fn the_defaults_are_the_issue_s_matrix_and_short_shrinks_it() {
        let full = resolve(&[]);
        assert_eq!(full.workers, vec![1, 2]);
        assert_eq!(full.caches, Cacher::ALL.to_vec());
        assert_eq!((full.rounds, full.duration, full.expiries), (3, 10, 3));
        assert_eq!(full.clients, 1000);
        assert_eq!(full.out, PathBuf::from("/w/bench/results/cache.md"));
        let short = resolve(&["--short"]);
        assert_eq!(short.workers, vec![1]);
        assert_eq!((short.rounds, short.duration, short.expiries), (1, 1, 1));
        assert!(short.out.starts_with("/w/target"));
        let given = resolve(&["--short", "--workers", "2", "--caches", "herdsman,nginx"]);
        assert_eq!(given.workers, vec![2]);
        assert_eq!(given.caches, vec![Cacher::Herdsman, Cacher::Nginx]);
    }

    #[test]
    fn every_process_fits_the_open_files_limit() {
        let full = resolve(&[]);
        let plan = full.plan(2, 1, 2, 20_000);
        assert_eq!((plan.client_connections, plan.backend_idle), (1050, 1000));
        assert!(plan.descriptors_needed() < 20_000);
        assert!(full.own_descriptors() < 20_000);
    }

    #[test]
    fn the_plan_counts_every_step() {
        let full = resolve(&[]);
        // Per worker count: 4 caches × 2 sizes warm-ups, 3 rounds × 2 sizes × 5 rows, 3 × 4 × 3
        // expiries.
        assert_eq!(full.planned_steps().len(), 2 * (8 + 30 + 36));
        let minutes = full.planned_steps().iter().sum::<f64>() / 60.0;
        assert!((15.0..25.0).contains(&minutes), "{minutes}");
    }
}
