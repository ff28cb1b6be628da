//! Child processes that must never outlive the benchmark: proxies, the backend and wrk. Each runs in
//! its own process group (so a proxy's workers are stopped with it) and gets SIGTERM from the kernel
//! if this process dies first (PR_SET_PDEATHSIG). Also: free ports, "is it serving yet", and running
//! a command with a time limit.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
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
    pub fn spawn(label: &str, mut command: Command, log: &Path) -> anyhow::Result<Self> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        command
            .stdin(Stdio::null())
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

    /// The last `lines` lines of the process's output, on one line.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = all[all.len().saturating_sub(lines)..].join(" | ");
        if tail.is_empty() {
            "(nothing)".to_string()
        } else {
            tail
        }
    }

    /// Waits until the process answers `GET /` on `port` with a 2xx, or fails with the reason.
    pub fn wait_until_serving(&mut self, port: u16, timeout: Duration) -> anyhow::Result<()> {
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

/// A port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// One `GET /` on a fresh connection; Ok when the answer's status is 2xx.
pub fn probe(port: u16) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(2);
    let mut stream = TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
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
