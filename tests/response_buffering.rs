//! Response buffering (`[buffering] response_*`): herdsman reads a server's answer as fast as the
//! server sends it and feeds the client at the client's pace, so a slow reader holds herdsman's
//! memory and disk, not a worker of a server that serves one connection at a time. Event streams,
//! `X-Accel-Buffering: no` and routes that turn it off still stream; a reader slower than
//! `response_min_rate` loses its answer.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// Big enough that the kernel's socket buffers on the way (the server's send buffer, herdsman's
/// receive and send buffers, the client's receive buffer) cannot hold it: a streamed answer
/// then keeps its server worker writing until the client has read most of it.
const BIG_ANSWER: u64 = 32 << 20;

fn config(server: SocketAddr, buffering: &str, dir: &std::path::Path) -> String {
    format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
         [buffering]\ntemp_dir = {:?}\n{buffering}\n\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{server}\" }}]\n",
        dir.display().to_string()
    )
}

/// Makes a socket's receive buffer small, as a slow mobile client's window would be.
fn small_receive_buffer(stream: &TcpStream) {
    let size: libc::c_int = 4096;
    // SAFETY: a valid socket descriptor and a pointer to an int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
}

/// Starts `count` clients that ask for a big answer and read it at 2 KiB/s until `stop`.
fn start_slow_readers(herdsman: SocketAddr, count: usize, stop: &Arc<AtomicBool>) {
    for _ in 0..count {
        let stop = Arc::clone(stop);
        thread::spawn(move || {
            let mut client = TcpStream::connect(herdsman).unwrap();
            small_receive_buffer(&client);
            let request = format!("GET /big/{BIG_ANSWER} HTTP/1.1\r\nHost: test\r\n\r\n");
            client.write_all(request.as_bytes()).unwrap();
            let mut chunk = [0; 2048];
            while !stop.load(Ordering::SeqCst) {
                if client.read(&mut chunk).unwrap_or(0) == 0 {
                    return;
                }
                thread::sleep(Duration::from_secs(1));
            }
        });
    }
}

/// The median time of five GETs behind twice as many slow readers as the server has workers
/// (`None`: one was not answered within `patience`), through a herdsman with `buffering`.
fn get_behind_slow_readers(
    buffering: &str,
    patience: Duration,
) -> (Option<Duration>, herdsman::stats::WorkerReport, u64) {
    let server = start_one_at_a_time_server();
    let dir = fresh_temp_dir("slow-readers");
    let herdsman = Proxy::start(&config(server, buffering, &dir));
    let stop = Arc::new(AtomicBool::new(false));
    start_slow_readers(herdsman.addr, 2 * SERVER_WORKERS, &stop);
    // Every reader has its answer on the way; a buffering herdsman has read them all by now.
    thread::sleep(Duration::from_secs(2));
    let median = median_get_time(herdsman.addr, patience);
    let stats = herdsman.server().stats();
    let report = stats.report().remove(0);
    let on_disk = stats.buffer_use.disk.load(Ordering::Relaxed);
    stop.store(true, Ordering::SeqCst);
    let _ = std::fs::remove_dir_all(dir);
    (median, report, on_disk)
}

#[test]
fn slow_readers_hold_no_server_worker() {
    let (took, report, on_disk) = get_behind_slow_readers("", Duration::from_secs(5));
    let took = took.expect("a GET behind slow readers was not answered within 5 s");
    eprintln!(
        "a GET behind {} slow readers: median {took:?}",
        2 * SERVER_WORKERS
    );
    assert!(took < Duration::from_millis(100), "answered after {took:?}");
    assert!(
        report.buffered_responses >= 2 * SERVER_WORKERS as u64,
        "{report:?}"
    );
    // What the readers have not taken waits in temporary files (most of each answer).
    let waiting = 2 * SERVER_WORKERS as u64 * BIG_ANSWER / 2;
    assert!(on_disk > waiting, "{} MiB on disk", on_disk >> 20);
}

#[test]
fn without_response_buffering_slow_readers_hold_every_server_worker() {
    // The same attack with response buffering off: what herdsman did before, and what
    // `response_buffer_memory = 0` asks for.
    let (took, report, _) =
        get_behind_slow_readers("response_buffer_memory = 0", Duration::from_secs(2));
    assert_eq!(took, None, "every server worker should be held by a reader");
    assert_eq!(report.buffered_responses, 0);
}

/// Reads a body of `size` bytes of the big pattern, checking each byte.
fn read_big_body(client: &mut Conn, size: u64) {
    let mut at = 0u64;
    while at < size {
        let chunk = client.read_some().expect("reading the body");
        assert!(
            !chunk.is_empty(),
            "the body ended after {at} of {size} bytes"
        );
        let wrong = chunk
            .iter()
            .enumerate()
            .find(|(i, byte)| **byte != big_byte(at + *i as u64));
        assert_eq!(wrong, None, "a wrong byte after {at}");
        at += chunk.len() as u64;
    }
}

/// Peak resident memory of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    peak_rss_kib(pid) * 1024
}

/// The most herdsman's memory may grow to while a gibibyte passes through it.
const RSS_BOUND: u64 = 96 << 20;

#[test]
fn a_gibibyte_each_way_passes_with_memory_bounded() {
    let server = start_one_at_a_time_server();
    let dir = fresh_temp_dir("gib");
    // The temporary files hold at most 256 MiB of either body, so the disk a test run needs
    // stays modest: the download fills its file while the client waits, then the rest streams;
    // a 64 MiB upload goes to a file whole, and a 1 GiB one streams.
    let buffering = "response_buffer_max = 268435456\nrequest_buffer_max = 268435456";
    let port = free_port();
    let text = config(server, buffering, &dir).replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    let path = write_temp("gib.toml", &text);
    let herdsman = run_binary_with(&path);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(wait_listening(addr, Duration::from_secs(10)));

    const GIB: u64 = 1 << 30;
    let mut client = Conn::connect(addr);
    client.set_read_timeout(Duration::from_secs(60));
    client.send(format!("GET /big/{GIB} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let head = client.response_head();
    assert_eq!(head.status(), 200);
    // A client that takes its time: the server's answer piles up in herdsman meanwhile.
    thread::sleep(Duration::from_secs(1));
    read_big_body(&mut client, GIB);

    for size in [64 << 20, GIB] {
        let mut client = Conn::connect(addr);
        client.set_read_timeout(Duration::from_secs(60));
        let head = format!("POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: {size}\r\n\r\n");
        client.send(head.as_bytes());
        let block = vec![b'u'; 1 << 20];
        for _ in 0..size / block.len() as u64 {
            client.send(&block);
        }
        let response = client.response();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.body,
            size.to_string().as_bytes(),
            "the server read it all"
        );
    }
    let peak = peak_rss(herdsman.0.id());
    eprintln!(
        "herdsman's peak RSS over 1 GiB down, 64 MiB and 1 GiB up: {} MiB",
        peak >> 20
    );
    assert!(peak < RSS_BOUND, "peak RSS {} MiB", peak >> 20);
    drop(herdsman);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A server whose answers come in two chunks, the second 400 ms after the first: an event
/// stream at `/events`, one that says `X-Accel-Buffering: no` at `/no-buffering`, and a plain
/// chunked answer anywhere else.
fn two_part_server() -> Mock {
    Mock::start(|ex| {
        let kind = match ex.head.target() {
            "/events" => "Content-Type: text/event-stream\r\n",
            "/no-buffering" => "Content-Type: text/plain\r\nX-Accel-Buffering: no\r\n",
            _ => "Content-Type: text/plain\r\n",
        };
        let head = format!("HTTP/1.1 200 OK\r\n{kind}Transfer-Encoding: chunked\r\n\r\n");
        ex.write(head.as_bytes())?;
        ex.write(b"9\r\ndata: 1\n\n\r\n")?;
        thread::sleep(Duration::from_millis(400));
        ex.write(b"9\r\ndata: 2\n\n\r\n0\r\n\r\n")?;
        Ok(Flow::KeepAlive)
    })
}

/// Asks for `target`; returns how long the first part took to arrive and the whole body.
fn first_part_then_all(addr: SocketAddr, target: &str) -> (Duration, Vec<u8>) {
    let mut client = Conn::connect(addr);
    client.set_read_timeout(Duration::from_secs(5));
    let started = Instant::now();
    client.send(&get_request(target, ""));
    let head = client.response_head();
    assert_eq!(head.status(), 200);
    let mut body = client.read_some().unwrap();
    let first = started.elapsed();
    while !body.ends_with(b"0\r\n\r\n") {
        body.extend(client.read_some().unwrap());
    }
    (first, body)
}

#[test]
fn event_streams_and_answers_that_ask_for_it_stream_unbuffered() {
    let server = two_part_server();
    let dir = fresh_temp_dir("streams");
    // A route that turns response buffering off for /live.
    let text = config(server.addr, "", &dir)
        + "\n[[route]]\npath_prefix = \"/live\"\npool = \"app\"\n[route.buffering]\nresponse = false\n";
    let herdsman = Proxy::start(&text);
    let buffered = || herdsman.server().stats().report()[0].buffered_responses;
    for (target, spooled) in [
        ("/events", false),
        ("/no-buffering", false),
        ("/live/feed", false),
        ("/plain", true),
    ] {
        let before = buffered();
        let (first, body) = first_part_then_all(herdsman.addr, target);
        // Every one reaches a reading client as it comes: the first event long before the second.
        assert!(
            first < Duration::from_millis(300),
            "{target}: first part after {first:?}"
        );
        assert!(body.starts_with(b"9\r\ndata: 1\n\n\r\n"), "{target}");
        assert_eq!(
            buffered() - before,
            u64::from(spooled),
            "{target} went through a spool"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_reader_slower_than_the_minimum_rate_loses_its_answer() {
    let server = start_one_at_a_time_server();
    let dir = fresh_temp_dir("min-rate");
    let buffering = "response_min_rate = 100000\nresponse_min_rate_window = \"1s\"";
    let herdsman = Proxy::start(&config(server, buffering, &dir));
    let mut client = TcpStream::connect(herdsman.addr).unwrap();
    small_receive_buffer(&client);
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let request = format!("GET /big/{BIG_ANSWER} HTTP/1.1\r\nHost: test\r\n\r\n");
    client.write_all(request.as_bytes()).unwrap();
    // About 20 KB/s, a fifth of the minimum.
    let mut chunk = [0; 2048];
    let mut received = 0u64;
    loop {
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => received += n as u64,
        }
        thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed();
    assert!(received < BIG_ANSWER, "the answer ended early");
    assert!(
        took > Duration::from_secs(1) && took < Duration::from_secs(8),
        "ended after {took:?}"
    );
    let report = herdsman.server().stats().report().remove(0);
    assert_eq!(report.slow_response_readers, 1, "{report:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn with_the_totals_taken_an_answer_streams_whole_and_is_counted() {
    let server = start_one_at_a_time_server();
    let dir = fresh_temp_dir("totals");
    let herdsman = Proxy::start(&config(server, "memory_total = 0\ndisk_total = 0", &dir));
    let mut client = Conn::connect(herdsman.addr);
    client.set_read_timeout(Duration::from_secs(10));
    const SIZE: u64 = 8 << 20;
    client.send(format!("GET /big/{SIZE} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    assert_eq!(client.response_head().status(), 200);
    // The client waits: with no memory or disk to spare, the answer waits in the server.
    thread::sleep(Duration::from_millis(300));
    let stats = herdsman.server().stats();
    assert_eq!(stats.buffer_use.disk.load(Ordering::Relaxed), 0);
    read_big_body(&mut client, SIZE);
    // Counted as the answer ends, just after its last byte went out.
    let full = || stats.report()[0].buffering_full == 1;
    assert!(eventually(Duration::from_secs(2), full), "counted as full");
    let report = stats.report().remove(0);
    assert_eq!(report.spilled_bodies, 0, "{report:?}");
    let _ = std::fs::remove_dir_all(dir);
}
