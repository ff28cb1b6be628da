//! The options of `h2` and what they resolve to: the full run by default (1 and 2 workers, eight
//! interleaved rounds of 5 s per cell), or with `--short` one worker, one round of 2 s per cell,
//! written under target/ for the test. An option given explicitly wins over either set of
//! defaults. Each cell's traffic: GETs over a transport to the HTTP/1.1 backend, or gRPC unary
//! calls over h2c to the gRPC server.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::kit::grpc_server::METHOD_PATH;
use crate::kit::h2load::StreamLoad;
use crate::kit::proxies::ProxyKind;
use crate::kit::settings;

/// How the clients reach the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Transport {
    /// TLS, h2 agreed by ALPN.
    Tls,
    /// Cleartext, HTTP/2 with prior knowledge.
    H2c,
}

impl Transport {
    pub const ALL: [Transport; 2] = [Transport::Tls, Transport::H2c];

    /// As results files write it.
    pub fn written(self) -> &'static str {
        match self {
            Transport::Tls => "TLS",
            Transport::H2c => "h2c",
        }
    }

    /// The URL h2load asks on `port`: its scheme is what picks TLS or h2c.
    pub fn url(self, port: u16) -> String {
        match self {
            Transport::Tls => format!("https://127.0.0.1:{port}/"),
            Transport::H2c => format!("http://127.0.0.1:{port}/"),
        }
    }

    /// What h2load must report having agreed: anything else is a proxy that did not speak
    /// HTTP/2 where it was asked to.
    pub fn protocol(self) -> &'static str {
        match self {
            Transport::Tls => "h2",
            Transport::H2c => "h2c",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.written())
    }
}

/// What a cell's clients ask of a proxy, and what the proxy speaks to its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Traffic {
    /// GETs over `Transport` to the kit's HTTP/1.1 backend.
    Requests(Transport),
    /// gRPC unary calls over h2c to the bench's own h2c gRPC server: HTTP/2 on both sides.
    Grpc,
}

impl Traffic {
    /// As results files write it: the transport's name, or "gRPC".
    pub fn written(self) -> &'static str {
        match self {
            Traffic::Requests(transport) => transport.written(),
            Traffic::Grpc => "gRPC",
        }
    }

    /// How the clients reach the proxy: gRPC's clients in a cluster speak h2c to it.
    pub fn transport(self) -> Transport {
        match self {
            Traffic::Requests(transport) => transport,
            Traffic::Grpc => Transport::H2c,
        }
    }

    /// The URL h2load asks on `port`: the root, or the method every call names.
    pub fn url(self, port: u16) -> String {
        match self {
            Traffic::Requests(transport) => transport.url(port),
            Traffic::Grpc => format!("http://127.0.0.1:{port}{METHOD_PATH}"),
        }
    }

    /// The loads of its cells, as (clients, streams each).
    pub fn loads(self) -> &'static [(u32, u32)] {
        match self {
            Traffic::Requests(_) => &LOADS,
            Traffic::Grpc => &GRPC_LOADS,
        }
    }
}

impl fmt::Display for Traffic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.written())
    }
}

/// The issue's two loads: many connections with few streams each, and few with many.
pub const LOADS: [(u32, u32); 2] = [(50, 10), (10, 100)];

/// The issue's gRPC load: 50 connections, 10 calls in flight on each.
pub const GRPC_LOADS: [(u32, u32); 1] = [(50, 10)];

/// Options of `h2`.
#[derive(Debug, clap::Args)]
pub struct H2Args {
    /// Worker counts (threads or processes of each proxy), comma-separated. Default: 1,2; with
    /// --short, 1.
    #[arg(long, value_delimiter = ',', value_name = "N[,N…]",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Vec<u32>,
    /// The proxies, comma-separated, each measured in turn in every cell of every round.
    #[arg(long, value_delimiter = ',', value_name = "P[,P…]",
          default_values_t = [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx])]
    pub proxies: Vec<ProxyKind>,
    /// How clients reach the proxies, comma-separated: TLS with ALPN h2, h2c with prior
    /// knowledge. Default: both.
    #[arg(long, value_delimiter = ',', value_name = "T[,T…]")]
    pub transports: Vec<Transport>,
    /// Leave out the gRPC cells (unary calls over h2c to the bench's h2c gRPC server).
    #[arg(long)]
    pub no_grpc: bool,
    /// Seconds of h2load per cell, per proxy, per round. Default: 5; with --short, 2.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// Rounds; each runs every cell against every proxy once, in an order that turns. Default:
    /// 8; with --short, 1. At least 6 are needed for the median's 95% interval to be narrower
    /// than the rounds' whole range.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=200))]
    pub rounds: Option<u32>,
    /// The herdsman binary to measure, instead of the release build in the target directory
    /// (CARGO_TARGET_DIR when set, else the workspace's target/), which is built first unless
    /// --no-build.
    #[arg(long, value_name = "PATH")]
    pub herdsman: Option<PathBuf>,
    /// One worker, one round of 2 s per cell, written by default under target/ rather than over
    /// bench/results/h2.md.
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
    /// Seconds of each load through each proxy before the first round.
    warm_up: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// The issue's figures: 2 worker counts × (2 transports × 2 loads + gRPC's one) × 3 proxies × 8
/// rounds × 5 s, about 22 minutes with the warm-ups.
const FULL: Defaults = Defaults {
    workers: &[1, 2],
    seconds: 5,
    rounds: 8,
    warm_up: 2,
    out: "bench/results/h2.md",
};

/// Enough to prove every cell is measured for every proxy, in under a minute.
const SHORT: Defaults = Defaults {
    workers: &[1],
    seconds: 2,
    rounds: 1,
    warm_up: 0,
    out: "target/herdsman-bench/h2-short.md",
};

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Without repeats, in the order given; never empty.
    pub workers: Vec<u32>,
    /// Without repeats, in the order given; never empty.
    pub proxies: Vec<ProxyKind>,
    /// Without repeats, in the order given; never empty.
    pub transports: Vec<Transport>,
    /// Whether the gRPC cells are measured (after the transports' in each round).
    pub grpc: bool,
    pub seconds: u32,
    pub rounds: u32,
    pub warm_up: u32,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &H2Args, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        Settings {
            workers: settings::without_repeats(&args.workers, defaults.workers),
            proxies: settings::without_repeats(&args.proxies, &[ProxyKind::Herdsman]),
            transports: settings::without_repeats(&args.transports, &Transport::ALL),
            grpc: !args.no_grpc,
            seconds: args.seconds.unwrap_or(defaults.seconds),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            warm_up: defaults.warm_up,
            out: args.output.results_file(workspace, defaults.out),
        }
    }

    /// Every traffic measured, in order: the transports', then gRPC's.
    pub fn traffics(&self) -> Vec<Traffic> {
        let mut traffics: Vec<Traffic> = self
            .transports
            .iter()
            .map(|&transport| Traffic::Requests(transport))
            .collect();
        if self.grpc {
            traffics.push(Traffic::Grpc);
        }
        traffics
    }

    /// The loads of `traffic`'s cells, for `seconds` each.
    pub fn loads(traffic: Traffic, seconds: u32) -> impl Iterator<Item = StreamLoad> {
        traffic
            .loads()
            .iter()
            .map(move |&(clients, streams)| StreamLoad {
                clients,
                streams,
                seconds,
            })
    }

    /// Every load of every traffic, as (clients, streams each).
    fn all_loads() -> impl Iterator<Item = (u32, u32)> {
        LOADS.into_iter().chain(GRPC_LOADS)
    }

    /// The most streams in flight at once in any run (clients × streams): each may hold a
    /// backend connection, so nginx is told to keep that many idle per worker.
    pub fn streams_in_flight(&self) -> u32 {
        Self::all_loads()
            .map(|(clients, streams)| clients * streams)
            .max()
            .unwrap_or(0)
    }

    /// The most client connections any run opens at once. HAProxy's `maxconn` and nginx's
    /// `worker_connections` are sized from it.
    pub fn client_connections(&self) -> u32 {
        Self::all_loads()
            .map(|(clients, _)| clients)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> Settings {
        Settings::resolve(&parse_args::<H2Args>("h2", args).unwrap(), Path::new("/w"))
    }

    #[test]
    fn the_defaults_are_the_issue_setup() {
        let s = resolve(&[]);
        assert_eq!(s.workers, [1, 2]);
        assert_eq!(s.proxies.len(), 3);
        assert_eq!(s.transports, Transport::ALL);
        assert_eq!(
            s.traffics(),
            [
                Traffic::Requests(Transport::Tls),
                Traffic::Requests(Transport::H2c),
                Traffic::Grpc
            ]
        );
        assert_eq!((s.seconds, s.rounds, s.warm_up), (5, 8, 2));
        let loads = |traffic| -> Vec<String> {
            Settings::loads(traffic, 5)
                .map(|load| load.written())
                .collect()
        };
        assert_eq!(
            loads(Traffic::Requests(Transport::Tls)),
            ["50 × 10", "10 × 100"]
        );
        assert_eq!(loads(Traffic::Grpc), ["50 × 10"]);
        assert_eq!((s.client_connections(), s.streams_in_flight()), (50, 1000));
        assert_eq!(s.out, Path::new("/w/bench/results/h2.md"));
    }

    #[test]
    fn short_is_one_worker_one_round_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!(
            (s.workers.as_slice(), s.seconds, s.rounds),
            (&[1][..], 2, 1)
        );
        assert_eq!(s.out, Path::new("/w/target/herdsman-bench/h2-short.md"));
        assert!(s.grpc, "the short run measures gRPC too");
        let s = resolve(&[
            "--short",
            "--workers",
            "2",
            "--transports",
            "h2c,h2c",
            "--no-grpc",
        ]);
        assert_eq!(
            (s.workers.as_slice(), s.traffics().as_slice()),
            (&[2][..], &[Traffic::Requests(Transport::H2c)][..])
        );
    }

    #[test]
    fn the_scheme_picks_the_transport() {
        assert_eq!(Transport::Tls.url(443), "https://127.0.0.1:443/");
        assert_eq!(Transport::H2c.url(80), "http://127.0.0.1:80/");
        assert_eq!(Traffic::Grpc.url(80), "http://127.0.0.1:80/bench.Echo/Say");
        assert_eq!(Traffic::Grpc.transport().protocol(), "h2c");
    }
}
