//! Idle server connections kept by use: a worker that had N requests in flight to a server keeps
//! N connections to it open, so bursts of the same size open none (with a constant cap of 64,
//! each burst of 150 opened 86 anew); `max_idle_per_server` still caps them; and the connections
//! opened are counted per worker, per pool and per server where an operator reads them (the
//! metrics, `/api/pools`).

mod common;

use std::time::Duration;

use common::*;

/// Clients that send a request at once, then read every answer: one burst of `CLIENTS`
/// requests in flight together (the server holds each answer `HOLD`).
const CLIENTS: usize = 150;
const BURSTS: usize = 8;
const HOLD: Duration = Duration::from_millis(60);

/// A server that answers every request after `HOLD`, so that a burst's requests are all in
/// flight at once.
fn slow_server() -> Mock {
    Mock::start(|ex| {
        ex.read_body()?;
        std::thread::sleep(HOLD);
        ex.respond(200, &[], b"ok")?;
        Ok(Flow::KeepAlive)
    })
}

/// Sends `BURSTS` bursts over `CLIENTS` keep-alive connections; every answer must be a 200.
fn bursts(proxy: &Proxy) {
    let mut clients: Vec<Conn> = (0..CLIENTS).map(|_| proxy.connect()).collect();
    let request = get_request("/burst", "");
    for _ in 0..BURSTS {
        for client in &mut clients {
            client.send(&request);
        }
        for client in &mut clients {
            let response = client.read_response(false).expect("an answer");
            assert_eq!(response.status(), 200);
        }
    }
}

/// The number in the admin API's `/metrics` line that starts with `prefix`.
fn metric(admin: std::net::SocketAddr, prefix: &str) -> f64 {
    let text = Conn::connect(admin)
        .roundtrip(&admin_get_request("/metrics"))
        .body_text();
    let line = text
        .lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn bursts_of_the_same_size_reuse_the_connections_the_first_one_opened() {
    let server = slow_server();
    let proxy = Setup::new()
        .workers(1)
        .admin()
        .server("app-1", server.addr)
        .start();
    bursts(&proxy);
    let opened = server.connections();
    // The first burst opens one connection per request in flight; the later ones find them
    // idle. A few more may open where a burst's requests did not all overlap.
    assert!(
        (CLIENTS / 2..=CLIENTS + CLIENTS / 10).contains(&opened),
        "{opened} connections opened for {BURSTS} bursts of {CLIENTS}: the later bursts should \
         open none"
    );
    // herdsman's counts are the server's.
    let worker: u64 = proxy
        .server()
        .stats()
        .report()
        .iter()
        .map(|w| w.backend_connects)
        .sum();
    assert_eq!(worker as usize, opened);
    let admin = proxy.server().admin_addr().expect("an admin listener");
    let pool_line = "herdsman_pool_backend_connections_opened_total{pool=\"app\"}";
    assert_eq!(metric(admin, pool_line) as usize, opened);
    let server_line =
        "herdsman_server_backend_connections_opened_total{pool=\"app\",server=\"app-1\"}";
    assert_eq!(metric(admin, server_line) as usize, opened);
    let pools = Conn::connect(admin)
        .roundtrip(&admin_get_request("/api/pools"))
        .body_text();
    let pools: serde_json::Value = serde_json::from_str(&pools).unwrap();
    let pool = &pools["pools"][0];
    assert_eq!(pool["traffic"]["connections_opened"], opened as u64);
    assert_eq!(pool["traffic"]["requests"], (CLIENTS * BURSTS) as u64);
    assert_eq!(
        pool["servers"][0]["traffic"]["connections_opened"],
        opened as u64
    );
    // Kept idle now: the connections the bursts used.
    let idle = metric(
        admin,
        "herdsman_worker_backend_connections_idle{worker=\"0\"}",
    ) as usize;
    assert!(idle >= CLIENTS / 2 && idle <= opened, "{idle} idle");
}

#[test]
fn an_explicit_cap_still_holds() {
    let server = slow_server();
    let proxy = Setup::new()
        .workers(1)
        .limit("max_idle_per_server", 10)
        .server("app-1", server.addr)
        .start();
    bursts(&proxy);
    // Each burst after the first reopens all but the 10 kept.
    let opened = server.connections();
    assert!(
        opened >= CLIENTS + (BURSTS - 1) * (CLIENTS / 2),
        "{opened} connections opened: with 10 kept, each burst should reopen most"
    );
}
