//! What every benchmark that writes a results file shares: the facts of the run (the command to
//! repeat it, date, machine, load, time taken) and the last step (print the table, draw the
//! plot, write the Markdown), with, for a session of runs that may stop early, the step before it
//! (report the stop, keep an earlier file rather than write an empty one).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::kit::{environment, tools};

/// The facts a results file states about its run, so anyone can judge and repeat it.
pub struct RunFacts {
    /// How to run it again (under the lock that keeps benchmarks from overlapping).
    pub command: String,
    pub date: String,
    /// (what, value) lines about the machine and the versions.
    pub setup: Vec<(String, String)>,
    pub load_before: String,
    pub load_after: String,
    pub elapsed: Duration,
}

impl RunFacts {
    /// Facts of a run starting now on a machine described by `setup`.
    pub fn new(setup: Vec<(String, String)>) -> RunFacts {
        RunFacts {
            command: environment::locked_reproduce_command(),
            date: tools::version_line(Path::new("date"), &["-u", "+%Y-%m-%d %H:%M UTC"]),
            setup,
            load_before: environment::load_average(),
            load_after: String::new(),
            elapsed: Duration::ZERO,
        }
    }

    /// Records the end of the run.
    pub fn end(&mut self, started: Instant) {
        self.elapsed = started.elapsed();
        self.load_after = environment::load_average();
    }

    /// The command block and the table of facts, as Markdown.
    pub fn write_markdown(&self, md: &mut String) {
        let _ = writeln!(md, "```\n{}\n```\n", self.command);
        let _ = writeln!(md, "| | |\n|---|---|");
        let _ = writeln!(md, "| date | {} |", self.date);
        for (what, value) in &self.setup {
            let _ = writeln!(md, "| {what} | {value} |");
        }
        let _ = writeln!(
            md,
            "| load average before / after | {} / {} |",
            self.load_before, self.load_after
        );
        let _ = writeln!(md, "| time taken | {:.0} s |\n", self.elapsed.as_secs_f64());
    }
}

/// Prints `table`, draws the plot beside `out` (a PNG of the same name; a failure is reported,
/// not fatal) and writes the Markdown that `render` makes, given the plot when there is one.
pub fn write_results(
    benchmark: &str,
    out: &Path,
    table: &str,
    elapsed: Duration,
    plot: impl FnOnce(&Path) -> anyhow::Result<()>,
    render: impl FnOnce(Option<&Path>) -> String,
) -> anyhow::Result<()> {
    print!("{table}");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let plot_path = out.with_extension("png");
    let plotted = plot(&plot_path);
    if let Err(e) = &plotted {
        eprintln!("{benchmark}: no plot: {e:#}");
    }
    std::fs::write(out, render(plotted.is_ok().then_some(plot_path.as_path())))
        .with_context(|| format!("writing {}", out.display()))?;
    eprintln!("wrote {} in {:.0} s", out.display(), elapsed.as_secs_f64());
    Ok(())
}

/// A benchmark's session of runs, as its last step needs it.
pub trait Results {
    /// Whether no run was measured.
    fn measured_nothing(&self) -> bool;
    /// The facts of the run, and why it stopped early if it did.
    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>);
    /// The plain-text figures printed at the end.
    fn summary(&self) -> String;
    /// The results file's Markdown, given the plot when there is one.
    fn render(&self, plot: Option<&Path>) -> String;
    /// Draws the plot at `path`.
    fn plot(&self, path: &Path) -> anyhow::Result<()>;
}

/// The last step of a session that started at `started` and ended with `outcome`: reports a stop
/// (and records it for the results file); unless nothing was measured, ends the facts and writes
/// the results with `write_results`. Returns `outcome` once the results are written.
pub fn finish(
    benchmark: &str,
    out: &Path,
    started: Instant,
    session: &mut impl Results,
    outcome: anyhow::Result<()>,
) -> anyhow::Result<()> {
    if let Err(e) = &outcome {
        eprintln!("{benchmark}: stopped: {e:#}");
        *session.facts_and_failure().1 = Some(format!("{e:#}"));
    }
    if session.measured_nothing() {
        // Nothing measured: an earlier results file is worth more than an empty one.
        return outcome;
    }
    let (facts, _) = session.facts_and_failure();
    facts.end(started);
    let elapsed = facts.elapsed;
    write_results(
        benchmark,
        out,
        &session.summary(),
        elapsed,
        |path| session.plot(path),
        |plot| session.render(plot),
    )?;
    outcome
}
