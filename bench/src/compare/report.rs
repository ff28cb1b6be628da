//! The results file of `compare`: the targets and whether they are met, the plots, every figure
//! per worker count as a Markdown table of median and min–max over rounds, the herdsman ÷ peer
//! ratios, the idle sweep, what was run and on what, the configurations, and every single run.
//!
//! Layout:
//! - `goals` — the targets of the comparison, evaluated from the medians
//! - `idle`  — the idle sweep's figures and tables

pub mod goals;
pub mod idle;

use std::fmt::Write as _;

use crate::kit::markdown::{and_list, one_line, thousands, worker_count, write_details_table};
use crate::kit::paired::PairedRatio;
use crate::kit::stats::spread;
use crate::kit::wrk::WrkReport;
use idle::IdleSweep;

/// The reference row: wrk straight at the backend, no proxy. Its CPU figure is the backend's own.
pub const BACKEND_LABEL: &str = "backend alone";

/// One wrk run against one target.
#[derive(Debug, Clone)]
pub struct Run {
    pub round: u32,
    /// Worker processes / threads the target ran (the backend's row: the pass it was measured in).
    pub workers: u32,
    pub label: String,
    pub connections: u32,
    pub wrk: WrkReport,
    /// CPU time of the target's process tree during the run ÷ requests completed.
    pub cpu_us_per_request: f64,
    /// VmHWM of the target's process tree after the run (it only grows), in KiB.
    pub peak_rss_kib: u64,
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
    /// Worker counts, each a separate pass with freshly started proxies.
    pub workers: Vec<u32>,
    pub seconds: u32,
    pub rounds: u32,
    pub warmup_seconds: u32,
    pub connections: Vec<u32>,
    /// Row order: the backend reference first, then the targets in the order they ran.
    pub labels: Vec<String>,
    /// Rows built from herdsman (the numerators of the ratios).
    pub herdsman_labels: Vec<String>,
    /// Peer rows that were measured ("haproxy", "nginx").
    pub peer_labels: Vec<String>,
    /// herdsman intake modes asked for with --intake (empty: herdsman's default, one row).
    pub intake_modes: Vec<String>,
    /// (a herdsman row in some intake mode, the same build's `reuseport` row): the intake ratios.
    pub intake_pairs: Vec<(String, String)>,
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

/// One figure: its heading, how to read it out of a run, and how to print it.
struct Figure {
    title: &'static str,
    value: Extract,
    format: fn(f64) -> String,
}

const FIGURES: &[Figure] = &[
    Figure {
        title: "CPU-µs per request (the process tree's utime+stime ÷ requests; lower is better)",
        value: |r| r.cpu_us_per_request,
        format: |v| format!("{v:.2}"),
    },
    Figure {
        title: "Requests/s (wrk)",
        value: |r| r.wrk.requests_per_sec,
        format: thousands,
    },
    Figure {
        title: "p50 latency, µs (wrk --latency)",
        value: |r| r.wrk.p50_us,
        format: |v| format!("{v:.0}"),
    },
    Figure {
        title: "p99 latency, µs (wrk --latency)",
        value: |r| r.wrk.p99_us,
        format: |v| format!("{v:.0}"),
    },
    Figure {
        title: "Max latency, µs (wrk's slowest response)",
        value: |r| r.wrk.max_us,
        format: |v| format!("{v:.0}"),
    },
    Figure {
        title: "Peak RSS, MiB (VmHWM summed over the process tree)",
        value: |r| r.peak_rss_kib as f64 / 1024.0,
        format: |v| format!("{v:.1}"),
    },
    Figure {
        title: "Errors per run (wrk socket errors + responses with status ≥ 400)",
        value: |r| (r.wrk.socket_errors + r.wrk.bad_status) as f64,
        format: |v| format!("{v:.0}"),
    },
];

/// Ratios printed for each herdsman row against each peer.
const RATIOS: &[(&str, Extract)] = &[
    ("CPU-µs per request", |r| r.cpu_us_per_request),
    ("Requests/s", |r| r.wrk.requests_per_sec),
];

impl Session {
    /// One figure of one row over the rounds: (round, value) for each of its runs.
    fn side(&self, label: &str, workers: u32, connections: u32, value: Extract) -> Vec<(u32, f64)> {
        self.runs
            .iter()
            .filter(|r| r.label == label && r.workers == workers && r.connections == connections)
            .map(|r| (r.round, value(r)))
            .collect()
    }

    fn values(&self, label: &str, workers: u32, connections: u32, value: Extract) -> Vec<f64> {
        let side = self.side(label, workers, connections, value);
        side.into_iter().map(|(_, v)| v).collect()
    }

    /// The median over rounds of one figure of one row, or None if it never ran.
    pub fn median(
        &self,
        label: &str,
        workers: u32,
        connections: u32,
        value: Extract,
    ) -> Option<f64> {
        spread(&self.values(label, workers, connections, value)).map(|s| s.median)
    }

    /// `numerator ÷ denominator`, paired round by round.
    fn paired(
        &self,
        (numerator, denominator): (&str, &str),
        workers: u32,
        connections: u32,
        value: Extract,
    ) -> PairedRatio {
        PairedRatio::of(
            &self.side(numerator, workers, connections, value),
            &self.side(denominator, workers, connections, value),
        )
    }
}

/// The whole results file.
pub fn render(session: &Session) -> String {
    let mut md = String::new();
    let s = session;
    let _ = writeln!(
        md,
        "# herdsman vs HAProxy vs nginx: proxy cost, speed and idle connections\n"
    );
    let _ = writeln!(
        md,
        "Generated by `herdsman-bench compare` on {}. Run it again with:\n\n```sh\n{}\n```\n",
        s.date, s.command
    );
    let _ = writeln!(
        md,
        "Each proxy ran as its own process in front of the same `herdsman-bench backend` (a separate \
         process answering every request with a 19-byte body), once with each worker count ({}), \
         started afresh for each. In each of {} round(s) the targets took turns, in an order \
         rotating by one each round: `wrk -t1 -cC -d{}s --latency` for each connection count C \
         ({}), the backend alone first as a reference, after a {} s warm-up per target. Figures are \
         the median over rounds with the min–max spread; `n` is the number of runs behind each. \
         CPU is read from /proc/PID/stat just before and after each wrk run, summed over the proxy \
         and its child processes; in the `{BACKEND_LABEL}` row it is the backend's own CPU. Every \
         proxy keeps connections to the backend alive and adds X-Forwarded-For, -Proto and -Host \
         (herdsman always does, so HAProxy and nginx are configured to do the same work); access \
         logs are off; idle keep-alive clients are kept for {} s; each is configured to hold \
         every connection the run opens (see Configurations).\n",
        and_list(&s.workers),
        s.rounds,
        s.seconds,
        and_list(&s.connections),
        s.warmup_seconds,
        crate::kit::proxies::CLIENT_IDLE_SECONDS,
    );

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

    for &workers in &s.workers {
        let _ = writeln!(md, "## {}\n", worker_count(workers));
        for figure in FIGURES {
            let _ = writeln!(md, "### {}, {}\n", figure.title, worker_count(workers));
            write_figure_table(&mut md, s, workers, figure);
        }
        write_ratios(&mut md, s, workers);
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

fn write_figure_table(md: &mut String, s: &Session, workers: u32, figure: &Figure) {
    let _ = write!(md, "| target |");
    for c in &s.connections {
        let _ = write!(md, " c={c} median | c={c} min–max | n |");
    }
    let _ = write!(md, "\n|---|");
    for _ in &s.connections {
        let _ = write!(md, "---:|---:|---:|");
    }
    let _ = writeln!(md);
    for label in &s.labels {
        let _ = write!(md, "| {label} |");
        for &c in &s.connections {
            match spread(&s.values(label, workers, c, figure.value)) {
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

fn write_ratios(md: &mut String, s: &Session, workers: u32) {
    let _ = writeln!(
        md,
        "### Ratios: herdsman ÷ peer, {}\n",
        worker_count(workers)
    );
    if s.herdsman_labels.is_empty() || s.peer_labels.is_empty() {
        let _ = writeln!(
            md,
            "No ratio: herdsman and at least one peer must both have been measured.\n"
        );
    } else {
        let _ = writeln!(
            md,
            "The ratio of the medians, and in brackets the range of the ratio taken round by round \
             (each round runs both side by side). Below 1.00 means herdsman uses less CPU per request \
             or serves fewer requests/s.\n"
        );
        let pairs: Vec<(String, String)> = s
            .herdsman_labels
            .iter()
            .flat_map(|h| s.peer_labels.iter().map(move |p| (h.clone(), p.clone())))
            .collect();
        write_ratio_table(md, s, workers, &pairs, 2);
    }
    if s.intake_modes.len() > 1 {
        write_intake_ratios(md, s, workers);
    }
}

/// Each intake mode ÷ the same build's `reuseport` row, when several modes were measured.
fn write_intake_ratios(md: &mut String, s: &Session, workers: u32) {
    let _ = writeln!(
        md,
        "### Ratios: intake mode ÷ reuseport, {}\n",
        worker_count(workers)
    );
    if s.intake_pairs.is_empty() {
        let _ = writeln!(
            md,
            "No ratio: `reuseport` was not among the intake modes measured ({}).\n",
            s.intake_modes.join(", ")
        );
        return;
    }
    let _ = writeln!(
        md,
        "Each herdsman intake mode against `reuseport` (one SO_REUSEPORT socket per worker), same \
         binary, same run: the ratio of the medians, and in brackets the range of the ratio taken \
         round by round. For CPU-µs per request below 1.00 is cheaper than reuseport; for \
         requests/s above 1.00 is faster.\n"
    );
    write_ratio_table(md, s, workers, &s.intake_pairs, 3);
}

/// One row per figure in RATIOS and (numerator, denominator) pair, one column per connection count.
/// `decimals`: 2 for the peer comparison, 3 where a few percent decide (the intake modes).
fn write_ratio_table(
    md: &mut String,
    s: &Session,
    workers: u32,
    pairs: &[(String, String)],
    decimals: usize,
) {
    let _ = write!(md, "| figure | ratio |");
    for c in &s.connections {
        let _ = write!(md, " c={c} |");
    }
    let _ = write!(md, "\n|---|---|");
    for _ in &s.connections {
        let _ = write!(md, "---:|");
    }
    let _ = writeln!(md);
    for (name, value) in RATIOS {
        for (numerator, denominator) in pairs {
            let _ = write!(md, "| {name} | {numerator} ÷ {denominator} |");
            for &c in &s.connections {
                let pair = (numerator.as_str(), denominator.as_str());
                let ratio = s.paired(pair, workers, c, *value);
                match (ratio.of_medians, ratio.per_round()) {
                    (Some(of_medians), Some(r)) => {
                        let _ = write!(
                            md,
                            " **{of_medians:.decimals$}** ({:.decimals$}–{:.decimals$}) |",
                            r.min, r.max
                        );
                    }
                    _ => {
                        let _ = write!(md, " — |");
                    }
                }
            }
            let _ = writeln!(md);
        }
    }
    let _ = writeln!(md);
}

fn write_configs(md: &mut String, s: &Session) {
    let _ = writeln!(md, "## Configurations\n");
    for (label, file, text) in &s.configs {
        let _ = writeln!(
            md,
            "<details><summary>{label}: {file}</summary>\n\n```\n{}\n```\n\n</details>\n",
            text.trim_end()
        );
    }
}

fn write_runs(md: &mut String, s: &Session) {
    let rows = s.runs.iter().map(|r| {
        format!(
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} | {} | {} |",
            r.workers,
            r.round,
            r.connections,
            r.label,
            r.wrk.requests,
            thousands(r.wrk.requests_per_sec),
            r.wrk.p50_us,
            r.wrk.p99_us,
            r.wrk.max_us,
            r.cpu_us_per_request,
            r.peak_rss_kib as f64 / 1024.0,
            r.wrk.socket_errors,
            r.wrk.bad_status
        )
    });
    write_details_table(
        md,
        "Every run",
        "| workers | round | c | target | requests | req/s | p50 µs | p99 µs | max µs | CPU-µs/req | peak RSS MiB | socket errors | status ≥ 400 |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
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
            workers: 1,
            label: label.to_string(),
            connections: 50,
            wrk: wrk_report(rps),
            cpu_us_per_request: cpu,
            peak_rss_kib: 10240,
        }
    }

    #[test]
    fn ratios_pair_runs_of_the_same_round() {
        let session = Session {
            rounds: 2,
            workers: vec![1],
            connections: vec![50],
            labels: vec!["herdsman".into(), "haproxy".into()],
            herdsman_labels: vec!["herdsman".into()],
            peer_labels: vec!["haproxy".into()],
            runs: vec![
                run(1, "herdsman", 18.0, 50_000.0),
                run(1, "haproxy", 15.0, 55_000.0),
                run(2, "herdsman", 16.0, 52_000.0),
                run(2, "haproxy", 16.0, 54_000.0),
            ],
            ..Session::default()
        };
        let ratio = session.paired(("herdsman", "haproxy"), 1, 50, |r| r.cpu_us_per_request);
        assert_eq!(ratio.rounds, vec![1.2, 1.0]);
        assert_eq!(ratio.of_medians, Some(17.0 / 15.5));
        assert!(session
            .paired(("herdsman", "haproxy"), 2, 50, |r| r.cpu_us_per_request)
            .rounds
            .is_empty());
        let md = render(&session);
        assert!(md.contains("| CPU-µs per request | herdsman ÷ haproxy | **1.10** (1.00–1.20) |"));
        assert!(md.contains("| herdsman | 17.00 | 16.00–18.00 | 2 |"));
    }

    #[test]
    fn intake_modes_are_divided_by_reuseport() {
        let (b, r) = ("herdsman (balanced)", "herdsman (reuseport)");
        let session = Session {
            rounds: 2,
            workers: vec![1],
            connections: vec![50],
            labels: vec![b.into(), r.into()],
            herdsman_labels: vec![b.into(), r.into()],
            intake_modes: vec!["balanced".into(), "reuseport".into()],
            intake_pairs: vec![(b.into(), r.into())],
            runs: vec![
                run(1, b, 10.2, 49_000.0),
                run(1, r, 10.0, 50_000.0),
                run(2, b, 10.0, 51_000.0),
                run(2, r, 10.0, 50_000.0),
            ],
            ..Session::default()
        };
        let md = render(&session);
        assert!(md.contains("### Ratios: intake mode ÷ reuseport, 1 worker"));
        assert!(md.contains(
            "| CPU-µs per request | herdsman (balanced) ÷ herdsman (reuseport) | **1.010** (1.000–1.020) |"
        ));
        assert!(md.contains(
            "| Requests/s | herdsman (balanced) ÷ herdsman (reuseport) | **1.000** (0.980–1.020) |"
        ));
        assert!(md.contains("| herdsman (reuseport) | 10.00 | 10.00–10.00 | 2 |"));
        // No peer measured: the peer ratios say so, the intake ratios still appear.
        assert!(md.contains("No ratio: herdsman and at least one peer"));
    }

    #[test]
    fn intake_ratios_need_reuseport() {
        let session = Session {
            rounds: 1,
            workers: vec![1],
            connections: vec![50],
            intake_modes: vec!["balanced".into(), "shared".into()],
            ..Session::default()
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
            rounds: 1,
            workers: vec![1],
            connections: vec![50],
            labels: vec!["herdsman".into()],
            not_run: vec![("herdsman".into(), "cargo build failed".into())],
            ..Session::default()
        };
        let md = render(&session);
        assert!(md.contains("- **herdsman**: cargo build failed"));
        assert!(md.contains("| herdsman | not run | | 0 |"));
    }

    #[test]
    fn tables_are_grouped_per_worker_count() {
        let two = |r: Run| Run { workers: 2, ..r };
        let session = Session {
            rounds: 1,
            workers: vec![1, 2],
            connections: vec![50],
            labels: vec!["herdsman".into()],
            runs: vec![
                run(1, "herdsman", 10.0, 50_000.0),
                two(run(1, "herdsman", 12.0, 90_000.0)),
            ],
            ..Session::default()
        };
        let md = render(&session);
        let one_worker = md.find("## 1 worker\n").unwrap();
        let two_workers = md.find("## 2 workers\n").unwrap();
        let fast = md.find("| herdsman | 90,000 |").unwrap();
        assert!(one_worker < two_workers && two_workers < fast, "{md}");
        assert!(md.contains("### Max latency, µs (wrk's slowest response), 2 workers"));
        assert!(md.contains("| herdsman | 5000 | 5000–5000 | 1 |"));
        assert!(md.contains("once with each worker count (1 and 2)"));
    }
}
