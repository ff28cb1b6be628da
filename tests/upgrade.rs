//! Zero-downtime binary upgrade of the real binary under load: SIGUSR2 starts the binary again
//! with the listening sockets, the old process stops accepting once the new one serves, and a
//! load generator running across it sees no failed request and no refused connection. The same
//! for a SIGHUP reload. Downloads, event streams and upgraded connections that outlive
//! `shutdown_grace` run to their end in the old process (bounded by `hard_stop_after` only),
//! which the new one's `/api/workers` and `herdsman ctl upgrade` follow until it has gone; a
//! SIGTERM still stops within `shutdown_grace`.

mod common;
mod long_lived;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use long_lived::{assert_cut_short, finish_all, start_all, LongLived, Pace, OUTLIVES_ANY_BOUND};

/// Counted outcomes of a load generator: 4 clients on keep-alive connections that reconnect
/// when told to close.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    clients: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(web: SocketAddr) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let (ok, failed, refused) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let clients = (0..4)
            .map(|c| {
                let (stop, ok, failed, refused) =
                    (stop.clone(), ok.clone(), failed.clone(), refused.clone());
                thread::spawn(move || {
                    let mut conn: Option<Conn> = None;
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let current = match conn.take() {
                            Some(current) => current,
                            None => match Conn::try_connect(web) {
                                Ok(fresh) => fresh,
                                Err(_) => {
                                    refused.fetch_add(1, Ordering::SeqCst);
                                    continue;
                                }
                            },
                        };
                        let mut current = current;
                        current.set_read_timeout(Duration::from_secs(5));
                        let sent = current.try_send(&get_request(&format!("/{c}/{i}"), ""));
                        i += 1;
                        match sent.and_then(|()| current.read_response(false)) {
                            Ok(response) if response.status() == 200 => {
                                ok.fetch_add(1, Ordering::SeqCst);
                                if !response.says_close() {
                                    conn = Some(current);
                                }
                            }
                            _ => {
                                failed.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            refused,
            clients,
        }
    }

    /// Stops the clients; returns (ok, failed, refused).
    fn finish(self) -> (usize, usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        for client in self.clients {
            client.join().unwrap();
        }
        (
            self.ok.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
        )
    }
}

/// `/api/workers`' `predecessors` at `admin` as (pid, connections) pairs, `None` standing for a
/// count not known yet.
fn predecessors(admin: SocketAddr) -> Option<Vec<(u64, Option<u64>)>> {
    let json = workers(admin)?;
    let list = json["predecessors"].as_array()?;
    Some(
        list.iter()
            .map(|entry| {
                (
                    entry["pid"].as_u64().unwrap(),
                    entry["connections"].as_u64(),
                )
            })
            .collect(),
    )
}

/// Ten steps half a second apart: 5 s, five times the `shutdown_grace` the tests set.
const OUTLIVES_THE_GRACE: Pace = Pace {
    steps: 10,
    every: Duration::from_millis(500),
};

#[test]
fn downloads_streams_and_upgraded_connections_outlive_an_upgrade() {
    let backend = long_lived::backend(OUTLIVES_THE_GRACE);
    let mut old = Binary::start(&backend, "shutdown_grace = \"1s\"");
    let exchanges = start_all(old.web, OUTLIVES_THE_GRACE);
    let signalled = Instant::now();
    let new = old.upgrade();

    let outcomes = finish_all(exchanges);
    let lasted = signalled.elapsed();
    assert_eq!(
        outcomes,
        [Ok(()), Ok(()), Ok(())],
        "download, events, upgraded connection ({lasted:?} after SIGUSR2)"
    );
    assert!(
        lasted > Duration::from_secs(2),
        "the exchanges ended {lasted:?} after SIGUSR2: they did not outlive shutdown_grace"
    );
    // With its last connection closed, the old process exits; the new one serves.
    assert!(
        old.process.wait_timeout(Duration::from_secs(5)).is_some(),
        "the old process did not exit once its connections had closed"
    );
    serves(old.web);
    new.signal(libc::SIGTERM);
}

#[test]
fn hard_stop_after_ends_them_at_its_bound() {
    let backend = long_lived::backend(OUTLIVES_ANY_BOUND);
    let keys = "shutdown_grace = \"30s\"\nhard_stop_after = \"1s\"";
    let mut old = Binary::start(&backend, keys);
    let new = assert_cut_short(&mut old, "hard_stop_after = 1s", Binary::upgrade);
    serves(old.web);
    new.signal(libc::SIGTERM);
}

#[test]
fn sigterm_still_ends_them_after_shutdown_grace_even_during_a_drain() {
    let backend = long_lived::backend(OUTLIVES_ANY_BOUND);
    // A stop without an upgrade.
    let keys = "shutdown_grace = \"1s\"\nhard_stop_after = \"1h\"";
    let mut stopped = Binary::start(&backend, keys);
    assert_cut_short(&mut stopped, "shutdown_grace = 1s", |binary| {
        binary.process.signal(libc::SIGTERM)
    });

    // The old process of an upgrade, draining without a limit, told to stop.
    let mut old = Binary::start(&backend, "shutdown_grace = \"1s\"");
    let new = assert_cut_short(&mut old, "shutdown_grace = 1s, draining", |binary| {
        let new = binary.upgrade();
        binary.process.signal(libc::SIGTERM);
        new
    });
    serves(old.web);
    new.signal(libc::SIGTERM);
}

/// Twelve steps half a second apart: 6 s, for watching an old process drain.
const A_WHILE: Pace = Pace {
    steps: 12,
    every: Duration::from_millis(500),
};

/// Waits (up to 5 s) until `/api/workers` at `admin` lists `expected` as its predecessors;
/// panics with what it listed otherwise.
fn wait_for_predecessors(admin: SocketAddr, expected: &[(u64, Option<u64>)]) {
    let mut seen = None;
    let listed = eventually(Duration::from_secs(5), || {
        seen = predecessors(admin);
        seen.as_deref() == Some(expected)
    });
    assert!(
        listed,
        "/api/workers predecessors: {seen:?}, not {expected:?}"
    );
}

#[test]
fn api_workers_and_ctl_upgrade_follow_the_old_process_until_it_has_gone() {
    let pace = A_WHILE;
    let backend = long_lived::backend(pace);
    let mut old = Binary::start(&backend, "shutdown_grace = \"1s\"");
    assert_eq!(predecessors(old.admin), Some(Vec::new()));
    let download = LongLived::download(old.web, pace);
    assert!(download.wait_started());

    let admin = old.admin.to_string();
    let ctl = thread::spawn(move || {
        Command::new(binary())
            .args(["ctl", "--admin", &admin, "upgrade", "--wait", "60"])
            .env_remove("HERDSMAN_ADMIN_TOKEN")
            .output()
            .expect("run herdsman ctl upgrade")
    });
    let new = successor_of(old.admin, old.pid());
    // The new process counts the old one's download (after a moment in which it knows of the
    // old process but not yet its count).
    let old_pid = old.pid();
    wait_for_predecessors(old.admin, &[(old_pid, Some(1))]);

    assert_eq!(download.finish(), Ok(()));
    assert!(old.process.wait_timeout(Duration::from_secs(5)).is_some());
    wait_for_predecessors(old.admin, &[]);

    let ctl = ctl.join().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&ctl.stdout),
        String::from_utf8_lossy(&ctl.stderr),
    );
    assert_eq!(ctl.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(
        stdout,
        format!(
            "upgraded: pid {} serves; the old process (pid {old_pid}) has gone\n",
            new.0
        )
    );
    assert!(
        stderr.contains(&format!("pid {old_pid}: 1 connection still open")),
        "no progress line: {stderr}"
    );
    new.signal(libc::SIGTERM);
}

#[test]
fn a_second_upgrade_during_a_drain_reports_both_old_processes() {
    let pace = A_WHILE;
    let backend = long_lived::backend(pace);
    let mut first = Binary::start(&backend, "shutdown_grace = \"1s\"");
    let first_pid = first.pid();
    let download = LongLived::download(first.web, pace);
    assert!(download.wait_started());
    let second = first.upgrade();
    second.signal(libc::SIGUSR2);
    let third = successor_of(first.admin, second.0 as u64);

    // The nearest first; the second has no connection left, the first its download.
    let second_pid = second.0 as u64;
    wait_for_predecessors(first.admin, &[(second_pid, Some(0)), (first_pid, Some(1))]);

    assert_eq!(download.finish(), Ok(()));
    assert!(first.process.wait_timeout(Duration::from_secs(5)).is_some());
    wait_for_predecessors(first.admin, &[]);
    serves(first.web);
    third.signal(libc::SIGTERM);
}

#[test]
fn once_the_new_process_answers_the_admin_api_the_old_one_never_does() {
    let backend = Mock::named("a");
    let first = Binary::start(&backend, "");
    let mut serving = first.pid();
    let mut successors: Vec<Successor> = Vec::new();
    // Several upgrades in a row: the old process stops accepting moments after the new one
    // starts answering, and a question asked in between must not reach it.
    for _ in 0..12 {
        match successors.last() {
            None => first.process.signal(libc::SIGUSR2),
            Some(last) => last.signal(libc::SIGUSR2),
        }
        let new = successor_of(first.admin, serving);
        for _ in 0..30 {
            let answered = workers(first.admin).and_then(|json| json["pid"].as_u64());
            assert_eq!(
                answered,
                Some(new.0 as u64),
                "the old process was pid {serving}"
            );
        }
        serving = new.0 as u64;
        successors.push(new);
    }
    successors.last().unwrap().signal(libc::SIGTERM);
}

#[test]
fn an_upgrade_and_a_reload_under_load_lose_no_request() {
    let a = Mock::named("a");
    let mut old = Binary::start(&a, "");
    let web = old.web;

    let load = Load::start(web);
    thread::sleep(Duration::from_millis(300));
    old.process.signal(libc::SIGUSR2);
    // The old process exits once the new one serves and its requests in flight are done.
    let exited = old.process.wait_timeout(Duration::from_secs(15));
    assert!(
        exited.is_some(),
        "the old process did not stop after the upgrade"
    );
    let new = successor_of(old.admin, old.pid());
    // A reload of the new process under the same load.
    new.signal(libc::SIGHUP);
    thread::sleep(Duration::from_millis(300));
    let (ok, failed, refused) = load.finish();

    let still = Instant::now();
    // The new process stops gracefully.
    new.signal(libc::SIGTERM);
    let gone = eventually(Duration::from_secs(10), || Conn::try_connect(web).is_err());
    assert!(gone, "the new process did not stop ({:?})", still.elapsed());
    assert!(ok > 100, "only {ok} requests across the upgrade");
    assert_eq!((failed, refused), (0, 0), "{ok} requests served");
}
