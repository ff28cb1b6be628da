//! What `slow-clients` prints and writes: per row, the other clients' requests/s, p50 and p99
//! without and with the slow clients (median and range over rounds), the share of requests/s
//! kept, what the slow clients saw (uploads cut, readers still attached, answers started), the
//! proxy's RSS and temporary files at the end, herdsman's buffering counters, every run, the
//! configurations, and a plot of requests/s per round.

use std::fmt::Write as _;
use std::path::Path;

use super::kinds::Tallies;
use super::rows::Row;
use super::settings::{Settings, ANSWER_BYTES, SERVER_SEND_BUFFER};
use crate::kit::cpu::{self, CpuSplit};
use crate::kit::markdown::{spread_cell, thousands, write_details_table};
use crate::kit::paired::PairedRatio;
use crate::kit::plot::{LineChart, Series};
use crate::kit::procstat::UnlinkedFiles;
use crate::kit::results::{write_plot_link, Results, RunFacts, Trouble};
use crate::kit::slow_holders::Tally;
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::WrkReport;

/// One wrk run through one row's proxy.
#[derive(Debug, Clone)]
pub struct Run {
    pub round: u32,
    pub row: Row,
    pub wrk: WrkReport,
    /// The proxy's VmRSS (its process tree) right after the wrk run, the slow clients still
    /// attached in a run with.
    pub rss_kib: u64,
    /// Unlinked files the proxy held open then: its temporary files.
    pub unlinked: UnlinkedFiles,
    /// Where the machine's CPU went during the wrk run (`herdsman` is the row's proxy, `backend`
    /// the sync server).
    pub cpu: CpuSplit,
    /// What the slow clients saw, counted right after the wrk run; None in a run without.
    pub slow: Option<Tallies>,
    /// herdsman's buffering counters from /metrics right after the wrk run; empty for nginx.
    pub metrics: Vec<(String, f64)>,
}

impl Run {
    pub fn with(&self) -> bool {
        self.slow.is_some()
    }

    /// "with" or "without" slow clients.
    fn condition(&self) -> &'static str {
        if self.with() {
            "with"
        } else {
            "without"
        }
    }

    /// One line of progress on stderr.
    pub fn progress_line(&self) -> String {
        let mut line = format!(
            "{} {}: {} req/s, p99 {} ms, errors {}, proxy RSS {:.0} MiB, temporary files {:.0} MiB, \
             other processes {:.2} CPU",
            self.row.label(),
            if self.with() { "with" } else { "without" },
            thousands(self.wrk.requests_per_sec),
            P99_MS(self).map_or("–".into(), ms),
            self.wrk.socket_errors + self.wrk.bad_status,
            self.rss_kib as f64 / 1024.0,
            self.unlinked.bytes as f64 / 1048576.0,
            self.cpu.other
        );
        if let Some(slow) = &self.slow {
            let _ = write!(
                line,
                "; uploads cut {}, attached {}/{}; readers attached {}/{}, answers started {}",
                slow.uploads.ended,
                slow.uploads.held,
                slow.uploads.opened,
                slow.readers.held,
                slow.readers.opened,
                slow.readers.started
            );
        }
        line
    }
}

/// Everything the results file says.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    /// Each row's configuration file, as written for its first run.
    pub configs: Vec<(Row, String)>,
    pub runs: Vec<Run>,
    pub failure: Option<String>,
}

type Extract = fn(&Run) -> Option<f64>;

const RPS: Extract = |r| Some(r.wrk.requests_per_sec);
/// Latencies only of runs where wrk got answers: wrk reports 0 when none came.
const P50_MS: Extract = |r| (r.wrk.requests > 0).then_some(r.wrk.p50_us / 1e3);
const P99_MS: Extract = |r| (r.wrk.requests > 0).then_some(r.wrk.p99_us / 1e3);
const ERRORS: Extract = |r| Some((r.wrk.socket_errors + r.wrk.bad_status) as f64);
const RSS_MIB: Extract = |r| Some(r.rss_kib as f64 / 1024.0);
const TEMP_MIB: Extract = |r| Some(r.unlinked.bytes as f64 / 1048576.0);
const UPLOADS_CUT: Extract = |r| r.slow.as_ref().map(|s| f64::from(s.uploads.ended));
const UPLOADS_HELD: Extract = |r| r.slow.as_ref().map(|s| f64::from(s.uploads.held));
const READERS_HELD: Extract = |r| r.slow.as_ref().map(|s| f64::from(s.readers.held));
const READERS_STARTED: Extract = |r| r.slow.as_ref().map(|s| f64::from(s.readers.started));

/// A column of the figures.
#[derive(Clone, Copy)]
enum Column {
    /// A figure of every run.
    Figure(Extract, fn(f64) -> String),
    /// A figure of the runs with slow clients only.
    Slow(Extract, fn(f64) -> String),
    /// Requests/s with ÷ without, paired per round.
    Kept,
}

/// The summary's columns (of `TABLE_COLUMNS`): requests/s, p50, p99, kept, uploads cut, readers
/// attached.
const SUMMARY_COLUMNS: [usize; 6] = [0, 1, 2, 3, 5, 7];

/// The results file's columns, after the row and the slow clients.
const TABLE_COLUMNS: [Column; 11] = [
    Column::Figure(RPS, whole),
    Column::Figure(P50_MS, ms),
    Column::Figure(P99_MS, ms),
    Column::Kept,
    Column::Figure(ERRORS, whole),
    Column::Slow(UPLOADS_CUT, whole),
    Column::Slow(UPLOADS_HELD, whole),
    Column::Slow(READERS_HELD, whole),
    Column::Slow(READERS_STARTED, whole),
    Column::Figure(RSS_MIB, mib),
    Column::Figure(TEMP_MIB, mib),
];

fn ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

fn whole(value: f64) -> String {
    thousands(value)
}

fn mib(value: f64) -> String {
    format!("{value:.0}")
}

impl Session {
    /// A session of no runs yet, on a machine described by `setup`.
    pub fn new(setup: Vec<(String, String)>, settings: Settings) -> Session {
        Session {
            facts: RunFacts::new(setup),
            settings,
            configs: Vec::new(),
            runs: Vec::new(),
            failure: None,
        }
    }

    fn runs_of(&self, row: Row, with: bool) -> impl Iterator<Item = &Run> {
        self.runs
            .iter()
            .filter(move |r| r.row == row && r.with() == with)
    }

    fn spread(&self, row: Row, with: bool, value: Extract) -> Option<Spread> {
        let values: Vec<f64> = self.runs_of(row, with).filter_map(value).collect();
        spread(&values)
    }

    /// One line of the figures: the row's name (on its line without), the slow clients, then a
    /// cell per column, each the median over rounds and, `with_range`, the min–max.
    fn cells(&self, row: Row, with: bool, columns: &[Column], with_range: bool) -> Vec<String> {
        let mut cells = vec![
            if with { "" } else { row.label() }.to_string(),
            if with { self.slow_label() } else { "0".into() },
        ];
        for column in columns {
            cells.push(match *column {
                Column::Slow(..) | Column::Kept if !with => String::new(),
                Column::Kept if with_range => self.kept(row).text(),
                Column::Kept => self
                    .kept(row)
                    .median()
                    .map_or("–".to_string(), |k| format!("{:.1}%", k * 100.0)),
                Column::Figure(value, format) | Column::Slow(value, format) => {
                    match self.spread(row, with, value) {
                        Some(s) if !with_range => format(s.median),
                        spread => spread_cell(spread, format),
                    }
                }
            });
        }
        cells
    }

    /// A row's requests/s with the slow clients ÷ without, paired per round (`kit::paired`).
    fn kept(&self, row: Row) -> PairedRatio {
        let side = |with: bool| -> Vec<(u32, f64)> {
            self.runs_of(row, with)
                .map(|r| (r.round, r.wrk.requests_per_sec))
                .collect()
        };
        PairedRatio::of(&side(true), &side(false))
    }

    /// "1,000 + 1,000": the slow uploads and readers of a run with.
    fn slow_label(&self) -> String {
        format!(
            "{} + {}",
            thousands(f64::from(self.settings.uploads)),
            thousands(f64::from(self.settings.readers))
        )
    }

    /// "round 2 nginx with (0.45 CPU)", for every run that other processes disturbed.
    fn disturbed(&self) -> Vec<String> {
        cpu::disturbed(
            &self.runs,
            |r| r.cpu.other,
            |r| format!("round {} {} {}", r.round, r.row, r.condition()),
        )
    }

    /// The tallies of every run with of `row`, summed.
    fn tallies(&self, row: Row) -> Tallies {
        let mut sum = Tallies::default();
        for slow in self.runs_of(row, true).filter_map(|r| r.slow.as_ref()) {
            sum.uploads.add(&slow.uploads);
            sum.readers.add(&slow.readers);
        }
        sum
    }
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.runs.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let s = &self.settings;
        let mut text = format!(
            "slow-clients: {} round(s) of {} s, wrk -c{}, {} slow uploads + {} slow readers \
             (answers of {} bytes), sync server with {} workers, proxies with {}\n",
            s.rounds,
            s.seconds,
            s.connections,
            s.uploads,
            s.readers,
            thousands(s.answer_bytes as f64),
            s.server_workers,
            s.workers
        );
        let heads = [
            "",
            "slow",
            "requests/s",
            "p50 ms",
            "p99 ms",
            "kept",
            "cut",
            "readers",
        ];
        let mut lines = vec![heads.map(str::to_string).to_vec()];
        for &row in &s.rows {
            for with in [false, true] {
                let columns = SUMMARY_COLUMNS.map(|i| TABLE_COLUMNS[i]);
                lines.push(self.cells(row, with, &columns, false));
            }
        }
        for cells in lines {
            let _ = write!(text, "{:<34}", cells[0]);
            for cell in &cells[1..] {
                let _ = write!(text, " {cell:>13}");
            }
            text.push('\n');
        }
        let disturbed = self.disturbed();
        Trouble::new(&disturbed, self.runs.len(), &self.failure).write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let mut md = format!(
            "# Slow clients: what {} slow uploads and {} slow readers cost everyone else\n\n",
            thousands(f64::from(self.settings.uploads)),
            thousands(f64::from(self.settings.readers))
        );
        self.write_setup(&mut md);
        self.facts.write_markdown(&mut md);
        let disturbed = self.disturbed();
        Trouble::new(&disturbed, self.runs.len(), &self.failure).write_markdown(&mut md);
        self.write_figures(&mut md);
        write_plot_link(&mut md, plot, "requests/s per round, per row");
        self.write_slow_side(&mut md);
        self.write_metrics(&mut md);
        self.write_runs(&mut md);
        for (row, config) in &self.configs {
            let language = if *row == Row::Nginx { "nginx" } else { "toml" };
            let _ = writeln!(
                md,
                "## {}'s configuration (one run's ports and directory)\n\n```{language}\n{config}```\n",
                row.label()
            );
        }
        md
    }

    /// Requests/s per round, per row, without and with.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let mut series = Vec::new();
        for &row in &self.settings.rows {
            for with in [false, true] {
                let name = match with {
                    true => format!("{}, with {} slow", row.label(), self.slow_label()),
                    false => format!("{}, without", row.label()),
                };
                let runs = self.runs_of(row, with);
                let points = runs.map(|r| (f64::from(r.round), r.wrk.requests_per_sec));
                series.push(Series {
                    name,
                    points: points.collect(),
                });
            }
        }
        let title = format!(
            "wrk -c{} through each proxy to a {}-worker sync server: requests/s per round",
            self.settings.connections, self.settings.server_workers
        );
        LineChart::requests_per_round(title, series).write_png(path)
    }
}

impl Session {
    fn write_setup(&self, md: &mut String) {
        let s = &self.settings;
        let _ = writeln!(
            md,
            "Behind each proxy, a server like gunicorn's sync workers (`herdsman-bench \
             sync-server`): {workers} threads, each serving one connection at a time from accept \
             to close, reading the whole request body before it answers, with `Connection: close` \
             (backlog 2048, gunicorn's default). The other clients are `wrk -t1 -c{c} -d{d}s \
             --latency` (`GET /`, 19-byte answer) through the proxy. Each round has, for every \
             row, one run without slow clients (its baseline) and one with {up} slow uploads and \
             {rd} slow readers attached, held by separate processes (`herdsman-bench \
             slow-clients-holder`, uploads and readers apart), opened, given {settle} s to settle, \
             and still trickling through the wrk run. The rows take turns, rotating from round to \
             round, and without/with alternate (round 1 without first, round 2 with first, …), so \
             that drift falls on all. **Every run has a fresh server and proxy** (a run with \
             leaves the server's backlog full of requests the proxy may still wait on), warmed by \
             1 s of unrecorded wrk.\n",
            workers = s.server_workers,
            c = s.connections,
            d = s.seconds,
            up = thousands(f64::from(s.uploads)),
            rd = thousands(f64::from(s.readers)),
            settle = s.settle,
        );
        let _ = writeln!(
            md,
            "- **slow upload**: `POST /upload` with a body of {} to {} bytes (spread evenly over \
             the uploads), {} byte(s) of it a second. One that the proxy cuts (a 408, or a close) \
             starts again at once on a new connection, so that the pressure stays.\n\
             - **slow reader**: `GET /big`, an answer of {} bytes that the server writes as fast \
             as it can (Content-Length framed), read {} bytes a second through a small window \
             (SO_RCVBUF 4096 and TCP_MAXSEG 1460, as a reader far away has; see \
             `kit::slow_steps::SMALL_WINDOW`).{}{}\n",
            thousands(f64::from(s.pace.upload_bytes.min)),
            thousands(f64::from(s.pace.upload_bytes.max)),
            s.pace.upload_rate,
            thousands(s.answer_bytes as f64),
            thousands(f64::from(s.pace.read_rate)),
            if s.server_send_buffer > 0 {
                format!(
                    " The server sets SO_SNDBUF {} on its connections (the kernel doubles it), \
                     so that less of an answer hides in its socket.",
                    thousands(f64::from(s.server_send_buffer))
                )
            } else {
                " The server leaves its send buffer to the kernel.".to_string()
            },
            if (s.answer_bytes, s.server_send_buffer) == (ANSWER_BYTES, SERVER_SEND_BUFFER) {
                " The answer's size is the smallest that the sockets' buffers did not absorb \
                 when a proxy streams it, measured in bench/results/slow-clients-answer-size.md."
            } else {
                ""
            }
        );
        let _ = writeln!(
            md,
            "The rows: **herdsman** with its defaults (`[buffering] request_buffer_memory = \
             65536`, `request_min_rate = 500` bytes/s after `request_min_rate_grace = \"10s\"`: a \
             slower upload gets 408; `response_buffer_memory = 65536` then a temporary file in the \
             run's scratch directory, `response_min_rate = 500` bytes/s over 10 s windows); **nginx** with its defaults (`proxy_request_buffering on; \
             proxy_buffering on;`, `client_body_timeout 60s` between two reads only; answers \
             spooled to `proxy_temp_path` in the run's scratch directory); and the **control**, \
             herdsman with buffering off, which shows the attack biting. Both proxies have {} \
             worker(s) and `compare`'s configuration otherwise. **Kept** is each round's with ÷ \
             without requests/s (two runs back to back), the median over rounds. p50 and p99 are \
             wrk's, over the requests that were answered: a request never answered is in \
             neither, nor among wrk's errors (wrk counts none for it), so a row that kept nothing \
             shows no latency and no error.\n",
            s.workers
        );
    }

    fn write_figures(&self, md: &mut String) {
        let rounds = self.settings.rounds;
        let _ = writeln!(
            md,
            "## The other clients (wrk) and what the proxy held, median over {rounds} round(s) \
             (min–max)\n"
        );
        let _ = writeln!(
            md,
            "| row | slow clients | requests/s | p50 ms | p99 ms | kept of baseline | wrk \
             errors | uploads cut | uploads attached at the end | readers attached at the end \
             | answers started | proxy RSS at the end, MiB | temporary files at the end, MiB |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for &row in &self.settings.rows {
            for with in [false, true] {
                let cells = self.cells(row, with, &TABLE_COLUMNS, true);
                let _ = writeln!(md, "| {} |", cells.join(" | "));
            }
        }
        let _ = writeln!(
            md,
            "\nPer run with: **uploads cut**, uploads that the proxy ended (a 408 or a close) \
             before their body was whole, each then starting again; **attached at the end**, \
             connections the proxy still held when the wrk run ended (of {} uploads and {} \
             readers); **answers started**, readers that had the answer's status line. \
             **Temporary files**: unlinked files the proxy's processes held open at the end \
             (from /proc/PID/fd), where a buffering proxy keeps answers beyond its memory.\n",
            thousands(f64::from(self.settings.uploads)),
            thousands(f64::from(self.settings.readers))
        );
    }

    fn write_slow_side(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## What the slow clients saw, over every run with\n\n\
             | row | uploads: connections | cut | completed | first cut | readers: connections \
             | answers started | bytes read | ended by the proxy | first end |\n\
             |---|---:|---:|---:|---|---:|---:|---:|---:|---|"
        );
        let first = |t: &Tally| t.first_end.clone().unwrap_or_else(|| "–".into());
        let count = |n: u32| thousands(f64::from(n));
        for &row in &self.settings.rows {
            let Tallies { uploads, readers } = self.tallies(row);
            let cells = [
                row.label().to_string(),
                count(uploads.opened),
                count(uploads.ended),
                count(uploads.completed),
                first(&uploads),
                count(readers.opened),
                count(readers.started),
                thousands(readers.bytes_read as f64),
                count(readers.ended),
                first(&readers),
            ];
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        }
        let failed: u32 = self
            .settings
            .rows
            .iter()
            .map(|&row| {
                let t = self.tallies(row);
                t.uploads.failed + t.readers.failed
            })
            .sum();
        let _ = writeln!(md, "\nConnects that failed: {failed}.\n");
    }

    /// herdsman's buffering counters at the end of each herdsman row's last run with.
    fn write_metrics(&self, md: &mut String) {
        let last: Vec<&Run> = self
            .settings
            .rows
            .iter()
            .filter_map(|&row| self.runs_of(row, true).last())
            .filter(|r| !r.metrics.is_empty())
            .collect();
        if last.is_empty() {
            return;
        }
        let _ = writeln!(
            md,
            "## herdsman's buffering counters (`/metrics`) at the end of its last run with\n\n\
             Every `herdsman_` series whose name speaks of buffers, spills, temporary files or slow \
             bodies, summed over its labels; counters count from the start of that run's \
             herdsman (its warm-up included).\n"
        );
        let _ = writeln!(md, "| series | {} |", {
            let labels: Vec<&str> = last.iter().map(|r| r.row.label()).collect();
            labels.join(" | ")
        });
        let _ = writeln!(md, "|---|{}", "---:|".repeat(last.len()));
        let mut names: Vec<&str> = Vec::new();
        for run in &last {
            for (name, _) in &run.metrics {
                if !names.contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
        for name in names {
            let cells: Vec<String> = last
                .iter()
                .map(|r| {
                    r.metrics
                        .iter()
                        .find(|(n, _)| n == name)
                        .map_or("–".to_string(), |(_, v)| thousands(*v))
                })
                .collect();
            let _ = writeln!(md, "| `{name}` | {} |", cells.join(" | "));
        }
        let _ = writeln!(md);
    }

    fn write_runs(&self, md: &mut String) {
        let rows = self.runs.iter().map(|r| {
            let (cut, uploads_held, readers_held, started) = match &r.slow {
                Some(s) => (
                    s.uploads.ended.to_string(),
                    s.uploads.held.to_string(),
                    s.readers.held.to_string(),
                    s.readers.started.to_string(),
                ),
                None => Default::default(),
            };
            format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {:.2} | {:.2} | {:.2} |",
                r.round,
                r.row.label(),
                if r.with() { "with" } else { "without" },
                thousands(r.wrk.requests as f64),
                thousands(r.wrk.requests_per_sec),
                P50_MS(r).map_or("–".into(), ms),
                P99_MS(r).map_or("–".into(), ms),
                r.wrk.socket_errors + r.wrk.bad_status,
                cut,
                uploads_held,
                readers_held,
                started,
                r.rss_kib as f64 / 1024.0,
                mib(r.unlinked.bytes as f64 / 1048576.0),
                r.cpu.herdsman,
                r.cpu.backend,
                r.cpu.other
            )
        });
        write_details_table(
            md,
            "Every run, in order",
            "| round | row | slow clients | requests | req/s | p50 ms | p99 ms | wrk errors | uploads cut | uploads attached | readers attached | answers started | proxy RSS MiB | temporary files MiB | proxy CPUs | server CPUs | other processes' CPUs |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::markdown::assert_contains_all;
    use crate::kit::wrk::sample_report;

    fn run(round: u32, row: Row, with: bool, rps: f64) -> Run {
        let tally = |held| Tally {
            opened: 1000,
            held,
            ended: 1000 - held,
            started: held,
            ..Tally::default()
        };
        Run {
            round,
            row,
            wrk: sample_report(rps),
            rss_kib: 10 * 1024,
            unlinked: UnlinkedFiles::default(),
            cpu: CpuSplit::default(),
            slow: with.then(|| Tallies {
                uploads: tally(900),
                readers: tally(1000),
            }),
            metrics: Vec::new(),
        }
    }

    fn session(runs: Vec<Run>) -> Session {
        Session {
            facts: RunFacts::sample("slow-clients"),
            settings: super::super::settings::resolve(&[]),
            configs: vec![
                (Row::Herdsman, "workers = 2\n".into()),
                (Row::Control, "response_buffer_memory = 0\n".into()),
            ],
            runs,
            failure: None,
        }
    }

    #[test]
    fn every_row_has_its_baseline_and_the_share_it_kept() {
        let mut runs = Vec::new();
        for row in Row::ALL {
            runs.push(run(1, row, false, 10_000.0));
            runs.push(run(1, row, true, 5_000.0));
        }
        let mut none = run(1, Row::Control, true, 0.0);
        none.wrk.requests = 0;
        runs.pop();
        runs.push(none);
        let s = session(runs);
        assert_contains_all(
            &s.render(None),
            &[
                "| herdsman | 0 | 10,000 | 0.80 | 1.50 |  | 0 |",
                "|  | 1,000 + 1,000 | 5,000 | 0.80 | 1.50 | 50.0% | 0 | 100 | 900 | 1,000 | 1,000 | 10 | 0 |",
                // The control kept nothing, and has no latency to show.
                "|  | 1,000 + 1,000 | 0 | – | – | 0.0% |",
                "## What the slow clients saw",
                "## Every run, in order",
                "## herdsman's configuration",
            ],
        );
        assert_contains_all(&s.summary(), &["50.0%", "0.0%", "1,000 + 1,000"]);
    }
}
