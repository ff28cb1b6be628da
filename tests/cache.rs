//! The cache tier (`[pool.cache]`) over real sockets: what is stored, what a hit looks like, and
//! what never reaches another client. The server is a mock that counts its requests and answers
//! with the headers each test gives it, so every assertion is what a client or the server would
//! see.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Flow, Mock, Proxy, Setup};

/// A server whose answer to each path is given by the test: its extra header lines and body;
/// every answer's body ends with the request's count for that path, so a client can tell a
/// stored answer from a fresh one. Unknown paths: 200 with no cache headers.
fn counting_server(
    answers: &[(&str, &[(&'static str, &'static str)])],
) -> (Mock, Arc<Mutex<HashMap<String, usize>>>) {
    let answers: HashMap<String, Vec<(&'static str, &'static str)>> = answers
        .iter()
        .map(|(path, headers)| (path.to_string(), headers.to_vec()))
        .collect();
    let counts = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let seen = Arc::clone(&counts);
    let mock = Mock::start(move |exchange| {
        let path = exchange.head.target().to_string();
        let count = {
            let mut counts = seen.lock().unwrap();
            let count = counts.entry(path.clone()).or_default();
            *count += 1;
            *count
        };
        let path_only = path.split('?').next().unwrap_or_default().to_string();
        let headers = answers.get(&path_only).cloned().unwrap_or_default();
        let status = headers
            .iter()
            .find(|(name, _)| *name == ":status")
            .map_or(200, |(_, value)| value.parse().unwrap());
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .filter(|(name, _)| *name != ":status")
            .copied()
            .collect();
        let body = format!("{path} answer {count}");
        exchange.respond(status, &headers, body.as_bytes())?;
        Ok(Flow::KeepAlive)
    });
    (mock, counts)
}

fn requests_for(counts: &Mutex<HashMap<String, usize>>, path: &str) -> usize {
    counts.lock().unwrap().get(path).copied().unwrap_or(0)
}

/// herdsman with one cached pool in front of `server`; `cache_lines` go into `[pool.cache]`.
fn cached_proxy(server: &Mock, cache_lines: &str) -> Proxy {
    let toml = Setup::new().server("s1", server.addr).toml("127.0.0.1:0");
    Proxy::start(&format!("{toml}\n[pool.cache]\n{cache_lines}\n"))
}

#[test]
fn a_fresh_response_is_served_again_without_the_server() {
    let (server, counts) = counting_server(&[("/fresh", &[("Cache-Control", "max-age=60")])]);
    let proxy = cached_proxy(&server, "cache_status = true");
    let first = proxy.get("/fresh");
    assert_eq!(first.status(), 200);
    assert_eq!(first.body_text(), "/fresh answer 1");
    assert_eq!(
        first.header("cache-status"),
        Some("herdsman; fwd=miss; fwd-status=200; stored"),
        "a miss says it went to the server, and that its answer is stored"
    );
    for _ in 0..5 {
        let again = proxy.get("/fresh");
        assert_eq!(again.status(), 200);
        assert_eq!(
            again.body_text(),
            "/fresh answer 1",
            "served from the cache"
        );
        assert!(
            again.header("age").is_some(),
            "a cached answer says its age"
        );
        let status = again.header("cache-status").unwrap_or_default();
        assert!(
            status.starts_with("herdsman; hit"),
            "Cache-Status: {status}"
        );
        assert_eq!(again.header("cache-control"), Some("max-age=60"));
    }
    assert_eq!(
        requests_for(&counts, "/fresh"),
        1,
        "the server answered once"
    );
    // Another query string is another object.
    assert_eq!(
        proxy.get("/fresh?page=2").body_text(),
        "/fresh?page=2 answer 1"
    );
    assert_eq!(requests_for(&counts, "/fresh?page=2"), 1);
}

#[test]
fn what_may_not_be_stored_goes_to_the_server_every_time() {
    let (server, counts) = counting_server(&[
        ("/nostore", &[("Cache-Control", "no-store, max-age=60")]),
        ("/private", &[("Cache-Control", "private, max-age=60")]),
        (
            "/cookie",
            &[("Cache-Control", "max-age=60"), ("Set-Cookie", "id=secret")],
        ),
        ("/plain", &[]),
        (
            "/varystar",
            &[("Cache-Control", "max-age=60"), ("Vary", "*")],
        ),
    ]);
    let proxy = cached_proxy(&server, "");
    for path in ["/nostore", "/private", "/cookie", "/plain", "/varystar"] {
        assert_eq!(proxy.get(path).body_text(), format!("{path} answer 1"));
        assert_eq!(
            proxy.get(path).body_text(),
            format!("{path} answer 2"),
            "{path} again"
        );
        assert_eq!(requests_for(&counts, path), 2, "{path}");
    }
}

#[test]
fn a_response_that_sets_a_cookie_is_stored_only_when_told_and_never_hands_the_cookie_on() {
    let (server, counts) = counting_server(&[(
        "/cookie",
        &[("Cache-Control", "max-age=60"), ("Set-Cookie", "id=secret")],
    )]);
    let proxy = cached_proxy(&server, "store_set_cookie = true");
    let first = proxy.get("/cookie");
    assert_eq!(
        first.header("set-cookie"),
        Some("id=secret"),
        "the first client gets its cookie"
    );
    let second = proxy.get("/cookie");
    assert_eq!(second.body_text(), "/cookie answer 1", "stored");
    assert_eq!(
        second.header("set-cookie"),
        None,
        "another client never gets it"
    );
    assert_eq!(requests_for(&counts, "/cookie"), 1);
}

#[test]
fn a_response_expires_after_its_max_age() {
    let (server, counts) = counting_server(&[("/short", &[("Cache-Control", "max-age=1")])]);
    let proxy = cached_proxy(&server, "");
    assert_eq!(proxy.get("/short").body_text(), "/short answer 1");
    assert_eq!(proxy.get("/short").body_text(), "/short answer 1");
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        proxy.get("/short").body_text(),
        "/short answer 2",
        "fetched again once stale"
    );
    assert_eq!(requests_for(&counts, "/short"), 2);
}

#[test]
fn the_request_s_own_cache_control_is_obeyed() {
    let (server, counts) = counting_server(&[("/doc", &[("Cache-Control", "max-age=60")])]);
    let proxy = cached_proxy(&server, "");
    assert_eq!(proxy.get("/doc").body_text(), "/doc answer 1");
    let revalidate = proxy.get_from_host("test.local", "/doc", "Cache-Control: no-cache\r\n");
    assert_eq!(
        revalidate.body_text(),
        "/doc answer 2",
        "no-cache goes to the server"
    );
    let pragma = proxy.get_from_host("test.local", "/doc", "Pragma: no-cache\r\n");
    assert_eq!(pragma.body_text(), "/doc answer 3");
    let fresh_enough = proxy.get_from_host("test.local", "/doc", "Cache-Control: max-age=30\r\n");
    assert_eq!(
        fresh_enough.body_text(),
        "/doc answer 3",
        "young enough for max-age=30"
    );
    assert_eq!(requests_for(&counts, "/doc"), 3);
}

#[test]
fn head_and_conditional_requests_are_answered_from_a_stored_get() {
    let (server, counts) = counting_server(&[(
        "/tagged",
        &[("Cache-Control", "max-age=60"), ("ETag", "\"v1\"")],
    )]);
    let proxy = cached_proxy(&server, "");
    let first = proxy.get("/tagged");
    assert_eq!(first.body_text(), "/tagged answer 1");
    let length = first.header("content-length").unwrap().to_string();

    let mut conn = proxy.connect();
    conn.send(b"HEAD /tagged HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n");
    let head = conn.read_response(true).unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.header("content-length"), Some(length.as_str()));
    assert!(head.body.is_empty());

    let not_modified = proxy.get_from_host(
        "test.local",
        "/tagged",
        "If-None-Match: W/\"v1\", \"v0\"\r\n",
    );
    assert_eq!(not_modified.status(), 304, "{:?}", not_modified.head.raw);
    assert_eq!(not_modified.header("etag"), Some("\"v1\""));
    assert!(not_modified.body.is_empty());
    let changed = proxy.get_from_host("test.local", "/tagged", "If-None-Match: \"v2\"\r\n");
    assert_eq!(changed.status(), 200);
    assert_eq!(changed.body_text(), "/tagged answer 1");
    assert_eq!(requests_for(&counts, "/tagged"), 1);
}

#[test]
fn vary_keeps_one_variant_per_normalised_value() {
    let (server, counts) = counting_server(&[(
        "/negotiated",
        &[("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding")],
    )]);
    let proxy = cached_proxy(&server, "");
    let get = |encoding: &str| {
        proxy
            .get_from_host(
                "test.local",
                "/negotiated",
                &format!("Accept-Encoding: {encoding}\r\n"),
            )
            .body_text()
    };
    assert_eq!(get("gzip, deflate"), "/negotiated answer 1");
    assert_eq!(
        get("deflate, gzip;q=1.0"),
        "/negotiated answer 1",
        "the same variant"
    );
    assert_eq!(get("br"), "/negotiated answer 2", "another variant");
    assert_eq!(get("br"), "/negotiated answer 2");
    assert_eq!(get("gzip"), "/negotiated answer 1");
    assert_eq!(requests_for(&counts, "/negotiated"), 2);
}

#[test]
fn a_method_override_is_neither_served_from_nor_stored_into_the_cache() {
    let (server, counts) = counting_server(&[("/item", &[("Cache-Control", "max-age=60")])]);
    let proxy = cached_proxy(&server, "");
    let overridden =
        proxy.get_from_host("test.local", "/item", "X-HTTP-Method-Override: DELETE\r\n");
    assert_eq!(overridden.body_text(), "/item answer 1");
    assert_eq!(
        proxy.get("/item").body_text(),
        "/item answer 2",
        "the override was not stored"
    );
    let again = proxy.get_from_host("test.local", "/item", "X-HTTP-Method-Override: DELETE\r\n");
    assert_eq!(
        again.body_text(),
        "/item answer 3",
        "an override never gets the stored one"
    );
    assert_eq!(proxy.get("/item").body_text(), "/item answer 2");
    assert_eq!(requests_for(&counts, "/item"), 3);
}

#[test]
fn hosts_are_cached_apart() {
    let (server, counts) = counting_server(&[("/page", &[("Cache-Control", "max-age=60")])]);
    let proxy = cached_proxy(&server, "");
    assert_eq!(
        proxy.get_from_host("a.example", "/page", "").body_text(),
        "/page answer 1"
    );
    assert_eq!(
        proxy.get_from_host("b.example", "/page", "").body_text(),
        "/page answer 2"
    );
    assert_eq!(
        proxy.get_from_host("A.EXAMPLE", "/page", "").body_text(),
        "/page answer 1"
    );
    assert_eq!(requests_for(&counts, "/page"), 2);
}

#[test]
fn a_large_body_is_stored_whole_as_it_streams_and_one_over_the_limit_is_not() {
    // 300 KiB: past what comes with the head, so it is stored as the relay sends it.
    let big = vec![b'z'; 300 * 1024];
    let body = Arc::new(big.clone());
    let hits = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&hits);
    let server = Mock::start(move |exchange| {
        *seen.lock().unwrap() += 1;
        exchange.respond(200, &[("Cache-Control", "max-age=60")], &body)?;
        Ok(Flow::KeepAlive)
    });
    let proxy = cached_proxy(&server, "");
    assert_eq!(proxy.get("/big").body, big);
    assert_eq!(proxy.get("/big").body, big, "the stored copy is whole");
    assert_eq!(*hits.lock().unwrap(), 1);
    let small_limit = cached_proxy(&server, "max_object_size = \"100KiB\"");
    assert_eq!(small_limit.get("/big").body, big);
    assert_eq!(small_limit.get("/big").body, big);
    assert_eq!(*hits.lock().unwrap(), 3, "over max_object_size: not stored");
}

#[test]
fn a_pool_without_a_cache_stores_nothing() {
    let (server, counts) = counting_server(&[("/fresh", &[("Cache-Control", "max-age=60")])]);
    let proxy = Setup::new().server("s1", server.addr).start();
    proxy.get("/fresh");
    proxy.get("/fresh");
    assert_eq!(requests_for(&counts, "/fresh"), 2);
    let disabled = cached_proxy(&server, "enabled = false");
    disabled.get("/fresh");
    disabled.get("/fresh");
    assert_eq!(requests_for(&counts, "/fresh"), 4);
}

/// A server that answers `/p` once with `first` headers ("fine"), then 503 ("down").
fn failing_after_one(first: &'static [(&'static str, &'static str)]) -> Mock {
    let calls = Arc::new(Mutex::new(0usize));
    Mock::start(move |exchange| {
        let call = {
            let mut calls = calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        match call {
            1 => exchange.respond(200, first, b"fine")?,
            _ => exchange.respond(503, &[], b"down")?,
        }
        Ok(Flow::KeepAlive)
    })
}

#[test]
fn a_stale_answer_stands_in_for_a_failed_server_within_grace_and_not_past_it() {
    let server = failing_after_one(&[("Cache-Control", "max-age=1")]);
    let proxy = cached_proxy(&server, "grace = \"30s\"\ncache_status = true");
    assert_eq!(proxy.get("/p").body_text(), "fine");
    std::thread::sleep(Duration::from_millis(2100));
    let stale = proxy.get("/p");
    assert_eq!(stale.status(), 200, "the stale answer instead of the 503");
    assert_eq!(stale.body_text(), "fine");
    let status = stale.header("cache-status").unwrap_or_default();
    assert!(status.contains("ttl=-"), "says it is stale: {status}");
    // The server gone altogether: the stale answer instead of a 502.
    drop(server);
    assert_eq!(proxy.get("/p").body_text(), "fine");

    // Without grace the server's 503 goes to the client.
    let server = failing_after_one(&[("Cache-Control", "max-age=1")]);
    let strict = cached_proxy(&server, "");
    assert_eq!(strict.get("/p").body_text(), "fine");
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(strict.get("/p").status(), 503);
}

#[test]
fn must_revalidate_and_stale_if_error_are_obeyed_on_a_failure() {
    let server = failing_after_one(&[("Cache-Control", "max-age=1, must-revalidate")]);
    let proxy = cached_proxy(&server, "grace = \"30s\"");
    assert_eq!(proxy.get("/p").body_text(), "fine");
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        proxy.get("/p").status(),
        503,
        "must-revalidate: never served stale"
    );

    let server = failing_after_one(&[("Cache-Control", "max-age=1, stale-if-error=60")]);
    let proxy = cached_proxy(&server, "");
    assert_eq!(proxy.get("/p").body_text(), "fine");
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        proxy.get("/p").body_text(),
        "fine",
        "stale-if-error allows it without grace"
    );
}

#[test]
fn the_access_log_says_what_the_cache_did() {
    let (server, _) = counting_server(&[
        ("/fresh", &[("Cache-Control", "max-age=60")]),
        ("/nostore", &[("Cache-Control", "no-store")]),
    ]);
    let dir = common::fresh_temp_dir("cache-access-log");
    let log = dir.join("web.log");
    // One worker: its lines reach the file in the order of the requests.
    let toml = Setup::new()
        .workers(1)
        .server("s1", server.addr)
        .listener(&format!("access_log = {:?}\n", log.display().to_string()))
        .toml("127.0.0.1:0");
    let proxy = Proxy::start(&format!("{toml}\n[pool.cache]\n"));
    proxy.get("/fresh");
    proxy.get("/fresh");
    proxy.get("/nostore");
    proxy
        .connect()
        .roundtrip(b"POST /fresh HTTP/1.1\r\nHost: test.local\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    common::eventually(Duration::from_secs(5), || read().lines().count() >= 4);
    let words: Vec<String> = read()
        .lines()
        .map(|line| {
            let at = line.find(" cache=").expect("a cache field");
            line[at + 7..]
                .split(' ')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(words, ["miss", "hit", "uncacheable", "pass"]);
    let _ = std::fs::remove_dir_all(dir);
}

/// A server that takes `delay` over each answer to `/slow`, with `cache_control`, counting them;
/// its body is 200 KiB, so that followers read it as it streams.
fn slow_server(delay: Duration, cache_control: &'static str) -> (Mock, Arc<Mutex<usize>>) {
    let count = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&count);
    let mock = Mock::start(move |exchange| {
        *seen.lock().unwrap() += 1;
        std::thread::sleep(delay);
        let body = vec![b'h'; 200 * 1024];
        exchange.respond(200, &[("Cache-Control", cache_control)], &body)?;
        Ok(Flow::KeepAlive)
    });
    (mock, count)
}

/// `clients` GETs of `/slow` at once, each on its own connection; their statuses and bodies.
fn at_once(proxy: &Proxy, clients: usize) -> Vec<(u16, usize)> {
    let addr = proxy.addr;
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            std::thread::spawn(move || {
                let mut conn = common::Conn::connect(addr);
                let response = conn.roundtrip(
                    b"GET /slow HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n",
                );
                (response.status(), response.body.len())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn a_herd_of_misses_makes_one_request_to_the_server() {
    let (server, count) = slow_server(Duration::from_millis(500), "max-age=60");
    let proxy = cached_proxy(&server, "");
    let answers = at_once(&proxy, 40);
    assert!(
        answers.iter().all(|&answer| answer == (200, 200 * 1024)),
        "{answers:?}"
    );
    assert_eq!(*count.lock().unwrap(), 1, "one request reached the server");
}

#[test]
fn a_herd_goes_to_the_server_when_the_answer_may_not_be_stored_or_the_wait_is_too_long() {
    let (server, count) = slow_server(Duration::from_millis(300), "no-store");
    let proxy = cached_proxy(&server, "");
    let answers = at_once(&proxy, 8);
    assert!(
        answers.iter().all(|&answer| answer == (200, 200 * 1024)),
        "{answers:?}"
    );
    assert_eq!(*count.lock().unwrap(), 8, "each went to the server");

    let (server, count) = slow_server(Duration::from_millis(1500), "max-age=60");
    let proxy = cached_proxy(&server, "lock_timeout = \"200ms\"");
    let answers = at_once(&proxy, 4);
    assert!(
        answers.iter().all(|&answer| answer == (200, 200 * 1024)),
        "{answers:?}"
    );
    assert_eq!(
        *count.lock().unwrap(),
        4,
        "past lock_timeout, each went itself"
    );
}

#[test]
fn an_http2_client_gets_hits_from_the_same_cache() {
    let (server, counts) = counting_server(&[("/shared", &[("Cache-Control", "max-age=60")])]);
    let toml = Setup::new()
        .h2c()
        .server("s1", server.addr)
        .toml("127.0.0.1:0");
    let proxy = Proxy::start(&format!("{toml}\n[pool.cache]\ncache_status = true\n"));
    // curl sends Host as the address it connects to: the HTTP/1.1 client does the same.
    let host = proxy.addr.to_string();
    let first = proxy.get_from_host(&host, "/shared", "");
    assert_eq!(first.body_text(), "/shared answer 1");
    let (status, body) = common::h2c_get(proxy.addr, "/shared");
    assert_eq!(status, "2 200", "over HTTP/2");
    assert_eq!(
        body, b"/shared answer 1",
        "the object the HTTP/1.1 request stored"
    );
    assert_eq!(requests_for(&counts, "/shared"), 1);
}

#[test]
fn an_unsafe_request_answered_without_an_error_invalidates_what_is_stored_for_its_target() {
    let (server, counts) = counting_server(&[
        ("/item", &[("Cache-Control", "max-age=60")]),
        ("/item/7", &[("Cache-Control", "max-age=60")]),
        ("/item/8", &[("Cache-Control", "max-age=60")]),
        (
            "/made",
            &[
                (":status", "201"),
                ("Location", "/item/7"),
                ("Content-Location", "http://TEST.local/item/8"),
                ("Link", "</item>; rel=x"),
                ("Content-Location", "http://elsewhere.example/item"),
            ],
        ),
    ]);
    let proxy = cached_proxy(&server, "");
    let send = |request: &[u8]| proxy.connect().roundtrip(request);
    assert_eq!(proxy.get("/item").body_text(), "/item answer 1");
    assert_eq!(proxy.get("/item").body_text(), "/item answer 1");
    let put = send(b"PUT /item HTTP/1.1\r\nHost: test.local\r\nContent-Length: 3\r\nConnection: close\r\n\r\nnew");
    assert_eq!(put.status(), 200);
    assert_eq!(
        proxy.get("/item").body_text(),
        "/item answer 3",
        "fetched again after the PUT"
    );
    assert_eq!(proxy.get("/item").body_text(), "/item answer 3");
    // Another target's PUT leaves it alone.
    send(b"PUT /other HTTP/1.1\r\nHost: test.local\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(proxy.get("/item").body_text(), "/item answer 3");
    assert_eq!(requests_for(&counts, "/item"), 3);
    // A write's answer that names other targets of the same origin invalidates them too.
    for path in ["/item/7", "/item/8"] {
        proxy.get(path);
    }
    send(b"POST /made HTTP/1.1\r\nHost: test.local\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(proxy.get("/item/7").body_text(), "/item/7 answer 2");
    assert_eq!(proxy.get("/item/8").body_text(), "/item/8 answer 2");
    assert_eq!(
        proxy.get("/item").body_text(),
        "/item answer 3",
        "another origin's Location leaves it alone"
    );
}

#[test]
fn a_herd_that_varies_is_served_only_the_answers_it_would_have_been_given() {
    // 300 ms per answer, varying on Accept-Encoding: each answer says what it was asked with.
    let count = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&count);
    let server = Mock::start(move |exchange| {
        *seen.lock().unwrap() += 1;
        let encoding = exchange
            .head
            .header("accept-encoding")
            .unwrap_or("none")
            .to_string();
        std::thread::sleep(Duration::from_millis(300));
        let headers = [("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding")];
        exchange.respond(200, &headers, encoding.as_bytes())?;
        Ok(Flow::KeepAlive)
    });
    let proxy = cached_proxy(&server, "");
    let addr = proxy.addr;
    let threads: Vec<_> = ["gzip", "br", "gzip", "br", "gzip", "br"]
        .into_iter()
        .enumerate()
        .map(|(n, encoding)| {
            std::thread::spawn(move || {
                // The first goes first, so that the others find its fetch in flight.
                std::thread::sleep(Duration::from_millis(if n == 0 { 0 } else { 100 }));
                let mut conn = common::Conn::connect(addr);
                let request = format!(
                    "GET /v HTTP/1.1\r\nHost: test.local\r\nAccept-Encoding: {encoding}\r\nConnection: close\r\n\r\n"
                );
                (encoding, conn.roundtrip(request.as_bytes()).body_text())
            })
        })
        .collect();
    for thread in threads {
        let (asked, got) = thread.join().unwrap();
        assert_eq!(
            got, asked,
            "an answer for {got} went to a request for {asked}"
        );
    }
    // gzip's once; br's by each br request that found gzip's fetch in flight, or once more.
    let requests = *count.lock().unwrap();
    assert!((2..=4).contains(&requests), "{requests} server requests");
}

/// A server whose `/chunked` answers in chunks (after `delay`, in two parts 200 ms apart), fresh
/// for a minute; it counts its requests.
fn chunked_server(delay: Duration) -> (Mock, Arc<Mutex<usize>>) {
    let count = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&count);
    let mock = Mock::start(move |exchange| {
        *seen.lock().unwrap() += 1;
        std::thread::sleep(delay);
        exchange.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nTransfer-Encoding: chunked\r\n\r\n\
              6\r\nfirst \r\n",
        )?;
        std::thread::sleep(Duration::from_millis(200));
        exchange.write(b"7;note=x\r\nand end\r\n0\r\nX-Checksum: 1\r\n\r\n")?;
        Ok(Flow::KeepAlive)
    });
    (mock, count)
}

#[test]
fn a_chunked_answer_is_stored_decoded_and_followers_get_it_in_chunks() {
    let (server, count) = chunked_server(Duration::from_millis(300));
    let proxy = cached_proxy(&server, "");
    let addr = proxy.addr;
    let request = |version: &'static str| {
        std::thread::spawn(move || {
            if version == "HTTP/1.0" {
                // A follower: an HTTP/1.0 leader's answer is de-chunked for it, and then not
                // stored (its end is its connection's close), so the others would each go.
                std::thread::sleep(Duration::from_millis(100));
            }
            let request =
                format!("GET /chunked {version}\r\nHost: test.local\r\nConnection: close\r\n\r\n");
            let mut conn = common::Conn::connect(addr);
            conn.send(request.as_bytes());
            let raw = conn.read_until_closed();
            String::from_utf8_lossy(&raw).into_owned()
        })
    };
    let clients: Vec<_> = (0..6)
        .map(|n| request(if n == 5 { "HTTP/1.0" } else { "HTTP/1.1" }))
        .collect();
    for (n, client) in clients.into_iter().enumerate() {
        let raw = client.join().unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("HTTP/1.1 200"), "{raw}");
        if n == 5 {
            assert!(
                !head.to_ascii_lowercase().contains("chunked"),
                "HTTP/1.0: {raw}"
            );
            assert_eq!(body, "first and end", "until the close");
        } else {
            assert!(
                head.to_ascii_lowercase()
                    .contains("transfer-encoding: chunked"),
                "{raw}"
            );
            assert_eq!(dechunked(body).as_deref(), Some("first and end"), "{raw}");
        }
    }
    assert_eq!(*count.lock().unwrap(), 1, "one request reached the server");
    let hit = proxy.get("/chunked");
    assert_eq!(hit.body_text(), "first and end");
    assert_eq!(
        hit.header("content-length"),
        Some("13"),
        "stored whole, decoded"
    );
    assert_eq!(*count.lock().unwrap(), 1);
}

/// A chunked body's data, if it is whole (its last chunk and trailer section there).
fn dechunked(mut body: &str) -> Option<String> {
    let mut data = String::new();
    loop {
        let (line, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            // The trailer section ends with an empty line.
            return (rest == "\r\n" || rest.ends_with("\r\n\r\n")).then_some(data);
        }
        data.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

#[test]
fn a_route_caches_on_its_own_or_not_at_all() {
    let (server, counts) = counting_server(&[
        ("/static/logo", &[("Cache-Control", "max-age=60")]),
        ("/api/items", &[("Cache-Control", "max-age=60")]),
        ("/page", &[("Cache-Control", "max-age=60")]),
    ]);
    // The pool caches nothing; one route caches with its own rules.
    let toml = Setup::new().server("s1", server.addr).toml("127.0.0.1:0");
    let routes = "[[route]]\npath_prefix = \"/static/\"\npool = \"app\"\n\n\
                  [route.cache]\ncache_status = true\n";
    let proxy = Proxy::start(&format!("{toml}\n{routes}"));
    for _ in 0..3 {
        proxy.get("/static/logo");
        proxy.get("/page");
    }
    assert_eq!(requests_for(&counts, "/static/logo"), 1, "the route caches");
    assert_eq!(requests_for(&counts, "/page"), 3, "the pool does not");
    let hit = proxy.get("/static/logo");
    assert!(
        hit.header("cache-status").is_some(),
        "with the route's own rules"
    );
    drop(proxy);

    // The pool caches; one route turns it off.
    let routes = "[[route]]\npath_prefix = \"/api/\"\npool = \"app\"\n\n\
                  [route.cache]\nenabled = false\n";
    let proxy = Proxy::start(&format!("{toml}\n[pool.cache]\n\n{routes}"));
    for _ in 0..3 {
        proxy.get("/api/items");
        proxy.get("/page");
    }
    assert_eq!(requests_for(&counts, "/api/items"), 3, "not for this route");
    assert_eq!(
        requests_for(&counts, "/page"),
        4,
        "the pool's own: stored once more"
    );
}

#[test]
fn key_cookies_keep_an_object_per_value() {
    let (server, counts) = counting_server(&[("/home", &[("Cache-Control", "max-age=60")])]);
    let proxy = cached_proxy(&server, "key_cookies = [\"lang\"]");
    let with = |cookie: &str| {
        proxy
            .get_from_host("test.local", "/home", &format!("Cookie: {cookie}\r\n"))
            .body_text()
    };
    assert_eq!(with("lang=en"), "/home answer 1");
    assert_eq!(
        with("lang=fr"),
        "/home answer 2",
        "another value, another object"
    );
    assert_eq!(
        with("session=abc; lang=en"),
        "/home answer 1",
        "other cookies aside"
    );
    assert_eq!(with("lang=fr; theme=dark"), "/home answer 2");
    assert_eq!(
        proxy.get("/home").body_text(),
        "/home answer 3",
        "no cookie: its own"
    );
    assert_eq!(requests_for(&counts, "/home"), 3);
}
