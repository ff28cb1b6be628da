//! Servers on UNIX sockets (`addr = "unix:/run/app.sock"`, issue 40), over real sockets: herdsman
//! connects to a server listening on a socket path as it would to a port — its connections kept
//! and reused, its health checked, its restart (the socket removed and made again) costing no
//! request while another server can answer — and the admin API adds one at run time.

mod admin_support;
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use admin_support::{count, Running};
use common::*;

/// An HTTP/1.1 server on a UNIX socket, as gunicorn or uvicorn would be behind a web front: a
/// thread a connection, keep-alive, bodies by Content-Length. It answers its name (a POST: the
/// FNV-1a of the body it got), and `/healthz` with 200 or 503 as `healthy` says. Dropping it is the server stopping: its connections end and its socket
/// file goes, as a process that exits takes them.
struct UnixServer {
    path: PathBuf,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    healthy: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<UnixStream>>>,
    stopped: Arc<AtomicBool>,
}

impl UnixServer {
    fn start(path: &Path, name: &'static str) -> UnixServer {
        let _ = std::fs::remove_file(path);
        UnixServer::serving(UnixListener::bind(path).unwrap(), path, name)
    }

    /// Serves on `listener`, bound at `path`.
    fn serving(listener: UnixListener, path: &Path, name: &'static str) -> UnixServer {
        let server = UnixServer {
            path: path.to_path_buf(),
            connections: Arc::default(),
            requests: Arc::default(),
            healthy: Arc::new(AtomicBool::new(true)),
            open: Arc::default(),
            stopped: Arc::default(),
        };
        let (connections, requests, healthy, open, stopped) = (
            Arc::clone(&server.connections),
            Arc::clone(&server.requests),
            Arc::clone(&server.healthy),
            Arc::clone(&server.open),
            Arc::clone(&server.stopped),
        );
        thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                connections.fetch_add(1, Ordering::SeqCst);
                open.lock().unwrap().push(stream.try_clone().unwrap());
                let (requests, healthy) = (Arc::clone(&requests), Arc::clone(&healthy));
                thread::spawn(move || serve(stream, name, &requests, &healthy));
            }
        });
        server
    }

    /// `unix:` and its path, as the config writes it.
    fn addr(&self) -> String {
        format!("unix:{}", self.path.display())
    }

    /// Requests for anything but `/healthz`.
    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = std::fs::remove_file(&self.path);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        // Wakes the accept loop, which then drops the listener (its socket file is gone).
        let _ = UnixStream::connect(&self.path);
    }
}

fn serve(stream: UnixStream, name: &str, requests: &AtomicUsize, healthy: &AtomicBool) {
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let (mut close, mut length) = (false, 0);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            let line = line.to_ascii_lowercase();
            close |= line.starts_with("connection: close");
            if let Some(value) = line.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let target = first.split(' ').nth(1).unwrap_or("");
        let answer = if first.starts_with("POST ") {
            let hash = fnv(&body).to_string();
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{hash}",
                hash.len()
            )
        } else if target == "/healthz" {
            let status = match healthy.load(Ordering::SeqCst) {
                true => "200 OK",
                false => "503 Service Unavailable",
            };
            format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n")
        } else {
            requests.fetch_add(1, Ordering::SeqCst);
            format!(
                "HTTP/1.1 200 OK\r\nX-Server: {name}\r\nContent-Length: {}\r\n\r\n{name}",
                name.len()
            )
        };
        if writer.write_all(answer.as_bytes()).is_err() || close {
            return;
        }
    }
}

/// A socket path of this test's own.
fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("herdsman-{}-{tag}.sock", std::process::id()))
}

/// One worker with the admin API, pool "app" with `servers` (name, address) and `pool_tables`.
fn config(servers: &[(&str, String)], pool_tables: &str) -> String {
    let mut text = Setup::new().workers(1).admin().toml("127.0.0.1:0");
    let listed: String = servers
        .iter()
        .map(|(name, addr)| format!("  {{ name = {name:?}, addr = {addr:?} }},\n"))
        .collect();
    text = text.replace("servers = [\n]\n", &format!("servers = [\n{listed}]\n"));
    format!("{text}{pool_tables}")
}

/// Pool "app"'s server `name` as `GET /api/pools` shows it.
fn server_json(herdsman: &Running, name: &str) -> serde_json::Value {
    herdsman.servers_json()[name].clone()
}

#[test]
fn a_server_on_a_unix_socket_serves_over_a_connection_kept_and_reused() {
    let app = UnixServer::start(&socket_path("reused"), "unix-app");
    let herdsman = Running::start_toml(config(&[("u", app.addr())], ""));
    let answers = herdsman.answers(20);
    assert_eq!(count(&answers, "unix-app"), 20, "{answers:?}");
    // Twenty requests, each on a client connection of its own, one connection to the server.
    assert_eq!(app.connections.load(Ordering::SeqCst), 1);
    assert_eq!(server_json(&herdsman, "u")["addr"], app.addr());
    assert_eq!(server_json(&herdsman, "u")["requests"], 20);
}

#[test]
fn the_admin_api_adds_a_unix_server_and_refuses_a_relative_path() {
    let first = UnixServer::start(&socket_path("first"), "first");
    let second = UnixServer::start(&socket_path("second"), "second");
    let herdsman = Running::start_toml(config(&[("a", first.addr())], ""));
    let body = format!(r#"{{"name":"b","addr":{:?}}}"#, second.addr());
    let (status, json) = herdsman.api("POST", "/api/pools/app/servers", Some(&body));
    assert_eq!(status, 201, "{json}");
    assert_eq!(json["addr"], second.addr());
    let answers = herdsman.answers(10);
    assert_eq!(count(&answers, "second"), 5, "{answers:?}");
    let relative = r#"{"name":"c","addr":"unix:run/app.sock"}"#;
    let (status, json) = herdsman.api("POST", "/api/pools/app/servers", Some(relative));
    assert_eq!(status, 400, "{json}");
    assert!(json.to_string().contains("must be absolute"), "{json}");
}

#[test]
fn a_unix_server_is_health_checked_and_its_restart_fails_no_request() {
    let path = socket_path("restarts");
    let app = UnixServer::start(&path, "unix-app");
    let tcp = Mock::named("tcp-app");
    let health = "[pool.health]\npath = \"/healthz\"\ninterval = \"50ms\"\ntimeout = \"500ms\"\n\
                  rise = 1\nfall = 2\n";
    let servers = [("u", app.addr()), ("t", tcp.addr.to_string())];
    let herdsman = Running::start_toml(config(&servers, health));
    assert_eq!(count(&herdsman.answers(4), "unix-app"), 2);

    // Its checks, made on its socket, take it out and bring it back.
    app.healthy.store(false, Ordering::SeqCst);
    let down = || server_json(&herdsman, "u")["health"] == "down";
    assert!(eventually(Duration::from_secs(5), down));
    assert_eq!(count(&herdsman.answers(6), "tcp-app"), 6);
    app.healthy.store(true, Ordering::SeqCst);
    let up = || server_json(&herdsman, "u")["health"] == "up";
    assert!(eventually(Duration::from_secs(5), up));

    // The server stops (its connections close, its socket file goes) and starts again, while a
    // client sends request after request: every one is answered, by one server or the other.
    let sending = Arc::new(AtomicBool::new(true));
    let client = {
        let (web, sending) = (herdsman.web, Arc::clone(&sending));
        thread::spawn(move || {
            let mut statuses = Vec::new();
            while sending.load(Ordering::SeqCst) {
                let mut conn = Conn::connect(web);
                let response = conn.roundtrip(&get_request("/", "Connection: close\r\n"));
                statuses.push(response.status());
            }
            statuses
        })
    };
    thread::sleep(Duration::from_millis(200));
    drop(app);
    thread::sleep(Duration::from_millis(300));
    let again = UnixServer::start(&path, "unix-app");
    assert!(
        eventually(Duration::from_secs(3), || again.requests() > 0),
        "the restarted server got no request"
    );
    sending.store(false, Ordering::SeqCst);
    let statuses = client.join().unwrap();
    assert!(statuses.len() > 20, "{} requests sent", statuses.len());
    assert!(
        statuses.iter().all(|status| *status == 200),
        "{:?}",
        statuses.iter().filter(|s| **s != 200).collect::<Vec<_>>()
    );
}

#[test]
fn a_large_upload_goes_to_a_unix_server_by_splice_byte_for_byte() {
    let app = UnixServer::start(&socket_path("splice"), "unix-app");
    let toml = format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"u\", addr = {:?} }}]\n",
        app.addr()
    );
    let herdsman = Proxy::start(&toml);
    const SIZE: usize = 16 << 20;
    let body = Pattern::bytes(40, SIZE);
    for response in post_twice(herdsman.addr, &body) {
        assert_eq!(response.status(), 200);
        let hash = fnv(&body).to_string();
        assert_eq!(response.body_text(), hash, "the body arrived as sent");
    }
    let report = herdsman.server().stats().report().remove(0);
    assert_eq!(
        (report.spliced_request_bodies, report.backend_connects),
        (2, 1),
        "both by splice, over one connection to the server"
    );
}

#[test]
fn a_full_listen_queue_is_waited_out_within_the_connect_timeout() {
    use socket2::{Domain, SockAddr, Socket, Type};
    let path = socket_path("queue");
    let _ = std::fs::remove_file(&path);
    // A server that is slow to accept: a queue of one, filled by connections of the test's own.
    let listener = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
    listener.bind(&SockAddr::unix(&path).unwrap()).unwrap();
    listener.listen(1).unwrap();
    let mut waiting = Vec::new();
    loop {
        let filler = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
        filler.set_nonblocking(true).unwrap();
        match filler.connect(&SockAddr::unix(&path).unwrap()) {
            Ok(()) => waiting.push(filler),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(error) => panic!("{error}"),
        }
        assert!(waiting.len() < 100, "the queue never filled");
    }
    let toml = format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"u\", addr = \"unix:{}\" }}]\n",
        path.display()
    );
    let herdsman = Proxy::start(&toml);
    let asked = std::time::Instant::now();
    let client = thread::spawn(move || herdsman.get("/"));
    // The request waits while the queue stays full (a UNIX socket says EAGAIN at once there);
    // then the server accepts, and it is answered.
    thread::sleep(Duration::from_millis(300));
    drop(waiting);
    let listener = UnixListener::from(std::os::fd::OwnedFd::from(listener));
    let _app = UnixServer::serving(listener, &path, "unix-app");
    let response = client.join().unwrap();
    assert_eq!(response.status(), 200, "{}", response.head.first_line);
    assert_eq!(response.body_text(), "unix-app");
    assert!(asked.elapsed() >= Duration::from_millis(300));
}
