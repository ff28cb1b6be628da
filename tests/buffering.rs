//! Request buffering (`[buffering]`): a client that sends its body slowly holds herdsman's memory,
//! not a worker of a server that serves one connection per worker at a time (gunicorn's sync
//! workers, Unicorn, PHP-FPM); one slower than `request_min_rate` gets 408; one that waits for
//! `100 Continue` gets it from herdsman.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

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

/// The median time of five GETs answered behind twice as many slow uploads as the server has
/// workers (`None`: not within `patience`), through a herdsman with `buffering`.
fn get_behind_slow_uploads(buffering: &str, patience: Duration) -> Option<Duration> {
    let server = start_one_at_a_time_server();
    let herdsman = Proxy::start(&config(server, buffering));
    let stop = Arc::new(AtomicBool::new(false));
    start_slow_uploads(herdsman.addr, 2 * SERVER_WORKERS, &stop);
    // Every upload has begun, and would hold a server worker were it streamed.
    thread::sleep(Duration::from_millis(500));
    let took = median_get_time(herdsman.addr, patience);
    stop.store(true, Ordering::SeqCst);
    took
}

#[test]
fn slow_uploads_hold_no_server_worker() {
    let took = get_behind_slow_uploads("", Duration::from_secs(5))
        .expect("a GET behind slow uploads was not answered within 5 s");
    eprintln!(
        "GETs behind {} slow uploads: median {took:?}",
        2 * SERVER_WORKERS
    );
    assert!(took < Duration::from_millis(100), "answered after {took:?}");
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
    assert_eq!(response.body, b"5", "the server had the whole body");
    let report = herdsman.server().stats().report();
    assert_eq!(
        report[0].buffered_requests, 1,
        "the body was read whole, and counted"
    );
}

#[test]
fn the_server_is_not_asked_for_a_continue_herdsman_already_gave() {
    // As a real server does: a 100 of its own for a request that expects one.
    let server = Mock::continuing_echo();
    let herdsman = Proxy::start(&config(server.addr, ""));
    let mut client = Conn::connect(herdsman.addr);
    client.set_read_timeout(Duration::from_secs(5));
    client.send(
        b"POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    );
    assert_eq!(client.response_head().status(), 100);
    client.send(b"hello");
    let response = client.response();
    assert_eq!(
        (response.status(), &response.body[..]),
        (200, &b"hello"[..])
    );
    let heads = server.heads();
    assert_eq!(heads.len(), 1);
    assert!(
        !heads[0].has("expect"),
        "herdsman answered the expectation; the server was asked again"
    );
    assert_eq!(heads[0].header("content-length"), Some("5"));
}

#[test]
fn the_access_log_says_which_request_bodies_were_buffered() {
    let server = start_one_at_a_time_server();
    let dir = fresh_temp_dir("buffering");
    let log = dir.join("access.log");
    let text = config(server, "").replace(
        "pool = \"app\"\n\n[buffering]",
        &format!(
            "pool = \"app\"\naccess_log = {:?}\naccess_log_format = \"json\"\n\n[buffering]",
            log.display().to_string()
        ),
    );
    let herdsman = Proxy::start(&text);
    // A body that follows its head only once asked for: read by herdsman before the server saw
    // the request.
    let mut client = Conn::connect(herdsman.addr);
    client.send(
        b"POST /later HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    );
    assert_eq!(client.response_head().status(), 100);
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
            (target, entry["buffered"] == "request")
        })
        .collect();
    assert_eq!(
        buffered,
        [("/later".to_string(), true), ("/".to_string(), false)]
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Twice as many slow uploads of 1 MiB as the one-at-a-time server has workers: none may hold a
/// worker (GETs beside them are answered at once), and each arrives whole.
fn slow_uploads_hold_no_worker_and_arrive_whole(herdsman: &Proxy) {
    const SIZE: usize = 1 << 20;
    let uploads: Vec<_> = (0..2 * SERVER_WORKERS)
        .map(|_| {
            let addr = herdsman.addr;
            thread::spawn(move || {
                let mut client = Conn::connect(addr);
                client.set_read_timeout(Duration::from_secs(20));
                let head =
                    format!("POST /up HTTP/1.1\r\nHost: test\r\nContent-Length: {SIZE}\r\n\r\n");
                client.send(head.as_bytes());
                for _ in 0..8 {
                    client.send(&vec![b'b'; SIZE / 8]);
                    thread::sleep(Duration::from_millis(100));
                }
                client.response()
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    let took = median_get_time(herdsman.addr, Duration::from_secs(5)).expect("GETs are answered");
    assert!(took < Duration::from_millis(100), "answered after {took:?}");
    for upload in uploads {
        let response = upload.join().unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.body, SIZE.to_string().as_bytes());
    }
}

#[test]
fn a_body_larger_than_memory_waits_in_a_temporary_file_until_it_is_whole() {
    let server = start_one_at_a_time_server();
    let dir = fresh_temp_dir("spill");
    // 64 KiB of each body in memory, the rest in the file.
    let buffering = format!(
        "temp_dir = {:?}\nrequest_buffer_memory = 65536",
        dir.display().to_string()
    );
    let herdsman = Proxy::start(&config(server, &buffering));
    // Each is read into memory and a file.
    slow_uploads_hold_no_worker_and_arrive_whole(&herdsman);
    let report = herdsman.server().stats().report().remove(0);
    assert_eq!(report.buffered_requests, 2 * SERVER_WORKERS as u64);
    assert_eq!(report.spilled_bodies, 2 * SERVER_WORKERS as u64);
    let disk = herdsman
        .server()
        .stats()
        .buffer_use
        .disk
        .load(Ordering::Relaxed);
    assert_eq!(disk, 0, "the files are gone with their requests");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// A sample of the admin API's `/metrics`, by its whole series text (name and labels).
fn metric(admin: SocketAddr, series: &str) -> u64 {
    let mut conn = Conn::connect(admin);
    let page = conn.roundtrip(&admin_get_request("/metrics")).body_text();
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
        .parse()
        .unwrap()
}

#[test]
fn an_upload_given_up_midway_is_logged_as_it_went_and_its_disk_use_is_told_apart() {
    let server = Mock::echo();
    let dir = fresh_temp_dir("given-up");
    let log = dir.join("access.log");
    let toml = Setup::new()
        .server("upload", server.addr)
        .admin()
        .buffering("temp_dir", format!("{:?}", dir.display().to_string()))
        .buffering("request_buffer_memory", 65536)
        .toml("127.0.0.1:0")
        .replacen(
            "pool = \"app\"\n\n",
            &format!("pool = \"app\"\naccess_log = {log:?}\naccess_log_format = \"json\"\n\n"),
            1,
        );
    let herdsman = Proxy::start(&toml);
    let admin = herdsman.server().admin_addr().unwrap();
    const DECLARED: u64 = 8 << 20;
    const SENT: usize = 1 << 20;
    let mut client = Conn::connect(herdsman.addr);
    client.send(
        format!("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {DECLARED}\r\n\r\n").as_bytes(),
    );
    client.send(&vec![b'u'; SENT]);
    // Past the 64 KiB in memory, the rest of what came is in the file; the whole file the body
    // will need is reserved.
    let in_file = (SENT - 65536) as u64;
    assert!(
        eventually(Duration::from_secs(5), || metric(
            admin,
            "herdsman_buffer_file_bytes"
        ) == in_file),
        "herdsman_buffer_file_bytes {} for {in_file} bytes in the file",
        metric(admin, "herdsman_buffer_file_bytes")
    );
    let reserved = metric(admin, "herdsman_buffer_reserved_bytes{where=\"disk\"}");
    assert!(reserved >= DECLARED - 65536, "{reserved} reserved");
    // The client gives up.
    drop(client);
    assert!(eventually(Duration::from_secs(5), || {
        metric(admin, "herdsman_buffer_file_bytes") == 0
            && metric(admin, "herdsman_buffer_reserved_bytes{where=\"disk\"}") == 0
    }));
    herdsman.stop_and_wait();
    let text = std::fs::read_to_string(&log).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
    assert_eq!(line["status"], 0, "{line}");
    assert_eq!(line["pool"], "app", "{line}");
    assert_eq!(
        line["server"],
        serde_json::Value::Null,
        "no server was contacted: {line}"
    );
    assert_eq!(line["buffered"], "request", "{line}");
    assert_eq!(line["spooled"], "request", "{line}");
    assert_eq!(line["received"], SENT, "{line}");
    assert_eq!(line["ended"], "client_gone_mid_body", "{line}");
    assert!(server.heads().is_empty(), "the server was sent the request");
    let _ = std::fs::remove_dir_all(dir);
}

/// The first worker's buffering counts: (buffered, spilled to a file, streamed for want of room).
fn buffering_counts(herdsman: &Proxy) -> (u64, u64, u64) {
    let report = herdsman.server().stats().report().remove(0);
    (
        report.buffered_requests,
        report.spilled_bodies,
        report.buffering_full,
    )
}

/// A body of `len` bytes that says where each byte sat: a torn or shifted copy shows.
fn numbered_body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_one_mebibyte_body_that_comes_slowly_is_held_in_memory_and_arrives_whole() {
    let server = Mock::echo();
    let dir = fresh_temp_dir("memory-first");
    let buffering = format!("temp_dir = {:?}", dir.display().to_string());
    let herdsman = Proxy::start(&config(server.addr, &buffering));
    let body = numbered_body(1 << 20);
    let mut client = Conn::connect(herdsman.addr);
    client.set_read_timeout(Duration::from_secs(10));
    let head = format!(
        "POST /up HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    client.send(head.as_bytes());
    // In pieces with pauses, so that the body is read in several reads behind its head, at
    // some 1.3 MiB/s: slower than request_stream_rate (10 MiB/s), so it is read whole first.
    for piece in body.chunks(body.len() / 4) {
        client.send(piece);
        thread::sleep(Duration::from_millis(200));
    }
    let response = client.response();
    assert_eq!(response.status(), 200);
    assert!(response.body == body, "the server got the body as sent");
    assert_eq!(
        buffering_counts(&herdsman),
        (1, 0, 0),
        "buffered, in memory alone"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn when_memory_is_taken_a_body_of_known_length_waits_in_a_file_instead_of_streaming() {
    let server = start_one_at_a_time_server();
    let dir = fresh_temp_dir("memory-taken");
    // All the memory buffered bodies may hold is less than one body.
    let buffering = format!(
        "temp_dir = {:?}\nmemory_total = 65536",
        dir.display().to_string()
    );
    let herdsman = Proxy::start(&config(server, &buffering));
    // In files, they hold no server worker, as they would in memory.
    slow_uploads_hold_no_worker_and_arrive_whole(&herdsman);
    let uploads = 2 * SERVER_WORKERS as u64;
    assert_eq!(buffering_counts(&herdsman), (uploads, uploads, 0));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_request_sent_right_behind_a_buffered_body_is_not_taken_for_part_of_it() {
    let server = Mock::echo();
    let herdsman = Proxy::start(&config(server.addr, ""));
    let body = numbered_body(300_000);
    let mut client = Conn::connect(herdsman.addr);
    client.set_read_timeout(Duration::from_secs(10));
    let head = format!(
        "POST /first HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    client.send(head.as_bytes());
    client.send(&body[..1000]);
    thread::sleep(Duration::from_millis(100));
    // The rest of the body and the next request in one write: the body's reads stop at its end.
    let mut rest = body[1000..].to_vec();
    rest.extend_from_slice(b"GET /second HTTP/1.1\r\nHost: test\r\n\r\n");
    client.send(&rest);
    let first = client.response();
    assert_eq!(first.status(), 200);
    assert!(first.body == body, "the first body arrived whole and alone");
    let second = client.response();
    assert_eq!(second.status(), 200);
    assert_eq!(second.header("X-Target"), Some("/second"));
}

/// A server that answers each request with the FNV-1a of the body it got, calling `heard` as
/// soon as it has the head.
fn hashing_server(heard: impl Fn() + Send + Sync + 'static) -> Mock {
    Mock::start(move |ex| {
        heard();
        let body = ex.read_body()?;
        ex.respond(200, &[], fnv(&body).to_string().as_bytes())?;
        Ok(Flow::KeepAlive)
    })
}

/// `response` is a 200 from a [`hashing_server`] that got `body` as sent; `what` names it.
fn assert_arrived_as_sent(response: &Response, body: &[u8], what: &str) {
    assert_eq!(response.status(), 200, "{what}");
    assert_eq!(
        response.body_text(),
        fnv(body).to_string(),
        "{what}: the body arrived as sent"
    );
}

#[test]
fn a_large_fast_body_goes_socket_to_socket_by_splice_byte_for_byte() {
    let server = hashing_server(|| {});
    let dir = fresh_temp_dir("splice");
    let buffering = format!("temp_dir = {:?}", dir.display().to_string());
    let herdsman = Proxy::start(&config(server.addr, &buffering));
    const SIZE: usize = 16 << 20;
    let body = numbered_body(SIZE);
    for response in post_twice(herdsman.addr, &body) {
        assert_arrived_as_sent(&response, &body, "POST /up");
    }
    let report = herdsman.server().stats().report().remove(0);
    assert_eq!(
        (
            report.streamed_request_bodies,
            report.spliced_request_bodies,
            report.spilled_bodies,
            report.backend_connects,
        ),
        (2, 2, 0, 1),
        "streamed past memory, by splice, no file, one server connection"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_body_that_comes_fast_goes_on_to_the_server_before_it_is_whole() {
    // Past its first MiB in memory, unkept.
    fast_body_goes_on_before_it_is_whole(4 << 20, "");
}

#[test]
fn a_body_that_fits_memory_and_comes_fast_goes_on_to_the_server_before_it_is_whole() {
    // Kept in memory as it goes. At 1 MiB/s rather than 10, its pace shows within its first
    // 512 KiB even should the sending thread be held up 500 ms on a busy machine.
    fast_body_goes_on_before_it_is_whole(1 << 20, "request_stream_rate = 1048576");
}

/// A body of `size` bytes sent at once but for its last kilobyte, half a second later: the server
/// hears of it before that kilobyte is sent, and gets all of it; it streamed, in no file.
/// `buffering`: more `[buffering]` keys.
fn fast_body_goes_on_before_it_is_whole(size: usize, buffering: &str) {
    let heard: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let server = {
        let heard = Arc::clone(&heard);
        hashing_server(move || {
            heard.lock().unwrap().get_or_insert_with(Instant::now);
        })
    };
    let dir = fresh_temp_dir(&format!("fast-{size}"));
    let buffering = format!("temp_dir = {:?}\n{buffering}", dir.display().to_string());
    let herdsman = Proxy::start(&config(server.addr, &buffering));
    let mut client = Conn::connect(herdsman.addr);
    client.set_read_timeout(Duration::from_secs(10));
    let head = format!("POST /up HTTP/1.1\r\nHost: test\r\nContent-Length: {size}\r\n\r\n");
    client.send(head.as_bytes());
    // All but the last kilobyte at once, far faster than request_stream_rate (10 MiB/s).
    let body = numbered_body(size);
    client.send(&body[..size - 1024]);
    thread::sleep(Duration::from_millis(500));
    let last_sent = Instant::now();
    client.send(&body[size - 1024..]);
    assert_arrived_as_sent(&client.response(), &body, "POST /up");
    let heard = heard.lock().unwrap().expect("the server heard the request");
    assert!(
        heard < last_sent,
        "the server heard of the request only once its body was whole"
    );
    let report = herdsman.server().stats().report().remove(0);
    assert_eq!(
        (
            report.streamed_request_bodies,
            report.buffered_requests,
            report.spilled_bodies
        ),
        (1, 0, 0),
        "streamed, no file"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_kept_body_whose_server_resets_midway_goes_whole_to_another() {
    // "cut" resets each connection once it has the head: the PUT streaming to it fails before
    // any answer, and its body, kept as it streamed, goes whole to "a".
    let cut = Mock::start(|_| Ok(Flow::Reset));
    let whole = hashing_server(|| {});
    let config = format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"cut\", addr = \"{}\" }}, \
         {{ name = \"a\", addr = \"{}\" }}]\n[pool.passive]\nconsecutive_failures = 0\n",
        cut.addr, whole.addr
    );
    let herdsman = Proxy::start(&config);
    const SIZE: usize = 1 << 20;
    let body = numbered_body(SIZE);
    for i in 0..2 {
        let mut client = Conn::connect(herdsman.addr);
        client.set_read_timeout(Duration::from_secs(10));
        let head = format!("PUT /up{i} HTTP/1.1\r\nHost: test\r\nContent-Length: {SIZE}\r\n\r\n");
        client.send(head.as_bytes());
        // Fast enough to stream; the rest only after the attempt on "cut" has failed.
        client.send(&body[..SIZE * 3 / 4]);
        thread::sleep(Duration::from_millis(300));
        client.send(&body[SIZE * 3 / 4..]);
        assert_arrived_as_sent(&client.response(), &body, &format!("PUT {i}"));
    }
    assert_eq!(cut.heads().len(), 1, "one of the two went to \"cut\" first");
    let report = herdsman.server().stats().report().remove(0);
    assert_eq!(
        (report.streamed_request_bodies, report.buffered_requests),
        (2, 0),
        "both streamed as they came"
    );
}
