//! What a running process tree has cost, read from /proc: CPU time (utime + stime), peak and current
//! resident memory (VmHWM, VmRSS), each summed over a process and all its descendants (nginx runs a
//! master and workers); the same memory and open descriptors summed over a process group (which a
//! binary upgrade's new process stays in, while its parent exits); and how many TCP connections a
//! local port holds open, or in TIME_WAIT (/proc/net/tcp). Linux only, like the proxies it
//! measures.

use std::collections::HashMap;
use std::fs;
use std::time::Duration;

use anyhow::{bail, Context};

/// The fields of /proc/PID/stat this tool needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFields {
    /// R, S, D, Z (a zombie: exited, not yet reaped), …
    pub state: char,
    pub ppid: u32,
    /// The process group.
    pub pgrp: u32,
    /// Clock ticks in user mode.
    pub utime: u64,
    /// Clock ticks in kernel mode.
    pub stime: u64,
}

/// Parses one /proc/PID/stat line. The command name (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<StatFields> {
    let after_comm = &line[line.rfind(')')? + 1..];
    // Fields from 3 (state) on; ppid is field 4, pgrp 5, utime 14, stime 15.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    Some(StatFields {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        utime: fields.get(11)?.parse().ok()?,
        stime: fields.get(12)?.parse().ok()?,
    })
}

/// Every process there is now, with its stat fields. A process may exit between listing and
/// reading; it then simply is not in the list.
fn all_processes() -> Vec<(u32, StatFields)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
            Some((pid, stat))
        })
        .collect()
}

/// `root` and every live process descending from it, root first.
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, stat) in all_processes() {
        children.entry(stat.ppid).or_default().push(pid);
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
    tree_cpu(root).map(CpuTime::total)
}

/// CPU time by mode used so far by `root` and its live descendants (nginx's master and workers).
pub fn tree_cpu(root: u32) -> anyhow::Result<CpuTime> {
    let mut ticks = StatFields {
        state: 'R',
        ppid: 0,
        pgrp: 0,
        utime: 0,
        stime: 0,
    };
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
        ticks.utime += stat.utime;
        ticks.stime += stat.stime;
    }
    Ok(CpuTime::of(ticks))
}

/// CPU time one process or thread has used, by mode.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTime {
    pub fn total(self) -> Duration {
        self.user + self.system
    }

    /// What was used between `earlier` and this reading.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }

    /// From a stat file's utime and stime.
    fn of(stat: StatFields) -> CpuTime {
        let ticks_per_second = clock_ticks_per_second();
        let time = |ticks: u64| {
            Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / ticks_per_second)
        };
        CpuTime {
            user: time(stat.utime),
            system: time(stat.stime),
        }
    }
}

/// CPU time process `pid` (all its threads) has used; None once it is gone.
pub fn process_cpu(pid: u32) -> Option<CpuTime> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(CpuTime::of)
}

/// CPU time of the thread of process `pid` whose name (`comm`, at most 15 bytes) is `name`: the
/// first such thread; None when it has none.
pub fn thread_cpu(pid: u32, name: &str) -> Option<CpuTime> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    tasks.flatten().find_map(|task| {
        let comm = fs::read_to_string(task.path().join("comm")).ok()?;
        if comm.trim_end() != name {
            return None;
        }
        let stat = fs::read_to_string(task.path().join("stat")).ok()?;
        parse_stat(&stat).map(CpuTime::of)
    })
}

/// Peak resident set size (VmHWM) in KiB, summed over `root` and its live descendants.
pub fn tree_peak_rss_kib(root: u32) -> anyhow::Result<u64> {
    tree_status_kib(root, "VmHWM:")
}

/// Current resident set size (VmRSS) in KiB, summed over `root` and its live descendants.
pub fn tree_rss_kib(root: u32) -> anyhow::Result<u64> {
    tree_status_kib(root, "VmRSS:")
}

/// A `NAME:   1234 kB` field of /proc/PID/status, summed over the tree; a process without it (a
/// zombie) counts 0.
fn tree_status_kib(root: u32, field: &str) -> anyhow::Result<u64> {
    let mut total = 0;
    for pid in process_tree(root) {
        let path = format!("/proc/{pid}/status");
        match fs::read_to_string(&path) {
            Ok(text) => total += parse_status_kib(&text, field).unwrap_or(0),
            Err(_) if pid != root => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {path}")),
        }
    }
    Ok(total)
}

/// The live members of process group `group` (zombies left out), in pid order: a proxy and every
/// process it started that stayed in its group, whoever their parent is now.
pub fn group_members(group: u32) -> Vec<u32> {
    let mut members: Vec<u32> = all_processes()
        .into_iter()
        .filter(|(_, stat)| stat.pgrp == group && stat.state != 'Z')
        .map(|(pid, _)| pid)
        .collect();
    members.sort_unstable();
    members
}

/// Current resident set size (VmRSS) in KiB, summed over `pids`; a process that has gone counts 0.
pub fn rss_kib_of(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .map(|status| parse_status_kib(&status, "VmRSS:").unwrap_or(0))
        .sum()
}

/// Open file descriptors (entries of /proc/PID/fd), summed over `pids`; a process that has gone
/// counts 0.
pub fn descriptors_of(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| fs::read_dir(format!("/proc/{pid}/fd")).ok())
        .map(|entries| entries.count() as u64)
        .sum()
}

/// Files that `root` and its live descendants hold open and that no directory names any more
/// (temporary files unlinked as soon as made, as nginx's proxy buffers are): how many, and their
/// bytes, each file counted once however many descriptors or processes hold it.
pub fn tree_unlinked_files(root: u32) -> UnlinkedFiles {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut files = UnlinkedFiles::default();
    for pid in process_tree(root) {
        let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for entry in entries.flatten() {
            let unlinked = fs::read_link(entry.path()).is_ok_and(|target| {
                target.starts_with("/") && target.to_string_lossy().ends_with(" (deleted)")
            });
            // The descriptor's own link leads to the open file, named or not.
            let Ok(meta) = fs::metadata(entry.path()) else {
                continue;
            };
            if unlinked && meta.is_file() && seen.insert((meta.dev(), meta.ino())) {
                files.count += 1;
                files.bytes += meta.len();
            }
        }
    }
    files
}

/// Unlinked files held open: how many, and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnlinkedFiles {
    pub count: u64,
    pub bytes: u64,
}

/// The value of a `NAME:   1234 kB` line of /proc/PID/status, such as `VmHWM:`.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// TCP connections in state ESTABLISHED whose local port is `port`, over IPv4 and IPv6: on a
/// proxy's listening port, the client connections it has accepted (or has queued to accept) and
/// not closed.
pub fn established_on_port(port: u16) -> anyhow::Result<usize> {
    let mut count = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        match fs::read_to_string(table) {
            Ok(text) => count += count_established(&text, port),
            // No IPv6 on this machine: no IPv6 connections either.
            Err(_) if table.ends_with('6') => {}
            Err(e) => return Err(e).with_context(|| format!("reading {table}")),
        }
    }
    Ok(count)
}

/// Counts the rows of a /proc/net/tcp table with local port `port` and state 01 (ESTABLISHED).
fn count_established(table: &str, port: u16) -> usize {
    tcp_rows(table)
        .filter(|row| row.local_port == port && row.state == ESTABLISHED)
        .count()
}

/// The /proc/net/tcp state of ESTABLISHED and of TIME_WAIT.
const ESTABLISHED: u8 = 0x01;
const TIME_WAIT: u8 = 0x06;

/// Connections in TIME_WAIT to or from one port (IPv4), by the side that closed first and
/// holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeWait {
    /// The side whose local port is the port: the server closed first.
    pub server_side: usize,
    /// The side whose remote port is the port: the client closed first.
    pub client_side: usize,
}

/// The IPv4 connections to or from `port` in TIME_WAIT now.
pub fn time_wait_on_port(port: u16) -> anyhow::Result<TimeWait> {
    let table = fs::read_to_string("/proc/net/tcp").context("reading /proc/net/tcp")?;
    Ok(count_time_wait(&table, port))
}

fn count_time_wait(table: &str, port: u16) -> TimeWait {
    let mut counted = TimeWait::default();
    for row in tcp_rows(table).filter(|row| row.state == TIME_WAIT) {
        if row.local_port == port {
            counted.server_side += 1;
        } else if row.remote_port == port {
            counted.client_side += 1;
        }
    }
    counted
}

/// What one row of a /proc/net/tcp table says.
struct TcpRow {
    local_port: u16,
    remote_port: u16,
    state: u8,
}

/// The rows of a /proc/net/tcp table (`sl local_address rem_address st …`, addresses as
/// `HEXIP:HEXPORT`, the state in hex), the header left out; rows that do not parse are skipped.
fn tcp_rows(table: &str) -> impl Iterator<Item = TcpRow> + '_ {
    let port = |address: &str| {
        let (_, port) = address.rsplit_once(':')?;
        u16::from_str_radix(port, 16).ok()
    };
    table.lines().skip(1).filter_map(move |line| {
        let mut fields = line.split_whitespace().skip(1);
        let local_port = port(fields.next()?)?;
        let remote_port = port(fields.next()?)?;
        let state = u8::from_str_radix(fields.next()?, 16).ok()?;
        Some(TcpRow {
            local_port,
            remote_port,
            state,
        })
    })
}

/// The kernel's USER_HZ: the unit of every tick count in /proc/PID/stat and /proc/stat.
pub(crate) fn clock_ticks_per_second() -> u64 {
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
                state: 'S',
                ppid: 4241,
                pgrp: 4241,
                utime: 731,
                stime: 265
            })
        );
    }

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\thaproxy\nVmPeak:\t  20000 kB\nVmHWM:\t    8123 kB\nVmRSS:\t 8000 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(8123));
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(8000));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
    }

    /// A temporary file made and unlinked at once, as nginx makes its buffers, is counted while
    /// it stays open, once however many descriptors hold it; a named file is not counted.
    #[test]
    fn unlinked_files_held_open_are_counted_once() {
        let me = std::process::id();
        let before = tree_unlinked_files(me);
        let dir = std::env::temp_dir();
        let path = dir.join(format!("herdsman-bench-unlinked-{me}"));
        std::fs::write(&path, vec![0u8; 5000]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let again = file.try_clone().unwrap();
        let named = tree_unlinked_files(me);
        std::fs::remove_file(&path).unwrap();
        let unlinked = tree_unlinked_files(me);
        drop((file, again));
        assert_eq!(named, before);
        // Other tests of this process may hold unlinked files of their own meanwhile.
        assert!(unlinked.count > before.count, "{unlinked:?} {before:?}");
        assert!(
            unlinked.bytes >= before.bytes + 5000,
            "{unlinked:?} {before:?}"
        );
    }

    #[test]
    fn this_process_is_measurable() {
        let me = std::process::id();
        assert_eq!(process_tree(me)[0], me);
        // Current first: other tests' threads allocate meanwhile, and the peak read after it can
        // only have grown.
        let now = tree_rss_kib(me).unwrap();
        let peak = tree_peak_rss_kib(me).unwrap();
        assert!(now > 0 && now <= peak, "VmRSS {now} KiB, VmHWM {peak} KiB");
        tree_cpu_time(me).unwrap();
    }

    #[test]
    fn this_process_group_is_measurable() {
        // SAFETY: getpgrp has no preconditions.
        let group = unsafe { libc::getpgrp() } as u32;
        let members = group_members(group);
        assert!(members.contains(&std::process::id()), "{members:?}");
        assert!(rss_kib_of(&members) > 0);
        // stdin, stdout, stderr at least.
        assert!(descriptors_of(&[std::process::id()]) >= 3);
        assert_eq!(descriptors_of(&[]), 0);
    }

    /// Two rows of /proc/net/tcp: a listener on port 8080 (0x1F90, state 0A) and a connection
    /// accepted on it (state 01); a third row is a client socket whose remote port is 8080.
    const TCP_TABLE: &str = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1
   2: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 3 1
";

    #[test]
    fn established_connections_are_counted_by_local_port() {
        assert_eq!(count_established(TCP_TABLE, 8080), 1);
        assert_eq!(count_established(TCP_TABLE, 0xC350), 1);
        assert_eq!(count_established(TCP_TABLE, 9), 0);
    }

    #[test]
    fn time_wait_is_counted_by_the_side_that_holds_it() {
        let table = format!(
            "{TCP_TABLE}   3: 0100007F:1F90 0100007F:C351 06 00000000:00000000 00:00000000 00000000     0        0 0 1
   4: 0100007F:C352 0100007F:1F90 06 00000000:00000000 00:00000000 00000000     0        0 0 1
   5: 0100007F:C353 0100007F:1F90 06 00000000:00000000 00:00000000 00000000     0        0 0 1
"
        );
        assert_eq!(
            count_time_wait(&table, 8080),
            TimeWait {
                server_side: 1,
                client_side: 2
            }
        );
        assert_eq!(count_time_wait(TCP_TABLE, 8080), TimeWait::default());
    }

    #[test]
    fn this_thread_s_cpu_is_found_by_its_name() {
        let pid = std::process::id();
        let spin = std::thread::Builder::new()
            .name("procstat-spin".into())
            .spawn(|| {
                // The kernel counts CPU in ticks of 10 ms, and a loaded machine may give a thread
                // none in a short spin: it spins until a tick is counted (5 s at most).
                let started = std::time::Instant::now();
                loop {
                    let spun = std::time::Instant::now();
                    while spun.elapsed() < Duration::from_millis(20) {}
                    let cpu = thread_cpu(std::process::id(), "procstat-spin");
                    let counted = cpu.as_ref().is_some_and(|cpu| cpu.total() > Duration::ZERO);
                    if counted || started.elapsed() > Duration::from_secs(5) {
                        return cpu;
                    }
                }
            })
            .unwrap();
        let cpu = spin.join().unwrap().expect("the thread by its name");
        assert!(cpu.total() > Duration::ZERO, "{cpu:?}");
        assert!(thread_cpu(pid, "no-such-thread").is_none());
        assert!(process_cpu(pid).unwrap().total() >= cpu.total());
    }

    #[test]
    fn a_held_connection_is_seen_on_its_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _accepted = listener.accept().unwrap();
        assert_eq!(established_on_port(port).unwrap(), 1);
    }
}
