//! Child processes that must never outlive the benchmark: proxies, the backend, client processes
//! and wrk. Each runs in its own process group (so a proxy's workers are stopped with it) and gets
//! SIGTERM from the kernel if this process dies first (PR_SET_PDEATHSIG); a group whose processes
//! may outlive their parent (herdsman's binary upgrade) also gets a guard process. Also: free
//! ports, "is it serving yet", running a command with a time limit, spreading clients over
//! processes, and the descriptor limit every child inherits.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// How long a stopped process group gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// A long-running child (proxy or backend) whose output goes to a log file. Dropping it stops it.
pub struct Supervised {
    pub label: String,
    child: Child,
    log: PathBuf,
    stopped: bool,
}

impl Supervised {
    /// Starts `command` in a new process group with stdout and stderr appended to `log`.
    pub fn spawn(label: &str, command: Command, log: &Path) -> anyhow::Result<Self> {
        Self::start(label, command, log, Stdio::null())
    }

    /// Like `spawn`, with the child's stdin a pipe held by the caller: closing it (dropping the
    /// handle) is how the caller tells the child to finish.
    pub fn spawn_with_stdin(
        label: &str,
        command: Command,
        log: &Path,
    ) -> anyhow::Result<(Self, ChildStdin)> {
        let mut process = Self::start(label, command, log, Stdio::piped())?;
        let stdin = process.child.stdin.take().context("the child's stdin")?;
        Ok((process, stdin))
    }

    fn start(label: &str, mut command: Command, log: &Path, stdin: Stdio) -> anyhow::Result<Self> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        command
            .stdin(stdin)
            .stdout(out)
            .stderr(err)
            .process_group(0);
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("starting {label}: {command:?}"))?;
        Ok(Supervised {
            label: label.to_string(),
            child,
            log: log.to_path_buf(),
            stopped: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the process (not its group).
    pub fn signal(&self, signal: libc::c_int) -> anyhow::Result<()> {
        // SAFETY: kill(2) on our own child's pid, which stays ours until we reap it.
        if unsafe { libc::kill(self.child.id() as libc::pid_t, signal) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("signalling {} (pid {})", self.label, self.pid()));
        }
        Ok(())
    }

    /// Waits until the process has exited, at most `limit`, and says how it ended ("exit code 0",
    /// "killed by signal 9").
    pub fn wait_for_exit(&mut self, limit: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(describe(status));
            }
            if Instant::now() >= deadline {
                bail!("{} had not exited after {limit:?}", self.label);
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGTERM, as systemd would send it, and waits at most `limit` until the process has exited
    /// with status 0: a graceful stop (herdsman's: every access log line it buffered is written).
    pub fn stop_gracefully(&mut self, limit: Duration) -> anyhow::Result<()> {
        self.check_running()?;
        // The process has not been reaped (it was running a moment ago), so the pid is still its.
        self.signal(libc::SIGTERM)
            .with_context(|| format!("sending {} SIGTERM", self.label))?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(reason) = self.exit_reason() {
                // `exit_reason` words a clean exit "… exited (exit code 0) …".
                if reason.contains("(exit code 0)") {
                    return Ok(());
                }
                bail!("{} did not stop cleanly on SIGTERM: {reason}", self.label);
            }
            if Instant::now() >= deadline {
                return Err(self.not_stopped(limit));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM to every process of its group (the one serving, and an old one still finishing
    /// after a binary upgrade: herdsman's successor stays in its parent's group), and waits until
    /// none is left: a graceful stop of a group whose processes may outlive this child.
    pub fn stop_group_gracefully(&mut self, limit: Duration) -> anyhow::Result<()> {
        let group = self.pid();
        signal_group(group as libc::pid_t, libc::SIGTERM);
        let deadline = Instant::now() + limit;
        loop {
            // Reaps the first process once it has exited, so that it counts as gone.
            let _ = self.exit_reason();
            if crate::kit::procstat::group_members(group).is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.not_stopped(limit));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Why a stop failed: still running `limit` after SIGTERM.
    fn not_stopped(&self, limit: Duration) -> anyhow::Error {
        anyhow::anyhow!(
            "{} had not stopped {limit:?} after SIGTERM; its log ends: {}",
            self.label,
            self.log_tail(5)
        )
    }

    /// If the process has exited: how, with the end of its log.
    pub fn exit_reason(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "{} exited ({}); its log ends: {}",
                self.label,
                describe(status),
                self.log_tail(8)
            )),
            Ok(None) => None,
            Err(e) => Some(format!("{}: cannot wait for it: {e}", self.label)),
        }
    }

    /// Fails with `exit_reason` if the process has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        match self.exit_reason() {
            Some(reason) => bail!("{reason}"),
            None => Ok(()),
        }
    }

    /// The last `lines` lines of the process's output, on one line.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.output_text();
        let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = all[all.len().saturating_sub(lines)..].join(" | ");
        if tail.is_empty() {
            "(nothing)".to_string()
        } else {
            tail
        }
    }

    /// Everything the process has written to its output so far.
    pub fn output_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The first line of the process's output that starts with `word`: how client processes report
    /// (`ready …`, `done …`).
    pub fn said(&self, word: &str) -> Option<String> {
        std::fs::read_to_string(&self.log)
            .ok()?
            .lines()
            .find(|l| l.starts_with(word))
            .map(str::to_string)
    }

    /// Waits until the process answers `GET /` on `port` with a 2xx, or fails with the reason.
    pub fn wait_until_serving(&mut self, port: u16, timeout: Duration) -> anyhow::Result<()> {
        self.wait_until_answering(port, timeout, probe)
    }

    /// Waits until `probe(port)` succeeds (a `GET /` answered 2xx, over whatever the probe
    /// speaks: cleartext, TLS), or fails with the reason: the process exited, or `timeout` passed.
    pub fn wait_until_answering(
        &mut self,
        port: u16,
        timeout: Duration,
        probe: impl Fn(u16) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last_error = String::from("no attempt");
        while Instant::now() < deadline {
            if let Some(reason) = self.exit_reason() {
                bail!("{reason}");
            }
            match probe(port) {
                Ok(()) => return Ok(()),
                Err(e) => last_error = format!("{e:#}"),
            }
            thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "{} did not answer GET / on 127.0.0.1:{port} within {timeout:?} (last: {last_error}); its log ends: {}",
            self.label,
            self.log_tail(8)
        )
    }

    /// SIGTERM to the whole process group, then SIGKILL after a grace period; waits for the child.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let group = self.child.id() as libc::pid_t;
        signal_group(group, libc::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                // Workers may still be finishing; the group is ours alone, so make sure.
                signal_group(group, libc::SIGKILL);
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        signal_group(group, libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}

fn signal_group(group: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals that process group; the group was created for
    // this child (process_group(0)), so nothing else is in it.
    unsafe {
        libc::kill(-group, signal);
    }
}

/// Stops a process group when this program ends, however it ends. PR_SET_PDEATHSIG covers only
/// the child this program started; a process that child starts in turn (herdsman's binary upgrade
/// starts its successor, which then outlives its parent) has no such tie. The guard is a process
/// of its own (this program's hidden `guard-group` subcommand, outside the group and without
/// PR_SET_PDEATHSIG) that waits for its stdin to close — which happens when this program exits or
/// is killed, or drops the guard — then sends the group SIGTERM and, after `STOP_GRACE`, SIGKILL.
pub struct GroupGuard {
    /// Closed (dropped) to tell the guard to act; it also closes when this program dies.
    stdin: Option<ChildStdin>,
    child: Child,
}

impl GroupGuard {
    /// Starts a guard for process group `group`.
    pub fn start(group: u32) -> anyhow::Result<GroupGuard> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("guard-group")
            .arg(group.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting the process group's guard")?;
        let stdin = child.stdin.take().context("the guard's stdin")?;
        Ok(GroupGuard {
            stdin: Some(stdin),
            child,
        })
    }
}

impl Drop for GroupGuard {
    /// Lets the guard stop the group now, and reaps it.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + STOP_GRACE + Duration::from_secs(1);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The hidden `guard-group` subcommand: waits until stdin closes, then stops process group
/// `group` (SIGTERM, then SIGKILL after `STOP_GRACE` if any member is left).
pub fn guard_group(group: u32) -> anyhow::Result<()> {
    let mut ignored = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut ignored);
    let group = group as libc::pid_t;
    if group <= 1 {
        bail!("no process group {group} to guard");
    }
    signal_group(group, libc::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    // SAFETY: kill(2) with signal 0 only asks whether the group still has a member.
    while Instant::now() < deadline && unsafe { libc::kill(-group, 0) } == 0 {
        thread::sleep(Duration::from_millis(50));
    }
    signal_group(group, libc::SIGKILL);
    Ok(())
}

/// Polls `check` every `every` until it gives a value, at most `limit`: what herdsman shows once
/// a change took (a reload in its metrics, a new pid after an upgrade, files written).
pub fn poll_until<T>(
    limit: Duration,
    every: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(every);
    }
}

/// Asks the kernel to SIGTERM the child when this process dies, so that even a killed benchmark
/// leaves no proxy behind.
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec; it calls only async-signal-safe functions
    // (prctl, getppid) and does not allocate.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// Starts this program's `subcommand` with `args` as a supervised child, its output in `log`, and
/// waits until it answers `GET /` with a 2xx on 127.0.0.1:`port`: a server this program plays
/// (the backend, `slow-clients`' sync server).
pub fn start_own_server(
    subcommand: &str,
    args: &[String],
    port: u16,
    log: &Path,
) -> anyhow::Result<Supervised> {
    start_own_server_checked(subcommand, args, port, log, probe)
}

/// `start_own_server`, waiting until `probe(port)` succeeds rather than a `GET /` over HTTP/1.1:
/// for a server that speaks something else.
pub fn start_own_server_checked(
    subcommand: &str,
    args: &[String],
    port: u16,
    log: &Path,
    probe: impl Fn(u16) -> anyhow::Result<()>,
) -> anyhow::Result<Supervised> {
    let mut command = Command::new(std::env::current_exe()?);
    command.arg(subcommand).args(args);
    let mut server = Supervised::spawn(subcommand, command, log)?;
    server.wait_until_answering(port, Duration::from_secs(10), probe)?;
    Ok(server)
}

/// Command-line options: `NAME VALUE` for each pair, in order.
pub fn option_args<'a>(pairs: impl IntoIterator<Item = (&'a str, String)>) -> Vec<String> {
    pairs
        .into_iter()
        .flat_map(|(name, value)| [name.to_string(), value])
        .collect()
}

/// `total` split over `parts` (at least one) as evenly as whole numbers allow, the first parts
/// taking the remainder, so the shares add up to `total`.
pub fn split_evenly(total: u32, parts: u32) -> Vec<u32> {
    let parts = parts.max(1);
    (0..parts)
        .map(|index| total / parts + u32::from(index < total % parts))
        .collect()
}

/// Raises this process's soft limit on open files to its hard limit, which every child (proxies,
/// clients) then inherits, and returns it. Here the hard limit is 20,000 and cannot be raised.
pub fn raise_descriptor_limit() -> anyhow::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error()).context("getrlimit(RLIMIT_NOFILE)");
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error()).context("setrlimit(RLIMIT_NOFILE)");
            }
        }
    }
    Ok(limit.rlim_cur)
}

/// Sets every thread of process `pid` to the nice value `nice` (below 0: ahead of the machine's
/// other work), where that is permitted (root, or CAP_SYS_NICE); false where it was not for some
/// thread. Threads the process starts later inherit the value of the thread that starts them.
pub fn set_priority(pid: u32, nice: i32) -> bool {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut all = true;
    for thread in threads.flatten() {
        let Some(tid) = thread.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // SAFETY: setpriority only changes how thread `tid` is scheduled (Linux keeps a nice
        // value per thread).
        all &= unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } == 0;
    }
    all
}

/// A port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// One `GET /` on a fresh connection; Ok when the answer's status is 2xx.
pub fn probe(port: u16) -> anyhow::Result<()> {
    probe_path(port, "/")
}

/// One `GET path` on a fresh connection, 2 s for each step; Ok when the answer's status is 2xx
/// (whatever its framing: only the status line is read).
pub fn probe_path(port: u16, path: &str) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(2);
    let mut stream = TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    if head.starts_with(b"HTTP/1.") && head[9] == b'2' {
        Ok(())
    } else {
        bail!("answered {:?}", String::from_utf8_lossy(&head))
    }
}

/// Runs `command` to completion, killing it if it takes longer than `timeout`.
pub fn run_with_timeout(mut command: Command, timeout: Duration) -> anyhow::Result<Output> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut command);
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {command:?}"))?;
    // Pipes are drained on their own threads so a chatty child cannot block on a full pipe.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{command:?} took longer than {timeout:?} and was killed");
        }
        thread::sleep(Duration::from_millis(10));
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_differ_by_at_most_one() {
        assert_eq!(split_evenly(15_000, 2), vec![7500, 7500]);
        assert_eq!(split_evenly(10, 3), vec![4, 3, 3]);
        assert_eq!(split_evenly(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(split_evenly(5, 0), vec![5]);
    }

    #[test]
    fn the_descriptor_limit_is_readable() {
        assert!(raise_descriptor_limit().unwrap() >= 1024);
    }
}
