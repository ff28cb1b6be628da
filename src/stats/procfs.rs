//! What the kernel says about us, read from /proc: a thread's context switches and CPU time, the
//! time it waited to run, the listen-queue overflow counters, and net.core.somaxconn. Linux only; elsewhere every reader returns `None`.

use serde::Serialize;

/// Times the kernel switched a thread out: because it waited (voluntary) or was preempted.
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct ContextSwitches {
    pub voluntary: u64,
    pub involuntary: u64,
}

/// The kernel's counters of connections lost before accept(): the listen queue was full
/// (`ListenOverflows`) or the connection was dropped for any reason (`ListenDrops`). They count
/// for the whole network namespace, not one socket.
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct ListenQueueDrops {
    pub overflows: u64,
    pub drops: u64,
}

/// The calling thread's kernel id.
#[cfg(target_os = "linux")]
pub fn current_thread_id() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() }
}

#[cfg(not(target_os = "linux"))]
pub fn current_thread_id() -> i32 {
    0
}

/// Context switches of thread `tid` of this process, from /proc/self/task/TID/status.
pub fn thread_context_switches(tid: i32) -> Option<ContextSwitches> {
    if tid <= 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    parse_context_switches(&status)
}

fn parse_context_switches(status: &str) -> Option<ContextSwitches> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.trim().parse().ok())
    };
    Some(ContextSwitches {
        voluntary: field("voluntary_ctxt_switches:")?,
        involuntary: field("nonvoluntary_ctxt_switches:")?,
    })
}

/// CPU a thread used since it started, and the time it spent runnable but waiting for a CPU
/// (the run queue: what `prstat -mL` calls LAT).
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq)]
pub struct ThreadCpu {
    pub user_seconds: f64,
    pub system_seconds: f64,
    /// `None` where the kernel keeps no scheduler statistics (no schedstat file).
    pub run_queue_wait_seconds: Option<f64>,
}

/// CPU and run-queue time of thread `tid` of this process, from /proc/self/task/TID/stat and
/// schedstat.
pub fn thread_cpu(tid: i32) -> Option<ThreadCpu> {
    if tid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let (user_ticks, system_ticks) = parse_cpu_ticks(&stat)?;
    // SAFETY: sysconf only reads a system constant.
    let ticks_per_second = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        ticks if ticks > 0 => ticks as f64,
        _ => 100.0,
    };
    let run_queue_wait_seconds =
        std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
            .ok()
            .and_then(|schedstat| parse_run_queue_wait_ns(&schedstat))
            .map(|ns| ns as f64 / 1e9);
    Some(ThreadCpu {
        user_seconds: user_ticks as f64 / ticks_per_second,
        system_seconds: system_ticks as f64 / ticks_per_second,
        run_queue_wait_seconds,
    })
}

/// utime and stime, fields 14 and 15 of `stat`, counted after the command name (in parentheses,
/// and it may hold spaces and parentheses itself, so the last `)` ends it).
fn parse_cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 3 (the state) is the first after the name.
    let mut fields = after_name.split_whitespace().skip(14 - 3);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// schedstat is `time on a CPU (ns)  time waiting on a run queue (ns)  timeslices`.
fn parse_run_queue_wait_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().nth(1)?.parse().ok()
}

/// Descriptors this process has open now: the entries of /proc/self/fd (less the one the count
/// itself opens). Read at a scrape, never on the request path.
pub fn open_descriptors() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some((entries.count() as u64).saturating_sub(1))
}

/// The namespace's listen-queue overflow and drop counters, from /proc/net/netstat.
pub fn listen_queue_drops() -> Option<ListenQueueDrops> {
    let netstat = std::fs::read_to_string("/proc/net/netstat").ok()?;
    parse_listen_queue_drops(&netstat)
}

/// /proc/net/netstat holds pairs of lines: `TcpExt: Name1 Name2 …` then `TcpExt: 1 2 …`.
fn parse_listen_queue_drops(netstat: &str) -> Option<ListenQueueDrops> {
    let mut lines = netstat.lines().filter(|line| line.starts_with("TcpExt:"));
    let names = lines.next()?;
    let values = lines.next()?;
    let find = |wanted: &str| {
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(name, _)| *name == wanted)
            .and_then(|(_, value)| value.parse().ok())
    };
    Some(ListenQueueDrops {
        overflows: find("ListenOverflows")?,
        drops: find("ListenDrops")?,
    })
}

/// net.core.somaxconn: the kernel silently caps every listen() backlog at this.
pub fn somaxconn() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_and_netstat() {
        let status = "Name:\therdsman-w0\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t42\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(
            parse_context_switches(status),
            Some(ContextSwitches {
                voluntary: 42,
                involuntary: 7
            })
        );
        let netstat = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 12 15\nIpExt: InNoRoutes\nIpExt: 0\n";
        assert_eq!(
            parse_listen_queue_drops(netstat),
            Some(ListenQueueDrops {
                overflows: 12,
                drops: 15
            })
        );
        assert_eq!(parse_listen_queue_drops("IpExt: A\nIpExt: 1\n"), None);
    }

    #[test]
    fn parses_cpu_ticks_past_an_awkward_name() {
        let stat = "4242 (herd (w) 0) S 1 4242 4242 0 -1 4194368 90 0 0 0 37 12 0 0 20 0 3 0 1 2 3";
        assert_eq!(parse_cpu_ticks(stat), Some((37, 12)));
        assert_eq!(parse_cpu_ticks("4242 (short) S 1"), None);
        assert_eq!(parse_run_queue_wait_ns("123456 7890 12\n"), Some(7890));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_machine() {
        assert!(thread_context_switches(current_thread_id()).is_some());
        // Spin until the kernel has charged this thread some CPU (a tick or two).
        let spin = std::time::Instant::now();
        let mut cpu = thread_cpu(current_thread_id()).unwrap();
        while cpu.user_seconds + cpu.system_seconds == 0.0 && spin.elapsed().as_secs() < 5 {
            std::hint::black_box((0..10_000u64).sum::<u64>());
            cpu = thread_cpu(current_thread_id()).unwrap();
        }
        assert!(cpu.user_seconds + cpu.system_seconds > 0.0, "{cpu:?}");
        assert!(listen_queue_drops().is_some());
        assert!(somaxconn().is_some_and(|n| n > 0));
    }
}
