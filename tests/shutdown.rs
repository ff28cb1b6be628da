//! Graceful stop, in-process (`Server::stop`) and of the binary (SIGTERM/SIGINT): requests in
//! flight finish (up to `shutdown_grace`), idle keep-alive connections close, new connections
//! are refused, and everything exits.

mod common;

use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// Answers `/slow` after `delay`, everything else at once.
fn slow_server(delay: Duration) -> Mock {
    Mock::start(move |ex| {
        ex.read_body()?;
        if ex.head.target() == "/slow" {
            thread::sleep(delay);
            ex.respond(200, &[], b"slow done")?;
        } else {
            ex.respond(200, &[], b"quick")?;
        }
        Ok(Flow::KeepAlive)
    })
}

/// Sends GET /slow on `busy` and waits until it has reached `server`.
fn send_slow_request(busy: &mut Conn, server: &Mock) {
    busy.send(&get_request("/slow", ""));
    assert!(
        eventually(Duration::from_secs(5), || {
            server.heads().iter().any(|h| h.target() == "/slow")
        }),
        "the slow request never reached the server"
    );
}

fn refuses_connections(addr: std::net::SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err()
}

#[test]
fn stop_finishes_the_request_in_flight_and_closes_the_rest() {
    let server = slow_server(Duration::from_millis(500));
    let proxy = Setup::new().grace("5s").server("a", server.addr).start();
    let addr = proxy.addr;

    let mut idle = proxy.connect();
    assert_eq!(idle.roundtrip(&get_request("/", "")).status(), 200);

    let mut busy = proxy.connect();
    send_slow_request(&mut busy, &server);

    proxy.stop();

    let response = busy.response();
    assert_eq!(
        response.status(),
        200,
        "the request in flight was not finished"
    );
    assert_eq!(response.body_text(), "slow done");
    assert!(
        response.says_close(),
        "a response sent while stopping should say Connection: close; headers {:?}",
        response.head.headers
    );
    busy.expect_closed();

    assert!(
        idle.closes_within(Duration::from_secs(3)),
        "an idle keep-alive connection stayed open during the stop"
    );
    assert!(
        eventually(Duration::from_secs(2), || refuses_connections(addr)),
        "still accepting connections after stop"
    );
    assert!(
        proxy.wait_stopped(Duration::from_secs(10)),
        "Server::wait did not return"
    );
    assert!(
        refuses_connections(addr),
        "accepting connections after wait"
    );
}

#[test]
fn stop_with_nothing_in_flight_returns_promptly() {
    let server = Mock::named("a");
    let proxy = Setup::new().grace("10s").server("a", server.addr).start();
    assert_eq!(proxy.get("/").status(), 200);
    let started = Instant::now();
    proxy.stop();
    assert!(
        proxy.wait_stopped(Duration::from_secs(5)),
        "Server::wait did not return"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "an idle proxy took {:?} to stop; it should not wait out shutdown_grace",
        started.elapsed()
    );
}

#[test]
fn stop_cuts_requests_still_running_after_the_grace_period() {
    let server = slow_server(Duration::from_secs(6));
    let proxy = Setup::new().grace("300ms").server("a", server.addr).start();
    let mut busy = proxy.connect();
    busy.send(&get_request("/slow", ""));
    assert!(server.wait_for_heads(1, Duration::from_secs(5)));

    let started = Instant::now();
    proxy.stop();
    match busy.read_response(false) {
        Ok(response) => panic!(
            "expected the connection cut after the grace period, got {:?}",
            response.head.first_line
        ),
        Err(e) => assert!(
            !is_timeout(&e),
            "connection still open after the grace period"
        ),
    }
    assert!(
        proxy.wait_stopped(Duration::from_secs(5)),
        "Server::wait did not return after the grace period"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "stop took {:?} with shutdown_grace = 300ms",
        started.elapsed()
    );
}

fn run_binary_then_signal(signal: libc::c_int) {
    let server = slow_server(Duration::from_millis(500));
    let (mut child, addr) = Setup::new().server("a", server.addr).start_binary();
    let mut client = Conn::connect(addr);
    assert_eq!(client.roundtrip(&get_request("/", "")).status(), 200);

    let mut busy = Conn::connect(addr);
    send_slow_request(&mut busy, &server);
    child.signal(signal);

    let response = busy.response();
    assert_eq!(
        response.status(),
        200,
        "request in flight at the signal was not finished"
    );
    assert_eq!(response.body_text(), "slow done");
    let status = child
        .wait_timeout(Duration::from_secs(10))
        .expect("herdsman did not exit within 10 s of the signal");
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
}

#[test]
fn binary_stops_gracefully_on_sigterm() {
    run_binary_then_signal(libc::SIGTERM);
}

#[test]
fn binary_stops_gracefully_on_sigint() {
    run_binary_then_signal(libc::SIGINT);
}
