//! System calls per connection, counted by `strace -c` attached to every process and thread of a
//! proxy while this program makes connections one after another, each a `GET /` with
//! `Connection: close` read to its end. One at a time, so that nothing is batched across
//! connections that would not be in service at that rate; the count is exact (strace slows each
//! call, not the number of calls).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::kit::process::Supervised;
use crate::kit::procstat;

/// How long strace is given to attach to every thread before the connections begin.
const ATTACH: Duration = Duration::from_millis(700);

/// The request each connection makes.
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

/// What strace counted over `connections` connections.
#[derive(Debug, Clone, PartialEq)]
pub struct SyscallCount {
    pub connections: u32,
    /// (system call, calls), most first.
    pub calls: Vec<(String, u64)>,
}

impl SyscallCount {
    pub fn total(&self) -> u64 {
        self.calls.iter().map(|(_, n)| n).sum()
    }

    pub fn per_connection(&self, calls: u64) -> f64 {
        calls as f64 / f64::from(self.connections.max(1))
    }

    /// Calls of `name` per connection; 0 when it made none.
    pub fn of(&self, name: &str) -> f64 {
        self.calls
            .iter()
            .find(|(call, _)| call == name)
            .map_or(0.0, |&(_, n)| self.per_connection(n))
    }
}

/// Counts the system calls of `proxy` (its process tree) while `connections` connections are made
/// to 127.0.0.1:`port`, one after another; strace's report is kept in `dir`.
pub fn count(
    strace: &Path,
    proxy: &Supervised,
    port: u16,
    connections: u32,
    dir: &Path,
) -> anyhow::Result<SyscallCount> {
    let report = dir.join("strace.txt");
    let mut command = Command::new(strace);
    command.arg("-c").arg("-f").arg("-o").arg(&report);
    for pid in procstat::process_tree(proxy.pid()) {
        command.arg("-p").arg(pid.to_string());
    }
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let mut tracer = command.spawn().context("starting strace")?;
    thread::sleep(ATTACH);
    let made = (|| -> anyhow::Result<()> {
        for index in 0..connections {
            one_connection(port).with_context(|| format!("connection {index}"))?;
        }
        Ok(())
    })();
    // SAFETY: kill only sends a signal to the child we started.
    unsafe {
        libc::kill(tracer.id() as libc::pid_t, libc::SIGINT);
    }
    tracer.wait().context("waiting for strace")?;
    made?;
    let text = std::fs::read_to_string(&report)
        .with_context(|| format!("reading {}", report.display()))?;
    let calls = parse(&text).with_context(|| format!("reading strace's report:\n{text}"))?;
    Ok(SyscallCount { connections, calls })
}

/// One connection: the request, its whole answer (to the proxy's close), then our close.
fn one_connection(port: u16) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(REQUEST)?;
    let mut answer = Vec::with_capacity(512);
    stream.read_to_end(&mut answer)?;
    if !answer.starts_with(b"HTTP/1.1 200") {
        bail!("answered {:?}", String::from_utf8_lossy(&answer));
    }
    Ok(())
}

/// The rows of `strace -c`'s table: `% time  seconds  usecs/call  calls  [errors]  syscall`.
fn parse(text: &str) -> anyhow::Result<Vec<(String, u64)>> {
    let mut calls = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() == Some(&"%") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with('-') || fields.len() < 5 {
            continue;
        }
        let name = fields[fields.len() - 1];
        if name == "total" {
            break;
        }
        let count = fields[3]
            .parse::<u64>()
            .with_context(|| format!("the calls of {line:?}"))?;
        calls.push((name.to_string(), count));
    }
    if calls.is_empty() {
        bail!("no system calls in the report");
    }
    calls.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 40.00    0.004000           1      3000           sendto
 30.00    0.003000           1      6000      3000 recvfrom
 20.00    0.002000           1      3001         1 accept4
 10.00    0.001000           1      3000           epoll_wait
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000           1     15001      3001 total
";

    #[test]
    fn strace_s_table_is_read_call_by_call() {
        let calls = parse(REPORT).unwrap();
        assert_eq!(calls[0], ("recvfrom".to_string(), 6000));
        assert_eq!(calls.len(), 4);
        let count = SyscallCount {
            connections: 3000,
            calls,
        };
        assert_eq!(count.total(), 15_001);
        assert_eq!(count.of("recvfrom"), 2.0);
        assert_eq!(count.of("epoll_ctl"), 0.0);
        assert!(parse("nothing here\n").is_err());
    }
}
