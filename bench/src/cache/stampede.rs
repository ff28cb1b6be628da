//! The stampede: many clients, each on a connection of its own opened beforehand, send one `GET`
//! for the same object at the same moment, and each answer's latency is kept. The clients run on
//! one current-thread runtime of this program: they are released by one signal, and each writes
//! its request as soon as its task runs, so that the last request leaves a few milliseconds after
//! the first (the spread is reported).
//!
//! One expiry (`expiry`): the object fetched once through the proxy (it takes the origin
//! `SLOW_ANSWER`), the clients' connections opened, a wait until the object has gone stale (its
//! max-age and `EXPIRY_MARGIN`, since nginx and HAProxy count freshness in whole seconds), the
//! release, then a wait of `SLOW_ANSWER` and more after the last answer, so that a fetch the
//! proxy made in the background is counted too; the origin's count for the object's path is the
//! expiry's server requests.

use std::net::Ipv4Addr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::origin::{slow_path, Freshness, Origin, SLOW_ANSWER};
use crate::kit::exchange::complete_response_length;

/// How long past its max-age the object is left before the release: nginx and HAProxy keep
/// freshness in whole seconds, so a `max-age=1` object stored at 10.9 s is stale from 12.0 s.
pub const EXPIRY_MARGIN: Duration = Duration::from_millis(1500);

/// After the last answer, before the origin's count is read: room for a background fetch.
const BACKGROUND_FETCH_WAIT: Duration = Duration::from_millis(300);

/// Connections opened at once while the clients connect.
const CONNECTING_AT_ONCE: usize = 100;

/// A request whose whole answer has not come after this long fails.
const ANSWER_LIMIT: Duration = Duration::from_secs(15);

/// What one expiry saw.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpiryOutcome {
    /// Requests for the object that reached the origin from the release on.
    pub server_requests: u64,
    /// Each 2xx answer's latency, in milliseconds, from its request's write to its last byte.
    pub latencies_ms: Vec<f64>,
    /// Requests without a whole 2xx answer, and the first reason.
    pub failures: u64,
    pub first_failure: Option<String>,
    /// From the first request written to the last, in milliseconds.
    pub release_spread_ms: f64,
}

/// One expiry of `freshness`'s object `tag` through the proxy on `port`, with `clients`.
pub fn expiry(
    origin: &Origin,
    port: u16,
    freshness: Freshness,
    tag: &str,
    clients: usize,
) -> anyhow::Result<ExpiryOutcome> {
    let path = slow_path(freshness, tag);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("the clients' runtime")?;
    runtime.block_on(async {
        let mut warm = connect(port).await?;
        let started = Instant::now();
        let status = get(&mut warm, &path).await.context("the first fetch")?;
        if !(200..300).contains(&status) {
            bail!("the first fetch of {path} was answered {status}");
        }
        drop(warm);
        if started.elapsed() < SLOW_ANSWER {
            bail!("the first fetch of {path} did not wait for the origin");
        }
        let stale_at = Instant::now()
            + freshness.max_age().map_or(Duration::ZERO, |age| {
                Duration::from_secs(age) + EXPIRY_MARGIN
            });
        let streams = connect_all(port, clients).await?;
        tokio::time::sleep_until(stale_at.into()).await;
        let before = origin.requests_for(&path);
        let mut outcome = release(streams, &path).await;
        tokio::time::sleep(SLOW_ANSWER + BACKGROUND_FETCH_WAIT).await;
        outcome.server_requests = origin.requests_for(&path) - before;
        Ok(outcome)
    })
}

async fn connect(port: u16) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// `count` connections, `CONNECTING_AT_ONCE` at a time.
async fn connect_all(port: u16, count: usize) -> anyhow::Result<Vec<TcpStream>> {
    let mut streams = Vec::with_capacity(count);
    while streams.len() < count {
        let batch = CONNECTING_AT_ONCE.min(count - streams.len());
        let mut connecting = tokio::task::JoinSet::new();
        for _ in 0..batch {
            connecting.spawn(connect(port));
        }
        while let Some(joined) = connecting.join_next().await {
            streams.push(joined.context("a connecting task")??);
        }
    }
    Ok(streams)
}

/// Every stream sends `GET path` once released, all at the same signal.
async fn release(streams: Vec<TcpStream>, path: &str) -> ExpiryOutcome {
    // A watch rather than a notification: a task first polled after the signal still sees it.
    let (go, released) = watch::channel(false);
    let local = tokio::task::LocalSet::new();
    let request: Rc<[u8]> = request_bytes(path).into();
    let mut tasks = Vec::with_capacity(streams.len());
    for mut stream in streams {
        let (mut released, request) = (released.clone(), Rc::clone(&request));
        tasks.push(local.spawn_local(async move {
            let _ = released.wait_for(|&go| go).await;
            let sent = Instant::now();
            let answered =
                tokio::time::timeout(ANSWER_LIMIT, exchange(&mut stream, &request)).await;
            let result = match answered {
                Ok(Ok(status)) if (200..300).contains(&status) => Ok(sent.elapsed()),
                Ok(Ok(status)) => Err(format!("answered {status}")),
                Ok(Err(e)) => Err(format!("{e:#}")),
                Err(_) => Err(format!("no whole answer in {ANSWER_LIMIT:?}")),
            };
            (sent, result)
        }));
    }
    local
        .run_until(async move {
            // Every task is ready to write before the signal.
            tokio::task::yield_now().await;
            let _ = go.send(true);
            let mut outcome = ExpiryOutcome {
                server_requests: 0,
                latencies_ms: Vec::with_capacity(tasks.len()),
                failures: 0,
                first_failure: None,
                release_spread_ms: 0.0,
            };
            let (mut first_sent, mut last_sent) = (None::<Instant>, None::<Instant>);
            for task in tasks {
                let (sent, result) = match task.await {
                    Ok(done) => done,
                    Err(e) => (Instant::now(), Err(format!("a client's task: {e}"))),
                };
                first_sent = Some(first_sent.map_or(sent, |f| f.min(sent)));
                last_sent = Some(last_sent.map_or(sent, |l| l.max(sent)));
                match result {
                    Ok(took) => outcome.latencies_ms.push(took.as_secs_f64() * 1e3),
                    Err(reason) => {
                        outcome.failures += 1;
                        outcome.first_failure.get_or_insert(reason);
                    }
                }
            }
            if let (Some(first), Some(last)) = (first_sent, last_sent) {
                outcome.release_spread_ms = (last - first).as_secs_f64() * 1e3;
            }
            outcome
        })
        .await
}

fn request_bytes(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes()
}

/// One keep-alive `GET path` on `stream`: the answer's status, once its whole body is in.
pub async fn get(stream: &mut TcpStream, path: &str) -> anyhow::Result<u16> {
    exchange(stream, &request_bytes(path)).await
}

async fn exchange(stream: &mut TcpStream, request: &[u8]) -> anyhow::Result<u16> {
    stream.write_all(request).await?;
    let mut answer = Vec::with_capacity(2048);
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(length) = complete_response_length(&answer)? {
            if answer.len() >= length {
                break;
            }
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            bail!("closed before a whole answer");
        }
        answer.extend_from_slice(&chunk[..read]);
    }
    let status = answer
        .get(9..12)
        .and_then(|digits| std::str::from_utf8(digits).ok())
        .and_then(|digits| digits.parse::<u16>().ok());
    match status {
        Some(status) if answer.starts_with(b"HTTP/1.") => Ok(status),
        _ => bail!("not an HTTP/1 answer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_gets_the_object_and_the_origin_counts_one_fetch_each() {
        // Straight to the origin, which keeps nothing: each client's request reaches it, and
        // each waits for its slow answer.
        let origin = Origin::start().unwrap();
        let outcome = expiry(&origin, origin.port, Freshness::Fresh, "t", 20).unwrap();
        assert_eq!(outcome.server_requests, 20);
        assert_eq!(outcome.failures, 0, "{:?}", outcome.first_failure);
        assert_eq!(outcome.latencies_ms.len(), 20);
        assert!(outcome
            .latencies_ms
            .iter()
            .all(|&ms| ms >= SLOW_ANSWER.as_secs_f64() * 1e3));
        assert!(outcome.release_spread_ms < 500.0);
    }
}
