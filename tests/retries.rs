//! Retries over real sockets: a request whose server cannot be reached goes to another server;
//! an idempotent request whose server closed before answering goes again, a POST does not;
//! `retries = 0` turns them off, and the retry budget stops a storm.

mod admin_support;
mod common;

use admin_support::{count, with_pool_keys, Running};
use common::*;

/// An address nothing listens on: connecting is refused.
fn refusing() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A mock that reads each request and closes without a byte of answer.
fn closer() -> Mock {
    Mock::start(|ex| {
        ex.read_body()?;
        Ok(Flow::Close)
    })
}

/// herdsman with `setup`, and `pool_keys` (e.g. `retries = 0`) added to pool "app", whose
/// passive ejection is off, so that a dead server stays in rotation and every retry shows.
fn start(setup: Setup, pool_keys: &str) -> Running {
    let herdsman = Running::start(setup);
    herdsman.reconfigure(|text| {
        let text = with_pool_keys(text, pool_keys);
        format!("{text}[pool.passive]\nconsecutive_failures = 0\n")
    });
    herdsman
}

#[test]
fn a_refused_connection_is_retried_on_another_server() {
    let a = Mock::named("a");
    let herdsman = start(
        Setup::new()
            .admin()
            .server("a", a.addr)
            .server("dead", refusing()),
        "",
    );
    let answers = herdsman.answers(20);
    assert_eq!(count(&answers, "a"), 20, "{answers:?}");
    // Half of them were first sent to the dead server.
    let dead_tries = herdsman.servers_json()["dead"]["requests"]
        .as_u64()
        .unwrap();
    assert_eq!(dead_tries, 10);
}

#[test]
fn an_idempotent_request_is_retried_after_a_close_and_a_post_is_not() {
    let (a, shut) = (Mock::named("a"), closer());
    let setup = Setup::new()
        .admin()
        .workers(1)
        .server("shut", shut.addr)
        .server("a", a.addr);
    let herdsman = start(setup, "");
    let gets: Vec<(u16, String)> = (0..6)
        .map(|i| {
            let mut conn = Conn::connect(herdsman.web);
            let get = conn.roundtrip(&get_request(&format!("/g{i}"), "Connection: close\r\n"));
            (get.status(), get.body_text())
        })
        .collect();
    let posts: Vec<u16> = (0..6)
        .map(|i| {
            let mut conn = Conn::connect(herdsman.web);
            let request = format!(
                "POST /p{i} HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
            );
            conn.roundtrip(request.as_bytes()).status()
        })
        .collect();
    assert!(
        gets.iter()
            .all(|(status, body)| *status == 200 && body == "a"),
        "{gets:?}"
    );
    // Round-robin sends every other request to `shut` first; a POST that reached it is not
    // sent again.
    let failed_posts = posts.iter().filter(|&&status| status == 502).count();
    assert_eq!(failed_posts, 3, "{posts:?}");
    assert!(posts.iter().all(|&s| s == 200 || s == 502), "{posts:?}");
    let posts_at_a = a.targets().iter().filter(|t| t.starts_with("/p")).count();
    assert_eq!(
        posts_at_a + failed_posts,
        6,
        "a POST went to two servers: {posts:?}"
    );
}

#[test]
fn retries_zero_answers_the_failure() {
    let a = Mock::named("a");
    let herdsman = start(
        Setup::new()
            .admin()
            .server("a", a.addr)
            .server("dead", refusing()),
        "retries = 0\n",
    );
    let answers = herdsman.answers(10);
    assert_eq!(count(&answers, "a"), 5, "{answers:?}");
    assert_eq!(
        answers
            .iter()
            .filter(|a| a.starts_with("HTTP/1.1 502"))
            .count(),
        5,
        "{answers:?}"
    );
}

#[test]
fn the_retry_budget_stops_a_storm() {
    let a = Mock::named("a");
    // One worker, so one budget: 10 banked retries, and a budget of 0% earns no more.
    let herdsman = start(
        Setup::new()
            .admin()
            .workers(1)
            .server("a", a.addr)
            .server("dead", refusing()),
        "retry_budget_percent = 0\n",
    );
    let answers = herdsman.answers(40);
    let failed = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 502"))
        .count();
    // 20 requests met the dead server first: 10 were retried, 10 were not.
    assert_eq!((count(&answers, "a"), failed), (30, 10), "{answers:?}");
}
