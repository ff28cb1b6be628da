//! The benchmarks' own gRPC server, as the hidden `grpc-server` subcommand: HTTP/2 in cleartext
//! with prior knowledge (h2c, the h2 crate) that answers every unary call — a POST with
//! `content-type: application/grpc` — with its own request message echoed (HEADERS 200, one DATA,
//! trailers `grpc-status: 0`), and counts the calls it answered, which `GET /__bench/calls` reads.
//! With `call`, the client side: one call checked field by field, and the count read. A proxy's
//! 2xx answers can then be checked against the calls that really reached the server.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use tokio::net::{TcpListener, TcpStream};

use crate::kit::process::{start_own_server_checked, Supervised};

/// The path every benchmark calls: `/package.Service/Method`, as gRPC writes it.
pub const METHOD_PATH: &str = "/bench.Echo/Say";

/// The path that answers the count of calls answered so far (decimal, text/plain).
const CALLS_PATH: &str = "/__bench/calls";

const GRPC: &str = "application/grpc";

/// The request message of every call: gRPC's 5-byte prefix (not compressed, the length
/// big-endian) before a protobuf message whose field 1 is the string "hello from bench!!".
pub fn request_message() -> Vec<u8> {
    const TEXT: &[u8] = b"hello from bench!!";
    let mut protobuf = vec![0x0a, TEXT.len() as u8];
    protobuf.extend_from_slice(TEXT);
    let mut message = vec![0];
    message.extend_from_slice(&(protobuf.len() as u32).to_be_bytes());
    message.extend_from_slice(&protobuf);
    message
}

/// Whether `body` is exactly one length-prefixed, uncompressed gRPC message.
fn is_one_message(body: &[u8]) -> bool {
    body.len() >= 5
        && body[0] == 0
        && u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize == body.len() - 5
}

/// The header fields an h2load call carries beside its `-d` body (a POST by that).
pub const CALL_HEADERS: [&str; 2] = ["content-type: application/grpc", "te: trailers"];

/// Worker threads of the server: the machine's two cores, so that the server, which shares them
/// with the proxy and h2load, is never the one that limits calls/s.
const THREADS: usize = 2;

/// Starts this program's `grpc-server` subcommand on 127.0.0.1:`port` as a supervised child, its
/// log in `dir`, and waits until a call to it is answered in full.
pub fn start(port: u16, dir: &Path) -> anyhow::Result<Supervised> {
    let listen = ["--listen".to_string(), format!("127.0.0.1:{port}")];
    start_own_server_checked(
        "grpc-server",
        &listen,
        port,
        &dir.join("grpc-server.log"),
        call,
    )
}

/// Serves until the process is killed; the benchmark that started it stops it.
pub fn run(listen: SocketAddr) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(THREADS)
        .enable_io()
        .enable_time()
        .build()
        .context("building the gRPC server's runtime")?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        eprintln!("herdsman-bench grpc-server listening on {listen}");
        serve(listener).await;
        Ok(())
    })
}

/// Accepts connections on `listener` for ever, each served by a task of its own.
async fn serve(listener: TcpListener) {
    let calls = Arc::new(AtomicU64::new(0));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_connection(stream, Arc::clone(&calls)));
            }
            // Out of descriptors, or a connection reset before accept: pause rather than spin.
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn serve_connection(stream: TcpStream, calls: Arc<AtomicU64>) {
    let _ = stream.set_nodelay(true);
    let Ok(mut connection) = h2::server::handshake(stream).await else {
        return;
    };
    while let Some(Ok((request, respond))) = connection.accept().await {
        tokio::spawn(answer(request, respond, Arc::clone(&calls)));
    }
}

/// Answers one stream: a unary call with its message echoed and `grpc-status: 0`; the count of
/// calls on `CALLS_PATH`; 415 to a POST that is not gRPC's and 405 to anything else, so that a
/// proxy that changed the call shows as a non-2xx answer in h2load's counts.
async fn answer(
    request: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    calls: Arc<AtomicU64>,
) {
    let is_grpc = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(GRPC.as_bytes()));
    let is_post = request.method() == Method::POST;
    if request.method() == Method::GET && request.uri().path() == CALLS_PATH {
        let count = calls.load(Ordering::Relaxed).to_string();
        let _ = send(
            &mut respond,
            StatusCode::OK,
            "text/plain",
            Some(count.into()),
            None,
        );
        return;
    }
    if !(is_post && is_grpc) {
        let status = if is_post {
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        } else {
            StatusCode::METHOD_NOT_ALLOWED
        };
        let _ = send(&mut respond, status, "text/plain", None, None);
        return;
    }
    let Ok(message) = read_body(&mut request.into_body()).await else {
        return;
    };
    // A call whose message is not one whole gRPC message is answered INVALID_ARGUMENT (3), in a
    // 200 as gRPC answers it, and not counted.
    let (reply, status) = if is_one_message(&message) {
        (Some(message), "0")
    } else {
        (None, "3")
    };
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static(status));
    let counted = reply.is_some();
    if send(&mut respond, StatusCode::OK, GRPC, reply, Some(trailers)).is_ok() && counted {
        calls.fetch_add(1, Ordering::Relaxed);
    }
}

/// A request's or response's whole body, its flow-control window given back as it is read.
async fn read_body(body: &mut h2::RecvStream) -> Result<Bytes, h2::Error> {
    let mut whole = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        whole.extend_from_slice(&chunk);
    }
    Ok(whole.freeze())
}

/// Sends a response head, then `body` and `trailers` if any, ending the stream with the last.
fn send(
    respond: &mut h2::server::SendResponse<Bytes>,
    status: StatusCode,
    content_type: &'static str,
    body: Option<Bytes>,
    trailers: Option<HeaderMap>,
) -> Result<(), h2::Error> {
    let head = Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(())
        .expect("a valid response head");
    let ends_at_head = body.is_none() && trailers.is_none();
    let mut stream = respond.send_response(head, ends_at_head)?;
    if let Some(body) = body {
        stream.send_data(body, trailers.is_none())?;
    }
    if let Some(trailers) = trailers {
        stream.send_trailers(trailers)?;
    }
    Ok(())
}

/// What one call over h2c came back with.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: StatusCode,
    content_type: Option<String>,
    body: Bytes,
    grpc_status: Option<String>,
}

/// How long one call or count may take, connection included.
const CALL_LIMIT: Duration = Duration::from_secs(5);

/// One unary call to 127.0.0.1:`port` over h2c, directly or through a proxy: it must come back
/// 200 with gRPC's content type, the request message echoed whole, and `grpc-status: 0` in the
/// trailers. What a benchmark checks before it times any call.
pub fn call(port: u16) -> anyhow::Result<()> {
    let message = Bytes::from(request_message());
    let answer = exchange(port, Method::POST, METHOD_PATH, Some(message.clone()))?;
    let expected = Answer {
        status: StatusCode::OK,
        content_type: Some(GRPC.into()),
        body: message,
        grpc_status: Some("0".into()),
    };
    if answer != expected {
        bail!("a call to 127.0.0.1:{port}{METHOD_PATH} came back {answer:?}, not {expected:?}");
    }
    Ok(())
}

/// The calls the server on 127.0.0.1:`port` has answered so far (asked of it directly).
pub fn calls_answered(port: u16) -> anyhow::Result<u64> {
    let answer = exchange(port, Method::GET, CALLS_PATH, None)?;
    if answer.status != StatusCode::OK {
        bail!(
            "{CALLS_PATH} on 127.0.0.1:{port} answered {}",
            answer.status
        );
    }
    std::str::from_utf8(&answer.body)
        .ok()
        .and_then(|text| text.parse().ok())
        .with_context(|| format!("{CALLS_PATH} answered {:?}", answer.body))
}

/// One request on a new h2c connection to 127.0.0.1:`port`, on a runtime of its own, and the
/// whole answer with its trailers.
fn exchange(port: u16, method: Method, path: &str, body: Option<Bytes>) -> anyhow::Result<Answer> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("building a runtime for one call")?;
    let exchanged = runtime.block_on(async move {
        tokio::time::timeout(CALL_LIMIT, exchange_on(port, method, path, body)).await
    });
    exchanged
        .with_context(|| format!("127.0.0.1:{port}{path}: no answer within {CALL_LIMIT:?}"))?
        .with_context(|| format!("127.0.0.1:{port}{path} over h2c"))
}

async fn exchange_on(
    port: u16,
    method: Method,
    path: &str,
    body: Option<Bytes>,
) -> anyhow::Result<Answer> {
    {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        let (client, connection) = h2::client::handshake(stream).await?;
        tokio::spawn(connection);
        let mut client = client.ready().await?;
        let mut head = Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1:{port}{path}"));
        if body.is_some() {
            head = head
                .header(http::header::CONTENT_TYPE, GRPC)
                .header(http::header::TE, "trailers");
        }
        let head = head.body(()).context("a request head")?;
        let (response, mut sending) = client.send_request(head, body.is_none())?;
        if let Some(body) = body {
            sending.send_data(body, true)?;
        }
        let response = response.await?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let mut received = response.into_body();
        let whole = read_body(&mut received).await?;
        let grpc_status = received.trailers().await?.and_then(|trailers| {
            trailers
                .get("grpc-status")
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        });
        Ok(Answer {
            status,
            content_type,
            body: whole,
            grpc_status,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server on a port of its own, in a thread of this test process.
    fn serving() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .unwrap();
            runtime.block_on(async { serve(TcpListener::from_std(listener).unwrap()).await });
        });
        port
    }

    #[test]
    fn the_message_is_one_prefixed_protobuf_string() {
        let message = request_message();
        assert_eq!(&message[..7], &[0, 0, 0, 0, 20, 0x0a, 18]);
        assert_eq!(&message[7..], b"hello from bench!!");
        assert!(is_one_message(&message));
        assert!(!is_one_message(&message[..10]));
        assert!(!is_one_message(b"\x01\0\0\0\0"));
    }

    #[test]
    fn a_call_is_echoed_with_grpc_status_0_and_counted() {
        let port = serving();
        assert_eq!(calls_answered(port).unwrap(), 0);
        call(port).unwrap();
        call(port).unwrap();
        assert_eq!(calls_answered(port).unwrap(), 2);
    }

    #[test]
    fn what_is_not_a_call_is_answered_otherwise_and_not_counted() {
        let port = serving();
        let get = exchange(port, Method::GET, METHOD_PATH, None).unwrap();
        assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED);
        let broken = exchange(
            port,
            Method::POST,
            METHOD_PATH,
            Some(Bytes::from_static(b"xx")),
        )
        .unwrap();
        assert_eq!(
            (broken.status, broken.grpc_status.as_deref()),
            (StatusCode::OK, Some("3"))
        );
        assert_eq!(calls_answered(port).unwrap(), 0);
    }
}
