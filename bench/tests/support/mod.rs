//! What the end-to-end benchmark tests share: the benchmark lock, running a `--short` benchmark,
//! and reading the Markdown tables and figures of a results file.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

const LOCK: &str = "/tmp/herdsman-bench.lock";

/// The benchmark lock, held until dropped.
pub struct BenchmarkLock {
    /// None when this process already runs under the lock.
    _file: Option<File>,
    /// This binary's turn: its tests share one process, and so its descriptors, so the file lock
    /// alone would not keep them apart (a test would take another's open lock file for an
    /// inherited one).
    _turn: MutexGuard<'static, ()>,
}

/// Holds the benchmark lock until dropped: taken here (waiting for any benchmark that runs, and
/// for the other tests of this binary), or, when this process was started under it, only this
/// binary's turn — `flock LOCK cargo test …` passes its open lock file down, and taking the lock
/// again through a new descriptor would wait for ourselves.
pub fn take_benchmark_lock() -> BenchmarkLock {
    static TURN: Mutex<()> = Mutex::new(());
    static INHERITED: OnceLock<bool> = OnceLock::new();
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // Decided once, before any test of this binary has opened the file itself.
    let inherited = *INHERITED.get_or_init(|| {
        std::fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == Path::new(LOCK)))
    });
    if inherited {
        return BenchmarkLock {
            _file: None,
            _turn: turn,
        };
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK)
        .unwrap_or_else(|e| panic!("opening {LOCK}: {e}"));
    eprintln!("waiting for {LOCK} (another benchmark may be running)…");
    // SAFETY: flock only locks the descriptor, which `file` keeps open while the lock is needed.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(
        locked,
        0,
        "flock {LOCK}: {}",
        std::io::Error::last_os_error()
    );
    BenchmarkLock {
        _file: Some(file),
        _turn: turn,
    }
}

/// What `herdsman-bench BENCHMARK --short` left: its folder under CARGO_TARGET_TMPDIR, its
/// results file's text and its stdout.
#[allow(dead_code)] // each test binary compiles this module; compare_short has no use for it
pub struct ShortRun {
    /// The folder's and the files' name: the benchmark's, or the scenario's.
    pub name: String,
    pub dir: PathBuf,
    pub md: String,
    pub stdout: String,
}

#[allow(dead_code)] // each test binary compiles this module; compare_short has no use for it
impl ShortRun {
    /// Checks that the plot beside the results file is a PNG that the file refers to, then
    /// removes the folder.
    pub fn check_plot_and_remove(self) {
        let name = format!("{}-short.png", self.name);
        let bytes = std::fs::read(self.dir.join(&name)).expect("the plot");
        assert!(bytes.starts_with(b"\x89PNG"), "the plot is not a PNG");
        assert!(
            self.md.contains(&format!("]({name})")),
            "the plot is not referenced"
        );
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// Runs `herdsman-bench BENCHMARK --short` into a fresh BENCHMARK-short folder, fails the test
/// with its output unless it succeeded, and reads its results file, which must not say it stopped
/// early.
#[allow(dead_code)] // each test binary compiles this module; compare_short has no use for it
pub fn run_short(benchmark: &str) -> ShortRun {
    run_short_with(benchmark, benchmark, &[])
}

/// `herdsman-bench BENCHMARK --short ARGS…` into a fresh NAME-short folder (its results file
/// NAME-short.md), as `run_short` does: for several scenarios of one benchmark.
#[allow(dead_code)] // each test binary compiles this module; compare_short has no use for it
pub fn run_short_with(benchmark: &str, name: &str, args: &[&str]) -> ShortRun {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-short"));
    let out = dir.join(format!("{name}-short.md"));
    // Nothing left from an earlier run may stand in for what this one writes.
    std::fs::remove_dir_all(&dir).ok();
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_herdsman-bench"))
        .args([benchmark, "--short"])
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("starting herdsman-bench");
    eprintln!(
        "{benchmark} --short {} took {:.0} s",
        args.join(" "),
        started.elapsed().as_secs_f64()
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{benchmark} --short {} failed: {}\n{stdout}\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let md = std::fs::read_to_string(&out).expect("the results file");
    assert!(!md.contains("## Stopped early"), "{md}");
    ShortRun {
        name: name.to_string(),
        dir,
        md,
        stdout,
    }
}

/// A figure as the results print it: "57,123", "16.26", "98.1%", "1.05×".
#[allow(dead_code)] // each test binary compiles this module; compare_short has no use for it
pub fn is_number(cell: &str) -> bool {
    let bare = cell.replace(',', "");
    let bare = bare.split(' ').next().unwrap_or_default();
    bare.trim_end_matches(['%', '×']).parse::<f64>().is_ok()
}

/// A figure's value: "57,123" → 57123, "4.5%" → 4.5, "-0.1" → -0.1; panics on "–" or text.
#[allow(dead_code)] // each test binary compiles this module; compare_short has no use for it
pub fn value(cell: &str) -> f64 {
    cell.replace(',', "")
        .trim_end_matches(['%', '×'])
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} is not a figure"))
}

/// The row of `table` whose first cell is `first`.
#[allow(dead_code)] // each test binary compiles this module; compare_short has no use for it
pub fn row<'a>(table: &'a [Vec<String>], first: &str) -> &'a [String] {
    table
        .iter()
        .find(|r| r[0] == first)
        .unwrap_or_else(|| panic!("no row {first:?} in {table:#?}"))
}

/// The cells of the rows of the first Markdown table after the first line starting with
/// `heading` (a heading whole, or one whose end names run-time figures).
#[allow(dead_code)] // each test binary compiles this module; not every one reads a table by heading
pub fn table_after(md: &str, heading: &str) -> Vec<Vec<String>> {
    let start = md
        .lines()
        .position(|l| l.starts_with(heading))
        .unwrap_or_else(|| panic!("no heading {heading:?} in the results"));
    rows(
        md.lines()
            .skip(start + 1)
            .skip_while(|l| !l.starts_with('|')),
    )
}

/// The rows of the Markdown table whose header line starts with `header`.
#[allow(dead_code)] // each test binary compiles this module; compare_short has no use for it
pub fn table_starting(md: &str, header: &str) -> Vec<Vec<String>> {
    let table = rows(md.lines().skip_while(|l| !l.starts_with(header)));
    assert!(!table.is_empty(), "no table {header:?} in the results");
    table
}

/// The cells of a table's rows, from its header line on.
fn rows<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<Vec<String>> {
    lines
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and the alignment row
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}
