//! One stall run: an open-loop stream of new connections at a fixed rate, the stall request sent
//! in the middle from its own thread, and `/api/workers` read twice during the stall to see which
//! worker it blocked (a sleeping thread neither switches context nor accepts).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream as StdStream};
use std::thread;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::StallArgs;
use crate::kit::proxies::IntakeMode;
use crate::kit::stack::Stack;
use crate::kit::workers_api::{self, Snapshot};

/// A connection slower than this counts as failed.
const CONNECTION_LIMIT: Duration = Duration::from_secs(5);
/// When, after the stall request is sent, the two reads of `/api/workers` happen.
const FIRST_LOOK: Duration = Duration::from_millis(100);
const SECOND_LOOK: Duration = Duration::from_millis(400);

/// One new connection of the stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When it was due, in ms from the start of the run.
    pub due_ms: f64,
    /// From when it was due to the first byte of the answer, in ms; None if it failed.
    pub latency_ms: Option<f64>,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct StallRun {
    pub mode: IntakeMode,
    pub round: u32,
    pub samples: Vec<Sample>,
    /// When the stall request was sent and answered, in ms from the start.
    pub stall_sent_ms: f64,
    pub stall_answered_ms: Option<f64>,
    /// The stall request's status line, or why it failed.
    pub stall_outcome: String,
    /// Workers whose context switches and accepts did not move between the two looks.
    pub stalled_workers: Vec<usize>,
    /// Per worker at the second look: active connections and queued hand-offs.
    pub active_during: Vec<u64>,
    pub pending_during: Vec<u64>,
}

pub fn run(
    stack: &Stack,
    mode: IntakeMode,
    round: u32,
    args: &StallArgs,
) -> anyhow::Result<StallRun> {
    let start = Instant::now();
    let port = stack.port;
    let admin_port = stack.admin_port;
    let stall_at = Duration::from_millis(args.stall_at_ms);

    let stall = thread::spawn(move || {
        sleep_until(start + stall_at);
        let sent = start.elapsed();
        let outcome = stall_request(port);
        (sent, start.elapsed(), outcome)
    });
    let looks = thread::spawn(move || -> anyhow::Result<(Snapshot, Snapshot)> {
        sleep_until(start + stall_at + FIRST_LOOK);
        let first = workers_api::read_workers(admin_port)?;
        sleep_until(start + stall_at + SECOND_LOOK);
        Ok((first, workers_api::read_workers(admin_port)?))
    });

    let samples = stream(port, start, args.rate, Duration::from_millis(args.run_ms))?;
    let (sent, answered, outcome) = stall
        .join()
        .map_err(|_| anyhow::anyhow!("the stall thread panicked"))?;
    let (first, second) = looks
        .join()
        .map_err(|_| anyhow::anyhow!("the admin thread panicked"))??;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok(StallRun {
        mode,
        round,
        samples,
        stall_sent_ms: ms(sent),
        stall_answered_ms: outcome.is_ok().then(|| ms(answered)),
        stall_outcome: match outcome {
            Ok(status) => status,
            Err(e) => format!("failed: {e:#}"),
        },
        stalled_workers: frozen_workers(&first, &second),
        active_during: second.per_worker(|w| w.active),
        pending_during: second.per_worker(|w| w.pending_handoffs),
    })
}

fn sleep_until(when: Instant) {
    thread::sleep(when.saturating_duration_since(Instant::now()));
}

/// `GET /__herdsman/stall`; the status line of the answer.
fn stall_request(port: u16) -> anyhow::Result<String> {
    let mut stream = StdStream::connect((Ipv4Addr::LOCALHOST, port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(
        b"GET /__herdsman/stall HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    Ok(text.lines().next().unwrap_or("(empty answer)").to_string())
}

/// The blocked worker(s): those that neither switched context nor accepted between two reads, and
/// hold a connection (the stall request's). Without the last condition, workers that merely sat
/// idle would count too: in `exclusive` mode the most recent waiter takes every connection, so
/// others may not move for the whole stall. If no still worker holds a connection, every still
/// worker is returned.
pub fn frozen_workers(first: &Snapshot, second: &Snapshot) -> Vec<usize> {
    let still: Vec<_> = first
        .delta(second)
        .workers
        .into_iter()
        .filter(|w| w.context_switches == 0 && w.accepted == 0)
        .collect();
    let holding: Vec<usize> = still
        .iter()
        .filter(|w| w.active > 0)
        .map(|w| w.worker)
        .collect();
    if holding.is_empty() {
        still.iter().map(|w| w.worker).collect()
    } else {
        holding
    }
}

/// Opens `rate` connections per second for `length`, each due at its own time whatever the others
/// do (open loop), and measures each from when it was due, so a late generator shows as latency
/// rather than hiding it.
fn stream(port: u16, start: Instant, rate: u32, length: Duration) -> anyhow::Result<Vec<Sample>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let count = (length.as_secs_f64() * f64::from(rate)) as u64;
    let interval = Duration::from_secs(1) / rate;
    runtime.block_on(async move {
        let start = tokio::time::Instant::from_std(start);
        let mut tasks = Vec::with_capacity(count as usize);
        for index in 0..count {
            let due = start + interval * index as u32;
            tokio::time::sleep_until(due).await;
            tasks.push(tokio::spawn(async move {
                let first_byte = tokio::time::timeout(CONNECTION_LIMIT, first_byte(addr)).await;
                let latency_ms = match first_byte {
                    Ok(Ok(())) => Some(due.elapsed().as_secs_f64() * 1e3),
                    _ => None,
                };
                Sample {
                    due_ms: (due - start).as_secs_f64() * 1e3,
                    latency_ms,
                }
            }));
        }
        let mut samples = Vec::with_capacity(tasks.len());
        for task in tasks {
            samples.push(task.await?);
        }
        Ok(samples)
    })
}

/// Connects, sends `GET /`, and returns at the first byte of the answer; the rest is read to EOF
/// afterwards on a spawned task, so herdsman closes first.
async fn first_byte(addr: SocketAddr) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await?;
    let mut byte = [0u8; 1];
    if stream.read(&mut byte).await? == 0 {
        anyhow::bail!("closed without an answer");
    }
    tokio::spawn(async move {
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(CONNECTION_LIMIT, stream.read_to_end(&mut rest)).await;
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::workers_api::WorkerCounters;

    fn snapshot(counts: &[(u64, u64)]) -> Snapshot {
        Snapshot {
            workers: counts
                .iter()
                .enumerate()
                .map(|(worker, &(accepted, context_switches))| WorkerCounters {
                    worker,
                    accepted,
                    context_switches,
                    ..WorkerCounters::default()
                })
                .collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn the_stalled_worker_is_the_one_that_did_not_move() {
        let first = snapshot(&[(10, 100), (10, 100), (3, 50)]);
        let second = snapshot(&[(20, 130), (10, 100), (3, 51)]);
        assert_eq!(frozen_workers(&first, &second), vec![1]);
        // Two still workers: the stalled one is the one holding a connection.
        let first = snapshot(&[(10, 100), (10, 100), (3, 50)]);
        let mut second = snapshot(&[(20, 130), (10, 100), (3, 50)]);
        second.workers[2].active = 1;
        assert_eq!(frozen_workers(&first, &second), vec![2]);
    }
}
