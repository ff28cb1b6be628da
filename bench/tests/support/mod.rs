//! What the end-to-end benchmark tests share: the benchmark lock, and reading the Markdown tables
//! of a results file.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;

const LOCK: &str = "/tmp/herdsman-bench.lock";

/// Holds the benchmark lock until dropped: taken here (waiting for any benchmark that runs), or
/// None when this process already runs under it — `flock LOCK cargo test …` passes its open lock
/// file down, and taking the lock again through a new descriptor would wait for ourselves.
pub fn take_benchmark_lock() -> Option<File> {
    let inherited = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == Path::new(LOCK)));
    if inherited {
        return None;
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
    Some(file)
}

/// The cells of the rows of the first Markdown table after the first line starting with
/// `heading` (a heading whole, or one whose end names run-time figures).
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
