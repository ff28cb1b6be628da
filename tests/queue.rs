//! `max_connections` and the pool's queue over real sockets: a server never has more requests at
//! once than its limit; the others wait and are served as slots free; past `queue_timeout` they
//! get 503 with Retry-After, and the API counts them. A listener at its `max_connections` stops
//! accepting until a connection closes.

mod admin_support;
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use admin_support::{with_pool_keys, Running};
use common::*;

/// A mock that answers after `delay`, recording the most requests it had in hand at once.
fn slow(name: &'static str, delay: Duration, most: Arc<AtomicUsize>) -> Mock {
    let now = Arc::new(AtomicUsize::new(0));
    Mock::start(move |ex| {
        ex.read_body()?;
        let in_hand = now.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(in_hand, Ordering::SeqCst);
        thread::sleep(delay);
        now.fetch_sub(1, Ordering::SeqCst);
        ex.respond(200, &[], name.as_bytes())?;
        Ok(Flow::KeepAlive)
    })
}

/// herdsman with pool "app" of `servers` (name, address, max_connections), and `pool_keys`.
fn start(servers: &[(&str, std::net::SocketAddr, u32)], pool_keys: &str) -> Running {
    let mut setup = Setup::new().admin();
    for (name, addr, _) in servers {
        setup = setup.server(name, *addr);
    }
    let herdsman = Running::start(setup);
    herdsman.reconfigure(|mut text| {
        for (name, addr, max) in servers {
            text = text.replace(
                &format!("{{ name = {name:?}, addr = \"{addr}\" }}"),
                &format!("{{ name = {name:?}, addr = \"{addr}\", max_connections = {max} }}"),
            );
        }
        with_pool_keys(text, pool_keys)
    });
    herdsman
}

/// `n` requests at once, each on its own connection: (status, body, Retry-After) of each.
fn at_once(herdsman: &Running, n: usize) -> Vec<(u16, String, Option<String>)> {
    let web = herdsman.web;
    let clients: Vec<_> = (0..n)
        .map(|i| {
            thread::spawn(move || {
                let mut conn = Conn::connect(web);
                let response =
                    conn.roundtrip(&get_request(&format!("/{i}"), "Connection: close\r\n"));
                let retry_after = response.header("retry-after").map(str::to_string);
                (response.status(), response.body_text(), retry_after)
            })
        })
        .collect();
    clients.into_iter().map(|c| c.join().unwrap()).collect()
}

#[test]
fn a_server_never_has_more_than_its_limit_and_the_rest_wait_their_turn() {
    let (most_a, most_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let a = slow("a", Duration::from_millis(150), Arc::clone(&most_a));
    let b = slow("b", Duration::from_millis(150), Arc::clone(&most_b));
    let herdsman = start(
        &[("a", a.addr, 2), ("b", b.addr, 1)],
        "queue_timeout = \"5s\"\n",
    );
    let answers = at_once(&herdsman, 9);
    assert!(
        answers.iter().all(|(status, _, _)| *status == 200),
        "{answers:?}"
    );
    assert_eq!(most_a.load(Ordering::SeqCst), 2, "a's limit is 2");
    assert_eq!(most_b.load(Ordering::SeqCst), 1, "b's limit is 1");
    let (_, pools) = herdsman.api("GET", "/api/pools", None);
    assert_eq!(pools["pools"][0]["queued"], 0);
    assert_eq!(pools["pools"][0]["queue_timeouts"], 0);
}

#[test]
fn past_the_queue_timeout_a_request_gets_503_with_retry_after() {
    let most = Arc::new(AtomicUsize::new(0));
    let a = slow("a", Duration::from_millis(600), Arc::clone(&most));
    let herdsman = start(&[("a", a.addr, 1)], "queue_timeout = \"100ms\"\n");
    let answers = at_once(&herdsman, 3);
    let served = answers
        .iter()
        .filter(|(status, _, _)| *status == 200)
        .count();
    let refused: Vec<_> = answers
        .iter()
        .filter(|(status, _, _)| *status == 503)
        .collect();
    assert_eq!((served, refused.len()), (1, 2), "{answers:?}");
    assert!(
        refused
            .iter()
            .all(|(_, _, retry)| retry.as_deref() == Some("1")),
        "{answers:?}"
    );
    assert_eq!(most.load(Ordering::SeqCst), 1);
    let (_, pools) = herdsman.api("GET", "/api/pools", None);
    assert_eq!(pools["pools"][0]["queue_timeouts"], 2, "{pools}");
}

#[test]
fn a_listener_at_its_limit_stops_accepting_until_a_connection_closes() {
    let a = Mock::named("a");
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr));
    herdsman.reconfigure(|text| {
        text.replace("name = \"web\"\n", "name = \"web\"\nmax_connections = 2\n")
    });
    let accepted = || -> u64 {
        let (_, json) = herdsman.api("GET", "/api/workers", None);
        json["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["accepted"].as_u64().unwrap())
            .sum()
    };
    let before = accepted();
    let mut first = Conn::connect(herdsman.web);
    let mut second = Conn::connect(herdsman.web);
    assert_eq!(first.roundtrip(&get_request("/1", "")).status(), 200);
    assert_eq!(second.roundtrip(&get_request("/2", "")).status(), 200);
    // The third connects (the kernel queues it) but is not accepted, so it gets no answer.
    let mut third = Conn::connect(herdsman.web);
    third.send(&get_request("/3", ""));
    third.set_read_timeout(Duration::from_millis(300));
    assert!(
        third.read_head().is_err(),
        "a third connection was served over the limit"
    );
    assert_eq!(accepted() - before, 2);
    drop(first);
    third.set_read_timeout(Duration::from_secs(5));
    let head = third
        .read_head()
        .unwrap()
        .expect("a response once a connection closed");
    assert_eq!(head.status(), 200);
    assert_eq!(accepted() - before, 3);
    drop(second);
}
