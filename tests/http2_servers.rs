//! HTTP/2 to servers (a pool's `protocol = "h2c"`): every request, whatever its client spoke,
//! goes to the server as a stream over a connection the worker keeps and multiplexes within the
//! server's SETTINGS_MAX_CONCURRENT_STREAMS; a GOAWAY from the server costs no request; gRPC's
//! trailers, trailers-only answers and streamed messages pass intact and unbuffered; a
//! `grpc-timeout` bounds the call, and herdsman's own errors reach a gRPC client as gRPC statuses.

mod common;
#[path = "common/h2_server.rs"]
mod h2_server;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use h2_server::{H2Options, H2Server};

/// herdsman with one worker, an HTTP/1.1 and h2c listener, in front of `server` spoken to as
/// `protocol`.
fn start(server: SocketAddr, protocol: &str) -> Proxy {
    Proxy::start(&format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\
         h2c = true\n\n[[pool]]\nname = \"app\"\nprotocol = \"{protocol}\"\nretries = 0\n\
         servers = [{{ name = \"a\", addr = \"{server}\" }}]\n"
    ))
}

/// An HTTP/2 client on its own runtime: `calls` run on one connection to `addr`.
fn h2_client<T: Send + 'static>(
    addr: SocketAddr,
    calls: impl FnOnce(h2::client::SendRequest<Bytes>) -> futures_like::BoxFuture<T>,
) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, connection) = h2::client::handshake(socket).await.unwrap();
        tokio::spawn(async move {
            let _ = connection.await;
        });
        tokio::time::timeout(Duration::from_secs(20), calls(send))
            .await
            .expect("the HTTP/2 calls took too long")
    })
}

mod futures_like {
    pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T>>>;
}

/// What a client read of one response: status, head fields, body, trailers, and when its first
/// body bytes came.
#[derive(Debug)]
struct Answer {
    status: u16,
    fields: http::HeaderMap,
    body: Vec<u8>,
    trailers: Option<http::HeaderMap>,
    /// The HEADERS frame ended the stream (a trailers-only response).
    ended_with_head: bool,
    first_data_after: Option<Duration>,
}

async fn call(
    send: &mut h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
    body: Option<(&'static [u8], http::HeaderMap)>,
) -> Answer {
    let started = Instant::now();
    let mut ready = send.clone().ready().await.unwrap();
    let (response, mut stream) = ready.send_request(request, body.is_none()).unwrap();
    if let Some((bytes, trailers)) = body {
        stream.send_data(Bytes::from_static(bytes), false).unwrap();
        stream.send_trailers(trailers).unwrap();
    }
    let (head, mut body) = response.await.unwrap().into_parts();
    let ended_with_head = body.is_end_stream();
    let mut answer = Answer {
        status: head.status.as_u16(),
        fields: head.headers,
        body: Vec::new(),
        trailers: None,
        ended_with_head,
        first_data_after: None,
    };
    while let Some(data) = body.data().await {
        let data = data.unwrap();
        let _ = body.flow_control().release_capacity(data.len());
        if !data.is_empty() && answer.first_data_after.is_none() {
            answer.first_data_after = Some(started.elapsed());
        }
        answer.body.extend_from_slice(&data);
    }
    answer.trailers = body.trailers().await.unwrap();
    answer
}

fn grpc_request(addr: SocketAddr, path: &str, timeout: Option<&str>) -> http::Request<()> {
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(timeout) = timeout {
        request = request.header("grpc-timeout", timeout);
    }
    request.body(()).unwrap()
}

#[test]
fn an_http1_request_reaches_an_h2c_server_as_a_stream_and_its_answer_comes_back() {
    let server = H2Server::start(H2Options::default());
    let proxy = start(server.addr, "h2c");
    let response = proxy.get_from_host(
        "site.test",
        "/hello?x=1",
        "Connection: keep-alive, x-hop\r\nx-hop: 1\r\n",
    );
    assert_eq!(response.status(), 200);
    assert_eq!(response.body, b"h2 says hi");
    let mut conn = proxy.connect();
    let upload = conn.roundtrip(
        b"POST /echo HTTP/1.1\r\nHost: site.test\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    assert_eq!(upload.status(), 200);
    assert_eq!(upload.body, b"hello world");
    let seen = server.requests();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].uri, "http://site.test/hello?x=1");
    assert_eq!(seen[0].field("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(seen[0].field("x-hop"), None, "a hop-by-hop field went on");
    assert_eq!(seen[0].field("connection"), None);
    assert_eq!(seen[1].body, b"hello world");
    assert_eq!(
        server.connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the second request did not reuse the connection"
    );
}

/// Bodies far larger than every flow-control window go both ways: herdsman sends the upload only
/// as the server's windows open, and gives the server window back as it relays the download.
#[test]
fn a_16_mib_upload_and_its_echo_pass_through_the_windows_both_ways() {
    let server = H2Server::start(H2Options::default());
    let proxy = start(server.addr, "h2c");
    let body: Vec<u8> = (0..16 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut conn = proxy.connect();
    conn.set_read_timeout(Duration::from_secs(30));
    let head = format!(
        "POST /echo HTTP/1.1\r\nHost: site.test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.send(head.as_bytes());
    conn.send(&body);
    let echoed = conn.response();
    assert_eq!(echoed.status(), 200);
    assert_eq!(echoed.body.len(), body.len());
    assert!(echoed.body == body, "the echo differs from the upload");
}

#[test]
fn requests_at_once_share_connections_within_the_servers_stream_limit() {
    let server = H2Server::start(H2Options {
        max_streams: 2,
        ..H2Options::default()
    });
    let proxy = start(server.addr, "h2c");
    // One request first, so that the server's SETTINGS are known.
    assert_eq!(proxy.get("/").status(), 200);
    let clients: Vec<_> = (0..6)
        .map(|_| {
            let addr = proxy.addr;
            std::thread::spawn(move || {
                let mut conn = Conn::connect(addr);
                conn.roundtrip(&get_request("/slow", "Connection: close\r\n"))
                    .status()
            })
        })
        .collect();
    for client in clients {
        assert_eq!(client.join().unwrap(), 200);
    }
    let peak = server
        .peak_streams
        .load(std::sync::atomic::Ordering::SeqCst);
    let connections = server.connections.load(std::sync::atomic::Ordering::SeqCst);
    assert!(peak <= 2, "a connection carried {peak} streams at once");
    assert!(
        (3..=6).contains(&connections),
        "6 requests at once, 2 a connection, took {connections} connections"
    );
}

#[test]
fn a_goaway_from_the_server_costs_no_request() {
    let server = H2Server::start(H2Options {
        goaway_after: Some(2),
        ..H2Options::default()
    });
    let proxy = start(server.addr, "h2c");
    let mut conn = proxy.connect();
    for i in 0..9 {
        let response = conn.roundtrip(&get_request("/", ""));
        assert_eq!(response.status(), 200, "request {i}");
    }
    let connections = server.connections.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (4..=9).contains(&connections),
        "9 requests, a GOAWAY every 2, over {connections} connections"
    );
}

#[test]
fn a_stream_the_server_refused_goes_again_on_a_new_connection_whatever_its_method() {
    let server = H2Server::start(H2Options {
        refuse_stream: Some(2),
        ..H2Options::default()
    });
    let proxy = start(server.addr, "h2c");
    let mut conn = proxy.connect();
    assert_eq!(conn.roundtrip(&get_request("/", "")).status(), 200);
    // The second stream on that connection is refused: a POST, which goes again only because
    // the server said it did not process it.
    let post =
        conn.roundtrip(b"POST /echo HTTP/1.1\r\nHost: site.test\r\nContent-Length: 4\r\n\r\nonce");
    assert_eq!(post.status(), 200);
    assert_eq!(post.body, b"once");
    let posts: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(
        server.connections.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
}

#[test]
fn grpc_trailers_and_a_trailers_only_error_reach_the_client_intact() {
    let server = H2Server::start(H2Options::default());
    let proxy = start(server.addr, "h2c");
    let addr = proxy.addr;
    let (streamed, refused) = h2_client(addr, move |mut send| {
        Box::pin(async move {
            let mut trailers = http::HeaderMap::new();
            trailers.insert("x-request-trailer", "yes".parse().unwrap());
            let message: &'static [u8] = b"\0\0\0\0\x02hi";
            let streamed = call(
                &mut send,
                grpc_request(addr, "/grpc", None),
                Some((message, trailers)),
            )
            .await;
            let refused = call(&mut send, grpc_request(addr, "/trailers-only", None), None).await;
            (streamed, refused)
        })
    });
    assert_eq!(streamed.status, 200);
    assert_eq!(streamed.body, b"\0\0\0\0\x05first\0\0\0\0\x06second");
    let trailers = streamed.trailers.expect("the call's trailers");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["grpc-message"], "fine");
    assert!(
        refused.ended_with_head,
        "not a trailers-only response: {refused:?}"
    );
    assert_eq!(refused.fields["grpc-status"], "5");
    assert_eq!(refused.fields["grpc-message"], "no such thing");
    let seen = server.requests();
    let call = seen.iter().find(|r| r.uri.ends_with("/grpc")).unwrap();
    assert_eq!(call.field("te"), Some("trailers"), "{call:?}");
    assert_eq!(call.body, b"\0\0\0\0\x02hi");
    assert_eq!(
        call.trailers,
        [("x-request-trailer".to_string(), "yes".to_string())]
    );
}

#[test]
fn a_grpc_servers_messages_stream_through_without_waiting_for_the_end() {
    let pause = Duration::from_millis(1500);
    let server = H2Server::start(H2Options {
        grpc_pause: pause,
        ..H2Options::default()
    });
    let proxy = start(server.addr, "h2c");
    let addr = proxy.addr;
    let streamed = h2_client(addr, move |mut send| {
        Box::pin(async move { call(&mut send, grpc_request(addr, "/grpc", None), None).await })
    });
    let first = streamed.first_data_after.expect("messages");
    assert!(
        first < pause,
        "the first message came after {first:?}, with the last ({pause:?} later)"
    );
    assert_eq!(streamed.trailers.unwrap()["grpc-status"], "0");
}

#[test]
fn herdsmans_own_errors_reach_a_grpc_client_as_grpc_statuses() {
    // Nothing listens there: 502, which a gRPC client reads as UNAVAILABLE.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = closed.local_addr().unwrap();
    drop(closed);
    let proxy = start(nowhere, "h2c");
    let addr = proxy.addr;
    let unavailable = h2_client(addr, move |mut send| {
        Box::pin(async move { call(&mut send, grpc_request(addr, "/grpc", None), None).await })
    });
    assert_eq!(unavailable.status, 200, "{unavailable:?}");
    assert!(unavailable.ended_with_head, "{unavailable:?}");
    assert_eq!(unavailable.fields["content-type"], "application/grpc");
    assert_eq!(unavailable.fields["grpc-status"], "14", "{unavailable:?}");

    // A server slower than the call's deadline: DEADLINE_EXCEEDED when the deadline passes.
    let server = H2Server::start(H2Options::default());
    let proxy = start(server.addr, "h2c");
    let addr = proxy.addr;
    let started = Instant::now();
    let late = h2_client(addr, move |mut send| {
        Box::pin(
            async move { call(&mut send, grpc_request(addr, "/slow", Some("100m")), None).await },
        )
    });
    let took = started.elapsed();
    assert_eq!(late.fields["grpc-status"], "4", "{late:?}");
    assert!(took < Duration::from_millis(290), "answered after {took:?}");
}

#[test]
fn a_bidirectional_grpc_call_goes_message_by_message_both_ways() {
    let server = H2Server::start(H2Options::default());
    let proxy = start(server.addr, "h2c");
    let addr = proxy.addr;
    let (first, rest) = h2_client(addr, move |send| {
        Box::pin(async move {
            let mut ready = send.ready().await.unwrap();
            let request = grpc_request(addr, "/echo-stream", None);
            let (response, mut stream) = ready.send_request(request, false).unwrap();
            // The first message alone: its echo must come back before the call's end, which
            // is sent only once it did (a request read whole before it went on never would).
            stream
                .send_data(Bytes::from_static(b"\0\0\0\0\x03one"), false)
                .unwrap();
            let (_, mut body) = response.await.unwrap().into_parts();
            // DATA frames need not keep the message whole: read until all of it came.
            let mut first = Vec::new();
            while first.len() < 8 {
                let data = tokio::time::timeout(Duration::from_secs(5), body.data())
                    .await
                    .expect("the first message's echo never came before the call ended")
                    .unwrap()
                    .unwrap();
                let _ = body.flow_control().release_capacity(data.len());
                first.extend_from_slice(&data);
            }
            stream
                .send_data(Bytes::from_static(b"\0\0\0\0\x03two"), true)
                .unwrap();
            let mut rest = Vec::new();
            while let Some(data) = body.data().await {
                let data = data.unwrap();
                let _ = body.flow_control().release_capacity(data.len());
                rest.extend_from_slice(&data);
            }
            let trailers = body.trailers().await.unwrap().unwrap();
            assert_eq!(trailers["grpc-status"], "0");
            (first, rest)
        })
    });
    assert_eq!(first, b"\0\0\0\0\x03one");
    assert_eq!(rest, b"\0\0\0\0\x03two");
}

#[test]
fn a_grpc_health_check_takes_a_server_that_is_not_serving_out_and_back() {
    let server = H2Server::start(H2Options::default());
    let proxy = Proxy::start(&format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
         [[pool]]\nname = \"app\"\nprotocol = \"h2c\"\n\
         servers = [{{ name = \"a\", addr = \"{}\" }}]\n\n[pool.health]\ncheck = \"grpc\"\n\
         service = \"test.Echo\"\ninterval = \"100ms\"\nrise = 1\nfall = 1\n",
        server.addr
    ));
    assert!(
        eventually(Duration::from_secs(5), || proxy.get("/").status() == 200),
        "a serving server never took requests"
    );
    server
        .serving
        .store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(5), || proxy.get("/").status() == 503),
        "a server NOT_SERVING stayed in rotation"
    );
    server
        .serving
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(5), || proxy.get("/").status() == 200),
        "a server serving again never came back"
    );
    let checks = server
        .requests()
        .into_iter()
        .filter(|r| r.uri.ends_with("/grpc.health.v1.Health/Check"))
        .collect::<Vec<_>>();
    let check = checks.first().expect("checks reached the server");
    assert_eq!(check.field("content-type"), Some("application/grpc"));
    assert_eq!(check.field("te"), Some("trailers"));
    // HealthCheckRequest { service: "test.Echo" }, length-prefixed.
    assert_eq!(check.body, b"\0\0\0\0\x0b\x0a\x09test.Echo");
}

/// herdsman with a TLS listener serving `cert` (HTTP/2 offered when `http2`) in front of `server`.
fn tls_front(server: SocketAddr, cert: &CertFiles, http2: bool) -> Proxy {
    Proxy::start(&format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\
         http2 = {http2}\n{}\n[[pool]]\nname = \"app\"\n\
         servers = [{{ name = \"a\", addr = \"{server}\" }}]\n",
        tls_table(&[cert], "")
    ))
}

#[test]
fn protocol_h2_speaks_http2_over_tls_agreed_by_alpn_and_refuses_a_server_without_it() {
    let backend = Mock::echo();
    let cert = CertFiles::issue("h2-server", &["h2.test"]);
    // The server herdsman speaks HTTP/2 to is another herdsman, over TLS.
    let h2_server = tls_front(backend.addr, &cert, true);
    let http1_server = tls_front(backend.addr, &cert, false);
    let front = |server: SocketAddr| {
        Proxy::start(&format!(
            "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
             [[pool]]\nname = \"app\"\nprotocol = \"h2\"\nretries = 0\n\
             servers = [{{ name = \"a\", addr = \"{server}\" }}]\n\n[pool.tls]\nca = \"{}\"\n\
             sni = \"h2.test\"\n",
            test_ca().pem_file.display()
        ))
    };
    let proxy = front(h2_server.addr);
    let response = proxy.get_from_host("site.test", "/over-h2", "");
    assert_eq!(response.status(), 200);
    let heads = backend.heads();
    let head = heads.last().expect("the request reached the backend");
    assert_eq!(head.target(), "/over-h2");
    assert_eq!(head.header("host"), Some("site.test"));
    // The second herdsman took it over TLS.
    assert_eq!(head.header("x-forwarded-proto"), Some("https"));

    // A TLS server that does not offer h2: no HTTP/2, so no request.
    let proxy = front(http1_server.addr);
    let refused = proxy.get_from_host("site.test", "/not-h2", "");
    assert_eq!(refused.status(), 502);
    assert!(backend.heads().iter().all(|h| h.target() != "/not-h2"));
}
