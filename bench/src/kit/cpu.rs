//! Where the machine's CPU time went during one wrk run: herdsman, the backend, wrk, the slow
//! clients, the kernel's interrupt work (on loopback, mostly this benchmark's own packets), other
//! processes, and idle. On a shared 2-core machine other processes (a build, another benchmark) can
//! move a run's requests/s more than the slow connections do, so every run states them, and the
//! results file's table of it.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::kit::procstat;
use crate::kit::stats::spread;

/// A run during which processes outside this benchmark used more than this many CPUs is named as
/// disturbed: its requests/s says as much about them as about herdsman.
pub const DISTURBED_CPUS: f64 = 0.10;

/// "NAME (0.45 CPU)" for every run during which processes outside the benchmark used more than
/// `DISTURBED_CPUS` (`other`), each named by `name` ("round 2 with").
pub fn disturbed<R>(
    runs: &[R],
    other: impl Fn(&R) -> f64,
    name: impl Fn(&R) -> String,
) -> Vec<String> {
    runs.iter()
        .filter(|r| other(r) > DISTURBED_CPUS)
        .map(|r| format!("{} ({:.2} CPU)", name(r), other(r)))
        .collect()
}

/// CPU used over a run, each in CPUs (1.0: one CPU busy for the whole run).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuSplit {
    pub herdsman: f64,
    pub backend: f64,
    pub wrk: f64,
    pub slow_clients: f64,
    /// This program's own threads (an in-process load, such as `h2-attacks`' attacker; else
    /// next to nothing, as it sleeps while wrk runs).
    pub this_program: f64,
    /// irq + softirq time, which the kernel charges to no process.
    pub interrupts: f64,
    /// Busy time left over: processes outside this benchmark.
    pub other: f64,
    pub idle: f64,
}

/// The processes whose CPU time is split out.
pub struct Measured<'a> {
    pub herdsman: u32,
    pub backend: u32,
    pub slow_clients: &'a [u32],
}

/// Readings at the start of a run.
pub struct CpuClock {
    started: Instant,
    machine: Option<MachineTicks>,
    herdsman: Duration,
    backend: Duration,
    slow_clients: Duration,
    children: Duration,
    this_program: Duration,
}

impl CpuClock {
    pub fn start(processes: &Measured) -> CpuClock {
        CpuClock {
            started: Instant::now(),
            machine: MachineTicks::read(),
            herdsman: tree_cpu(processes.herdsman),
            backend: tree_cpu(processes.backend),
            slow_clients: processes.slow_clients.iter().map(|&p| tree_cpu(p)).sum(),
            children: reaped_children_cpu(),
            this_program: own_cpu_time(),
        }
    }

    /// The split since `start`. wrk is counted from this program's reaped children, so it must
    /// have exited (and been waited for) by now, and no other child may have been reaped since.
    pub fn stop(self, processes: &Measured) -> CpuSplit {
        let seconds = self.started.elapsed().as_secs_f64().max(1e-3);
        let share = |later: Duration, earlier: Duration| {
            later.saturating_sub(earlier).as_secs_f64() / seconds
        };
        let herdsman = share(tree_cpu(processes.herdsman), self.herdsman);
        let backend = share(tree_cpu(processes.backend), self.backend);
        let slow_clients = share(
            processes.slow_clients.iter().map(|&p| tree_cpu(p)).sum(),
            self.slow_clients,
        );
        let wrk = share(reaped_children_cpu(), self.children);
        let this_program = share(own_cpu_time(), self.this_program);
        let (busy, interrupts, idle) = match (self.machine, MachineTicks::read()) {
            (Some(before), Some(after)) => after.since(before, seconds),
            _ => (f64::NAN, f64::NAN, f64::NAN),
        };
        CpuSplit {
            herdsman,
            backend,
            wrk,
            slow_clients,
            this_program,
            interrupts,
            other: (busy - interrupts - herdsman - backend - wrk - slow_clients - this_program)
                .max(0.0),
            idle,
        }
    }
}

/// A process tree's CPU time so far; zero once it is gone.
fn tree_cpu(pid: u32) -> Duration {
    procstat::tree_cpu_time(pid).unwrap_or_default()
}

/// CPU time of this program's children that have exited and been waited for.
fn reaped_children_cpu() -> Duration {
    rusage_cpu(libc::RUSAGE_CHILDREN)
}

/// CPU time (user + system) of this process so far, every thread.
pub fn own_cpu_time() -> Duration {
    rusage_cpu(libc::RUSAGE_SELF)
}

/// getrusage's user + system time for `who`; zero if it fails.
fn rusage_cpu(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes the struct passed to it, which is zeroed and ours.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The first line of /proc/stat: the whole machine's time, in clock ticks, summed over CPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
struct MachineTicks {
    busy: u64,
    interrupts: u64,
    idle: u64,
}

impl MachineTicks {
    fn read() -> Option<MachineTicks> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// `cpu  user nice system idle iowait irq softirq steal …`
    fn parse(stat: &str) -> Option<MachineTicks> {
        let fields: Vec<u64> = stat
            .lines()
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .take(8)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        let [user, nice, system, idle, iowait, irq, softirq, steal] = fields[..] else {
            return None;
        };
        Some(MachineTicks {
            busy: user + nice + system + irq + softirq + steal,
            interrupts: irq + softirq,
            idle: idle + iowait,
        })
    }

    /// (busy, interrupts, idle) since `earlier`, in CPUs over `seconds`.
    fn since(self, earlier: MachineTicks, seconds: f64) -> (f64, f64, f64) {
        let ticks_per_second = procstat::clock_ticks_per_second() as f64;
        let cpus = |later: u64, before: u64| {
            later.saturating_sub(before) as f64 / ticks_per_second / seconds
        };
        (
            cpus(self.busy, earlier.busy),
            cpus(self.interrupts, earlier.interrupts),
            cpus(self.idle, earlier.idle),
        )
    }
}

/// The results file's section on where the CPU went during `what` ("the wrk runs"): a row per
/// (label, splits of its runs), each cell the median over those runs in CPUs; `columns` names
/// the `wrk` and the `slow_clients` columns (the clients under measurement, the disturbance's).
pub fn write_split_table(
    md: &mut String,
    what: &str,
    columns: [&str; 2],
    rows: &[(&str, Vec<CpuSplit>)],
) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(
        md,
        "## Where the CPU went during {what} (CPUs of {cpus}, median over rounds)\n"
    );
    let _ = writeln!(
        md,
        "Each process tree's utime + stime ({}'s from this program's reaped children), the \
         kernel's irq + softirq time from /proc/stat (charged to no process; on loopback mostly \
         this benchmark's packets), and the machine's busy time left over: **other \
         processes**, outside this benchmark.\n",
        columns[0]
    );
    let _ = writeln!(
        md,
        "| | herdsman | backend | {} | {} | kernel irq + softirq | other processes | idle |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|",
        columns[0], columns[1]
    );
    let fields: [fn(&CpuSplit) -> f64; 7] = [
        |c| c.herdsman,
        |c| c.backend,
        |c| c.wrk,
        |c| c.slow_clients,
        |c| c.interrupts,
        |c| c.other,
        |c| c.idle,
    ];
    for (label, splits) in rows {
        let cells: Vec<String> = fields
            .iter()
            .map(|value| {
                let values: Vec<f64> = splits.iter().map(value).collect();
                spread(&values).map_or("–".to_string(), |s| format!("{:.2}", s.median))
            })
            .collect();
        let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
    }
    let _ = writeln!(md);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_line_is_split_into_busy_interrupts_and_idle() {
        let stat = "cpu  100 5 50 800 10 3 7 0 0 0\ncpu0 50 2 25 400 5 1 3 0 0 0\n";
        let ticks = MachineTicks::parse(stat).unwrap();
        assert_eq!(
            ticks,
            MachineTicks {
                busy: 165,
                interrupts: 10,
                idle: 810
            }
        );
        assert_eq!(MachineTicks::parse("intr 1 2 3\n"), None);
    }

    #[test]
    fn the_table_gives_each_row_s_medians() {
        let split = |herdsman| CpuSplit {
            herdsman,
            idle: 0.5,
            ..CpuSplit::default()
        };
        let mut md = String::new();
        write_split_table(
            &mut md,
            "the runs",
            ["wrk", "holders"],
            &[("with", vec![split(0.9), split(0.7), split(0.8)])],
        );
        assert!(
            md.contains("| | herdsman | backend | wrk | holders |"),
            "{md}"
        );
        assert!(
            md.contains("| with | 0.80 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 0.50 |"),
            "{md}"
        );
    }

    #[test]
    fn a_busy_child_is_counted_once_reaped() {
        let me = std::process::id();
        let processes = Measured {
            herdsman: me,
            backend: me,
            slow_clients: &[],
        };
        let clock = CpuClock::start(&processes);
        // A child that burns a little CPU, waited for.
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        let split = clock.stop(&processes);
        assert!(split.wrk > 0.0, "{split:?}");
        assert!(split.other >= 0.0 && split.idle >= 0.0, "{split:?}");
    }
}
