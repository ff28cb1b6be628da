//! An HTTP/2 server for tests (the `h2` crate, cleartext with prior knowledge, as gRPC servers
//! speak): it records every request it gets (head, body, trailers), how many streams each
//! connection had open at most, and answers by path — `/slow` after 300 ms, `/grpc` as a gRPC
//! server-streaming call (a message, a pause, another, then `grpc-status: 0` in trailers),
//! `/trailers-only` with a gRPC error in its only HEADERS frame, `/echo` with the request's body,
//! `/grpc.health.v1.Health/Check` with SERVING or NOT_SERVING as `serving` says,
//! `/echo-stream` as a bidirectional call (each DATA frame sent back as it comes), anything else
//! with a short body of known length.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

/// What the server saw of one request.
#[derive(Debug, Clone, Default)]
pub struct SeenRequest {
    pub method: String,
    pub uri: String,
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
}

impl SeenRequest {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How the server behaves.
#[derive(Debug, Clone, Copy)]
pub struct H2Options {
    /// Its SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_streams: u32,
    /// Each connection is told GOAWAY (gracefully) once it has taken this many streams.
    pub goaway_after: Option<usize>,
    /// The pause between the two messages of `/grpc`.
    pub grpc_pause: Duration,
    /// This stream of each connection (1 for the first) is refused (RST_STREAM REFUSED_STREAM:
    /// not processed, §8.7) and not recorded.
    pub refuse_stream: Option<usize>,
}

impl Default for H2Options {
    fn default() -> H2Options {
        H2Options {
            max_streams: 100,
            goaway_after: None,
            grpc_pause: Duration::from_millis(10),
            refuse_stream: None,
        }
    }
}

/// The running server; it stops with the test process.
pub struct H2Server {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
    /// Connections accepted.
    pub connections: Arc<AtomicUsize>,
    /// The most streams any one connection had open at once.
    pub peak_streams: Arc<AtomicUsize>,
    /// What its gRPC health service answers: SERVING, else NOT_SERVING.
    pub serving: Arc<AtomicBool>,
}

impl H2Server {
    pub fn start(options: H2Options) -> H2Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let peak_streams = Arc::new(AtomicUsize::new(0));
        let serving = Arc::new(AtomicBool::new(true));
        let server = H2Server {
            addr,
            seen: Arc::clone(&seen),
            connections: Arc::clone(&connections),
            peak_streams: Arc::clone(&peak_streams),
            serving: Arc::clone(&serving),
        };
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((socket, _)) = listener.accept().await else {
                        continue;
                    };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let (seen, peak) = (Arc::clone(&seen), Arc::clone(&peak_streams));
                    let serving = Arc::clone(&serving);
                    tokio::spawn(serve_connection(socket, options, seen, peak, serving));
                }
            });
        });
        server
    }

    /// The requests seen so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve_connection(
    socket: tokio::net::TcpStream,
    options: H2Options,
    seen: Arc<Mutex<Vec<SeenRequest>>>,
    peak: Arc<AtomicUsize>,
    serving: Arc<AtomicBool>,
) {
    let Ok(mut connection) = h2::server::Builder::new()
        .max_concurrent_streams(options.max_streams)
        .handshake::<_, Bytes>(socket)
        .await
    else {
        return;
    };
    let open = Arc::new(AtomicUsize::new(0));
    let mut taken = 0;
    while let Some(Ok((request, mut respond))) = connection.accept().await {
        taken += 1;
        if options.refuse_stream == Some(taken) {
            respond.send_reset(h2::Reason::REFUSED_STREAM);
            drop(request);
            continue;
        }
        let now = open.fetch_add(1, Ordering::SeqCst) + 1;
        peak.fetch_max(now, Ordering::SeqCst);
        let (open, seen) = (Arc::clone(&open), Arc::clone(&seen));
        let serving = serving.load(Ordering::SeqCst);
        tokio::spawn(async move {
            answer(request, respond, options, seen, serving).await;
            open.fetch_sub(1, Ordering::SeqCst);
        });
        if options.goaway_after == Some(taken) {
            connection.graceful_shutdown();
        }
    }
}

fn fields_of(map: &http::HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
        .collect()
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    options: H2Options,
    seen: Arc<Mutex<Vec<SeenRequest>>>,
    serving: bool,
) {
    let (head, mut body) = request.into_parts();
    if head.uri.path() == "/echo-stream" {
        let head = http::Response::builder()
            .status(200)
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let Ok(mut send) = respond.send_response(head, false) else {
            return;
        };
        while let Some(Ok(data)) = body.data().await {
            let _ = body.flow_control().release_capacity(data.len());
            let _ = send.send_data(data, false);
        }
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        let _ = send.send_trailers(trailers);
        return;
    }
    let mut record = SeenRequest {
        method: head.method.to_string(),
        uri: head.uri.to_string(),
        fields: fields_of(&head.headers),
        ..SeenRequest::default()
    };
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
        record.body.extend_from_slice(&data);
    }
    if let Ok(Some(trailers)) = body.trailers().await {
        record.trailers = fields_of(&trailers);
    }
    let body_back = record.body.clone();
    seen.lock().unwrap().push(record);
    let path = head.uri.path().to_string();
    let response = |fields: &[(&str, &str)]| {
        let mut response = http::Response::builder().status(200);
        for (name, value) in fields {
            response = response.header(*name, *value);
        }
        response.body(()).unwrap()
    };
    match path.as_str() {
        "/trailers-only" => {
            let head = response(&[
                ("content-type", "application/grpc"),
                ("grpc-status", "5"),
                ("grpc-message", "no such thing"),
            ]);
            let _ = respond.send_response(head, true);
        }
        "/grpc.health.v1.Health/Check" => {
            let head = response(&[("content-type", "application/grpc")]);
            let Ok(mut send) = respond.send_response(head, false) else {
                return;
            };
            // HealthCheckResponse { status: SERVING (1) or NOT_SERVING (2) }.
            let status = if serving { 1 } else { 2 };
            let _ = send.send_data(Bytes::from(vec![0, 0, 0, 0, 2, 0x08, status]), false);
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            let _ = send.send_trailers(trailers);
        }
        "/grpc" => {
            let head = response(&[("content-type", "application/grpc")]);
            let Ok(mut send) = respond.send_response(head, false) else {
                return;
            };
            let _ = send.send_data(Bytes::from_static(b"\0\0\0\0\x05first"), false);
            tokio::time::sleep(options.grpc_pause).await;
            let _ = send.send_data(Bytes::from_static(b"\0\0\0\0\x06second"), false);
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            trailers.insert("grpc-message", "fine".parse().unwrap());
            let _ = send.send_trailers(trailers);
        }
        "/echo" => {
            let length = body_back.len().to_string();
            let head = response(&[("content-length", &length)]);
            if let Ok(mut send) = respond.send_response(head, body_back.is_empty()) {
                if !body_back.is_empty() {
                    let _ = send.send_data(Bytes::from(body_back), true);
                }
            }
        }
        other => {
            if other == "/slow" {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let head = response(&[("content-length", "10")]);
            if let Ok(mut send) = respond.send_response(head, false) {
                let _ = send.send_data(Bytes::from_static(b"h2 says hi"), true);
            }
        }
    }
}
