//! Request buffering (`[buffering]`): a client that sends its body slowly holds herdsman's memory,
//! not a worker of a server that serves one connection per worker at a time (gunicorn's sync
//! workers, Unicorn, PHP-FPM); one slower than `request_min_rate` gets 408; one that waits for
//! `100 Continue` gets it from herdsman.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// Worker threads of the one-at-a-time server.
const SERVER_WORKERS: usize = 4;

/// A server like gunicorn's sync workers: `SERVER_WORKERS` threads, each serving one connection
/// at a time from accept to close: it reads the head and the whole body (however slowly it
/// comes), answers `200 ok` with `Connection: close`, and takes the next.
fn start_one_at_a_time_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    for _ in 0..SERVER_WORKERS {
        let listener = listener.try_clone().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = serve_one(stream);
            }
        });
    }
    addr
}

fn serve_one(stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let mut stream = stream;
    stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
}

fn config(server: SocketAddr, buffering: &str) -> String {
    format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
         [buffering]\n{buffering}\n\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{server}\" }}]\n"
    )
}

/// Starts `count` uploads of a 1,000-byte body that send one byte every 200 ms until `stop`.
fn start_slow_uploads(herdsman: SocketAddr, count: usize, stop: &Arc<AtomicBool>) {
    for _ in 0..count {
        let stop = Arc::clone(stop);
        thread::spawn(move || {
            let mut client = TcpStream::connect(herdsman).unwrap();
            let head = "POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\n";
            client.write_all(head.as_bytes()).unwrap();
            for _ in 0..1000 {
                if stop.load(Ordering::SeqCst) || client.write_all(b"x").is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(200));
            }
        });
    }
}

/// How long a GET through herdsman took to be answered 200, or `None` within `patience`.
fn time_a_get(herdsman: SocketAddr, patience: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut client = Conn::connect(herdsman);
    client.set_read_timeout(patience);
    client.send(&get_request("/", ""));
    match client.read_head() {
        Ok(Some(head)) if head.status() == 200 => Some(started.elapsed()),
        _ => None,
    }
}

/// How long a GET took to be answered behind twice as many slow uploads as the server has
/// workers (`None`: not within `patience`), through a herdsman with `buffering`.
fn get_behind_slow_uploads(buffering: &str, patience: Duration) -> Option<Duration> {
    let server = start_one_at_a_time_server();
    let herdsman = Proxy::start(&config(server, buffering));
    let stop = Arc::new(AtomicBool::new(false));
    start_slow_uploads(herdsman.addr, 2 * SERVER_WORKERS, &stop);
    // Every upload has begun, and would hold a server worker were it streamed.
    thread::sleep(Duration::from_millis(500));
    let took = time_a_get(herdsman.addr, patience);
    stop.store(true, Ordering::SeqCst);
    took
}

#[test]
fn slow_uploads_hold_no_server_worker() {
    let took = get_behind_slow_uploads("", Duration::from_secs(5))
        .expect("a GET behind slow uploads was not answered within 5 s");
    eprintln!(
        "a GET behind {} slow uploads: answered in {took:?}",
        2 * SERVER_WORKERS
    );
    assert!(took < Duration::from_millis(500), "answered after {took:?}");
}

#[test]
fn without_request_buffering_slow_uploads_hold_every_server_worker() {
    // The same attack with buffering off: what herdsman did before `[buffering]`, and what
    // `request_buffer_memory = 0` asks for (streaming uploads).
    let took = get_behind_slow_uploads("request_buffer_memory = 0", Duration::from_secs(2));
    assert_eq!(
        took, None,
        "every server worker should be held by an upload"
    );
}

#[test]
fn a_body_slower_than_the_minimum_rate_gets_408() {
    let server = start_one_at_a_time_server();
    let buffering = "request_min_rate = 100\nrequest_min_rate_grace = \"1s\"";
    let herdsman = Proxy::start(&config(server, buffering));
    let mut client = Conn::connect(herdsman.addr);
    client.set_read_timeout(Duration::from_secs(10));
    client.send(b"POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\n");
    // 10 bytes a second: after the grace, 100 bytes a second is owed.
    let started = Instant::now();
    let writer = {
        let mut stream = client.stream.try_clone().unwrap();
        thread::spawn(move || {
            for _ in 0..100 {
                if stream.write_all(b"x").is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let response = client.response();
    let took = started.elapsed();
    assert_eq!(response.status(), 408);
    let report = herdsman.server().stats().report();
    assert_eq!(report[0].slow_request_bodies, 1, "the 408 is counted");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(4),
        "408 after {took:?}"
    );
    drop(client);
    let _ = writer.join();
}

#[test]
fn a_client_waiting_for_100_continue_gets_it_from_herdsman() {
    let server = start_one_at_a_time_server();
    let herdsman = Proxy::start(&config(server, ""));
    let mut client = Conn::connect(herdsman.addr);
    client.set_read_timeout(Duration::from_secs(5));
    client.send(
        b"POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    );
    let started = Instant::now();
    let interim = client.response_head();
    assert_eq!(interim.status(), 100);
    assert!(started.elapsed() < Duration::from_millis(500));
    client.send(b"hello");
    let response = client.response();
    assert_eq!(response.status(), 200);
    assert_eq!(response.body, b"ok");
    let report = herdsman.server().stats().report();
    assert_eq!(
        report[0].buffered_requests, 1,
        "the body was read whole, and counted"
    );
}

#[test]
fn the_access_log_says_which_request_bodies_were_buffered() {
    let server = start_one_at_a_time_server();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("herdsman-buffering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let text = config(server, "").replace(
        "pool = \"app\"\n\n[buffering]",
        &format!(
            "pool = \"app\"\naccess_log = {:?}\naccess_log_format = \"json\"\n\n[buffering]",
            log.display().to_string()
        ),
    );
    let herdsman = Proxy::start(&text);
    // A body that follows its head later: read by herdsman before the server saw the request.
    let mut client = Conn::connect(herdsman.addr);
    client.send(b"POST /later HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\n");
    thread::sleep(Duration::from_millis(50));
    client.send(b"hello");
    assert_eq!(client.response().status(), 200);
    // No body: nothing to buffer.
    assert!(time_a_get(herdsman.addr, Duration::from_secs(5)).is_some());
    herdsman.stop_and_wait();
    let lines = std::fs::read_to_string(&log).unwrap();
    let buffered: Vec<(String, bool)> = lines
        .lines()
        .map(|line| {
            let entry: serde_json::Value = serde_json::from_str(line).unwrap();
            let target = entry["target"].as_str().unwrap().to_string();
            (target, entry["buffered"].as_bool().unwrap())
        })
        .collect();
    assert_eq!(
        buffered,
        [("/later".to_string(), true), ("/".to_string(), false)]
    );
    let _ = std::fs::remove_dir_all(dir);
}
