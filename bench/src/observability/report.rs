//! What `observability` prints and writes: per worker count, requests/s, p50, p99 and herdsman's
//! CPU per request in each condition (median and range over rounds), on ÷ off against the issue's
//! 95% target, the access log's lines against wrk's requests, the scrapes, where the CPU went,
//! every run, the configurations, and a plot of requests/s per round.

use std::fmt::Write as _;
use std::path::Path;

use super::condition::Condition;
use super::logfile::LogTally;
use super::scraper::{ScrapeTally, SCRAPE_EVERY};
use super::settings::Settings;
use crate::kit::cpu::{self, CpuSplit};
use crate::kit::markdown::{
    one_line, spread_cell, thousands, worker_count, worker_counts, write_details_table,
};
use crate::kit::paired::PairedRatio;
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::results::{write_plot_link, Results, RunFacts, Trouble};
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::WrkReport;

/// The issue's target: with metrics scraped and access logs on, requests/s "drops by no more
/// than 5%" against both off.
pub const TARGET_SHARE: f64 = 0.95;

/// One wrk run against one freshly started herdsman.
#[derive(Debug, Clone)]
pub struct ObservedRun {
    pub workers: u32,
    pub round: u32,
    pub condition: Condition,
    pub wrk: WrkReport,
    /// herdsman's CPU time (utime + stime) during the run ÷ wrk's requests: in the conditions with
    /// them, it includes writing the access log and answering the scrapes.
    pub cpu_us_per_request: f64,
    /// Where the machine's CPU went during the run.
    pub cpu: CpuSplit,
    /// This program's own CPU during the run, in CPUs: the scraper thread, and the main thread
    /// waiting for wrk. Part of `cpu.other`, which counts it as outside herdsman's processes.
    pub own_cpu: f64,
    /// What the scrapes got; None in a condition without scraping.
    pub scrapes: Option<ScrapeTally>,
    /// The access log against wrk; None in a condition without an access log.
    pub log: Option<LogTally>,
}

impl ObservedRun {
    /// Processes outside this benchmark (this program taken out).
    fn others_cpu(&self) -> f64 {
        (self.cpu.other - self.own_cpu).max(0.0)
    }
}

/// Everything the results file says.
pub struct Session {
    /// Command, date, machine, load and time taken.
    pub facts: RunFacts,
    pub settings: Settings,
    /// herdsman's configuration in each condition, as written for its first run.
    pub configs: Vec<(Condition, String)>,
    pub runs: Vec<ObservedRun>,
    /// Why the measurement stopped before the end, if it did.
    pub failure: Option<String>,
}

type Extract = fn(&ObservedRun) -> f64;

/// A row of a figures table: its title, the figure, and how to print it.
type FigureRow = (&'static str, Extract, fn(f64) -> String);

const RPS: Extract = |r| r.wrk.requests_per_sec;

const FIGURES: [FigureRow; 5] = [
    ("requests/s", RPS, thousands),
    ("p50 latency, µs", |r| r.wrk.p50_us, whole),
    ("p99 latency, µs", |r| r.wrk.p99_us, whole),
    ("max latency, µs", |r| r.wrk.max_us, whole),
    (
        "herdsman CPU-µs per request",
        |r| r.cpu_us_per_request,
        |v| format!("{v:.2}"),
    ),
];

fn whole(value: f64) -> String {
    format!("{value:.0}")
}

impl Session {
    fn runs_of(&self, workers: u32, condition: Condition) -> impl Iterator<Item = &ObservedRun> {
        self.runs
            .iter()
            .filter(move |r| r.workers == workers && r.condition == condition)
    }

    fn spread(&self, workers: u32, condition: Condition, value: Extract) -> Option<Spread> {
        let values: Vec<f64> = self.runs_of(workers, condition).map(value).collect();
        spread(&values)
    }

    /// `condition` ÷ off requests/s with `workers`, the figure judged against the target: paired
    /// per round, judged by the median over rounds (see `kit::paired`).
    fn paired(&self, workers: u32, condition: Condition) -> PairedRatio {
        let side = |condition: Condition| -> Vec<(u32, f64)> {
            self.runs_of(workers, condition)
                .map(|r| (r.round, RPS(r)))
                .collect()
        };
        PairedRatio::of(&side(condition), &side(Condition::Off))
    }

    /// "96.2% (per round 92.0–99.1%; ratio of the medians 95.0%)".
    fn ratio_text(&self, workers: u32, condition: Condition) -> String {
        self.paired(workers, condition).text()
    }

    pub fn verdict(&self, workers: u32, condition: Condition) -> &'static str {
        self.paired(workers, condition).verdict(TARGET_SHARE)
    }

    /// The conditions with a log and scraping that were measured, in settings order.
    fn observed_conditions(&self) -> Vec<Condition> {
        self.settings
            .conditions
            .iter()
            .copied()
            .filter(|&c| c != Condition::Off)
            .collect()
    }

    /// (runs whose access log matched wrk's requests, runs with an access log).
    fn log_matches(&self) -> (usize, usize) {
        let logs: Vec<&LogTally> = self.runs.iter().filter_map(|r| r.log.as_ref()).collect();
        (logs.iter().filter(|l| l.matched()).count(), logs.len())
    }

    /// Every scrape of every run, summed.
    fn scrapes(&self) -> ScrapeTally {
        let mut sum = ScrapeTally::default();
        for tally in self.runs.iter().filter_map(|r| r.scrapes.as_ref()) {
            sum.ok += tally.ok;
            sum.failed += tally.failed;
            if sum.first_failure.is_none() {
                sum.first_failure.clone_from(&tally.first_failure);
            }
            sum.body_bytes = tally.body_bytes;
            sum.slowest_us = sum.slowest_us.max(tally.slowest_us);
        }
        sum
    }

    /// "round 2 on with 1 worker (0.45 CPU)", for every run that other processes disturbed.
    fn disturbed(&self) -> Vec<String> {
        cpu::disturbed(&self.runs, ObservedRun::others_cpu, |r| {
            let workers = worker_count(r.workers);
            format!("round {} {} with {workers}", r.round, r.condition)
        })
    }

    /// "1 worker: on ÷ off requests/s 97.1% (…) — target ≥ 95%: met", per worker count and
    /// observed condition; `bold` for the results file.
    fn verdict_lines(&self, bold: bool) -> Vec<String> {
        let mut lines = Vec::new();
        for &workers in &self.settings.workers {
            for condition in self.observed_conditions() {
                let verdict = self.verdict(workers, condition);
                let line = format!(
                    "{}: {condition} ÷ off requests/s: {} — target ≥ {:.0}%: {}",
                    worker_count(workers),
                    self.ratio_text(workers, condition),
                    TARGET_SHARE * 100.0,
                    if bold {
                        verdict
                    } else {
                        verdict.trim_matches('*')
                    }
                );
                lines.push(if bold { format!("**{line}.**") } else { line });
            }
        }
        lines
    }
}

impl Results for Session {
    /// The summary printed on stdout.
    fn summary(&self) -> String {
        let s = &self.settings;
        let mut text = format!(
            "observability: herdsman with {}, wrk -t1 -c{} -d{}s, {} round(s)\n",
            worker_counts(&s.workers),
            s.connections,
            s.seconds,
            s.rounds
        );
        let _ = writeln!(
            text,
            "{:<10} {:<10} {:>12} {:>10} {:>10} {:>12}",
            "workers", "condition", "requests/s", "p50 µs", "p99 µs", "CPU-µs/req"
        );
        for &workers in &s.workers {
            for &condition in &s.conditions {
                let median = |value: Extract, format: fn(f64) -> String| {
                    self.spread(workers, condition, value)
                        .map_or("–".to_string(), |sp| format(sp.median))
                };
                let _ = writeln!(
                    text,
                    "{workers:<10} {:<10} {:>12} {:>10} {:>10} {:>12}",
                    condition.to_string(),
                    median(RPS, thousands),
                    median(|r| r.wrk.p50_us, whole),
                    median(|r| r.wrk.p99_us, whole),
                    median(|r| r.cpu_us_per_request, |v| format!("{v:.2}")),
                );
            }
        }
        for line in self.verdict_lines(false) {
            let _ = writeln!(text, "{line}");
        }
        let (matched, logged) = self.log_matches();
        let scrapes = self.scrapes();
        let _ = writeln!(
            text,
            "access log lines vs wrk's requests: matched in {matched} of {logged} runs; \
             scrapes: {} made, {} failed",
            scrapes.attempts(),
            scrapes.failed
        );
        let disturbed = self.disturbed();
        Trouble::new(&disturbed, self.runs.len(), &self.failure).write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let s = &self.settings;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# Observability: what metrics scraping and access logs cost\n"
        );
        let _ = writeln!(
            md,
            "herdsman in front of the fast backend, with `compare`'s configuration (keep-alive to \
             the backend, client_idle 300 s) and the admin API on 127.0.0.1 in every condition; \
             the clients are `wrk -t1 -c{c} -d{d}s --latency` (keep-alive, `GET /`, 19-byte \
             answer), with {workers}. Each run has a herdsman of its own, started for \
             it with that condition's configuration, given a {warm} s unrecorded warm-up (with \
             the scraping, in the conditions that scrape) and stopped with SIGTERM after it, so \
             that it writes the access log's last lines before the file is counted. Each round has \
             one run per condition; the order alternates (round 1 off first, round 2 off last, …) \
             so that drift falls on every condition. The scraper is a thread of this program: \
             `GET /metrics` on a fresh connection every {every} s, from the start of the wrk run \
             to its end. The issue's target: with metrics scraped every second and access logs \
             on, requests/s drops by no more than {drop:.0}% against both off; judged on each \
             round's on ÷ off (two runs back to back), the median over {rounds} round(s), per \
             worker count.\n",
            c = s.connections,
            d = s.seconds,
            workers = worker_counts(&s.workers),
            warm = super::WARMUP_SECONDS,
            every = SCRAPE_EVERY.as_secs(),
            drop = (1.0 - TARGET_SHARE) * 100.0,
            rounds = s.rounds,
        );
        self.facts.write_markdown(&mut md);
        for line in self.verdict_lines(true) {
            let _ = writeln!(md, "{line}\n");
        }
        let disturbed = self.disturbed();
        Trouble::new(&disturbed, self.runs.len(), &self.failure).write_markdown(&mut md);
        let _ = writeln!(md, "| condition | herdsman and the scraper |\n|---|---|");
        for &condition in &s.conditions {
            let _ = writeln!(md, "| {condition} | {} |", condition.describe());
        }
        let _ = writeln!(md);
        for &workers in &s.workers {
            self.write_figures(&mut md, workers);
        }
        write_plot_link(&mut md, plot, "requests/s per round, per condition");
        self.write_log_and_scrapes(&mut md);
        self.write_cpu(&mut md);
        self.write_runs(&mut md);
        for (condition, config) in &self.configs {
            let _ = writeln!(
                md,
                "## herdsman's configuration: {condition} (as written for its first run)\n\n\
                 ```toml\n{config}```\n"
            );
        }
        md
    }

    /// Requests/s per round, one line per condition, one panel per worker count.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let charts: Vec<LineChart> = self
            .settings
            .workers
            .iter()
            .map(|&workers| LineChart {
                title: format!(
                    "wrk -c{} through herdsman ({}): requests/s per round",
                    self.settings.connections,
                    worker_count(workers)
                ),
                x_label: "round".into(),
                y_label: "requests/s".into(),
                series: self
                    .settings
                    .conditions
                    .iter()
                    .map(|&condition| Series {
                        name: condition.to_string(),
                        points: self
                            .runs_of(workers, condition)
                            .map(|r| (f64::from(r.round), r.wrk.requests_per_sec))
                            .collect(),
                    })
                    .collect(),
                log_y: false,
            })
            .collect();
        write_panels_png(path, &charts)
    }

    fn measured_nothing(&self) -> bool {
        self.runs.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }
}

impl Session {
    fn write_figures(&self, md: &mut String, workers: u32) {
        let s = &self.settings;
        let observed = self.observed_conditions();
        let _ = writeln!(
            md,
            "## {}: wrk through herdsman, median over {} round(s) (min–max)\n",
            worker_count(workers),
            s.rounds
        );
        let mut header = String::from("|");
        for condition in &s.conditions {
            let _ = write!(header, " | {condition}");
        }
        for condition in &observed {
            let _ = write!(header, " | {condition} ÷ off");
        }
        let columns = s.conditions.len() + observed.len();
        let _ = writeln!(md, "{header} |\n|---|{}", "---:|".repeat(columns));
        for (title, value, format) in FIGURES {
            let mut row = format!("| {title} |");
            for &condition in &s.conditions {
                let _ = write!(
                    row,
                    " {} |",
                    spread_cell(self.spread(workers, condition, value), format)
                );
            }
            for &condition in &observed {
                let ratio = if title == "requests/s" {
                    self.ratio_text(workers, condition)
                } else {
                    match (
                        self.spread(workers, Condition::Off, value),
                        self.spread(workers, condition, value),
                    ) {
                        (Some(off), Some(on)) if off.median > 0.0 => {
                            format!("{:.2}×", on.median / off.median)
                        }
                        _ => "–".to_string(),
                    }
                };
                let _ = write!(row, " {ratio} |");
            }
            let _ = writeln!(md, "{row}");
        }
        let errors: u64 = self
            .runs
            .iter()
            .filter(|r| r.workers == workers)
            .map(|r| r.wrk.socket_errors + r.wrk.bad_status)
            .sum();
        let _ = writeln!(
            md,
            "\nwrk errors over these runs (socket errors + status ≥ 400): {errors}.\n"
        );
    }

    fn write_log_and_scrapes(&self, md: &mut String) {
        let (matched, logged) = self.log_matches();
        let scrapes = self.scrapes();
        let _ = writeln!(md, "## The access log and the scrapes\n");
        let _ = writeln!(
            md,
            "The access log's lines are counted in the file: once after the warm-up (herdsman \
             idle, its buffers flushed) and once after herdsman has stopped gracefully; the \
             difference is the run's. wrk counts only the requests it completed; herdsman also \
             logs those still in flight when wrk stopped, up to one per connection ({}). So a \
             run's lines **match** when they are wrk's requests plus 0 to {}: fewer would be a \
             lost line.\n",
            self.settings.connections, self.settings.connections
        );
        let _ =
            writeln!(
            md,
            "**Access log lines matched wrk's requests in {matched} of {logged} runs. Scrapes: \
             {} made, {} answered 200 with a whole, non-empty body, {} failed{}.**\n",
            scrapes.attempts(),
            scrapes.ok,
            scrapes.failed,
            scrapes
                .first_failure
                .as_deref()
                .map_or(String::new(), |why| format!(" (the first: {})", one_line(why)))
        );
        let _ = writeln!(
            md,
            "| workers | round | condition | wrk requests | log lines | lines − requests | \
             matched | log bytes per line | log written, MB/s | scrapes ok / made | /metrics \
             body, bytes | slowest scrape, ms |\n\
             |---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"
        );
        for run in self
            .runs
            .iter()
            .filter(|r| r.log.is_some() || r.scrapes.is_some())
        {
            let (requests, lines, difference, matched, per_line, rate) = match &run.log {
                Some(log) => (
                    thousands(log.requests as f64),
                    thousands(log.written.lines as f64),
                    format!("{:+}", log.difference()),
                    if log.matched() { "yes" } else { "**NO**" }.to_string(),
                    format!("{:.0}", log.bytes_per_line()),
                    format!(
                        "{:.1}",
                        log.written.bytes as f64 / 1e6 / run.wrk.seconds.max(1e-3)
                    ),
                ),
                None => Default::default(),
            };
            let (ok, body, slowest) = match &run.scrapes {
                Some(t) => (
                    format!("{} / {}", t.ok, t.attempts()),
                    thousands(t.body_bytes as f64),
                    format!("{:.1}", t.slowest_us / 1e3),
                ),
                None => Default::default(),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {requests} | {lines} | {difference} | {matched} | {per_line} | \
                 {rate} | {ok} | {body} | {slowest} |",
                run.workers, run.round, run.condition
            );
        }
        let _ = writeln!(md);
    }

    /// Medians, per worker count and condition, of where the CPU went.
    fn write_cpu(&self, md: &mut String) {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        let _ = writeln!(
            md,
            "## Where the CPU went during the wrk runs (CPUs of {cpus}, median over rounds)\n"
        );
        let _ = writeln!(
            md,
            "Each process tree's utime + stime (wrk's from this program's reaped children; this \
             program's own, which is the scraper's and the wait for wrk, from getrusage), the \
             kernel's irq + softirq time from /proc/stat (charged to no process; on loopback \
             mostly this benchmark's packets), and the machine's busy time left over: **other \
             processes**, outside this benchmark.\n"
        );
        let _ = writeln!(
            md,
            "| workers | condition | herdsman | backend | wrk | this program (scraper) | kernel irq + softirq | other processes | idle |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        let fields: [Extract; 7] = [
            |r| r.cpu.herdsman,
            |r| r.cpu.backend,
            |r| r.cpu.wrk,
            |r| r.own_cpu,
            |r| r.cpu.interrupts,
            ObservedRun::others_cpu,
            |r| r.cpu.idle,
        ];
        for &workers in &self.settings.workers {
            for &condition in &self.settings.conditions {
                let cells: Vec<String> = fields
                    .iter()
                    .map(|&value| {
                        self.spread(workers, condition, value)
                            .map_or("–".to_string(), |sp| format!("{:.2}", sp.median))
                    })
                    .collect();
                let _ = writeln!(md, "| {workers} | {condition} | {} |", cells.join(" | "));
            }
        }
        let _ = writeln!(md);
    }

    fn write_runs(&self, md: &mut String) {
        let rows = self.runs.iter().map(|r| {
            format!(
                "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |",
                r.workers,
                r.round,
                r.condition,
                thousands(r.wrk.requests as f64),
                thousands(r.wrk.requests_per_sec),
                r.wrk.p50_us,
                r.wrk.p99_us,
                r.wrk.max_us,
                r.cpu_us_per_request,
                r.cpu.herdsman,
                r.own_cpu,
                r.others_cpu(),
                r.wrk.socket_errors,
                r.wrk.bad_status
            )
        });
        write_details_table(
            md,
            "Every run, in order",
            "| workers | round | condition | requests | req/s | p50 µs | p99 µs | max µs | herdsman CPU-µs/req | herdsman CPUs | this program's CPUs | other processes' CPUs | socket errors | status ≥ 400 |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
    }
}

/// One line of progress on stderr.
pub fn progress_line(run: &ObservedRun) -> String {
    let mut line = format!(
        "{:<4} {:>8} req/s, p50 {:.0} µs, p99 {:.0} µs, {:.2} CPU-µs/req, errors {}, other \
         processes {:.2} CPU",
        run.condition.to_string(),
        thousands(run.wrk.requests_per_sec),
        run.wrk.p50_us,
        run.wrk.p99_us,
        run.cpu_us_per_request,
        run.wrk.socket_errors + run.wrk.bad_status,
        run.others_cpu()
    );
    if let Some(log) = &run.log {
        let _ = write!(
            line,
            "; log {} lines for {} requests ({:+}{})",
            log.written.lines,
            log.requests,
            log.difference(),
            if log.matched() { "" } else { ", NOT MATCHED" }
        );
    }
    if let Some(scrapes) = &run.scrapes {
        let _ = write!(
            line,
            "; {} of {} scrapes ok",
            scrapes.ok,
            scrapes.attempts()
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::logfile::LogCount;
    use crate::kit::wrk::sample_report;
    use std::path::PathBuf;

    fn run(workers: u32, round: u32, condition: Condition, rps: f64) -> ObservedRun {
        let requests = (rps * 10.0) as u64;
        let observed = condition != Condition::Off;
        ObservedRun {
            workers,
            round,
            condition,
            wrk: sample_report(rps),
            cpu_us_per_request: if observed { 16.0 } else { 15.0 },
            cpu: CpuSplit {
                herdsman: 0.9,
                other: 0.02,
                ..CpuSplit::default()
            },
            own_cpu: 0.01,
            scrapes: observed.then(|| ScrapeTally {
                ok: 11,
                body_bytes: 11_000,
                slowest_us: 900.0,
                ..ScrapeTally::default()
            }),
            log: observed.then(|| LogTally {
                written: LogCount {
                    lines: requests + 50,
                    bytes: (requests + 50) * 150,
                },
                requests,
                in_flight: 50,
            }),
        }
    }

    fn session(runs: Vec<ObservedRun>) -> Session {
        Session {
            facts: RunFacts::sample("observability"),
            settings: Settings {
                workers: vec![1, 2],
                connections: 50,
                seconds: 10,
                rounds: 3,
                conditions: vec![Condition::Off, Condition::On],
                out: PathBuf::from("x.md"),
            },
            configs: vec![(Condition::Off, "workers = 1\n".into())],
            runs,
            failure: None,
        }
    }

    #[test]
    fn the_ratio_is_paired_per_round_and_judged_per_worker_count() {
        use Condition::*;
        let s = session(vec![
            run(1, 1, Off, 100.0),
            run(1, 1, On, 97.0),
            run(1, 2, On, 90.0),
            run(1, 2, Off, 100.0),
            run(1, 3, Off, 120.0),
            run(1, 3, On, 118.0),
            run(2, 1, Off, 100.0),
            run(2, 1, On, 90.0),
        ]);
        assert_eq!(s.paired(1, On).rounds, vec![0.97, 0.9, 118.0 / 120.0]);
        assert_eq!(s.paired(1, On).median(), Some(0.97));
        assert_eq!(s.verdict(1, On), "met");
        assert_eq!(s.paired(2, On).median(), Some(0.9));
        assert_eq!(s.verdict(2, On), "**NOT MET**");
        assert_eq!(s.verdict(3, On), "not measured");
        assert_eq!(
            s.ratio_text(1, On),
            "97.0% (per round 90.0–98.3%; ratio of the medians 97.0%)"
        );
    }

    #[test]
    fn the_results_file_has_every_section() {
        use Condition::*;
        let s = session(vec![
            run(1, 1, Off, 50_000.0),
            run(1, 1, On, 49_000.0),
            run(2, 1, On, 60_000.0),
            run(2, 1, Off, 60_000.0),
        ]);
        let md = s.render(None);
        for part in [
            "**1 worker: on ÷ off requests/s: 98.0% — target ≥ 95%: met.**",
            "**2 workers: on ÷ off requests/s: 100.0% — target ≥ 95%: met.**",
            "## 1 worker: wrk through herdsman",
            "| | off | on | on ÷ off |",
            "| requests/s | 50,000 | 49,000 | 98.0% |",
            "| herdsman CPU-µs per request | 15.00 | 16.00 | 1.07× |",
            "Access log lines matched wrk's requests in 2 of 2 runs. Scrapes: 22 made, 22 answered",
            "| 1 | 1 | on | 490,000 | 490,050 | +50 | yes | 150 |",
            "## Where the CPU went",
            "| 1 | off | 0.90 |",
            "## Every run, in order",
            "## herdsman's configuration: off",
        ] {
            assert!(md.contains(part), "{part:?} missing from:\n{md}");
        }
        assert!(!md.contains("Disturbed runs"), "{md}");
        let summary = s.summary();
        assert!(
            summary.contains("1 worker: on ÷ off requests/s: 98.0% — target ≥ 95%: met"),
            "{summary}"
        );
        assert!(summary.contains("matched in 2 of 2 runs"), "{summary}");

        let mut lost = run(1, 1, On, 49_000.0);
        if let Some(log) = &mut lost.log {
            log.written.lines = log.requests - 3;
        }
        lost.cpu.other = 0.5;
        let s = session(vec![run(1, 1, Off, 50_000.0), lost]);
        let md = s.render(None);
        assert!(md.contains("in 0 of 1 runs"), "{md}");
        assert!(md.contains("| -3 | **NO** |"), "{md}");
        assert!(md.contains("round 1 on with 1 worker (0.49 CPU)"), "{md}");
    }
}
