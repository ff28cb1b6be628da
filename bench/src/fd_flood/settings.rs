//! The options of `fd-flood` and what they resolve to: the run by default (each proxy
//! limited to this machine's 20,000 open files, 21,000 silent connections, 10 s before, 20 s of
//! flood, 15 s after), or with `--short` the same shape scaled down to fit a test (a 1,000-file
//! limit, 1,050 silent connections, 3 s / 4 s / 4 s), written under target/ for the test. An
//! option given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use crate::kit::proxies::ProxyKind;
use crate::kit::settings::{self, without_repeats};

/// Options of `fd-flood`.
#[derive(Debug, clap::Args)]
pub struct FdFloodArgs {
    /// The proxies to flood, in turn.
    #[arg(long, value_delimiter = ',', default_values_t = [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx])]
    pub proxies: Vec<ProxyKind>,
    /// Open files each proxy may have (its RLIMIT_NOFILE, soft and hard). Default: this
    /// program's own hard limit (20,000 here); with --short, 1,000.
    #[arg(long, value_parser = clap::value_parser!(u64).range(200..=1_000_000))]
    pub descriptor_limit: Option<u64>,
    /// Silent connections of the flood. Default: the limit and 5% more (21,000 against 20,000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=25_000))]
    pub flood: Option<u32>,
    /// Keep-alive clients, and as many clients with a new connection per request, beside it.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub clients: u32,
    /// Seconds measured before the flood. Default 10; with --short, 3.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub before: Option<u32>,
    /// Seconds the flood is held once every connection has made its first connect. Default 20;
    /// with --short, 4.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub during: Option<u32>,
    /// Seconds measured after the flood lets go. Default 15; with --short, 4.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub after: Option<u32>,
    /// The herdsman binary to measure, instead of the release build in the target directory
    /// (built first unless --no-build).
    #[arg(long, value_name = "PATH")]
    pub herdsman: Option<PathBuf>,
    /// The scaled-down run, written by default under target/ rather than over
    /// bench/results/fd-flood.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    /// None: this program's own hard limit.
    descriptor_limit: Option<u64>,
    before: u32,
    during: u32,
    after: u32,
    out: &'static str,
}

const FULL: Defaults = Defaults {
    descriptor_limit: None,
    before: 10,
    during: 20,
    after: 15,
    out: "bench/results/fd-flood.md",
};

const SHORT: Defaults = Defaults {
    descriptor_limit: Some(1000),
    before: 3,
    during: 4,
    after: 4,
    out: "target/herdsman-bench/fd-flood-short.md",
};

/// Seconds of load before `before` begins, not counted: connections made, first-run effects gone.
pub const WARM_UP_SECONDS: u32 = 2;

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub proxies: Vec<ProxyKind>,
    pub descriptor_limit: u64,
    pub flood: u32,
    pub clients: u32,
    pub before: u32,
    pub during: u32,
    pub after: u32,
    pub short: bool,
    pub out: PathBuf,
}

impl Settings {
    /// `own_limit`: this program's open-files limit, raised to its hard limit.
    pub fn resolve(args: &FdFloodArgs, workspace: &Path, own_limit: u64) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let descriptor_limit = args
            .descriptor_limit
            .or(defaults.descriptor_limit)
            .unwrap_or(own_limit);
        let flood = args.flood.unwrap_or_else(|| {
            u32::try_from(descriptor_limit + descriptor_limit / 20).unwrap_or(u32::MAX)
        });
        Settings {
            proxies: without_repeats(&args.proxies, &[ProxyKind::Herdsman]),
            descriptor_limit,
            flood,
            clients: args.clients,
            before: args.before.unwrap_or(defaults.before),
            during: args.during.unwrap_or(defaults.during),
            after: args.after.unwrap_or(defaults.after),
            short: args.short,
            out: args.output.results_file(workspace, defaults.out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    #[test]
    fn the_full_run_floods_five_percent_past_the_limit_and_short_scales_down() {
        let workspace = Path::new("/w");
        let args: FdFloodArgs = parse_args("fd-flood", &[]).unwrap();
        let full = Settings::resolve(&args, workspace, 20_000);
        assert_eq!((full.descriptor_limit, full.flood), (20_000, 21_000));
        assert_eq!((full.before, full.during, full.after), (10, 20, 15));
        assert_eq!(full.proxies.len(), 3);
        assert_eq!(full.out, PathBuf::from("/w/bench/results/fd-flood.md"));
        let args: FdFloodArgs =
            parse_args("fd-flood", &["--short", "--proxies", "herdsman"]).unwrap();
        let short = Settings::resolve(&args, workspace, 20_000);
        assert_eq!((short.descriptor_limit, short.flood), (1000, 1050));
        assert_eq!(short.proxies, [ProxyKind::Herdsman]);
        assert!(short
            .out
            .ends_with("target/herdsman-bench/fd-flood-short.md"));
        let args: FdFloodArgs = parse_args("fd-flood", &["--flood", "500"]).unwrap();
        assert_eq!(Settings::resolve(&args, workspace, 20_000).flood, 500);
    }
}
