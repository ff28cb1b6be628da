//! The admin listener over real sockets: `/api/workers` reports what the workers counted, the
//! token is demanded when set, an exposed address needs one, and `stop` ends the thread.
//! Every read is bounded by a timeout, so a bug fails a test rather than hanging it.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use herdsman::admin::{self, AdminConfig, AdminHandle};
use herdsman::cache::shared::SharedStore;
use herdsman::rate_limit::RateLimits;
use herdsman::stats::Stats;
use herdsman::upstream::registry::Registry;
use herdsman::Config;
use tokio::sync::watch;

const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A running admin listener and the sender that stops it.
struct Admin {
    handle: AdminHandle,
    stop: watch::Sender<bool>,
}

fn start(stats: Arc<Stats>, token: Option<&str>) -> Admin {
    let (stop, stopped) = watch::channel(false);
    let config = AdminConfig {
        bind: Some("127.0.0.1:0".parse().unwrap()),
        socket: None,
        allowed_hosts: Vec::new(),
        token: token.map(str::to_string),
        intake: "balanced",
        inherited: None,
        inherited_socket: None,
        predecessors: None,
    };
    let handle = admin::start(
        config,
        stats,
        registry(),
        SharedStore::new(),
        RateLimits::new(1),
        stopped,
    )
    .expect("the admin listener starts");
    Admin { handle, stop }
}

/// The pools the admin API serves: one pool of one server (not contacted by these tests).
fn registry() -> Arc<Registry> {
    let config = Config::from_toml(
        r#"
[[listener]]
name = "web"
bind = "127.0.0.1:0"
pool = "app"
[[pool]]
name = "app"
servers = [{ name = "a", addr = "127.0.0.1:9" }]
"#,
        "test",
    )
    .unwrap();
    Arc::new(Registry::new(config, None, None, Vec::new()).unwrap())
}

/// A response as read from the wire.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).unwrap();
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    BufReader::new(stream)
}

/// Reads one response delimited by Content-Length (the admin API always sends one).
fn read_response(connection: &mut BufReader<TcpStream>) -> io::Result<Response> {
    let mut status_line = String::new();
    if connection.read_line(&mut status_line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        connection.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("a header field");
        headers.push((name.to_string(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .expect("Content-Length");
    let mut body = vec![0; length];
    connection.read_exact(&mut body)?;
    Ok(Response {
        status,
        headers,
        body: String::from_utf8(body).unwrap(),
    })
}

fn send(connection: &mut BufReader<TcpStream>, request: &str) -> Response {
    connection.get_mut().write_all(request.as_bytes()).unwrap();
    read_response(connection).unwrap()
}

/// One request on a new connection that asks to be closed.
fn get(addr: SocketAddr, path: &str, authorization: Option<&str>) -> Response {
    let authorization = authorization
        .map(|value| format!("Authorization: {value}\r\n"))
        .unwrap_or_default();
    let mut connection = connect(addr);
    send(
        &mut connection,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n"
        ),
    )
}

/// True when the peer closed the connection (read returns 0) within the timeout.
fn closed_by_peer(connection: &mut BufReader<TcpStream>) -> bool {
    let mut byte = [0];
    matches!(connection.read(&mut byte), Ok(0))
}

/// Joins the admin thread, failing (not hanging) if it does not finish within the timeout.
fn join_within(handle: AdminHandle, limit: Duration) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        handle.join();
        let _ = done.send(());
    });
    finished
        .recv_timeout(limit)
        .expect("the admin thread exits after stop");
}

#[test]
fn workers_report_what_the_counters_hold() {
    let stats = Stats::new(3);
    stats.counters[0].accepted.store(11, Ordering::Relaxed);
    stats.counters[1].accepted.store(22, Ordering::Relaxed);
    stats.counters[1].handoffs_sent.store(4, Ordering::Relaxed);
    stats.counters[2]
        .handoffs_received
        .store(4, Ordering::Relaxed);
    stats.counters[2]
        .spurious_wakeups
        .store(3, Ordering::Relaxed);
    stats.loads[2].active.store(5, Ordering::Relaxed);
    let admin = start(Arc::clone(&stats), None);

    let response = get(
        admin.handle.local_addr().expect("the TCP listener"),
        "/api/workers",
        None,
    );
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("Content-Type"), Some("application/json"));
    let json: serde_json::Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(json["intake"], "balanced");
    let workers = json["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 3);
    let field = |worker: usize, name: &str| workers[worker][name].as_u64().unwrap();
    assert_eq!(
        (0..3).map(|w| field(w, "accepted")).collect::<Vec<_>>(),
        [11, 22, 0]
    );
    assert_eq!(field(1, "handoffs_sent"), 4);
    assert_eq!(field(2, "handoffs_received"), 4);
    assert_eq!(field(2, "spurious_wakeups"), 3);
    assert_eq!(field(2, "active"), 5);
    assert_eq!(workers[2]["handoff_wait_us"]["count"], 4);
    if cfg!(target_os = "linux") {
        let queue = &json["listen_queue"];
        assert!(queue["overflows"].is_u64(), "{queue}");
        assert!(queue["drops"].is_u64(), "{queue}");
    }
    // Counters read when asked, not when the listener started.
    stats.counters[0].accepted.store(12, Ordering::Relaxed);
    let json: serde_json::Value = serde_json::from_str(
        &get(
            admin.handle.local_addr().expect("the TCP listener"),
            "/api/workers",
            None,
        )
        .body,
    )
    .unwrap();
    assert_eq!(json["workers"][0]["accepted"], 12);
}

#[test]
fn a_token_is_demanded_when_set() {
    let admin = start(Stats::new(3), Some("s3cret-token"));
    let addr = admin.handle.local_addr().expect("the TCP listener");
    for authorization in [None, Some("Bearer wrong"), Some("Bearer s3cret-toke")] {
        let response = get(addr, "/api/workers", authorization);
        assert_eq!(response.status, 401, "{authorization:?}: {response:?}");
        assert_eq!(response.header("WWW-Authenticate"), Some("Bearer"));
        assert!(!response.body.contains("workers"), "{response:?}");
    }
    let response = get(addr, "/api/workers", Some("Bearer s3cret-token"));
    assert_eq!(response.status, 200, "{response:?}");
    let json: serde_json::Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(json["workers"].as_array().unwrap().len(), 3);
}

#[test]
fn an_exposed_address_needs_a_token() {
    let (_stop, stopped) = watch::channel(false);
    let config = AdminConfig {
        bind: Some("0.0.0.0:0".parse().unwrap()),
        socket: None,
        allowed_hosts: Vec::new(),
        token: None,
        intake: "balanced",
        inherited: None,
        inherited_socket: None,
        predecessors: None,
    };
    let error = admin::start(
        config,
        Stats::new(3),
        registry(),
        SharedStore::new(),
        RateLimits::new(3),
        stopped,
    )
    .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("token"), "{message}");
    assert!(message.contains("[admin] bind"), "{message}");
}

#[test]
fn healthz_unknown_paths_and_other_methods() {
    let admin = start(Stats::new(3), None);
    let addr = admin.handle.local_addr().expect("the TCP listener");
    let health = get(addr, "/healthz", None);
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    assert_eq!(get(addr, "/api/nothing", None).status, 404);

    let mut connection = connect(addr);
    let response = send(
        &mut connection,
        "DELETE /api/workers HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
    );
    assert_eq!(response.status, 405);
    assert_eq!(response.header("Allow"), Some("GET, HEAD"));
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let admin = start(Stats::new(3), None);
    let mut connection = connect(admin.handle.local_addr().expect("the TCP listener"));
    let first = send(
        &mut connection,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    assert_eq!(first.status, 200);
    assert_eq!(first.header("Connection"), None);
    let second = send(
        &mut connection,
        "GET /api/workers HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    assert_eq!(second.status, 200);
    // Two pipelined requests, the last asking to close.
    connection
        .get_mut()
        .write_all(
            b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n\
              GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    assert_eq!(read_response(&mut connection).unwrap().status, 200);
    let last = read_response(&mut connection).unwrap();
    assert_eq!(last.header("Connection"), Some("close"));
    assert!(closed_by_peer(&mut connection));
}

#[test]
fn a_malformed_request_gets_400_and_the_connection_closes() {
    let admin = start(Stats::new(3), None);
    let mut connection = connect(admin.handle.local_addr().expect("the TCP listener"));
    // HTTP/1.1 without Host.
    let response = send(&mut connection, "GET /healthz HTTP/1.1\r\n\r\n");
    assert_eq!(response.status, 400);
    assert!(closed_by_peer(&mut connection));
}

#[test]
fn stop_ends_the_thread() {
    let admin = start(Stats::new(3), None);
    let addr = admin.handle.local_addr().expect("the TCP listener");
    // An idle keep-alive connection must not hold the thread up.
    let mut idle = connect(addr);
    assert_eq!(
        send(
            &mut idle,
            "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )
        .status,
        200
    );
    admin.stop.send(true).unwrap();
    join_within(admin.handle, IO_TIMEOUT);
    assert!(closed_by_peer(&mut idle));
    // Nothing listens any more.
    assert!(TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_err());
}

#[test]
fn dropping_the_stop_sender_also_ends_the_thread() {
    let Admin { handle, stop } = start(Stats::new(3), None);
    drop(stop);
    join_within(handle, IO_TIMEOUT);
}
