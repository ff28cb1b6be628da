//! What `uploads` prints and writes: issue 51's targets judged for every herdsman row and case;
//! per case (body size, connections, workers) each row's medians over rounds — CPU per upload
//! (user and kernel apart), uploads/s, p50, p99 — with its errors, and herdsman's ratios to
//! HAProxy and nginx (and a later build's to the first) taken round by round; the
//! configurations; every run; a plot of CPU per upload.

use std::fmt::Write as _;
use std::path::Path;

use super::settings::{
    script_name, size_text, Settings, PLANNED_BYTES_PER_SECOND, UPLOADS_PER_CONNECTION,
};
use super::UPLOAD_PATH;
use crate::kit::markdown::{spread_cell, thousands, worker_count, worker_counts};
use crate::kit::paired::PairedRatio;
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::procstat::CpuTime;
use crate::kit::proxies::{ProxyKind, Target};
use crate::kit::results::{write_plot_link, Configurations, Results, RunFacts, Trouble};
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::{upload_script, Load, WrkReport};

/// A row of the results: a herdsman build or a peer.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// As the results write it: a herdsman build's label ("herdsman", "before"), a peer's name
    /// ("HAProxy", "nginx").
    pub name: String,
    pub kind: ProxyKind,
}

impl Row {
    pub fn of(target: &Target) -> Row {
        let name = match target.kind {
            ProxyKind::Herdsman => target.label.clone(),
            peer => peer.written().to_string(),
        };
        Row {
            name,
            kind: target.kind,
        }
    }
}

/// One cell of the matrix: bodies of `size` bytes on `connections`, every proxy with `workers`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Case {
    pub size: u64,
    pub connections: u32,
    pub workers: u32,
}

impl Case {
    /// "1 MiB, 20 connections, 1 worker".
    pub fn text(&self) -> String {
        format!(
            "{}, {} connections, {}",
            size_text(self.size),
            self.connections,
            worker_count(self.workers)
        )
    }
}

/// One wrk run of one case against one row.
#[derive(Debug, Clone)]
pub struct UploadRun {
    pub round: u32,
    pub case: Case,
    /// Its index in the session's rows.
    pub row: usize,
    /// wrk's duration.
    pub seconds: u32,
    /// The proxy's processes' CPU over the run.
    pub cpu: CpuTime,
    pub wrk: WrkReport,
}

/// A figure of a run; None where it has none (CPU per upload without an upload).
type Figure = fn(&UploadRun) -> Option<f64>;

impl UploadRun {
    fn cpu_us(&self) -> Option<f64> {
        self.wrk.per_request_us(self.cpu.total())
    }

    fn user_us(&self) -> Option<f64> {
        self.wrk.per_request_us(self.cpu.user)
    }

    fn kernel_us(&self) -> Option<f64> {
        self.wrk.per_request_us(self.cpu.system)
    }

    fn uploads_per_sec(&self) -> Option<f64> {
        Some(self.wrk.requests_per_sec)
    }

    fn p50_ms(&self) -> Option<f64> {
        self.wrk.p50_ms()
    }

    fn p99_ms(&self) -> Option<f64> {
        self.wrk.p99_ms()
    }

    fn errors(&self) -> u64 {
        self.wrk.errors()
    }

    /// Uploads completed per connection: with k, the uploads still under way at the end weigh
    /// at most 1 ÷ k on CPU per upload.
    fn per_connection(&self) -> f64 {
        self.wrk.requests as f64 / f64::from(self.case.connections)
    }

    /// The progress line's figures, for the row `name`.
    pub fn progress_text(&self, name: &str) -> String {
        format!(
            "{name:<10} {} uploads/s, {} CPU-µs/upload (user {}), p99 {} ms, {} error(s)",
            rate_text(self.wrk.requests_per_sec),
            self.cpu_us().map_or("–".into(), cpu_text),
            self.user_us().map_or("–".into(), cpu_text),
            self.p99_ms().map_or("–".into(), ms_text),
            self.errors()
        )
    }
}

/// A column of a case's table: its heading, its figure, how a value reads.
type Column = (&'static str, Figure, fn(f64) -> String);

/// The columns of a case's table.
const COLUMNS: [Column; 6] = [
    ("CPU-µs per upload", UploadRun::cpu_us, cpu_text),
    ("user", UploadRun::user_us, cpu_text),
    ("kernel", UploadRun::kernel_us, cpu_text),
    ("uploads/s", UploadRun::uploads_per_sec, rate_text),
    ("p50 ms", UploadRun::p50_ms, ms_text),
    ("p99 ms", UploadRun::p99_ms, ms_text),
];

/// One of issue 51's targets for a herdsman row: its figure ÷ `peer`'s, at most or at least
/// `bound`.
struct Goal {
    heading: &'static str,
    figure: Figure,
    peer: ProxyKind,
    bound: f64,
    at_most: bool,
}

/// Issue 51's targets: CPU per upload ≤ 0.9 × HAProxy's, uploads/s ≥ both peers', p99 ≤ 1.2 ×
/// HAProxy's.
const GOALS: [Goal; 4] = [
    Goal {
        heading: "CPU per upload ÷ HAProxy's ≤ 0.9",
        figure: UploadRun::cpu_us,
        peer: ProxyKind::Haproxy,
        bound: 0.9,
        at_most: true,
    },
    Goal {
        heading: "uploads/s ÷ HAProxy's ≥ 1",
        figure: UploadRun::uploads_per_sec,
        peer: ProxyKind::Haproxy,
        bound: 1.0,
        at_most: false,
    },
    Goal {
        heading: "uploads/s ÷ nginx's ≥ 1",
        figure: UploadRun::uploads_per_sec,
        peer: ProxyKind::Nginx,
        bound: 1.0,
        at_most: false,
    },
    Goal {
        heading: "p99 ÷ HAProxy's ≤ 1.2",
        figure: UploadRun::p99_ms,
        peer: ProxyKind::Haproxy,
        bound: 1.2,
        at_most: true,
    },
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Verdict {
    Met,
    NotMet,
    NotMeasured,
}

impl Verdict {
    /// The median of the rounds' ratios against `bound`.
    fn of(ratio: &PairedRatio, bound: f64, at_most: bool) -> Verdict {
        match ratio.median() {
            None => Verdict::NotMeasured,
            Some(r) if (at_most && r <= bound) || (!at_most && r >= bound) => Verdict::Met,
            Some(_) => Verdict::NotMet,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::NotMet => "**NOT MET**",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// Everything one `uploads` session measured.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    pub rows: Vec<Row>,
    pub failure: Option<String>,
    pub runs: Vec<UploadRun>,
    pub configs: Configurations,
}

impl Session {
    pub fn new(facts: RunFacts, settings: Settings, rows: Vec<Row>) -> Session {
        Session {
            facts,
            settings,
            rows,
            failure: None,
            runs: Vec::new(),
            configs: Configurations::default(),
        }
    }

    /// Every case asked for, in the order measured within a round, worker count first.
    fn cases(&self) -> Vec<Case> {
        let s = &self.settings;
        let mut cases = Vec::new();
        for &workers in &s.workers {
            for &size in &s.sizes {
                for &connections in &s.connections {
                    cases.push(Case {
                        size,
                        connections,
                        workers,
                    });
                }
            }
        }
        cases
    }

    fn runs_of(&self, row: usize, case: Case) -> impl Iterator<Item = &UploadRun> {
        self.runs
            .iter()
            .filter(move |r| r.row == row && r.case == case)
    }

    /// (round, value) of `row`'s runs of `case`.
    fn side(&self, row: usize, case: Case, figure: Figure) -> Vec<(u32, f64)> {
        self.runs_of(row, case)
            .filter_map(|r| Some((r.round, figure(r)?)))
            .collect()
    }

    fn spread(&self, row: usize, case: Case, figure: Figure) -> Option<Spread> {
        let values: Vec<f64> = self
            .side(row, case, figure)
            .iter()
            .map(|&(_, v)| v)
            .collect();
        spread(&values)
    }

    fn errors(&self, row: usize, case: Case) -> u64 {
        self.runs_of(row, case).map(UploadRun::errors).sum()
    }

    /// `row`'s figure ÷ `other`'s, round by round.
    fn ratio(&self, row: usize, other: usize, case: Case, figure: Figure) -> PairedRatio {
        PairedRatio::of(
            &self.side(row, case, figure),
            &self.side(other, case, figure),
        )
    }

    /// The first row of `kind`.
    fn row_of(&self, kind: ProxyKind) -> Option<usize> {
        self.rows.iter().position(|r| r.kind == kind)
    }

    fn herdsman_rows(&self) -> Vec<usize> {
        (0..self.rows.len())
            .filter(|&i| self.rows[i].kind == ProxyKind::Herdsman)
            .collect()
    }

    /// (numerator, denominator) of every ratio row: each herdsman row over each peer, then each
    /// later herdsman build over the first.
    fn ratio_pairs(&self) -> Vec<(usize, usize)> {
        let herdsman = self.herdsman_rows();
        let mut pairs = Vec::new();
        for &row in &herdsman {
            for peer in [ProxyKind::Haproxy, ProxyKind::Nginx] {
                if let Some(peer) = self.row_of(peer) {
                    pairs.push((row, peer));
                }
            }
        }
        if let Some((&first, later)) = herdsman.split_first() {
            pairs.extend(later.iter().map(|&row| (row, first)));
        }
        pairs
    }

    /// Every goal of herdsman row `row` in `case`: the ratio, and its verdict.
    fn judged(&self, row: usize, case: Case) -> Vec<(PairedRatio, Verdict)> {
        GOALS
            .iter()
            .map(|goal| {
                let ratio = match self.row_of(goal.peer) {
                    Some(peer) => self.ratio(row, peer, case, goal.figure),
                    None => PairedRatio::of(&[], &[]),
                };
                let verdict = Verdict::of(&ratio, goal.bound, goal.at_most);
                (ratio, verdict)
            })
            .collect()
    }

    /// "met 3 of 16, not met 12, not measured 1" for herdsman row `row` over every case.
    fn tally(&self, row: usize) -> String {
        let verdicts: Vec<Verdict> = self
            .cases()
            .into_iter()
            .flat_map(|case| self.judged(row, case))
            .map(|(_, verdict)| verdict)
            .collect();
        let count = |v| verdicts.iter().filter(|&&x| x == v).count();
        format!(
            "met {} of {}, not met {}, not measured {}",
            count(Verdict::Met),
            verdicts.len(),
            count(Verdict::NotMet),
            count(Verdict::NotMeasured)
        )
    }

    fn write_targets(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Targets (issue 51)\n\nEach a ratio of herdsman's figure to the peer's, taken per \
             round (their runs of a round back to back) and judged by its median over rounds \
             (the range follows with several rounds). CPU per upload is user + kernel; the last \
             column is herdsman's errors over the rounds, which no ratio shows.\n"
        );
        for row in self.herdsman_rows() {
            let name = &self.rows[row].name;
            let _ = writeln!(md, "### {name}: {}\n", self.tally(row));
            let mut head = String::from("| case |");
            let mut rule = String::from("|---|");
            for goal in &GOALS {
                let _ = write!(head, " {} |", goal.heading);
                rule.push_str("---|");
            }
            let _ = writeln!(md, "{head} errors |\n{rule}---:|");
            for case in self.cases() {
                let _ = write!(md, "| {} |", case.text());
                for (ratio, verdict) in self.judged(row, case) {
                    let cell = match verdict {
                        Verdict::NotMeasured => verdict.word().to_string(),
                        _ => format!("{}: {}", ratio_text(&ratio), verdict.word()),
                    };
                    let _ = write!(md, " {cell} |");
                }
                let _ = writeln!(md, " {} |", self.errors(row, case));
            }
            md.push('\n');
        }
    }

    fn write_cases(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Medians per case\n\nEach row's median over rounds (the range over rounds in \
             brackets with several); errors are summed over the rounds. A ratio row divides one \
             row's figure by another's round by round and gives the median of those ratios.\n"
        );
        for case in self.cases() {
            let seconds = self.settings.seconds(case.size, case.connections);
            let _ = writeln!(md, "### {} ({seconds} s runs)\n", case.text());
            let mut head = String::from("| |");
            let mut rule = String::from("|---|");
            for (heading, _, _) in COLUMNS {
                let _ = write!(head, " {heading} |");
                rule.push_str("---:|");
            }
            let _ = writeln!(md, "{head} errors |\n{rule}---:|");
            for (row, own) in self.rows.iter().enumerate() {
                let _ = write!(md, "| {} |", own.name);
                for (_, figure, format) in COLUMNS {
                    let _ = write!(
                        md,
                        " {} |",
                        spread_cell(self.spread(row, case, figure), format)
                    );
                }
                let _ = writeln!(md, " {} |", self.errors(row, case));
            }
            for (row, other) in self.ratio_pairs() {
                let _ = write!(
                    md,
                    "| {} ÷ {} |",
                    self.rows[row].name, self.rows[other].name
                );
                for (_, figure, _) in COLUMNS {
                    let ratio = self.ratio(row, other, case, figure);
                    let _ = write!(md, " {} |", ratio_text(&ratio));
                }
                md.push_str(" |\n");
            }
            md.push('\n');
        }
    }

    fn write_setup(&self, md: &mut String) {
        let s = &self.settings;
        let first = s.sizes[0];
        let load = Load {
            connections: s.connections[0],
            seconds: s.seconds(first, s.connections[0]),
        };
        let command = load.script_args(
            &format!("http://127.0.0.1:PORT{UPLOAD_PATH}"),
            Path::new(&script_name(first)),
            Settings::timeout(load.seconds),
        );
        let _ = writeln!(
            md,
            "## What was run\n\n\
             - **herdsman** (each build a row): its defaults, no `[buffering]` table — request \
             bodies buffered or streamed as the build does for every user.\n\
             - **HAProxy**: its defaults; a body streams to the server as it arrives.\n\
             - **nginx**: its defaults (`proxy_request_buffering on`: a body is read whole \
             before the server is involved, 16 KiB of it in memory, the rest in a temporary \
             file), with `client_max_body_size 0` (its default limit, 1 MiB, would answer 64 MiB \
             bodies 413).\n\
             - **the server**: nginx, one worker, `client_max_body_size 0`, which answers 19 \
             bytes once an upload's body has all arrived (read by the mirror module: 1 MiB in \
             memory, the rest in a temporary file). A bare `return 200` would answer at the \
             head, so that behind a proxy that streams the answer would come before the body \
             was sent.\n\n\
             Every proxy keeps its connections to the server. Up to size × connections of \
             bodies are in flight at once (64 MiB × 200: 12.5 GiB), which a proxy that buffers \
             and the server may each hold in temporary files (nginx's in the run's scratch \
             directory, herdsman's in its `temp_dir`). Each wrk run, here the first \
             case's (each case's script posts its own size; `--timeout` is the run's length plus \
             a second, so that no upload finished in the run is left out of the latencies):\n\n\
             ```\nwrk {}\n```\n\n`{}`:\n\n```lua\n{}```\n",
            command.join(" "),
            script_name(first),
            upload_script(first)
        );
    }

    fn write_runs(&self, md: &mut String) {
        let rows = self.runs.iter().map(|r| {
            let cell = |v: Option<f64>, format: fn(f64) -> String| v.map_or("–".into(), format);
            format!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.round,
                size_text(r.case.size),
                r.case.connections,
                r.case.workers,
                self.rows[r.row].name,
                r.seconds,
                thousands(r.wrk.requests as f64),
                r.per_connection(),
                rate_text(r.wrk.requests_per_sec),
                cell(r.cpu_us(), cpu_text),
                cell(r.user_us(), cpu_text),
                cell(r.kernel_us(), cpu_text),
                cell(r.p50_ms(), ms_text),
                cell(r.p99_ms(), ms_text),
                r.wrk.socket_errors,
                r.wrk.bad_status
            )
        });
        crate::kit::markdown::write_details_table(
            md,
            "Every run",
            "| round | body | connections | workers | proxy | s | uploads | per connection \
             | uploads/s | CPU-µs per upload | user | kernel | p50 ms | p99 ms | socket errors \
             | non-2xx |",
            "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
    }
}

/// CPU-µs: whole above 100 ("1,063"), one decimal below.
fn cpu_text(value: f64) -> String {
    if value >= 100.0 {
        thousands(value)
    } else {
        format!("{value:.1}")
    }
}

/// Uploads/s: whole above 100, one decimal below (64 MiB bodies go a few a second).
fn rate_text(value: f64) -> String {
    cpu_text(value)
}

/// Milliseconds: whole above 100, one decimal below.
fn ms_text(value: f64) -> String {
    cpu_text(value)
}

/// "0.87 (per round 0.85–0.90)" with several rounds, "0.87" with one; "–" when no round has both.
fn ratio_text(ratio: &PairedRatio) -> String {
    spread_cell(ratio.per_round(), |v| format!("{v:.2}"))
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.runs.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let mut text = format!(
            "uploads: medians over {} round(s): CPU-µs per upload (user + kernel), uploads/s, p99\n",
            self.settings.rounds
        );
        for case in self.cases() {
            let _ = writeln!(
                text,
                "{} ({} s runs)",
                case.text(),
                self.settings.seconds(case.size, case.connections)
            );
            for (row, own) in self.rows.iter().enumerate() {
                let median = |figure: Figure, format: fn(f64) -> String| {
                    self.spread(row, case, figure)
                        .map_or("–".into(), |s| format(s.median))
                };
                let _ = writeln!(
                    text,
                    "  {:<10} {:>8} (user {:>7}, kernel {:>7})  {:>7} uploads/s  p99 {:>7} ms  \
                     errors {}",
                    own.name,
                    median(UploadRun::cpu_us, cpu_text),
                    median(UploadRun::user_us, cpu_text),
                    median(UploadRun::kernel_us, cpu_text),
                    median(UploadRun::uploads_per_sec, rate_text),
                    median(UploadRun::p99_ms, ms_text),
                    self.errors(row, case)
                );
            }
        }
        for row in self.herdsman_rows() {
            let _ = writeln!(
                text,
                "issue 51's targets, {}: {}",
                self.rows[row].name,
                self.tally(row)
            );
        }
        Trouble::new(&[], self.runs.len(), &self.failure).write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let s = &self.settings;
        let mut md = String::new();
        let sizes: Vec<String> = s.sizes.iter().map(|&b| size_text(b)).collect();
        let connections: Vec<String> = s.connections.iter().map(u32::to_string).collect();
        let _ = writeln!(
            md,
            "# Uploads through herdsman, HAProxy and nginx\n\n\
             wrk (one thread) posts bodies of {} on {} keep-alive connections (the next upload \
             once the last one's answer is in) through each proxy, with {} each, to one nginx \
             server that answers an upload once its body has all arrived. Every round runs each \
             proxy once per case, in an order that turns from round to round; {} round(s). \
             Before each run the machine settles: dirty pages are written out (sync) and the CPUs \
             left to go quiet (under 10% busy over 200 ms, at most 15 s), so that no run inherits \
             the writeback of nginx's temporary files from the one before it. A run lasts at least {} s, longer where each connection could not otherwise finish \
             {UPLOADS_PER_CONNECTION} uploads at {} MiB/s (each case's heading gives its \
             length). CPU per upload is the proxy's processes' user + kernel time (/proc) over \
             the run ÷ the uploads wrk completed: an upload still under way when wrk stops is in \
             the CPU but not in the count, which weighs at most 1 ÷ the uploads per connection \
             (every run's table gives them).\n",
            sizes.join(" and "),
            connections.join(" and "),
            worker_counts(&s.workers),
            s.rounds,
            s.duration,
            PLANNED_BYTES_PER_SECOND >> 20
        );
        self.facts.write_markdown(&mut md);
        Trouble::new(&[], self.runs.len(), &self.failure).write_markdown(&mut md);
        self.write_targets(&mut md);
        self.write_cases(&mut md);
        write_plot_link(&mut md, plot, "CPU per upload by connections");
        self.write_setup(&mut md);
        self.configs.write_markdown(&mut md);
        self.write_runs(&mut md);
        md
    }

    /// Median CPU per upload by connection count, a line per row and worker count, a panel per
    /// body size.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let s = &self.settings;
        let charts: Vec<LineChart> = s
            .sizes
            .iter()
            .map(|&size| LineChart {
                title: format!("CPU per upload, {} bodies", size_text(size)),
                x_label: "connections".into(),
                y_label: "CPU-µs per upload (median)".into(),
                series: s
                    .workers
                    .iter()
                    .flat_map(|&workers| {
                        self.rows.iter().enumerate().map(move |(row, own)| Series {
                            name: format!("{}, {}", own.name, worker_count(workers)),
                            points: s
                                .connections
                                .iter()
                                .filter_map(|&connections| {
                                    let case = Case {
                                        size,
                                        connections,
                                        workers,
                                    };
                                    let median = self.spread(row, case, UploadRun::cpu_us)?.median;
                                    Some((f64::from(connections), median))
                                })
                                .collect(),
                        })
                    })
                    .collect(),
                log_y: false,
            })
            .collect();
        write_panels_png(path, &charts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::markdown::assert_contains_all;
    use crate::kit::settings::parse_args;
    use std::time::Duration;

    const MIB: u64 = 1 << 20;

    fn settings(args: &[&str]) -> Settings {
        Settings::resolve(
            &parse_args::<super::super::UploadsArgs>("uploads", args).unwrap(),
            Path::new("/w"),
        )
        .unwrap()
    }

    fn row(name: &str, kind: ProxyKind) -> Row {
        Row {
            name: name.into(),
            kind,
        }
    }

    /// A run of 1 MiB bodies on 20 connections, 1 worker: 10,000 uploads in 10 s, `user_ms` and
    /// `kernel_ms` of CPU, a p99 of `p99_ms`.
    fn upload_run(
        round: u32,
        row: usize,
        (user_ms, kernel_ms): (u64, u64),
        p99_ms: f64,
    ) -> UploadRun {
        upload_run_of(round, row, (user_ms, kernel_ms), p99_ms, 1_000.0)
    }

    fn upload_run_of(
        round: u32,
        row: usize,
        (user_ms, kernel_ms): (u64, u64),
        p99_ms: f64,
        rate: f64,
    ) -> UploadRun {
        UploadRun {
            round,
            case: Case {
                size: MIB,
                connections: 20,
                workers: 1,
            },
            row,
            seconds: 10,
            cpu: CpuTime {
                user: Duration::from_millis(user_ms),
                system: Duration::from_millis(kernel_ms),
            },
            wrk: WrkReport {
                requests: (rate * 10.0) as u64,
                seconds: 10.0,
                requests_per_sec: rate,
                p50_us: p99_ms * 500.0,
                p99_us: p99_ms * 1e3,
                max_us: p99_ms * 2e3,
                socket_errors: 0,
                bad_status: 0,
            },
        }
    }

    fn issue_session() -> Session {
        let settings = settings(&["--sizes", "1m", "--connections", "20", "--workers", "1"]);
        let rows = vec![
            row("herdsman", ProxyKind::Herdsman),
            row("HAProxy", ProxyKind::Haproxy),
            row("nginx", ProxyKind::Nginx),
        ];
        Session::new(RunFacts::sample("uploads"), settings, rows)
    }

    #[test]
    fn the_issue_targets_are_judged_on_the_rounds_ratios() {
        let mut session = issue_session();
        // Two rounds. herdsman: 10 s of CPU for 10,000 uploads = 1,000 µs an upload (user 100),
        // 980 then 1,000 uploads/s, p99 20 ms. HAProxy: 1,200 µs (user 150), 1,000 uploads/s,
        // p99 16 ms. nginx: 1,600 µs, 600 uploads/s, p99 70 ms.
        for round in [1, 2] {
            let rate = if round == 1 { 980.0 } else { 1_000.0 };
            session
                .runs
                .push(upload_run_of(round, 0, (1_000, 9_000), 20.0, rate));
            session
                .runs
                .push(upload_run(round, 1, (1_500, 10_500), 16.0));
            session
                .runs
                .push(upload_run_of(round, 2, (1_400, 8_200), 70.0, 600.0));
        }
        // herdsman at 980 uploads/s in round 1 spent 10 s on 9,800 uploads: 1,020 µs each.
        let md = session.render(None);
        assert_contains_all(
            &md,
            &[
                "### herdsman: met 2 of 4, not met 2, not measured 0",
                "| case | CPU per upload ÷ HAProxy's ≤ 0.9 | uploads/s ÷ HAProxy's ≥ 1 | \
                 uploads/s ÷ nginx's ≥ 1 | p99 ÷ HAProxy's ≤ 1.2 | errors |",
                // 1,020 ÷ 1,200 and 1,000 ÷ 1,200: 0.85 and 0.83, median 0.84 ≤ 0.9.
                "| 1 MiB, 20 connections, 1 worker | 0.84 (0.83–0.85): met | \
                 0.99 (0.98–1.00): **NOT MET** | 1.65 (1.63–1.67): met | \
                 1.25 (1.25–1.25): **NOT MET** | 0 |",
                // The medians: user and kernel apart, and their sum.
                "| herdsman | 1,010 (1,000–1,020) | 101 (100–102) | 909 (900–918) | \
                 990 (980–1,000) | 10.0 (10.0–10.0) | 20.0 (20.0–20.0) | 0 |",
                "| HAProxy | 1,200 (1,200–1,200) | 150 (150–150) | 1,050 (1,050–1,050) | \
                 1,000 (1,000–1,000) | 8.0 (8.0–8.0) | 16.0 (16.0–16.0) | 0 |",
                "| herdsman ÷ HAProxy | 0.84 (0.83–0.85) | 0.67 (0.67–0.68) |",
                "| herdsman ÷ nginx |",
            ],
        );
        let summary = session.summary();
        assert!(
            summary.contains("issue 51's targets, herdsman: met 2 of 4, not met 2"),
            "{summary}"
        );
        assert!(
            summary.contains("  herdsman      1,010 (user     101, kernel     909)"),
            "{summary}"
        );
    }

    #[test]
    fn a_target_without_its_peer_is_not_measured_and_errors_show() {
        let mut session = issue_session();
        session.rows.truncate(2);
        session.rows[1] = row("nginx", ProxyKind::Nginx);
        let mut failing = upload_run(1, 0, (1_000, 9_000), 20.0);
        failing.wrk.socket_errors = 3;
        failing.wrk.bad_status = 4;
        session.runs.push(failing);
        session
            .runs
            .push(upload_run_of(1, 1, (1_400, 8_300), 70.0, 600.0));
        let md = session.render(None);
        assert_contains_all(
            &md,
            &[
                "### herdsman: met 1 of 4, not met 0, not measured 3",
                "| 1 MiB, 20 connections, 1 worker | not measured | not measured | 1.67: met | \
                 not measured | 7 |",
                "| herdsman ÷ nginx | 0.62 |",
            ],
        );
        assert!(!md.contains("÷ HAProxy |"), "{md}");
    }

    #[test]
    fn a_later_build_is_held_to_the_targets_and_divided_by_the_first() {
        let settings = settings(&["--sizes", "1m", "--connections", "20", "--workers", "1"]);
        let rows = vec![
            row("before", ProxyKind::Herdsman),
            row("after", ProxyKind::Herdsman),
            row("HAProxy", ProxyKind::Haproxy),
        ];
        let mut session = Session::new(RunFacts::sample("uploads"), settings, rows);
        session
            .runs
            .push(upload_run_of(1, 0, (2_000, 14_800), 56.0, 939.0));
        session.runs.push(upload_run(1, 1, (1_000, 9_000), 18.0));
        session.runs.push(upload_run(1, 2, (1_500, 10_500), 16.0));
        let md = session.render(None);
        assert_contains_all(
            &md,
            &[
                "### before: met 0 of 4, not met 3, not measured 1",
                "### after: met 3 of 4, not met 0, not measured 1",
                // 16.8 s of CPU for 9,390 uploads: 1,789 µs against HAProxy's 1,200.
                "| before ÷ HAProxy | 1.49 |",
                "| after ÷ HAProxy | 0.83 |",
                "| after ÷ before | 0.56 |",
            ],
        );
    }

    #[test]
    fn every_run_is_listed_with_its_uploads_per_connection() {
        let mut session = issue_session();
        session.runs.push(upload_run(1, 0, (1_000, 9_000), 20.0));
        session.configs.record(
            "herdsman, 1 worker",
            "herdsman.toml",
            "temp = \"/tmp/s/x\"\n",
            Path::new("/tmp/s"),
        );
        let md = session.render(None);
        assert_contains_all(
            &md,
            &[
                "| 1 | 1 MiB | 20 | 1 | herdsman | 10 | 10,000 | 500.0 | 1,000 | 1,000 | 100 | \
                 900 | 10.0 | 20.0 | 0 | 0 |",
                "<details><summary>herdsman, 1 worker: herdsman.toml</summary>\n\n```\ntemp = \
                 \"SCRATCH/x\"\n```",
                "wrk -s upload-1048576.lua --timeout 11s -t1 -c20 -d10s --latency \
                 http://127.0.0.1:PORT/upload",
                "wrk.body = string.rep(\"x\", 1048576)",
            ],
        );
    }
}
