//! What a running process tree has cost, read from /proc: CPU time (utime + stime) and peak resident
//! memory (VmHWM), each summed over a process and all its descendants (nginx runs a master and
//! workers). Linux only, like the proxies it measures.

use std::collections::HashMap;
use std::fs;
use std::time::Duration;

use anyhow::{bail, Context};

/// The fields of /proc/PID/stat this tool needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFields {
    pub ppid: u32,
    /// Clock ticks in user mode.
    pub utime: u64,
    /// Clock ticks in kernel mode.
    pub stime: u64,
}

/// Parses one /proc/PID/stat line. The command name (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<StatFields> {
    let after_comm = &line[line.rfind(')')? + 1..];
    // Fields from 3 (state) on; ppid is field 4, utime 14, stime 15.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    Some(StatFields {
        ppid: fields.get(1)?.parse().ok()?,
        utime: fields.get(11)?.parse().ok()?,
        stime: fields.get(12)?.parse().ok()?,
    })
}

/// `root` and every live process descending from it, root first.
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            // A process may exit between listing and reading; it then simply is not in the tree.
            if let Some(stat) = fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| parse_stat(&s))
            {
                children.entry(stat.ppid).or_default().push(pid);
            }
        }
    }
    let mut tree = vec![root];
    let mut next = 0;
    while next < tree.len() {
        if let Some(kids) = children.get(&tree[next]) {
            tree.extend(kids);
        }
        next += 1;
    }
    tree
}

/// CPU time (user + system) used so far by `root` and its live descendants.
pub fn tree_cpu_time(root: u32) -> anyhow::Result<Duration> {
    let ticks_per_second = clock_ticks_per_second();
    let mut ticks = 0u64;
    for pid in process_tree(root) {
        let path = format!("/proc/{pid}/stat");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(_) if pid != root => continue, // a descendant that just exited
            Err(e) => return Err(e).with_context(|| format!("reading {path}")),
        };
        let Some(stat) = parse_stat(&text) else {
            bail!("cannot parse {path}: {text:?}");
        };
        ticks += stat.utime + stat.stime;
    }
    Ok(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000) / ticks_per_second,
    ))
}

/// Peak resident set size (VmHWM) in KiB, summed over `root` and its live descendants.
pub fn tree_peak_rss_kib(root: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for pid in process_tree(root) {
        let path = format!("/proc/{pid}/status");
        match fs::read_to_string(&path) {
            Ok(text) => total += parse_vm_hwm_kib(&text).unwrap_or(0),
            Err(_) if pid != root => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {path}")),
        }
    }
    Ok(total)
}

/// The `VmHWM:   1234 kB` line of /proc/PID/status.
pub fn parse_vm_hwm_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100 // USER_HZ on every Linux architecture this runs on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let line = "4242 (nginx: worker (x) 1) S 4241 4241 4241 0 -1 4194624 1109 0 0 0 \
                    731 265 0 0 20 0 1 0 123456 12345678 900 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(StatFields {
                ppid: 4241,
                utime: 731,
                stime: 265
            })
        );
    }

    #[test]
    fn vm_hwm_is_read_in_kib() {
        let status = "Name:\thaproxy\nVmPeak:\t  20000 kB\nVmHWM:\t    8123 kB\nVmRSS:\t 8000 kB\n";
        assert_eq!(parse_vm_hwm_kib(status), Some(8123));
    }

    #[test]
    fn this_process_is_measurable() {
        let me = std::process::id();
        assert_eq!(process_tree(me)[0], me);
        assert!(tree_peak_rss_kib(me).unwrap() > 0);
        tree_cpu_time(me).unwrap();
    }
}
