//! The options of `slow-clients` and what they resolve to: the full run by default (three rounds
//! of 10 s runs, 1,000 slow uploads and 1,000 slow readers), or with `--short` one round of 2 s
//! runs with 100 of each, written under target/ for the test. An option given explicitly wins over
//! either set of defaults.

use std::path::{Path, PathBuf};

use super::kinds::Pace;
use super::rows::Row;
use crate::kit::settings;

/// The size of `/big`, the answer every slow reader asks for, with the server's SO_SNDBUF at
/// `SERVER_SEND_BUFFER`: the smallest found that the sockets' buffers cannot absorb when a proxy
/// streams it to a slow reader, so that the control loses clearly, one reader per server worker
/// (bench/results/slow-clients-answer-size.md). Per connection the buffers took about 300 KB
/// (the server's send buffer, the proxy's receive and send buffers, the reader's window);
/// 256 KiB answers were partly absorbed, 512 KiB ones never. 1,000 readers make a buffering
/// proxy keep 512 MiB.
pub const ANSWER_BYTES: u64 = 512 << 10;

/// The server's SO_SNDBUF (the kernel doubles it). Left to the kernel, a loopback send buffer
/// grows to 4 MiB and hides a whole answer of that size: 1 MiB answers were all absorbed, and the
/// control lost with 2 MiB only once 1,000 of them had pushed the kernel's TCP memory to its
/// pressure mark. Answers that beat it per connection (over 4 MiB) would make 1,000 readers keep
/// several GB on a buffering proxy's disk.
pub const SERVER_SEND_BUFFER: u32 = 64 << 10;

/// Options of `slow-clients`.
#[derive(Debug, clap::Args)]
pub struct SlowClientsArgs {
    /// Slow uploads held during the runs "with". Default: 1000; with --short, 100.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=5000))]
    pub uploads: Option<u32>,
    /// Slow readers held during the runs "with". Default: 1000; with --short, 100.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=5000))]
    pub readers: Option<u32>,
    #[command(flatten)]
    pub pace: Pace,
    /// The length of the answer a slow reader asks for (`/big`), in bytes.
    #[arg(long, default_value_t = ANSWER_BYTES, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub answer_bytes: u64,
    /// The sync server's worker threads, each serving one connection at a time.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub server_workers: u32,
    /// The sync server's SO_SNDBUF in bytes (the kernel doubles it); 0 leaves it to the kernel.
    #[arg(long, default_value_t = SERVER_SEND_BUFFER)]
    pub server_send_buffer: u32,
    /// The proxies' workers (herdsman's worker threads, nginx's worker processes).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// wrk's connections: the other clients, whose requests/s is measured.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub connections: u32,
    /// Seconds per wrk run. Default: 10; with --short, 2.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub duration: Option<u32>,
    /// Seconds between the slow clients' first connects and the wrk run. Default: 5; with
    /// --short, 2.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=600))]
    pub settle: Option<u32>,
    /// Rounds; each has, for every row, one run without and one with the slow clients. Default:
    /// 3; with --short, 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: Option<u32>,
    /// The rows, comma-separated: herdsman (its defaults), nginx (its defaults), control (herdsman
    /// with buffering off). Default: all three.
    #[arg(long, value_delimiter = ',')]
    pub rows: Vec<Row>,
    /// One round of 2 s runs with 100 slow uploads and 100 slow readers, written by default
    /// under target/ rather than over bench/results/slow-clients.md.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub output: settings::OutputArgs,
}

/// One set of defaults.
struct Defaults {
    slow: u32,
    seconds: u32,
    settle: u32,
    rounds: u32,
    /// Relative to the workspace.
    out: &'static str,
}

/// The issue's setup: 1,000 of each; three rounds of 10 s runs.
const FULL: Defaults = Defaults {
    slow: 1000,
    seconds: 10,
    settle: 5,
    rounds: 3,
    out: "bench/results/slow-clients.md",
};

/// Enough to prove it still runs end to end, in well under a minute after the build.
const SHORT: Defaults = Defaults {
    slow: 100,
    seconds: 2,
    settle: 2,
    rounds: 1,
    out: "target/herdsman-bench/slow-clients-short.md",
};

/// What a run measures, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub uploads: u32,
    pub readers: u32,
    pub pace: Pace,
    pub answer_bytes: u64,
    pub server_workers: u32,
    pub server_send_buffer: u32,
    pub workers: u32,
    pub connections: u32,
    pub seconds: u32,
    pub settle: u32,
    pub rounds: u32,
    /// In `Row::ALL` order, without repeats; never empty.
    pub rows: Vec<Row>,
    pub out: PathBuf,
}

impl Settings {
    pub fn resolve(args: &SlowClientsArgs, workspace: &Path) -> Settings {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        Settings {
            uploads: args.uploads.unwrap_or(defaults.slow),
            readers: args.readers.unwrap_or(defaults.slow),
            pace: args.pace,
            answer_bytes: args.answer_bytes,
            server_workers: args.server_workers,
            server_send_buffer: args.server_send_buffer,
            workers: args.workers,
            connections: args.connections,
            seconds: args.duration.unwrap_or(defaults.seconds),
            settle: args.settle.unwrap_or(defaults.settle),
            rounds: args.rounds.unwrap_or(defaults.rounds),
            rows: Row::ALL
                .into_iter()
                .filter(|r| args.rows.is_empty() || args.rows.contains(r))
                .collect(),
            out: args.output.results_file(workspace, defaults.out),
        }
    }

    /// Connections a proxy holds at the peak: every slow client and wrk's, and a server
    /// connection for each of them (the queued ones included: the server's backlog holds them).
    pub fn proxy_connections(&self) -> u64 {
        2 * u64::from(self.uploads + self.readers + self.connections)
    }

    /// The most bytes of answers the slow readers of one run can make a buffering proxy keep.
    pub fn answers_bytes(&self) -> u64 {
        u64::from(self.readers) * self.answer_bytes
    }
}

/// The settings `slow-clients ARGS…` resolves to in a workspace at /w: for tests.
#[cfg(test)]
pub fn resolve(args: &[&str]) -> Settings {
    let args = settings::parse_args::<SlowClientsArgs>("slow-clients", args).unwrap();
    Settings::resolve(&args, Path::new("/w"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_issue_setup() {
        let s = resolve(&[]);
        assert_eq!((s.uploads, s.readers, s.server_workers), (1000, 1000, 8));
        assert_eq!((s.seconds, s.settle, s.rounds), (10, 5, 3));
        assert_eq!((s.workers, s.connections), (2, 50));
        assert_eq!(s.rows, Row::ALL.to_vec());
        assert_eq!(s.out, Path::new("/w/bench/results/slow-clients.md"));
        assert_eq!(s.pace.upload_bytes.to_string(), "1000-10000");
        assert_eq!((s.pace.upload_rate, s.pace.read_rate), (1, 2048));
        assert_eq!(s.answer_bytes, ANSWER_BYTES);
        assert_eq!(s.proxy_connections(), 2 * 2050);
    }

    #[test]
    fn short_mode_is_brief_and_writes_under_target() {
        let s = resolve(&["--short"]);
        assert_eq!(
            (s.uploads, s.readers, s.seconds, s.rounds),
            (100, 100, 2, 1)
        );
        assert!(s.out.starts_with("/w/target"));
        let s = resolve(&["--short", "--readers", "0", "--rows", "nginx,control,nginx"]);
        assert_eq!((s.uploads, s.readers), (100, 0));
        assert_eq!(s.rows, vec![Row::Nginx, Row::Control]);
    }
}
