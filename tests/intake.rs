//! Intake modes: every mode serves; `balanced` spreads connections evenly over workers without
//! waking more than it needs; the herd baseline really is a herd; `/api/workers` adds up.

mod common;

use std::time::Duration;

use common::*;

const MODES: [&str; 4] = ["balanced", "reuseport", "exclusive", "shared"];

/// Opens `n` connections one after another, each completing one keep-alive request; returns them
/// still open.
fn open_served(proxy: &Proxy, n: usize) -> Vec<Conn> {
    (0..n)
        .map(|i| {
            let mut conn = proxy.connect();
            let response = conn.roundtrip(&get_request("/", ""));
            assert_eq!(response.status(), 200, "connection {i}");
            conn
        })
        .collect()
}

fn coefficient_of_variation(values: &[f64]) -> f64 {
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64;
    variance.sqrt() / mean
}

#[test]
fn every_mode_serves_and_its_counters_add_up() {
    let server = Mock::named("a");
    for mode in MODES {
        let proxy = Setup::new()
            .workers(4)
            .intake(mode)
            .server("a", server.addr)
            .start();
        for i in 0..40 {
            let response = proxy.get("/");
            assert_eq!(response.status(), 200, "{mode}: request {i}");
            assert_eq!(response.body_text(), "a", "{mode}");
        }
        let report = proxy.server().stats().report();
        let accepted: u64 = report.iter().map(|w| w.accepted).sum();
        let sent: u64 = report.iter().map(|w| w.handoffs_sent).sum();
        let received: u64 = report.iter().map(|w| w.handoffs_received).sum();
        assert_eq!(accepted, 40, "{mode}: every connection accepted once");
        assert_eq!(sent, received, "{mode}: every hand-off arrives");
        if mode != "balanced" {
            assert_eq!(sent, 0, "{mode} hands nothing off");
        }
    }
}

#[test]
fn balanced_spreads_active_connections_evenly() {
    let server = Mock::named("a");
    let proxy = Setup::new()
        .workers(4)
        .intake("balanced")
        .server("a", server.addr)
        .start();
    let _open = open_served(&proxy, 400);
    let active: Vec<f64> = proxy
        .server()
        .stats()
        .report()
        .iter()
        .map(|w| f64::from(w.active))
        .collect();
    assert_eq!(active.iter().sum::<f64>(), 400.0, "{active:?}");
    let cv = coefficient_of_variation(&active);
    assert!(
        cv <= 0.05,
        "coefficient of variation {cv:.3} over workers: {active:?}"
    );
}

/// What one connection costs the workers in an otherwise idle herdsman with 4 workers:
/// (voluntary context switches, user-space spurious wake-ups) per connection, for a storm of
/// clients that connect and close one at a time with the workers idle in between.
///
/// Context switches are what count: a worker woken for a connection another worker took usually
/// goes back to sleep inside epoll_wait without returning to user space, so the user-space count
/// alone would hide the herd. Voluntary switches are the ones a wake-up causes (each wake ends
/// in going back to sleep); preemption by the test's other threads is left out as noise.
fn cost_per_connection(mode: &str) -> (f64, f64) {
    let proxy = Setup::new()
        .workers(4)
        .intake(mode)
        .server("a", refusing_addr())
        .start();
    let stats = proxy.server().stats();
    // Let every worker reach epoll_wait before counting.
    std::thread::sleep(Duration::from_millis(50));
    let switches = || -> u64 {
        stats
            .report()
            .iter()
            .map(|w| w.context_switches.voluntary)
            .sum()
    };
    let spurious = || -> u64 { stats.report().iter().map(|w| w.spurious_wakeups).sum() };
    let (switches_before, spurious_before) = (switches(), spurious());
    let connections = 100;
    for _ in 0..connections {
        drop(Conn::connect(proxy.addr));
        std::thread::sleep(Duration::from_millis(3));
    }
    std::thread::sleep(Duration::from_millis(50));
    let accepted: u64 = stats.report().iter().map(|w| w.accepted).sum();
    assert_eq!(accepted, connections, "{mode}");
    let per = |n: u64| n as f64 / connections as f64;
    (
        per(switches() - switches_before),
        per(spurious() - spurious_before),
    )
}

#[test]
fn shared_wakes_every_worker_and_balanced_at_most_two() {
    let (herd_switches, _) = cost_per_connection("shared");
    let (switches, spurious) = cost_per_connection("balanced");
    assert!(
        herd_switches >= 3.0,
        "shared: {herd_switches:.2} worker context switches per connection; the herd wakes all 4"
    );
    // The acceptor and one target: about 2 (1.93-2.06 measured here); a client's FIN that
    // lands after the hand-off can add one more wake-up, so the bound leaves room for that. The
    // issue's 2.2 target is measured by `herdsman-bench fairness` (storm rows), not here.
    assert!(
        switches <= 2.5,
        "balanced: {switches:.2} worker context switches per connection (acceptor + one target)"
    );
    assert!(
        herd_switches - switches >= 1.5,
        "shared {herd_switches:.2} vs balanced {switches:.2}: the herd must cost clearly more"
    );
    assert!(
        spurious <= 0.05,
        "balanced: {spurious:.2} spurious wake-ups per connection"
    );
}

#[test]
fn admin_api_reports_per_worker_counters_that_add_up() {
    let server = Mock::named("a");
    let proxy = Setup::new()
        .workers(3)
        .admin()
        .server("a", server.addr)
        .start();
    for _ in 0..30 {
        assert_eq!(proxy.get("/").status(), 200);
    }
    let admin = proxy.server().admin_addr().expect("admin listener");
    let mut conn = Conn::connect(admin);
    let response = conn.roundtrip(&admin_get_request("/api/workers"));
    assert_eq!(response.status(), 200);
    let body = response.body_text();
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(json["intake"], "balanced");
    let workers = json["workers"].as_array().expect("workers array");
    assert_eq!(workers.len(), 3);
    let sum = |field: &str| -> u64 { workers.iter().map(|w| w[field].as_u64().unwrap()).sum() };
    assert_eq!(sum("accepted"), 30, "{body}");
    assert_eq!(sum("handoffs_sent"), sum("handoffs_received"), "{body}");
    for worker in workers {
        assert!(worker["tid"].as_i64().unwrap() > 0, "{worker}");
        assert!(
            worker["context_switches"]["voluntary"].as_u64().is_some(),
            "{worker}"
        );
    }
    assert!(
        json["listen_queue"]["overflows"].as_u64().is_some(),
        "{body}"
    );
}

/// With `defer_accept`, the kernel hands herdsman a connection only once its first bytes are
/// here: a client that connects and stays silent is not accepted (no worker is woken for it),
/// and the one that then sends its request is accepted and answered.
#[test]
fn a_deferred_listener_accepts_a_connection_once_it_speaks() {
    let server = Mock::named("a");
    let toml = Setup::new()
        .server("a", server.addr)
        .toml("127.0.0.1:0")
        .replacen(
            "pool = \"app\"\n",
            "pool = \"app\"\ndefer_accept = \"2s\"\n",
            1,
        );
    let proxy = Proxy::start(&toml);
    let stats = proxy.server().stats();
    let accepted = || -> u64 { stats.report().iter().map(|w| w.accepted).sum() };
    let mut client = proxy.connect();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(accepted(), 0, "a connection that sent nothing was accepted");
    let response = client.roundtrip(&get_request("/", ""));
    assert_eq!(response.status(), 200);
    assert_eq!(response.body_text(), "a");
    assert_eq!(accepted(), 1);
}
