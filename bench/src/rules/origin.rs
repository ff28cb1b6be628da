//! The server behind every proxy of `rules`, on a thread of this program (`kit::thread_server`):
//! HTTP/1.1 keep-alive, every request answered as soon as its head is in, with the fields an
//! application server sends and operators remove (`Server`, `X-Powered-By`). Two of them: one
//! answering the small body of BENCHMARKING.md (19 bytes, text/plain), one answering the
//! compression corpus's API JSON (benches/corpus/api_json.rs, 592 KiB) to every request.

use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::kit::thread_server::ThreadServer;

mod corpus {
    include!("../../../benches/corpus/api_json.rs");
}

/// What the origin answers every request with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// BENCHMARKING.md's 19 bytes, `text/plain`.
    Small,
    /// The API JSON of the compression corpus, `application/json`.
    Json,
}

/// The API JSON, made once.
pub fn json() -> &'static [u8] {
    static JSON: OnceLock<Vec<u8>> = OnceLock::new();
    JSON.get_or_init(corpus::json_document)
}

/// The whole answer (head and body) for `body`.
fn answer(body: Body) -> Vec<u8> {
    let (kind, bytes) = match body {
        Body::Small => ("text/plain", &b"hello from bench!!\n"[..]),
        Body::Json => ("application/json", json()),
    };
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nServer: bench-origin/1.0\r\nX-Powered-By: bench\r\n\
         Content-Type: {kind}\r\nContent-Length: {}\r\n\r\n",
        bytes.len()
    )
    .into_bytes();
    answer.extend_from_slice(bytes);
    answer
}

/// Starts an origin answering `body` on a free port of 127.0.0.1; stopped when dropped.
pub fn start(body: Body) -> anyhow::Result<ThreadServer> {
    let answer: Arc<[u8]> = answer(body).into();
    ThreadServer::start("rules-origin", move |stream| {
        serve(stream, Arc::clone(&answer))
    })
}

/// Answers each request head on `stream` with `answer` (requests carry no body here), until the
/// client closes.
async fn serve(mut stream: TcpStream, answer: Arc<[u8]>) {
    let _ = stream.set_nodelay(true);
    let mut received = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    loop {
        let mut answers = 0;
        while let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            received.drain(..end + 4);
            answers += 1;
        }
        for _ in 0..answers {
            if stream.write_all(&answer).await.is_err() {
                return;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_carry_the_fields_operators_remove() {
        let small = String::from_utf8(answer(Body::Small)).unwrap();
        assert!(small.contains("\r\nServer: bench-origin/1.0\r\nX-Powered-By: bench\r\n"));
        assert!(small.ends_with("Content-Length: 19\r\n\r\nhello from bench!!\n"));
        let json = answer(Body::Json);
        assert!(json.len() > 500 * 1024, "{}", json.len());
        assert!(json.ends_with(b"]}"));
    }
}
