//! Zero-downtime binary upgrade of the real binary under load: SIGUSR2 starts the binary again
//! with the listening sockets, the old process stops once the new one serves, and a load
//! generator running across it sees no failed request and no refused connection. The same for a
//! SIGHUP reload.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

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
    fn start(web: std::net::SocketAddr) -> Load {
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

/// The pid serving the admin API at `admin`, asked until it answers (for up to 10 s): the admin
/// listener opens after the proxy's, so on a busy machine it may not answer at once.
fn serving_pid(admin: std::net::SocketAddr) -> Option<u64> {
    let mut pid = None;
    eventually(Duration::from_secs(10), || {
        pid = ask_pid(admin);
        pid.is_some()
    });
    pid
}

/// One try of [`serving_pid`].
fn ask_pid(admin: std::net::SocketAddr) -> Option<u64> {
    let mut conn = Conn::try_connect(admin).ok()?;
    conn.set_read_timeout(Duration::from_secs(2));
    conn.try_send(&get_request("/api/workers", "Connection: close\r\n"))
        .ok()?;
    let response = conn.read_response(false).ok()?;
    let json: serde_json::Value = serde_json::from_str(&response.body_text()).ok()?;
    json["pid"].as_u64()
}

#[test]
fn an_upgrade_and_a_reload_under_load_lose_no_request() {
    let a = Mock::named("a");
    let (web, admin): (std::net::SocketAddr, std::net::SocketAddr) = (
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
    );
    let config = format!(
        "workers = 2\n[[listener]]\nname = \"web\"\nbind = \"{web}\"\npool = \"app\"\n\
         [admin]\nbind = \"{admin}\"\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
        a.addr
    );
    let path = write_temp("upgrade.toml", &config);
    let mut old = run_binary_with(&path);
    assert!(wait_listening(web, Duration::from_secs(10)));
    let old_pid = u64::from(old.0.id());
    assert_eq!(serving_pid(admin), Some(old_pid));

    let load = Load::start(web);
    thread::sleep(Duration::from_millis(300));
    old.signal(libc::SIGUSR2);
    // The old process exits once the new one serves and its requests in flight are done.
    let exited = old.wait_timeout(Duration::from_secs(15));
    assert!(
        exited.is_some(),
        "the old process did not stop after the upgrade"
    );
    let new_pid = serving_pid(admin).expect("the admin API after the upgrade");
    assert_ne!(new_pid, old_pid);
    // A reload of the new process under the same load.
    // SAFETY: a signal to the process this test started (through its parent).
    unsafe { libc::kill(new_pid as libc::pid_t, libc::SIGHUP) };
    thread::sleep(Duration::from_millis(300));
    let (ok, failed, refused) = load.finish();

    let still = Instant::now();
    // SAFETY: as above; the new process stops gracefully.
    unsafe { libc::kill(new_pid as libc::pid_t, libc::SIGTERM) };
    let gone = eventually(Duration::from_secs(10), || Conn::try_connect(web).is_err());
    assert!(gone, "the new process did not stop ({:?})", still.elapsed());
    assert!(ok > 100, "only {ok} requests across the upgrade");
    assert_eq!((failed, refused), (0, 0), "{ok} requests served");
}
