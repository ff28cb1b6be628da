//! Zero-downtime binary upgrade. On SIGUSR2 (or `herdsman ctl upgrade`) the running process
//! starts the binary again — the new one, if the file was replaced — with the same arguments,
//! handing it its listening sockets (descriptors left open across exec, named in
//! `HERDSMAN_INHERIT`). The new process adopts them instead of binding, starts serving, and says
//! so on a pipe (`HERDSMAN_READY_FD`); only then does the old one stop accepting. It serves the
//! connections it has until they end (see `drain`; `hard_stop_after` bounds that), reporting
//! how many remain on a second pipe (`HERDSMAN_PREDECESSOR_FD`) that closes when it exits. The
//! listening sockets themselves never close, so no connection is refused meanwhile. A new
//! process that fails to start changes nothing: the old one logs why and keeps serving.
//!
//! Under systemd the new process tells the manager it is the service's main process (see
//! `notify`) before it tells the old one, so the old one's exit never looks like the service's
//! end. `NOTIFY_SOCKET` reaches the new process because the environment is inherited as is.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::notify;

/// Names the inherited sockets: `listener=FD,listener=FD` and `admin` for the admin API's.
pub const INHERIT_ENV: &str = "HERDSMAN_INHERIT";
/// The pipe on which the new process says it serves.
pub const READY_ENV: &str = "HERDSMAN_READY_FD";
/// The pipe on which the old process reports its drain to the new one (the read end's number).
pub const PREDECESSOR_ENV: &str = "HERDSMAN_PREDECESSOR_FD";
/// A pipe holding the old process's TLS session ticket keys (the read end's number), so that
/// clients resume their sessions across the upgrade. A pipe, not the environment: another
/// process of the same user could read an environment in /proc.
pub const TICKET_KEYS_ENV: &str = "HERDSMAN_TICKET_KEYS_FD";
/// The name the admin API's socket goes by in `HERDSMAN_INHERIT`.
pub const ADMIN_SOCKET: &str = "admin";
/// The name its UNIX socket goes by. Not a listener name: those are checked names, and this has a
/// character no checked name may have.
pub const ADMIN_UNIX_SOCKET: &str = "admin unix";
/// How long the old process waits for the new one to serve before giving up on it.
const READY_WAIT: Duration = Duration::from_secs(30);

/// How to start this process again: its executable as it was at start (the path, so that a
/// replaced file starts the new binary) and its arguments.
#[derive(Debug, Clone)]
pub struct Relaunch {
    pub exe: PathBuf,
    pub args: Vec<OsString>,
}

impl Relaunch {
    /// This process's, read now (call at start, before the file can be replaced).
    pub fn of_this_process() -> io::Result<Relaunch> {
        let exe = std::env::current_exe()?;
        Ok(Relaunch {
            exe,
            args: std::env::args_os().skip(1).collect(),
        })
    }
}

/// The process an upgrade started, which serves now, and the pipe this one tells it about its
/// drain on.
#[derive(Debug)]
pub struct Successor {
    pub pid: u32,
    /// The write end of the pipe the successor reads; non-blocking, so that a successor that
    /// stops reading never holds this process up. `None` once a write failed (it exited).
    report: Option<std::fs::File>,
}

impl Successor {
    /// Sends one report line (see `drain`). Shorter than PIPE_BUF, it goes whole or not at all;
    /// a full pipe skips it, as a later line says more.
    pub fn report(&mut self, line: &str) {
        let Some(pipe) = &mut self.report else {
            return;
        };
        match io::Write::write_all(pipe, line.as_bytes()) {
            Err(error) if error.kind() != io::ErrorKind::WouldBlock => self.report = None,
            _ => {}
        }
    }
}

/// Starts the successor with `sockets` (name, descriptor) and waits until it serves. `Ok`: the
/// caller stops accepting and drains, and tells systemd nothing more (the successor is the
/// service's main process now). `Err`: the caller keeps serving.
pub fn start_successor(
    relaunch: &Relaunch,
    sockets: &[(String, RawFd)],
) -> Result<Successor, String> {
    let started = start_and_wait(relaunch, sockets);
    if started.is_err() {
        // The successor claims the main pid just before it writes to the pipe. Had it died, or
        // been killed for being late, after the claim, systemd would follow a dead process and
        // end the service: claim it back. Without a claim this repeats what systemd knows.
        notify::ready("serving; the binary upgrade failed");
    }
    started
}

fn start_and_wait(relaunch: &Relaunch, sockets: &[(String, RawFd)]) -> Result<Successor, String> {
    let no_pipe = |e| format!("cannot make a pipe: {e}");
    let (ready_read, ready_write) = pipe().map_err(no_pipe)?;
    let (report_read, report_write) = pipe().map_err(no_pipe)?;
    set_nonblocking(&report_write).map_err(no_pipe)?;
    // The keys fit a pipe's buffer many times over: written whole before the successor starts.
    let (keys_read, keys_write) = pipe().map_err(no_pipe)?;
    let keys = crate::config::ticket_keys::TicketKeys::global().export();
    io::Write::write_all(&mut std::fs::File::from(keys_write), &keys).map_err(no_pipe)?;
    let inherit = sockets
        .iter()
        .map(|(name, fd)| format!("{name}={fd}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut keep: Vec<RawFd> = sockets.iter().map(|(_, fd)| *fd).collect();
    keep.push(ready_write.as_raw_fd());
    keep.push(report_read.as_raw_fd());
    keep.push(keys_read.as_raw_fd());
    let mut command = Command::new(&relaunch.exe);
    command
        .args(&relaunch.args)
        .env(INHERIT_ENV, inherit)
        .env(READY_ENV, ready_write.as_raw_fd().to_string())
        .env(PREDECESSOR_ENV, report_read.as_raw_fd().to_string())
        .env(TICKET_KEYS_ENV, keys_read.as_raw_fd().to_string())
        .stdin(Stdio::null());
    // SAFETY: between fork and exec only async-signal-safe calls (fcntl) are made.
    unsafe {
        command.pre_exec(move || {
            for fd in &keep {
                if libc::fcntl(*fd, libc::F_SETFD, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", relaunch.exe.display()))?;
    // Only the child may hold the write end now: its exit then ends the read below. And only
    // it reads the reports: with this process's read end open, a successor that died would
    // leave writes going into a pipe nobody reads rather than failing.
    drop(ready_write);
    drop(report_read);
    drop(keys_read);
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut ready_read = std::fs::File::from(ready_read);
        let mut said = String::new();
        let _ = ready_read.read_to_string(&mut said);
        let _ = sender.send(said);
    });
    match receiver.recv_timeout(READY_WAIT) {
        Ok(said) if said.starts_with("ready") => Ok(Successor {
            pid,
            report: Some(std::fs::File::from(report_write)),
        }),
        Ok(_) => {
            let status = child
                .wait()
                .map_or("unknown".to_string(), |s| s.to_string());
            Err(format!(
                "the new process (pid {pid}) exited before serving: {status}"
            ))
        }
        Err(_) => {
            let _ = child.kill();
            Err(format!(
                "the new process (pid {pid}) did not serve within {READY_WAIT:?}; killed it"
            ))
        }
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array, which are then owned here.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and belong to nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor this process owns.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    if flags == -1
        || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } == -1
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The read end of the pipe on which the process this one replaces reports its drain, taken
/// from the environment (and cleared there, so that no later child sees it), with that
/// process's pid. `None` when this process was not started by an upgrade.
pub fn take_predecessor_pipe() -> Option<(u32, std::fs::File)> {
    let fd = std::env::var_os(PREDECESSOR_ENV)?;
    // Called at start, before the threads that might read the environment.
    std::env::remove_var(PREDECESSOR_ENV);
    let fd = fd.to_string_lossy().parse::<RawFd>().ok()?;
    // SAFETY: the old process left this descriptor open for this process to own.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    set_cloexec(&owned);
    Some((
        std::os::unix::process::parent_id(),
        std::fs::File::from(owned),
    ))
}

/// Takes the TLS session ticket keys the process this one replaces handed down (and clears the
/// variable naming their pipe): true when it did, so that tickets it sealed open here.
pub fn take_ticket_keys() -> bool {
    let Some(fd) = std::env::var_os(TICKET_KEYS_ENV) else {
        return false;
    };
    // Called at start, before the threads that might read the environment.
    std::env::remove_var(TICKET_KEYS_ENV);
    let Ok(fd) = fd.to_string_lossy().parse::<RawFd>() else {
        return false;
    };
    // SAFETY: the old process left this descriptor open for this process to own.
    let mut pipe = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut keys = Vec::new();
    // The writer closed its end before this process started: the read ends at once.
    pipe.read_to_end(&mut keys).is_ok()
        && crate::config::ticket_keys::TicketKeys::global().import(&keys)
}

/// The sockets handed down by the process this one replaces, by listener name.
#[derive(Debug, Default)]
pub struct Inherited {
    sockets: HashMap<String, OwnedFd>,
}

impl Inherited {
    /// Reads (and clears, so that no later child sees them) the variables the old process set.
    /// Without them: nothing inherited.
    pub fn from_env() -> Inherited {
        let Some(list) = std::env::var_os(INHERIT_ENV) else {
            return Inherited::default();
        };
        // Called at start, before the threads that might read the environment.
        std::env::remove_var(INHERIT_ENV);
        let mut sockets = HashMap::new();
        for entry in list.to_string_lossy().split(',').filter(|e| !e.is_empty()) {
            let Some((name, fd)) = entry.split_once('=') else {
                continue;
            };
            let Ok(fd) = fd.parse::<RawFd>() else {
                continue;
            };
            // SAFETY: the old process left this descriptor open for this process to own.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            set_cloexec(&owned);
            sockets.insert(name.to_string(), owned);
        }
        Inherited { sockets }
    }

    /// The inherited socket of listener `name`, if it listens on `addr` (or on any port of its
    /// IP when `addr`'s port is 0); one on another address is closed.
    pub fn take_listener(
        &mut self,
        name: &str,
        addr: std::net::SocketAddr,
    ) -> Option<socket2::Socket> {
        let socket = socket2::Socket::from(self.sockets.remove(name)?);
        let bound = socket.local_addr().ok()?.as_socket()?;
        let same = bound == addr || (addr.port() == 0 && bound.ip() == addr.ip());
        same.then_some(socket)
    }

    /// The admin API's inherited socket, if it listens on `addr`.
    pub fn take_admin(&mut self, addr: std::net::SocketAddr) -> Option<std::net::TcpListener> {
        self.take_listener(ADMIN_SOCKET, addr)
            .map(std::net::TcpListener::from)
    }

    /// The admin API's inherited UNIX socket, if it is the one at `path`.
    pub fn take_admin_socket(
        &mut self,
        path: &std::path::Path,
    ) -> Option<std::os::unix::net::UnixListener> {
        let listener =
            std::os::unix::net::UnixListener::from(self.sockets.remove(ADMIN_UNIX_SOCKET)?);
        let bound = listener.local_addr().ok()?;
        (bound.as_pathname() == Some(path)).then_some(listener)
    }
}

/// Tells systemd, if it runs this process, and the old process, if there is one, that this one
/// serves now. systemd first: once the old process hears, it may exit, and by then systemd must
/// know this process as the service's main one.
pub fn tell_ready() {
    let Some(fd) = std::env::var_os(READY_ENV) else {
        notify::ready("serving");
        return;
    };
    notify::ready(&format!(
        "serving; took over from pid {} (binary upgrade)",
        std::os::unix::process::parent_id()
    ));
    std::env::remove_var(READY_ENV);
    let Ok(fd) = fd.to_string_lossy().parse::<RawFd>() else {
        return;
    };
    // SAFETY: the old process left the pipe's write end open for this process.
    let mut pipe = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let _ = io::Write::write_all(&mut pipe, b"ready\n");
}

fn set_cloexec(fd: &OwnedFd) {
    // SAFETY: fcntl on a descriptor this process owns.
    unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
    }
}
