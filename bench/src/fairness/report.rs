//! What `fairness` prints and writes: one row per mode × mix × count, the per-worker detail, what
//! was run and on what, and a plot of each worker's share of the load.

use std::fmt::Write as _;
use std::path::Path;

use super::stats::per;
use super::{FairnessArgs, Run};
use crate::kit::environment;
use crate::kit::plot::{LineChart, Series};
use crate::kit::results::RunFacts;
use crate::kit::stats::balance;

/// Everything the results file says.
pub struct Session {
    /// Command, date, machine, load and time taken.
    pub facts: RunFacts,
    pub workers: u32,
    pub storm_gap_us: u64,
    pub hold_ms: u64,
    pub client_processes: u32,
    pub runs: Vec<Run>,
    /// (mode, what failed).
    pub failures: Vec<(String, String)>,
}

impl Session {
    pub fn new(args: &FairnessArgs, herdsman: &Path, busy: Option<f64>) -> Session {
        Session {
            facts: RunFacts::new(environment::machine_lines(herdsman, busy)),
            workers: args.workers,
            storm_gap_us: args.storm_gap_us,
            hold_ms: args.hold_ms,
            client_processes: args.client_processes,
            runs: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// The summary table, as text for the terminal.
    pub fn table(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "{:<10} {:<5} {:>6} {:>7} {:>6} {:>8} {:>9} {:>9} {:>10} {:>9}",
            "mode",
            "mix",
            "conns",
            "ok",
            "failed",
            "CV",
            "max/mean",
            "cs/conn",
            "spur/conn",
            "overflows"
        );
        for run in &self.runs {
            let row = Row::of(run);
            let _ = writeln!(
                text,
                "{:<10} {:<5} {:>6} {:>7} {:>6} {:>7.1}% {:>9.2} {:>9.2} {:>10.3} {:>9}",
                run.mode.label(),
                run.mix,
                run.connections,
                run.ok,
                run.failed,
                row.cv * 100.0,
                row.max_over_mean,
                row.switches,
                row.spurious,
                run.delta.listen_overflows
            );
        }
        text
    }

    pub fn render(&self, plot: Option<&Path>) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# Fairness and wake-ups per intake mode\n");
        let _ = writeln!(
            md,
            "How evenly herdsman's {} workers share connections in each intake mode, and what taking \
             a connection costs the workers in context switches. One run per row; a row's spread is \
             across workers, not across repeats.\n",
            self.workers
        );
        self.facts.write_markdown(&mut md);

        let _ = writeln!(md, "## What each mix is\n");
        let _ = writeln!(
            md,
            "- **storm**: one client connects and closes at once, sequentially, {} µs apart, \
             without a request, against an otherwise idle herdsman. The spread is of *served* \
             connections.\n\
             - **short**: connect, one `GET /` with `Connection: close`, read to EOF; {} client \
             processes with 64 exchanges in flight each. The spread is of *served* connections \
             per worker (`accepted − handoffs_sent + handoffs_received`).\n\
             - **long**: keep-alive connections opened by {} client processes (64 opening at once \
             each, one request each); once all are open, each sends 2 more requests spread over \
             {} ms, the last one closing. The spread is of *active* connections per worker, read \
             from `/api/workers` once every client has said all its connections are open.\n\
             - cs/conn: the workers' context switches (voluntary + involuntary, all workers) during \
             the run ÷ connections accepted; spur/conn: user-space spurious wake-ups ÷ accepted. For \
             short and long these include serving the requests, not only accepting.\n\
             - overflows: growth of the kernel's `ListenOverflows` counter during the run \
             (machine-wide).\n\
             - Targets for `balanced` (issue 3): storm ≤ 2.2 cs/conn and ≤ 0.05 spurious/conn; CV \
             ≤ 5% at 10,000 connections for short (served) and long (active).\n",
            self.storm_gap_us, self.client_processes, self.client_processes, self.hold_ms
        );

        let _ = writeln!(md, "## Summary\n");
        let _ = writeln!(
            md,
            "| mode | mix | connections | ok | failed | accepted | CV | max ÷ mean | cs / conn | spurious / conn | listen overflows |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for run in &self.runs {
            let row = Row::of(run);
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {:.1}% | {:.2} | {:.2} | {:.3} | {} |",
                run.mode.label(),
                run.mix,
                run.connections,
                run.ok,
                run.failed,
                run.accepted(),
                row.cv * 100.0,
                row.max_over_mean,
                row.switches,
                row.spurious,
                run.delta.listen_overflows
            );
        }
        if let Some(plot) = plot.and_then(Path::file_name) {
            let _ = writeln!(
                md,
                "\n![each worker's share of the load]({})\n",
                plot.to_string_lossy()
            );
            let _ = writeln!(
                md,
                "Each worker's load ÷ the mean at the largest connection count (short: served; \
                 long: active while all are open). A flat line at 1 is a perfect spread.\n"
            );
        }

        let _ = writeln!(md, "## Per worker\n");
        let _ = writeln!(
            md,
            "Per worker, in worker order: served (accepted − sent + received), peak active seen by \
             50 ms polls, active once all were open (long only), hand-offs sent / received, \
             context switches, spurious wake-ups.\n"
        );
        for run in &self.runs {
            let d = &run.delta;
            let _ = writeln!(
                md,
                "- **{} {} {}**",
                run.mode.label(),
                run.mix,
                run.connections
            );
            let _ = writeln!(md, "  - served: {}", list(&d.per_worker(|w| w.served())));
            if !run.peak_active.is_empty() {
                let _ = writeln!(md, "  - peak active: {}", list(&run.peak_active));
            }
            if let Some(open) = &run.all_open_active {
                let _ = writeln!(md, "  - active with all open: {}", list(open));
            }
            let _ = writeln!(
                md,
                "  - hand-offs sent / received: {} / {}",
                list(&d.per_worker(|w| w.handoffs_sent)),
                list(&d.per_worker(|w| w.handoffs_received))
            );
            let _ = writeln!(
                md,
                "  - context switches: {}",
                list(&d.per_worker(|w| w.context_switches))
            );
            let _ = writeln!(
                md,
                "  - spurious wake-ups: {}",
                list(&d.per_worker(|w| w.spurious_wakeups))
            );
            if let Some(e) = &run.first_error {
                let _ = writeln!(md, "  - first client error: `{e}`");
            }
        }
        if !self.failures.is_empty() {
            let _ = writeln!(md, "\n## Failures\n");
            for (mode, error) in &self.failures {
                let _ = writeln!(md, "- {mode}: {error}");
            }
        }
        md
    }

    /// Per-worker load ÷ mean at the largest count, one line per mode × mix.
    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let largest = self
            .runs
            .iter()
            .filter(|r| r.mix != "storm")
            .map(|r| r.connections)
            .max();
        let series = self
            .runs
            .iter()
            .filter(|r| Some(r.connections) == largest && r.mix != "storm")
            .map(|run| {
                let values = run.spread_values();
                let mean = balance(&values).map_or(f64::NAN, |b| b.mean);
                Series {
                    name: format!("{} {}", run.mode.label(), run.mix),
                    points: values
                        .iter()
                        .enumerate()
                        .map(|(i, &v)| (i as f64, v as f64 / mean))
                        .collect(),
                }
            })
            .collect();
        LineChart {
            title: format!(
                "Each worker's load ÷ mean, {} connections (short: served, long: active)",
                largest.unwrap_or(0)
            ),
            x_label: "worker".into(),
            y_label: "load ÷ mean".into(),
            series,
            log_y: false,
        }
        .write_png(path)
    }
}

/// The figures of one summary row.
struct Row {
    cv: f64,
    max_over_mean: f64,
    switches: f64,
    spurious: f64,
}

impl Row {
    fn of(run: &Run) -> Row {
        let b = balance(&run.spread_values());
        let accepted = run.accepted();
        Row {
            cv: b.map_or(f64::NAN, |b| b.cv),
            max_over_mean: b.map_or(f64::NAN, |b| b.max_over_mean),
            switches: per(run.delta.total(|w| w.context_switches), accepted),
            spurious: per(run.delta.total(|w| w.spurious_wakeups), accepted),
        }
    }
}

/// One line of progress on stderr.
pub fn progress_line(run: &Run) -> String {
    let row = Row::of(run);
    format!(
        "{:<10} {:<5} {:>6} conns: ok {} failed {}, CV {:.1}%, max/mean {:.2}, {:.2} cs/conn, {:.3} spurious/conn, {} overflows",
        run.mode.label(),
        run.mix,
        run.connections,
        run.ok,
        run.failed,
        row.cv * 100.0,
        row.max_over_mean,
        row.switches,
        row.spurious,
        run.delta.listen_overflows
    )
}

fn list(values: &[u64]) -> String {
    values
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}
