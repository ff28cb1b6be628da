//! Protocol upgrades (`Upgrade`, 101, then a tunnel): a WebSocket is tunnelled; a protocol the
//! listener's `upgrade` does not list — and `h2c` always — is stripped, so the request is served
//! as a plain one and a 101 to it is refused; a reload changes the list for new requests.

mod common;

use common::*;

/// A server that, for a request with an Upgrade, switches to the first protocol offered and
/// echoes the tunnel's bytes until the peer closes; any other request gets a plain 200.
fn switching_echo() -> Mock {
    Mock::start(|ex| {
        ex.read_body()?;
        let Some(offered) = ex.head.header("upgrade") else {
            ex.respond(200, &[("X-Plain", "yes")], b"plain")?;
            return Ok(Flow::KeepAlive);
        };
        let protocol = offered.split(',').next().unwrap_or("").trim().to_string();
        ex.write(
            format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: {protocol}\r\nConnection: Upgrade\r\n\r\n")
                .as_bytes(),
        )?;
        ex.echo_until_closed()
    })
}

/// The test config with `keys` added to its listener.
fn listener_with(server: &Mock, keys: &str, bind: &str) -> String {
    let toml = Setup::new().server("a", server.addr).toml(bind);
    let listener_pool = "pool = \"app\"\n\n[";
    assert_eq!(toml.matches(listener_pool).count(), 1, "{toml}");
    toml.replacen(listener_pool, &format!("pool = \"app\"\n{keys}\n\n["), 1)
}

const WEBSOCKET: &[u8] = b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n\
                           Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                           Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/// Sends a WebSocket upgrade on a new connection; true when it switched and the tunnel echoes.
fn tunnels(addr: std::net::SocketAddr) -> bool {
    let mut client = Conn::connect(addr);
    client.send(WEBSOCKET);
    let head = client.response_head();
    if head.status() != 101 {
        client.read_body(head.response_framing(false)).unwrap();
        return false;
    }
    client.send(b"ping");
    let mut echoed = Vec::new();
    while echoed.len() < 4 {
        let bytes = client.read_some().expect("the tunnel echoes");
        assert!(!bytes.is_empty(), "the tunnel closed");
        echoed.extend_from_slice(&bytes);
    }
    assert_eq!(echoed, b"ping");
    true
}

#[test]
fn a_websocket_upgrade_is_tunnelled_by_default() {
    let server = switching_echo();
    let proxy = Setup::new().server("a", server.addr).start();
    assert!(tunnels(proxy.addr));
    let head = &server.heads()[0];
    assert_eq!(head.header("upgrade"), Some("websocket"));
    assert!(
        head.has_token("connection", "upgrade"),
        "{:?}",
        head.headers
    );
}

#[test]
fn h2c_is_never_passed_on_and_the_request_is_served_plainly() {
    let server = switching_echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    // What `curl --http2 http://…` sends.
    let response = client.roundtrip(
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
          HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
    );
    assert_eq!(
        (response.status(), response.body_text().as_str()),
        (200, "plain")
    );
    // Plain HTTP/1.1 on, on the same connection.
    assert_eq!(client.roundtrip(&get_request("/next", "")).status(), 200);
    let head = &server.heads()[0];
    for field in ["upgrade", "http2-settings"] {
        assert!(
            !head.has(field),
            "{field} reached the server: {:?}",
            head.headers
        );
    }
    assert!(
        !head.has_token("connection", "upgrade"),
        "{:?}",
        head.headers
    );
    // Not even when the client leaves HTTP2-Settings out of Connection.
    let mut client = proxy.connect();
    let response = client.roundtrip(
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\
          HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
    );
    assert_eq!(response.status(), 200);
    let head = &server.heads()[2];
    assert!(
        !head.has("upgrade") && !head.has("http2-settings"),
        "{:?}",
        head.headers
    );
}

#[test]
fn a_101_to_a_request_whose_upgrade_was_stripped_is_a_bad_response() {
    let server = Mock::raw_reply(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
        Flow::Close,
    );
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n");
    let response = client.response();
    assert_error_response(&response, 502);
    client.read_until_closed();
}

#[test]
fn of_several_offered_protocols_only_the_allowed_go_on() {
    let server = switching_echo();
    let proxy = Setup::new().server("a", server.addr).start();
    let mut client = proxy.connect();
    client.send(
        b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\n\
          Upgrade: h2c, WebSocket\r\nHTTP2-Settings: AAMA\r\n\r\n",
    );
    let head = client.response_head();
    assert_eq!(head.status(), 101);
    assert_eq!(head.header("upgrade"), Some("WebSocket"));
    let received = &server.heads()[0];
    assert_eq!(received.header_all("upgrade"), ["WebSocket"]);
    assert!(!received.has("http2-settings"), "{:?}", received.headers);
}

#[test]
fn an_empty_upgrade_list_allows_none_and_a_reload_changes_it() {
    let server = switching_echo();
    let file = |keys: &str| listener_with(&server, keys, "127.0.0.1:0");
    let path = write_temp("upgrade.toml", &file("upgrade = []"));
    let config = herdsman::Config::load(&path).expect("a valid config");
    let herdsman = herdsman::Server::start_with_file(config, Some(path.clone())).unwrap();
    let addr = herdsman.listener_addr("web").expect("listener web");

    assert!(
        !tunnels(addr),
        "a WebSocket was tunnelled with upgrade = []"
    );
    assert!(
        !server.heads()[0].has("upgrade"),
        "{:?}",
        server.heads()[0].headers
    );

    std::fs::write(&path, file("upgrade = [\"websocket\"]")).unwrap();
    herdsman.registry().reload().expect("the reload applies");
    assert!(tunnels(addr), "the reload did not allow websocket");

    std::fs::write(&path, file("upgrade = []")).unwrap();
    herdsman.registry().reload().expect("the reload applies");
    assert!(!tunnels(addr), "the reload did not take websocket away");
    herdsman.stop();
    herdsman.wait();
}
