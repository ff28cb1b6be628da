//! Retries over real sockets: a request whose server cannot be reached goes to another server;
//! an idempotent request whose server closed before answering goes again, a POST does not;
//! `retries = 0` turns them off, and the retry budget stops a storm.

mod admin_support;
mod common;

use std::time::{Duration, Instant};

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
fn a_refused_connection_fails_over_at_once_and_takes_the_server_out_until_it_listens() {
    let a = Mock::named("a");
    let dead = refusing();
    // retries = 0: a refusal fails over all the same (it reached nothing), outside the budget.
    let herdsman = start(
        Setup::new()
            .admin()
            .server("a", a.addr)
            .server("dead", dead),
        "retries = 0\n",
    );
    let answers = herdsman.answers(20);
    assert_eq!(count(&answers, "a"), 20, "{answers:?}");
    // One refusal took it out: no request after it was sent there.
    let servers = herdsman.servers_json();
    let dead_tries = servers["dead"]["requests"].as_u64().unwrap();
    assert!(
        dead_tries <= 2,
        "{dead_tries} requests met the refusing server"
    );
    assert_eq!(servers["dead"]["health"], "down", "{:?}", servers["dead"]);
    assert!(
        servers["dead"]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("refused")),
        "{:?}",
        servers["dead"]
    );
    // It listens again: within a moment it is back in rotation.
    let back = Mock::start_on(dead, |ex| {
        ex.read_body()?;
        ex.respond(200, &[], b"back")?;
        Ok(Flow::KeepAlive)
    });
    assert!(
        eventually(Duration::from_secs(3), || herdsman.servers_json()["dead"]
            ["health"]
            == "up"),
        "the server listens again, yet stays out"
    );
    let answers = herdsman.answers(10);
    assert_eq!(
        (count(&answers, "a"), count(&answers, "back")),
        (5, 5),
        "{answers:?}"
    );
    drop(back);
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
    let (a, shut) = (Mock::named("a"), closer());
    let herdsman = start(
        Setup::new()
            .admin()
            .server("a", a.addr)
            .server("shut", shut.addr),
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
    let (a, shut) = (Mock::named("a"), closer());
    // One worker, so one window: a budget of 0% earns nothing, and a floor of one retry a
    // second allows 10 in the ten-second window.
    let herdsman = start(
        Setup::new()
            .admin()
            .workers(1)
            .server("a", a.addr)
            .server("shut", shut.addr),
        "retry_budget_percent = 0\nretry_budget_floor = 1\n",
    );
    let answers = herdsman.answers(40);
    let failed = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 502"))
        .count();
    // 20 requests met the closing server first: 10 were retried, 10 were not.
    assert_eq!((count(&answers, "a"), failed), (30, 10), "{answers:?}");
}

#[test]
fn with_every_server_failing_retries_stay_within_the_budget_and_answers_come_quickly() {
    let closers: Vec<Mock> = (0..3).map(|_| closer()).collect();
    let mut setup = Setup::new().admin().workers(1);
    for (index, server) in closers.iter().enumerate() {
        setup = setup.server(&format!("s{index}"), server.addr);
    }
    let herdsman = start(setup, "retry_budget_percent = 20\nretry_budget_floor = 0\n");
    let started = Instant::now();
    let answers = herdsman.answers(200);
    let took = started.elapsed();
    assert!(
        answers.iter().all(|a| a.starts_with("HTTP/1.1 502")),
        "{answers:?}"
    );
    assert!(took < Duration::from_secs(10), "200 failures took {took:?}");
    let seen: usize = closers.iter().map(|server| server.heads().len()).sum();
    let retries = seen - 200;
    // 20% of 200 requests: at most 40 retries, and the budget lets them all be made.
    assert!(retries <= 40, "{retries} retries for 200 requests");
    assert!(retries >= 38, "only {retries} retries for 200 requests");
}

/// A server that answers nothing for `delay` (a request taking that long), then 200 with `name`.
fn slow(name: &'static str, delay: Duration) -> Mock {
    Mock::start(move |ex| {
        ex.read_body()?;
        std::thread::sleep(delay);
        ex.respond(200, &[("X-Server", name)], name.as_bytes())?;
        Ok(Flow::KeepAlive)
    })
}

/// herdsman in front of `servers` (in order, round-robin from the first) with `[timeouts]`
/// `timeouts` and `pool_keys` in pool "app"; passive ejection off.
fn behind(servers: &[&Mock], timeouts: &[(&str, &str)], pool_keys: &str) -> Proxy {
    let mut setup = Setup::new().workers(1);
    for (index, server) in servers.iter().enumerate() {
        setup = setup.server(&format!("s{index}"), server.addr);
    }
    for (key, value) in timeouts {
        setup = setup.timeout(key, value);
    }
    let text = with_pool_keys(setup.toml("127.0.0.1:0"), pool_keys);
    Proxy::start(&format!("{text}[pool.passive]\nconsecutive_failures = 0\n"))
}

/// Requests each server has seen.
fn seen(servers: &[&Mock]) -> Vec<usize> {
    servers.iter().map(|server| server.heads().len()).collect()
}

#[test]
fn a_response_timeout_is_not_retried_by_default() {
    let (a, b, c) = (
        slow("a", Duration::from_secs(3)),
        slow("b", Duration::from_secs(3)),
        slow("c", Duration::from_secs(3)),
    );
    let servers = [&a, &b, &c];
    let proxy = behind(&servers, &[("backend_response", "300ms")], "");
    let started = Instant::now();
    let response = proxy.get("/slow");
    let took = started.elapsed();
    assert_error_response(&response, 504);
    assert!(
        took < Duration::from_millis(900),
        "504 after {took:?}: retried"
    );
    assert_eq!(seen(&servers), [1, 0, 0]);
}

#[test]
fn a_response_timeout_is_retried_when_listed_and_only_for_idempotent_requests() {
    let (a, b) = (slow("a", Duration::from_secs(3)), Mock::named("b"));
    let servers = [&a, &b];
    let start = || {
        behind(
            &servers,
            &[("backend_response", "300ms")],
            "retry_on = [\"connect-failure\", \"response-timeout\"]\n",
        )
    };
    let response = start().get("/slow");
    assert_eq!(
        (response.status(), response.body_text().as_str()),
        (200, "b")
    );
    assert_eq!(seen(&servers), [1, 1]);
    // A POST may be running on the slow server: it is not sent again. (A new herdsman, whose
    // round-robin starts on the slow server.)
    let proxy = start();
    let mut conn = proxy.connect();
    let post = conn.roundtrip(b"POST /slow HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
    assert_error_response(&post, 504);
    assert_eq!(seen(&servers), [2, 1]);
}

#[test]
fn the_request_deadline_bounds_every_retry_together() {
    let slow_ones: Vec<Mock> = (0..3).map(|_| slow("s", Duration::from_secs(3))).collect();
    let servers: Vec<&Mock> = slow_ones.iter().collect();
    let proxy = behind(
        &servers,
        &[("backend_response", "400ms"), ("request", "600ms")],
        "retries = 2\nretry_on = [\"response-timeout\"]\n",
    );
    let started = Instant::now();
    let response = proxy.get("/slow");
    let took = started.elapsed();
    assert_error_response(&response, 504);
    // Without the deadline: three attempts of 400 ms, 1.2 s.
    assert!(took >= Duration::from_millis(550), "504 after {took:?}");
    assert!(took < Duration::from_millis(1000), "504 after {took:?}");
    // The first server, and one retry: no third attempt began after the deadline.
    let seen = seen(&servers);
    assert_eq!((seen[0], seen.iter().sum::<usize>()), (1, 2), "{seen:?}");
}

#[test]
fn a_listed_status_is_retried_for_an_idempotent_request() {
    let unavailable = Mock::start(|ex| {
        ex.read_body()?;
        ex.respond(503, &[("X-Server", "busy")], b"come back later")?;
        Ok(Flow::KeepAlive)
    });
    let fine = Mock::named("fine");
    let servers = [&unavailable, &fine];
    let start = || behind(&servers, &[], "retry_on = [\"connect-failure\", \"503\"]\n");
    let response = start().get("/x");
    assert_eq!(
        (response.status(), response.body_text().as_str()),
        (200, "fine")
    );
    assert_eq!(seen(&servers), [1, 1]);
    // A POST takes the 503 as it came (a new herdsman, whose round-robin starts on the 503).
    let proxy = start();
    let mut conn = proxy.connect();
    let post = conn.roundtrip(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(
        (post.status(), post.body_text().as_str()),
        (503, "come back later")
    );
    // Not listed (the default): a GET takes the 503 too.
    let proxy = behind(&servers, &[], "");
    assert_eq!(proxy.get("/y").status(), 503);
}
