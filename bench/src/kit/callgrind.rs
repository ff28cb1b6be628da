//! Counting a program's instructions with callgrind (valgrind's tool): the program runs under
//! valgrind with counting off (`--instr-atstart=no`), and `callgrind_control` zeroes the count,
//! turns counting on only around the work to be counted, turns it off again and dumps it. A
//! dump's `totals:` line is the user-space instructions every thread of the program executed
//! meanwhile: a figure that does not move with the machine's load (valgrind runs the program's
//! threads one at a time), so two builds or two runs compare to a fraction of a percent.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::process::{run_with_timeout, Supervised};
use crate::kit::tools::{self, Tool};

/// valgrind, whose Debian package also installs `callgrind_control`.
pub const VALGRIND: Tool = Tool {
    name: "valgrind",
    package: "valgrind",
};

/// How long a program under valgrind may take to start serving (herdsman: about 3 s here, with
/// 100,000 routes; valgrind reads the binary's debug information first).
pub const START_LIMIT: Duration = Duration::from_secs(120);

/// How long one `callgrind_control` command may take (it waits for valgrind's answer).
const CONTROL_LIMIT: Duration = Duration::from_secs(60);

/// How long a dump may take to appear once `callgrind_control -d` has returned.
const DUMP_LIMIT: Duration = Duration::from_secs(10);

/// The two programs: valgrind, which runs the program counted, and callgrind_control, which
/// tells it when to count.
pub struct Callgrind {
    valgrind: PathBuf,
    control: PathBuf,
}

impl Callgrind {
    /// Both programs, when both are installed.
    pub fn find() -> Option<Callgrind> {
        Some(Callgrind {
            valgrind: tools::find_program("valgrind")?,
            control: tools::find_program("callgrind_control")?,
        })
    }

    /// Both programs, installing Debian's valgrind first when either is missing.
    pub fn ensure_installed() -> anyhow::Result<Callgrind> {
        if let Some(found) = Callgrind::find() {
            return Ok(found);
        }
        tools::ensure_installed(&[&VALGRIND])?;
        Callgrind::find().context("callgrind_control is missing after installing valgrind")
    }

    /// valgrind's version, for the setup a run states.
    pub fn version_line(&self) -> String {
        tools::version_line(&self.valgrind, &["--version"])
    }

    /// Starts `program` with `args` under callgrind, counting nothing yet, in `dir` (its working
    /// directory, where its output goes to `output.log` and the counts to `callgrind.out.N`).
    pub fn start(
        &self,
        label: &str,
        program: &Path,
        args: &[&OsStr],
        dir: &Path,
    ) -> anyhow::Result<Counted> {
        let out = dir.join("callgrind.out");
        let mut command = Command::new(&self.valgrind);
        command
            .arg("--tool=callgrind")
            .arg("--instr-atstart=no")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(program)
            .args(args)
            .current_dir(dir);
        let process = Supervised::spawn(label, command, &dir.join("output.log"))?;
        Ok(Counted {
            process,
            control: self.control.clone(),
            out,
            dumps: 0,
        })
    }
}

/// A program running under callgrind. Dropping it stops the program.
pub struct Counted {
    pub process: Supervised,
    control: PathBuf,
    /// The file the dumps are named after: the Nth is `out.N`.
    out: PathBuf,
    /// Dumps written so far.
    dumps: u32,
}

impl Counted {
    /// The instructions the program executed while `work` ran, and what `work` returned. The
    /// count starts from zero; the program must still be running when it ends.
    pub fn count<T>(
        &mut self,
        work: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<(u64, T)> {
        let pid = self.process.pid().to_string();
        self.control(&["-z", &pid])?;
        self.control(&["-i", "on", &pid])?;
        let outcome = work();
        self.control(&["-i", "off", &pid])?;
        let outcome = outcome?;
        self.control(&["-d", &pid])?;
        self.dumps += 1;
        self.process.check_running()?;
        let dump = PathBuf::from(format!("{}.{}", self.out.display(), self.dumps));
        Ok((totals(&dump)?, outcome))
    }

    fn control(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut command = Command::new(&self.control);
        command.args(args);
        let output = run_with_timeout(command, CONTROL_LIMIT)?;
        if !output.status.success() {
            bail!(
                "callgrind_control {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

/// The instructions a callgrind dump counted: its `totals:` line (or `summary:`).
fn totals(dump: &Path) -> anyhow::Result<u64> {
    // The dump is written by valgrind's process, which may finish it after callgrind_control
    // has returned.
    let deadline = Instant::now() + DUMP_LIMIT;
    loop {
        let text = std::fs::read_to_string(dump).unwrap_or_default();
        if let Some(count) = parse_totals(&text) {
            return Ok(count);
        }
        if Instant::now() > deadline {
            bail!("no totals in {}", dump.display());
        }
        thread::sleep(Duration::from_millis(100));
    }
}

fn parse_totals(text: &str) -> Option<u64> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    field("totals:").or_else(|| field("summary:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dump_s_total_is_read() {
        assert_eq!(
            parse_totals("events: Ir\nfl=x\ntotals: 233434954\n"),
            Some(233_434_954)
        );
        assert_eq!(parse_totals("summary: 12 3\n"), Some(12));
        assert_eq!(parse_totals("summary: 0\ntotals: 7\n"), Some(7));
        assert_eq!(parse_totals("events: Ir\n"), None);
    }
}
