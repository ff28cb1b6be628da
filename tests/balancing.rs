//! Balancing: how requests are spread over a pool's servers by round-robin (plain and
//! weighted), least-conn, p2c and random, and that a weight-0 server gets nothing.

mod common;

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use common::*;

/// Sends `n` sequential GETs, each on a new connection, and returns which server answered each.
fn answers(proxy: &Proxy, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let response = proxy.get(&format!("/req/{i}"));
            assert_eq!(
                response.status(),
                200,
                "request {i}: {}",
                response.head.first_line
            );
            response.body_text()
        })
        .collect()
}

fn tally(answers: &[String]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for a in answers {
        *counts.entry(a.clone()).or_insert(0) += 1;
    }
    counts
}

fn count(counts: &HashMap<String, usize>, name: &str) -> usize {
    counts.get(name).copied().unwrap_or(0)
}

/// herdsman balancing with `balance` over the servers "a", "b" and "c", in that order.
fn proxy_over_abc(balance: &str, [a, b, c]: &[Mock; 3]) -> Proxy {
    Setup::new()
        .balance(balance)
        .server("a", a.addr)
        .server("b", b.addr)
        .server("c", c.addr)
        .start()
}

/// Asserts each of "a", "b" and "c" answered exactly `share` of the requests in `got`.
fn assert_abc_each_got(got: &[String], share: usize) {
    let counts = tally(got);
    for name in ["a", "b", "c"] {
        assert_eq!(
            count(&counts, name),
            share,
            "share of {name}; sequence {got:?}"
        );
    }
}

#[test]
fn round_robin_gives_equal_servers_equal_turns_in_rotation() {
    let servers = ["a", "b", "c"].map(Mock::named);
    let proxy = proxy_over_abc("round-robin", &servers);

    let got = answers(&proxy, 30);
    assert_abc_each_got(&got, 10);
    // One rotation shared by all workers: every run of three consecutive requests visits
    // each server once, in the same order every time.
    for i in 3..got.len() {
        assert_eq!(
            got[i],
            got[i - 3],
            "rotation broken at request {i}: {got:?}"
        );
    }
}

#[test]
fn round_robin_follows_weights() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let proxy = Setup::new()
        .weighted("a", a.addr, 2)
        .weighted("b", b.addr, 1)
        .start();

    let got = answers(&proxy, 30);
    let counts = tally(&got);
    assert_eq!(count(&counts, "a"), 20, "sequence {got:?}");
    assert_eq!(count(&counts, "b"), 10, "sequence {got:?}");
    // Smooth weighting: the lighter server is spread out, never skipped for a whole cycle.
    for window in got.windows(3) {
        assert!(
            window.iter().any(|s| s == "b"),
            "b missing from three consecutive requests: {got:?}"
        );
    }
}

#[test]
fn round_robin_gives_a_weight_zero_server_nothing() {
    let (a, b, c, idle) = (
        Mock::named("a"),
        Mock::named("b"),
        Mock::named("c"),
        Mock::named("idle"),
    );
    let proxy = Setup::new()
        .server("a", a.addr)
        .weighted("idle", idle.addr, 0)
        .server("b", b.addr)
        .server("c", c.addr)
        .start();

    let got = answers(&proxy, 30);
    assert_abc_each_got(&got, 10);
    assert_eq!(count(&tally(&got), "idle"), 0);
    assert_eq!(
        idle.connections(),
        0,
        "the weight-0 server was connected to"
    );
}

/// A mock named `name` that holds requests for `/hold` until `release` opens (answering them
/// then), and answers everything else at once.
fn holding_mock(name: &'static str, release: Gate) -> Mock {
    Mock::start(move |ex| {
        ex.read_body()?;
        if ex.head.target() == "/hold" {
            release.wait(Duration::from_secs(30));
        }
        ex.respond(200, &[], name.as_bytes())?;
        Ok(Flow::KeepAlive)
    })
}

/// The servers "a", "b" and "c" as holding mocks: `a` answers its held requests when
/// `release_a` opens, `b` and `c` theirs when `release_others` does.
fn holding_abc(release_a: &Gate, release_others: &Gate) -> [Mock; 3] {
    [
        holding_mock("a", release_a.clone()),
        holding_mock("b", release_others.clone()),
        holding_mock("c", release_others.clone()),
    ]
}

/// Puts one `/hold` request in flight on each of the three servers (sent one after another, so
/// least-conn must spread them one per server). Returns the connections waiting on them.
fn hold_one_request_per_server(proxy: &Proxy, mocks: &[Mock; 3]) -> Vec<Conn> {
    let mut held = Vec::new();
    for i in 1..=3 {
        let mut conn = proxy.connect();
        conn.send(&get_request("/hold", ""));
        let arrived = eventually(Duration::from_secs(5), || {
            mocks.iter().map(|m| m.heads().len()).sum::<usize>() >= i
        });
        assert!(arrived, "held request {i} never reached a server");
        held.push(conn);
    }
    for (mock, name) in mocks.iter().zip(["a", "b", "c"]) {
        assert_eq!(
            mock.heads().len(),
            1,
            "each server should hold one of three in-flight requests; {name} got {}",
            mock.heads().len()
        );
    }
    held
}

fn release_and_collect(held: &mut [Conn]) -> Vec<String> {
    held.iter_mut()
        .map(|conn| {
            let response = conn.response();
            assert_eq!(response.status(), 200);
            response.body_text()
        })
        .collect()
}

#[test]
fn least_conn_avoids_the_server_with_requests_in_flight() {
    let (release_a, release_others) = (Gate::new(), Gate::new());
    let servers = holding_abc(&release_a, &release_others);
    let proxy = proxy_over_abc("least-conn", &servers);

    let mut held = hold_one_request_per_server(&proxy, &servers);
    release_others.open();
    thread::sleep(Duration::from_millis(100));

    let got = answers(&proxy, 20);
    let counts = tally(&got);
    assert_eq!(
        count(&counts, "a"),
        0,
        "a has a request in flight, b and c none, yet a got new requests: {got:?}"
    );
    assert!(
        count(&counts, "b") > 0 && count(&counts, "c") > 0,
        "{got:?}"
    );

    release_a.open();
    let mut finished = release_and_collect(&mut held);
    finished.sort();
    assert_eq!(finished, ["a", "b", "c"]);
}

#[test]
fn least_conn_spreads_equal_servers_evenly_when_idle() {
    let servers = ["a", "b", "c"].map(Mock::named);
    let proxy = proxy_over_abc("least-conn", &servers);
    let got = answers(&proxy, 30);
    let counts = tally(&got);
    // With nothing in flight every server ties; ties go to the server taken longest ago, so the
    // servers take turns.
    for name in ["a", "b", "c"] {
        assert_eq!(count(&counts, name), 10, "{name}: {got:?}");
    }
}

#[test]
fn p2c_mostly_avoids_the_loaded_server() {
    let (release_a, release_others) = (Gate::new(), Gate::new());
    let servers = holding_abc(&release_a, &release_others);
    let proxy = proxy_over_abc("p2c", &servers);
    let [a, b, c] = &servers;

    // Load a with three in-flight requests: send /hold until a holds three.
    let mut held = Vec::new();
    let mut sent = 0;
    while a.heads().len() < 3 {
        assert!(
            sent < 60,
            "p2c sent {sent} requests without a receiving three"
        );
        let mut conn = proxy.connect();
        conn.send(&get_request("/hold", ""));
        sent += 1;
        assert!(
            eventually(Duration::from_secs(5), || {
                a.heads().len() + b.heads().len() + c.heads().len() >= sent
            }),
            "held request never reached a server"
        );
        held.push(conn);
    }
    release_others.open();
    thread::sleep(Duration::from_millis(100));

    // a is picked only if both choices land on it; random picking would give it a third.
    let got = answers(&proxy, 90);
    let counts = tally(&got);
    assert!(
        count(&counts, "a") <= 18,
        "loaded server a got {} of 90: {counts:?}",
        count(&counts, "a")
    );
    assert!(
        count(&counts, "b") > 0 && count(&counts, "c") > 0,
        "{counts:?}"
    );

    release_a.open();
    for conn in held.iter_mut() {
        assert_eq!(conn.response().status(), 200);
    }
}

#[test]
fn random_reaches_every_server_but_not_weight_zero() {
    let mocks: Vec<(&str, Mock)> = ["a", "b", "c"]
        .into_iter()
        .map(|n| (n, Mock::named(n)))
        .collect();
    let idle = Mock::named("idle");
    let mut setup = Setup::new().balance("random");
    for (name, mock) in &mocks {
        setup = setup.server(name, mock.addr);
    }
    let proxy = setup.weighted("idle", idle.addr, 0).start();

    let got = answers(&proxy, 300);
    let counts = tally(&got);
    for (name, _) in &mocks {
        // Expected 100 each; 40 is over 7 standard deviations below.
        assert!(count(&counts, name) >= 40, "{name}: {counts:?}");
    }
    assert_eq!(count(&counts, "idle"), 0, "{counts:?}");
}

#[test]
fn random_follows_weights() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let proxy = Setup::new()
        .balance("random")
        .weighted("a", a.addr, 3)
        .weighted("b", b.addr, 1)
        .start();
    let got = answers(&proxy, 300);
    let counts = tally(&got);
    // Expected 225 : 75 (sd 7.5); an unweighted pick would give 150 : 150.
    let heavy = count(&counts, "a");
    assert!((185..=265).contains(&heavy), "weight 3:1 gave {counts:?}");
}

#[test]
fn every_balance_algorithm_sends_requests_to_a_server() {
    for balance in ["round-robin", "least-conn", "p2c", "random"] {
        let only = Mock::echo();
        let proxy = Setup::new()
            .balance(balance)
            .server("only", only.addr)
            .start();
        let response = proxy.get("/x");
        assert_eq!(response.status(), 200, "{balance}");
        assert_eq!(only.requests().len(), 1, "{balance}");
    }
}
