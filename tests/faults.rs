//! Faults with real processes and real sockets, each with counted outcomes: a server process
//! killed with SIGKILL under load, a client that vanishes mid-response or mid-upload, and a pool
//! whose servers are all down.

mod admin_support;
mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use admin_support::Running;
use common::*;

/// A server in its own process: `herdsman run` in front of the mock `behind`, so that it can be
/// killed like any server. Returns the process and where it listens.
fn server_process(behind: &Mock) -> (ChildGuard, std::net::SocketAddr) {
    Setup::new()
        .workers(1)
        .server("b", behind.addr)
        .start_binary()
}

/// `GET /api/pools`: server `name`'s health.
fn health(herdsman: &Running, name: &str) -> String {
    herdsman.servers_json()[name]["health"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_server_killed_under_load_costs_no_request_and_is_marked_down_in_time() {
    let a = Mock::named("a");
    let b_inner = Mock::named("b");
    let (b_process, b_addr) = server_process(&b_inner);
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr).server("b", b_addr));
    // fall × interval = 200 ms.
    herdsman.reconfigure(|text| {
        format!("{text}[pool.health]\ncheck = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\nfall = 2\n")
    });

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (stop, ok, failed, web) = (
                Arc::clone(&stop),
                Arc::clone(&ok),
                Arc::clone(&failed),
                herdsman.web,
            );
            thread::spawn(move || {
                let mut conn = Conn::connect(web);
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let response = conn.roundtrip(&get_request(&format!("/{c}/{i}"), ""));
                    let counter = if response.status() == 200 {
                        &ok
                    } else {
                        &failed
                    };
                    counter.fetch_add(1, Ordering::SeqCst);
                    if response.says_close() {
                        conn = Conn::connect(web);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    let served_by_b_before = b_inner.connections();
    b_process.signal(libc::SIGKILL);
    let killed = Instant::now();
    let marked = eventually(Duration::from_secs(3), || health(&herdsman, "b") == "down");
    let took = killed.elapsed();
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    assert!(
        served_by_b_before > 0,
        "b took no requests before it was killed"
    );
    assert!(marked, "b was not marked down");
    // Two failed checks 100 ms apart, the first up to an interval away, and the API's own time.
    assert!(
        took < Duration::from_millis(600),
        "marked down after {took:?}"
    );
    let (ok, failed) = (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    assert!(ok > 100, "only {ok} requests in the run");
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
}

#[test]
fn a_client_gone_mid_response_closes_the_server_connection_too() {
    // A server that sends 1 kB of a 1 MB body, then waits (up to 10 s) to be closed: herdsman has
    // relayed all it got and waits on the server, not on the client.
    let closed = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&closed);
    let server = Mock::start(move |ex| {
        ex.read_body()?;
        // One write: were the first body bytes a second one, herdsman could close (rightly, its
        // client gone) before they went, and the write would fail rather than the wait end.
        let mut start = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n".to_vec();
        start.extend_from_slice(&[b'x'; 1_000]);
        ex.write(&start)?;
        let waiting = Instant::now();
        ex.wait_for_close(Duration::from_secs(10));
        if waiting.elapsed() < Duration::from_secs(9) {
            seen.store(true, Ordering::SeqCst);
        }
        Ok(Flow::Close)
    });
    let herdsman = Running::start(Setup::new().admin().server("s", server.addr));
    let mut client = Conn::connect(herdsman.web);
    client.send(&get_request("/big", ""));
    assert_eq!(client.response_head().status(), 200);
    let gone = Instant::now();
    drop(client);
    assert!(
        eventually(Duration::from_secs(3), || closed.load(Ordering::SeqCst)),
        "the server connection of a vanished client was kept"
    );
    assert!(
        gone.elapsed() < Duration::from_secs(1),
        "closed after {:?}",
        gone.elapsed()
    );
    // And it was not kept for another request: the next one opens a connection of its own.
    let mut next = Conn::connect(herdsman.web);
    next.send(&get_request("/next", ""));
    assert_eq!(next.response_head().status(), 200);
    assert_eq!(server.connections(), 2);
}

#[test]
fn with_every_server_down_requests_get_503_at_once() {
    let gone = |_| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (x, y): (std::net::SocketAddr, std::net::SocketAddr) = (gone(0), gone(1));
    let herdsman = Running::start(Setup::new().admin().server("x", x).server("y", y));
    herdsman.reconfigure(|text| {
        format!("{text}[pool.health]\ncheck = \"tcp\"\ninterval = \"50ms\"\nfall = 1\n")
    });
    assert!(eventually(Duration::from_secs(2), || {
        health(&herdsman, "x") == "down" && health(&herdsman, "y") == "down"
    }));
    for _ in 0..5 {
        let started = Instant::now();
        let answer = &herdsman.answers(1)[0];
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
    }
}

#[test]
fn an_accept_loop_that_panics_is_started_again_and_counted() {
    let a = Mock::named("a");
    let herdsman = Running::start(Setup::new().admin().workers(1).server("a", a.addr));
    let mut conn = Conn::connect(herdsman.web);
    // Arms the fault: the worker's next accept panics its accept loop.
    assert_eq!(
        conn.roundtrip(&get_request("/__herdsman/panic-accept", ""))
            .status(),
        200
    );
    // The connection accepted by the panicking loop is lost with it; say nothing of its fate.
    if let Ok(mut victim) = Conn::try_connect(herdsman.web) {
        victim.set_read_timeout(Duration::from_secs(2));
        let _ = victim.try_send(&get_request("/victim", "Connection: close\r\n"));
        let _ = victim.read_head();
    }
    let restarts = || -> u64 {
        let (_, json) = herdsman.api("GET", "/api/workers", None);
        json["workers"][0]["restarts"].as_u64().unwrap()
    };
    assert!(
        eventually(Duration::from_secs(2), || restarts() == 1),
        "no restart counted"
    );
    // New connections are accepted again, and the kept one still works.
    let answers = herdsman.answers(5);
    assert!(answers.iter().all(|a| a == "a"), "{answers:?}");
    assert_eq!(conn.roundtrip(&get_request("/still", "")).status(), 200);
}

#[test]
fn a_worker_whose_event_loop_panics_is_started_again_on_its_listeners() {
    let a = Mock::named("a");
    let herdsman = Running::start(Setup::new().admin().workers(1).server("a", a.addr));
    let restarts = || -> u64 {
        let (_, json) = herdsman.api("GET", "/api/workers", None);
        json["workers"][0]["restarts"].as_u64().unwrap()
    };
    assert_eq!(restarts(), 0);
    // The request that triggers it may or may not be answered before the loop goes down.
    if let Ok(mut trigger) = Conn::try_connect(herdsman.web) {
        trigger.set_read_timeout(Duration::from_secs(2));
        let _ = trigger.try_send(&get_request(
            "/__herdsman/panic-worker",
            "Connection: close\r\n",
        ));
        let _ = trigger.read_head();
    }
    assert!(
        eventually(Duration::from_secs(2), || restarts() == 1),
        "no restart counted"
    );
    // The listener survives with the worker: new connections are served as before.
    let answers = herdsman.answers(5);
    assert!(answers.iter().all(|a| a == "a"), "{answers:?}");
}

#[test]
fn slow_clients_cost_only_their_own_connections() {
    let a = Mock::named("a");
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr));
    // 200 clients that each send half a head, and 50 that send a body 1 byte at a time (never
    // finishing), held open while the others are served.
    let mut slow = Vec::new();
    for i in 0..200 {
        let mut conn = Conn::connect(herdsman.web);
        conn.send(format!("GET /slow/{i} HTTP/1.1\r\nHost: t\r\nX-Slow: ").as_bytes());
        slow.push(conn);
    }
    for i in 0..50 {
        let mut conn = Conn::connect(herdsman.web);
        conn.send(
            format!("POST /up/{i} HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\nx")
                .as_bytes(),
        );
        slow.push(conn);
    }
    let started = Instant::now();
    let answers = herdsman.answers(200);
    let took = started.elapsed();
    assert!(answers.iter().all(|a| a == "a"), "{answers:?}");
    assert!(
        took < Duration::from_secs(5),
        "200 requests took {took:?} beside the slow clients"
    );
    // And the slow ones are still open (herdsman did not drop them to make room).
    for conn in &mut slow[..10] {
        conn.set_read_timeout(Duration::from_millis(50));
        assert!(
            conn.read_head().is_err(),
            "a slow client was answered or closed early"
        );
    }
}

#[test]
fn a_server_connection_abandoned_mid_upload_is_reset_and_leaves_no_time_wait() {
    // The server reads the upload until its connection ends, and tells how it ended.
    let (heads, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(None)));
    let (seen, end) = (Arc::clone(&heads), Arc::clone(&ended));
    let server = Mock::start(move |ex| {
        seen.fetch_add(1, Ordering::SeqCst);
        let how = loop {
            match ex.conn.read_some() {
                Ok(bytes) if bytes.is_empty() => break "end of stream".to_string(),
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {}
                Err(e) => break format!("{:?}", e.kind()),
            }
        };
        *end.lock().unwrap() = Some(how);
        Ok(Flow::Close)
    });
    // Streaming uploads (buffered, the server would see none of an unfinished body).
    let setup = Setup::new().admin().server("s", server.addr);
    let time_waits = TimeWaits::towards(server.addr.port());
    let herdsman = Running::start(setup.buffering("request_buffer_memory", 0));
    for round in 0..3 {
        let mut client = Conn::connect(herdsman.web);
        client.send(
            format!("POST /up/{round} HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n")
                .as_bytes(),
        );
        client.send(&[b'x'; 16 * 1024]);
        assert!(
            eventually(Duration::from_secs(5), || heads.load(Ordering::SeqCst)
                > round),
            "the upload never reached the server"
        );
        set_reset_on_close(&client.stream);
        drop(client);
        assert!(
            eventually(Duration::from_secs(3), || ended.lock().unwrap().is_some()),
            "the server connection outlived its client"
        );
        let how = ended.lock().unwrap().take().unwrap();
        // A reset, not an end of stream that a server could take for the end of the body.
        assert_eq!(how, "ConnectionReset", "round {round}");
    }
    // herdsman's ends of those connections were not left waiting out TIME_WAIT (60 s each).
    thread::sleep(Duration::from_millis(100));
    assert_eq!(time_waits.new_since(), 0);
}
