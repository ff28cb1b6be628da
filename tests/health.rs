//! Health over real sockets: active checks take a failing server out of rotation within
//! `fall × interval` and bring it back after `rise` successes, with the reason in
//! `GET /api/pools`; passive checks eject a server whose connections fail, never more than
//! `max_ejected_percent` of a pool; slow start ramps a returning server's weight; checks leave
//! no socket in TIME_WAIT.

mod admin_support;
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use admin_support::{count, Running};
use common::*;
use serde_json::Value;

/// A mock answering with its name, whose `/healthz` answers 200 or 503 as `healthy` says.
fn with_health(name: &str, healthy: Arc<AtomicBool>) -> Mock {
    let name = name.to_string();
    Mock::start(move |ex| {
        ex.read_body()?;
        if ex.head.target() == "/healthz" {
            let status = if healthy.load(Ordering::SeqCst) {
                200
            } else {
                503
            };
            ex.respond(status, &[], b"")?;
        } else {
            ex.respond(200, &[("X-Server", &name)], name.as_bytes())?;
        }
        Ok(Flow::KeepAlive)
    })
}

/// Pool "app"'s server `name` as `GET /api/pools` shows it.
fn server(herdsman: &Running, name: &str) -> Value {
    let (status, json) = herdsman.api("GET", "/api/pools", None);
    assert_eq!(status, 200, "{json}");
    json["pools"][0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name}: {json}"))
        .clone()
}

/// The config text of `setup` with `tables` (e.g. `[pool.health]`) appended to pool "app".
fn start(setup: Setup, tables: &str) -> Running {
    let herdsman = Running::start(setup);
    herdsman.reconfigure(|text| format!("{text}{tables}"));
    herdsman
}

#[test]
fn a_failing_server_is_taken_out_within_fall_checks_and_returns_after_rise() {
    let b_healthy = Arc::new(AtomicBool::new(true));
    let a = with_health("a", Arc::new(AtomicBool::new(true)));
    let b = with_health("b", Arc::clone(&b_healthy));
    let herdsman = start(
        Setup::new().admin().server("a", a.addr).server("b", b.addr),
        "[pool.health]\npath = \"/healthz\"\ninterval = \"50ms\"\ntimeout = \"200ms\"\nrise = 2\nfall = 3\n",
    );
    assert_eq!(server(&herdsman, "b")["health"], "up");
    let answers = herdsman.answers(4);
    assert_eq!(count(&answers, "b"), 2, "{answers:?}");

    b_healthy.store(false, Ordering::SeqCst);
    let failed_at = Instant::now();
    assert!(
        eventually(Duration::from_secs(2), || server(&herdsman, "b")["health"]
            == "down"),
        "b not marked down"
    );
    // fall × interval, with the jitter and one check in flight: well under half a second.
    let took = failed_at.elapsed();
    assert!(took < Duration::from_millis(500), "down after {took:?}");
    let b_view = server(&herdsman, "b");
    assert!(
        b_view["reason"]
            .as_str()
            .unwrap()
            .contains("answered 503, expected 200-399"),
        "{b_view}"
    );
    let answers = herdsman.answers(6);
    assert_eq!(
        count(&answers, "a"),
        6,
        "a down server still got requests: {answers:?}"
    );

    b_healthy.store(true, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(2), || server(&herdsman, "b")["health"]
            == "up"),
        "b not back"
    );
    let answers = herdsman.answers(6);
    assert_eq!(count(&answers, "b"), 3, "{answers:?}");
}

#[test]
fn a_server_held_down_by_checks_a_reload_removes_is_up_again() {
    let a = Mock::named("a");
    let b = with_health("b", Arc::new(AtomicBool::new(false)));
    let herdsman = start(
        Setup::new().admin().server("a", a.addr).server("b", b.addr),
        "[pool.health]\npath = \"/healthz\"\ninterval = \"20ms\"\nfall = 1\n",
    );
    assert!(
        eventually(Duration::from_secs(2), || server(&herdsman, "b")["health"]
            == "down"),
        "{}",
        server(&herdsman, "b")
    );
    // Without checks nothing holds b down: it takes requests again.
    herdsman.reconfigure(|text| text.split("[pool.health]").next().unwrap().to_string());
    assert!(
        eventually(Duration::from_secs(2), || server(&herdsman, "b")["health"]
            == "up"),
        "{}",
        server(&herdsman, "b")
    );
    let answers = herdsman.answers(4);
    assert_eq!(count(&answers, "b"), 2, "{answers:?}");
}

#[test]
fn a_tcp_check_takes_out_a_server_that_refuses_connections() {
    let a = Mock::named("a");
    // An address nothing listens on.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let herdsman = start(
        Setup::new()
            .admin()
            .server("a", a.addr)
            .server("gone", gone),
        "[pool.health]\ncheck = \"tcp\"\ninterval = \"50ms\"\ntimeout = \"200ms\"\nfall = 2\n",
    );
    assert!(
        eventually(Duration::from_secs(2), || server(&herdsman, "gone")
            ["health"]
            == "down"),
        "the refusing server was not marked down"
    );
    assert!(server(&herdsman, "gone")["reason"]
        .as_str()
        .unwrap()
        .starts_with("connect:"));
    let answers = herdsman.answers(8);
    assert_eq!(count(&answers, "a"), 8, "{answers:?}");
}

#[test]
fn checks_leave_no_socket_in_time_wait() {
    // A TCP check is done once connected, an HTTP check once it has the status line from a server
    // that keeps the connection open: either way herdsman closes first, and closed the usual way
    // each check would hold a socket in TIME_WAIT for a minute (10,000 servers checked every
    // second: 600,000 of them).
    let tcp = Mock::named("tcp");
    let http = with_health("http", Arc::new(AtomicBool::new(true)));
    let time_waits = (
        TimeWaits::towards(tcp.addr.port()),
        TimeWaits::towards(http.addr.port()),
    );
    let _tcp_checked = start(
        Setup::new().admin().server("tcp", tcp.addr),
        "[pool.health]\ncheck = \"tcp\"\ninterval = \"20ms\"\n",
    );
    let http_checked = start(
        Setup::new().admin().server("http", http.addr),
        "[pool.health]\npath = \"/healthz\"\ninterval = \"20ms\"\n",
    );
    assert!(
        eventually(Duration::from_secs(3), || tcp.connections() >= 10
            && http.connections() >= 10),
        "checked {} and {} times",
        tcp.connections(),
        http.connections()
    );
    assert_eq!(server(&http_checked, "http")["health"], "up");
    assert_eq!((time_waits.0.new_since(), time_waits.1.new_since()), (0, 0));
}

#[test]
fn servers_found_down_together_go_out_in_a_few_snapshots() {
    // Twenty servers fail their checks at once. Each snapshot is built whole (milliseconds for
    // 10,000 servers), so the checker publishes what its checks found together rather than a
    // snapshot per server.
    let healthy = Arc::new(AtomicBool::new(true));
    let mocks: Vec<Mock> = (0..20)
        .map(|i| with_health(&format!("s{i}"), Arc::clone(&healthy)))
        .collect();
    let setup = mocks
        .iter()
        .enumerate()
        .fold(Setup::new().admin(), |setup, (i, mock)| {
            setup.server(&format!("s{i}"), mock.addr)
        });
    let herdsman = start(
        setup,
        "[pool.health]\npath = \"/healthz\"\ninterval = \"20ms\"\nfall = 1\n",
    );
    let pools = || herdsman.api("GET", "/api/pools", None).1;
    let down = |pools: &Value| {
        pools["pools"][0]["servers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|server| server["health"] == "down")
            .count()
    };
    // Checked a few times, all up.
    std::thread::sleep(Duration::from_millis(100));
    let before = pools();
    assert_eq!(down(&before), 0, "{before}");

    healthy.store(false, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(3), || down(&pools()) == 20),
        "{}",
        pools()
    );
    let snapshots =
        pools()["generation"].as_u64().unwrap() - before["generation"].as_u64().unwrap();
    assert!(
        snapshots < 10,
        "{snapshots} snapshots for 20 servers found down"
    );
}

/// A mock that reads each request and closes without a byte of answer (a crashing server:
/// one that refuses connections is taken out at once, without passive checks).
fn closer() -> Mock {
    Mock::start(|ex| {
        ex.read_body()?;
        Ok(Flow::Close)
    })
}

#[test]
fn consecutive_failures_eject_a_server_but_never_half_the_pool() {
    let (a, b, gone, gone2) = (Mock::named("a"), Mock::named("b"), closer(), closer());
    let setup = Setup::new()
        .admin()
        .server("a", a.addr)
        .server("b", b.addr)
        .server("gone", gone.addr)
        .server("gone2", gone2.addr);
    // 4 servers, 50%: two may be ejected; gone and gone2 both fail. No retries, so that each
    // failure shows.
    let herdsman = start(
        setup,
        "[pool.passive]\nconsecutive_failures = 2\nejection = \"30s\"\nmax_ejected_percent = 50\n",
    );
    herdsman.reconfigure(|text| admin_support::with_pool_keys(text, "retries = 0\n"));
    // Each dead server fails at most twice before it is ejected: then every request succeeds.
    let mut failed = 0;
    let ejected = eventually(Duration::from_secs(2), || {
        failed += herdsman
            .answers(4)
            .iter()
            .filter(|answer| answer.starts_with("HTTP/1.1 502"))
            .count();
        server(&herdsman, "gone")["health"] == "ejected"
            && server(&herdsman, "gone2")["health"] == "ejected"
    });
    assert!(
        ejected,
        "{} {}",
        server(&herdsman, "gone"),
        server(&herdsman, "gone2")
    );
    assert!(failed <= 4, "{failed} requests failed before the ejections");
    let answers = herdsman.answers(12);
    assert_eq!(
        count(&answers, "a") + count(&answers, "b"),
        12,
        "{answers:?}"
    );

    // A pool of two where both fail: 50% of two is one; the other stays in.
    let (c, d) = (closer(), closer());
    let both = start(
        Setup::new().admin().server("c", c.addr).server("d", d.addr),
        "[pool.passive]\nconsecutive_failures = 2\nejection = \"30s\"\n",
    );
    let _ = both.answers(8);
    std::thread::sleep(Duration::from_millis(200));
    let ejected = ["c", "d"]
        .iter()
        .filter(|name| server(&both, name)["health"] == "ejected")
        .count();
    assert_eq!(ejected, 1, "{} {}", server(&both, "c"), server(&both, "d"));
}

#[test]
fn a_server_active_checks_see_well_again_is_not_held_ejected_nor_blocks_another_ejection() {
    // Two servers, one ejection slot (50%). a fails (its health check too) and is ejected for
    // a long back-off; it recovers; then b fails.
    let (a_well, b_well) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(true)),
    );
    let failing_unless = |well: Arc<AtomicBool>, name: &'static str| {
        Mock::start(move |ex| {
            ex.read_body()?;
            if !well.load(Ordering::SeqCst) {
                return Ok(Flow::Close);
            }
            ex.respond(200, &[("X-Server", name)], name.as_bytes())?;
            Ok(Flow::KeepAlive)
        })
    };
    let (a, b) = (
        failing_unless(Arc::clone(&a_well), "a"),
        failing_unless(Arc::clone(&b_well), "b"),
    );
    let herdsman = start(
        Setup::new().admin().server("a", a.addr).server("b", b.addr),
        "[pool.health]\npath = \"/healthz\"\ninterval = \"100ms\"\ntimeout = \"200ms\"\n\
         rise = 2\nfall = 100\n\
         [pool.passive]\nconsecutive_failures = 2\nejection = \"60s\"\nmax_ejected_percent = 50\n",
    );
    assert!(
        eventually(Duration::from_secs(3), || {
            let _ = herdsman.answers(2);
            server(&herdsman, "a")["health"] == "ejected"
        }),
        "a was not ejected: {}",
        server(&herdsman, "a")
    );
    a_well.store(true, Ordering::SeqCst);
    let recovered_at = Instant::now();
    assert!(
        eventually(Duration::from_secs(3), || server(&herdsman, "a")["health"]
            == "up"),
        "a stays ejected although its checks pass: {}",
        server(&herdsman, "a")
    );
    // rise × interval, give or take: far sooner than the 60 s back-off.
    assert!(recovered_at.elapsed() < Duration::from_secs(2));
    b_well.store(false, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(3), || {
            let _ = herdsman.answers(2);
            server(&herdsman, "b")["health"] == "ejected"
        }),
        "b failing could not be ejected: {}",
        server(&herdsman, "b")
    );
}

#[test]
fn a_server_back_from_ejection_ramps_its_weight_under_slow_start() {
    let a = Mock::named("a");
    // b closes every connection without an answer at first, then answers.
    let b_well = Arc::new(AtomicBool::new(false));
    let well = Arc::clone(&b_well);
    let b = Mock::start(move |ex| {
        ex.read_body()?;
        if !well.load(Ordering::SeqCst) {
            return Ok(Flow::Close);
        }
        ex.respond(200, &[], b"b")?;
        Ok(Flow::KeepAlive)
    });
    let herdsman = start(
        Setup::new()
            .admin()
            .server("a", a.addr)
            .weighted("b", b.addr, 10),
        "slow_start = \"2s\"\n[pool.passive]\nconsecutive_failures = 1\nejection = \"300ms\"\n",
    );
    let _ = herdsman.answers(4);
    assert!(
        eventually(Duration::from_secs(1), || server(&herdsman, "b")["health"]
            == "ejected"),
        "{}",
        server(&herdsman, "b")
    );
    b_well.store(true, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(2), || server(&herdsman, "b")["health"]
            == "up"),
        "the ejection did not end"
    );
    let ramping = server(&herdsman, "b")["effective_weight"].as_u64().unwrap();
    assert!(ramping < 10, "no slow start: effective weight {ramping}");
    assert!(
        eventually(Duration::from_secs(4), || server(&herdsman, "b")
            ["effective_weight"]
            == 10),
        "the ramp did not reach the full weight: {}",
        server(&herdsman, "b")
    );
}
