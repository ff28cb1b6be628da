//! Connection reuse on both sides: keep-alive clients, reused server connections, pipelining,
//! `Connection: close` from either side, HTTP/1.0 clients, `Expect: 100-continue`, and the
//! one retry of an idempotent request on a server connection that went stale.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn sequential_requests_on_one_connection_reuse_a_server_connection() {
    let server = Mock::named("a");
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    for i in 0..10 {
        let response = client.roundtrip(&get_request(&format!("/r{i}"), ""));
        assert_eq!(response.status(), 200, "request {i}");
        assert_eq!(response.body_text(), "a");
        assert!(
            !response.says_close(),
            "request {i} answered with Connection: close"
        );
    }
    assert_eq!(server.requests().len(), 10);
    assert!(
        server.connections() <= 2,
        "10 requests on one client connection opened {} server connections",
        server.connections()
    );
}

#[test]
fn server_connections_are_reused_across_client_connections() {
    let server = Mock::named("a");
    let proxy = Setup::new().workers(2).server("a", server.addr).start();
    for i in 0..20 {
        let response = proxy.get(&format!("/r{i}"));
        assert_eq!(response.status(), 200, "request {i}");
    }
    assert_eq!(server.requests().len(), 20);
    // Idle server connections are kept per worker: two workers need about two.
    assert!(
        server.connections() <= 4,
        "20 sequential client connections opened {} server connections",
        server.connections()
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = Mock::echo();
    let proxy = Setup::new().server("echo", server.addr).start();
    let mut client = proxy.connect();
    client.send(
        b"GET /first HTTP/1.1\r\nHost: test.local\r\n\r\n\
          POST /second HTTP/1.1\r\nHost: test.local\r\nContent-Length: 5\r\n\r\nhello\
          GET /third HTTP/1.1\r\nHost: test.local\r\n\r\n\
          POST /fourth HTTP/1.1\r\nHost: test.local\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    );
    let expected = [
        ("/first", ""),
        ("/second", "hello"),
        ("/third", ""),
        ("/fourth", "abc"),
    ];
    for (target, body) in expected {
        let response = client.response();
        assert_eq!(response.status(), 200, "{target}");
        assert_eq!(
            response.header("x-target"),
            Some(target),
            "responses out of order"
        );
        assert_eq!(response.body_text(), body, "{target}");
    }
    // And the connection is still usable afterwards.
    let response = client.roundtrip(&get_request("/fifth", ""));
    assert_eq!(response.header("x-target"), Some("/fifth"));
}

#[test]
fn client_connection_close_gets_the_response_then_close() {
    let server = Mock::named("a");
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(&get_request("/", "Connection: close\r\n"));
    assert_eq!(response.status(), 200);
    assert_eq!(response.body_text(), "a");
    assert!(
        response.says_close(),
        "herdsman closes, so it must say Connection: close; headers {:?}",
        response.head.headers
    );
    client.expect_closed();
}

#[test]
fn server_connection_close_moves_the_next_request_to_a_new_server_connection() {
    let server = Mock::start(|ex| {
        ex.read_body()?;
        let body = format!("conn {}", ex.conn_id);
        ex.respond(200, &[("Connection", "close")], body.as_bytes())?;
        Ok(Flow::Close)
    });
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let first = client.roundtrip(&get_request("/1", ""));
    assert_eq!(first.status(), 200);
    assert_eq!(first.body_text(), "conn 0");
    assert!(
        !first.says_close(),
        "the server's Connection: close is hop-by-hop; the client connection can stay open"
    );
    let second = client.roundtrip(&get_request("/2", ""));
    assert_eq!(second.status(), 200);
    assert_eq!(second.body_text(), "conn 1");
    assert_eq!(server.connections(), 2);
}

#[test]
fn http10_client_with_keep_alive_stays_open() {
    let server = Mock::named("a");
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    for i in 0..3 {
        let response = client.roundtrip(
            format!("GET /old{i} HTTP/1.0\r\nHost: test.local\r\nConnection: keep-alive\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(response.status(), 200, "request {i}");
        assert!(response.head.first_line.starts_with("HTTP/1.1 200 "));
        assert_eq!(response.body_text(), "a");
        assert!(
            response.head.has_token("connection", "keep-alive"),
            "HTTP/1.0 keep-alive must be confirmed; headers {:?}",
            response.head.headers
        );
        assert_eq!(response.header("content-length"), Some("1"));
    }
    let forwarded = server.heads();
    assert_eq!(forwarded.len(), 3);
    assert_eq!(forwarded[0].first_line, "GET /old0 HTTP/1.1");
}

#[test]
fn http10_client_without_keep_alive_gets_an_unchunked_body_then_close() {
    let server = Mock::raw_reply(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
          6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n",
        Flow::KeepAlive,
    );
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(b"GET / HTTP/1.0\r\nHost: test.local\r\n\r\n");
    assert_eq!(response.status(), 200);
    assert!(
        !response.head.has("transfer-encoding"),
        "an HTTP/1.0 client cannot read chunked: {:?}",
        response.head.headers
    );
    assert_eq!(response.body_text(), "hello world");
    client.expect_closed();
}

#[test]
fn http10_keep_alive_client_gets_close_when_the_body_has_no_length() {
    let server = Mock::raw_reply(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        Flow::KeepAlive,
    );
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response =
        client.roundtrip(b"GET / HTTP/1.0\r\nHost: test.local\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(response.status(), 200);
    assert!(
        !response.head.has("transfer-encoding"),
        "an HTTP/1.0 client cannot read chunked: {:?}",
        response.head.headers
    );
    assert!(
        !response.head.has_token("connection", "keep-alive"),
        "without a length the body can only end by closing, so keep-alive cannot be promised"
    );
    assert_eq!(response.body_text(), "abc");
    client.expect_closed();
}

#[test]
fn pipelined_request_after_connection_close_is_not_served() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(
        b"GET /last HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n\
          GET /too-late HTTP/1.1\r\nHost: test.local\r\n\r\n",
    );
    let response = client.response();
    assert_eq!(response.header("x-target"), Some("/last"));
    assert!(response.says_close());
    client.expect_closed();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        server.targets(),
        ["/last"],
        "a request after Connection: close was forwarded"
    );
}

/// A client that said `Connection: close` and sent no body has nothing more to send once its
/// answer is out: herdsman closes at once (as nginx does) instead of lingering for the client's
/// own close, which held the connection for up to half a second and cost a shutdown, a timer and
/// a read. The client keeps its side open here, as a slow one would.
#[test]
fn a_connection_the_client_asked_to_close_closes_at_once() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(b"GET /bye HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n");
    let response = client.response();
    assert_eq!(response.header("x-target"), Some("/bye"));
    assert!(response.says_close());
    client.expect_closed();
    assert!(
        eventually(Duration::from_millis(200), || proxy.active_connections()
            == 0),
        "herdsman still holds the connection ({} active) after answering a client that asked to \
         close it",
        proxy.active_connections()
    );
}

/// Where the client may still be sending, the close still lingers: after a request with a
/// body (whose answer may have come before the body's end, so that more of it is on the way),
/// herdsman reads and discards for a moment before it lets go, lest unread bytes reset the
/// connection under the answer.
#[test]
fn a_close_after_a_request_body_still_lingers() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(
        b"POST /upload HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\
          Content-Length: 5\r\n\r\nhello",
    );
    let response = client.response();
    assert!(response.says_close());
    client.expect_closed();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(proxy.active_connections(), 1, "the close did not linger");
    assert!(eventually(Duration::from_secs(2), || proxy
        .active_connections()
        == 0));
}

#[test]
fn expect_100_continue_relays_the_interim_response_before_the_body() {
    let server = Mock::continuing_echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(
        b"POST /upload HTTP/1.1\r\nHost: test.local\r\nContent-Length: 11\r\n\
          Expect: 100-continue\r\n\r\n",
    );
    let interim = client.response();
    assert_eq!(interim.head.first_line, "HTTP/1.1 100 Continue");
    assert!(interim.body.is_empty());
    client.send(b"hello world");
    let last = client.response();
    assert_eq!(last.status(), 200);
    assert_eq!(last.body_text(), "hello world");
    assert_eq!(server.requests()[0].body, b"hello world");
}

/// Answers the first request on each connection, then closes the connection as soon as the
/// next request head arrives, without a byte of response.
fn server_that_drops_reused_connections() -> Mock {
    Mock::start(|ex| {
        if ex.index > 0 {
            return Ok(Flow::Close);
        }
        ex.read_body()?;
        let body = format!("conn {}", ex.conn_id);
        ex.respond(200, &[], body.as_bytes())?;
        Ok(Flow::KeepAlive)
    })
}

#[test]
fn idempotent_request_on_a_stale_server_connection_is_retried_on_a_fresh_one() {
    let server = server_that_drops_reused_connections();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let first = client.roundtrip(&get_request("/one", ""));
    assert_eq!(first.body_text(), "conn 0");
    let second = client.roundtrip(&get_request("/two", ""));
    assert_eq!(
        second.status(),
        200,
        "the GET failed on a reused connection before any response byte; it should be retried"
    );
    assert_eq!(second.body_text(), "conn 1");
    assert_eq!(server.connections(), 2);
    assert_eq!(server.targets(), ["/one", "/two", "/two"]);
}

#[test]
fn non_idempotent_request_on_a_stale_server_connection_is_not_retried() {
    let server = server_that_drops_reused_connections();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let first = client.roundtrip(&get_request("/one", ""));
    assert_eq!(first.body_text(), "conn 0");
    let second = client
        .roundtrip(b"POST /order HTTP/1.1\r\nHost: test.local\r\nContent-Length: 5\r\n\r\nhello");
    assert_error_response(&second, 502);
    std::thread::sleep(Duration::from_millis(200));
    let posts = server
        .heads()
        .iter()
        .filter(|h| h.method() == "POST")
        .count();
    assert_eq!(
        posts, 1,
        "a POST that may have reached the server must not be sent again"
    );
}

#[test]
fn idle_client_connection_is_closed_after_client_idle() {
    let server = Mock::named("a");
    let proxy = Setup::new()
        .timeout("client_idle", "300ms")
        .server("a", server.addr)
        .start();
    let mut client = proxy.connect();
    let response = client.roundtrip(&get_request("/", ""));
    assert_eq!(response.status(), 200);
    assert!(
        client.closes_within(Duration::from_secs(3)),
        "a keep-alive connection silent for longer than client_idle (300ms) stayed open 3 s"
    );
}

#[test]
fn idle_server_connection_is_closed_after_backend_idle() {
    let server = Mock::named("a");
    let proxy = Setup::new()
        .timeout("backend_idle", "300ms")
        .server("a", server.addr)
        .start();
    let mut client = proxy.connect();
    assert_eq!(client.roundtrip(&get_request("/", "")).status(), 200);
    assert_eq!(server.connections(), 1);
    assert!(
        eventually(Duration::from_secs(3), || server.closed_by_peer() == 1),
        "an idle server connection stayed open 3 s with backend_idle = 300ms"
    );
    // The client's own connection is unaffected and the next request opens a fresh one.
    assert_eq!(client.roundtrip(&get_request("/", "")).status(), 200);
    assert_eq!(server.connections(), 2);
}

#[test]
fn server_rejecting_an_expect_100_request_is_heard_before_the_body_is_sent() {
    let server = Mock::start(|ex| {
        ex.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 6\r\n\r\nlogin!")?;
        Ok(Flow::Close)
    });
    // Streaming uploads: with request buffering, herdsman answers 100 Continue itself and the
    // server hears the request once the body is whole (as behind nginx).
    let proxy = Setup::new()
        .server("a", server.addr)
        .buffering("request_buffer_memory", 0)
        .start();
    let mut client = proxy.connect();
    client.send(
        b"PUT /big HTTP/1.1\r\nHost: test.local\r\nContent-Length: 1000000\r\n\
          Expect: 100-continue\r\n\r\n",
    );
    let response = client.response();
    assert_eq!(response.head.first_line, "HTTP/1.1 401 Unauthorized");
    assert_eq!(response.body_text(), "login!");
}

#[test]
fn informational_responses_are_relayed_before_the_final_one() {
    let server = Mock::raw_reply(
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n\
          HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        Flow::KeepAlive,
    );
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(&get_request("/", ""));
    let hints = client.response();
    assert_eq!(hints.head.first_line, "HTTP/1.1 103 Early Hints");
    assert_eq!(hints.header("link"), Some("</style.css>; rel=preload"));
    let last = client.response();
    assert_eq!(last.status(), 200);
    assert_eq!(last.body_text(), "ok");
}

#[test]
fn abandoned_request_never_leaks_its_response_to_the_next_client() {
    let server = Mock::start(|ex| {
        ex.read_body()?;
        if ex.head.target() == "/slow" {
            std::thread::sleep(Duration::from_millis(300));
        }
        let body = ex.head.target().to_string();
        ex.respond(200, &[], body.as_bytes())?;
        Ok(Flow::KeepAlive)
    });
    // One worker, so every request shares the same idle server connections.
    let proxy = Setup::new().workers(1).server("a", server.addr).start();
    let mut quitter = proxy.connect();
    quitter.send(&get_request("/slow", ""));
    assert!(server.wait_for_heads(1, Duration::from_secs(5)));
    drop(quitter);
    std::thread::sleep(Duration::from_millis(500));

    let mut client = proxy.connect();
    for i in 0..5 {
        let target = format!("/n{i}");
        let response = client.roundtrip(&get_request(&target, ""));
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.body_text(),
            target,
            "request {i} got another request's response"
        );
    }
}

#[test]
fn many_concurrent_keep_alive_clients_are_all_served() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let addr = proxy.addr;
    let clients: Vec<_> = (0..50)
        .map(|c| {
            std::thread::spawn(move || {
                let mut conn = Conn::connect(addr);
                for i in 0..10 {
                    let target = format!("/c{c}/r{i}");
                    let body = format!("body of {target}");
                    let request = format!(
                        "POST {target} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let response = conn.roundtrip(request.as_bytes());
                    assert_eq!(response.status(), 200, "{target}");
                    assert_eq!(response.header("x-target"), Some(target.as_str()));
                    assert_eq!(response.body_text(), body);
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("a client failed");
    }
    assert_eq!(server.requests().len(), 500);
}
