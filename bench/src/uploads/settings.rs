//! The options of `uploads` and what they resolve to: issue 51's matrix by default (1 MiB and
//! 64 MiB bodies, 20 and 200 connections, 1 and 2 workers, three interleaved rounds, runs of at
//! least 10 s), or with `--short` its smallest case (1 MiB, 20 connections, 1 worker, one round of
//! 2 s), written under target/ for the test. An option given explicitly wins over either set of
//! defaults.

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::kit::markdown::thousands;
use crate::kit::proxies::{Plan, ProxyKind};
use crate::kit::settings;

/// Options of `uploads`.
#[derive(Debug, clap::Args)]
pub struct UploadsArgs {
    /// Body sizes, comma-separated: bytes, or KiB, MiB or GiB with k, m or g (`1m,64m`), at most
    /// 1 GiB. Default: 1m,64m; with --short, 1m.
    #[arg(long, value_delimiter = ',', value_name = "SIZE[,SIZE…]", value_parser = parse_size)]
    pub sizes: Option<Vec<u64>>,
    /// wrk's keep-alive connections, comma-separated; each is a case of its own. Default: 20,200;
    /// with --short, 20.
    #[arg(long, value_delimiter = ',', value_name = "C[,C…]",
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: Option<Vec<u32>>,
    /// Worker counts (threads or processes of each proxy), comma-separated: every proxy is
    /// started afresh with each. Default: 1,2; with --short, 1.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Option<Vec<u32>>,
    /// Rounds; in each, every proxy runs once per case, in an order that turns from round to
    /// round. Default: 3; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: Option<u32>,
    /// The least seconds of wrk per run ("10" or "10s"); a case whose connections could not each
    /// finish 4 uploads in that time at 384 MiB/s through the proxy runs for as long as they
    /// could (64 MiB × 20 connections: 14 s; × 200: 134 s). Default: 10; with --short, 2.
    #[arg(long, value_parser = settings::parse_seconds)]
    pub duration: Option<u32>,
    /// The proxies, comma-separated, each measured in turn every round.
    #[arg(long, value_delimiter = ',', value_name = "P[,P…]",
          default_values_t = [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx])]
    pub proxies: Vec<ProxyKind>,
    /// A herdsman binary to measure, as PATH or LABEL=PATH; repeat to measure builds side by side
    /// as rows of their own (a before and an after). Default: this workspace's
    /// target/release/herdsman, built first unless --no-build.
    #[arg(long = "herdsman-bin", value_name = "[LABEL=]PATH")]
    pub herdsman_bins: Vec<String>,
    /// 1 MiB bodies on 20 connections, 1 worker, one round of 2 s: enough to prove the benchmark
    /// runs end to end, written by default under target/ rather than over
    /// bench/results/uploads.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    sizes: &'static [u64],
    connections: &'static [u32],
    workers: &'static [u32],
    rounds: u32,
    duration: u32,
    /// Relative to the workspace.
    out: &'static str,
}

const MIB: u64 = 1 << 20;

/// Issue 51's matrix: 1 and 64 MiB bodies, 20 and 200 connections, 1 and 2 workers, three
/// interleaved rounds of runs of at least 10 s (64 MiB bodies longer); about 50 minutes.
const FULL: Defaults = Defaults {
    sizes: &[MIB, 64 * MIB],
    connections: &[20, 200],
    workers: &[1, 2],
    rounds: 3,
    duration: 10,
    out: "bench/results/uploads.md",
};

/// The smallest case, once, briefly: what the test suite can afford (20 MiB in flight at most,
/// in memory and in the proxies' and the server's temporary files), in about half a minute.
const SHORT: Defaults = Defaults {
    sizes: &[MIB],
    connections: &[20],
    workers: &[1],
    rounds: 1,
    duration: 2,
    out: "target/herdsman-bench/uploads-short.md",
};

/// The uploads each connection must be able to finish in a run at `PLANNED_BYTES_PER_SECOND`:
/// an upload still under way when wrk stops has cost the proxy CPU without being counted, and
/// with k uploads per connection that weighs at most 1 ÷ k on CPU per upload (about half that
/// when the connections' uploads are out of step, as they soon are).
pub const UPLOADS_PER_CONNECTION: u64 = 4;

/// The rate through a proxy that runs are planned for: about the slowest measured here, nginx
/// with one worker and 64 MiB bodies on 20 connections (400 MiB/s; HAProxy moved 970 MiB/s).
pub const PLANNED_BYTES_PER_SECOND: u64 = 384 * MIB;

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Without repeats, in the order given; never empty.
    pub sizes: Vec<u64>,
    /// Without repeats, in the order given; never empty.
    pub connections: Vec<u32>,
    /// Without repeats, in the order given; never empty.
    pub workers: Vec<u32>,
    /// Without repeats, in the order given; never empty.
    pub proxies: Vec<ProxyKind>,
    pub rounds: u32,
    /// The least seconds of a run (`seconds` gives each case's).
    pub duration: u32,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &UploadsArgs, workspace: &Path) -> anyhow::Result<Settings> {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let mut proxies = settings::without_repeats(&args.proxies, &[ProxyKind::Herdsman]);
        if !args.herdsman_bins.is_empty() && !proxies.contains(&ProxyKind::Herdsman) {
            proxies.insert(0, ProxyKind::Herdsman);
        }
        let settings = Settings {
            sizes: settings::without_repeats(
                args.sizes.as_deref().unwrap_or(defaults.sizes),
                defaults.sizes,
            ),
            connections: settings::without_repeats(
                args.connections.as_deref().unwrap_or(defaults.connections),
                defaults.connections,
            ),
            workers: settings::without_repeats(
                args.workers.as_deref().unwrap_or(defaults.workers),
                defaults.workers,
            ),
            proxies,
            rounds: args.rounds.unwrap_or(defaults.rounds),
            duration: args.duration.unwrap_or(defaults.duration),
            out: args.output.results_file(workspace, defaults.out),
        };
        if settings.duration == 0 {
            bail!("--duration must be at least 1 second");
        }
        Ok(settings)
    }

    /// The seconds of wrk a run of `size` bodies on `connections` lasts: the least asked for, or
    /// longer, so that each connection could finish `UPLOADS_PER_CONNECTION` uploads at
    /// `PLANNED_BYTES_PER_SECOND`.
    pub fn seconds(&self, size: u64, connections: u32) -> u32 {
        let bytes = UPLOADS_PER_CONNECTION * size * u64::from(connections);
        let needed = bytes.div_ceil(PLANNED_BYTES_PER_SECOND);
        u32::try_from(needed).unwrap_or(u32::MAX).max(self.duration)
    }

    /// wrk's `--timeout` for a run of `seconds`: longer than the run, so that no upload that
    /// finishes in it is left out of the latencies as timed out (wrk's default is 2 s).
    pub fn timeout(seconds: u32) -> u32 {
        seconds + 1
    }

    /// The most connections of any case.
    pub fn most_connections(&self) -> u32 {
        self.connections.iter().copied().max().unwrap_or(1)
    }

    /// Every proxy's plan but for its worker count, port and server: room for the most
    /// connections of any case, client and server side.
    pub fn plan(&self, workers: u32, port: u16, server_port: u16, descriptor_limit: u64) -> Plan {
        let most = self.most_connections();
        Plan {
            workers,
            port,
            backend_port: server_port,
            backend_idle: most.max(64),
            client_connections: most,
            descriptor_limit,
        }
    }

    /// The planned seconds of a run of `size` bodies on `connections`, for the progress line.
    pub fn planned_seconds(&self, size: u64, connections: u32) -> f64 {
        f64::from(self.seconds(size, connections)) + RUN_OVERHEAD
    }

    /// The planned seconds of every measured run, in order, with `targets` rows.
    pub fn planned_runs(&self, targets: usize) -> Vec<f64> {
        let mut plan = Vec::new();
        for _workers in &self.workers {
            for _round in 0..self.rounds {
                for &size in &self.sizes {
                    for &connections in &self.connections {
                        let seconds = self.planned_seconds(size, connections);
                        plan.extend(std::iter::repeat_n(seconds, targets));
                    }
                }
            }
        }
        plan
    }
}

/// The name of the wrk script that uploads `size` bytes, in the run's scratch directory.
pub fn script_name(size: u64) -> String {
    format!("upload-{size}.lua")
}

/// Planned seconds a run costs beyond its duration: wrk's start, /proc read twice.
const RUN_OVERHEAD: f64 = 0.5;

/// "1 MiB", "64 MiB", "512 KiB", "1,000 bytes": a body size as the results write it.
pub fn size_text(bytes: u64) -> String {
    for (unit, name) in [(1 << 30, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", thousands((bytes / unit) as f64));
        }
    }
    format!("{} bytes", thousands(bytes as f64))
}

/// "1m" → 1,048,576: bytes, or KiB, MiB or GiB with k, m or g (either case), 1 byte to 1 GiB.
fn parse_size(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (number, scale) = match lower.chars().last() {
        Some('k') => (&lower[..lower.len() - 1], 1 << 10),
        Some('m') => (&lower[..lower.len() - 1], MIB),
        Some('g') => (&lower[..lower.len() - 1], 1 << 30),
        _ => (lower.as_str(), 1),
    };
    match number.parse::<u64>().map(|n| n.checked_mul(scale)) {
        Ok(Some(bytes)) if (1..=1 << 30).contains(&bytes) => Ok(bytes),
        _ => Err(format!(
            "expected a size from 1 byte to 1 GiB such as 1048576, 512k, 1m or 1g, got {text:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn parse(args: &[&str]) -> Result<UploadsArgs, clap::Error> {
        parse_args("uploads", args)
    }

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(&parse(args).unwrap(), Path::new("/w")).unwrap()
    }

    #[test]
    fn the_defaults_are_the_issue_matrix() {
        let s = resolve(&[]);
        assert_eq!(s.sizes, [MIB, 64 * MIB]);
        assert_eq!(s.connections, [20, 200]);
        assert_eq!(s.workers, [1, 2]);
        assert_eq!(
            s.proxies,
            [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx]
        );
        assert_eq!((s.rounds, s.duration), (3, 10));
        assert_eq!(s.out, Path::new("/w/bench/results/uploads.md"));
    }

    #[test]
    fn runs_last_long_enough_for_every_connection_to_finish_uploads() {
        let s = resolve(&[]);
        assert_eq!(s.seconds(MIB, 20), 10);
        assert_eq!(s.seconds(MIB, 200), 10);
        // 4 × 64 MiB × 20 = 5 GiB at 384 MiB/s: 13.3 s.
        assert_eq!(s.seconds(64 * MIB, 20), 14);
        assert_eq!(s.seconds(64 * MIB, 200), 134);
        assert_eq!(Settings::timeout(134), 135);
        // 2 worker counts × 3 rounds × 4 cases × 3 proxies.
        let plan = s.planned_runs(3);
        assert_eq!(plan.len(), 72);
        let minutes = plan.iter().sum::<f64>() / 60.0;
        assert!((45.0..55.0).contains(&minutes), "{minutes}");
    }

    #[test]
    fn short_mode_is_the_smallest_case_once_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!((s.rounds, s.duration, s.seconds(MIB, 20)), (1, 2, 2));
        assert_eq!(
            (s.sizes, s.connections, s.workers),
            (vec![MIB], vec![20], vec![1])
        );
        assert!(s.out.starts_with("/w/target"));
        // An explicit option wins over the short defaults.
        let s = resolve(&[
            "--short",
            "--sizes",
            "64m,1m,64m",
            "--workers",
            "2",
            "--duration",
            "5s",
        ]);
        assert_eq!(
            (s.sizes, s.workers, s.duration),
            (vec![64 * MIB, MIB], vec![2], 5)
        );
    }

    #[test]
    fn sizes_read_with_units_and_write_back() {
        assert_eq!(parse_size("1m"), Ok(MIB));
        assert_eq!(parse_size("64M"), Ok(64 * MIB));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("1000"), Ok(1000));
        for wrong in ["0", "2g", "1.5m", "m", "", "-1"] {
            assert!(parse_size(wrong).is_err(), "{wrong}");
        }
        assert_eq!(size_text(MIB), "1 MiB");
        assert_eq!(size_text(64 * MIB), "64 MiB");
        assert_eq!(size_text(512 << 10), "512 KiB");
        assert_eq!(size_text(1500), "1,500 bytes");
        assert!(parse(&["--duration", "0"])
            .map(|a| Settings::resolve(&a, Path::new("/w")).is_err())
            .unwrap());
    }

    #[test]
    fn herdsman_builds_bring_a_herdsman_row() {
        let s = resolve(&["--proxies", "haproxy", "--herdsman-bin", "after=/x"]);
        assert_eq!(s.proxies, [ProxyKind::Herdsman, ProxyKind::Haproxy]);
        let args = parse(&["--herdsman-bin", "before=/a", "--herdsman-bin", "after=/b"]).unwrap();
        assert_eq!(args.herdsman_bins, ["before=/a", "after=/b"]);
        assert!(parse(&["--no-build"]).unwrap().output.no_build);
    }

    #[test]
    fn every_proxy_has_room_for_the_largest_case() {
        let plan = resolve(&[]).plan(2, 4100, 4200, 20_000);
        assert_eq!(
            (plan.workers, plan.client_connections, plan.backend_idle),
            (2, 200, 200)
        );
        assert!(plan.descriptors_needed() < 20_000);
    }
}
