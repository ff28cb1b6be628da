//! Never run out of descriptors: the probe of issue 49 scaled down. herdsman runs with its
//! open-file limit lowered to 600 (its budget: 231 client connections, each with room for a
//! server connection) against more idle connections than that. A keep-alive client it already
//! serves keeps getting 200 though each request needs a new server connection, a new client is
//! served as quiet connections are closed for it, and the admin API answers.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;

/// The open-file limit herdsman runs with.
const LIMIT: u64 = 600;
/// Idle connections the flood holds: several times what the budget allows.
const FLOOD: usize = 800;

/// The config the flood tests run: one worker, `addr`, the admin API on `admin`, `server`, and
/// `limits` lines in `[limits]`.
fn limited_config(addr: SocketAddr, admin: SocketAddr, server: SocketAddr, limits: &str) -> String {
    format!(
        "workers = 1\n[[listener]]\nname = \"web\"\nbind = \"{addr}\"\npool = \"app\"\n\
         [admin]\nbind = \"{admin}\"\n[limits]\n{limits}\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{server}\" }}]\n"
    )
}

/// A server whose every answer closes its connection: each request needs a new descriptor.
fn closing_server() -> Mock {
    Mock::start(|ex| {
        ex.read_body()?;
        ex.respond(200, &[("Connection", "close")], b"ok")?;
        Ok(Flow::Close)
    })
}

/// Starts the binary on `config` with its open-file limit, soft and hard, at `LIMIT`.
fn run_limited(config: &std::path::Path, log: &std::path::Path) -> ChildGuard {
    let stderr = std::fs::File::create(log).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_herdsman"));
    command
        .args(["run", "-c", config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr));
    // SAFETY: setrlimit is async-signal-safe, and nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    ChildGuard(command.spawn().expect("herdsman runs"))
}

/// The binary running with its limit at `LIMIT`, in front of a `closing_server`.
struct Limited {
    addr: SocketAddr,
    admin: SocketAddr,
    /// herdsman's own log.
    log: std::path::PathBuf,
    _herdsman: ChildGuard,
    _server: Mock,
}

/// Starts the binary at `LIMIT` with `limits` in its `[limits]`, its files named after `name`,
/// and waits until it listens.
fn start_limited(name: &str, limits: &str) -> Limited {
    let server = closing_server();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = limited_config(addr, admin, server.addr, limits);
    let path = write_temp(&format!("{name}.toml"), &text);
    let log = path.with_extension("log");
    let herdsman = run_limited(&path, &log);
    assert!(wait_listening(addr, Duration::from_secs(10)));
    Limited {
        addr,
        admin,
        log,
        _herdsman: herdsman,
        _server: server,
    }
}

#[test]
fn a_flood_of_idle_connections_costs_no_served_client_a_request_nor_the_operator_the_admin_api() {
    let Limited {
        addr,
        admin,
        log,
        _herdsman,
        _server,
    } = start_limited("descriptors", "");

    // A keep-alive client, busy throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let busy = {
        let (stop, statuses) = (Arc::clone(&stop), Arc::clone(&statuses));
        thread::spawn(move || {
            let mut client = Conn::connect(addr);
            while !stop.load(Ordering::SeqCst) {
                let status = client
                    .try_send(&get_request("/", ""))
                    .and_then(|()| client.read_response(false))
                    .map_or(0, |response| response.status());
                statuses.lock().unwrap().push(status);
                if status != 200 {
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
        })
    };
    thread::sleep(Duration::from_millis(200));

    // The flood: idle connections, more than the budget allows.
    let flood: Vec<TcpStream> = (0..FLOOD)
        .map(|_| TcpStream::connect(addr).expect("the kernel takes the connection"))
        .collect();
    thread::sleep(Duration::from_millis(1_000));

    // A new client is served: a quiet connection is closed to make room for it.
    let mut fresh = Conn::connect(addr);
    fresh.set_read_timeout(Duration::from_secs(5));
    let response = fresh.roundtrip(&get_request("/", "Connection: close\r\n"));
    assert_eq!(response.status(), 200);

    // The operator still gets in.
    let mut operator = Conn::connect(admin);
    operator.set_read_timeout(Duration::from_secs(5));
    let metrics = operator.roundtrip(&admin_get_request("/metrics"));
    assert_eq!(metrics.status(), 200);
    let page = metrics.body_text();
    let figure = |name: &str| -> u64 {
        page.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
            .parse()
            .unwrap()
    };
    assert_eq!(figure("herdsman_open_files_limit"), LIMIT);
    assert_eq!(figure("herdsman_client_connections_cap"), 231);
    assert!(figure("herdsman_client_connections") <= 231);
    assert!(figure("herdsman_open_files") < LIMIT);
    assert!(figure("herdsman_worker_client_connections_shed_total{worker=\"0\"}") > 0);

    stop.store(true, Ordering::SeqCst);
    busy.join().unwrap();
    let statuses = statuses.lock().unwrap();
    assert!(statuses.len() > 20, "{} requests", statuses.len());
    assert!(
        statuses.iter().all(|status| *status == 200),
        "the busy client got {:?}",
        statuses.iter().filter(|s| **s != 200).collect::<Vec<_>>()
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("client connections"),
        "the budget was not said at start:\n{text}"
    );
    assert!(!text.contains("accept failed"), "{text}");
    assert_eq!(
        text.matches("90% or more of the descriptor budget").count(),
        1,
        "one warning near the cap, rate-limited:\n{text}"
    );
    drop(flood);
}

#[test]
fn max_client_connections_sets_the_cap_and_a_reload_changes_it() {
    let server = Mock::echo();
    let setup = |cap: u32| {
        Setup::new()
            .server("a", server.addr)
            .limit("max_client_connections", cap)
    };
    let proxy = Proxy::start_from_file(&setup(50).toml("127.0.0.1:0"));
    let cap = || proxy.server().stats().client_cap.cap();
    assert_eq!(cap(), 50);
    proxy
        .reload_with(&setup(70).toml("127.0.0.1:0"))
        .expect("the reload applies");
    assert!(
        eventually(Duration::from_secs(5), || cap() == 70),
        "{}",
        cap()
    );
    // "auto": the budget of the process's limit.
    let auto = Setup::new().server("a", server.addr).start();
    assert!(auto.server().stats().client_cap.cap() > 1_000);
}

/// A connection to `addr` from the loopback address `source`.
fn connect_from(source: &str, addr: SocketAddr) -> Conn {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{source}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    socket.connect(&addr.into()).unwrap();
    let conn = Conn::new(socket.into());
    conn.set_read_timeout(Duration::from_secs(5));
    conn
}

#[test]
fn one_address_gets_max_connections_per_client_and_others_are_served() {
    let server = Mock::echo();
    let proxy = Setup::new()
        .server("a", server.addr)
        .limit("max_connections_per_client", 3)
        .start();
    let mut held: Vec<Conn> = (0..3)
        .map(|_| connect_from("127.0.0.1", proxy.addr))
        .collect();
    for conn in &mut held {
        assert_eq!(conn.roundtrip(&get_request("/", "")).status(), 200);
    }
    // A fourth from the same address is closed as it is accepted.
    let mut fourth = connect_from("127.0.0.1", proxy.addr);
    let _ = fourth.try_send(&get_request("/", ""));
    assert!(fourth.closes_within(Duration::from_secs(5)));
    // Another address is served.
    let mut other = connect_from("127.0.0.2", proxy.addr);
    assert_eq!(other.roundtrip(&get_request("/", "")).status(), 200);
    // One closed makes room for the first address again.
    drop(held.pop());
    assert!(eventually(Duration::from_secs(5), || {
        let mut again = connect_from("127.0.0.1", proxy.addr);
        again
            .try_send(&get_request("/", ""))
            .and_then(|()| again.read_response(false))
            .is_ok_and(|response| response.status() == 200)
    }));
    let refused = proxy
        .server()
        .stats()
        .per_client
        .refused_total
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(refused >= 1, "{refused}");
}

#[test]
fn out_of_descriptors_a_served_client_waits_and_gets_503_never_502() {
    // A cap set far above the budget (herdsman check warns of it): the flood takes every
    // descriptor, and the busy client's next server connection finds none. It waits as for a
    // slot, then gets 503; the server is not blamed, and nothing went to it half-sent.
    let Limited {
        addr,
        log,
        _herdsman,
        _server,
        ..
    } = start_limited("descriptors-over", "max_client_connections = 4000000");
    let mut busy = Conn::connect(addr);
    busy.set_read_timeout(Duration::from_secs(10));
    assert_eq!(busy.roundtrip(&get_request("/", "")).status(), 200);
    let _flood: Vec<TcpStream> = (0..FLOOD)
        .map(|_| TcpStream::connect(addr).expect("the kernel takes the connection"))
        .collect();
    thread::sleep(Duration::from_millis(1_000));
    // Answered 503 (and closed, as every error is), not 502.
    let response = busy.roundtrip(&get_request("/", ""));
    assert_error_response(&response, 503);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("WARNING: max_client_connections = 4000000 exceeds it"),
        "{text}"
    );
}
