//! The waiting threads as the kernel sees them, from /proc/self/task/TID: context switches
//! (`status`), CPU time (`schedstat` in nanoseconds, or `stat`'s clock ticks where schedstat is
//! missing) and the scheduler state (`stat`), which says whether a thread is asleep.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::procstat;

/// A thread id as gettid() returns it and /proc/self/task/ names it.
pub type Tid = i32;

/// The kernel's counters for one thread, or their sum over threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskCounters {
    /// Times the thread gave up the CPU because it blocked (went to sleep).
    pub voluntary_switches: u64,
    /// Times the scheduler took the CPU away from the runnable thread.
    pub involuntary_switches: u64,
    /// CPU time used, user and kernel, in nanoseconds (clock-tick resolution with `StatTicks`).
    pub cpu_ns: u64,
}

impl TaskCounters {
    pub fn plus(self, other: TaskCounters) -> TaskCounters {
        TaskCounters {
            voluntary_switches: self.voluntary_switches + other.voluntary_switches,
            involuntary_switches: self.involuntary_switches + other.involuntary_switches,
            cpu_ns: self.cpu_ns + other.cpu_ns,
        }
    }

    /// What happened between `earlier` and `self` (counters only grow; saturating all the same).
    pub fn since(self, earlier: TaskCounters) -> TaskCounters {
        TaskCounters {
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
            cpu_ns: self.cpu_ns.saturating_sub(earlier.cpu_ns),
        }
    }

    pub fn switches(self) -> u64 {
        self.voluntary_switches + self.involuntary_switches
    }
}

/// Where per-thread CPU time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuSource {
    /// `schedstat`'s first field: the scheduler's own runtime sum, in nanoseconds.
    Schedstat,
    /// `stat`'s utime + stime, in clock ticks (10 ms): each thread's share is truncated, so many
    /// threads that each ran briefly add up to less than they used.
    StatTicks,
}

impl CpuSource {
    /// Schedstat when this kernel provides it (CONFIG_SCHED_INFO), else clock ticks.
    pub fn detect() -> CpuSource {
        let path = format!("/proc/self/task/{}/schedstat", current_tid());
        match fs::read_to_string(path) {
            Ok(text) if parse_schedstat_ns(&text).is_some() => CpuSource::Schedstat,
            _ => CpuSource::StatTicks,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            CpuSource::Schedstat => "/proc/self/task/TID/schedstat (nanoseconds)",
            CpuSource::StatTicks => {
                "/proc/self/task/TID/stat utime+stime (10 ms clock ticks, truncated per thread)"
            }
        }
    }
}

/// The calling thread's id.
pub fn current_tid() -> Tid {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as Tid }
}

/// The counters of thread `tid` of this process.
pub fn read_counters(tid: Tid, source: CpuSource) -> anyhow::Result<TaskCounters> {
    let dir = format!("/proc/self/task/{tid}");
    let status = fs::read_to_string(format!("{dir}/status"))
        .with_context(|| format!("reading {dir}/status"))?;
    let (voluntary_switches, involuntary_switches) = parse_context_switches(&status)
        .with_context(|| format!("no context switch counts in {dir}/status"))?;
    let cpu_ns = match source {
        CpuSource::Schedstat => {
            let text = fs::read_to_string(format!("{dir}/schedstat"))
                .with_context(|| format!("reading {dir}/schedstat"))?;
            parse_schedstat_ns(&text).with_context(|| format!("cannot parse {dir}/schedstat"))?
        }
        CpuSource::StatTicks => {
            let text = fs::read_to_string(format!("{dir}/stat"))
                .with_context(|| format!("reading {dir}/stat"))?;
            let stat =
                procstat::parse_stat(&text).with_context(|| format!("cannot parse {dir}/stat"))?;
            (stat.utime + stat.stime).saturating_mul(1_000_000_000)
                / procstat::clock_ticks_per_second()
        }
    };
    Ok(TaskCounters {
        voluntary_switches,
        involuntary_switches,
        cpu_ns,
    })
}

/// The sum of the counters of every thread in `tids`.
pub fn sum_counters(tids: &[Tid], source: CpuSource) -> anyhow::Result<TaskCounters> {
    tids.iter().try_fold(TaskCounters::default(), |sum, &tid| {
        Ok(sum.plus(read_counters(tid, source)?))
    })
}

/// (voluntary, involuntary) from the `voluntary_ctxt_switches:` and
/// `nonvoluntary_ctxt_switches:` lines of a status file.
pub fn parse_context_switches(status: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim_start_matches(':').trim().parse().ok())
    };
    Some((
        field("voluntary_ctxt_switches")?,
        field("nonvoluntary_ctxt_switches")?,
    ))
}

/// The first field of a schedstat file: time spent on the CPU, in nanoseconds.
pub fn parse_schedstat_ns(text: &str) -> Option<u64> {
    let mut fields = text.split_whitespace();
    let ns = fields.next()?.parse().ok()?;
    // Three fields (runtime, wait time, timeslices): anything else is not a schedstat line.
    (fields.count() == 2).then_some(ns)
}

/// The scheduler state of a stat line (field 3: R running, S sleeping, D disk sleep, …), counted
/// after the last `)` because the command name in field 2 may hold spaces and parentheses.
pub fn parse_stat_state(line: &str) -> Option<char> {
    line[line.rfind(')')? + 1..].trim_start().chars().next()
}

/// One thread's stat file, kept open: reading it again from offset 0 makes the kernel regenerate
/// it, so a sweep over a thousand threads costs a thousand preads and no opens.
pub struct StateProbe {
    tid: Tid,
    file: File,
    buffer: Vec<u8>,
}

impl StateProbe {
    pub fn open(tid: Tid) -> anyhow::Result<StateProbe> {
        let path = format!("/proc/self/task/{tid}/stat");
        let file = File::open(&path).with_context(|| format!("opening {path}"))?;
        Ok(StateProbe {
            tid,
            file,
            buffer: vec![0; 1024],
        })
    }

    /// The thread's scheduler state now.
    pub fn state(&mut self) -> io::Result<char> {
        let n = self.file.read_at(&mut self.buffer, 0)?;
        std::str::from_utf8(&self.buffer[..n])
            .ok()
            .and_then(parse_stat_state)
            .ok_or_else(|| {
                io::Error::other(format!("cannot parse the stat of thread {}", self.tid))
            })
    }
}

/// Returns once every probed thread has been seen asleep ('S'), with the last moment one was seen
/// awake (None if none was), or fails at `deadline`.
///
/// The threads are read in order and a thread seen awake is read again until it sleeps. A thread
/// already seen asleep cannot have been woken since, because nothing wakes a waiter but a new
/// connection (and the caller makes none while this runs), so when the last thread is seen asleep
/// all of them are. The moment the last of them fell asleep lies between the last sighting of an
/// awake thread and the return; one pass over the threads is the least this costs (`sweep_floor`).
pub fn wait_until_all_asleep(
    probes: &mut [StateProbe],
    deadline: Instant,
) -> anyhow::Result<Option<Instant>> {
    let mut last_awake = None;
    for probe in probes.iter_mut() {
        loop {
            let state = probe
                .state()
                .with_context(|| format!("reading the state of thread {}", probe.tid))?;
            if state == 'S' {
                break;
            }
            let now = Instant::now();
            last_awake = Some(now);
            if now >= deadline {
                bail!(
                    "thread {} was still in state {state:?} at the deadline (expected it asleep)",
                    probe.tid
                );
            }
            // Give the awake thread the CPU it needs to get back to sleep (two cores, and this
            // loop would otherwise hold one of them).
            std::thread::yield_now();
        }
    }
    Ok(last_awake)
}

/// How long one pass over all-asleep threads takes: the resolution of every settle time.
pub fn sweep_floor(probes: &mut [StateProbe], passes: usize) -> anyhow::Result<Duration> {
    let mut times = Vec::with_capacity(passes);
    for _ in 0..passes {
        let start = Instant::now();
        wait_until_all_asleep(probes, start + Duration::from_secs(5))?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times.get(times.len() / 2).copied().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_switches_come_from_their_two_lines() {
        let status = "Name:\therd-waiter-7\nState:\tS (sleeping)\nTgid:\t4242\n\
                      voluntary_ctxt_switches:\t1203\nnonvoluntary_ctxt_switches:\t17\n";
        assert_eq!(parse_context_switches(status), Some((1203, 17)));
        assert_eq!(
            parse_context_switches("voluntary_ctxt_switches:\t3\n"),
            None
        );
    }

    #[test]
    fn schedstat_runtime_is_its_first_field() {
        assert_eq!(
            parse_schedstat_ns("217153043 1596735 27\n"),
            Some(217_153_043)
        );
        assert_eq!(parse_schedstat_ns("12 x"), None);
        assert_eq!(parse_schedstat_ns(""), None);
    }

    #[test]
    fn state_is_read_after_the_last_parenthesis() {
        let line = "4243 (herd (waiter) 1) S 4242 4242 4200 0 -1 4194624 0 0 0 0 3 5 0 0 20 0";
        assert_eq!(parse_stat_state(line), Some('S'));
        assert_eq!(parse_stat_state("12 (x) R 1"), Some('R'));
        assert_eq!(parse_stat_state("no parenthesis"), None);
    }

    #[test]
    fn counters_subtract_field_by_field() {
        let before = TaskCounters {
            voluntary_switches: 10,
            involuntary_switches: 2,
            cpu_ns: 1_000,
        };
        let after = TaskCounters {
            voluntary_switches: 15,
            involuntary_switches: 2,
            cpu_ns: 4_000,
        };
        let delta = after.since(before);
        assert_eq!(delta.switches(), 5);
        assert_eq!(delta.cpu_ns, 3_000);
        assert_eq!(before.plus(delta), after);
    }

    #[test]
    fn a_sleeping_thread_is_seen_asleep() {
        let (tid_sender, tid_receiver) = std::sync::mpsc::channel();
        let (stop_sender, stop_receiver) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            tid_sender.send(current_tid()).unwrap();
            let _ = stop_receiver.recv();
        });
        let tid = tid_receiver.recv().unwrap();
        let mut probes = vec![StateProbe::open(tid).unwrap()];
        wait_until_all_asleep(&mut probes, Instant::now() + Duration::from_secs(5)).unwrap();
        let source = CpuSource::detect();
        let counters = read_counters(tid, source).unwrap();
        assert!(counters.voluntary_switches >= 1, "{counters:?}");
        stop_sender.send(()).unwrap();
        sleeper.join().unwrap();
    }
}
