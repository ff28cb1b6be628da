//! What `slowloris` prints and writes: the other clients' requests/s, p50 and p99 without and with
//! the slow connections (median and range over rounds, and their ratio against the 90% target),
//! what the slow connections saw of herdsman (held to the end, or ended and how), herdsman's side
//! of it, every run, the configuration, and a plot of requests/s per round.

use std::fmt::Write as _;
use std::path::Path;

use super::kinds::Kind;
use super::settings::Settings;
use crate::kit::cpu::{self, CpuSplit};
use crate::kit::markdown::{spread_cell, thousands, write_details_table};
use crate::kit::paired::PairedRatio;
use crate::kit::plot::{LineChart, Series};
use crate::kit::results::{write_plot_link, Results, RunFacts, Trouble};
use crate::kit::slow_holders::Tally;
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::WrkReport;

/// The issue's target: with the slow connections open, the others keep this share of their
/// requests/s.
pub const TARGET_SHARE: f64 = 0.90;

/// One wrk run.
#[derive(Debug, Clone)]
pub struct SlowRun {
    pub round: u32,
    /// Slow connections open during it (0: a run without).
    pub slow: u32,
    pub wrk: WrkReport,
    /// herdsman's CPU time (utime + stime of its process tree) during the run ÷ wrk's requests:
    /// with slow connections open it includes what they cost herdsman.
    pub cpu_us_per_request: f64,
    /// herdsman's VmRSS just before the wrk run (with the slow connections open, in a run with).
    pub rss_kib: u64,
    /// Where the machine's CPU went during the wrk run.
    pub cpu: CpuSplit,
    /// The slow connections' side of a run with; None without.
    pub slow_side: Option<SlowSide>,
}

/// What the slow connections saw, and herdsman's side of them, in one run with.
#[derive(Debug, Clone)]
pub struct SlowSide {
    /// Counted by the holders when told to finish, right after the wrk run, in `Kind::ALL` order.
    pub tallies: Vec<(Kind, Tally)>,
    /// TCP connections in state ESTABLISHED on herdsman's port, its side: after the slow
    /// connections settled (before wrk), and after the wrk run (wrk's own have closed by then).
    pub established_before: usize,
    pub established_after: usize,
    /// herdsman's VmRSS just before the slow connections were opened (`SlowRun::rss_kib` is after
    /// they settled).
    pub rss_before_open_kib: u64,
    /// Where the CPU went while the slow connections settled, before wrk: what holding them alone
    /// costs.
    pub holding: CpuSplit,
}

impl SlowRun {
    fn with(&self) -> bool {
        self.slow > 0
    }
}

/// Everything the results file says.
pub struct Session {
    /// Command, date, machine, load and time taken.
    pub facts: RunFacts,
    pub settings: Settings,
    pub client_header_seconds: u32,
    /// herdsman's configuration, as written.
    pub config: String,
    pub runs: Vec<SlowRun>,
    /// Why the measurement stopped before the end, if it did.
    pub failure: Option<String>,
}

type Extract = fn(&SlowRun) -> f64;

/// A row of the figures table: its title, the figure, and how to print it.
type FigureRow = (&'static str, Extract, fn(f64) -> String);

const RPS: Extract = |r| r.wrk.requests_per_sec;

impl Session {
    fn spread(&self, with: bool, value: Extract) -> Option<Spread> {
        let values: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.with() == with)
            .map(value)
            .collect();
        spread(&values)
    }

    /// Requests/s with ÷ without, the figure judged against the target: paired per round, judged
    /// by the median over rounds (see `kit::paired`).
    fn paired(&self) -> PairedRatio {
        let side = |with: bool| -> Vec<(u32, f64)> {
            self.runs
                .iter()
                .filter(|r| r.with() == with)
                .map(|r| (r.round, RPS(r)))
                .collect()
        };
        PairedRatio::of(&side(true), &side(false))
    }

    /// "91.2% (per round 82.0–95.1%; ratio of the medians 89.0%)".
    fn ratio_text(&self) -> String {
        self.paired().text()
    }

    fn verdict(&self) -> &'static str {
        self.paired().verdict(TARGET_SHARE)
    }

    /// The tally of every kind that was run, summed over the runs with.
    fn tallies(&self) -> Vec<(Kind, Tally)> {
        let mut sums: Vec<(Kind, Tally)> = self
            .settings
            .kinds
            .iter()
            .map(|&k| (k, Tally::default()))
            .collect();
        for side in self.runs.iter().filter_map(|r| r.slow_side.as_ref()) {
            for (kind, tally) in &side.tallies {
                if let Some((_, sum)) = sums.iter_mut().find(|(k, _)| k == kind) {
                    sum.add(tally);
                }
            }
        }
        sums
    }

    fn runs_with(&self) -> usize {
        self.runs.iter().filter(|r| r.with()).count()
    }

    /// "round 2 with (0.45 CPU)", for every run that other processes disturbed.
    fn disturbed(&self) -> Vec<String> {
        cpu::disturbed(
            &self.runs,
            |r| r.cpu.other,
            |r| {
                format!(
                    "round {} {}",
                    r.round,
                    if r.with() { "with" } else { "without" }
                )
            },
        )
    }

    /// The largest growth of herdsman's RSS while slow connections opened and settled: (MiB, bytes
    /// per slow connection).
    fn rss_growth(&self) -> Option<(f64, f64)> {
        let grown_kib = self
            .runs
            .iter()
            .filter_map(|r| {
                let side = r.slow_side.as_ref()?;
                Some(r.rss_kib.saturating_sub(side.rss_before_open_kib))
            })
            .max()?;
        Some((
            grown_kib as f64 / 1024.0,
            grown_kib as f64 * 1024.0 / f64::from(self.settings.slow.max(1)),
        ))
    }
}

impl Results for Session {
    /// The summary printed on stdout.
    fn summary(&self) -> String {
        let s = &self.settings;
        let mut text = format!(
            "slowloris: herdsman with {} worker(s), wrk -t1 -c{} -d{}s, {} round(s), {} slow connections\n",
            s.workers, s.connections, s.seconds, s.rounds, s.slow
        );
        let _ = writeln!(
            text,
            "{:<24} {:>12} {:>10} {:>10}",
            "", "requests/s", "p50 µs", "p99 µs"
        );
        for (with, label) in [
            (false, "without".to_string()),
            (true, format!("with {} slow", thousands(f64::from(s.slow)))),
        ] {
            let median = |value: Extract| {
                self.spread(with, value)
                    .map_or("–".to_string(), |sp| format!("{:.0}", sp.median))
            };
            let _ = writeln!(
                text,
                "{label:<24} {:>12} {:>10} {:>10}",
                self.spread(with, RPS)
                    .map_or("–".to_string(), |sp| thousands(sp.median)),
                median(|r| r.wrk.p50_us),
                median(|r| r.wrk.p99_us),
            );
        }
        let _ = writeln!(
            text,
            "with ÷ without requests/s: {} — target ≥ {:.0}%: {}",
            self.ratio_text(),
            TARGET_SHARE * 100.0,
            self.verdict().trim_matches('*')
        );
        let tallies = self.tallies();
        let held: Vec<String> = tallies
            .iter()
            .filter(|(k, _)| *k != Kind::ResetUpload)
            .map(|(k, t)| format!("{} {}/{}", k.label(), t.held, t.opened))
            .collect();
        let _ = writeln!(
            text,
            "held by herdsman at the end of the run(s) with (client side): {}",
            held.join(", ")
        );
        if let Some((_, reset)) = tallies.iter().find(|(k, _)| *k == Kind::ResetUpload) {
            let _ = writeln!(
                text,
                "reset-upload: {} resets mid-upload, {} cycles ended by herdsman first",
                thousands(f64::from(reset.resets)),
                reset.ended
            );
        }
        let other = |with: bool| {
            self.spread(with, |r| r.cpu.other)
                .map_or("–".to_string(), |sp| format!("{:.2}", sp.median))
        };
        let _ = writeln!(
            text,
            "CPU used by other processes on the machine (median): {} without, {} with",
            other(false),
            other(true)
        );
        let disturbed = self.disturbed();
        Trouble::new(&disturbed, self.runs.len(), &self.failure).write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let s = &self.settings;
        let mut md = String::new();
        let slow = thousands(f64::from(s.slow));
        let _ = writeln!(
            md,
            "# Slow clients: what {slow} slowloris connections cost everyone else\n"
        );
        let _ = writeln!(
            md,
            "herdsman with {workers} worker(s) in front of the fast backend; the other clients are \
             `wrk -t1 -c{c} -d{d}s --latency` (keep-alive, `GET /`, 19-byte answer). Each round \
             has one run without slow connections and one with {slow} of them open, held by a \
             separate process (`herdsman-bench slowloris-holder`) that opens them, waits until all \
             have made their first connect, lets them settle for {settle} s, and keeps trickling \
             through the wrk run. The order alternates (round 1 without first, round 2 with \
             first, …) so that drift falls on both. One herdsman serves every run, after a 1 s \
             unrecorded warm-up. The issue's target: with the slow connections open, the others \
             keep at least {target:.0}% of the requests/s they get without them; judged on each \
             round's with ÷ without (two runs back to back), the median over rounds.\n",
            workers = s.workers,
            c = s.connections,
            d = s.seconds,
            settle = super::SETTLE_WITH.as_secs(),
            target = TARGET_SHARE * 100.0,
        );
        let _ = writeln!(
            md,
            "herdsman's `[timeouts] client_header` is set to \"{}s\" for this benchmark (its \
             default is 10 s, which would answer every slow head with 408 and close it in the \
             middle of a run); everything else is `compare`'s configuration (client_idle 300 s). \
             So herdsman has no timer that ends a slow connection during a run: this measures \
             what holding them costs the others.\n",
            self.client_header_seconds
        );
        self.facts.write_markdown(&mut md);

        let _ = writeln!(
            md,
            "**Requests/s with ÷ without: {} — target ≥ {:.0}%: {}.**\n",
            self.ratio_text(),
            TARGET_SHARE * 100.0,
            self.verdict()
        );
        let disturbed = self.disturbed();
        Trouble::new(&disturbed, self.runs.len(), &self.failure).write_markdown(&mut md);
        self.write_figures(&mut md);
        self.write_cpu(&mut md);
        write_plot_link(&mut md, plot, "requests/s per round, without and with");
        self.write_slow_side(&mut md);
        self.write_runs(&mut md);
        let _ = writeln!(
            md,
            "## herdsman's configuration\n\n```toml\n{}```\n",
            self.config
        );
        md
    }

    /// Requests/s per round, without and with.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let series = |with: bool, name: String| Series {
            name,
            points: self
                .runs
                .iter()
                .filter(|r| r.with() == with)
                .map(|r| (f64::from(r.round), r.wrk.requests_per_sec))
                .collect(),
        };
        let title = format!(
            "wrk -c{} through herdsman ({} workers): requests/s per round",
            self.settings.connections, self.settings.workers
        );
        let slow = thousands(f64::from(self.settings.slow));
        let series = vec![
            series(false, "without slow connections".into()),
            series(true, format!("with {slow} slow connections")),
        ];
        LineChart::requests_per_round(title, series).write_png(path)
    }

    fn measured_nothing(&self) -> bool {
        self.runs.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }
}

impl Session {
    fn write_figures(&self, md: &mut String) {
        let rounds = self.settings.rounds;
        let _ = writeln!(
            md,
            "## The other clients (wrk), median over {rounds} round(s) (min–max)\n"
        );
        let _ = writeln!(
            md,
            "| | without slow connections | with {} | with ÷ without |\n|---|---:|---:|---:|",
            thousands(f64::from(self.settings.slow))
        );
        let rows: [FigureRow; 6] = [
            ("requests/s", RPS, thousands),
            ("p50 latency, µs", |r| r.wrk.p50_us, |v| format!("{v:.0}")),
            ("p99 latency, µs", |r| r.wrk.p99_us, |v| format!("{v:.0}")),
            ("max latency, µs", |r| r.wrk.max_us, |v| format!("{v:.0}")),
            (
                "herdsman CPU-µs per wrk request",
                |r| r.cpu_us_per_request,
                |v| format!("{v:.2}"),
            ),
            (
                "herdsman RSS before the run, MiB",
                |r| r.rss_kib as f64 / 1024.0,
                |v| format!("{v:.1}"),
            ),
        ];
        for (title, value, format) in rows {
            let (without, with) = (self.spread(false, value), self.spread(true, value));
            let ratio = match (without, with) {
                (Some(a), Some(b)) if a.median > 0.0 => {
                    if title == "requests/s" {
                        self.ratio_text()
                    } else {
                        format!("{:.2}×", b.median / a.median)
                    }
                }
                _ => "–".to_string(),
            };
            let _ = writeln!(
                md,
                "| {title} | {} | {} | {ratio} |",
                spread_cell(without, format),
                spread_cell(with, format)
            );
        }
        let errors: u64 = self
            .runs
            .iter()
            .map(|r| r.wrk.socket_errors + r.wrk.bad_status)
            .sum();
        let _ = writeln!(
            md,
            "\nwrk errors over all runs (socket errors + status ≥ 400): {errors}.\n"
        );
        if let Some((mib, per_connection)) = self.rss_growth() {
            let _ = writeln!(
                md,
                "herdsman's RSS grew by at most {mib:.1} MiB while {} slow connections opened and \
                 settled: about {:.1} KiB per slow connection. Memory it kept after they closed \
                 shows in the RSS before later runs (every run, below), and a later opening then \
                 grows it less.\n",
                thousands(f64::from(self.settings.slow)),
                per_connection / 1024.0
            );
        }
    }

    /// Medians, without and with, of where the CPU went.
    fn write_cpu(&self, md: &mut String) {
        let rows = [(false, "without"), (true, "with")].map(|(with, label)| {
            let splits = self.runs.iter().filter(|r| r.with() == with);
            (label, splits.map(|r| r.cpu).collect())
        });
        cpu::write_split_table(md, "the wrk runs", ["wrk", "slow clients"], &rows);
    }

    fn write_slow_side(&self, md: &mut String) {
        let s = &self.settings;
        let share = match s.kinds.len() {
            1 => "All of one kind".to_string(),
            4 => "A quarter of each kind".to_string(),
            n => format!("An equal share of each of {n} kinds"),
        };
        let per_kind = s.slow / s.kinds.len().max(1) as u32;
        let _ = writeln!(md, "## The slow connections\n");
        let _ = writeln!(
            md,
            "{share} ({} each; any remainder goes to the first kinds), all to \
             herdsman's listener on 127.0.0.1, each spread over the first second and stepping \
             once a second:\n",
            thousands(f64::from(per_kind))
        );
        let _ = writeln!(md, "| kind | what each connection does |\n|---|---|");
        for &kind in &s.kinds {
            let _ = writeln!(md, "| {} | {} |", kind.label(), kind.describe());
        }
        let _ = writeln!(
            md,
            "\nCounted on the client side when the holders are told to finish, right after each \
             wrk run, summed over the {} run(s) with. **Held**: still open, herdsman having \
             neither closed it nor answered the unfinished request. **Ended by herdsman**: a \
             close, a reset, or an answer (such as 408) before the request was complete; for \
             reset-upload, cycles that herdsman ended before the client's reset. A slow reader \
             that herdsman closed cannot see it until it has read the queued answer, so \
             herdsman's side is counted too (next table).\n",
            self.runs_with()
        );
        let _ = writeln!(
            md,
            "| kind | opened | held at the end | ended by herdsman | failed to connect | resets sent | how herdsman ended the first it ended |\n|---|---:|---:|---:|---:|---:|---|"
        );
        for (kind, t) in self.tallies() {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} |",
                kind.label(),
                thousands(f64::from(t.opened)),
                thousands(f64::from(t.held)),
                t.ended,
                t.failed,
                thousands(f64::from(t.resets)),
                t.first_end.as_deref().unwrap_or("–")
            );
        }
        if let Some((_, reader)) = self
            .tallies()
            .into_iter()
            .find(|(k, _)| *k == Kind::SlowReader)
        {
            let _ = writeln!(
                md,
                "\nslow-reader: {} of {} responses started (status line read), {} bytes read in \
                 all.\n",
                reader.started,
                reader.opened,
                thousands(reader.bytes_read as f64)
            );
        }
        let _ = writeln!(
            md,
            "herdsman's side, per run with: its ESTABLISHED connections on the listening port \
             (from /proc/net/tcp) once the slow connections had settled, and again after the wrk \
             run; its RSS before they opened and once they had settled; the CPU that holding \
             them alone cost over the {} s they settled, before wrk started; and the CPU the \
             slow-client processes used during the wrk run (they must not compete for the \
             CPUs).\n",
            super::SETTLE_WITH.as_secs()
        );
        let _ = writeln!(
            md,
            "| round | slow connections | ESTABLISHED before wrk | after wrk | herdsman RSS before opening → settled, MiB | holding them alone, % of one CPU: herdsman | backend | kernel irq + softirq | slow clients' CPU during wrk, % of one |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for run in &self.runs {
            if let Some(side) = &run.slow_side {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {:.1} → {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                    run.round,
                    thousands(f64::from(run.slow)),
                    thousands(side.established_before as f64),
                    thousands(side.established_after as f64),
                    side.rss_before_open_kib as f64 / 1024.0,
                    run.rss_kib as f64 / 1024.0,
                    side.holding.herdsman * 100.0,
                    side.holding.backend * 100.0,
                    side.holding.interrupts * 100.0,
                    run.cpu.slow_clients * 100.0
                );
            }
        }
        let _ = writeln!(md);
    }

    fn write_runs(&self, md: &mut String) {
        let rows = self.runs.iter().map(|r| {
            format!(
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} | {:.2} | {:.2} | {:.2} | {} | {} |",
                r.round,
                thousands(f64::from(r.slow)),
                thousands(r.wrk.requests as f64),
                thousands(r.wrk.requests_per_sec),
                r.wrk.p50_us,
                r.wrk.p99_us,
                r.wrk.max_us,
                r.cpu_us_per_request,
                r.rss_kib as f64 / 1024.0,
                r.cpu.herdsman,
                r.cpu.backend,
                r.cpu.other,
                r.wrk.socket_errors,
                r.wrk.bad_status
            )
        });
        write_details_table(
            md,
            "Every run, in order",
            "| round | slow | requests | req/s | p50 µs | p99 µs | max µs | herdsman CPU-µs/req | herdsman RSS MiB | herdsman CPUs | backend CPUs | other processes' CPUs | socket errors | status ≥ 400 |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
    }
}

/// One line of progress on stderr.
pub fn progress_line(run: &SlowRun) -> String {
    let mut line = format!(
        "{:>6} slow: {:>8} req/s, p50 {:.0} µs, p99 {:.0} µs, {:.2} CPU-µs/req, errors {}, \
         other processes {:.2} CPU",
        thousands(f64::from(run.slow)),
        thousands(run.wrk.requests_per_sec),
        run.wrk.p50_us,
        run.wrk.p99_us,
        run.cpu_us_per_request,
        run.wrk.socket_errors + run.wrk.bad_status,
        run.cpu.other
    );
    if let Some(side) = &run.slow_side {
        let held: Vec<String> = side
            .tallies
            .iter()
            .filter(|(_, t)| t.opened > 0)
            .map(|(k, t)| format!("{} {}/{}", k.label(), t.held, t.opened))
            .collect();
        let _ = write!(
            line,
            "; held {}; ESTABLISHED {} → {}; holding them alone cost herdsman {:.0}% of a CPU",
            held.join(", "),
            side.established_before,
            side.established_after,
            side.holding.herdsman * 100.0
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::wrk::sample_report;
    use std::path::PathBuf;

    fn run(round: u32, slow: u32, rps: f64) -> SlowRun {
        SlowRun {
            round,
            slow,
            wrk: sample_report(rps),
            cpu_us_per_request: 15.0,
            rss_kib: 4096,
            cpu: CpuSplit {
                herdsman: 0.9,
                other: 0.01,
                ..CpuSplit::default()
            },
            slow_side: (slow > 0).then(|| SlowSide {
                tallies: Kind::ALL
                    .iter()
                    .map(|&k| {
                        (
                            k,
                            Tally {
                                opened: 250,
                                held: 250,
                                ..Tally::default()
                            },
                        )
                    })
                    .collect(),
                established_before: 1000,
                established_after: 1000,
                rss_before_open_kib: 4096,
                holding: CpuSplit::default(),
            }),
        }
    }

    fn session(runs: Vec<SlowRun>) -> Session {
        Session {
            facts: RunFacts::sample("slowloris"),
            settings: Settings {
                slow: 1000,
                workers: 2,
                connections: 50,
                seconds: 10,
                rounds: 3,
                out: PathBuf::from("x.md"),
                kinds: Kind::ALL.to_vec(),
                memory_only: false,
            },
            client_header_seconds: 300,
            config: "workers = 2\n".into(),
            runs,
            failure: None,
        }
    }

    #[test]
    fn the_ratio_is_paired_per_round_and_judged_against_the_target() {
        let s = session(vec![
            run(1, 0, 100.0),
            run(1, 1000, 95.0),
            run(2, 1000, 80.0),
            run(2, 0, 100.0),
            run(3, 0, 120.0),
            run(3, 1000, 92.0),
        ]);
        // Per round: 95%, 80%, 76.7%; judged on their median, not on the medians' ratio (92%).
        assert_eq!(s.paired().rounds, vec![0.95, 0.8, 92.0 / 120.0]);
        assert_eq!(s.paired().median(), Some(0.8));
        assert_eq!(s.paired().of_medians, Some(0.92));
        assert_eq!(s.verdict(), "**NOT MET**");
        assert_eq!(
            s.ratio_text(),
            "80.0% (per round 76.7–95.0%; ratio of the medians 92.0%)"
        );
        let s = session(vec![
            run(1, 0, 100.0),
            run(1, 1000, 95.0),
            run(2, 1000, 91.0),
            run(2, 0, 100.0),
        ]);
        assert_eq!(s.verdict(), "met");
        let s = session(vec![run(1, 0, 100.0), run(1, 1000, 85.0)]);
        assert_eq!(s.verdict(), "**NOT MET**");
        assert_eq!(session(vec![]).verdict(), "not measured");
    }

    #[test]
    fn the_results_file_has_every_section() {
        let s = session(vec![run(1, 0, 50_000.0), run(1, 1000, 49_000.0)]);
        let md = s.render(None);
        for part in [
            "## The other clients (wrk)",
            "| requests/s | 50,000 | 49,000 | 98.0% |",
            "## The slow connections",
            "| slow-head | 250 | 250 | 0 | 0 | 0 | – |",
            "## Every run, in order",
            "## herdsman's configuration",
            "target ≥ 90%: met",
            "\"300s\"",
        ] {
            assert!(md.contains(part), "{part:?} missing from:\n{md}");
        }
        let summary = s.summary();
        assert!(summary.contains("98.0%"), "{summary}");
        assert!(summary.contains("slow-head 250/250"), "{summary}");
        assert!(md.contains("| without | 0.90 | 0.00 |"), "{md}");
        assert!(!md.contains("Disturbed runs"), "{md}");
        let mut grown = run(1, 1000, 49_000.0);
        grown.rss_kib += 10_000;
        grown.cpu.other = 0.5;
        let s = session(vec![run(1, 0, 50_000.0), grown]);
        assert_eq!(s.rss_growth(), Some((10_000.0 / 1024.0, 10_240.0)));
        let md = s.render(None);
        assert!(md.contains("about 10.0 KiB per slow connection"), "{md}");
        assert!(
            md.contains("during 1 of 2 runs (round 1 with (0.50 CPU))"),
            "{md}"
        );
    }
}
