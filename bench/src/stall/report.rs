//! What `stall` prints and writes: per mode, connect-to-first-byte percentiles outside and during
//! the stall window (pooled over rounds, with each round's p99), the stalled worker each round, and
//! a plot of the worst latency over time.

use std::fmt::Write as _;
use std::path::Path;

use super::load::{Sample, StallRun};
use super::StallArgs;
use crate::kit::plot::{LineChart, Series};
use crate::kit::proxies::IntakeMode;
use crate::kit::results::RunFacts;
use crate::kit::stats::percentile;

/// Connections due this long before the stall, or up to this long after it ended, belong to
/// neither window: they may straddle its edges (a queue behind the stalled worker drains after it).
const EDGE_BEFORE_MS: f64 = 50.0;
const EDGE_AFTER_MS: f64 = 300.0;
/// A connection slower than this (ms) waited on the stalled worker: the baseline p99 is a few ms.
const SLOW_MS: f64 = 100.0;
/// The stall the hook makes, for runs whose stall request never answered.
const STALL_MS: f64 = 500.0;

pub struct Session {
    /// Command, date, machine, load and time taken.
    pub facts: RunFacts,
    pub workers: u32,
    pub rate: u32,
    pub run_ms: u64,
    pub stall_at_ms: u64,
    pub rounds: u32,
    pub runs: Vec<StallRun>,
    pub failures: Vec<(String, String)>,
}

/// Latencies (ms) of one window, sorted, and how many connections failed in it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Window {
    pub latencies: Vec<f64>,
    pub failed: usize,
}

impl Window {
    fn add(&mut self, sample: &Sample) {
        match sample.latency_ms {
            Some(ms) => self.latencies.push(ms),
            None => self.failed += 1,
        }
    }

    fn sort(&mut self) {
        self.latencies.sort_by(f64::total_cmp);
    }

    pub fn p(&self, p: f64) -> f64 {
        percentile(&self.latencies, p).unwrap_or(f64::NAN)
    }

    /// Connections slower than SLOW_MS: those that waited on the stalled worker.
    pub fn slow(&self) -> usize {
        self.latencies.iter().filter(|&&ms| ms > SLOW_MS).count()
    }
}

/// Splits a run's connections into (baseline, during the stall), by when each was due.
pub fn windows(run: &StallRun) -> (Window, Window) {
    let start = run.stall_sent_ms;
    let end = run.stall_answered_ms.unwrap_or(start + STALL_MS);
    let (mut baseline, mut during) = (Window::default(), Window::default());
    for sample in &run.samples {
        if sample.due_ms >= start && sample.due_ms <= end {
            during.add(sample);
        } else if sample.due_ms < start - EDGE_BEFORE_MS || sample.due_ms > end + EDGE_AFTER_MS {
            baseline.add(sample);
        }
    }
    baseline.sort();
    during.sort();
    (baseline, during)
}

/// The windows of every run of `mode`, pooled.
fn pooled(runs: &[&StallRun]) -> (Window, Window) {
    let (mut baseline, mut during) = (Window::default(), Window::default());
    for run in runs {
        let (b, d) = windows(run);
        baseline.latencies.extend(b.latencies);
        baseline.failed += b.failed;
        during.latencies.extend(d.latencies);
        during.failed += d.failed;
    }
    baseline.sort();
    during.sort();
    (baseline, during)
}

impl Session {
    pub fn new(args: &StallArgs, herdsman: &Path, busy: Option<f64>) -> Session {
        Session {
            facts: RunFacts::new(crate::kit::environment::machine_lines(herdsman, busy)),
            workers: args.workers,
            rate: args.rate,
            run_ms: args.run_ms,
            stall_at_ms: args.stall_at_ms,
            rounds: args.rounds,
            runs: Vec::new(),
            failures: Vec::new(),
        }
    }

    fn modes(&self) -> Vec<IntakeMode> {
        let mut modes: Vec<IntakeMode> = Vec::new();
        for run in &self.runs {
            if !modes.contains(&run.mode) {
                modes.push(run.mode);
            }
        }
        modes
    }

    fn runs_of(&self, mode: IntakeMode) -> Vec<&StallRun> {
        self.runs.iter().filter(|r| r.mode == mode).collect()
    }

    pub fn table(&self) -> String {
        let mut text = format!(
            "{:<10} {:>8} {:>8} {:>8} {:>6} | {:>8} {:>8} {:>8} {:>6} | {:>12}\n",
            "mode", "base p50", "p99", "max", "n", "stall p50", "p99", "max", "n", "p99 ratio"
        );
        for mode in self.modes() {
            let (b, d) = pooled(&self.runs_of(mode));
            let _ = writeln!(
                text,
                "{:<10} {:>8.2} {:>8.2} {:>8.1} {:>6} | {:>9.2} {:>8.2} {:>8.1} {:>6} | {:>11.1}x",
                mode.label(),
                b.p(50.0),
                b.p(99.0),
                b.p(100.0),
                b.latencies.len(),
                d.p(50.0),
                d.p(99.0),
                d.p(100.0),
                d.latencies.len(),
                d.p(99.0) / b.p(99.0)
            );
        }
        text
    }

    pub fn render(&self, plot: Option<&Path>) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# Connect-to-first-byte latency while one worker stalls\n"
        );
        let _ = writeln!(
            md,
            "herdsman with {} workers, built with `--features fault-injection`, takes {} new \
             connections per second for {} ms (open loop: each connection is due at its own time \
             and measured from then, so a late generator counts against the figures). Each \
             connection: connect, `GET /` with `Connection: close`, time to the first byte of the \
             answer, then read to EOF. At {} ms one `GET /__herdsman/stall` is sent; the worker that \
             serves it sleeps 500 ms (std::thread::sleep). Which worker that is cannot be chosen in \
             balanced or exclusive mode, so it is found afterwards: the worker whose context \
             switches and accepts did not move between 100 ms and 400 ms after the stall request and \
             that holds a connection (idle workers in exclusive mode do not move either). \
             {} run(s) per mode, one stall each; the table pools them.\n",
            self.workers, self.rate, self.run_ms, self.stall_at_ms, self.rounds
        );
        let _ = writeln!(
            md,
            "Windows: **stall** = connections due between sending the stall request and its \
             answer; **baseline** = connections due more than {EDGE_BEFORE_MS} ms before it or \
             more than {EDGE_AFTER_MS} ms after the answer (the edges are left out). Target for \
             `balanced` (issue 3): p99 during the stall ≤ 2 × p99 without.\n"
        );
        self.facts.write_markdown(&mut md);

        let _ = writeln!(md, "## Summary (ms, pooled over rounds)\n");
        let _ = writeln!(
            md,
            "| mode | baseline p50 | baseline p99 | baseline max | n | stall p50 | stall p99 | stall max | n | stall > 100 ms | failed (base / stall) | p99 stall ÷ baseline | per-round p99 stall ÷ baseline |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        );
        for mode in self.modes() {
            let runs = self.runs_of(mode);
            let (b, d) = pooled(&runs);
            let per_round: Vec<String> = runs
                .iter()
                .map(|r| {
                    let (b, d) = windows(r);
                    format!("{:.1}", d.p(99.0) / b.p(99.0))
                })
                .collect();
            let _ = writeln!(
                md,
                "| {} | {:.2} | {:.2} | {:.1} | {} | {:.2} | {:.2} | {:.1} | {} | {} ({:.1}%) | {} / {} | {:.1}× | {} |",
                mode.label(),
                b.p(50.0),
                b.p(99.0),
                b.p(100.0),
                b.latencies.len(),
                d.p(50.0),
                d.p(99.0),
                d.p(100.0),
                d.latencies.len(),
                d.slow(),
                100.0 * d.slow() as f64 / d.latencies.len().max(1) as f64,
                b.failed,
                d.failed,
                d.p(99.0) / b.p(99.0),
                per_round.join(", ")
            );
        }
        if let Some(plot) = plot.and_then(Path::file_name) {
            let _ = writeln!(
                md,
                "\n![worst latency over time]({})\n",
                plot.to_string_lossy()
            );
            let _ = writeln!(
                md,
                "The slowest connection due in each 50 ms slice of round 1, per mode (log scale); \
                 the stall starts at {} ms.\n",
                self.stall_at_ms
            );
        }
        let _ = writeln!(md, "## Each run\n");
        let _ = writeln!(
            md,
            "| mode | round | stall sent → answered (ms) | stall answer | stalled worker(s) | active per worker 400 ms into the stall | queued hand-offs then | stall-window p99 / max (ms) | stall > 100 ms |\n\
             |---|---:|---|---|---|---|---|---|---:|"
        );
        for run in &self.runs {
            let (_, d) = windows(run);
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} → {} | {} | {} | {} | {} | {:.1} / {:.1} | {} |",
                run.mode.label(),
                run.round,
                run.stall_sent_ms,
                run.stall_answered_ms
                    .map_or("—".into(), |a| format!("{a:.0}")),
                run.stall_outcome,
                if run.stalled_workers.is_empty() {
                    "none seen".to_string()
                } else {
                    list(&run.stalled_workers)
                },
                list(&run.active_during),
                list(&run.pending_during),
                d.p(99.0),
                d.p(100.0),
                d.slow()
            );
        }
        if !self.failures.is_empty() {
            let _ = writeln!(md, "\n## Failures\n");
            for (mode, error) in &self.failures {
                let _ = writeln!(md, "- {mode}: {error}");
            }
        }
        md
    }

    /// The slowest connection per 50 ms slice of each mode's first round.
    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let series = self
            .modes()
            .into_iter()
            .filter_map(|mode| self.runs_of(mode).first().copied())
            .map(|run| Series {
                name: run.mode.label().to_string(),
                points: worst_per_slice(&run.samples, 50.0),
            })
            .collect();
        LineChart {
            title: format!(
                "Slowest connect-to-first-byte per 50 ms, one worker stalled at {} ms",
                self.stall_at_ms
            ),
            x_label: "time connection was due (ms)".into(),
            y_label: "latency (ms)".into(),
            series,
            log_y: true,
        }
        .write_png(path)
    }
}

/// (slice start, slowest latency) per `slice_ms` of due time; failed connections are left out.
pub fn worst_per_slice(samples: &[Sample], slice_ms: f64) -> Vec<(f64, f64)> {
    let mut worst: Vec<(f64, f64)> = Vec::new();
    for sample in samples {
        let Some(latency) = sample.latency_ms else {
            continue;
        };
        let slice = (sample.due_ms / slice_ms).floor() * slice_ms;
        match worst.iter_mut().find(|(s, _)| *s == slice) {
            Some((_, w)) => *w = w.max(latency),
            None => worst.push((slice, latency)),
        }
    }
    worst.sort_by(|a, b| a.0.total_cmp(&b.0));
    worst
}

pub fn progress_line(run: &StallRun) -> String {
    let (b, d) = windows(run);
    format!(
        "{:<10} round {}: baseline p50 {:.2} p99 {:.2} ms; stall p50 {:.2} p99 {:.2} max {:.1} ms ({}x p99), {} over 100 ms; stalled worker(s) {:?}; stall answer {}",
        run.mode.label(),
        run.round,
        b.p(50.0),
        b.p(99.0),
        d.p(50.0),
        d.p(99.0),
        d.p(100.0),
        format_args!("{:.1}", d.p(99.0) / b.p(99.0)),
        d.slow(),
        run.stalled_workers,
        run.stall_outcome
    )
}

fn list<T: ToString>(values: &[T]) -> String {
    values
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(samples: Vec<Sample>) -> StallRun {
        StallRun {
            mode: IntakeMode::Balanced,
            round: 1,
            samples,
            stall_sent_ms: 1000.0,
            stall_answered_ms: Some(1500.0),
            stall_outcome: "HTTP/1.1 200 OK".into(),
            stalled_workers: vec![3],
            active_during: vec![],
            pending_during: vec![],
        }
    }

    fn sample(due_ms: f64, latency_ms: Option<f64>) -> Sample {
        Sample { due_ms, latency_ms }
    }

    #[test]
    fn connections_fall_into_windows_by_when_they_were_due() {
        let run = run_with(vec![
            sample(10.0, Some(1.0)),
            sample(960.0, Some(9.0)), // edge before: neither
            sample(1000.0, Some(400.0)),
            sample(1499.0, None),
            sample(1700.0, Some(50.0)), // edge after: neither
            sample(1900.0, Some(2.0)),
        ]);
        let (baseline, during) = windows(&run);
        assert_eq!(baseline.latencies, vec![1.0, 2.0]);
        assert_eq!(baseline.failed, 0);
        assert_eq!(during.latencies, vec![400.0]);
        assert_eq!(during.slow(), 1);
        assert_eq!(during.failed, 1);
    }

    #[test]
    fn the_plot_keeps_the_slowest_per_slice() {
        let samples = [
            sample(0.0, Some(1.0)),
            sample(49.0, Some(3.0)),
            sample(50.0, Some(2.0)),
            sample(60.0, None),
        ];
        assert_eq!(
            worst_per_slice(&samples, 50.0),
            vec![(0.0, 3.0), (50.0, 2.0)]
        );
    }
}
