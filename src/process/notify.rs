//! Telling the service manager how herdsman is doing, with systemd's sd_notify protocol: that it
//! serves, reloads or stops, and which process is the service's main one, which is how the
//! service survives a binary upgrade under systemd (`Type=notify`, `NotifyAccess=all`).
//!
//! The protocol (sd_notify(3)): one datagram per change of state, sent to the AF_UNIX socket that
//! the manager names in `NOTIFY_SOCKET` (a path, or after a leading `@` a name in Linux's
//! abstract namespace), made of newline-separated `KEY=value` lines; no reply. Without
//! `NOTIFY_SOCKET` (not started by systemd, or a unit of another type) every call does nothing.
//! A message that cannot be sent is logged and otherwise ignored: serving matters more.
//!
//! The variable is left in the environment on purpose: the process a binary upgrade starts
//! inherits it and announces itself to the same manager.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;

/// Names the manager's socket; set by systemd for `Type=notify` units.
pub const SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// This process serves (listeners bound or adopted, workers running). `MAINPID` makes it the
/// service's main process: after a binary upgrade systemd then follows the new process, and the
/// old one's exit no longer counts as the service's end. `status` is shown by `systemctl status`.
pub fn ready(status: &str) {
    send(&format!(
        "READY=1\nMAINPID={}\nSTATUS={}",
        std::process::id(),
        one_line(status)
    ));
}

/// A reload of the config begins; [`ready`] says it ended, taken or refused. `MONOTONIC_USEC` is
/// required by `Type=notify-reload` units and ignored by `Type=notify` ones.
pub fn reloading() {
    send(&format!(
        "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the config",
        monotonic_usec()
    ));
}

/// Runs a reload of the config between [`reloading`] and [`ready`], whoever asked for it (SIGHUP
/// or `POST /api/reload`), so that systemd shows the service reloading meanwhile and then why it
/// serves on: the new config or, refused, the old one with the reason.
pub fn announce_reload<T, E: std::fmt::Display>(
    reload: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    reloading();
    let reloaded = reload();
    match &reloaded {
        Ok(_) => ready("serving; config reloaded"),
        Err(error) => ready(&format!("serving; reload refused: {error}")),
    }
    reloaded
}

/// A graceful stop begins. Never sent by a process that handed over to its successor at an
/// upgrade: systemd would take the whole service as stopping.
pub fn stopping() {
    send("STOPPING=1\nSTATUS=stopping gracefully");
}

fn send(message: &str) {
    let socket = std::env::var_os(SOCKET_ENV);
    if let Err(error) = send_to(socket.as_deref(), message) {
        let socket = socket.unwrap_or_default();
        tracing::warn!(
            socket = %socket.to_string_lossy(),
            "cannot tell the service manager {:?}: {error}",
            message.lines().next().unwrap_or_default()
        );
    }
}

/// Sends `message` to the manager's `socket`; `Ok(false)` without one (nothing to tell).
fn send_to(socket: Option<&OsStr>, message: &str) -> io::Result<bool> {
    let Some(socket) = socket else {
        return Ok(false);
    };
    let address = manager_address(socket)?;
    UnixDatagram::unbound()?.send_to_addr(message.as_bytes(), &address)?;
    Ok(true)
}

/// The address `NOTIFY_SOCKET` names: a path, or after `@` an abstract name (the `@` stands for
/// the NUL byte such names begin with, which an environment variable cannot hold).
fn manager_address(socket: &OsStr) -> io::Result<SocketAddr> {
    match socket.as_bytes() {
        [b'@', name @ ..] => abstract_address(name),
        [b'/', ..] => SocketAddr::from_pathname(Path::new(socket)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "NOTIFY_SOCKET is neither an absolute path nor an abstract name (@name)",
        )),
    }
}

#[cfg(target_os = "linux")]
fn abstract_address(name: &[u8]) -> io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    SocketAddr::from_abstract_name(name)
}

#[cfg(not(target_os = "linux"))]
fn abstract_address(_name: &[u8]) -> io::Result<SocketAddr> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract socket names (@name) exist only on Linux",
    ))
}

/// A `KEY=value` line's value must not start another line.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// CLOCK_MONOTONIC in microseconds, the clock systemd compares reloads against.
fn monotonic_usec() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec it is given, which lives on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64) * 1_000_000 + (now.tv_nsec as u64) / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::time::Duration;

    #[test]
    fn without_a_socket_nothing_is_sent() {
        assert!(!send_to(None, "READY=1").unwrap());
    }

    #[test]
    fn a_path_names_a_socket_in_the_file_system() {
        let address = manager_address(OsStr::new("/run/systemd/notify")).unwrap();
        assert_eq!(
            address.as_pathname(),
            Some(Path::new("/run/systemd/notify"))
        );
    }

    #[test]
    fn anything_else_is_refused() {
        for socket in ["", "relative/notify", "vsock:2:1234"] {
            let refused = manager_address(OsStr::new(socket)).unwrap_err();
            assert_eq!(refused.kind(), io::ErrorKind::InvalidInput, "{socket:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_at_sign_names_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let address = manager_address(OsStr::new("@herdsman/notify")).unwrap();
        assert_eq!(address.as_abstract_name(), Some(&b"herdsman/notify"[..]));
        assert_eq!(address.as_pathname(), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_message_reaches_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("herdsman-notify-test-{}", std::process::id());
        let manager =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        manager
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let socket = OsString::from(format!("@{name}"));
        assert!(send_to(Some(&socket), "READY=1\nSTATUS=serving").unwrap());
        let mut received = [0; 256];
        let n = manager.recv(&mut received).unwrap();
        assert_eq!(&received[..n], b"READY=1\nSTATUS=serving");
    }

    #[test]
    fn a_status_stays_on_its_line() {
        assert_eq!(
            one_line("reload refused:\nbad key"),
            "reload refused: bad key"
        );
    }
}
