//! The health checker: one thread for the whole process (not one per worker), running each
//! pool's active checks (`[pool.health]`: TCP connect, or an HTTP request whose status must be in
//! range), deciding on passive ejections the workers report, ending ejections and stepping slow
//! starts. Every decision goes through the registry, which publishes a new snapshot; the workers
//! never wait on any of this.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::AbortHandle;

use crate::config::{HealthCheck, HealthKind};
use crate::upstream::health::ServerReport;
use crate::upstream::registry::Registry;

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

/// Starts the checker's thread. `failing` carries what workers saw of servers: failures in a row
/// that reached their pool's passive limit, and refused connections.
pub fn start(
    registry: Arc<Registry>,
    failing: mpsc::UnboundedReceiver<ServerReport>,
    stop: watch::Receiver<bool>,
) -> io::Result<HealthHandle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let thread = std::thread::Builder::new()
        .name("herdsman-health".into())
        .spawn(move || {
            runtime.block_on(run(registry, failing, stop));
            // Dropping the runtime cancels the checks still running.
        })?;
    Ok(HealthHandle { thread })
}

async fn run(
    registry: Arc<Registry>,
    mut failing: mpsc::UnboundedReceiver<ServerReport>,
    mut stop: watch::Receiver<bool>,
) {
    let changed = Arc::new(Notify::new());
    let mut published = registry.subscribe();
    let mut checks = Checks::default();
    checks.follow(&registry, &changed);
    let mut due = registry.tick();
    loop {
        let wait_for_due = async {
            match due {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            report = failing.recv() => {
                match report {
                    None => return,
                    Some(ServerReport::Failing(server)) => {
                        registry.eject(server);
                    }
                    Some(ServerReport::Refused(server)) => {
                        if let Some(addr) = registry.refused(server) {
                            tokio::spawn(probe_until_listening(Arc::clone(&registry), server, addr));
                        }
                    }
                }
            }
            result = published.changed() => {
                if result.is_err() {
                    return;
                }
                checks.follow(&registry, &changed);
            }
            () = changed.notified() => {}
            () = wait_for_due => {}
        }
        due = registry.tick();
    }
}

/// The check task of each server with active checks, by server id, with what it checks.
#[derive(Default)]
struct Checks {
    running: HashMap<u64, (SocketAddr, HealthCheck, AbortHandle)>,
}

impl Checks {
    /// Starts checks for servers the current snapshot has and stops those of servers it no
    /// longer has (or whose pool's checks changed). A server whose checks stop is up again as
    /// far as checks go.
    fn follow(&mut self, registry: &Arc<Registry>, changed: &Arc<Notify>) {
        let snapshot = registry.snapshot_handle().load_full();
        let mut wanted: HashMap<u64, (SocketAddr, HealthCheck)> = HashMap::new();
        for pool in &snapshot.pools {
            if let Some(check) = &pool.health {
                for server in &pool.servers {
                    wanted.insert(server.id, (server.addr, check.clone()));
                }
            }
        }
        self.running.retain(|id, (addr, check, task)| {
            let keep = wanted.get(id) == Some(&(*addr, check.clone()));
            if !keep {
                task.abort();
                registry.set_down(*id, None);
            }
            keep
        });
        for (id, (addr, check)) in wanted {
            if self.running.contains_key(&id) {
                continue;
            }
            let task = tokio::spawn(check_server(
                Arc::clone(registry),
                Arc::clone(changed),
                id,
                addr,
                check.clone(),
            ));
            self.running.insert(id, (addr, check, task.abort_handle()));
        }
    }
}

/// Checks one server every `interval` (give or take a tenth, and first after a random part of
/// it, so that checks of many servers do not fall in step), and marks it down after `fall`
/// failures in a row and up again after `rise` successes.
async fn check_server(
    registry: Arc<Registry>,
    changed: Arc<Notify>,
    id: u64,
    addr: SocketAddr,
    check: HealthCheck,
) {
    let mut rng = fastrand::Rng::new();
    let (mut successes, mut failures, mut down) = (0u32, 0u32, false);
    tokio::time::sleep(check.interval.mul_f64(rng.f64())).await;
    loop {
        let started = tokio::time::Instant::now();
        let outcome = match tokio::time::timeout(check.timeout, probe(addr, &check.kind)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("no answer within {:?}", check.timeout)),
        };
        match outcome {
            Ok(()) => {
                successes += 1;
                failures = 0;
                // It listens: a refusal no longer holds it out; and checks that pass `rise`
                // times end an ejection (they are what says a server is well).
                registry.listening(id);
                if successes >= check.rise {
                    registry.checks_pass(id);
                }
                if down && successes >= check.rise {
                    down = false;
                    registry.set_down(id, None);
                    changed.notify_one();
                }
            }
            Err(reason) => {
                failures += 1;
                successes = 0;
                if !down && failures >= check.fall {
                    down = true;
                    registry.set_down(id, Some(reason));
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
async fn probe_until_listening(registry: Arc<Registry>, id: u64, addr: SocketAddr) {
    const FIRST: std::time::Duration = std::time::Duration::from_millis(20);
    const MOST: std::time::Duration = std::time::Duration::from_millis(200);
    const CONNECT: std::time::Duration = std::time::Duration::from_secs(1);
    let mut pause = FIRST;
    loop {
        tokio::time::sleep(pause).await;
        if !registry.is_refused(id) {
            return;
        }
        let connect = tokio::time::timeout(CONNECT, TcpStream::connect(addr)).await;
        if let Ok(Ok(_)) = connect {
            registry.listening(id);
            return;
        }
        pause = (pause * 2).min(MOST);
    }
}

/// One check: `Ok` or why it failed.
async fn probe(addr: SocketAddr, kind: &HealthKind) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|error| format!("connect: {error}"))?;
    let HealthKind::Http {
        method,
        path,
        host,
        expect,
    } = kind
    else {
        return Ok(());
    };
    let host = host.clone().unwrap_or_else(|| addr.to_string());
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: herdsman-health\r\n\
         Connection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
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

/// The status code of the response's first line.
async fn read_status(stream: &mut TcpStream) -> Result<u16, String> {
    let mut line = Vec::with_capacity(64);
    let mut chunk = [0u8; 256];
    while !line.contains(&b'\n') {
        if line.len() > 1024 {
            return Err("the status line is longer than 1 KiB".to_string());
        }
        match stream.read(&mut chunk).await {
            Ok(0) => return Err("closed before a status line".to_string()),
            Ok(n) => line.extend_from_slice(&chunk[..n]),
            Err(error) => return Err(format!("reading the answer: {error}")),
        }
    }
    let text = String::from_utf8_lossy(&line);
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

    async fn answer_once(response: &'static [u8]) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request).await;
            let _ = stream.write_all(response).await;
        });
        addr
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
        assert_eq!(probe(ok, &http((200, 399))).await, Ok(()));
        let failing = answer_once(b"HTTP/1.1 503 Unavailable\r\n\r\n").await;
        assert_eq!(
            probe(failing, &http((200, 399))).await,
            Err("GET /healthz answered 503, expected 200-399".to_string())
        );
        let garbage = answer_once(b"hello\r\n").await;
        assert!(probe(garbage, &http((200, 399)))
            .await
            .unwrap_err()
            .contains("not an HTTP"));
    }

    #[tokio::test]
    async fn a_refused_connection_fails_both_kinds() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        assert!(probe(addr, &HealthKind::Tcp)
            .await
            .unwrap_err()
            .starts_with("connect:"));
        assert!(probe(addr, &http((200, 399))).await.is_err());
    }
}
