//! What every benchmark that writes a results file shares: the facts of the run (the command to
//! repeat it, date, machine, load, time taken) and the last step (print the table, draw the
//! plot, write the Markdown), with, for a session of runs that may stop early, the step before it
//! (report the stop, keep an earlier file rather than write an empty one); and the configurations a
//! session ran, as its results file shows them.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::kit::cpu::DISTURBED_CPUS;
use crate::kit::markdown::one_line;
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

    /// The facts of a made-up 100 s run of `benchmark`: for tests.
    #[cfg(test)]
    pub fn sample(benchmark: &str) -> RunFacts {
        RunFacts {
            command: format!("flock /tmp/herdsman-bench.lock cargo run … {benchmark}"),
            date: "today".into(),
            setup: vec![],
            load_before: "0".into(),
            load_after: "0".into(),
            elapsed: Duration::from_secs(100),
        }
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

/// What a session's summary and results file say of its trouble: the runs that processes outside
/// the benchmark disturbed (named, such as "round 2 with (0.45 CPU)"), out of how many, and why
/// it stopped early, if it did.
pub struct Trouble<'a> {
    pub disturbed: &'a [String],
    pub runs: usize,
    pub failure: Option<&'a String>,
}

impl<'a> Trouble<'a> {
    pub fn new(disturbed: &'a [String], runs: usize, failure: &'a Option<String>) -> Trouble<'a> {
        Trouble {
            disturbed,
            runs,
            failure: failure.as_ref(),
        }
    }

    /// The summary's closing lines.
    pub fn write_summary(&self, text: &mut String) {
        if !self.disturbed.is_empty() {
            let _ = writeln!(
                text,
                "note: other processes used more than {DISTURBED_CPUS} CPU in {} of {} runs: {}",
                self.disturbed.len(),
                self.runs,
                self.disturbed.join(", ")
            );
        }
        if let Some(failure) = self.failure {
            let _ = writeln!(text, "stopped early: {failure}");
        }
    }

    /// The results file's paragraph on disturbed runs and its section on the early stop.
    pub fn write_markdown(&self, md: &mut String) {
        if !self.disturbed.is_empty() {
            let _ = writeln!(
                md,
                "**Disturbed runs**: processes outside this benchmark used more than \
                 {DISTURBED_CPUS} CPU during {} of {} runs ({}); on a 2-core machine that moves \
                 requests/s as much as anything measured here.\n",
                self.disturbed.len(),
                self.runs,
                self.disturbed.join(", ")
            );
        }
        if let Some(failure) = self.failure {
            let _ = writeln!(md, "## Stopped early\n\n{}\n", one_line(failure));
        }
    }
}

/// The configurations a session ran, for its results file: each with a title, its file's name and
/// its text, the session's scratch directory written SCRATCH (it differs from run to run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Configurations {
    /// (title, file name, text).
    pub entries: Vec<(String, String, String)>,
}

impl Configurations {
    /// Keeps a configuration, `scratch` (this run's own) written SCRATCH.
    pub fn record(&mut self, title: &str, file: &str, text: &str, scratch: &Path) {
        let text = text.replace(&scratch.display().to_string(), "SCRATCH");
        self.entries
            .push((title.to_string(), file.to_string(), text));
    }

    /// A `## Configurations` section with each folded under its title; nothing when none.
    pub fn write_markdown(&self, md: &mut String) {
        if self.entries.is_empty() {
            return;
        }
        let _ = writeln!(md, "## Configurations\n");
        for (title, file, text) in &self.entries {
            let _ = writeln!(
                md,
                "<details><summary>{title}: {file}</summary>\n\n```\n{}\n```\n\n</details>\n",
                text.trim_end()
            );
        }
    }
}

/// The results file's link to its plot (when there is one, beside it): `![alt](NAME.png)`.
pub fn write_plot_link(md: &mut String, plot: Option<&Path>, alt: &str) {
    if let Some(name) = plot.and_then(|p| p.file_name()) {
        let _ = writeln!(md, "![{alt}]({})\n", name.to_string_lossy());
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
