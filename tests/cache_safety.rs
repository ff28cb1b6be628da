//! The cache cannot be poisoned: what herdsman forwards is what it keys. Each case runs against
//! a server that reflects the request's fields into its (cacheable) body, so a field that
//! reached it unkeyed would show in what the next client is served.

mod common;

use common::{Conn, Flow, Mock, Proxy, Setup};

/// The fields the reflecting server writes back.
const REFLECTED: [&str; 6] = [
    "host",
    "x-forwarded-host",
    "x-host",
    "x-original-url",
    "authorization",
    "x-forwarded-scheme",
];

/// A server whose every answer is fresh for a minute (`/private`: private) and whose body
/// names the target and the reflected fields as it got them.
fn reflecting_server() -> Mock {
    Mock::start(|exchange| {
        let mut body = format!("target={}", exchange.head.target());
        for name in REFLECTED {
            let value = exchange.head.header(name).unwrap_or("-");
            body.push_str(&format!(" {name}={value}"));
        }
        let control = match exchange.head.target() {
            "/private" => "private, max-age=60",
            _ => "max-age=60",
        };
        exchange.read_body()?;
        exchange.respond(200, &[("Cache-Control", control)], body.as_bytes())?;
        Ok(Flow::KeepAlive)
    })
}

fn cached_proxy(server: &Mock, cache_lines: &str) -> Proxy {
    let toml = Setup::new().server("s1", server.addr).toml("127.0.0.1:0");
    Proxy::start(&format!("{toml}\n[pool.cache]\n{cache_lines}\n"))
}

#[test]
fn a_client_s_forwarded_host_never_reaches_the_server_nor_the_next_client() {
    let server = reflecting_server();
    let proxy = cached_proxy(&server, "");
    let first = proxy.get_from_host("test.local", "/page", "X-Forwarded-Host: evil.example\r\n");
    assert!(
        first.body_text().contains("x-forwarded-host=test.local"),
        "herdsman sets it from the keyed Host: {}",
        first.body_text()
    );
    let next = proxy.get("/page");
    assert!(!next.body_text().contains("evil"), "{}", next.body_text());
    assert_eq!(server.heads().len(), 1, "the same object");
}

#[test]
fn poisoning_fields_are_taken_out_unless_the_key_has_them() {
    let server = reflecting_server();
    let proxy = cached_proxy(&server, "");
    let extra =
        "X-Host: evil.example\r\nX-Original-URL: /admin\r\nX-Forwarded-Scheme: nothttps\r\n";
    let poisoned = proxy.get_from_host("test.local", "/page", extra);
    let body = poisoned.body_text();
    assert!(
        body.contains("x-host=-") && body.contains("x-original-url=-"),
        "not forwarded: {body}"
    );
    assert!(body.contains("x-forwarded-scheme=-"), "{body}");
    assert!(!proxy.get("/page").body_text().contains("evil"));

    // Keyed, a field is forwarded, and each value has its own object.
    let server = reflecting_server();
    let proxy = cached_proxy(&server, "key_headers = [\"X-Original-URL\"]");
    let admin = proxy.get_from_host("test.local", "/page", "X-Original-URL: /admin\r\n");
    assert!(admin.body_text().contains("x-original-url=/admin"));
    let plain = proxy.get("/page");
    assert!(
        plain.body_text().contains("x-original-url=-"),
        "another key: {}",
        plain.body_text()
    );
    assert_eq!(server.heads().len(), 2);
    let admin_again = proxy.get_from_host("test.local", "/page", "X-Original-URL: /admin\r\n");
    assert_eq!(
        admin_again.body_text(),
        admin.body_text(),
        "its own stored object"
    );
    assert_eq!(server.heads().len(), 2);
}

#[test]
fn a_second_host_is_refused_and_an_absolute_uri_is_keyed_by_the_host_forwarded() {
    let server = reflecting_server();
    let proxy = cached_proxy(&server, "");
    let twice = Conn::connect(proxy.addr).roundtrip(
        b"GET /page HTTP/1.1\r\nHost: test.local\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(twice.status(), 400);
    assert!(server.heads().is_empty(), "nothing reached the server");

    let absolute = Conn::connect(proxy.addr).roundtrip(
        b"GET http://evil.example/page HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n",
    );
    assert!(
        absolute.body_text().contains("host=evil.example"),
        "the authority is the host forwarded: {}",
        absolute.body_text()
    );
    let genuine = proxy.get("/page");
    assert!(
        genuine.body_text().contains("host=test.local"),
        "stored under the host it was forwarded with, not test.local's: {}",
        genuine.body_text()
    );
    assert_eq!(server.heads().len(), 2);
}

#[test]
fn a_smuggled_request_cannot_store_its_answer_under_another_key() {
    let server = reflecting_server();
    let proxy = cached_proxy(&server, "");
    // Both framings at once: refused, and the connection closed with what it carried.
    let mut conn = Conn::connect(proxy.addr);
    conn.send(
        b"GET /victim HTTP/1.1\r\nHost: test.local\r\nContent-Length: 44\r\n\
          Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /poison HTTP/1.1\r\nHost: test.local\r\n\r\n",
    );
    assert_eq!(conn.response().status(), 400);
    conn.expect_closed();
    // A GET whose body is a request: forwarded as the body it is, and not stored.
    let smuggled = b"GET /poison HTTP/1.1\r\nHost: test.local\r\n\r\n";
    let mut request = format!(
        "GET /victim HTTP/1.1\r\nHost: test.local\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        smuggled.len()
    )
    .into_bytes();
    request.extend_from_slice(smuggled);
    let answered = Conn::connect(proxy.addr).roundtrip(&request);
    assert!(answered.body_text().starts_with("target=/victim"));
    let victim = proxy.get("/victim");
    assert!(
        victim.body_text().starts_with("target=/victim"),
        "{}",
        victim.body_text()
    );
    assert!(
        !server.targets().iter().any(|target| target == "/poison"),
        "the smuggled request never reached the server as one: {:?}",
        server.targets()
    );
}

#[test]
fn a_private_answer_is_never_served_to_another_client() {
    let server = reflecting_server();
    let proxy = cached_proxy(&server, "");
    let alice = proxy.get_from_host("test.local", "/private", "Authorization: Bearer alice\r\n");
    assert!(alice.body_text().contains("authorization=Bearer alice"));
    let bob = proxy.get("/private");
    assert!(
        !bob.body_text().contains("alice"),
        "another client's private answer: {}",
        bob.body_text()
    );
    // Nor an answer to a request with credentials, though it says max-age (RFC 9111 §3.5).
    let carol = proxy.get_from_host("test.local", "/page", "Authorization: Bearer carol\r\n");
    assert!(carol.body_text().contains("carol"));
    assert!(!proxy.get("/page").body_text().contains("carol"));
    assert_eq!(server.heads().len(), 4, "each went to the server");
}
