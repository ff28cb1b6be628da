//! HTTP/2 to clients, as curl speaks it: over TLS where the listener offers `h2` by ALPN
//! (`http2 = true`), and in cleartext with prior knowledge on a listener with `h2c = true`, which
//! still serves HTTP/1.1 on the same port. Each stream is a request through the same exchange:
//! the server sees an HTTP/1.1 request (Host from `:authority`, cookies joined, a body of unknown
//! length chunked), and the client gets the server's status, fields and body. curl must be
//! installed (`scripts/test` installs it).

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;

use common::*;

/// herdsman with `listener` lines added to its listener (and `tls`, a `[listener.tls]` table,
/// after them), in front of `server`.
fn start(server: &Mock, listener: &str, tls: &str) -> Proxy {
    let text = Setup::new().server("a", server.addr).toml("127.0.0.1:0");
    let end_of_listener = "pool = \"app\"\n\n";
    let at = text.find(end_of_listener).unwrap() + end_of_listener.len();
    let text = format!("{}{listener}\n{tls}\n{}", &text[..at - 1], &text[at..]);
    Proxy::start(&text)
}

fn h2c_url(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

#[test]
fn h2c_with_prior_knowledge_and_http11_share_a_port() {
    let server = Mock::echo();
    let proxy = start(&server, "h2c = true", "");
    let url = h2c_url(proxy.addr, "/a?b=1");
    let (status, body) = curl(&["--http2-prior-knowledge"], &url, None);
    assert_eq!(status, "2 200");
    assert!(body.is_empty());
    let (status, _) = curl(&["--http1.1"], &url, None);
    assert_eq!(status, "1.1 200");
    // The server saw HTTP/1.1 requests, Host from :authority.
    let heads = server.heads();
    assert_eq!(heads.len(), 2);
    for head in &heads {
        assert_eq!(head.target(), "/a?b=1");
        assert_eq!(head.header("host"), Some(proxy.addr.to_string().as_str()));
    }
}

#[test]
fn a_broken_preface_on_an_h2c_port_gets_goaway_protocol_error_not_an_http11_status() {
    let server = Mock::echo();
    let proxy = start(&server, "h2c = true", "");
    let got = flood(
        proxy.addr,
        b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n\0\0\0\x04\0\0\0\0\0".to_vec(),
    );
    assert!(has_goaway(&got, 1), "{got:?}");
    assert!(
        !got.starts_with(b"HTTP/1.1"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(server.heads().is_empty());
}

#[test]
fn bodies_stream_both_ways_with_and_without_a_length() {
    let server = Mock::echo();
    let proxy = start(&server, "h2c = true", "");
    let url = h2c_url(proxy.addr, "/up");
    // A body with its length.
    let (status, body) = curl(
        &["--http2-prior-knowledge", "--data-binary", "hello"],
        &url,
        None,
    );
    assert_eq!(
        (status.as_str(), body.as_slice()),
        ("2 200", b"hello".as_slice())
    );
    // 1 MiB with its length, sent at once: it fits memory, so it streams kept (or, slower,
    // is read whole first); either way it arrives as sent.
    let mib: Vec<u8> = (0..1u32 << 20).map(|i| (i % 241) as u8).collect();
    let (status, body) = curl(
        &["--http2-prior-knowledge", "--data-binary", "@-"],
        &url,
        Some(&mib),
    );
    assert_eq!(status, "2 200");
    assert!(body == mib, "the 1 MiB body came back changed");
    // A body of unknown length (read from a pipe): chunked to the server, whole back.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let (status, body) = curl(
        &["--http2-prior-knowledge", "-X", "POST", "-T", "-"],
        &url,
        Some(&big),
    );
    assert_eq!(status, "2 200");
    assert_eq!(body.len(), big.len());
    assert!(body == big, "the body came back changed");
    let last = server.heads().pop().unwrap();
    assert_eq!(last.header("transfer-encoding"), Some("chunked"));
}

#[test]
fn a_tls_listener_agrees_h2_by_alpn_unless_told_not_to() {
    let certs = CertFiles::issue("h2-alpn", &["app.test"]);
    let server = Mock::named("hello");
    // `http2` unwritten: on.
    let proxy = start(&server, "", &tls_table(&[&certs], ""));
    let url = format!("https://app.test:{}/", proxy.addr.port());
    let resolve = format!("app.test:{}:127.0.0.1", proxy.addr.port());
    let ca = test_ca().pem_file.display().to_string();
    let (status, body) = curl(
        &["--http2", "--cacert", &ca, "--resolve", &resolve],
        &url,
        None,
    );
    assert_eq!(
        (status.as_str(), body.as_slice()),
        ("2 200", b"hello".as_slice())
    );
    let (status, _) = curl(
        &["--http1.1", "--cacert", &ca, "--resolve", &resolve],
        &url,
        None,
    );
    assert_eq!(status, "1.1 200");
    // `http2 = false`: ALPN offers HTTP/1.1 alone, and curl settles for it.
    let off = start(&server, "http2 = false", &tls_table(&[&certs], ""));
    let url = format!("https://app.test:{}/", off.addr.port());
    let resolve = format!("app.test:{}:127.0.0.1", off.addr.port());
    let (status, _) = curl(
        &["--http2", "--cacert", &ca, "--resolve", &resolve],
        &url,
        None,
    );
    assert_eq!(status, "1.1 200");
}

#[test]
fn without_h2c_the_preface_is_not_http2() {
    let server = Mock::named("hello");
    let proxy = start(&server, "", "");
    let output = Command::new("curl")
        .args(["--silent", "--http2-prior-knowledge", "--max-time", "10"])
        .arg(h2c_url(proxy.addr, "/"))
        .output()
        .unwrap();
    assert!(!output.status.success(), "HTTP/2 on a listener without h2c");
    assert_eq!(server.heads().len(), 0);
}

#[test]
fn a_connection_without_streams_closes_after_client_idle() {
    use std::io::Read;
    let server = Mock::named("hello");
    let text = Setup::new()
        .server("a", server.addr)
        .timeout("client_idle", "300ms")
        .toml("127.0.0.1:0")
        .replacen("pool = \"app\"\n\n", "pool = \"app\"\nh2c = true\n\n", 1);
    let proxy = Proxy::start(&text);
    // The preface and an empty SETTINGS frame, then nothing.
    let mut conn = raw_connection(proxy.addr, true);
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let _ = conn.read_to_end(&mut got);
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(250)
            && waited < std::time::Duration::from_secs(4),
        "closed after {waited:?}"
    );
    // Before the close, a GOAWAY with NO_ERROR.
    assert!(has_goaway(&got, 0), "no GOAWAY NO_ERROR in {got:?}");
}

/// The raw frames of a client that sends the preface, SETTINGS, and then `frames` PINGs.
fn ping_flood(frames: usize) -> Vec<u8> {
    let mut bytes = PREFACE_AND_SETTINGS.to_vec();
    for i in 0..frames {
        bytes.extend_from_slice(&[0, 0, 8, 6, 0, 0, 0, 0, 0]);
        bytes.extend_from_slice(&(i as u64).to_be_bytes());
    }
    bytes
}

#[test]
fn a_ping_flood_gets_goaway_enhance_your_calm_and_others_are_served() {
    let server = Mock::named("hello");
    let text = Setup::new()
        .server("a", server.addr)
        .admin()
        .toml("127.0.0.1:0");
    let proxy =
        Proxy::start(&text.replacen("pool = \"app\"\n\n", "pool = \"app\"\nh2c = true\n\n", 1));
    let got = flood(proxy.addr, ping_flood(5000));
    // A GOAWAY whose error code is ENHANCE_YOUR_CALM (0xb).
    assert!(
        has_goaway(&got, 0xb),
        "no GOAWAY ENHANCE_YOUR_CALM in {} bytes",
        got.len()
    );
    // Another client is served.
    let (status, body) = curl(
        &["--http2-prior-knowledge"],
        &h2c_url(proxy.addr, "/"),
        None,
    );
    assert_eq!(
        (status.as_str(), body.as_slice()),
        ("2 200", b"hello".as_slice())
    );
    // Counted: the flood, its GOAWAY, both connections and the one stream.
    assert_eq!(
        metric(&proxy, "herdsman_worker_http2_floods_total", ""),
        1.0
    );
    let calm = "code=\"ENHANCE_YOUR_CALM\"";
    assert_eq!(
        metric(&proxy, "herdsman_worker_http2_goaways_sent_total", calm),
        1.0
    );
    assert_eq!(
        metric(&proxy, "herdsman_worker_http2_connections_total", ""),
        2.0
    );
    assert_eq!(
        metric(&proxy, "herdsman_worker_http2_streams_total", ""),
        1.0
    );
}

#[test]
fn the_access_log_says_http2_and_the_stream() {
    let server = Mock::named("hello");
    let dir = fresh_temp_dir("h2-log");
    let log = dir.join("access.log");
    let proxy = start(
        &server,
        &format!("h2c = true\naccess_log = {log:?}\naccess_log_format = \"json\""),
        "",
    );
    let (first, second) = (
        h2c_url(proxy.addr, "/logged/1"),
        h2c_url(proxy.addr, "/logged/2"),
    );
    // Two requests on one connection: streams 13 and 15 (nghttp opens 3 to 11 for priorities).
    let output = Command::new("nghttp")
        .args(["--no-content", "--timeout=10", &first, &second])
        .output()
        .expect("nghttp runs (scripts/test installs nghttp2-client)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect();
        if lines.len() >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    let mut streams: Vec<u64> = Vec::new();
    for line in &lines {
        let entry: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(entry["version"], "HTTP/2.0", "{line}");
        streams.push(entry["stream"].as_u64().expect("a stream id"));
        assert!(
            entry["target"].as_str().unwrap().starts_with("/logged/"),
            "{line}"
        );
        assert_eq!(entry["status"], 200, "{line}");
    }
    streams.sort_unstable();
    assert!(
        streams[0] % 2 == 1 && streams[1] == streams[0] + 2,
        "{streams:?}"
    );
}

#[test]
fn a_stop_sends_goaway_and_closes_a_quiet_connection_at_once() {
    use std::io::Read;
    let server = Mock::named("hello");
    let proxy = start(&server, "h2c = true", "");
    let mut conn = raw_connection(proxy.addr, true);
    // Its SETTINGS came: the connection is being served.
    let mut first = [0u8; 9];
    conn.read_exact(&mut first).unwrap();
    assert_eq!(first[3], 4, "SETTINGS first");
    let started = std::time::Instant::now();
    proxy.stop();
    let mut got = Vec::new();
    let _ = conn.read_to_end(&mut got);
    let waited = started.elapsed();
    assert!(
        waited < std::time::Duration::from_secs(3),
        "closed after {waited:?}"
    );
    // A GOAWAY with NO_ERROR (type 7, stream 0, code 0).
    assert!(has_goaway(&got, 0), "no GOAWAY NO_ERROR in {got:?}");
    assert!(proxy.wait_stopped(std::time::Duration::from_secs(5)));
}

/// A stream's answer on `frames`: its body, and whether HEADERS and an END_STREAM came.
fn answer_on(frames: &[Frame], stream: u32) -> (bool, Vec<u8>, bool) {
    let on = || frames.iter().filter(move |f| f.stream == stream);
    let head = on().any(|f| f.kind == HEADERS);
    let body = on()
        .filter(|f| f.kind == DATA)
        .flat_map(|f| f.payload.clone())
        .collect();
    let ended = on().any(|f| f.flags & END_STREAM != 0);
    (head, body, ended)
}

#[test]
fn a_stop_lets_streams_in_flight_finish_between_its_two_goaways() {
    use std::io::Read;
    use std::time::Duration;
    // A server that answers half a second after the request: the stream is in flight at the stop.
    let server = Mock::start(|ex| {
        ex.read_body()?;
        std::thread::sleep(Duration::from_millis(500));
        ex.respond(200, &[], b"late")?;
        Ok(Flow::KeepAlive)
    });
    let proxy = start(&server, "h2c = true", "");
    let mut conn = raw_connection(proxy.addr, true);
    conn.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, GET_BLOCK))
        .unwrap();
    assert!(server.wait_for_heads(1, Duration::from_secs(5)));
    proxy.stop();
    // §6.8's first step: a GOAWAY naming the highest stream id, then a PING.
    let mut frames = read_frames_until(&mut conn, |f| f.kind == PING && f.flags & 1 == 0);
    let first = frames
        .iter()
        .find(|f| f.kind == GOAWAY)
        .expect("a GOAWAY before the PING");
    assert_eq!(
        (first.last_stream(), first.error_code()),
        (Some(0x7fff_ffff), Some(NO_ERROR))
    );
    // A request already on its way when the GOAWAY came (stream 3) is still taken; the PING's
    // ack tells herdsman nothing else is.
    let payload = frames.last().unwrap().payload.clone();
    conn.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 3, GET_BLOCK))
        .unwrap();
    conn.write_all(&frame(PING, 1, 0, &payload)).unwrap();
    // Then everything until herdsman closes: the last GOAWAY names stream 3, and both answers
    // come whole.
    let mut bytes = Vec::new();
    let _ = conn.read_to_end(&mut bytes);
    parse_frames(&bytes, &mut frames);
    let last = frames
        .iter()
        .rfind(|f| f.kind == GOAWAY)
        .expect("a last GOAWAY");
    assert_eq!(
        (last.last_stream(), last.error_code()),
        (Some(3), Some(NO_ERROR))
    );
    for stream in [1, 3] {
        assert_eq!(
            answer_on(&frames, stream),
            (true, b"late".to_vec(), true),
            "stream {stream}: {frames:?}"
        );
    }
    assert_eq!(server.heads().len(), 2);
    assert!(proxy.wait_stopped(Duration::from_secs(5)));
}

/// A rapid-reset client (CVE-2023-44487): `streams` requests, each reset (CANCEL) as soon as
/// it is sent, after the preface and SETTINGS.
fn rapid_reset(streams: u32) -> Vec<u8> {
    let mut bytes = PREFACE_AND_SETTINGS.to_vec();
    // :method GET, :scheme http, :path /, :authority "a" (HPACK: three indexed fields and a
    // literal without indexing).
    let block = [0x82, 0x86, 0x84, 0x01, 0x01, b'a'];
    for i in 0..streams {
        let stream = (1 + 2 * i).to_be_bytes();
        bytes.extend_from_slice(&[0, 0, block.len() as u8, 1, 5]);
        bytes.extend_from_slice(&stream);
        bytes.extend_from_slice(&block);
        bytes.extend_from_slice(&[0, 0, 4, 3, 0]);
        bytes.extend_from_slice(&stream);
        bytes.extend_from_slice(&8u32.to_be_bytes());
    }
    bytes
}

#[test]
fn a_rapid_reset_flood_gets_goaway_and_costs_the_server_almost_nothing() {
    let server = Mock::named("hello");
    let proxy = start(&server, "h2c = true", "");
    let got = flood(proxy.addr, rapid_reset(1000));
    assert!(
        has_goaway(&got, 0xb),
        "no GOAWAY ENHANCE_YOUR_CALM in {} bytes",
        got.len()
    );
    // Of 1,000 requests, the server saw at most the few served before the resets came, and was
    // not made to accept a connection for each stream either (it was, before the stream's task
    // looked at the reset first).
    assert!(
        server.heads().len() <= 20,
        "{} requests reached the server",
        server.heads().len()
    );
    assert!(
        server.connections() <= 20,
        "{} connections to the server",
        server.connections()
    );
    let (status, body) = curl(
        &["--http2-prior-knowledge"],
        &h2c_url(proxy.addr, "/"),
        None,
    );
    assert_eq!(
        (status.as_str(), body.as_slice()),
        ("2 200", b"hello".as_slice())
    );
}

#[test]
fn streams_reset_in_the_same_breath_as_their_request_reach_no_server_and_run_out_at_the_limit() {
    let server = Mock::named("hello");
    // Only the budget of streams reset before they were served can end this connection.
    let proxy = start(
        &server,
        "h2c = true",
        "[http2]\nmax_pending_resets = 5\nreset_burst = 1000",
    );
    let got = flood(proxy.addr, rapid_reset(50));
    assert!(
        has_goaway(&got, 0xb),
        "no GOAWAY ENHANCE_YOUR_CALM in {got:?}"
    );
    // Each stream's HEADERS and RST_STREAM came in one read: none was routed.
    assert_eq!(
        (server.connections(), server.heads().len()),
        (0, 0),
        "a server was asked"
    );
}

#[test]
fn the_http2_section_sets_what_the_connection_advertises_and_refuses_what_cannot_be() {
    use std::io::Read;
    let server = Mock::named("hello");
    let text = Setup::new().server("a", server.addr).toml("127.0.0.1:0");
    let text = text.replacen("pool = \"app\"\n\n", "pool = \"app\"\nh2c = true\n\n", 1)
        + "\n[http2]\nmax_concurrent_streams = 7\nstream_window = 100000\n";
    let proxy = Proxy::start(&text);
    let mut conn = raw_connection(proxy.addr, true);
    let mut head = [0u8; 9];
    conn.read_exact(&mut head).unwrap();
    assert_eq!(head[3], 4, "SETTINGS first");
    let mut settings = vec![0u8; usize::from(head[2])];
    conn.read_exact(&mut settings).unwrap();
    let pairs: Vec<(u16, u32)> = settings
        .chunks(6)
        .map(|p| {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
            )
        })
        .collect();
    assert!(
        pairs.contains(&(3, 7)),
        "MAX_CONCURRENT_STREAMS 7 in {pairs:?}"
    );
    assert!(
        pairs.contains(&(4, 100_000)),
        "INITIAL_WINDOW_SIZE in {pairs:?}"
    );
    // A value HTTP/2 cannot have is refused, naming the key and its line.
    let bad = Setup::new().server("a", server.addr).toml("127.0.0.1:0")
        + "\n[http2]\nstream_window = 100\n";
    let error = format!(
        "{:?}",
        herdsman::Config::from_toml(&bad, "test").unwrap_err()
    );
    assert!(error.contains("http2.stream_window"), "{error}");
    assert!(error.contains("line: Some("), "{error}");
}

/// An HTTP/1.1 server that switches any request with an Upgrade to it and echoes the tunnel's
/// bytes until the peer closes; it records the handshake it got.
fn websocket_echo() -> Mock {
    Mock::start(|ex| {
        ex.read_body()?;
        if ex.head.header("upgrade").is_none() {
            ex.respond(400, &[], b"not a handshake")?;
            return Ok(Flow::Close);
        }
        ex.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
        )?;
        ex.echo_until_closed()
    })
}

#[test]
fn an_extended_connect_carries_a_websocket_to_an_http11_server() {
    let server = websocket_echo();
    let proxy = start(&server, "h2c = true", "");
    let addr = proxy.addr;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (status, fields, echoed, ended) = runtime.block_on(async move {
        let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, connection) = h2::client::handshake(socket).await.unwrap();
        tokio::spawn(async move {
            let _ = connection.await;
        });
        // herdsman's SETTINGS allow extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL).
        let mut send = send.ready().await.unwrap();
        for _ in 0..100 {
            if send.is_extended_connect_protocol_enabled() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(send.is_extended_connect_protocol_enabled());
        let mut request = http::Request::connect(format!("http://{addr}/chat"))
            .header("sec-websocket-version", "13")
            .body(())
            .unwrap();
        request
            .extensions_mut()
            .insert(h2::ext::Protocol::from_static("websocket"));
        let (response, mut stream) = send.send_request(request, false).unwrap();
        let (head, mut body) = response.await.unwrap().into_parts();
        stream
            .send_data(bytes::Bytes::from_static(b"frame bytes"), false)
            .unwrap();
        let mut echoed = Vec::new();
        while echoed.len() < 11 {
            let data = body.data().await.unwrap().unwrap();
            let _ = body.flow_control().release_capacity(data.len());
            echoed.extend_from_slice(&data);
        }
        // The client ends its side; the server closes, and so the stream ends.
        stream.send_data(bytes::Bytes::new(), true).unwrap();
        let rest = async {
            let mut rest = Vec::new();
            while let Some(data) = body.data().await {
                rest.extend_from_slice(&data.unwrap());
            }
            rest
        };
        let rest = tokio::time::timeout(std::time::Duration::from_secs(5), rest).await;
        let ended = rest.as_deref() == Ok(&b""[..]);
        (head.status.as_u16(), head.headers, echoed, ended)
    });
    assert_eq!(status, 200, "{fields:?}");
    assert!(fields.get("sec-websocket-accept").is_none(), "{fields:?}");
    assert!(fields.get("upgrade").is_none(), "{fields:?}");
    assert_eq!(echoed, b"frame bytes");
    assert!(ended, "the stream did not end after the tunnel closed");
    let heads = server.heads();
    assert_eq!(heads.len(), 1);
    let handshake = &heads[0];
    assert_eq!(handshake.first_line, "GET /chat HTTP/1.1");
    assert_eq!(handshake.header("upgrade"), Some("websocket"));
    assert_eq!(handshake.header("sec-websocket-version"), Some("13"));
    let key = handshake.header("sec-websocket-key").expect("a key");
    assert_eq!(key.len(), 24, "{key}");
}

/// The status of a response head herdsman encoded (`:status` indexed for 200, else a literal).
fn status_of(head: &Frame) -> u16 {
    match head.payload.as_slice() {
        [0x88, ..] => 200,
        [0x08, 3, a, b, c, ..] => {
            let digits = [*a, *b, *c];
            std::str::from_utf8(&digits).unwrap().parse().unwrap()
        }
        other => panic!("a head herdsman does not write: {other:?}"),
    }
}

#[test]
fn a_quiet_connection_parks_and_its_next_stream_uses_the_table_it_left() {
    let server = Mock::named("hello");
    let proxy = start(&server, "h2c = true", "");
    let mut conn = raw_connection(proxy.addr, true);
    // `:authority: parked.example` with incremental indexing (name index 1): the client's
    // table now holds it at index 62.
    let mut first = vec![0x82, 0x86, 0x84, 0x41, 14];
    first.extend_from_slice(b"parked.example");
    conn.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &first))
        .unwrap();
    let frames = read_frames_until(&mut conn, |f| f.stream == 1 && f.flags & END_STREAM != 0);
    let head = frames.iter().find(|f| f.kind == HEADERS).unwrap();
    assert_eq!(status_of(head), 200);
    assert!(
        eventually(std::time::Duration::from_secs(3), || proxy.parked() == 1),
        "a quiet HTTP/2 connection was not parked"
    );
    // The second stream names the authority by its index alone (0xbe = 62): only a connection
    // whose table came back whole from the lot can read it.
    conn.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        3,
        &[0x82, 0x86, 0x84, 0xbe],
    ))
    .unwrap();
    let frames = read_frames_until(&mut conn, |f| f.stream == 3 && f.flags & END_STREAM != 0);
    let head = frames.iter().find(|f| f.kind == HEADERS).unwrap();
    assert_eq!(status_of(head), 200);
    let hosts: Vec<String> = server
        .heads()
        .iter()
        .map(|head| head.header("host").unwrap_or_default().to_string())
        .collect();
    assert_eq!(hosts, ["parked.example", "parked.example"]);
    let workers = proxy.server().stats().report();
    let open: u32 = workers.iter().map(|w| w.http2.connections_open).sum();
    assert_eq!(open, 1, "the resumed connection is counted open once");
}

#[test]
fn a_parked_tls_connection_resumes_and_gets_goaway_at_client_idle() {
    let certs = CertFiles::issue("h2-park", &["app.test"]);
    let server = Mock::named("hello");
    let text = Setup::new()
        .server("a", server.addr)
        .timeout("client_idle", "1500ms")
        .toml("127.0.0.1:0");
    let end_of_listener = "pool = \"app\"\n\n";
    let at = text.find(end_of_listener).unwrap() + end_of_listener.len();
    let text = format!(
        "{}{}\n{}",
        &text[..at - 1],
        tls_table(&[&certs], ""),
        &text[at..]
    );
    let proxy = Proxy::start(&text);
    let mut config = (*client_config()).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let mut conn = TlsConn::try_connect(proxy.addr, "app.test", &std::sync::Arc::new(config))
        .expect("a TLS connection agreeing h2");
    conn.send(PREFACE_AND_SETTINGS);
    let mut first = vec![0x82, 0x87, 0x84, 0x41, 8];
    first.extend_from_slice(b"app.test");
    conn.send(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &first));
    let frames = read_frames_until(&mut conn.stream, |f| {
        f.stream == 1 && f.flags & END_STREAM != 0
    });
    assert_eq!(
        status_of(frames.iter().find(|f| f.kind == HEADERS).unwrap()),
        200
    );
    assert!(
        eventually(std::time::Duration::from_secs(1), || proxy.parked() == 1),
        "a quiet HTTP/2 connection over TLS was not parked"
    );
    // Resumed: its TLS and HPACK state came back with it (index 62 is `:authority: app.test`).
    conn.send(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        3,
        &[0x82, 0x87, 0x84, 0xbe],
    ));
    let frames = read_frames_until(&mut conn.stream, |f| {
        f.stream == 3 && f.flags & END_STREAM != 0
    });
    assert_eq!(
        status_of(frames.iter().find(|f| f.kind == HEADERS).unwrap()),
        200
    );
    // Quiet again, past client_idle in the lot: GOAWAY NO_ERROR naming stream 3, then the close.
    let started = std::time::Instant::now();
    let goaway = read_frames_until(&mut conn.stream, |f| f.kind == GOAWAY);
    let goaway = goaway.last().unwrap();
    assert_eq!(goaway.error_code(), Some(0));
    assert_eq!(&goaway.payload[..4], &3u32.to_be_bytes());
    let waited = started.elapsed();
    assert!(
        waited > std::time::Duration::from_millis(1000)
            && waited < std::time::Duration::from_secs(4),
        "GOAWAY after {waited:?}"
    );
    let mut rest = [0u8; 64];
    use std::io::Read;
    assert!(
        matches!(conn.stream.read(&mut rest), Ok(0) | Err(_)),
        "the connection closed"
    );
    assert_eq!(server.heads().len(), 2);
}
