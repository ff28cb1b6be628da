//! The options of `cache-disk` and what they resolve to: by default three rounds of 10 s hot runs
//! (alone and beside the cold load) over 4,000 cold objects, and for the upgrade 30 s of warm-up,
//! then 60 s before and 60 s after, in 10 s intervals, over 5,000 objects; with `--short` one
//! round of 2 s runs over 1,000 cold objects and 2 s of warm-up, 6 s before and 6 s after in 2 s
//! intervals over 1,000 objects, written under target/ for the test. An option given explicitly
//! wins over either set.

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::kit::settings;

/// Options of `cache-disk`.
#[derive(Debug, clap::Args)]
pub struct CacheDiskArgs {
    /// herdsman's workers. One by default: a disk read that held a worker's event loop would
    /// hold every hot request with it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// Rounds of the hot load alone and beside the cold load, in an order that turns from round
    /// to round. Default: 3; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: Option<u32>,
    /// Seconds of each hot run ("10" or "10s"). Default: 10; with --short, 2.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub duration: Option<u32>,
    /// Objects of the cold load, each 32 KiB (on disk, not in the 8 MiB of memory). Default:
    /// 4,000; with --short, 1,000.
    #[arg(long, value_parser = clap::value_parser!(u32).range(300..=100_000))]
    pub cold_objects: Option<u32>,
    /// Seconds of the Zipf load before the upgrade, and as many after it. Default: 60; with
    /// --short, 6.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub minute: Option<u32>,
    /// Seconds of each interval of the hit ratio; must divide --minute. Default: 10; with
    /// --short, 2.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub interval: Option<u32>,
    /// Seconds of the Zipf load before the minute before the upgrade: a cache started empty
    /// fills. Default: 30; with --short, 2.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub warm_up: Option<u32>,
    /// Requests a second the Zipf load is paced to (about: each of its connections waits after
    /// each answer). A steady load at a rate of its own, so that a cache started empty fills
    /// over tens of seconds, as it would in front of users, rather than within one.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(50..=50_000))]
    pub rate: u32,
    /// Objects of the Zipf load, each 4 KiB. Default: 5,000; with --short, 1,000.
    #[arg(long, value_parser = clap::value_parser!(u32).range(10..=100_000))]
    pub zipf_objects: Option<u32>,
    /// One round of 2 s hot runs, and 6 s before and after the upgrade: enough to prove the
    /// benchmark runs end to end, written by default under target/ rather than over
    /// bench/results/cache-disk.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    rounds: u32,
    duration: u32,
    cold_objects: u32,
    minute: u32,
    interval: u32,
    warm_up: u32,
    zipf_objects: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// Issue 38's figures: about 8 minutes.
const FULL: Defaults = Defaults {
    rounds: 3,
    duration: 10,
    cold_objects: 4000,
    minute: 60,
    interval: 10,
    warm_up: 30,
    zipf_objects: 5000,
    out: "bench/results/cache-disk.md",
};

/// Every part once, briefly: under a minute.
const SHORT: Defaults = Defaults {
    rounds: 1,
    duration: 2,
    cold_objects: 1000,
    minute: 6,
    interval: 2,
    warm_up: 2,
    zipf_objects: 1000,
    out: "target/herdsman-bench/cache-disk-short.md",
};

/// herdsman's `[cache] memory` for the hot and cold loads: far less than the cold objects take.
pub const SMALL_MEMORY: &str = "8MiB";

/// `[cache.disk] size` wherever the disk tier is on: its default, room for every object here.
pub const DISK_SIZE: &str = "1GiB";

/// The hot objects: few and small, always in memory.
pub const HOT_OBJECTS: u32 = 8;
pub const HOT_BYTES: usize = 1024;

/// A cold object's body: 256 of them fill `SMALL_MEMORY`.
pub const COLD_BYTES: usize = 32 * 1024;

/// A Zipf object's body, and the popularity's exponent.
pub const ZIPF_BYTES: usize = 4096;
pub const ZIPF_EXPONENT: f64 = 1.0;

/// wrk's connections: the hot load's, the cold load's, the Zipf load's.
pub const HOT_CONNECTIONS: u32 = 20;
pub const COLD_CONNECTIONS: u32 = 20;
pub const ZIPF_CONNECTIONS: u32 = 50;

/// Seconds the cold load runs before a hot run starts beside it (and it goes on as long after).
pub const COLD_LEAD_SECONDS: u32 = 1;

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub workers: u32,
    pub rounds: u32,
    pub duration: u32,
    pub cold_objects: u32,
    pub minute: u32,
    pub interval: u32,
    pub warm_up: u32,
    pub zipf_objects: u32,
    pub rate: u32,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &CacheDiskArgs, workspace: &Path) -> anyhow::Result<Settings> {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let settings = Settings {
            workers: args.workers,
            rounds: args.rounds.unwrap_or(defaults.rounds),
            duration: args.duration.unwrap_or(defaults.duration),
            cold_objects: args.cold_objects.unwrap_or(defaults.cold_objects),
            minute: args.minute.unwrap_or(defaults.minute),
            interval: args.interval.unwrap_or(defaults.interval),
            warm_up: args.warm_up.unwrap_or(defaults.warm_up),
            zipf_objects: args.zipf_objects.unwrap_or(defaults.zipf_objects),
            rate: args.rate,
            out: args.output.results_file(workspace, defaults.out),
        };
        if settings.duration == 0 || settings.interval == 0 || settings.minute == 0 {
            bail!("--duration, --minute and --interval must be at least 1 second");
        }
        if !settings.minute.is_multiple_of(settings.interval) {
            bail!(
                "--interval {} does not divide --minute {}: give one that does (10 for 60)",
                settings.interval,
                settings.minute
            );
        }
        Ok(settings)
    }

    /// Planned seconds of a hot run: beside a second load, with its lead and tail.
    pub fn hot_run_seconds(&self, beside: bool) -> f64 {
        let lead = if beside { 2 * COLD_LEAD_SECONDS } else { 0 };
        f64::from(self.duration + lead) + RUN_OVERHEAD_SECONDS
    }

    /// What each of the Zipf load's connections waits after an answer, in ms, for `rate`.
    pub fn pause_ms(&self) -> u32 {
        (ZIPF_CONNECTIONS * 1000).div_ceil(self.rate)
    }

    /// Intervals before the upgrade, and as many after it.
    pub fn intervals(&self) -> u32 {
        self.minute / self.interval
    }

    /// Planned seconds of every step, in order: the fill, the hot runs (each beside-the-cold run
    /// with the cold load's lead and tail), then per configuration of the upgrade its start, its
    /// warm-up and its intervals.
    pub fn planned_steps(&self) -> Vec<f64> {
        let mut steps = vec![FILL_SECONDS];
        for _ in 0..self.rounds {
            steps.push(self.hot_run_seconds(false));
            steps.push(self.hot_run_seconds(true));
            steps.push(self.hot_run_seconds(true));
        }
        for _ in 0..2 {
            steps.push(f64::from(self.warm_up) + START_SECONDS);
            steps.extend(std::iter::repeat_n(
                f64::from(self.interval) + RUN_OVERHEAD_SECONDS,
                2 * self.intervals() as usize,
            ));
        }
        steps
    }
}

/// Planned seconds a wrk run costs beyond its duration.
pub const RUN_OVERHEAD_SECONDS: f64 = 0.3;

/// Planned seconds of storing the cold objects and waiting for their files.
pub const FILL_SECONDS: f64 = 8.0;

/// Planned seconds of starting herdsman.
const START_SECONDS: f64 = 1.0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> anyhow::Result<Settings> {
        let args: CacheDiskArgs = parse_args("cache-disk", args).unwrap();
        Settings::resolve(&args, Path::new("/w"))
    }

    #[test]
    fn the_defaults_are_the_issue_s_minutes_and_short_shrinks_them() {
        let full = resolve(&[]).unwrap();
        assert_eq!((full.rounds, full.duration, full.workers), (3, 10, 1));
        assert_eq!((full.minute, full.interval, full.intervals()), (60, 10, 6));
        assert_eq!(full.out, PathBuf::from("/w/bench/results/cache-disk.md"));
        let minutes = full.planned_steps().iter().sum::<f64>() / 60.0;
        assert!((5.0..9.0).contains(&minutes), "{minutes}");
        let short = resolve(&["--short"]).unwrap();
        assert_eq!((short.rounds, short.minute, short.intervals()), (1, 6, 3));
        assert!(short.out.starts_with("/w/target"));
        let seconds = short.planned_steps().iter().sum::<f64>();
        assert!(seconds < 60.0, "{seconds}");
        assert_eq!((full.rate, full.pause_ms()), (2000, 25));
        let given = resolve(&["--short", "--minute", "20", "--interval", "5"]).unwrap();
        assert_eq!(given.intervals(), 4);
    }

    #[test]
    fn an_interval_must_divide_the_minute() {
        let error = resolve(&["--minute", "60", "--interval", "7"]).unwrap_err();
        assert!(format!("{error}").contains("--interval 7"), "{error}");
    }
}
