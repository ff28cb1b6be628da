//! The health checker: one thread for the whole process (not one per worker), running each
//! pool's active checks (`[pool.health]`: TCP connect, or an HTTP request whose status must be in
//! range), deciding on passive ejections the workers report, ending ejections and stepping slow
//! starts. Every decision goes through the registry, which publishes a new snapshot; the workers
//! never wait on any of this.
//!
//! Its cost grows with the checks, not with the servers times the checks: a check that changes
//! nothing tells the registry nothing (a passing one asks it only when the last snapshot had the
//! server out of rotation, which the checker learns as it follows the snapshots); what checks
//! change goes out in one snapshot at most every `PUBLISH_EVERY`, and following a snapshot is one
//! pass over the servers (without an allocation per server). Each check runs on a timer of its
//! own, spread over the interval, and closes its connection with a reset, so that 10,000 checks
//! a second leave no sockets in TIME_WAIT here. The thread's CPU is reported
//! (`Stats::health_checker_tid`). `herdsman-bench health-checks` measures it all.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::AbortHandle;

use crate::config::server_tls::ServerTls;
use crate::config::{HealthCheck, HealthKind, ServerAddr};
use crate::stats::{procfs, Stats};
use crate::transport::Stream;
use crate::upstream::health::{HealthView, ServerReport, REFUSED};
use crate::upstream::registry::Registry;
use crate::upstream::Snapshot;

/// The running checker; it stops when the `stop` given to [`start`] becomes true.
pub struct HealthHandle {
    thread: JoinHandle<()>,
}

impl HealthHandle {
    pub fn join(self) {
        if self.thread.join().is_err() {
            tracing::error!("the health checker's thread panicked");
        }
    }
}

/// Starts the checker's thread, which notes its kernel thread id in `stats` (for its CPU).
/// `failing` carries what workers saw of servers: failures in a row that reached their pool's
/// passive limit, and refused connections.
pub fn start(
    registry: Arc<Registry>,
    failing: mpsc::UnboundedReceiver<ServerReport>,
    stop: watch::Receiver<bool>,
    stats: Arc<Stats>,
) -> io::Result<HealthHandle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let thread = std::thread::Builder::new()
        .name("herdsman-health".into())
        .spawn(move || {
            stats
                .health_checker_tid
                .store(procfs::current_thread_id(), Ordering::Relaxed);
            // Checks run as local tasks: a check's stream (`transport::Stream`, TLS state in
            // a cell) stays on this thread.
            let local = tokio::task::LocalSet::new();
            runtime.block_on(local.run_until(run(registry, failing, stop)));
            // Dropping the runtime cancels the checks still running.
        })?;
    Ok(HealthHandle { thread })
}

/// What checks find is published together, no sooner than this after the last snapshot of
/// theirs: the first change after a quiet spell goes out at once, those in a busy second wait
/// at most this long for the one snapshot that carries them all. A snapshot of 10,000 servers
/// takes milliseconds to build, and a hundred servers' checks failing within a second would
/// otherwise build a hundred and take the checker's whole thread (`herdsman-bench
/// health-checks`, changing).
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

async fn run(
    registry: Arc<Registry>,
    mut failing: mpsc::UnboundedReceiver<ServerReport>,
    mut stop: watch::Receiver<bool>,
) {
    let mut published = registry.subscribe();
    let mut checks = Checks::default();
    let found = Arc::clone(&checks.found);
    checks.follow(&registry);
    let mut due = registry.tick();
    // When the checks' changes were last published, and when those waiting go out.
    let (mut last_published, mut publish_at): (Option<Instant>, Option<Instant>) = (None, None);
    loop {
        let wait_for_due = wait_until(due);
        let wait_to_publish = wait_until(publish_at);
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            report = failing.recv() => {
                // Published at once: requests must stop going there now.
                match report {
                    None => return,
                    Some(ServerReport::Failing(server)) => {
                        registry.eject(server);
                    }
                    Some(ServerReport::Refused(server)) => {
                        if let Some(addr) = registry.refused(server) {
                            checks.probe_refused(&registry, server, addr);
                        }
                    }
                }
            }
            // Every snapshot: the checks follow it, and a server back in service may start a
            // slow start, an ejection has an end, both of which `tick` schedules.
            result = published.changed() => {
                if result.is_err() {
                    return;
                }
                checks.follow(&registry);
                due = registry.tick();
            }
            () = found.notified() => {
                let now = Instant::now();
                let earliest = last_published.map_or(now, |at| at + PUBLISH_EVERY);
                publish_at.get_or_insert(earliest.max(now));
            }
            () = wait_for_due => due = registry.tick(),
            () = wait_to_publish => {}
        }
        if publish_at.is_some_and(|at| at <= Instant::now()) {
            publish_at = None;
            if registry.publish_health() {
                last_published = Some(Instant::now());
            }
        }
    }
}

/// Sleeps until `at`, or for ever without one.
async fn wait_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The check task of each server with active checks, and the probe of each server out of
/// rotation for a refusal, by server id.
#[derive(Default)]
struct Checks {
    /// Told by a check or a probe that found a change, which waits in the registry to be
    /// published.
    found: Arc<Notify>,
    running: HashMap<u64, Running>,
    /// Whether the last snapshot still has the server out for its refusal: its probe stops once
    /// not.
    refusals: HashMap<u64, Arc<AtomicBool>>,
}

/// One server's checks as they run.
struct Running {
    addr: ServerAddr,
    /// Its pool's `[pool.health]`, shared by the pool's servers.
    check: Arc<HealthCheck>,
    /// Out of rotation in the last snapshot (down, refused or ejected): only then has a check
    /// that passes anything to tell the registry.
    held_out: Arc<AtomicBool>,
    task: AbortHandle,
    /// The generation of the last snapshot that had the server with these checks.
    seen: u64,
}

impl Checks {
    /// Starts checks for servers the current snapshot has, tells each running check whether its
    /// server is out of rotation, and stops the checks of servers it no longer has (or whose
    /// pool's checks changed). A server whose checks stop is up again as far as checks go. One
    /// pass over the servers; an allocation only for a check that starts.
    fn follow(&mut self, registry: &Arc<Registry>) {
        let snapshot = registry.snapshot_handle().load_full();
        let generation = snapshot.generation;
        let mut stopped = Vec::new();
        for (pool, check) in checked_pools(&snapshot) {
            let mut shared: Option<Arc<HealthCheck>> = None;
            for server in &pool.servers {
                if let Some(running) = self.running.get_mut(&server.id) {
                    if running.addr == server.addr && *running.check == *check {
                        running.seen = generation;
                        running.held_out.store(!server.available, Ordering::Relaxed);
                        continue;
                    }
                    running.task.abort();
                    stopped.push(server.id);
                }
                let check = shared.get_or_insert_with(|| Arc::new(check.clone()));
                let held_out = Arc::new(AtomicBool::new(!server.available));
                let task = tokio::task::spawn_local(check_server(
                    Reporter::new(registry, &self.found, server.id),
                    server.addr.clone(),
                    server.tls.clone(),
                    Arc::clone(check),
                    Arc::clone(&held_out),
                ));
                let running = Running {
                    addr: server.addr.clone(),
                    check: Arc::clone(check),
                    held_out,
                    task: task.abort_handle(),
                    seen: generation,
                };
                self.running.insert(server.id, running);
            }
        }
        self.running.retain(|id, running| {
            let keep = running.seen == generation;
            if !keep {
                running.task.abort();
                stopped.push(*id);
            }
            keep
        });
        registry.checks_stopped(&stopped);
        if !self.refusals.is_empty() {
            let servers = snapshot.pools.iter().flat_map(|pool| &pool.servers);
            let still: HashSet<u64> = servers
                .filter(|server| self.refusals.contains_key(&server.id) && is_refused(server))
                .map(|server| server.id)
                .collect();
            self.refusals.retain(|id, refused| {
                let keep = still.contains(id);
                refused.store(keep, Ordering::Relaxed);
                keep
            });
        }
    }

    /// Probes the server with this id, which a refusal took out, until it listens.
    fn probe_refused(&mut self, registry: &Arc<Registry>, id: u64, addr: ServerAddr) {
        let still_refused = Arc::new(AtomicBool::new(true));
        self.refusals.insert(id, Arc::clone(&still_refused));
        let reporter = Reporter::new(registry, &self.found, id);
        let probe = probe_until_listening(reporter, addr, still_refused);
        tokio::spawn(probe);
    }
}

/// Whether the snapshot has `server` out of rotation for a refusal (and not down by its active
/// checks, which end the refusal themselves when they pass).
fn is_refused(server: &crate::upstream::Server) -> bool {
    matches!(&server.health, HealthView::Down { reason } if reason == REFUSED)
}

/// The pools of `snapshot` with active checks, and their checks.
fn checked_pools(
    snapshot: &Snapshot,
) -> impl Iterator<Item = (&crate::upstream::Pool, &HealthCheck)> {
    snapshot
        .pools
        .iter()
        .filter_map(|pool| Some((pool, pool.health.as_ref()?)))
}

/// How a check or a probe tells the registry of one server what it found: the change waits in
/// the registry, and the checker's loop is told to publish it.
struct Reporter {
    registry: Arc<Registry>,
    found: Arc<Notify>,
    id: u64,
}

impl Reporter {
    fn new(registry: &Arc<Registry>, found: &Arc<Notify>, id: u64) -> Reporter {
        Reporter {
            registry: Arc::clone(registry),
            found: Arc::clone(found),
            id,
        }
    }

    /// Makes a change (`change` returns whether it changed anything) and, if it did, says so.
    fn report(&self, change: impl FnOnce(&Registry, u64) -> bool) {
        if change(&self.registry, self.id) {
            self.found.notify_one();
        }
    }
}

/// Checks one server every `interval` (give or take a tenth, and first after a random part of
/// it, so that checks of many servers do not fall in step), and marks it down after `fall`
/// failures in a row and up again after `rise` successes. A success also ends a refusal, and
/// `rise` of them an ejection, when the last snapshot had the server out (`held_out`).
async fn check_server(
    reporter: Reporter,
    addr: ServerAddr,
    tls: Option<ServerTls>,
    check: Arc<HealthCheck>,
    held_out: Arc<AtomicBool>,
) {
    let mut rng = fastrand::Rng::new();
    let (mut successes, mut failures, mut down) = (0u32, 0u32, false);
    // Made once: the same bytes go to the server every time.
    let request = http_request(&check.kind, &addr);
    tokio::time::sleep(check.interval.mul_f64(rng.f64())).await;
    loop {
        let started = tokio::time::Instant::now();
        let probe = probe(&addr, tls.as_ref(), &check.kind, request.as_deref());
        let outcome = match tokio::time::timeout(check.timeout, probe).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("no answer within {:?}", check.timeout)),
        };
        match outcome {
            Ok(()) => {
                successes += 1;
                failures = 0;
                if held_out.load(Ordering::Relaxed) {
                    // It listens: a refusal no longer holds it out; and checks that pass `rise`
                    // times end an ejection (they are what says a server is well).
                    reporter.report(|registry, id| registry.listening(id));
                    if successes >= check.rise {
                        reporter.report(|registry, id| registry.checks_pass(id));
                    }
                }
                if down && successes >= check.rise {
                    down = false;
                    reporter.report(|registry, id| registry.set_down(id, None));
                }
            }
            Err(reason) => {
                failures += 1;
                successes = 0;
                if !down && failures >= check.fall {
                    down = true;
                    reporter.report(|registry, id| registry.set_down(id, Some(reason)));
                }
            }
        }
        let jitter = 0.9 + 0.2 * rng.f64();
        tokio::time::sleep_until(started + check.interval.mul_f64(jitter)).await;
    }
}

/// After a refusal: connects to the server, sooner at first and then every 200 ms, until a
/// connection opens — then the server is back in rotation — or something else (an active check,
/// a change that removed the server) has ended the refusal. A server restarted by a deploy is
/// back within a fifth of a second of listening; a connect attempt to a closed port costs
/// either side next to nothing.
/// `still_refused` is the last snapshot's word (see `Checks::follow`), so that a probe's loop
/// asks the registry nothing.
async fn probe_until_listening(
    reporter: Reporter,
    addr: ServerAddr,
    still_refused: Arc<AtomicBool>,
) {
    const FIRST: std::time::Duration = std::time::Duration::from_millis(20);
    const MOST: std::time::Duration = std::time::Duration::from_millis(200);
    const CONNECT: std::time::Duration = std::time::Duration::from_secs(1);
    let mut pause = FIRST;
    loop {
        tokio::time::sleep(pause).await;
        if !still_refused.load(Ordering::Relaxed) {
            return;
        }
        let connect = tokio::time::timeout(CONNECT, Stream::connect(&addr)).await;
        if let Ok(Ok(stream)) = connect {
            stream.reset_on_close();
            reporter.report(|registry, id| registry.listening(id));
            return;
        }
        pause = (pause * 2).min(MOST);
    }
}

/// The request an HTTP check sends to `addr` (`None` for a TCP check): for `Host`, the check's
/// `host`, else the address (`localhost` for a UNIX socket).
fn http_request(kind: &HealthKind, addr: &ServerAddr) -> Option<Box<[u8]>> {
    let HealthKind::Http {
        method, path, host, ..
    } = kind
    else {
        return None;
    };
    let host = host.clone().unwrap_or_else(|| match addr {
        ServerAddr::Tcp(addr) => addr.to_string(),
        ServerAddr::Unix(_) => "localhost".to_string(),
    });
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: herdsman-health\r\n\
         Connection: close\r\n\r\n"
    );
    Some(request.into_bytes().into_boxed_slice())
}

/// One check: `Ok` or why it failed. `request` is `http_request`'s for `kind`. The connection
/// closes with a reset, whoever closes first: a check every 100 µs closed the usual way would keep
/// some 600,000 sockets in TIME_WAIT here for their minute (Linux drops them past
/// `tcp_max_tw_buckets`, complaining in the kernel log), where a reset leaves none.
/// On a server of a pool with `[pool.tls]` (`tls`), the check is made over TLS, with the pool's
/// settings: a server whose handshake fails (its certificate does not verify, say) fails it.
async fn probe(
    addr: &ServerAddr,
    tls: Option<&ServerTls>,
    kind: &HealthKind,
    request: Option<&[u8]>,
) -> Result<(), String> {
    let mut stream = Stream::connect(addr)
        .await
        .map_err(|error| format!("connect: {error}"))?;
    stream.reset_on_close();
    if let Some(tls) = tls {
        stream = stream
            .start_tls(tls)
            .await
            .map_err(|failure| format!("TLS handshake: {failure}"))?;
    }
    if let HealthKind::Grpc { service } = kind {
        return grpc_check(stream, tls.is_some(), service).await;
    }
    let (
        HealthKind::Http {
            method,
            path,
            expect,
            ..
        },
        Some(request),
    ) = (kind, request)
    else {
        return Ok(());
    };
    stream
        .write_all(request)
        .await
        .map_err(|error| format!("sending the check: {error}"))?;
    let status = read_status(&mut stream).await?;
    if (expect.0..=expect.1).contains(&status) {
        Ok(())
    } else {
        Err(format!(
            "{method} {path} answered {status}, expected {}-{}",
            expect.0, expect.1
        ))
    }
}

/// A gRPC health check (`grpc.health.v1.Health/Check`) on a connection just made: HTTP/2 (ALPN
/// `h2` over TLS, else prior knowledge), one call asking for `service`, and the answer must be
/// `grpc-status: 0` with the status SERVING. The messages are tiny protobufs, written and read
/// here by hand: the request `{ service = 1: string }`, the answer `{ status = 1: enum }`.
async fn grpc_check(stream: Stream, tls: bool, service: &str) -> Result<(), String> {
    if tls && !stream.agreed_alpn(crate::config::tls::ALPN_H2) {
        return Err("the server did not agree to HTTP/2 (ALPN h2)".to_string());
    }
    let (send, connection) = h2::client::handshake(stream)
        .await
        .map_err(|error| format!("HTTP/2 handshake: {error}"))?;
    // The connection's frames move while the call waits; it ends with this check.
    let driver = tokio::task::spawn_local(async move {
        let _ = connection.await;
    });
    let answer = grpc_call(send, tls, service).await;
    driver.abort();
    answer
}

/// SERVING in `grpc.health.v1.HealthCheckResponse.ServingStatus`.
const SERVING: u64 = 1;

async fn grpc_call(
    send: h2::client::SendRequest<bytes::Bytes>,
    tls: bool,
    service: &str,
) -> Result<(), String> {
    let call_failed = |error: h2::Error| format!("the check's call: {error}");
    let scheme = if tls { "https" } else { "http" };
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("{scheme}://health/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "herdsman-health")
        .body(())
        .expect("a valid request");
    // A length-prefixed message: not compressed, its length, then field 1 (the service).
    let mut message = vec![0u8];
    let field_len = if service.is_empty() {
        0
    } else {
        2 + service.len()
    };
    message.extend_from_slice(&(field_len as u32).to_be_bytes());
    if !service.is_empty() {
        message.push(0x0a);
        message.push(u8::try_from(service.len()).map_err(|_| "service name too long")?);
        message.extend_from_slice(service.as_bytes());
    }
    let mut send = send.ready().await.map_err(call_failed)?;
    let (response, mut body) = send.send_request(request, false).map_err(call_failed)?;
    body.send_data(bytes::Bytes::from(message), true)
        .map_err(call_failed)?;
    let (head, mut answer) = response.await.map_err(call_failed)?.into_parts();
    if head.status != http::StatusCode::OK {
        return Err(format!("the check answered HTTP {}", head.status.as_u16()));
    }
    let mut bytes = Vec::new();
    while let Some(data) = answer.data().await {
        let data = data.map_err(call_failed)?;
        let _ = answer.flow_control().release_capacity(data.len());
        bytes.extend_from_slice(&data);
        if bytes.len() > 1024 {
            return Err("the check's answer is longer than 1 KiB".to_string());
        }
    }
    let trailers = answer.trailers().await.map_err(call_failed)?;
    // A trailers-only answer has its status in the head.
    let fields = trailers.as_ref().unwrap_or(&head.headers);
    let status = fields
        .get("grpc-status")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("none");
    if status != "0" {
        let message = fields
            .get("grpc-message")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        return Err(format!(
            "the check's call failed: grpc-status {status} {message}"
        ));
    }
    match serving_status(&bytes) {
        Some(SERVING) => Ok(()),
        Some(other) => Err(format!("the server says {other}, not SERVING (1)")),
        None => Err("the check's answer is not a HealthCheckResponse".to_string()),
    }
}

/// The `status` field (1, a varint) of the one length-prefixed HealthCheckResponse in `bytes`;
/// 0 (UNKNOWN) when it is absent, as protobuf leaves a default out.
fn serving_status(bytes: &[u8]) -> Option<u64> {
    let (prefix, message) = (bytes.get(..5)?, bytes.get(5..)?);
    let length = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if prefix[0] != 0 || message.len() != length {
        return None;
    }
    let mut status = 0;
    let mut at = 0;
    while at < message.len() {
        let key = message[at];
        at += 1;
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = *message.get(at)?;
            at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 || shift > 63 {
                break;
            }
        }
        match key {
            0x08 => status = value,
            // Only varint fields are read; anything else is not this message.
            _ if key & 0x7 == 0 => {}
            _ => return None,
        }
    }
    Some(status)
}

/// The status code of the response's first line.
async fn read_status(stream: &mut Stream) -> Result<u16, String> {
    // On the stack: nothing is allocated for a check that passes.
    let mut line = [0u8; 1024];
    let mut read = 0;
    while !line[..read].contains(&b'\n') {
        if read == line.len() {
            return Err("the status line is longer than 1 KiB".to_string());
        }
        match stream.read(&mut line[read..]).await {
            Ok(0) => return Err("closed before a status line".to_string()),
            Ok(n) => read += n,
            Err(error) => return Err(format!("reading the answer: {error}")),
        }
    }
    let text = String::from_utf8_lossy(&line[..read]);
    let mut words = text.split_ascii_whitespace();
    match (
        words.next(),
        words.next().and_then(|code| code.parse::<u16>().ok()),
    ) {
        (Some(version), Some(status)) if version.starts_with("HTTP/1.") => Ok(status),
        _ => Err(format!(
            "not an HTTP response: {:?}",
            text.lines().next().unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer_once(response: &'static [u8]) -> ServerAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request).await;
            let _ = stream.write_all(response).await;
        });
        addr.into()
    }

    /// One check of `addr`, as a check task makes it.
    async fn check(addr: &ServerAddr, kind: &HealthKind) -> Result<(), String> {
        probe(addr, None, kind, http_request(kind, addr).as_deref()).await
    }

    fn http(expect: (u16, u16)) -> HealthKind {
        HealthKind::Http {
            method: "GET".into(),
            path: "/healthz".into(),
            host: None,
            expect,
        }
    }

    #[tokio::test]
    async fn an_http_check_needs_a_status_in_range() {
        let ok = answer_once(b"HTTP/1.1 204 No Content\r\n\r\n").await;
        assert_eq!(check(&ok, &http((200, 399))).await, Ok(()));
        let failing = answer_once(b"HTTP/1.1 503 Unavailable\r\n\r\n").await;
        assert_eq!(
            check(&failing, &http((200, 399))).await,
            Err("GET /healthz answered 503, expected 200-399".to_string())
        );
        let garbage = answer_once(b"hello\r\n").await;
        assert!(check(&garbage, &http((200, 399)))
            .await
            .unwrap_err()
            .contains("not an HTTP"));
    }

    #[tokio::test]
    async fn a_refused_connection_fails_both_kinds() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().into();
        drop(listener);
        assert!(check(&addr, &HealthKind::Tcp)
            .await
            .unwrap_err()
            .starts_with("connect:"));
        assert!(check(&addr, &http((200, 399))).await.is_err());
    }

    #[tokio::test]
    async fn a_server_on_a_unix_socket_is_checked_there_as_localhost() {
        let path = std::env::temp_dir().join(format!("herdsman-check-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let addr = ServerAddr::Unix(path.as_path().into());
        let missing = check(&addr, &HealthKind::Tcp).await.unwrap_err();
        assert!(missing.contains("no socket at"), "{missing}");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let answered = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 512];
            let n = stream.read(&mut request).await.unwrap();
            let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
            request.truncate(n);
            String::from_utf8(request).unwrap()
        });
        assert_eq!(check(&addr, &http((200, 399))).await, Ok(()));
        let request = answered.await.unwrap();
        assert!(
            request.starts_with("GET /healthz HTTP/1.1\r\nHost: localhost\r\n"),
            "{request}"
        );
        let _ = std::fs::remove_file(&path);
    }
}
