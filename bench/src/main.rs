//! herdsman-bench: programs that print figures about herdsman (never timed tests).
//!
//! Layout: one module per experiment, each importing only `kit` and its own submodules, never
//! another experiment.
//! - `cache`       — herdsman's cache against Varnish, nginx's proxy_cache and HAProxy's cache:
//!   hits (CPU per request, user and kernel apart, requests/s, p99) beside a proxied request, and
//!   1,000 clients on one object just expired, with and without stale-while-revalidate (issue 38)
//! - `cache-disk`  — herdsman's disk tier (`[cache.disk]`): memory hits' requests/s and p99 alone
//!   and beside disk reads, and the hit ratio in the minute after a binary upgrade against the
//!   minute before, with the disk tier and without (issue 38; part of `cache`'s module)
//! - `cache-replay` — the hit ratio of herdsman's cache store against LRU on a Zipf replay, and
//!   its reads a second from one and two threads (issue 38)
//! - `churn`       — herdsman vs HAProxy vs nginx with a new connection per request: CPU per
//!   request, requests/s, system calls per connection (issue 25)
//! - `compare`     — herdsman vs HAProxy vs nginx under wrk, in turns, per worker and connection
//!   count, in front of the own backend and of a real nginx (server connections opened per request
//!   beside CPU and requests/s, issue 50), then with idle connections held open; into
//!   bench/results/
//! - `gray`        — one sick server of three (50 ms or 200 ms late, recovering, failing fast):
//!   herdsman's balancing methods against HAProxy's leastconn and roundrobin and nginx's
//!   least_conn and random two least_conn — requests/s, p50/p99, the sick server's share, CPU per
//!   request, recovery (issue 39)
//! - `herd`        — the 1999 accept() thundering-herd experiment on today's kernel (no herdsman)
//! - `fd-flood`    — herdsman vs HAProxy vs nginx when idle connections outnumber the open-files
//!   limit: both kinds of legitimate client's requests/s, p99 and failures, the status page, and
//!   recovery (issue 49)
//! - `h2`          — herdsman vs HAProxy vs nginx under h2load over TLS and h2c: requests/s, p99,
//!   CPU per request (user and kernel apart) and memory, per worker count and load (issue 37)
//! - `fairness`    — how evenly each intake mode spreads connections over workers, and wake-ups
//! - `stall`       — connect-to-first-byte latency while one worker is blocked
//! - `slowloris`   — the others' requests/s with and without 1,000 slow clients open
//! - `slow-clients` — the others' requests/s while 1,000 slow uploads and 1,000 slow readers are
//!   attached, through herdsman, nginx and herdsman with buffering off, to a one-connection-per-
//!   worker server (issue 23)
//! - `instructions` — herdsman's instructions per request under callgrind (keep-alive, over TLS,
//!   a new connection per request, with the access log on), held to bench/budget.toml (issue 45)
//! - `observability` — requests/s with access logs on and metrics scraped every second, and off
//! - `soak`        — herdsman (and HAProxy) under load through four minutes of chaos: restarts,
//!   kills, drains, reloads, log rotations, upgrades; every failed request classified
//! - `health-checks` — active checks of 10,000 servers at a 1 s interval: the checker's CPU, and
//!   how the checks spread over the interval (issue 24)
//! - `scale`       — herdsman, HAProxy and nginx with 1 to 100,000 host routes; least-conn and
//!   round-robin over 10,000 servers; reloads and server changes at that size (issue 24)
//! - `tls`         — herdsman, HAProxy and nginx terminating TLS: full and resumed handshakes per
//!   CPU-second (ECDSA and RSA), keep-alive requests and 1 MiB answers over TLS, memory per idle
//!   TLS connection with 10,000 held (issue 16)
//! - `tls-load`    — herdsman under bad TLS load: the others' requests/s without and with 1,000
//!   connections that never send a ClientHello (timed out and opened again), and a storm of new
//!   handshakes beside established connections: per-worker handshakes and CPU, their spread, and
//!   the established connections' p99 (issue 16)
//! - `uploads`     — herdsman vs HAProxy vs nginx with wrk posting 1 MiB and 64 MiB bodies on
//!   keep-alive connections to one nginx server: CPU per upload (user and kernel apart),
//!   uploads/s, p50/p99, errors, in interleaved rounds, judged against issue 51's targets
//! - `h2-attacks`  — HTTP/2 attacks from one connection (rapid reset, CONTINUATION, SETTINGS, PING,
//!   empty-DATA, WINDOW_UPDATE and PRIORITY floods, HPACK abuse, streams never or slowly read):
//!   the legitimate clients' requests/s and p99 beside each, how herdsman ended it, what reached
//!   a server
//! - `rules`       — header rules and a rate limit through herdsman, HAProxy, nginx and Caddy (CPU
//!   per request, user and kernel apart, requests/s, p50/p99); compression's CPU per MiB and bytes
//!   out against nginx's gzip and Caddy's encode; a limit counted in Redis, on loopback and 1 ms
//!   away (issue 42)
//! - `kit`         — what several experiments share: the backend, the proxies and their stacks,
//!   processes, /proc, wrk, statistics, paired rounds, Markdown, results files and plots

mod cache;
mod cache_replay;
mod churn;
mod compare;
mod fairness;
mod fd_flood;
mod gray;
mod h2;
mod h2_attacks;
mod health_checks;
mod herd;
mod instructions;
mod kit;
mod observability;
mod rules;
mod scale;
mod slow_clients;
mod slowloris;
mod soak;
mod stall;
mod tls;
mod tls_load;
mod uploads;

use std::net::SocketAddr;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "herdsman-bench", version, about = "Benchmarks for herdsman")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a fixed 19-byte response to every request (HTTP/1.1 keep-alive, one thread); /big
    /// answers 1 MiB and /upload answers after the whole body, for `slowloris`; /__bench/status
    /// the connections accepted and requests answered, as nginx's stub_status, for `compare`.
    Backend {
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: SocketAddr,
    },
    /// herdsman, HAProxy and nginx with a new connection for every request: CPU per request,
    /// requests/s and system calls per connection; writes bench/results/churn.md.
    Churn(churn::ChurnArgs),
    /// Measure herdsman, HAProxy and nginx side by side, in front of the own backend and a real
    /// nginx, and write bench/results/compare.md.
    Compare(compare::CompareArgs),
    /// One process of idle keep-alive clients for `compare`'s idle sweep (started by it).
    #[command(hide = true)]
    IdleClients(compare::idle_clients::IdleClientsArgs),
    /// Reproduce the 1999 accept() thundering-herd experiment and write bench/results/herd.md.
    Herd(herd::HerdArgs),
    /// Three servers, one of them sick (50 ms or 200 ms late, recovering mid-run, failing fast
    /// with 500s), behind herdsman's balancing methods, HAProxy's leastconn and roundrobin and
    /// nginx's least_conn and random two least_conn: requests/s, p50/p99, the sick server's share,
    /// CPU per request and the time to recover; judged against issue 39's targets; writes
    /// bench/results/gray.md.
    Gray(gray::GrayArgs),
    /// 21,000 idle connections against herdsman, HAProxy and nginx each limited to 20,000 open
    /// files: legitimate clients' requests/s, p99 and failures, the status page and recovery;
    /// writes bench/results/fd-flood.md.
    FdFlood(fd_flood::FdFloodArgs),
    /// HTTP/2 attacks from one connection beside 50 legitimate HTTP/2 clients: their requests/s
    /// and p99 against a baseline, how each attack ended, what reached a server, what each
    /// attacking connection cost herdsman; writes bench/results/h2-attacks.md.
    H2Attacks(h2_attacks::H2AttacksArgs),
    /// herdsman's cache against Varnish, nginx and HAProxy's in front of one origin: hits on
    /// 1 KiB and 64 KiB objects (CPU per request, requests/s, p99, beside herdsman's proxied
    /// request) and a stampede of 1,000 clients on one expired object, with and without
    /// stale-while-revalidate; judged against issue 38's targets; writes bench/results/cache.md.
    Cache(cache::CacheArgs),
    /// herdsman's disk tier: memory hits' requests/s and p50/p99 alone and beside a load of disk
    /// reads, and the hit ratio per 10 s in the minute before and after a binary upgrade, with
    /// `[cache.disk]` and memory only; writes bench/results/cache-disk.md.
    CacheDisk(cache::disk::CacheDiskArgs),
    /// The cache store's hit ratio against LRU on a Zipf replay, and its reads a second; writes
    /// bench/results/cache-hit-ratio.md
    CacheReplay(cache_replay::CacheReplayArgs),
    /// The h2c gRPC server of `h2` (started by it): every unary call answered with its message.
    #[command(hide = true)]
    GrpcServer {
        #[arg(long, default_value = "127.0.0.1:9001")]
        listen: SocketAddr,
    },
    /// herdsman, HAProxy and nginx under h2load, over TLS (ALPN h2) and h2c, 50 connections × 10
    /// streams and 10 × 100: requests/s, p99, CPU per request and memory; writes
    /// bench/results/h2.md.
    H2(h2::H2Args),
    /// Spread of connections over herdsman's workers per intake mode; writes bench/results/fairness.md.
    Fairness(fairness::FairnessArgs),
    /// One client process of `fairness` (started by it).
    #[command(hide = true)]
    FairnessClient(fairness::client::ClientArgs),
    /// Connect-to-first-byte latency while one worker stalls; writes bench/results/stall.md.
    Stall(stall::StallArgs),
    /// The others' requests/s with and without 1,000 slow clients; writes bench/results/slowloris.md.
    Slowloris(slowloris::SlowlorisArgs),
    /// One process of slow connections for `slowloris` (started by it).
    #[command(hide = true)]
    SlowlorisHolder(slowloris::clients::SlowlorisHolderArgs),
    /// The others' requests/s while 1,000 slow uploads and 1,000 slow readers are attached,
    /// through herdsman, nginx and herdsman with buffering off, to a server like gunicorn's sync
    /// workers; writes bench/results/slow-clients.md.
    SlowClients(slow_clients::SlowClientsArgs),
    /// One process of slow uploads or readers for `slow-clients` (started by it).
    #[command(hide = true)]
    SlowClientsHolder(slow_clients::kinds::SlowClientsHolderArgs),
    /// The one-connection-per-worker server of `slow-clients` (started by it).
    #[command(hide = true)]
    SyncServer(slow_clients::server::SyncServerArgs),
    /// herdsman's instructions per request counted by callgrind: keep-alive, keep-alive over TLS,
    /// a new connection per request (held to bench/budget.toml; --check fails a case more than 2%
    /// over its budget), and keep-alive with the access log on; printed as a Markdown table.
    Instructions(instructions::InstructionsArgs),
    /// Requests/s with access logs on and /metrics scraped every second, against both off;
    /// writes bench/results/observability.md.
    Observability(observability::ObservabilityArgs),
    /// 200 keep-alive connections through herdsman while servers restart and die, states change,
    /// the config reloads, the log rotates and the binary upgrades; every failure classified;
    /// writes bench/results/soak.md.
    Soak(soak::SoakArgs),
    /// Active health checks of 10,000 servers at a 1 s interval: the checker's CPU per check, and
    /// how the checks spread over time; writes bench/results/health-checks.md.
    HealthChecks(health_checks::HealthChecksArgs),
    /// herdsman, HAProxy and nginx with 1 to 100,000 host routes (CPU per request for the first,
    /// last and an unknown host; start; memory per route), reloads of 100,000 routes, least-conn
    /// and round-robin over 10,000 servers, servers added and removed; writes
    /// bench/results/scale.md.
    Scale(scale::ScaleArgs),
    /// herdsman, HAProxy and nginx terminating TLS with the same ECDSA and RSA certificates: full
    /// and resumed handshakes per CPU-second, keep-alive requests and 1 MiB answers over TLS, and
    /// memory per idle TLS connection; writes bench/results/tls.md.
    Tls(tls::TlsArgs),
    /// One process of idle TLS connections for `tls` (started by it).
    #[command(hide = true)]
    TlsHolder(tls::holder::TlsHolderArgs),
    /// herdsman under bad TLS load: the others' requests/s without and with 1,000 silent TLS
    /// connections, and per-worker handshakes and CPU under a handshake storm beside established
    /// connections; writes bench/results/tls-load.md.
    TlsLoad(tls_load::TlsLoadArgs),
    /// herdsman, HAProxy and nginx under uploads: wrk posting 1 MiB and 64 MiB bodies on 20 and
    /// 200 keep-alive connections to one nginx server, 1 and 2 workers: CPU per upload, uploads/s,
    /// p50/p99 and errors, judged against issue 51's targets; writes bench/results/uploads.md.
    Uploads(uploads::UploadsArgs),
    /// Ten header rules and a rate limit through herdsman, HAProxy, nginx and Caddy, and herdsman
    /// without them (CPU per request, user and kernel, requests/s, p50/p99); a 592 KiB JSON
    /// compressed by herdsman's zstd, brotli and gzip, nginx's gzip 1 and 5 and Caddy's encode
    /// (CPU per MiB, bytes out); a limit counted in Redis on loopback and 1 ms away; judged
    /// against issue 42's targets; writes bench/results/rules.md.
    Rules(rules::RulesArgs),
    /// One process of silent TLS connections for `tls-load` (started by it).
    #[command(hide = true)]
    TlsLoadHolder(tls_load::holder::TlsLoadHolderArgs),
    /// One process of silent connections for `tls-load` and `fd-flood` (started by them).
    #[command(hide = true)]
    SilentHolder(kit::silent::SilentHolderArgs),
    /// Stops a process group once this program's stdin closes (started by `soak`).
    #[command(hide = true)]
    GuardGroup { group: u32 },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Backend { listen } => kit::backend::run(listen),
        Command::Churn(args) => churn::run(args),
        Command::Compare(args) => compare::run(args),
        Command::IdleClients(args) => compare::idle_clients::run(args),
        Command::Herd(args) => herd::run(args),
        Command::Gray(args) => gray::run(args),
        Command::FdFlood(args) => fd_flood::run(args),
        Command::H2Attacks(args) => h2_attacks::run(args),
        Command::Cache(args) => cache::run(args),
        Command::CacheDisk(args) => cache::disk::run(args),
        Command::CacheReplay(args) => cache_replay::run(args),
        Command::GrpcServer { listen } => kit::grpc_server::run(listen),
        Command::H2(args) => h2::run(args),
        Command::Fairness(args) => fairness::run(args),
        Command::FairnessClient(args) => fairness::client::run(args),
        Command::Stall(args) => stall::run(args),
        Command::Slowloris(args) => slowloris::run(args),
        Command::SlowlorisHolder(args) => slowloris::clients::run(args),
        Command::SlowClients(args) => slow_clients::run(args),
        Command::SlowClientsHolder(args) => slow_clients::kinds::run(args),
        Command::SyncServer(args) => slow_clients::server::run(args),
        Command::Instructions(args) => instructions::run(args),
        Command::Observability(args) => observability::run(args),
        Command::Soak(args) => soak::run(args),
        Command::HealthChecks(args) => health_checks::run(args),
        Command::Scale(args) => scale::run(args),
        Command::Tls(args) => tls::run(args),
        Command::TlsHolder(args) => tls::holder::run(args),
        Command::TlsLoad(args) => tls_load::run(args),
        Command::TlsLoadHolder(args) => tls_load::holder::run(args),
        Command::Uploads(args) => uploads::run(args),
        Command::Rules(args) => rules::run(args),
        Command::SilentHolder(args) => kit::silent::run(args),
        Command::GuardGroup { group } => kit::process::guard_group(group),
    }
}
