//! Upgrade (WebSocket-style) tunnelling: after the server's 101, bytes flow both ways until
//! either side closes; an upgrade the server declines stays plain HTTP.

mod common;

use std::io::Write;
use std::thread;

use common::*;

const UPGRADE_REQUEST: &[u8] = b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n\
    Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
    Sec-WebSocket-Version: 13\r\n\r\n";

const SWITCHING: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";

/// Upgrades when asked, then echoes every byte until the peer closes, then closes.
fn echo_upgrade_server() -> Mock {
    Mock::start(|ex| {
        if !ex.head.has("upgrade") {
            ex.read_body()?;
            ex.respond(200, &[], b"plain")?;
            return Ok(Flow::KeepAlive);
        }
        ex.write(SWITCHING)?;
        loop {
            let data = ex.conn.read_some()?;
            if data.is_empty() {
                return Ok(Flow::Close);
            }
            ex.write(&data)?;
        }
    })
}

fn upgrade(client: &mut Conn) -> Response {
    client.send(UPGRADE_REQUEST);
    let response = client.response();
    assert_eq!(response.status(), 101, "{:?}", response.head.first_line);
    assert!(
        response.head.has_token("connection", "upgrade"),
        "{:?}",
        response.head.headers
    );
    assert_eq!(response.header("upgrade"), Some("websocket"));
    response
}

#[test]
fn upgraded_connection_carries_bytes_both_ways_until_the_client_closes() {
    let server = echo_upgrade_server();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    upgrade(&mut client);

    let head = &server.heads()[0];
    assert!(
        head.has_token("connection", "upgrade"),
        "{:?}",
        head.headers
    );
    assert_eq!(head.header("upgrade"), Some("websocket"));
    assert_eq!(
        head.header("sec-websocket-key"),
        Some("dGhlIHNhbXBsZSBub25jZQ==")
    );

    for i in 0..5 {
        let message = format!("ping {i}");
        client.send(message.as_bytes());
        let echoed = client
            .read_exact_vec(message.len())
            .unwrap_or_else(|e| panic!("echo {i}: {}", describe(&e)));
        assert_eq!(echoed, message.as_bytes());
    }

    // A megabyte each way at once: the tunnel must not stall one direction on the other.
    const LEN: usize = 1 << 20;
    let mut writer = client.stream.try_clone().unwrap();
    let sender = thread::spawn(move || {
        writer.write_all(&Pattern::bytes(11, LEN)).unwrap();
    });
    let mut check = PatternCheck::new(11);
    client
        .read_exact_with(LEN as u64, &mut |piece| check.feed(piece))
        .unwrap_or_else(|e| panic!("after {} echoed bytes: {}", check.received, describe(&e)));
    sender.join().unwrap();
    assert_eq!(check.mismatch, None, "echoed bytes differ");

    // Client closes its side: the server sees the end, closes, and the client sees that.
    client.shutdown_write();
    client.expect_closed();
}

#[test]
fn upgraded_connection_ends_when_the_server_closes() {
    let server = Mock::start(|ex| {
        ex.write(SWITCHING)?;
        ex.write(b"bye")?;
        Ok(Flow::Close)
    });
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    upgrade(&mut client);
    let rest = client.read_until_closed();
    assert_eq!(rest, b"bye");
}

#[test]
fn server_sending_data_first_reaches_the_client() {
    let server = Mock::start(|ex| {
        let mut out = SWITCHING.to_vec();
        out.extend_from_slice(b"hello from the server");
        ex.write(&out)?;
        let data = ex.conn.read_some()?;
        ex.write(&data)?;
        ex.wait_for_close(std::time::Duration::from_secs(15));
        Ok(Flow::Close)
    });
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    upgrade(&mut client);
    let greeting = client.read_exact_vec(21).expect("greeting");
    assert_eq!(greeting, b"hello from the server");
    client.send(b"and back");
    assert_eq!(client.read_exact_vec(8).expect("echo"), b"and back");
}

#[test]
fn bytes_sent_right_after_the_upgrade_request_reach_the_server() {
    let server = echo_upgrade_server();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    let mut request = UPGRADE_REQUEST.to_vec();
    request.extend_from_slice(b"early bytes");
    client.send(&request);
    let response = client.response();
    assert_eq!(response.status(), 101);
    let echoed = client.read_exact_vec(11).unwrap_or_else(|e| {
        panic!(
            "bytes sent with the request never came back: {}",
            describe(&e)
        )
    });
    assert_eq!(echoed, b"early bytes");
}

#[test]
fn declined_upgrade_stays_plain_http() {
    let server = Mock::named("plain");
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(UPGRADE_REQUEST);
    let response = client.response();
    assert_eq!(response.status(), 200);
    assert_eq!(response.body_text(), "plain");
    let next = client.roundtrip(&get_request("/again", ""));
    assert_eq!(next.status(), 200);
    assert_eq!(next.body_text(), "plain");
}
