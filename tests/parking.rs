//! Quiet keep-alive connections leave their tasks for the worker's parking lot: they are still
//! served when they speak again, still closed at `client_idle`, forgotten when the client goes,
//! and closed by a graceful stop.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Longer than herdsman's `PARK_AFTER` (100 ms), so a connection quiet this long is parked.
const QUIET: Duration = Duration::from_millis(900);

/// herdsman with `client_idle`, in front of a server named "a".
fn proxy_with_client_idle(client_idle: &str) -> (Mock, Proxy) {
    let server = Mock::named("a");
    let proxy = Setup::new()
        .server("a", server.addr)
        .timeout("client_idle", client_idle)
        .start();
    (server, proxy)
}

/// One connection that made a request and then waited in the parking lot.
fn parked_connection(proxy: &Proxy) -> Conn {
    let mut client = proxy.connect();
    assert_eq!(client.roundtrip(&get_request("/", "")).status(), 200);
    assert!(
        eventually(Duration::from_secs(3), || proxy.parked() == 1),
        "a connection quiet for {QUIET:?} was not parked"
    );
    client
}

#[test]
fn a_quiet_connection_is_parked_and_served_when_it_speaks_again() {
    let server = Mock::echo();
    let proxy = Setup::new()
        .server("echo", server.addr)
        .timeout("client_idle", "30s")
        .start();
    let mut client = proxy.connect();
    assert_eq!(client.roundtrip(&get_request("/before", "")).status(), 200);
    assert_eq!(
        proxy.parked(),
        0,
        "a connection that just spoke is not parked"
    );
    assert!(
        eventually(Duration::from_secs(3), || proxy.parked() == 1),
        "a connection quiet for {QUIET:?} was not parked"
    );
    assert_eq!(
        proxy.active_connections(),
        1,
        "a parked connection still counts as open"
    );
    // Two pipelined requests, one with a body, in one write: both answered, in order.
    client.send(
        b"GET /after HTTP/1.1\r\nHost: test.local\r\n\r\n\
          POST /upload HTTP/1.1\r\nHost: test.local\r\nContent-Length: 5\r\n\r\nhello",
    );
    let first = client.response();
    assert_eq!(first.status(), 200);
    assert_eq!(first.header("X-Target"), Some("/after"));
    let second = client.response();
    assert_eq!(second.status(), 200);
    assert_eq!(second.header("X-Target"), Some("/upload"));
    assert_eq!(second.body_text(), "hello");
    assert_eq!(proxy.parked(), 0, "a connection that spoke left the lot");
}

#[test]
fn a_parked_connection_is_closed_at_the_idle_timeout() {
    let (_server, proxy) = proxy_with_client_idle("1500ms");
    let answered = Instant::now();
    let mut client = parked_connection(&proxy);
    assert!(
        client.closes_within(Duration::from_secs(5)),
        "a parked connection outlived client_idle"
    );
    let lived = answered.elapsed();
    assert!(
        lived >= Duration::from_millis(1400) && lived < Duration::from_millis(2500),
        "closed {lived:?} after its last response; client_idle is 1.5 s"
    );
    assert!(eventually(Duration::from_secs(2), || proxy.parked() == 0
        && proxy.active_connections() == 0));
}

#[test]
fn a_parked_connection_the_client_closes_is_forgotten() {
    let (_server, proxy) = proxy_with_client_idle("30s");
    let mut clients: Vec<Conn> = (0..20).map(|_| proxy.connect()).collect();
    for client in &mut clients {
        assert_eq!(client.roundtrip(&get_request("/", "")).status(), 200);
    }
    std::thread::sleep(QUIET);
    assert!(eventually(Duration::from_secs(3), || proxy.parked() == 20));
    clients.truncate(5);
    assert!(
        eventually(Duration::from_secs(3), || proxy.parked() == 5
            && proxy.active_connections() == 5),
        "parked {} active {} after 15 of 20 parked clients closed",
        proxy.parked(),
        proxy.active_connections()
    );
    for client in &mut clients {
        assert_eq!(client.roundtrip(&get_request("/", "")).status(), 200);
    }
}

#[test]
fn a_graceful_stop_closes_silent_parked_connections() {
    let (_server, proxy) = proxy_with_client_idle("30s");
    let mut client = parked_connection(&proxy);
    let stopping = Instant::now();
    proxy.stop();
    assert!(
        client.closes_within(Duration::from_secs(2)),
        "a parked connection stayed open through a graceful stop"
    );
    assert!(stopping.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_request_a_parked_connection_sends_as_the_stop_begins_is_served() {
    let (_server, proxy) = proxy_with_client_idle("30s");
    let mut client = parked_connection(&proxy);
    proxy.stop();
    // Sent right after the stop began: it meets the last call, not a close.
    let response = client.roundtrip(&get_request("/last", ""));
    assert_eq!(response.status(), 200);
    assert!(response.says_close(), "{:?}", response.head.headers);
    client.expect_closed();
}
