//! The herdsman binary: running it (to completion or in the background), the temporary config
//! files it reads, and the processes a binary upgrade leaves behind.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::mock::{free_port, Mock};
use super::raw::{admin_get_request, get_request, Conn};
use super::sync::eventually;

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_herdsman")
}

/// Writes `text` to a fresh file under cargo's temporary directory for integration tests
/// (`target/tmp`, emptied by `cargo clean`, rather than leaving files in /tmp) and returns its
/// path.
pub fn write_temp(name: &str, text: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("herdsman-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{n}-{name}"));
    std::fs::write(&path, text).unwrap();
    path
}

/// A fresh, empty directory `herdsman-<name>-<pid>` under cargo's temporary directory for
/// integration tests, for a test's logs or temporary files.
pub fn fresh_temp_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("herdsman-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts `herdsman run -c path` (output discarded) and returns at once.
pub fn run_binary_with(path: &Path) -> ChildGuard {
    run_binary_with_env(path, &[])
}

/// Like [`run_binary_with`], with `env` added to the inherited environment (e.g. a
/// `NOTIFY_SOCKET` for a test that plays systemd).
pub fn run_binary_with_env(path: &Path, env: &[(&str, &std::ffi::OsStr)]) -> ChildGuard {
    spawn_run(path, env, Stdio::null())
}

/// Like [`run_binary_with_env`], with herdsman's own log (stderr) written to `log`, for a test
/// that reads what it logged.
pub fn run_binary_logged(path: &Path, env: &[(&str, &std::ffi::OsStr)], log: &Path) -> ChildGuard {
    let file = std::fs::File::create(log).expect("the log file");
    spawn_run(path, env, Stdio::from(file))
}

fn spawn_run(path: &Path, env: &[(&str, &std::ffi::OsStr)], stderr: Stdio) -> ChildGuard {
    let child = Command::new(binary())
        .args(["run", "-c", path.to_str().unwrap()])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn herdsman run");
    ChildGuard(child)
}

/// Runs the binary to completion with a timeout; returns (exit code, stdout + stderr).
pub fn run_binary(args: &[&str]) -> (Option<i32>, String) {
    let child = Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn herdsman");
    let mut child = ChildGuard(child);
    let status = child
        .wait_timeout(Duration::from_secs(20))
        .unwrap_or_else(|| {
            panic!("herdsman {args:?} did not exit within 20 s");
        });
    let mut out = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    (status.code(), out)
}

/// A child process that is killed when dropped.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// Waits for exit up to `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.0.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.0.id());
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The pid serving the admin API at `admin`, asked until it answers (for up to 10 s): the admin
/// listener opens after the proxy's, so on a busy machine it may not answer at once.
pub fn serving_pid(admin: SocketAddr) -> Option<u64> {
    let mut pid = None;
    eventually(Duration::from_secs(10), || {
        pid = workers(admin).and_then(|json| json["pid"].as_u64());
        pid.is_some()
    });
    pid
}

/// `GET /api/workers` at `admin`, once; `None` when it does not answer with JSON.
pub fn workers(admin: SocketAddr) -> Option<serde_json::Value> {
    let mut conn = Conn::try_connect(admin).ok()?;
    conn.set_read_timeout(Duration::from_secs(2));
    conn.try_send(&admin_get_request("/api/workers")).ok()?;
    let response = conn.read_response(false).ok()?;
    serde_json::from_str(&response.body_text()).ok()
}

/// The pid of the process that took over from `old` at `admin` (asked for up to 15 s), guarded
/// so that it is killed should the test fail before stopping it.
pub fn successor_of(admin: SocketAddr, old: u64) -> Successor {
    let mut pid = None;
    eventually(Duration::from_secs(15), || {
        pid = workers(admin)
            .and_then(|json| json["pid"].as_u64())
            .filter(|&pid| pid != old);
        pid.is_some()
    });
    let pid = pid.unwrap_or_else(|| panic!("no new process took over from pid {old}"));
    // Its admin API answers before it handles signals (see `Binary::start`).
    for signal in [libc::SIGHUP, libc::SIGUSR2] {
        assert!(wait_pid_catches(
            pid as u32,
            signal,
            Duration::from_secs(10)
        ));
    }
    Successor(pid as libc::pid_t)
}

/// `herdsman run` (the binary) with listener "web" and the admin API on ports of their own, in
/// front of `backend`, with `top_keys` (lines such as `shutdown_grace = "1s"`) added.
pub struct Binary {
    pub process: ChildGuard,
    /// Where listener "web" accepts connections.
    pub web: SocketAddr,
    /// Where the admin API listens.
    pub admin: SocketAddr,
    /// Its config file.
    pub path: PathBuf,
}

impl Binary {
    pub fn start(backend: &Mock, top_keys: &str) -> Binary {
        let (web, admin): (SocketAddr, SocketAddr) = (
            format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        );
        let config = format!(
            "workers = 2\n{top_keys}\n[[listener]]\nname = \"web\"\nbind = \"{web}\"\npool = \"app\"\n\
             [admin]\nbind = \"{admin}\"\n\
             [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
            backend.addr
        );
        let path = write_temp("binary.toml", &config);
        let process = run_binary_with(&path);
        assert!(wait_listening(web, Duration::from_secs(10)));
        assert_eq!(serving_pid(admin), Some(u64::from(process.0.id())));
        // It listens before it handles signals: a SIGHUP or SIGUSR2 sent between would end it.
        for signal in [libc::SIGHUP, libc::SIGUSR2] {
            assert!(wait_pid_catches(
                process.0.id(),
                signal,
                Duration::from_secs(10)
            ));
        }
        Binary {
            process,
            web,
            admin,
            path,
        }
    }

    pub fn pid(&self) -> u64 {
        u64::from(self.process.0.id())
    }

    /// Applies `edit` to the config file's text, sends SIGHUP, and waits (up to 10 s) until the
    /// reload has been applied.
    pub fn reload(&self, edit: impl FnOnce(String) -> String) {
        let text = std::fs::read_to_string(&self.path).unwrap();
        std::fs::write(&self.path, edit(text)).unwrap();
        let before = self.reloads();
        self.process.signal(libc::SIGHUP);
        assert!(
            eventually(Duration::from_secs(10), || self.reloads() > before),
            "the reload was not applied"
        );
    }

    /// Reloads applied so far, as `/metrics` counts them.
    fn reloads(&self) -> u64 {
        let metrics = Conn::connect(self.admin)
            .roundtrip(&admin_get_request("/metrics"))
            .body_text();
        metrics
            .lines()
            .find_map(|line| line.strip_prefix("herdsman_config_reloads_total "))
            .and_then(|count| count.trim().parse().ok())
            .expect("herdsman_config_reloads_total in /metrics")
    }

    /// Sends SIGUSR2 and returns the process that took over.
    pub fn upgrade(&self) -> Successor {
        self.process.signal(libc::SIGUSR2);
        successor_of(self.admin, self.pid())
    }
}

/// Asserts that a new connection to `web` is served.
pub fn serves(web: SocketAddr) {
    let response = Conn::connect(web).roundtrip(&get_request("/", "Connection: close\r\n"));
    assert_eq!(response.status(), 200);
}

/// A process a binary upgrade started: not this test's child, so not a `ChildGuard`; killed if
/// the test ends before stopping it.
pub struct Successor(pub libc::pid_t);

impl Successor {
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the pid of a process this test's herdsman started.
        let rc = unsafe { libc::kill(self.0, signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.0);
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a process this test's herdsman started.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// Waits until something accepts connections at `addr`.
pub fn wait_listening(addr: SocketAddr, timeout: Duration) -> bool {
    eventually(timeout, || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
    })
}

/// Waits until the process `child` catches `signal` (Linux: its `SigCgt` mask in /proc). A
/// signal whose default action ends the process (SIGUSR1, SIGHUP) must not be sent before then.
pub fn wait_signal_caught(child: &ChildGuard, signal: libc::c_int, timeout: Duration) -> bool {
    wait_pid_catches(child.0.id(), signal, timeout)
}

/// [`wait_signal_caught`] for any process, by pid.
pub fn wait_pid_catches(pid: u32, signal: libc::c_int, timeout: Duration) -> bool {
    let status = format!("/proc/{pid}/status");
    eventually(timeout, || {
        let Ok(text) = std::fs::read_to_string(&status) else {
            return false;
        };
        text.lines()
            .find_map(|line| line.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
    })
}

/// The peak resident memory of process `pid` so far (VmHWM), in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}
