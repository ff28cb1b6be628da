//! `herdsman top --once` as a script runs it: the built binary against a herdsman binary with
//! mock backends while a client sends steady traffic, its rows checked against what the client
//! sent; its HTTP/2 columns while a stream is in flight; and its message when no herdsman answers.

mod admin_support;
mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use admin_support::api;
use common::*;

/// What a `top` run printed, and how it ended.
#[derive(Debug)]
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `herdsman top --admin ADMIN ARGS…` without an admin token; `top`'s own timeouts (and
/// `--interval`) bound how long it runs.
fn top(admin: SocketAddr, args: &[&str]) -> Outcome {
    let output = Command::new(binary())
        .arg("top")
        .arg("--admin")
        .arg(admin.to_string())
        .args(args)
        .env_remove("HERDSMAN_ADMIN_TOKEN")
        .env("RUST_LOG", "off")
        .output()
        .expect("run herdsman top");
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// A client that sends GETs through the proxy on one keep-alive connection, one every `pace`,
/// and notes when each 200 came back, until it is stopped.
struct SteadyClient {
    stop: Arc<AtomicBool>,
    answered: Arc<Mutex<Vec<Instant>>>,
    thread: Option<JoinHandle<()>>,
}

impl SteadyClient {
    fn start(proxy: SocketAddr, pace: Duration) -> SteadyClient {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let (stopped, record) = (stop.clone(), answered.clone());
        let thread = thread::spawn(move || {
            let mut conn = Conn::connect(proxy);
            let mut next = Instant::now();
            for i in 0.. {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let response = conn.roundtrip(&get_request(&format!("/steady/{i}"), ""));
                assert_eq!(response.status(), 200, "{}", response.head.first_line);
                record.lock().unwrap().push(Instant::now());
                next += pace;
                thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        SteadyClient {
            stop,
            answered,
            thread: Some(thread),
        }
    }

    /// Answers that came back between `from` and `to`.
    fn answered_between(&self, from: Instant, to: Instant) -> usize {
        let answered = self.answered.lock().unwrap();
        answered
            .iter()
            .filter(|&&at| from <= at && at <= to)
            .count()
    }

    /// Stops the client; panics if it failed.
    fn finish(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Err(panic) = self.thread.take().unwrap().join() {
            std::panic::resume_unwind(panic);
        }
    }
}

impl Drop for SteadyClient {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

const WORKER_HEADINGS: [&str; 11] = [
    "WORKER",
    "USR%",
    "SYS%",
    "LAT%",
    "CONNS",
    "H2CONNS",
    "H2STREAMS",
    "ACCEPT/S",
    "REQ/S",
    "CONN/REQ",
    "SHED/S",
];

/// A row's cells, split on blanks (no cell `top` prints holds one).
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// A rate or percentage cell: a number with one decimal, never negative.
fn figure(cell: &str, line: &str) -> f64 {
    let value: f64 = cell
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} is not a number in {line:?}"));
    assert!(
        value >= 0.0 && cell.split_once('.').is_some_and(|(_, d)| d.len() == 1),
        "{cell:?} in {line:?}"
    );
    value
}

#[test]
fn once_prints_workers_and_servers_with_the_rates_of_the_traffic_sent() {
    let (a, b, c) = (Mock::named("a"), Mock::named("b"), Mock::named("c"));
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (herdsman, proxy) = Setup::new()
        .workers(2)
        .admin_at(admin)
        .server("a", a.addr)
        .server("b", b.addr)
        .server("c", c.addr)
        .start_binary();
    assert!(
        wait_listening(admin, Duration::from_secs(10)),
        "the admin API is not listening on {admin}"
    );
    let (status, json) = api(
        admin,
        "PUT",
        "/api/pools/app/servers/c/state",
        Some(r#"{"state":"drain"}"#),
        None,
    );
    assert_eq!(status, 200, "{json}");

    // About 200 requests a second, going for a while before `top` takes its first sample.
    let client = SteadyClient::start(proxy, Duration::from_millis(5));
    thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let outcome = top(admin, &["--once", "--interval", "1"]);
    let ended = Instant::now();
    let sent = client.answered_between(started, ended);
    client.finish();
    assert_eq!(outcome.code, Some(0), "{outcome:?}");
    assert!(outcome.stderr.is_empty(), "{outcome:?}");

    let text = &outcome.stdout;
    let lines: Vec<&str> = text.lines().collect();
    // The summary, the worker table (headings, 2 workers and their sum), the server table
    // (headings and 3).
    assert_eq!(lines.len(), 1 + 4 + 4, "{text}");
    // The drain published a generation after the first.
    let summary = format!(
        "herdsman pid {}, intake balanced, generation 2, listen queue: ",
        herdsman.0.id()
    );
    assert!(lines[0].starts_with(&summary), "{text}");
    let (losses, span) = lines[0][summary.len()..]
        .split_once(" in ")
        .expect("the span");
    let losses: Vec<&str> = words(losses);
    assert_eq!([losses[1], losses[3]], ["overflows,", "drops"], "{text}");
    losses[0].parse::<u64>().expect("overflows are a count");
    losses[2].parse::<u64>().expect("drops are a count");
    let span: f64 = span.strip_suffix(" s").unwrap().parse().unwrap();
    assert!((0.9..=1.5).contains(&span), "{text}");

    assert_eq!(words(lines[1]), WORKER_HEADINGS, "{text}");
    let mut worker_requests = 0.0;
    for (worker, line) in lines[2..4].iter().enumerate() {
        let cells = words(line);
        assert_eq!(cells.len(), 11, "{text}");
        assert_eq!(cells[0], worker.to_string(), "{text}");
        for cell in &cells[1..3] {
            assert!(figure(cell, line) <= 100.0, "{text}");
        }
        if cells[3] != "-" {
            figure(cells[3], line);
        }
        cells[4].parse::<u32>().expect("CONNS is a count");
        // The client speaks HTTP/1.1 only.
        assert_eq!(cells[5..7], ["0", "0"], "{text}");
        figure(cells[7], line);
        worker_requests += figure(cells[8], line);
        // Server connections opened per request: none without requests, and at this steady
        // pace the worker reuses the few it opened.
        if cells[9] != "-" {
            let opened: f64 = cells[9].parse().expect("connections opened per request");
            assert!(opened < 0.05, "{text}");
        }
        // No cap reached: nothing shed.
        assert_eq!(cells[10], "0.0", "{text}");
    }
    assert!(worker_requests > 0.0, "{text}");
    // The sum of the two, within the rounding of each to one place.
    let all = words(lines[4]);
    assert_eq!(all[0], "all", "{text}");
    assert!(
        (figure(all[8], lines[4]) - worker_requests).abs() <= 0.1,
        "{text}"
    );

    assert_eq!(
        words(lines[5]),
        ["POOL", "SERVER", "STATE", "HEALTH", "REQ/S", "ERR/S", "P99MS", "LATMS", "CONN/REQ"],
        "{text}"
    );
    let servers: Vec<Vec<&str>> = lines[6..].iter().map(|line| words(line)).collect();
    for (cells, (name, state)) in
        servers
            .iter()
            .zip([("a", "ready"), ("b", "ready"), ("c", "drain")])
    {
        assert_eq!(cells[..4], ["app", name, state, "up"], "{text}");
        assert_eq!(cells[5], "0.0", "no errors: {text}");
    }
    let server_requests: Vec<f64> = servers
        .iter()
        .zip(&lines[6..])
        .map(|(cells, line)| figure(cells[4], line))
        .collect();
    // Round robin over the two that take requests; the drained one gets none, so no p99.
    assert!(
        server_requests[0] > 0.0 && server_requests[1] > 0.0,
        "{text}"
    );
    // A round-robin pool keeps no latency estimate (LATMS `-`).
    assert_eq!(
        (
            server_requests[2],
            servers[2][6],
            servers[2][7],
            servers[2][8]
        ),
        (0.0, "-", "-", "-"),
        "{text}"
    );
    for cells in &servers[..2] {
        let p99: f64 = cells[6].parse().expect("a p99 in ms");
        assert!(p99 > 0.0 && p99 < 1_000.0, "{text}");
        assert_eq!(cells[7], "-", "{text}");
        let opened: f64 = cells[8].parse().expect("connections opened per request");
        assert!(opened < 0.05, "{text}");
    }

    // `top` measured one second within its run; the client sent at an even pace all along.
    let sent_per_second = sent as f64 / (ended - started).as_secs_f64();
    let counted: f64 = server_requests.iter().sum();
    assert!(
        (0.5 * sent_per_second..=1.5 * sent_per_second).contains(&counted),
        "top counted {counted:.1} requests/s; the client had {sent} answered in {:?}: {text}",
        ended - started
    );
    assert!(
        (0.5 * counted..=1.5 * counted).contains(&worker_requests),
        "the workers' {worker_requests:.1}/s and the servers' {counted:.1}/s disagree: {text}"
    );
}

/// Each worker row's (H2CONNS, H2STREAMS) from `top --once`'s text, the `all` row's last.
fn http2_open(text: &str) -> Vec<(String, u32, u32)> {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(words(lines[1]), WORKER_HEADINGS, "{text}");
    lines[2..]
        .iter()
        .take_while(|line| !line.starts_with("POOL"))
        .map(|line| {
            let cells = words(line);
            let count = |cell: &str| cell.parse::<u32>().unwrap_or_else(|_| panic!("{line:?}"));
            (cells[0].to_string(), count(cells[5]), count(cells[6]))
        })
        .collect()
}

#[test]
fn once_shows_an_http2_connection_and_its_stream_in_flight() {
    let gate = Gate::new();
    let herdsman = HoldingH2c::start(2, &gate);
    let admin = herdsman.admin;
    let mut held = herdsman.hold("/held");

    // The request waits at the server: one connection, one stream, on one of the two workers.
    let outcome = top(admin, &["--once", "--interval", "0.2"]);
    assert_eq!(outcome.code, Some(0), "{outcome:?}");
    let mut rows = http2_open(&outcome.stdout);
    let all = rows.pop().unwrap();
    assert_eq!(all, ("all".to_string(), 1, 1), "{}", outcome.stdout);
    let mut workers: Vec<(u32, u32)> = rows.iter().map(|&(_, c, s)| (c, s)).collect();
    workers.sort_unstable();
    assert_eq!(workers, [(0, 0), (1, 1)], "{}", outcome.stdout);

    // Answered, the stream is done and the connection stays open.
    gate.open();
    assert!(
        held.wait_for(b"held"),
        "the held request was never answered"
    );
    let mut last = String::new();
    let settled = eventually(Duration::from_secs(5), || {
        last = top(admin, &["--once", "--interval", "0.1"]).stdout;
        http2_open(&last).last() == Some(&("all".to_string(), 1, 0))
    });
    assert!(settled, "{last}");
}

#[test]
fn once_without_a_herdsman_says_so() {
    let nowhere = refusing_addr();
    let outcome = top(nowhere, &["--once", "--interval", "0.1"]);
    assert_eq!(outcome.code, Some(1), "{outcome:?}");
    assert!(outcome.stdout.is_empty(), "{outcome:?}");
    assert!(
        outcome.stderr.starts_with(&format!(
            "herdsman top: cannot reach the admin API at {nowhere}: connection refused"
        )),
        "{outcome:?}"
    );
    assert!(outcome.stderr.contains("--admin ADDR"), "{outcome:?}");

    // The live view needs a terminal, which a pipe is not.
    let outcome = top(nowhere, &[]);
    assert_eq!(outcome.code, Some(1), "{outcome:?}");
    assert_eq!(
        outcome.stderr,
        "herdsman top: the live view needs a terminal; for plain text, use --once\n"
    );
}
