//! Bounded memory over HTTP/2: a large upload and a large download on one client connection at
//! once, through the herdsman binary (its own process, so its peak RSS is its alone), while small
//! requests on the same connection keep being answered. Flow control ties each stream to the
//! other side (a window goes back only as the exchange takes bytes, response bytes are taken only
//! as the client's window allows), so memory grows by a few windows, not by the bodies.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;

const MIB: u64 = 1024 * 1024;
/// Each body: 256 MiB, 64 times what memory may grow by. (With 1 GiB each way the test passes
/// too, in about four minutes of this debug build: set `HERDSMAN_H2_MEMORY_MIB=1024`.)
const DEFAULT_MIB: u64 = 256;
/// Allowed growth of peak RSS: the connection's receive window (4 MiB by default), a stream's
/// send buffer, relay buffers and allocator slack stay far under 16 MiB, and the upload's first
/// 1 MiB waits in memory (`request_buffer_memory`, the rest in a temporary file); either body
/// whole would need 15 times more.
const ALLOWED_GROWTH_KIB: u64 = 17 * 1024;
/// The length of each body.
fn len() -> u64 {
    std::env::var("HERDSMAN_H2_MEMORY_MIB")
        .ok()
        .and_then(|mib| mib.parse().ok())
        .unwrap_or(DEFAULT_MIB)
        * MIB
}

/// A piece of the upload, and of what is asked of the window at a time.
const PIECE: usize = 64 * 1024;

/// The binary with one worker and an h2c listener in front of `server`.
fn start_binary(server: SocketAddr) -> (ChildGuard, SocketAddr) {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"{addr}\"\npool = \"app\"\n\
         h2c = true\n\n[timeouts]\nbackend_response = \"120s\"\n\n[[pool]]\nname = \"app\"\n\
         servers = [{{ name = \"a\", addr = \"{server}\" }}]\n"
    );
    let child = run_binary_with(&write_temp("h2-memory.toml", &text));
    assert!(wait_listening(addr, Duration::from_secs(10)));
    (child, addr)
}

async fn small(send: &h2::client::SendRequest<Bytes>, addr: SocketAddr) -> Vec<u8> {
    let mut send = send.clone().ready().await.unwrap();
    let request = http::Request::get(format!("http://{addr}/"))
        .body(())
        .unwrap();
    let (response, _) = send.send_request(request, true).unwrap();
    let mut body = response.await.unwrap().into_body();
    let mut got = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.unwrap();
        let _ = body.flow_control().release_capacity(data.len());
        got.extend_from_slice(&data);
    }
    got
}

async fn upload(send: &h2::client::SendRequest<Bytes>, addr: SocketAddr) -> Vec<u8> {
    let len = len();
    let mut send = send.clone().ready().await.unwrap();
    let request = http::Request::post(format!("http://{addr}/upload"))
        .header("content-length", len.to_string())
        .body(())
        .unwrap();
    let (response, mut stream) = send.send_request(request, false).unwrap();
    let mut pattern = Pattern::new(31);
    let mut sent = 0u64;
    while sent < len {
        stream.reserve_capacity(PIECE);
        let room = std::future::poll_fn(|cx| stream.poll_capacity(cx))
            .await
            .unwrap()
            .unwrap();
        let n = room.min((len - sent) as usize);
        let mut piece = vec![0; n];
        pattern.fill(&mut piece);
        sent += n as u64;
        stream.send_data(Bytes::from(piece), sent == len).unwrap();
    }
    let mut body = response.await.unwrap().into_body();
    let mut got = Vec::new();
    while let Some(data) = body.data().await {
        got.extend_from_slice(&data.unwrap());
    }
    got
}

async fn download(send: &h2::client::SendRequest<Bytes>, addr: SocketAddr) -> (u64, Option<u64>) {
    let mut send = send.clone().ready().await.unwrap();
    let request = http::Request::get(format!("http://{addr}/download"))
        .body(())
        .unwrap();
    let (response, _) = send.send_request(request, true).unwrap();
    let mut body = response.await.unwrap().into_body();
    let mut check = PatternCheck::new(32);
    while let Some(data) = body.data().await {
        let data = data.unwrap();
        let _ = body.flow_control().release_capacity(data.len());
        check.feed(&data);
    }
    (check.received, check.mismatch)
}

#[test]
fn large_bodies_both_ways_on_one_connection_leave_memory_bounded_and_other_streams_answered() {
    let len = len();
    let server = Mock::start(move |ex| {
        match ex.head.target() {
            "/upload" => {
                let mut check = PatternCheck::new(31);
                ex.conn
                    .read_body_with(ex.head.request_framing(), &mut |p| check.feed(p))?;
                ex.respond(200, &[], check.report().as_bytes())?;
            }
            "/download" => {
                ex.read_body()?;
                ex.write(format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").as_bytes())?;
                Pattern::new(32).write_in_pieces(len, 256 * 1024, &mut |p| ex.write(p))?;
            }
            _ => {
                ex.read_body()?;
                ex.respond(200, &[], b"small")?;
            }
        }
        Ok(Flow::KeepAlive)
    });
    let (child, addr) = start_binary(server.addr);
    let pid = child.0.id();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let (uploaded, downloaded, smalls, baseline) = runtime.block_on(async move {
        let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(4 << 20)
            .handshake(socket)
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = connection.await;
        });
        assert_eq!(small(&send, addr).await, b"small");
        let baseline = peak_rss_kib(pid);
        let big = async { tokio::join!(upload(&send, addr), download(&send, addr)) };
        tokio::pin!(big);
        // Small requests on the same connection while the bodies move, each answered in time.
        let mut smalls = 0;
        let (uploaded, downloaded) = loop {
            tokio::select! {
                done = &mut big => break done,
                got = tokio::time::timeout(Duration::from_secs(5), small(&send, addr)) => {
                    assert_eq!(got.expect("a small request waited behind the big ones"), b"small");
                    smalls += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        (uploaded, downloaded, smalls, baseline)
    });
    eprintln!("{} MiB each way in {:?}", len / MIB, started.elapsed());
    assert_eq!(
        String::from_utf8_lossy(&uploaded),
        format!("{len} None"),
        "upload damaged"
    );
    assert_eq!(downloaded, (len, None), "download damaged");
    assert!(
        smalls >= 3,
        "only {smalls} small requests were answered meanwhile"
    );
    let peak = peak_rss_kib(pid);
    assert!(
        peak.saturating_sub(baseline) < ALLOWED_GROWTH_KIB,
        "peak RSS grew from {baseline} KiB to {peak} KiB while streaming {} MiB each way",
        len / MIB
    );
}
