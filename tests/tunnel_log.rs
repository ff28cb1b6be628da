//! A WebSocket's access log line is written when its tunnel ends, not at its 101: with the bytes
//! that went each way, the whole duration, and how it ended — either side closing, the idle
//! timeout (`[timeouts] tunnel_idle`), a stop's grace running out, or the old process's
//! `hard_stop_after` after a binary upgrade.

mod common;

use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use common::*;

/// A server that switches any request with an Upgrade and echoes the tunnel's bytes, until the
/// peer closes or sends `quit` (then it says `bye` and closes first).
fn switching_echo() -> Mock {
    Mock::start(|ex| {
        ex.read_body()?;
        ex.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")?;
        loop {
            let bytes = ex.conn.read_some()?;
            if bytes.is_empty() {
                return Ok(Flow::Close);
            }
            if bytes == b"quit" {
                ex.write(b"bye")?;
                return Ok(Flow::Close);
            }
            ex.write(&bytes)?;
        }
    })
}

const WEBSOCKET: &[u8] = b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n\
                           Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                           Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/// The config of `setup`, its listener logging in JSON to `log`, with `top` lines first.
fn logged(setup: Setup, log: &Path, top: &str) -> String {
    let toml = setup.toml("127.0.0.1:0");
    let listener_pool = "pool = \"app\"\n\n";
    assert_eq!(toml.matches(listener_pool).count(), 1, "{toml}");
    let keys = format!("pool = \"app\"\naccess_log = {log:?}\naccess_log_format = \"json\"\n\n");
    format!("{top}{}", toml.replacen(listener_pool, &keys, 1))
}

/// A fresh directory and the log file in it.
fn log_file(name: &str) -> (PathBuf, PathBuf) {
    let dir = fresh_temp_dir(name);
    let log = dir.join("access.log");
    (dir, log)
}

/// The log's lines, parsed.
fn lines(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The one line of the log, once it is there (within 5 s).
fn the_line(log: &Path) -> serde_json::Value {
    assert!(
        eventually(Duration::from_secs(5), || !lines(log).is_empty()),
        "no line was written"
    );
    let mut lines = lines(log);
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines.remove(0)
}

/// Opens a tunnel through `addr`, and checks that `payload` is echoed through it.
fn open_tunnel(addr: std::net::SocketAddr, payload: &[u8]) -> Conn {
    let mut client = Conn::connect(addr);
    client.set_read_timeout(Duration::from_secs(5));
    client.send(WEBSOCKET);
    assert_eq!(client.response_head().status(), 101);
    if !payload.is_empty() {
        client.send(payload);
        let echoed = client.read_exact_vec(payload.len()).expect("the echo");
        assert_eq!(echoed, payload);
    }
    client
}

#[test]
fn a_tunnel_is_logged_when_it_ends_with_its_bytes_each_way_and_its_duration() {
    let server = switching_echo();
    let (dir, log) = log_file("tunnel-log");
    let proxy = Proxy::start(&logged(Setup::new().server("a", server.addr), &log, ""));
    let payload = vec![b'w'; 10_000];
    let mut client = open_tunnel(proxy.addr, &payload);
    // Lines are flushed within 100 ms: one written at the 101 would be there by now.
    thread::sleep(Duration::from_millis(400));
    assert_eq!(
        lines(&log),
        Vec::<serde_json::Value>::new(),
        "a line before the tunnel ended"
    );
    client.send(b"more");
    assert_eq!(client.read_exact_vec(4).unwrap(), b"more");
    // The client closes first; the server, told, closes too.
    client.shutdown_write();
    client.expect_closed();
    let line = the_line(&log);
    assert_eq!(line["status"], 101);
    assert_eq!(line["target"], "/chat");
    assert_eq!(line["server"], "a");
    assert_eq!(line["bytes"], 10_004, "{line}");
    assert_eq!(line["received"], 10_004, "{line}");
    assert_eq!(line["ended"], "client_closed", "{line}");
    let total = line["total_ms"].as_f64().unwrap();
    assert!(total >= 400.0, "total_ms {total} does not cover the tunnel");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_tunnel_the_server_closes_first_says_so() {
    let server = switching_echo();
    let (dir, log) = log_file("tunnel-server-closed");
    let proxy = Proxy::start(&logged(Setup::new().server("a", server.addr), &log, ""));
    let mut client = open_tunnel(proxy.addr, b"hello");
    client.send(b"quit");
    assert_eq!(client.read_until_closed(), b"bye");
    // As a WebSocket client does once the server has closed.
    drop(client);
    let line = the_line(&log);
    assert_eq!(line["ended"], "server_closed", "{line}");
    assert_eq!(line["bytes"], 8, "{line}");
    assert_eq!(line["received"], 9, "{line}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_tunnel_quiet_for_tunnel_idle_is_closed() {
    let server = switching_echo();
    let (dir, log) = log_file("tunnel-idle");
    let setup = Setup::new()
        .server("a", server.addr)
        .timeout("tunnel_idle", "400ms");
    let proxy = Proxy::start(&logged(setup, &log, ""));
    let mut client = open_tunnel(proxy.addr, b"x");
    // Bytes that pass put the timeout off.
    for _ in 0..3 {
        thread::sleep(Duration::from_millis(250));
        client.send(b"y");
        assert_eq!(client.read_exact_vec(1).unwrap(), b"y");
    }
    assert!(
        client.closes_within(Duration::from_secs(3)),
        "the idle tunnel stayed open"
    );
    let line = the_line(&log);
    assert_eq!(line["ended"], "idle_timeout", "{line}");
    assert!(line["total_ms"].as_f64().unwrap() >= 1_150.0, "{line}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_stop_whose_grace_runs_out_logs_the_tunnels_it_cuts() {
    let server = switching_echo();
    let (dir, log) = log_file("tunnel-shutdown");
    let setup = Setup::new().server("a", server.addr).grace("300ms");
    let proxy = Proxy::start(&logged(setup, &log, ""));
    let mut client = open_tunnel(proxy.addr, b"abc");
    proxy.stop_and_wait();
    assert!(client.closes_within(Duration::from_secs(3)));
    let line = the_line(&log);
    assert_eq!(line["ended"], "shutdown", "{line}");
    assert_eq!(line["bytes"], 3, "{line}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn after_a_hand_over_hard_stop_after_cuts_tunnels_as_the_upgrades() {
    let server = switching_echo();
    let (dir, log) = log_file("tunnel-upgrade");
    let setup = Setup::new().server("a", server.addr);
    let proxy = Proxy::start(&logged(setup, &log, "hard_stop_after = \"300ms\"\n"));
    let mut client = open_tunnel(proxy.addr, b"abc");
    proxy.server().hand_over();
    // The tunnel goes on through the drain until hard_stop_after.
    client.send(b"def");
    assert_eq!(client.read_exact_vec(3).unwrap(), b"def");
    assert!(proxy.wait_stopped(Duration::from_secs(5)));
    assert!(client.closes_within(Duration::from_secs(3)));
    let line = the_line(&log);
    assert_eq!(line["ended"], "upgrade", "{line}");
    assert_eq!(line["received"], 6, "{line}");
    let _ = std::fs::remove_dir_all(dir);
}
