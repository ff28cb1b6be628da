//! The options of `scale` and what they resolve to: the full run by default (1 to 100,000 host
//! routes, pools of 10,000 servers, three rounds of 5 s per run), or with `--short` 1 and 100
//! routes and 300 servers for 1 s, written under target/ for the test. An option given explicitly
//! wins over either set of defaults.

use std::path::{Path, PathBuf};

use crate::kit::proxies::ProxyKind;
use crate::kit::settings;

/// Which host a run's requests name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Host {
    /// The first route's.
    First,
    /// The last route's.
    Last,
    /// A name no route has: the listener's own pool (HAProxy's map default, nginx's
    /// default_server) answers it.
    Unknown,
}

impl Host {
    pub const ALL: [Host; 3] = [Host::First, Host::Last, Host::Unknown];

    /// The `Host` header it sends in a config of `routes` host routes.
    pub fn name(self, routes: u32) -> String {
        match self {
            Host::First => route_host(0),
            Host::Last => route_host(routes.saturating_sub(1)),
            Host::Unknown => UNKNOWN_HOST.to_string(),
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Host::First => "first",
            Host::Last => "last",
            Host::Unknown => "unknown",
        })
    }
}

/// The host name of route `index`, as every proxy's config lists it.
pub fn route_host(index: u32) -> String {
    format!("site{index}.customers.example")
}

/// The same routes under other names: what a reload alternates with, so that each reload
/// compiles a new index rather than finding the routes unchanged.
pub fn renamed_route_host(index: u32) -> String {
    format!("site{index}.tenants.example")
}

/// A host no route names.
pub const UNKNOWN_HOST: &str = "nobody.elsewhere.example";

/// A balancing algorithm measured over the large pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Balance {
    LeastConn,
    RoundRobin,
}

impl Balance {
    /// herdsman's name for it (`[[pool]] balance`).
    pub fn label(self) -> &'static str {
        match self {
            Balance::LeastConn => "least-conn",
            Balance::RoundRobin => "round-robin",
        }
    }
}

impl std::fmt::Display for Balance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A part of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Part {
    /// Host routes: every proxy with every route count, the reloads, the instruction counts.
    Routes,
    /// The large pool: least-conn against round-robin, then servers added and removed.
    Pool,
}

/// Options of `scale`.
#[derive(Debug, clap::Args)]
pub struct ScaleArgs {
    /// Host-route counts, comma-separated; a one-route config is always measured too.
    /// Default: 1,10,100,1000,10000,100000; with --short, 1,100.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub routes: Vec<u32>,
    /// The proxies measured with every route count, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "P[,P…]",
          default_values_t = [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx])]
    pub proxies: Vec<ProxyKind>,
    /// Servers in the pool that least-conn and round-robin are measured over, and that servers
    /// are added to and removed from, each at a loopback address of its own. Default: 10,000;
    /// with --short, 300.
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=60_000))]
    pub servers: Option<u32>,
    /// Seconds of wrk per run. Default: 5; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// Rounds; each runs every proxy, route count and host once, in an order that turns.
    /// Default: 3; with --short, 1. Many short rounds (say 50 of 1 s) tell apart smaller
    /// differences than a few long ones: a ratio is taken within a round, and the machine's
    /// drift over seconds then falls on both of its runs alike.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=200))]
    pub rounds: Option<u32>,
    /// The parts run, comma-separated: `routes` (host routes, reloads, instruction counts) and
    /// `pool` (the large pool's algorithms and changes).
    #[arg(long, value_delimiter = ',', value_name = "PART[,PART…]",
          default_values = ["routes", "pool"])]
    pub parts: Vec<Part>,
    /// wrk's connections.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub connections: u32,
    /// Servers added to the large pool and removed again one at a time, each change timed; and
    /// as many reloads of the largest route config. Default: 10; with --short, 3.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub changes: Option<u32>,
    /// Leave out the count of herdsman's own instructions per request under callgrind (with one
    /// route and with the most, for each host), which the full run makes when valgrind is
    /// installed; --short always leaves it out.
    #[arg(long)]
    pub no_instructions: bool,
    /// The herdsman binary to measure, instead of the workspace's release build.
    #[arg(long, value_name = "PATH")]
    pub herdsman: Option<PathBuf>,
    /// 1 and 100 routes, 300 servers, 1 s runs, one round, written by default under target/
    /// rather than over bench/results/scale.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    routes: &'static [u32],
    servers: u32,
    seconds: u32,
    rounds: u32,
    changes: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// The issue's figures: up to 100,000 host routes, 10,000 servers; about 20 minutes.
const FULL: Defaults = Defaults {
    routes: &[1, 10, 100, 1_000, 10_000, 100_000],
    servers: 10_000,
    seconds: 5,
    rounds: 3,
    changes: 10,
    out: "bench/results/scale.md",
};

/// Enough to prove every part runs end to end, in about a minute.
const SHORT: Defaults = Defaults {
    routes: &[1, 100],
    servers: 300,
    seconds: 1,
    rounds: 1,
    changes: 3,
    out: "target/herdsman-bench/scale-short.md",
};

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Ascending, without repeats, always starting with 1.
    pub routes: Vec<u32>,
    /// In the order given, without repeats; never empty.
    pub proxies: Vec<ProxyKind>,
    pub servers: u32,
    pub seconds: u32,
    pub rounds: u32,
    pub connections: u32,
    pub changes: u32,
    /// Whether herdsman's instructions per request are counted under callgrind.
    pub instructions: bool,
    /// The parts run, without repeats; never empty.
    pub parts: Vec<Part>,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &ScaleArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let mut routes = if args.routes.is_empty() {
            defaults.routes.to_vec()
        } else {
            args.routes.clone()
        };
        routes.push(1);
        routes.sort_unstable();
        routes.dedup();
        Settings {
            routes,
            proxies: settings::without_repeats(&args.proxies, &[ProxyKind::Herdsman]),
            servers: args.servers.unwrap_or(defaults.servers),
            seconds: args.seconds.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            connections: args.connections,
            changes: args.changes.unwrap_or(defaults.changes),
            instructions: !args.short && !args.no_instructions,
            parts: settings::without_repeats(&args.parts, &[Part::Routes, Part::Pool]),
            out: args.output.results_file(workspace, defaults.out),
        }
    }

    /// The largest route count: the one the targets are judged at.
    pub fn most_routes(&self) -> u32 {
        self.routes.last().copied().unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(
            &parse_args::<ScaleArgs>("scale", args).unwrap(),
            Path::new("/w"),
        )
    }

    #[test]
    fn the_defaults_are_the_issue_setup() {
        let s = resolve(&[]);
        assert_eq!(s.routes, [1, 10, 100, 1_000, 10_000, 100_000]);
        assert_eq!(s.most_routes(), 100_000);
        assert_eq!(
            s.proxies,
            [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx]
        );
        assert_eq!((s.servers, s.seconds, s.rounds), (10_000, 5, 3));
        assert_eq!((s.connections, s.changes), (50, 10));
        assert!(s.instructions);
        assert_eq!(s.parts, [Part::Routes, Part::Pool]);
        assert!(!resolve(&["--no-instructions"]).instructions);
        assert_eq!(resolve(&["--parts", "pool"]).parts, [Part::Pool]);
        assert_eq!(s.out, Path::new("/w/bench/results/scale.md"));
    }

    #[test]
    fn short_mode_is_small_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!(s.routes, [1, 100]);
        assert_eq!((s.servers, s.seconds, s.rounds, s.changes), (300, 1, 1, 3));
        assert!(!s.instructions);
        assert!(s.out.starts_with("/w/target"));
    }

    #[test]
    fn route_counts_always_include_one_route_and_are_sorted() {
        let s = resolve(&[
            "--routes",
            "1000,10,1000",
            "--proxies",
            "nginx,herdsman,nginx",
        ]);
        assert_eq!(s.routes, [1, 10, 1000]);
        assert_eq!(s.proxies, [ProxyKind::Nginx, ProxyKind::Herdsman]);
    }

    #[test]
    fn hosts_name_the_first_and_last_routes_or_none() {
        assert_eq!(Host::First.name(100), "site0.customers.example");
        assert_eq!(Host::Last.name(100), "site99.customers.example");
        assert_eq!(Host::Last.name(1), Host::First.name(1));
        assert_eq!(Host::Unknown.name(100), UNKNOWN_HOST);
        assert_ne!(route_host(5), renamed_route_host(5));
    }
}
