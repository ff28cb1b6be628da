//! Header rewriting: what reaches the server (request line, client headers in order,
//! hop-by-hop headers removed, X-Forwarded-*), and what reaches the client (status line with the
//! server's reason, response headers minus hop-by-hop ones, server errors passed through).

mod common;

use common::*;

/// Name (lowercased) and value of every header the server received, except the ones herdsman
/// owns (X-Forwarded-*, and its own Connection header to the server).
fn end_to_end(head: &Head) -> Vec<(String, String)> {
    head.headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .filter(|(n, _)| !n.starts_with("x-forwarded-") && n != "connection")
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Sends `request` through herdsman to an echo server on a new connection, asserts a 200, and
/// returns the request heads the server received.
fn heads_forwarded(request: &[u8]) -> Vec<Head> {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let response = proxy.connect().roundtrip(request);
    assert_eq!(response.status(), 200);
    server.heads()
}

/// herdsman may send its own `Connection: keep-alive` or `close` to the server, but nothing the
/// client put there.
fn assert_own_connection_header(head: &Head) {
    for value in head.header_all("connection") {
        for token in value.split(',') {
            let token = token.trim().to_ascii_lowercase();
            assert!(
                token == "keep-alive" || token == "close",
                "client's Connection option {token:?} was forwarded: {:?}",
                head.headers
            );
        }
    }
}

#[test]
fn request_is_forwarded_with_client_headers_in_order_minus_hop_by_hop() {
    let heads = heads_forwarded(
        b"GET /path/x?q=1&r=%20 HTTP/1.1\r\n\
          Host: example.test\r\n\
          X-First: one\r\n\
          Connection: keep-alive, X-Secret\r\n\
          X-Secret: s\r\n\
          Keep-Alive: timeout=5\r\n\
          TE: trailers\r\n\
          Trailer: X-T\r\n\
          Proxy-Authorization: Basic abc\r\n\
          Proxy-Connection: keep-alive\r\n\
          Accept: */*\r\n\
          x-Mixed-case: Value With  Spaces\r\n\
          X-Repeated: 1\r\n\
          X-Repeated: 2\r\n\
          \r\n",
    );
    assert_eq!(heads.len(), 1);
    let head = &heads[0];
    assert_eq!(head.first_line, "GET /path/x?q=1&r=%20 HTTP/1.1");
    assert_eq!(
        end_to_end(head),
        pairs(&[
            ("host", "example.test"),
            ("x-first", "one"),
            ("accept", "*/*"),
            ("x-mixed-case", "Value With  Spaces"),
            ("x-repeated", "1"),
            ("x-repeated", "2"),
        ]),
        "raw head received: {:?}",
        String::from_utf8_lossy(&head.raw)
    );
    assert_own_connection_header(head);
    assert_eq!(head.header_all("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(head.header_all("x-forwarded-proto"), ["http"]);
    assert_eq!(head.header_all("x-forwarded-host"), ["example.test"]);
}

#[test]
fn hop_by_hop_header_names_match_case_insensitively() {
    let heads = heads_forwarded(
        b"GET / HTTP/1.1\r\n\
          HOST: Example.TEST\r\n\
          CONNECTION: X-Hop-Lower\r\n\
          x-hop-LOWER: v\r\n\
          KEEP-ALIVE: 5\r\n\
          te: trailers\r\n\
          proxy-AUTHORIZATION: x\r\n\
          X-Kept: yes\r\n\
          \r\n",
    );
    let head = &heads[0];
    assert_eq!(
        end_to_end(head),
        pairs(&[("host", "Example.TEST"), ("x-kept", "yes")]),
        "raw head received: {:?}",
        String::from_utf8_lossy(&head.raw)
    );
    assert_own_connection_header(head);
    assert_eq!(head.header_all("x-forwarded-host"), ["Example.TEST"]);
}

#[test]
fn x_forwarded_for_is_appended_and_proto_and_host_are_replaced() {
    let heads = heads_forwarded(
        b"GET / HTTP/1.1\r\nHost: site.test\r\n\
          X-Forwarded-For: 10.0.0.1, 10.0.0.2\r\n\
          Accept: */*\r\n\
          X-Forwarded-For: 10.0.0.3\r\n\
          X-Forwarded-Proto: https\r\n\
          X-Forwarded-Host: evil.test\r\n\r\n",
    );
    let head = &heads[0];
    assert_eq!(
        head.header_all("x-forwarded-for"),
        ["10.0.0.1, 10.0.0.2, 10.0.0.3, 127.0.0.1"]
    );
    assert_eq!(head.header_all("x-forwarded-proto"), ["http"]);
    assert_eq!(head.header_all("x-forwarded-host"), ["site.test"]);
}

#[test]
fn methods_and_targets_pass_through_unchanged() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let cases = [
        ("GET", "/"),
        ("PUT", "/items/42"),
        ("DELETE", "/items/42?force=true"),
        ("PATCH", "/a/b/../c"),
        ("OPTIONS", "/any"),
        ("PURGE", "/cache/%7Euser"),
    ];
    for (method, target) in cases {
        let request = format!("{method} {target} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
        let response = client.roundtrip(request.as_bytes());
        assert_eq!(response.status(), 200, "{method} {target}");
        assert_eq!(response.header("x-method"), Some(method));
        assert_eq!(response.header("x-target"), Some(target));
    }
    let lines: Vec<String> = server
        .heads()
        .iter()
        .map(|h| h.first_line.clone())
        .collect();
    let expected: Vec<String> = cases
        .iter()
        .map(|(m, t)| format!("{m} {t} HTTP/1.1"))
        .collect();
    assert_eq!(lines, expected);
}

#[test]
fn response_keeps_status_reason_and_end_to_end_headers() {
    let server = Mock::raw_reply(
        b"HTTP/1.1 299 Custom Reason Phrase\r\n\
          X-Resp: 1\r\n\
          Connection: X-Hop\r\n\
          X-Hop: h\r\n\
          Keep-Alive: timeout=5\r\n\
          Proxy-Connection: keep-alive\r\n\
          Set-Cookie: a=1\r\n\
          Set-Cookie: b=2\r\n\
          Content-Length: 2\r\n\
          \r\nok",
        Flow::KeepAlive,
    );
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(&get_request("/", ""));
    assert_eq!(
        response.head.first_line,
        "HTTP/1.1 299 Custom Reason Phrase"
    );
    assert_eq!(response.body_text(), "ok");
    assert_eq!(response.header("x-resp"), Some("1"));
    assert_eq!(response.head.header_all("set-cookie"), ["a=1", "b=2"]);
    for hop in ["x-hop", "keep-alive", "proxy-connection"] {
        assert!(
            !response.head.has(hop),
            "hop-by-hop {hop} reached the client: {:?}",
            response.head.headers
        );
    }
    assert!(!response.head.has_token("connection", "x-hop"));
}

#[test]
fn server_error_responses_pass_through_unchanged() {
    let server = Mock::raw_reply(
        b"HTTP/1.1 503 Busy Right Now\r\nContent-Length: 4\r\nRetry-After: 7\r\n\r\nbusy",
        Flow::KeepAlive,
    );
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(&get_request("/", ""));
    assert_eq!(response.head.first_line, "HTTP/1.1 503 Busy Right Now");
    assert_eq!(response.header("retry-after"), Some("7"));
    assert_eq!(response.body_text(), "busy");
    // A server's own error does not cost the client its connection.
    let again = client.roundtrip(&get_request("/", ""));
    assert_eq!(again.status(), 503);
}

#[test]
fn large_response_heads_pass_through() {
    // max_header_bytes limits requests only; a server may send big heads (cookies, CSP).
    let cookie = "c".repeat(30_000);
    let server = Mock::start(move |ex| {
        ex.read_body()?;
        ex.respond(200, &[("Set-Cookie", &cookie)], b"ok")?;
        Ok(Flow::KeepAlive)
    });
    let proxy = Setup::new()
        .limit("max_header_bytes", 4096)
        .server("a", server.addr)
        .start();
    let response = proxy.connect().roundtrip(&get_request("/", ""));
    assert_eq!(response.status(), 200);
    assert_eq!(response.header("set-cookie").map(str::len), Some(30_000));
    assert_eq!(response.body_text(), "ok");
}

#[test]
fn connection_header_cannot_strip_the_body_framing() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(
        b"POST /x HTTP/1.1\r\nHost: t\r\nConnection: Content-Length, Host\r\n\
          Content-Length: 5\r\n\r\nhello",
    );
    assert_eq!(response.status(), 200);
    assert_eq!(response.body_text(), "hello");
    let received = &server.requests()[0];
    assert_eq!(received.head.header("content-length"), Some("5"));
    assert_eq!(received.head.header("host"), Some("t"));
    // The connection is still in step: the next request is parsed as a request.
    let next = client.roundtrip(&get_request("/y", ""));
    assert_eq!(next.header("x-target"), Some("/y"));
}

#[test]
fn upgrade_header_is_dropped_from_requests_that_do_not_ask_to_upgrade() {
    let heads = heads_forwarded(
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: keep-alive\r\nUpgrade: websocket\r\n\r\n",
    );
    let head = &heads[0];
    assert!(
        !head.has("upgrade"),
        "Upgrade forwarded without Connection: upgrade: {:?}",
        head.headers
    );
}

#[test]
fn a_repeated_content_length_goes_on_once() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    for lengths in [
        "Content-Length: 2\r\nContent-Length: 2\r\n",
        "Content-Length: 2, 2\r\n",
    ] {
        let request = format!("POST /x HTTP/1.1\r\nHost: t\r\n{lengths}\r\nhi");
        let response = client.roundtrip(request.as_bytes());
        assert_eq!(
            (response.status(), response.body_text().as_str()),
            (200, "hi"),
            "{lengths:?}"
        );
        let received = server.requests().pop().expect("a request");
        assert_eq!(
            received.head.header_all("content-length"),
            ["2"],
            "{lengths:?}: raw head received: {:?}",
            String::from_utf8_lossy(&received.head.raw)
        );
    }
}

#[test]
fn an_absolute_form_target_goes_on_in_origin_form_with_its_host() {
    let heads =
        heads_forwarded(b"GET http://y.test/p?q=1 HTTP/1.1\r\nHost: x.test\r\nAccept: */*\r\n\r\n");
    let head = &heads[0];
    assert_eq!(head.first_line, "GET /p?q=1 HTTP/1.1");
    assert_eq!(
        end_to_end(head),
        pairs(&[("host", "y.test"), ("accept", "*/*")]),
        "raw head received: {:?}",
        String::from_utf8_lossy(&head.raw)
    );
    assert_eq!(head.header_all("x-forwarded-host"), ["y.test"]);
}

#[test]
fn a_later_http1_minor_version_is_read_and_forwarded_as_http11() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(b"GET /v HTTP/1.2\r\nHost: t\r\n\r\n");
    assert_eq!(response.status(), 200);
    assert_eq!(response.head.version(), "HTTP/1.1");
    // Read as HTTP/1.1: the connection stays open for the next request.
    let next = client.roundtrip(&get_request("/w", ""));
    assert_eq!(next.header("x-target"), Some("/w"));
    let lines: Vec<String> = server
        .heads()
        .iter()
        .map(|h| h.first_line.clone())
        .collect();
    assert_eq!(lines, ["GET /v HTTP/1.1", "GET /w HTTP/1.1"]);
}

/// Answers each request with the trailer fields of its chunked body, a `name: value` line each.
fn trailer_echo() -> Mock {
    Mock::start(|ex| {
        let mut body = Vec::new();
        let trailers = ex
            .conn
            .read_chunked_with(&mut |b| body.extend_from_slice(b))?;
        ex.record(body);
        let text: String = trailers
            .iter()
            .map(|(n, v)| format!("{n}: {v}\n"))
            .collect();
        ex.respond(200, &[], text.as_bytes())?;
        Ok(Flow::KeepAlive)
    })
}

#[test]
fn request_trailers_that_must_not_be_trailers_do_not_reach_the_server() {
    let server = trailer_echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    // The trailer section arrives in pieces, cut inside field lines: each line goes on, or not,
    // whole.
    client.send(
        b"POST /t HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Check",
    );
    for piece in [
        &b"sum: abc\r\nContent-Len"[..],
        b"gth: 100\r\nHost: evil.test\r\nIf-Match: *\r\nAuthorization: Basic eDp5\r\n",
        b"Transfer-Encoding: chunked\r\nServer-Timing: db;dur=5\r\n\r\n",
    ] {
        std::thread::sleep(std::time::Duration::from_millis(50));
        client.send(piece);
    }
    let response = client.response();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.body_text(),
        "X-Checksum: abc\nServer-Timing: db;dur=5\n"
    );
    assert_eq!(server.requests()[0].body, b"hello");
    // The connection is still in step.
    let next = client
        .roundtrip(b"POST /u HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_eq!((next.status(), next.body_text().as_str()), (200, ""));
}

#[test]
fn response_trailers_that_must_not_be_trailers_do_not_reach_the_client() {
    let server = Mock::raw_reply(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\
          X-Checksum: abc\r\nSet-Cookie: admin=1\r\nContent-Length: 3\r\nDate: today\r\n\
          Www-Authenticate: Basic\r\n\r\n",
        Flow::KeepAlive,
    );
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(&get_request("/", ""));
    let head = client.response_head();
    assert_eq!(head.status(), 200);
    let mut body = Vec::new();
    let trailers = client
        .read_chunked_with(&mut |b| body.extend_from_slice(b))
        .expect("a chunked body");
    assert_eq!(body, b"hello");
    assert_eq!(trailers, [("X-Checksum".to_string(), "abc".to_string())]);
    assert_eq!(client.roundtrip(&get_request("/", "")).body_text(), "hello");
}

#[test]
fn a_servers_other_codings_before_chunked_still_reach_the_client_framed_by_chunked() {
    let server = Mock::raw_reply(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        Flow::KeepAlive,
    );
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    for _ in 0..2 {
        let response = client.roundtrip(&get_request("/", ""));
        assert_eq!(response.header("transfer-encoding"), Some("gzip, chunked"));
        assert_eq!(response.body, b"abc");
    }
}
