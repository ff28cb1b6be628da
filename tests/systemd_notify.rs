//! herdsman under a stand-in for systemd: the test binds the datagram socket systemd would name
//! in `NOTIFY_SOCKET`, runs the real binary, and reads what it is told. At start, and after a
//! binary upgrade, the serving process says READY=1 with its own pid as MAINPID — the new one
//! while the old one still runs, so that systemd follows it instead of ending the service at the
//! old one's exit. The old process never says STOPPING=1, not even when a SIGTERM hurries its
//! drain; SIGTERM to the new one does. A
//! process started by an upgrade tells systemd before it tells the old process it serves. A
//! reload, by SIGHUP or by the admin API, is framed by RELOADING=1 and READY=1.

mod common;

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::*;
use herdsman::process::notify::SOCKET_ENV;
use herdsman::process::upgrade::READY_ENV;

/// The service manager's end: every message heard, in order.
struct Manager {
    socket: UnixDatagram,
    heard: Vec<String>,
}

impl Manager {
    fn bind(path: &std::path::Path) -> Manager {
        let _ = std::fs::remove_file(path);
        Manager {
            socket: UnixDatagram::bind(path).expect("bind the notify socket"),
            heard: Vec::new(),
        }
    }

    /// The first message `wanted` accepts, waiting up to `timeout`; every message read on the
    /// way is kept in `heard`.
    fn wait_for(&mut self, timeout: Duration, wanted: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut buffer = [0; 4096];
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            // set_read_timeout refuses zero.
            let wait = left.max(Duration::from_millis(1));
            self.socket.set_read_timeout(Some(wait)).unwrap();
            match self.socket.recv(&mut buffer) {
                Ok(n) => {
                    let message = String::from_utf8_lossy(&buffer[..n]).into_owned();
                    self.heard.push(message.clone());
                    if wanted(&message) {
                        return Some(message);
                    }
                }
                Err(e) if is_timeout(&e) || e.kind() == std::io::ErrorKind::WouldBlock => {
                    return None
                }
                Err(e) => panic!("reading the notify socket: {e}"),
            }
        }
    }

    /// The first message `wanted` accepts among those already queued, without waiting.
    fn queued(&mut self, wanted: impl Fn(&str) -> bool) -> Option<String> {
        self.socket.set_nonblocking(true).unwrap();
        let found = self.wait_for(Duration::from_secs(1), wanted);
        self.socket.set_nonblocking(false).unwrap();
        found
    }

    /// Reads whatever arrives within `quiet` into `heard`.
    fn listen(&mut self, quiet: Duration) {
        self.wait_for(quiet, |_| false);
    }
}

/// The value of `key` in a message of `KEY=value` lines.
fn field<'a>(message: &'a str, key: &str) -> Option<&'a str> {
    message
        .lines()
        .filter_map(|line| line.split_once('='))
        .find_map(|(k, v)| (k == key).then_some(v))
}

/// The main pid a READY=1 message names.
fn ready_pid(message: &str) -> Option<u32> {
    if field(message, "READY") != Some("1") {
        return None;
    }
    field(message, "MAINPID")?.parse().ok()
}

#[test]
fn under_systemd_an_upgrade_moves_the_main_pid_and_the_service_keeps_running() {
    // "/held" waits for `release`: a request in flight that keeps the old process from exiting.
    let release = Gate::new();
    let backend = {
        let release = release.clone();
        Mock::start(move |ex| {
            ex.read_body()?;
            let target = ex.head.target().to_string();
            if target == "/held" {
                release.wait(Duration::from_secs(20));
            }
            ex.respond(200, &[], target.as_bytes())?;
            Ok(Flow::KeepAlive)
        })
    };
    let web: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = write_temp(
        "notify.toml",
        &format!(
            "workers = 2\n[[listener]]\nname = \"web\"\nbind = \"{web}\"\npool = \"app\"\n\
             [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
            backend.addr
        ),
    );
    let notify_path = config.with_extension("sock");
    let mut manager = Manager::bind(&notify_path);
    let mut old = run_binary_with_env(&config, &[(SOCKET_ENV, notify_path.as_os_str())]);
    let old_pid = old.0.id();

    let ready = manager.wait_for(Duration::from_secs(10), |m| ready_pid(m).is_some());
    let ready = ready.expect("READY=1 at start");
    assert_eq!(ready_pid(&ready), Some(old_pid), "{ready:?}");
    let before = Conn::connect(web).roundtrip(&get_request("/before", ""));
    assert_eq!(
        (before.status(), before.body_text().as_str()),
        (200, "/before")
    );

    let mut held = Conn::connect(web);
    held.send(&get_request("/held", ""));
    assert!(backend.wait_for_heads(2, IO_TIMEOUT), "the held request");
    old.signal(libc::SIGUSR2);
    let upgraded = manager.wait_for(Duration::from_secs(15), |m| {
        ready_pid(m).is_some_and(|pid| pid != old_pid)
    });
    let upgraded = upgraded.expect("READY=1 from the new process");
    let new_pid = ready_pid(&upgraded).unwrap();
    let successor = Successor(new_pid as libc::pid_t);
    assert!(
        old.0.try_wait().unwrap().is_none(),
        "the old process exited before systemd heard of the new main pid"
    );

    // A stop signal to the draining old process alone (it is no longer the main one) hurries
    // its drain; it tells systemd nothing.
    old.signal(libc::SIGTERM);
    release.open();
    let held = held.response();
    assert_eq!((held.status(), held.body_text().as_str()), (200, "/held"));
    let exited = old.wait_timeout(Duration::from_secs(15));
    assert!(exited.is_some(), "the old process did not stop");
    let after = Conn::connect(web).roundtrip(&get_request("/after", ""));
    assert_eq!(
        (after.status(), after.body_text().as_str()),
        (200, "/after")
    );
    manager.listen(Duration::from_millis(300));
    assert!(
        !manager.heard.iter().any(|m| field(m, "STOPPING").is_some()),
        "STOPPING=1 during the upgrade: {:?}",
        manager.heard
    );

    // The process the upgrade started stops gracefully.
    successor.signal(libc::SIGTERM);
    let stopping = manager.wait_for(Duration::from_secs(10), |m| {
        field(m, "STOPPING") == Some("1")
    });
    assert!(stopping.is_some(), "no STOPPING=1: {:?}", manager.heard);
    let gone = eventually(Duration::from_secs(10), || Conn::try_connect(web).is_err());
    assert!(gone, "the new process did not stop");
    let _ = std::fs::remove_file(&notify_path);
}

/// A pipe whose write end a child inherits (the read end stays in this process).
fn inheritable_pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) writes two new descriptors, owned from here on; FD_CLOEXEC on the read end.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::fcntl(fds[0], libc::F_SETFD, libc::FD_CLOEXEC);
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    }
}

#[test]
fn a_process_started_by_an_upgrade_tells_systemd_before_the_old_process() {
    // This test plays the old process: it owns the ready pipe the new one writes to.
    let backend = Mock::named("a");
    let web: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = write_temp(
        "notify-order.toml",
        &format!(
            "[[listener]]\nname = \"web\"\nbind = \"{web}\"\npool = \"app\"\n\
             [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
            backend.addr
        ),
    );
    let notify_path = config.with_extension("sock");
    let mut manager = Manager::bind(&notify_path);
    let (ready_read, ready_write) = inheritable_pipe();
    let ready_fd = ready_write.as_raw_fd().to_string();
    let mut successor = run_binary_with_env(
        &config,
        &[
            (SOCKET_ENV, notify_path.as_os_str()),
            (READY_ENV, ready_fd.as_ref()),
        ],
    );
    // Only the child holds the write end now: its exit before a word ends the read.
    drop(ready_write);
    let (said_sender, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // One line, not to the end: a child of the other test may hold a copy of the write end.
        let mut said = String::new();
        let _ = BufReader::new(std::fs::File::from(ready_read)).read_line(&mut said);
        let _ = said_sender.send(said);
    });
    let said = said.recv_timeout(Duration::from_secs(10));
    assert!(
        said.as_deref().is_ok_and(|s| s.starts_with("ready")),
        "the ready pipe said {said:?}"
    );
    // A datagram is queued at the receiver when its send returns: a READY=1 sent first is here.
    let ready = manager.queued(|m| ready_pid(m).is_some());
    let ready = ready.expect("READY=1 queued before the pipe said ready");
    assert_eq!(ready_pid(&ready), Some(successor.0.id()), "{ready:?}");

    successor.signal(libc::SIGTERM);
    assert!(successor.wait_timeout(Duration::from_secs(15)).is_some());
    let _ = std::fs::remove_file(&notify_path);
}

#[test]
fn a_reload_by_signal_or_by_the_admin_api_tells_systemd_it_began_and_how_it_ended() {
    let backend = Mock::named("a");
    let (web, admin): (std::net::SocketAddr, std::net::SocketAddr) = (
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
    );
    let text = format!(
        "[[listener]]\nname = \"web\"\nbind = \"{web}\"\npool = \"app\"\n\
         [admin]\nbind = \"{admin}\"\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
        backend.addr
    );
    let config = write_temp("notify-reload.toml", &text);
    let notify_path = config.with_extension("sock");
    let mut manager = Manager::bind(&notify_path);
    let mut herdsman = run_binary_with_env(&config, &[(SOCKET_ENV, notify_path.as_os_str())]);
    let started = manager.wait_for(Duration::from_secs(10), |m| ready_pid(m).is_some());
    assert!(started.is_some(), "no READY=1 at start");
    assert!(wait_listening(admin, Duration::from_secs(10)));
    let reload_by_api = || {
        let request = b"POST /api/reload HTTP/1.1\r\nHost: localhost\r\n\
            Content-Type: application/json\r\nContent-Length: 0\r\n\r\n";
        Conn::connect(admin).roundtrip(request).status()
    };

    // Each reload: RELOADING=1, then READY=1 with a status that says how it went.
    let mut reload_said = |reload: &mut dyn FnMut(), outcome: &str| {
        manager.heard.clear();
        reload();
        let ready = manager.wait_for(Duration::from_secs(10), |m| ready_pid(m).is_some());
        let ready = ready.unwrap_or_else(|| {
            panic!("no READY=1 after a reload ({outcome}): {:?}", manager.heard)
        });
        let began = manager
            .heard
            .iter()
            .position(|m| field(m, "RELOADING") == Some("1"));
        let ended = manager.heard.len() - 1;
        assert!(began.is_some_and(|at| at < ended), "{:?}", manager.heard);
        let status = field(&ready, "STATUS").unwrap_or_default();
        assert!(status.contains(outcome), "STATUS={status}");
    };
    // The SIGHUP goes as soon as READY=1 is heard, as `systemctl reload` may send it: the signal
    // handlers must be in place by then (they once were installed after, and SIGHUP's default
    // action ended the process).
    reload_said(&mut || herdsman.signal(libc::SIGHUP), "config reloaded");
    reload_said(&mut || assert_eq!(reload_by_api(), 200), "config reloaded");
    std::fs::write(
        &config,
        text.replace("[[pool]]", "[[pool]]\nbalance = \"fastest-first\""),
    )
    .unwrap();
    reload_said(&mut || assert_eq!(reload_by_api(), 400), "reload refused");

    let served = Conn::connect(web).roundtrip(&get_request("/still", ""));
    assert_eq!(served.status(), 200, "the old config serves on");
    herdsman.signal(libc::SIGTERM);
    assert!(herdsman.wait_timeout(Duration::from_secs(15)).is_some());
    let _ = std::fs::remove_file(&notify_path);
}
