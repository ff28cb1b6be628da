//! What the kernel says about us, read from /proc: a thread's context switches, the listen-queue
//! overflow counters, and net.core.somaxconn. Linux only; elsewhere every reader returns `None`.

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

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_machine() {
        assert!(thread_context_switches(current_thread_id()).is_some());
        assert!(listen_queue_drops().is_some());
        assert!(somaxconn().is_some_and(|n| n > 0));
    }
}
