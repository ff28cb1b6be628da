//! What was run and on what, for the results file: the versions of the proxies and tools, the
//! machine (CPUs, kernel, load), and the command line that reproduces the run.

use std::path::Path;

use crate::kit::tools;

/// herdsman's version and build, rustc, the kernel, the CPUs and how busy they were: the setup
/// lines of the benchmarks that measure herdsman alone.
pub fn machine_lines(herdsman: &Path, busy: Option<f64>) -> Vec<(String, String)> {
    let mut lines = vec![herdsman_line("herdsman", herdsman)];
    lines.extend(machine_lines_without_herdsman(busy));
    lines
}

/// rustc, the kernel, the CPUs and how busy they were: for a benchmark of herdsman's library
/// built into this program (no herdsman binary runs).
pub fn machine_lines_without_herdsman(busy: Option<f64>) -> Vec<(String, String)> {
    let cpu = cpu_model();
    vec![
        (
            "rustc".into(),
            tools::version_line(Path::new("rustc"), &["-V"]),
        ),
        (
            "kernel".into(),
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
        (
            "CPUs".into(),
            format!(
                "{} × {cpu}",
                std::thread::available_parallelism().map_or(0, |n| n.get())
            ),
        ),
        (
            "CPUs busy with other work in the second before the start".into(),
            busy.map_or("unknown".into(), |b| format!("{:.0}%", b * 100.0)),
        ),
    ]
}

/// The setup line of the herdsman binary `herdsman`, named `label`: its version, where it is and
/// when it was built (every work-in-progress build says "0.1.0"; the last two tell them apart).
pub fn herdsman_line(label: &str, herdsman: &Path) -> (String, String) {
    let built = tools::version_line(
        Path::new("date"),
        &[
            "-u",
            "-r",
            &herdsman.to_string_lossy(),
            "+%Y-%m-%d %H:%M:%S UTC",
        ],
    );
    (
        label.into(),
        format!(
            "{} ({}, built {built})",
            tools::version_line(herdsman, &["--version"]),
            herdsman.display()
        ),
    )
}

/// The setup line of the open files each process may have, which bounds what a run may open.
pub fn descriptor_limit_line(limit: u64) -> (String, String) {
    (
        "open files per process (RLIMIT_NOFILE)".into(),
        limit.to_string(),
    )
}

/// The first three fields of /proc/loadavg: other work on the machine skews every figure.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The share of all CPUs busy over `window`, from /proc/stat: measured just before the first
/// run, when nothing of this benchmark is running, it is the other work on the machine.
pub fn busy_share(window: std::time::Duration) -> Option<f64> {
    let before = cpu_jiffies()?;
    std::thread::sleep(window);
    let after = cpu_jiffies()?;
    let total = after.0.checked_sub(before.0)?;
    let idle = after.1.checked_sub(before.1)?;
    (total > 0).then(|| 1.0 - idle as f64 / total as f64)
}

/// (all, idle + iowait) jiffies from the first line of /proc/stat.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    Some((
        fields.iter().sum(),
        fields.get(3)? + fields.get(4).unwrap_or(&0),
    ))
}

/// Says so when other work is running: it skews requests/s and latency more than CPU per request.
pub fn warn_if_busy(busy: Option<f64>) {
    if let Some(busy) = busy.filter(|&b| b > 0.10) {
        eprintln!(
            "note: {:.0}% of the CPUs were busy with other work before the start; requests/s and \
             latency will suffer more than CPU per request",
            busy * 100.0
        );
    }
}

/// The CPU's model name from /proc/cpuinfo, or "unknown".
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// `cargo run --release -p herdsman-bench -- compare …` with this run's arguments, shell-quoted.
pub fn reproduce_command() -> String {
    let args: Vec<String> = std::env::args().skip(1).map(|a| shell_quote(&a)).collect();
    format!(
        "cargo run --release -p herdsman-bench -- {}",
        args.join(" ")
    )
}

/// The same, under the lock that keeps benchmarks on a shared machine from overlapping.
pub fn locked_reproduce_command() -> String {
    format!("flock /tmp/herdsman-bench.lock {}", reproduce_command())
}

fn shell_quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=.,/:+@%".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_leaves_plain_words_alone() {
        assert_eq!(shell_quote("--proxies"), "--proxies");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
