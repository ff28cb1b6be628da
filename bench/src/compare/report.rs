//! The results file of `compare`: the targets and whether they are met, the plots, every figure
//! per worker count and server as a Markdown table of median and min–max over rounds, the server
//! connections opened per request beside CPU and requests/s, the ratios, the idle sweep, what was
//! run and on what, the configurations, and every single run.
//!
//! Layout:
//! - `goals`  — the targets of the comparison, evaluated from the medians
//! - `opened` — server connections opened per request: how they read, and their table beside CPU
//!   and requests/s
//! - `ratios` — herdsman ÷ each peer, each intake mode ÷ reuseport, each build ÷ the first
//! - `idle`   — the idle sweep's figures and tables

pub mod goals;
pub mod idle;
pub mod opened;
mod ratios;

use std::fmt::Write as _;

use crate::kit::markdown::{and_list, one_line, thousands, worker_count, write_details_table};
use crate::kit::paired::PairedRatio;
use crate::kit::proxies::CLIENT_IDLE_SECONDS;
use crate::kit::server_status::Between;
use crate::kit::servers::ServerKind;
use crate::kit::stats::spread;
use crate::kit::wrk::WrkReport;
use idle::IdleSweep;

/// The reference row: wrk straight at the server, no proxy. Its CPU figure is the server's own.
pub const SERVER_ALONE_LABEL: &str = "server alone";

/// Which runs a figure is taken over: the server behind the target, the worker count, and wrk's
/// connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    pub server: ServerKind,
    pub workers: u32,
    pub connections: u32,
}

/// One wrk run against one target.
#[derive(Debug, Clone)]
pub struct Run {
    pub round: u32,
    /// The server behind the target (the server-alone row: the server itself).
    pub server: ServerKind,
    /// Worker processes / threads the target ran (the server-alone row: the pass it was measured in).
    pub workers: u32,
    pub label: String,
    pub connections: u32,
    pub wrk: WrkReport,
    /// CPU time of the target's process tree during the run ÷ requests completed.
    pub cpu_us_per_request: f64,
    /// Its user-space part (utime ÷ requests): the target's own code.
    pub user_us_per_request: f64,
    /// Its kernel part (stime ÷ requests): mostly loopback TCP.
    pub kernel_us_per_request: f64,
    /// VmHWM of the target's process tree after the run (it only grows), in KiB.
    pub peak_rss_kib: u64,
    /// The connections the server accepted during the run.
    pub opened: ServerOpened,
}

/// What the server accepted during one run, read from the server (`kit::server_status`), the
/// bench's own readings not counted: the same count whichever proxy is in front.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ServerOpened {
    /// Connections accepted from just before wrk started to just after it ended.
    pub accepted: u64,
    /// From `opened::steady_from` (half-way) into the run to its end, once the first connections
    /// are open: connections accepted and requests answered. None when the reading between failed.
    pub steady: Option<Between>,
}

impl ServerOpened {
    /// At steady load: connections the server accepted in the second half of the run ÷ the
    /// requests it answered meanwhile; None without that reading.
    pub fn steady_per_request(&self) -> Option<f64> {
        self.steady
            .map(|window| window.accepted as f64 / window.requests.max(1) as f64)
    }
}

impl Run {
    pub fn cell(&self) -> Cell {
        Cell {
            server: self.server,
            workers: self.workers,
            connections: self.connections,
        }
    }

    /// Connections the server accepted during the whole run ÷ the requests wrk completed.
    pub fn opened_per_request(&self) -> f64 {
        self.opened.accepted as f64 / self.wrk.requests.max(1) as f64
    }

    /// `ServerOpened::steady_per_request`, NaN (left out of every median) without it.
    pub fn steady_opened_per_request(&self) -> f64 {
        self.opened.steady_per_request().unwrap_or(f64::NAN)
    }

    pub fn errors(&self) -> u64 {
        self.wrk.socket_errors + self.wrk.bad_status
    }
}

/// Everything the results file says.
#[derive(Debug, Default)]
pub struct Session {
    /// The command that reproduces this file.
    pub command: String,
    pub date: String,
    /// (what, its version line), e.g. ("haproxy", "HAProxy version 2.6.12 …").
    pub versions: Vec<(String, String)>,
    pub machine: Vec<(String, String)>,
    /// The servers behind the proxies, in order; each proxy is measured against each.
    pub servers: Vec<ServerKind>,
    /// (what, file name, text) of each server's configuration; none for the own backend.
    pub server_configs: Vec<(String, String, String)>,
    /// Worker counts, each a separate pass with freshly started proxies.
    pub workers: Vec<u32>,
    pub seconds: u32,
    pub rounds: u32,
    pub warmup_seconds: u32,
    pub connections: Vec<u32>,
    /// Row order: the server-alone reference first, then the targets in the order they ran.
    pub labels: Vec<String>,
    /// Rows built from herdsman (the numerators of the ratios).
    pub herdsman_labels: Vec<String>,
    /// Peer rows that were measured ("haproxy", "nginx").
    pub peer_labels: Vec<String>,
    /// herdsman intake modes asked for with --intake (empty: herdsman's default, one row).
    pub intake_modes: Vec<String>,
    /// (a herdsman row in some intake mode, the same build's `reuseport` row): the intake ratios.
    pub intake_pairs: Vec<(String, String)>,
    /// (a later herdsman build's row, the first build's row in the same mode), with several
    /// --herdsman-bin: the after ÷ before ratios.
    pub build_pairs: Vec<(String, String)>,
    pub runs: Vec<Run>,
    /// (label, why it was not run or stopped being run).
    pub not_run: Vec<(String, String)>,
    /// (label with its worker count, file name, text).
    pub configs: Vec<(String, String, String)>,
    /// The idle-connection sweep; None when it was not asked for.
    pub idle: Option<IdleSweep>,
    /// The plots written beside the results file: (what they show, file name).
    pub plots: Vec<(String, String)>,
}

/// Reads one figure out of a run.
pub type Extract = fn(&Run) -> f64;

/// One figure: its heading, its column's heading in a table of several figures, how to read it
/// out of a run, and how to print it.
struct Figure {
    title: &'static str,
    column: &'static str,
    value: Extract,
    format: fn(f64) -> String,
}

const CPU_FIGURE: Figure = Figure {
    title: "CPU-µs per request (the process tree's utime+stime ÷ requests; lower is better)",
    column: "CPU-µs/req",
    value: |r| r.cpu_us_per_request,
    format: |v| format!("{v:.2}"),
};

const USER_CPU_FIGURE: Figure = Figure {
    title: "User CPU-µs per request (utime ÷ requests: the proxy's own code; lower is better)",
    column: "user µs/req",
    value: |r| r.user_us_per_request,
    format: |v| format!("{v:.2}"),
};

const KERNEL_CPU_FIGURE: Figure = Figure {
    title: "Kernel CPU-µs per request (stime ÷ requests: mostly loopback TCP; lower is better)",
    column: "kernel µs/req",
    value: |r| r.kernel_us_per_request,
    format: |v| format!("{v:.2}"),
};

const REQUESTS_PER_SEC_FIGURE: Figure = Figure {
    title: "Requests/s (wrk)",
    column: "req/s",
    value: |r| r.wrk.requests_per_sec,
    format: thousands,
};

const ERRORS_FIGURE: Figure = Figure {
    title: "Errors per run (wrk socket errors + responses with status ≥ 400)",
    column: "errors",
    value: |r| r.errors() as f64,
    format: |v| format!("{v:.0}"),
};

/// A table each, in this order, per section.
const FIGURES: &[Figure] = &[
    CPU_FIGURE,
    USER_CPU_FIGURE,
    KERNEL_CPU_FIGURE,
    REQUESTS_PER_SEC_FIGURE,
    opened::STEADY_FIGURE,
    opened::WHOLE_RUN_FIGURE,
    Figure {
        title: "p50 latency, µs (wrk --latency)",
        column: "p50 µs",
        value: |r| r.wrk.p50_us,
        format: |v| format!("{v:.0}"),
    },
    Figure {
        title: "p99 latency, µs (wrk --latency)",
        column: "p99 µs",
        value: |r| r.wrk.p99_us,
        format: |v| format!("{v:.0}"),
    },
    Figure {
        title: "Max latency, µs (wrk's slowest response)",
        column: "max µs",
        value: |r| r.wrk.max_us,
        format: |v| format!("{v:.0}"),
    },
    Figure {
        title: "Peak RSS, MiB (VmHWM summed over the process tree)",
        column: "peak RSS MiB",
        value: |r| r.peak_rss_kib as f64 / 1024.0,
        format: |v| format!("{v:.1}"),
    },
    ERRORS_FIGURE,
];

impl Session {
    /// One figure of one row over the rounds: (round, value) for each of its runs that gave it
    /// (a figure a run could not give is NaN, and left out).
    fn side(&self, label: &str, cell: Cell, value: Extract) -> Vec<(u32, f64)> {
        self.runs
            .iter()
            .filter(|r| r.label == label && r.cell() == cell)
            .map(|r| (r.round, value(r)))
            .filter(|(_, v)| !v.is_nan())
            .collect()
    }

    fn values(&self, label: &str, cell: Cell, value: Extract) -> Vec<f64> {
        let side = self.side(label, cell, value);
        side.into_iter().map(|(_, v)| v).collect()
    }

    /// The median over rounds of one figure of one row, or None if it never ran.
    pub fn median(&self, label: &str, cell: Cell, value: Extract) -> Option<f64> {
        spread(&self.values(label, cell, value)).map(|s| s.median)
    }

    /// `numerator ÷ denominator`, paired round by round.
    fn paired(
        &self,
        (numerator, denominator): (&str, &str),
        cell: Cell,
        value: Extract,
    ) -> PairedRatio {
        PairedRatio::of(
            &self.side(numerator, cell, value),
            &self.side(denominator, cell, value),
        )
    }

    /// The sections of the figures: each worker count, and in it each server.
    fn sections(&self) -> impl Iterator<Item = (u32, ServerKind)> + '_ {
        self.workers
            .iter()
            .flat_map(|&w| self.servers.iter().map(move |&server| (w, server)))
    }
}

/// "1 worker, own backend": a section's name.
pub fn section_name(workers: u32, server: ServerKind) -> String {
    format!("{}, {}", worker_count(workers), server.written())
}

/// The whole results file.
pub fn render(session: &Session) -> String {
    let mut md = String::new();
    let s = session;
    let _ = writeln!(
        md,
        "# herdsman vs HAProxy vs nginx: proxy cost, speed, server connections and idle connections\n"
    );
    let _ = writeln!(
        md,
        "Generated by `herdsman-bench compare` on {}. Run it again with:\n\n```sh\n{}\n```\n",
        s.date, s.command
    );
    write_setup(&mut md, s);

    if !s.intake_modes.is_empty() {
        let _ = writeln!(
            md,
            "herdsman ran once per intake mode ({}): a separate row per mode, each started with \
             `intake = \"MODE\"` in its config, all taking their turns in the same rounds.\n",
            s.intake_modes.join(", ")
        );
    }

    if !s.not_run.is_empty() {
        let _ = writeln!(md, "## Not run\n");
        for (label, reason) in &s.not_run {
            let _ = writeln!(md, "- **{label}**: {}", one_line(reason));
        }
        let _ = writeln!(md);
    }

    goals::write(&mut md, &goals::evaluate(s));

    if !s.plots.is_empty() {
        let _ = writeln!(md, "## Plots\n");
        for (what, file) in &s.plots {
            let _ = writeln!(md, "{what}:\n\n![{what}]({file})\n");
        }
    }

    for (workers, server) in s.sections() {
        let section = section_name(workers, server);
        let _ = writeln!(md, "## {section}\n");
        opened::write_beside(&mut md, s, workers, server);
        for figure in FIGURES {
            let _ = writeln!(md, "### {}, {section}\n", figure.title);
            write_figure_table(&mut md, s, workers, server, figure);
        }
        ratios::write(&mut md, s, workers, server);
    }

    if let Some(sweep) = &s.idle {
        idle::write(&mut md, sweep);
    }

    let _ = writeln!(md, "## Versions and machine\n");
    let _ = writeln!(md, "| what | value |\n|---|---|");
    for (what, value) in s.versions.iter().chain(&s.machine) {
        let _ = writeln!(md, "| {what} | `{}` |", value.replace('|', "\\|"));
    }
    let _ = writeln!(md);

    write_configs(&mut md, s);
    write_runs(&mut md, s);
    if let Some(sweep) = &s.idle {
        idle::write_runs(&mut md, sweep);
    }
    md
}

/// What was run, against which servers, how each proxy was configured, and how each figure is read.
fn write_setup(md: &mut String, s: &Session) {
    let servers: Vec<&str> = s.servers.iter().map(|k| k.written()).collect();
    let _ = writeln!(
        md,
        "Each proxy ran as its own process in front of a server that is a process of its own, once \
         per server ({}): the own backend is `herdsman-bench backend`, answering every request \
         with a 19-byte body; the nginx server is Debian's nginx with one worker, no access log, \
         answering every request with the same 19 bytes (`return 200`). Neither server ever \
         closes a keep-alive connection itself during a run (`keepalive_requests 1000000`, \
         `keepalive_timeout {CLIENT_IDLE_SECONDS}s` for nginx; no limit in the own backend), so \
         every server connection opened was the proxy's doing. Every proxy was started afresh \
         with each worker count ({}), in front of each server. In each of {} round(s) the targets \
         took turns, in an order rotating by one each round: `wrk -t1 -cC -d{}s --latency` for \
         each connection count C ({}) and each server, the server alone first as a reference, \
         after a {} s warm-up per target. Figures are the median over rounds with the min–max \
         spread; `n` is the number of runs behind each. CPU is read from /proc/PID/stat just \
         before and after each wrk run, summed over the proxy and its child processes; in the \
         `{SERVER_ALONE_LABEL}` row it is the server's own CPU.\n",
        servers.join(" and "),
        and_list(&s.workers),
        s.rounds,
        s.seconds,
        and_list(&s.connections),
        s.warmup_seconds,
    );
    let _ = writeln!(
        md,
        "herdsman runs with the defaults a user gets: its configuration sets no `[limits]`, so it \
         keeps the idle server connections its own default keeps. HAProxy (`http-reuse always`, \
         its idle-connection descriptor ratios raised) and nginx (upstream `keepalive` of at \
         least the largest client count per worker, `keepalive_requests 1000000`) are configured \
         to hold every server connection the run opens. Every proxy adds X-Forwarded-For, -Proto \
         and -Host (herdsman always does, so HAProxy and nginx are configured to do the same \
         work), listens with a queue of 4,096, keeps idle keep-alive clients for \
         {CLIENT_IDLE_SECONDS} s and has its access log off (see Configurations).\n"
    );
    opened::write_how(md, s.seconds);
}

fn write_figure_table(
    md: &mut String,
    s: &Session,
    workers: u32,
    server: ServerKind,
    figure: &Figure,
) {
    write_head(
        md,
        &s.connections,
        ("| target |", "|---|"),
        |c| format!(" c={c} median | c={c} min–max | n |"),
        "---:|---:|---:|",
    );
    for label in &s.labels {
        let _ = write!(md, "| {label} |");
        for &connections in &s.connections {
            let cell = Cell {
                server,
                workers,
                connections,
            };
            match spread(&s.values(label, cell, figure.value)) {
                Some(v) => {
                    let _ = write!(
                        md,
                        " {} | {}–{} | {} |",
                        (figure.format)(v.median),
                        (figure.format)(v.min),
                        (figure.format)(v.max),
                        v.count
                    );
                }
                None => {
                    let _ = write!(md, " not run | | 0 |");
                }
            }
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md);
}

/// A table's header and alignment lines: the `lead` columns (header, alignment), then the
/// columns `per_connection` names for each connection count, aligned by `alignment`.
fn write_head(
    md: &mut String,
    connections: &[u32],
    (lead, lead_alignment): (&str, &str),
    per_connection: impl Fn(u32) -> String,
    alignment: &str,
) {
    let _ = write!(md, "{lead}");
    for &c in connections {
        let _ = write!(md, "{}", per_connection(c));
    }
    let _ = write!(md, "\n{lead_alignment}");
    for _ in connections {
        let _ = write!(md, "{alignment}");
    }
    let _ = writeln!(md);
}

fn write_configs(md: &mut String, s: &Session) {
    let _ = writeln!(md, "## Configurations\n");
    for (label, file, text) in s.server_configs.iter().chain(&s.configs) {
        let _ = writeln!(
            md,
            "<details><summary>{label}: {file}</summary>\n\n```\n{}\n```\n\n</details>\n",
            text.trim_end()
        );
    }
}

fn write_runs(md: &mut String, s: &Session) {
    let rows = s.runs.iter().map(|r| {
        let steady = r.opened.steady.map_or(["–".to_string(), "–".to_string()], |w| {
            [w.accepted.to_string(), w.requests.to_string()]
        });
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} | {} |",
            r.workers,
            r.server.written(),
            r.round,
            r.connections,
            r.label,
            r.wrk.requests,
            thousands(r.wrk.requests_per_sec),
            r.wrk.p50_us,
            r.wrk.p99_us,
            r.wrk.max_us,
            r.cpu_us_per_request,
            r.user_us_per_request,
            r.peak_rss_kib as f64 / 1024.0,
            r.opened.accepted,
            steady[0],
            steady[1],
            r.wrk.socket_errors,
            r.wrk.bad_status
        )
    });
    write_details_table(
        md,
        "Every run",
        "| workers | server | round | c | target | requests | req/s | p50 µs | p99 µs | max µs | CPU-µs/req | user µs/req | peak RSS MiB | server accepted | server accepted, steady | server requests, steady | socket errors | status ≥ 400 |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        rows,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clean wrk report at `rps` requests/s.
    pub(super) fn wrk_report(rps: f64) -> WrkReport {
        WrkReport {
            requests: 1000,
            seconds: 1.0,
            requests_per_sec: rps,
            p50_us: 800.0,
            p99_us: 1900.0,
            max_us: 5000.0,
            socket_errors: 0,
            bad_status: 0,
        }
    }

    pub(super) fn run(round: u32, label: &str, cpu: f64, rps: f64) -> Run {
        Run {
            round,
            server: ServerKind::Own,
            workers: 1,
            label: label.to_string(),
            connections: 50,
            wrk: wrk_report(rps),
            cpu_us_per_request: cpu,
            user_us_per_request: cpu / 4.0,
            kernel_us_per_request: cpu * 3.0 / 4.0,
            peak_rss_kib: 10240,
            opened: ServerOpened {
                accepted: 50,
                steady: Some(Between {
                    accepted: 0,
                    requests: 500,
                }),
            },
        }
    }

    /// The cell of `run`'s defaults: the own backend, 1 worker, c=50.
    pub(super) const CELL: Cell = Cell {
        server: ServerKind::Own,
        workers: 1,
        connections: 50,
    };

    /// A session of one round with `labels` and `runs`, in front of the own backend.
    fn one_server(labels: &[&str], runs: Vec<Run>) -> Session {
        Session {
            rounds: 1,
            servers: vec![ServerKind::Own],
            workers: vec![1],
            connections: vec![50],
            labels: labels.iter().map(ToString::to_string).collect(),
            runs,
            ..Session::default()
        }
    }

    #[test]
    fn ratios_pair_runs_of_the_same_round() {
        let session = Session {
            rounds: 2,
            herdsman_labels: vec!["herdsman".into()],
            peer_labels: vec!["haproxy".into()],
            ..one_server(
                &["herdsman", "haproxy"],
                vec![
                    run(1, "herdsman", 18.0, 50_000.0),
                    run(1, "haproxy", 15.0, 55_000.0),
                    run(2, "herdsman", 16.0, 52_000.0),
                    run(2, "haproxy", 16.0, 54_000.0),
                ],
            )
        };
        let cpu: Extract = |r| r.cpu_us_per_request;
        let ratio = session.paired(("herdsman", "haproxy"), CELL, cpu);
        assert_eq!(ratio.rounds, vec![1.2, 1.0]);
        assert_eq!(ratio.of_medians, Some(17.0 / 15.5));
        let two = Cell { workers: 2, ..CELL };
        assert!(session
            .paired(("herdsman", "haproxy"), two, cpu)
            .rounds
            .is_empty());
        let nginx = Cell {
            server: ServerKind::Nginx,
            ..CELL
        };
        assert!(session
            .paired(("herdsman", "haproxy"), nginx, cpu)
            .rounds
            .is_empty());
        let md = render(&session);
        assert!(md.contains("| CPU-µs per request | herdsman ÷ haproxy | **1.10** (1.00–1.20) |"));
        // The user-space part apart (a quarter of the total in these runs), paired the same way.
        assert!(
            md.contains("| User CPU-µs per request | herdsman ÷ haproxy | **1.10** (1.00–1.20) |")
        );
        assert!(md.contains("### User CPU-µs per request (utime ÷ requests"));
        assert!(md.contains("| herdsman | 17.00 | 16.00–18.00 | 2 |"));
    }

    /// A run of `label` whose CPU per request is `user` µs in user mode and `kernel` µs in the
    /// kernel.
    fn split_run(round: u32, label: &str, (user, kernel): (f64, f64)) -> Run {
        Run {
            user_us_per_request: user,
            kernel_us_per_request: kernel,
            ..run(round, label, user + kernel, 50_000.0)
        }
    }

    /// The table under the heading that starts with `heading`: its lines up to the blank line.
    fn table_under<'a>(md: &'a str, heading: &str) -> &'a str {
        let at = md
            .find(heading)
            .unwrap_or_else(|| panic!("no {heading:?} in {md}"));
        let table = &md[at..];
        let start = table.find("\n|").map_or(table.len(), |i| i + 1);
        let table = &table[start..];
        &table[..table.find("\n\n").unwrap_or(table.len())]
    }

    #[test]
    fn user_and_kernel_cpu_have_tables_and_ratios_of_their_own() {
        let session = Session {
            rounds: 2,
            herdsman_labels: vec!["before".into(), "after".into()],
            peer_labels: vec!["haproxy".into(), "nginx".into()],
            build_pairs: vec![("after".into(), "before".into())],
            ..one_server(
                &["before", "after", "haproxy", "nginx"],
                vec![
                    split_run(1, "before", (2.0, 9.0)),
                    split_run(1, "after", (1.5, 9.5)),
                    split_run(1, "haproxy", (3.0, 9.5)),
                    split_run(1, "nginx", (2.5, 9.8)),
                    split_run(2, "before", (2.2, 9.2)),
                    split_run(2, "after", (1.3, 9.3)),
                    split_run(2, "haproxy", (3.2, 9.6)),
                    split_run(2, "nginx", (2.2, 10.0)),
                ],
            )
        };
        let md = render(&session);
        let user = table_under(
            &md,
            "### User CPU-µs per request (utime ÷ requests: the proxy's own code; lower is better), 1 worker, own backend",
        );
        assert!(user.contains("| after | 1.40 | 1.30–1.50 | 2 |"), "{user}");
        assert!(user.contains("| nginx | 2.35 | 2.20–2.50 | 2 |"), "{user}");
        let kernel = table_under(
            &md,
            "### Kernel CPU-µs per request (stime ÷ requests: mostly loopback TCP; lower is better), 1 worker, own backend",
        );
        assert!(
            kernel.contains("| after | 9.40 | 9.30–9.50 | 2 |"),
            "{kernel}"
        );
        // The total stays utime + stime.
        let total = table_under(&md, "### CPU-µs per request (the process tree's");
        assert!(
            total.contains("| after | 10.80 | 10.60–11.00 | 2 |"),
            "{total}"
        );

        // User: 1.40 ÷ 3.10 of the medians, 1.5 ÷ 3.0 and 1.3 ÷ 3.2 round by round; against
        // nginx 1.40 ÷ 2.35, 1.5 ÷ 2.5 and 1.3 ÷ 2.2; the total 10.80 ÷ 12.65, 11.0 ÷ 12.5 and
        // 10.6 ÷ 12.8.
        let peers = table_under(&md, "### Ratios: herdsman ÷ peer, 1 worker, own backend");
        assert!(
            peers.contains("| User CPU-µs per request | after ÷ haproxy | **0.45** (0.41–0.50) |"),
            "{peers}"
        );
        assert!(
            peers.contains("| User CPU-µs per request | after ÷ nginx | **0.60** (0.59–0.60) |"),
            "{peers}"
        );
        assert!(
            peers.contains("| CPU-µs per request | after ÷ haproxy | **0.85** (0.83–0.88) |"),
            "{peers}"
        );
        // 1.40 ÷ 2.10; 1.5 ÷ 2.0 and 1.3 ÷ 2.2.
        let builds = table_under(
            &md,
            "### Ratios: herdsman build ÷ the first build, 1 worker, own backend",
        );
        assert!(
            builds
                .contains("| User CPU-µs per request | after ÷ before | **0.667** (0.591–0.750) |"),
            "{builds}"
        );
        // Every run gives CPU and its user part: 1.5 + 9.5, then 10 MiB of RSS.
        assert!(md.contains("| 1 | own backend | 1 | 50 | after | 1000 | 50,000 | 800 | 1900 | 5000 | 11.00 | 1.50 | 10.0 |"), "{md}");
    }

    #[test]
    fn intake_modes_are_divided_by_reuseport() {
        let (b, r) = ("herdsman (balanced)", "herdsman (reuseport)");
        let session = Session {
            rounds: 2,
            herdsman_labels: vec![b.into(), r.into()],
            intake_modes: vec!["balanced".into(), "reuseport".into()],
            intake_pairs: vec![(b.into(), r.into())],
            ..one_server(
                &[b, r],
                vec![
                    run(1, b, 10.2, 49_000.0),
                    run(1, r, 10.0, 50_000.0),
                    run(2, b, 10.0, 51_000.0),
                    run(2, r, 10.0, 50_000.0),
                ],
            )
        };
        let md = render(&session);
        assert!(md.contains("### Ratios: intake mode ÷ reuseport, 1 worker, own backend"));
        assert!(md.contains(
            "| CPU-µs per request | herdsman (balanced) ÷ herdsman (reuseport) | **1.010** (1.000–1.020) |"
        ));
        assert!(md.contains(
            "| Requests/s | herdsman (balanced) ÷ herdsman (reuseport) | **1.000** (0.980–1.020) |"
        ));
        assert!(md.contains("| herdsman (reuseport) | 10.00 | 10.00–10.00 | 2 |"));
        // No peer measured: the peer ratios say so, the intake ratios still appear.
        assert!(md.contains("No ratio: herdsman and at least one peer"));
        assert!(!md.contains("herdsman build ÷ the first build"));
    }

    #[test]
    fn later_builds_are_divided_by_the_first() {
        let session = Session {
            herdsman_labels: vec!["before".into(), "after".into()],
            build_pairs: vec![("after".into(), "before".into())],
            ..one_server(
                &["before", "after"],
                vec![
                    run(1, "before", 16.0, 50_000.0),
                    run(1, "after", 12.0, 60_000.0),
                ],
            )
        };
        let md = render(&session);
        assert!(md.contains("### Ratios: herdsman build ÷ the first build, 1 worker, own backend"));
        assert!(md.contains("| CPU-µs per request | after ÷ before | **0.750** (0.750–0.750) |"));
        assert!(md.contains("| Requests/s | after ÷ before | **1.200** (1.200–1.200) |"));
    }

    #[test]
    fn intake_ratios_need_reuseport() {
        let session = Session {
            intake_modes: vec!["balanced".into(), "shared".into()],
            ..one_server(&[], Vec::new())
        };
        let md = render(&session);
        assert!(
            md.contains("`reuseport` was not among the intake modes measured (balanced, shared)")
        );
        let single = Session {
            intake_modes: vec!["balanced".into()],
            ..session
        };
        assert!(!render(&single).contains("intake mode ÷ reuseport"));
    }

    #[test]
    fn a_target_without_runs_says_not_run() {
        let session = Session {
            not_run: vec![("herdsman".into(), "cargo build failed".into())],
            ..one_server(&["herdsman"], Vec::new())
        };
        let md = render(&session);
        assert!(md.contains("- **herdsman**: cargo build failed"));
        assert!(md.contains("| herdsman | not run | | 0 |"));
        assert!(md.contains("| herdsman | 50 | – | – | – | – | – |"));
    }

    #[test]
    fn tables_are_grouped_per_worker_count_then_server() {
        let two = |r: Run| Run { workers: 2, ..r };
        let nginx = |r: Run| Run {
            server: ServerKind::Nginx,
            ..r
        };
        let session = Session {
            servers: vec![ServerKind::Own, ServerKind::Nginx],
            workers: vec![1, 2],
            ..one_server(
                &["herdsman"],
                vec![
                    run(1, "herdsman", 10.0, 50_000.0),
                    nginx(run(1, "herdsman", 11.0, 40_000.0)),
                    two(run(1, "herdsman", 12.0, 90_000.0)),
                    two(nginx(run(1, "herdsman", 13.0, 70_000.0))),
                ],
            )
        };
        let md = render(&session);
        let at = |text: &str| md.find(text).unwrap_or_else(|| panic!("{text:?} in {md}"));
        let order = [
            at("## 1 worker, own backend\n"),
            at("| herdsman | 50,000 |"),
            at("## 1 worker, nginx server\n"),
            at("| herdsman | 40,000 |"),
            at("## 2 workers, own backend\n"),
            at("| herdsman | 90,000 |"),
            at("## 2 workers, nginx server\n"),
            at("| herdsman | 70,000 |"),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        assert!(
            md.contains("### Max latency, µs (wrk's slowest response), 2 workers, nginx server")
        );
        assert!(md.contains("| herdsman | 5000 | 5000–5000 | 1 |"));
        assert!(md.contains("with each worker count (1 and 2)"));
        assert!(md.contains("once per server (own backend and nginx server)"));
    }

    #[test]
    fn connections_opened_are_shown_beside_cpu_and_requests() {
        let mut churning = run(1, "herdsman", 10.0, 50_000.0);
        churning.opened = ServerOpened {
            accepted: 120,
            steady: Some(Between {
                accepted: 25,
                requests: 2000,
            }),
        };
        let mut unread = run(1, "haproxy", 12.0, 45_000.0);
        unread.opened.steady = None;
        let session = one_server(&["herdsman", "haproxy"], vec![churning, unread]);
        let md = render(&session);
        assert!(md.contains(
            "### Server connections opened per request, beside CPU and requests/s, 1 worker, own backend"
        ));
        // 25 ÷ 2000 at steady load; 120 ÷ 1000 over the whole run.
        assert!(
            md.contains("| herdsman | 50 | 10.00 | 50,000 | 0.0125 | 0.1200 | 0 |"),
            "{md}"
        );
        // A run whose reading in between failed has no steady figure, and says so.
        assert!(
            md.contains("| haproxy | 50 | 12.00 | 45,000 | – | 0.0500 | 0 |"),
            "{md}"
        );
        assert!(md.contains("| 1 | own backend | 1 | 50 | herdsman | 1000 |"));
        assert!(md.contains("| 120 | 25 | 2000 | 0 | 0 |"));
    }
}
