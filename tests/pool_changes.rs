//! Servers added and removed at run time, over real sockets: under full load no request is lost,
//! and sticky sessions stay on their servers while others come and go.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// Sends GETs one after another until `stop`, over a kept connection that it replaces every
/// `renew_every` requests (and whenever herdsman says close); returns who answered how often,
/// or the first failure.
fn load_client(
    addr: SocketAddr,
    stop: &AtomicBool,
    renew_every: usize,
) -> Result<HashMap<String, usize>, String> {
    let mut counts = HashMap::new();
    let mut conn: Option<Conn> = None;
    let mut sent = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let c = match &mut conn {
            Some(c) => c,
            None => {
                let c = Conn::try_connect(addr).map_err(|e| format!("connect: {e}"))?;
                c.set_read_timeout(Duration::from_secs(5));
                conn.insert(c)
            }
        };
        c.try_send(&get_request_to("app.test", &format!("/load/{sent}"), ""))
            .map_err(|e| format!("request {sent}: sending: {e}"))?;
        let response = c
            .read_response(false)
            .map_err(|e| format!("request {sent}: {}", describe(&e)))?;
        if response.status() != 200 {
            return Err(format!(
                "request {sent}: {}",
                String::from_utf8_lossy(&response.head.raw)
            ));
        }
        *counts.entry(response.body_text()).or_insert(0) += 1;
        sent += 1;
        if response.says_close() || sent.is_multiple_of(renew_every) {
            conn = None;
        }
    }
    Ok(counts)
}

#[test]
fn adding_and_removing_servers_under_full_load_loses_no_request() {
    const CLIENTS: usize = 6;
    let [a, b, c, d] = ["a", "b", "c", "d"].map(Counted::start);
    let herd = Proxy::start_from_file(&pools_config(&pool_table(
        "app",
        "",
        &[("a", a.mock.addr, ""), ("b", b.mock.addr, "")],
        None,
    )));
    let registry = herd.registry();

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (addr, stop) = (herd.addr, Arc::clone(&stop));
            // Half keep their connection for long, half renew it often.
            let renew_every = if i % 2 == 0 { 1_000_000 } else { 20 };
            thread::spawn(move || load_client(addr, &stop, renew_every))
        })
        .collect();
    let started = Instant::now();
    let pause = || thread::sleep(Duration::from_millis(250));
    let add = |name: &str, server: &Counted| {
        let view = registry
            .add_server("app", ready_server(name, server.mock.addr))
            .unwrap();
        assert!(view.added_at_run_time);
        assert!(
            eventually(Duration::from_secs(2), || server.hits() > 0),
            "{name} got no request within 2 s of being added"
        );
    };
    // Each removed server: its count of requests when remove_server returned.
    let remove = |name: &str, server: &Counted| {
        registry.remove_server("app", name).unwrap();
        server.hits()
    };

    pause();
    assert!(a.hits() > 0 && b.hits() > 0, "the load did not start");
    add("c", &c);
    pause();
    // A reload of the unchanged file keeps c, added at run time, and drops no request.
    registry.reload().expect("reload under load");
    pause();
    let a_at_removal = remove("a", &a);
    pause();
    add("d", &d);
    pause();
    let b_at_removal = remove("b", &b);
    pause();
    stop.store(true, Ordering::SeqCst);
    let elapsed = started.elapsed();

    let mut answered: HashMap<String, usize> = HashMap::new();
    for (i, client) in clients.into_iter().enumerate() {
        let counts = client
            .join()
            .expect("client thread")
            .unwrap_or_else(|failure| panic!("client {i} failed: {failure}"));
        for (name, n) in counts {
            *answered.entry(name).or_insert(0) += n;
        }
    }
    let total: usize = answered.values().sum();
    assert!(
        total > 200,
        "only {total} requests in {elapsed:?}: the load was not running"
    );
    // Every request that reached a server came back to its client, once.
    for (name, server) in [("a", &a), ("b", &b), ("c", &c), ("d", &d)] {
        assert_eq!(
            answered.get(name).copied().unwrap_or(0),
            server.hits(),
            "responses from {name} vs requests it received (all: {answered:?})"
        );
    }
    // At removal, at most one request per client can have been on its way to the server.
    for (name, server, at_removal) in [("a", &a, a_at_removal), ("b", &b, b_at_removal)] {
        let after = server.hits() - at_removal;
        assert!(
            after <= CLIENTS,
            "{name} received {after} requests after its removal returned (all: {answered:?})"
        );
    }
    assert!(
        c.hits() > 0 && d.hits() > 0,
        "added servers got nothing: {answered:?}"
    );
    assert_eq!(
        app_servers(&registry),
        [
            ("c".to_string(), "ready".to_string(), 1),
            ("d".to_string(), "ready".to_string(), 1)
        ]
    );
}

#[test]
fn sessions_stay_put_when_servers_come_and_go() {
    let [a, b, c, d] = named_mocks(["a", "b", "c", "d"]);
    let herd = Proxy::start_from_file(&pools_config(&pool_table(
        "app",
        "",
        &[("a", a.addr, ""), ("b", b.addr, ""), ("c", c.addr, "")],
        Some(""),
    )));
    let registry = herd.registry();
    let cookies = cookies_for(&herd, &["a", "b", "c"]);

    // The cookie names the server, not its place: adding d and removing a (so that b and c
    // move up) leaves b's and c's sessions where they were.
    registry
        .add_server("app", ready_server("d", d.addr))
        .unwrap();
    registry.remove_server("app", "a").unwrap();
    for name in ["b", "c"] {
        for _ in 0..4 {
            let response = herd.get_with_cookie(Some(&cookies[name]));
            assert_eq!(answered_by(&response), name, "{name}'s session");
            assert_eq!(sticky_cookie_set(&response), None);
        }
    }
    // a's sessions move, with a fresh cookie that then holds.
    for _ in 0..4 {
        let response = herd.get_with_cookie(Some(&cookies["a"]));
        let server = answered_by(&response);
        assert_ne!(server, "a", "a session reached the removed server");
        let fresh = sticky_cookie_set(&response)
            .unwrap_or_else(|| panic!("a's session moved to {server} without a fresh cookie"));
        let again = herd.get_with_cookie(Some(&fresh));
        assert_eq!(answered_by(&again), server);
        assert_eq!(sticky_cookie_set(&again), None);
    }
    // The added server takes new sessions, and keeps them.
    let d_cookie = cookies_for(&herd, &["d"])["d"].clone();
    for _ in 0..4 {
        assert_eq!(answered_by(&herd.get_with_cookie(Some(&d_cookie))), "d");
    }
}
