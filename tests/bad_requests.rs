//! Bad client input: each case gets its status (400, 408, 413, 431, 501, 505) with a short
//! plain-text body, the connection is closed, and the request never reaches a server.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// An echo server behind herdsman configured by `setup`.
fn echo_behind(setup: Setup) -> (Mock, Proxy) {
    let server = Mock::echo();
    let proxy = setup.server("a", server.addr).start();
    (server, proxy)
}

/// Sends `request` on a new connection and asserts an error response with `code`, then close.
fn assert_rejected(proxy: &Proxy, request: &[u8], code: u16, case: &str) {
    let mut client = proxy.connect();
    client.send(request);
    let response = client
        .read_response(false)
        .unwrap_or_else(|e| panic!("{case}: no {code} response: {}", describe(&e)));
    assert_eq!(
        response.status(),
        code,
        "{case}: got {:?}",
        response.head.first_line
    );
    assert_error_response(&response, code);
    assert!(
        response.says_close(),
        "{case}: the error response should say Connection: close; headers {:?}",
        response.head.headers
    );
    let rest = client.read_until_closed();
    assert!(
        rest.is_empty(),
        "{case}: {} bytes after the error response: {:?}",
        rest.len(),
        String::from_utf8_lossy(&rest)
    );
}

/// Asserts the server never received a byte.
fn assert_nothing_forwarded(server: &Mock) {
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        server.bytes_received(),
        0,
        "a rejected request reached the server: {:?}",
        server.heads()
    );
}

fn check_all(cases: &[(&str, &[u8])], code: u16) {
    let (server, proxy) = echo_behind(Setup::new());
    for (case, request) in cases {
        assert_rejected(&proxy, request, code, case);
    }
    assert_nothing_forwarded(&server);
}

#[test]
fn malformed_request_line_is_400() {
    check_all(
        &[
            ("no target or version", b"GET\r\nHost: t\r\n\r\n"),
            (
                "text after the version",
                b"GET / HTTP/1.1 extra\r\nHost: t\r\n\r\n",
            ),
            (
                "space inside the target",
                b"GET /a b HTTP/1.1\r\nHost: t\r\n\r\n",
            ),
            ("bad method character", b"G(T / HTTP/1.1\r\nHost: t\r\n\r\n"),
            ("garbage", b"\x16\x03\x01\x02\x00 garbage\r\n\r\n"),
            ("not HTTP", b"GET / FTP/1.1\r\nHost: t\r\n\r\n"),
        ],
        400,
    );
}

#[test]
fn malformed_header_line_is_400() {
    check_all(
        &[
            (
                "no colon",
                b"GET / HTTP/1.1\r\nHost: t\r\nJustAName\r\n\r\n",
            ),
            (
                "empty name",
                b"GET / HTTP/1.1\r\nHost: t\r\n: value\r\n\r\n",
            ),
        ],
        400,
    );
}

#[test]
fn obs_fold_is_400() {
    check_all(
        &[
            (
                "continuation with a space",
                b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n",
            ),
            (
                "continuation with a tab",
                b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n\tb\r\n\r\n",
            ),
        ],
        400,
    );
}

#[test]
fn invalid_characters_in_a_header_are_400() {
    check_all(
        &[
            (
                "@ in name",
                b"GET / HTTP/1.1\r\nHost: t\r\nBad@Name: x\r\n\r\n",
            ),
            (
                "space in name",
                b"GET / HTTP/1.1\r\nHost: t\r\nX Y: z\r\n\r\n",
            ),
            (
                "space before colon",
                b"GET / HTTP/1.1\r\nHost: t\r\nX-A : b\r\n\r\n",
            ),
            (
                "NUL in value",
                b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n",
            ),
        ],
        400,
    );
}

#[test]
fn http11_request_without_exactly_one_host_is_400() {
    check_all(
        &[
            ("no Host", b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"),
            (
                "two Hosts",
                b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
            ),
        ],
        400,
    );
}

#[test]
fn content_length_with_transfer_encoding_is_400() {
    check_all(
        &[
            (
                "CL then TE",
                b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\
                  Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            ),
            (
                "TE then CL",
                b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\
                  Content-Length: 5\r\n\r\n0\r\n\r\n",
            ),
        ],
        400,
    );
}

#[test]
fn differing_content_lengths_are_400() {
    check_all(
        &[
            (
                "two lines",
                b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
            ),
            (
                "one list",
                b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 6\r\n\r\nhello!",
            ),
        ],
        400,
    );
}

#[test]
fn invalid_content_length_is_400() {
    check_all(
        &[
            (
                "letters",
                b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n",
            ),
            (
                "negative",
                b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
            ),
            (
                "plus sign",
                b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\nhello",
            ),
        ],
        400,
    );
}

#[test]
fn transfer_encoding_not_ending_in_chunked_is_400() {
    check_all(
        &[
            (
                "gzip only",
                b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nhello",
            ),
            (
                "chunked then gzip",
                b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
            ),
            (
                "chunked then gzip on two lines",
                b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\
                  Transfer-Encoding: gzip\r\n\r\n0\r\n\r\n",
            ),
        ],
        400,
    );
}

#[test]
fn transfer_codings_other_than_chunked_are_501() {
    check_all(
        &[
            (
                "gzip before chunked",
                b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
                  0\r\n\r\n",
            ),
            (
                "gzip and chunked on two lines",
                b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\
                  Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            ),
            (
                "chunked with a parameter",
                b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked;q=1\r\n\r\n\
                  0\r\n\r\n",
            ),
        ],
        501,
    );
}

#[test]
fn userinfo_and_misplaced_target_forms_are_400() {
    check_all(
        &[
            ("userinfo in Host", b"GET / HTTP/1.1\r\nHost: a@x\r\n\r\n"),
            (
                "userinfo in an absolute-form target",
                b"GET http://a@x/ HTTP/1.1\r\nHost: x\r\n\r\n",
            ),
            (
                "asterisk-form for GET",
                b"GET * HTTP/1.1\r\nHost: t\r\n\r\n",
            ),
            (
                "a scheme this proxy cannot serve",
                b"GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
            ),
            (
                "absolute-form without a host",
                b"GET http:///a HTTP/1.1\r\nHost: x\r\n\r\n",
            ),
            (
                "a target in no form",
                b"GET a/b HTTP/1.1\r\nHost: t\r\n\r\n",
            ),
        ],
        400,
    );
}

#[test]
fn http_major_versions_other_than_1_are_505() {
    check_all(
        &[
            ("HTTP/2.0", b"GET / HTTP/2.0\r\nHost: t\r\n\r\n"),
            ("HTTP/0.9", b"GET / HTTP/0.9\r\nHost: t\r\n\r\n"),
            ("HTTP/3.0", b"GET / HTTP/3.0\r\nHost: t\r\n\r\n"),
        ],
        505,
    );
}

#[test]
fn bad_chunk_framing_never_completes_a_request_at_the_server() {
    let cases: [(&str, &[u8]); 3] = [
        ("non-hex size", b"zz\r\nhello\r\n0\r\n\r\n"),
        ("data longer than its size", b"1\r\nabc\r\n0\r\n\r\n"),
        (
            "size overflows",
            b"fffffffffffffffffffff\r\nab\r\n0\r\n\r\n",
        ),
    ];
    let (server, proxy) = echo_behind(Setup::new());
    for (case, body) in cases {
        let mut client = proxy.connect();
        let mut request =
            b"POST /chunks HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        request.extend_from_slice(body);
        client.send(&request);
        // Either a 400 and close, or just a close (the head may already be on its way to the
        // server when the bad chunk is seen) — never a response from the server.
        match client.read_response(false) {
            Ok(response) => {
                assert_error_response(&response, 400);
                client.read_until_closed();
            }
            Err(e) => assert!(
                !is_timeout(&e),
                "{case}: neither a 400 nor a close within {IO_TIMEOUT:?}"
            ),
        }
        thread::sleep(Duration::from_millis(200));
        assert!(
            server.requests().is_empty(),
            "{case}: the server received a complete request: {:?}",
            server.requests()
        );
    }
}

#[test]
fn header_section_over_max_header_bytes_is_431() {
    let (server, proxy) = echo_behind(Setup::new().limit("max_header_bytes", 4096));

    // Under the limit: fine.
    let small = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Fill: {}\r\n\r\n",
        "a".repeat(3000)
    );
    let response = proxy.connect().roundtrip(small.as_bytes());
    assert_eq!(
        response.status(),
        200,
        "a 3 KB head is under a 4096-byte limit"
    );
    let before = server.bytes_received();

    for (case, request) in [
        (
            "one long header",
            format!(
                "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
                "a".repeat(8000)
            ),
        ),
        (
            "many headers",
            format!(
                "GET / HTTP/1.1\r\nHost: t\r\n{}\r\n",
                (0..400)
                    .map(|i| format!("X-H{i}: v\r\n"))
                    .collect::<String>()
            ),
        ),
    ] {
        assert_rejected(&proxy, request.as_bytes(), 431, case);
    }
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        server.bytes_received(),
        before,
        "an oversized head reached the server"
    );
}

#[test]
fn body_over_max_body_bytes_is_413() {
    let (server, proxy) = echo_behind(Setup::new().limit("max_body_bytes", 1000));

    let mut exact = b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n".to_vec();
    exact.extend_from_slice(&[b'x'; 1000]);
    let response = proxy.connect().roundtrip(&exact);
    assert_eq!(
        response.status(),
        200,
        "a body of exactly max_body_bytes is allowed"
    );
    let before = server.bytes_received();

    assert_rejected(
        &proxy,
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2000\r\n\r\n",
        413,
        "Content-Length over the limit",
    );
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        server.bytes_received(),
        before,
        "an oversized request reached the server"
    );
}

#[test]
fn slow_request_head_gets_408_then_close() {
    let (server, proxy) = echo_behind(Setup::new().timeout("client_header", "300ms"));
    let mut client = proxy.connect();
    let started = Instant::now();
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\n");
    let response = client
        .read_response(false)
        .unwrap_or_else(|e| panic!("no 408: {}", describe(&e)));
    let waited = started.elapsed();
    assert_error_response(&response, 408);
    assert!(
        waited >= Duration::from_millis(250),
        "408 after only {waited:?}; client_header is 300ms"
    );
    assert!(waited < Duration::from_secs(3), "408 only after {waited:?}");
    client.expect_closed();
    assert_nothing_forwarded(&server);
}

#[test]
fn head_dripped_byte_by_byte_still_times_out() {
    let (server, proxy) = echo_behind(Setup::new().timeout("client_header", "300ms"));
    let mut client = proxy.connect();
    let mut writer = client.stream.try_clone().unwrap();
    let started = Instant::now();
    // One byte every 50 ms: never idle for long, but the head takes far longer than 300ms.
    let dripper = thread::spawn(move || {
        use std::io::Write;
        let head = format!(
            "GET / HTTP/1.1\r\nHost: t\r\nX-Slow: {}\r\n\r\n",
            "s".repeat(200)
        );
        for byte in head.bytes() {
            if writer.write_all(&[byte]).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
    });
    let response = client
        .read_response(false)
        .unwrap_or_else(|e| panic!("no 408: {}", describe(&e)));
    assert_error_response(&response, 408);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "client_header bounds the whole head, yet 408 came after {:?}",
        started.elapsed()
    );
    client.read_until_closed();
    let _ = client.stream.shutdown(std::net::Shutdown::Both);
    dripper.join().unwrap();
    assert_nothing_forwarded(&server);
}

#[test]
fn client_stalling_its_body_is_cut_after_client_idle() {
    let (server, proxy) = echo_behind(Setup::new().timeout("client_idle", "300ms"));
    let mut client = proxy.connect();
    client.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789");
    let started = Instant::now();
    // A 408 may come first (nothing was forwarded yet) or just the close.
    client.read_until_closed();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a stalled body held the connection for {:?} (client_idle 300ms)",
        started.elapsed()
    );
    thread::sleep(Duration::from_millis(200));
    assert!(
        server.requests().is_empty(),
        "the server got a complete request from a 10-byte body: {:?}",
        server.requests()
    );
}

/// A GET with a Host and `fields` more fields.
fn get_with_fields(fields: usize) -> String {
    let lines: String = (0..fields).map(|i| format!("X-H{i}: v\r\n")).collect();
    format!("GET / HTTP/1.1\r\nHost: t\r\n{lines}\r\n")
}

#[test]
fn a_head_that_forwarded_would_pass_the_field_limit_is_431_and_what_goes_passes_a_second_tier() {
    // herdsman in front of herdsman, both with the same limits (128 fields a head), and an echo
    // server behind the second tier that counts what arrives.
    let server = Mock::echo();
    let second = Setup::new().server("a", server.addr).start();
    let first = Setup::new().server("tier2", second.addr).start();
    // 128 fields parse; forwarded with X-Forwarded-For, -Proto and -Host they would be 130,
    // which no server with herdsman's limits (or gunicorn's 100) would take: refused at the
    // edge, where the client is told, and nothing goes on.
    let before = server.bytes_received();
    assert_rejected(
        &second,
        get_with_fields(127).as_bytes(),
        431,
        "127 fields and Host",
    );
    thread::sleep(Duration::from_millis(200));
    assert_eq!(server.bytes_received(), before, "the refused head went on");
    // With room for what herdsman adds, it passes both tiers (the second replaces the first's
    // X-Forwarded-* rather than adding to them).
    let response = first.connect().roundtrip(get_with_fields(124).as_bytes());
    assert_eq!(response.status(), 200, "{:?}", response.head.first_line);
    let head = server.heads().pop().unwrap();
    assert_eq!(head.headers.len(), 128, "{:?}", head.headers);
    assert_eq!(head.header("x-forwarded-for"), Some("127.0.0.1, 127.0.0.1"));
}
