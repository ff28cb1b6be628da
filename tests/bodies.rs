//! Message bodies in both directions: Content-Length, chunked (possibly re-framed, content
//! identical), close-delimited responses, responses that never have a body (HEAD, 204, 304), and
//! large bodies that must arrive intact and be streamed rather than buffered whole.

mod common;

use std::time::Duration;

use common::*;

const MIB: u64 = 1024 * 1024;

/// Reads the answer of a server that checked an upload against its pattern
/// (`PatternCheck::report`) and asserts all `len` bytes arrived intact.
fn assert_upload_intact(client: &mut Conn, len: u64) {
    let response = client.response();
    assert_eq!(response.status(), 200);
    assert_eq!(response.body_text(), format!("{len} None"));
}

#[test]
fn content_length_request_body_reaches_the_server_intact() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let body = Pattern::bytes(1, 100_000);
    let mut request = format!(
        "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    let response = client.roundtrip(&request);
    assert_eq!(response.status(), 200);
    assert!(response.body == body, "echoed body differs");
    let received = server.requests();
    assert!(received[0].body == body, "server received a different body");
    assert_eq!(received[0].head.header("content-length"), Some("100000"));
}

#[test]
fn chunked_request_body_arrives_with_identical_content() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let big = Pattern::bytes(2, 4096);
    let mut request = b"POST /chunks HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
        1\r\nA\r\n\
        1a;name=value\r\nabcdefghijklmnopqrstuvwxyz\r\n\
        1000\r\n"
        .to_vec();
    request.extend_from_slice(&big);
    request.extend_from_slice(b"\r\n0\r\nX-Checksum: 42\r\n\r\n");
    let mut expected = b"Aabcdefghijklmnopqrstuvwxyz".to_vec();
    expected.extend_from_slice(&big);

    let response = client.roundtrip(&request);
    assert_eq!(response.status(), 200);
    assert!(response.body == expected, "echoed body differs");
    assert!(
        server.requests()[0].body == expected,
        "server decoded a different body"
    );
    // The message ended where it should: the connection carries the next request cleanly.
    let next = client.roundtrip(&get_request("/after", ""));
    assert_eq!(next.status(), 200);
    assert_eq!(next.header("x-target"), Some("/after"));
}

#[test]
fn transfer_coding_names_are_case_insensitive() {
    let server = Mock::echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n\
          4\r\nwiki\r\n5\r\npedia\r\n0\r\n\r\n",
    );
    assert_eq!(response.status(), 200);
    assert_eq!(response.body_text(), "wikipedia");
}

#[test]
fn response_with_both_length_and_chunked_is_read_as_chunked() {
    let server = Mock::raw_reply(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n\
          3\r\nabc\r\n0\r\n\r\n",
        Flow::KeepAlive,
    );
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(&get_request("/", ""));
    if response.status() == 502 {
        return; // Refusing the ambiguous response is also safe.
    }
    assert_eq!(response.status(), 200);
    assert!(
        !(response.head.has("content-length") && response.head.has("transfer-encoding")),
        "both framings forwarded to the client: {:?}",
        response.head.headers
    );
    assert_eq!(response.body_text(), "abc");
}

#[test]
fn chunked_response_body_reaches_the_client_with_identical_content() {
    let server = Mock::start(|ex| {
        ex.read_body()?;
        if ex.head.target() == "/chunked" {
            ex.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                  5\r\nhello\r\n\
                  1;ext=\"x\"\r\n \r\n\
                  A\r\n0123456789\r\n\
                  0\r\n\r\n",
            )?;
        } else {
            ex.respond(200, &[], b"plain")?;
        }
        Ok(Flow::KeepAlive)
    });
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(&get_request("/chunked", ""));
    assert_eq!(response.status(), 200);
    assert_eq!(response.body_text(), "hello 0123456789");
    let next = client.roundtrip(&get_request("/plain", ""));
    assert_eq!(next.body_text(), "plain");
}

fn close_delimited_server(status_line: &'static str) -> Mock {
    Mock::start(move |ex| {
        ex.read_body()?;
        let mut out =
            format!("{status_line}\r\nContent-Type: application/octet-stream\r\n\r\n").into_bytes();
        out.extend_from_slice(&Pattern::bytes(3, 200_000));
        ex.write(&out)?;
        Ok(Flow::Close)
    })
}

fn assert_close_delimited_body_arrives(server: &Mock) {
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let response = client.roundtrip(&get_request("/", ""));
    assert_eq!(response.status(), 200);
    assert!(response.head.first_line.starts_with("HTTP/1.1 200 "));
    assert_eq!(
        response.body.len(),
        200_000,
        "framing {:?}",
        response.framing
    );
    assert!(
        response.body == Pattern::bytes(3, 200_000),
        "body content differs"
    );
    if response.framing == Framing::Close {
        // Read to end of stream, the only way a close-delimited body can end; so herdsman must
        // not have promised to keep the connection open.
        assert!(!response.head.has_token("connection", "keep-alive"));
    }
}

#[test]
fn close_delimited_response_reaches_the_client_complete() {
    let server = close_delimited_server("HTTP/1.1 200 OK");
    assert_close_delimited_body_arrives(&server);
}

#[test]
fn http10_server_response_reaches_the_client_complete() {
    let server = close_delimited_server("HTTP/1.0 200 OK");
    assert_close_delimited_body_arrives(&server);
}

/// A server that answers `method`-requests for `/nobody` with `head_text` and no body, and
/// everything else with 200 "after".
fn bodiless_server(head_text: &'static str) -> Mock {
    Mock::start(move |ex| {
        ex.read_body()?;
        if ex.head.target() == "/nobody" {
            ex.write(head_text.as_bytes())?;
        } else {
            ex.respond(200, &[], b"after")?;
        }
        Ok(Flow::KeepAlive)
    })
}

/// Sends `request`, expects `status` with no body bytes, then checks the very next bytes on the
/// connection are the next response (nothing was sent as a body).
fn assert_no_body(server: &Mock, request: &[u8], head_request: bool, status: u16) {
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(request);
    let response = client
        .read_response(head_request)
        .unwrap_or_else(|e| panic!("reading the {status} response: {}", describe(&e)));
    assert_eq!(response.status(), status);
    assert!(response.body.is_empty());
    let next = client.roundtrip(&get_request("/next", ""));
    assert_eq!(
        next.head.first_line, "HTTP/1.1 200 OK",
        "bytes after the {status} response were not the next response"
    );
    assert_eq!(next.body_text(), "after");
}

#[test]
fn head_response_has_no_body() {
    let server = bodiless_server("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
    assert_no_body(
        &server,
        b"HEAD /nobody HTTP/1.1\r\nHost: t\r\n\r\n",
        true,
        200,
    );
    assert_eq!(server.heads()[0].first_line, "HEAD /nobody HTTP/1.1");
}

#[test]
fn no_content_response_has_no_body_even_with_content_length() {
    let server = bodiless_server("HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n");
    assert_no_body(&server, &get_request("/nobody", ""), false, 204);
}

#[test]
fn not_modified_response_has_no_body() {
    let server =
        bodiless_server("HTTP/1.1 304 Not Modified\r\nContent-Length: 1000\r\nETag: \"x\"\r\n\r\n");
    assert_no_body(
        &server,
        &get_request("/nobody", "If-None-Match: \"x\"\r\n"),
        false,
        304,
    );
}

#[test]
fn large_upload_is_streamed_through_intact() {
    const LEN: u64 = 64 * MIB;
    const FIRST: u64 = MIB;
    let server_saw_body = Gate::new();
    let saw = server_saw_body.clone();
    let server = Mock::start(move |ex| {
        let mut check = PatternCheck::new(4);
        let length = match ex.head.request_framing() {
            Framing::Length(n) => n,
            other => panic!("expected Content-Length framing, got {other:?}"),
        };
        ex.conn.read_exact_with(length, &mut |piece| {
            check.feed(piece);
            saw.open();
        })?;
        ex.respond(200, &[], check.report().as_bytes())?;
        Ok(Flow::KeepAlive)
    });
    // A body larger than `request_buffer_max` streams (a smaller one is read whole first).
    let proxy = Setup::new()
        .server("a", server.addr)
        .buffering("request_buffer_max", 32 * MIB)
        .start();
    let mut client = proxy.connect();
    client
        .send(format!("PUT /big HTTP/1.1\r\nHost: t\r\nContent-Length: {LEN}\r\n\r\n").as_bytes());

    let mut pattern = Pattern::new(4);
    let mut first = vec![0u8; FIRST as usize];
    pattern.fill(&mut first);
    client.send(&first);
    assert!(
        server_saw_body.wait(Duration::from_secs(10)),
        "the server saw no body byte while the client held back all but the first MiB: \
         the body is not streamed"
    );
    pattern
        .write_in_pieces(LEN - FIRST, 64 * 1024, &mut |piece| client.try_send(piece))
        .unwrap_or_else(|e| panic!("sending the rest of the body: {e}"));
    assert_upload_intact(&mut client, LEN);
}

#[test]
fn large_download_is_streamed_through_intact() {
    const LEN: u64 = 64 * MIB;
    const FIRST: u64 = MIB;
    let client_saw_body = Gate::new();
    let saw = client_saw_body.clone();
    let server = Mock::start(move |ex| {
        ex.read_body()?;
        ex.write(format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n").as_bytes())?;
        let mut pattern = Pattern::new(5);
        let mut first = vec![0u8; FIRST as usize];
        pattern.fill(&mut first);
        ex.write(&first)?;
        if !saw.wait(Duration::from_secs(10)) {
            // Not streamed: give up, which truncates the response and fails the test.
            return Ok(Flow::Reset);
        }
        pattern.write_in_pieces(LEN - FIRST, 64 * 1024, &mut |piece| ex.write(piece))?;
        Ok(Flow::KeepAlive)
    });
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(&get_request("/big", ""));
    let head = client.response_head();
    assert_eq!(head.status(), 200);
    assert_eq!(head.response_framing(false), Framing::Length(LEN));
    let mut check = PatternCheck::new(5);
    let result = client.read_exact_with(LEN, &mut |piece| {
        client_saw_body.open();
        check.feed(piece);
    });
    if let Err(e) = result {
        panic!(
            "download broke after {} bytes: {} (if the server gave up waiting, herdsman \
             held back the first MiB instead of streaming it)",
            check.received,
            describe(&e)
        );
    }
    assert_eq!(check.mismatch, None, "downloaded content differs");
}

#[test]
fn large_chunked_upload_arrives_intact() {
    const LEN: u64 = 32 * MIB;
    let server = Mock::start(|ex| {
        assert_eq!(ex.head.request_framing(), Framing::Chunked);
        let mut check = PatternCheck::new(6);
        ex.conn.read_chunked_with(&mut |piece| check.feed(piece))?;
        ex.respond(200, &[], check.report().as_bytes())?;
        Ok(Flow::KeepAlive)
    });
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(b"POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    let mut pattern = Pattern::new(6);
    let mut left = LEN;
    let mut size = 1usize;
    let mut piece = Vec::new();
    while left > 0 {
        // Chunk sizes from 1 byte up to about 100 KiB, so chunk boundaries land everywhere.
        let n = (size as u64).min(left) as usize;
        piece.resize(n, 0);
        pattern.fill(&mut piece);
        let mut out = format!("{n:x}\r\n").into_bytes();
        out.extend_from_slice(&piece);
        out.extend_from_slice(b"\r\n");
        client.send(&out);
        left -= n as u64;
        size = (size * 7 + 13) % 100_003 + 1;
    }
    client.send(b"0\r\n\r\n");
    assert_upload_intact(&mut client, LEN);
}

#[test]
fn large_chunked_download_arrives_intact() {
    const LEN: u64 = 64 * MIB;
    let server = Mock::start(|ex| {
        ex.read_body()?;
        ex.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
        Pattern::new(7).write_in_pieces(LEN, 32 * 1024 + 13, &mut |piece| {
            let mut out = format!("{:X}\r\n", piece.len()).into_bytes();
            out.extend_from_slice(piece);
            out.extend_from_slice(b"\r\n");
            ex.write(&out)
        })?;
        ex.write(b"0\r\n\r\n")?;
        Ok(Flow::KeepAlive)
    });
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(&get_request("/big", ""));
    let head = client.response_head();
    assert_eq!(head.status(), 200);
    let mut check = PatternCheck::new(7);
    let framing = head.response_framing(false);
    assert_ne!(
        framing,
        Framing::Close,
        "a chunked response became close-delimited"
    );
    client
        .read_body_with(framing, &mut |piece| check.feed(piece))
        .unwrap_or_else(|e| panic!("after {} bytes: {}", check.received, describe(&e)));
    assert_eq!(check.received, LEN);
    assert_eq!(check.mismatch, None, "downloaded content differs");
    // The response ended cleanly: the connection serves the next request.
    let next = client.roundtrip(&get_request("/small", ""));
    assert_eq!(next.status(), 200);
}
