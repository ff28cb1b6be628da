//! How the cache refreshes what it holds, over real sockets: stale objects revalidated with
//! their validators (a 304 refreshes them), served at once while one background fetch
//! refreshes them (`stale-while-revalidate`), fetched to the end when the client that asked
//! leaves, fetched by a waiter in place of a leader that failed; and what it answers from a
//! stored object besides the whole of it: ranges, `only-if-cached`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Conn, Flow, Mock, Proxy, Setup};

/// herdsman with one cached pool in front of `server`; `cache_lines` go into `[pool.cache]`,
/// `extra` before it (other sections).
fn cached_proxy(server: &Mock, extra: &str, cache_lines: &str) -> Proxy {
    let toml = Setup::new().server("s1", server.addr).toml("127.0.0.1:0");
    Proxy::start(&format!("{toml}\n{extra}\n[pool.cache]\n{cache_lines}\n"))
}

/// What a validating server saw: its full answers and its 304s, and the conditions it was
/// asked with.
#[derive(Default, Debug)]
struct Seen {
    full: usize,
    /// Full answers per path.
    versions: std::collections::HashMap<String, usize>,
    not_modified: usize,
    conditions: Vec<String>,
}

/// A server whose `/etag` has `ETag: "v1"` and whose `/dated` has a `Last-Modified`, each
/// fresh for a second; it answers 304 (fresh for a minute) to a request that names the
/// validator, unless `changed` says the object changed.
fn validating_server(changed: Arc<Mutex<bool>>) -> (Mock, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let record = Arc::clone(&seen);
    const MODIFIED: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    let mock = Mock::start(move |exchange| {
        let path = exchange.head.target().to_string();
        let condition = match path.as_str() {
            "/etag" => exchange.head.header("if-none-match").map(str::to_string),
            _ => exchange
                .head
                .header("if-modified-since")
                .map(str::to_string),
        };
        let still = match path.as_str() {
            "/etag" => condition.as_deref() == Some("\"v1\""),
            _ => condition.as_deref() == Some(MODIFIED),
        };
        let mut seen = record.lock().unwrap();
        seen.conditions.extend(condition);
        let validator = match path.as_str() {
            "/etag" => ("ETag", "\"v1\""),
            _ => ("Last-Modified", MODIFIED),
        };
        if still && !*changed.lock().unwrap() {
            seen.not_modified += 1;
            drop(seen);
            exchange.respond(304, &[("Cache-Control", "max-age=60"), validator], b"")?;
        } else {
            seen.full += 1;
            let version = seen.versions.entry(path.clone()).or_default();
            *version += 1;
            let body = format!("{path} version {version}");
            drop(seen);
            exchange.respond(
                200,
                &[("Cache-Control", "max-age=1"), validator],
                body.as_bytes(),
            )?;
        }
        Ok(Flow::KeepAlive)
    });
    (mock, seen)
}

#[test]
fn a_stale_object_is_revalidated_and_a_304_refreshes_it() {
    let (server, seen) = validating_server(Arc::default());
    let proxy = cached_proxy(&server, "", "cache_status = true");
    for path in ["/etag", "/dated"] {
        assert_eq!(proxy.get(path).body_text(), format!("{path} version 1"));
    }
    std::thread::sleep(Duration::from_millis(2100));
    for path in ["/etag", "/dated"] {
        let revalidated = proxy.get(path);
        assert_eq!(
            revalidated.status(),
            200,
            "{path}: the client asked no condition"
        );
        assert_eq!(
            revalidated.body_text(),
            format!("{path} version 1"),
            "{path}: the stored body"
        );
        let status = revalidated.header("cache-status").unwrap_or_default();
        assert!(
            status.contains("fwd-status=304"),
            "{path}: Cache-Status: {status}"
        );
        assert_eq!(
            revalidated.header("cache-control"),
            Some("max-age=60"),
            "{path}: the 304's fields replace the stored ones"
        );
        // Fresh for a minute now: a hit, no server.
        let hit = proxy.get(path);
        assert!(hit
            .header("cache-status")
            .unwrap_or_default()
            .contains("hit"));
        assert_eq!(hit.body_text(), format!("{path} version 1"));
    }
    let seen = seen.lock().unwrap();
    assert_eq!((seen.full, seen.not_modified), (2, 2), "{seen:?}");
    assert_eq!(
        seen.conditions,
        ["\"v1\"", "Sun, 06 Nov 1994 08:49:37 GMT"],
        "each stale object was asked about with its own validator"
    );
}

#[test]
fn a_client_s_own_condition_is_answered_from_the_refreshed_object() {
    let (server, seen) = validating_server(Arc::default());
    let proxy = cached_proxy(&server, "", "");
    proxy.get("/etag");
    std::thread::sleep(Duration::from_millis(2100));
    // The client's own condition does not go to the server: herdsman's does, and answers it.
    let mine = proxy.get_from_host("test.local", "/etag", "If-None-Match: \"v1\"\r\n");
    assert_eq!(mine.status(), 304);
    assert!(mine.body.is_empty());
    assert_eq!(mine.header("etag"), Some("\"v1\""));
    let other = proxy.get_from_host("test.local", "/etag", "If-None-Match: \"v0\"\r\n");
    assert_eq!(other.status(), 200, "a condition the object does not meet");
    assert_eq!(other.body_text(), "/etag version 1");
    let seen = seen.lock().unwrap();
    assert_eq!((seen.full, seen.not_modified), (1, 1), "{seen:?}");
}

#[test]
fn a_changed_object_replaces_the_stale_one() {
    let changed = Arc::new(Mutex::new(false));
    let (server, seen) = validating_server(Arc::clone(&changed));
    let proxy = cached_proxy(&server, "", "");
    assert_eq!(proxy.get("/etag").body_text(), "/etag version 1");
    *changed.lock().unwrap() = true;
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(proxy.get("/etag").body_text(), "/etag version 2");
    assert_eq!(proxy.get("/etag").body_text(), "/etag version 2", "stored");
    assert_eq!(seen.lock().unwrap().full, 2);
}

/// A server whose `/swr` is fresh for a second and may be served stale for 30 more while it is
/// refreshed; every answer after the first takes `delay`, and is fresh for a minute: it comes
/// `delay` old (RFC 9111 §4.2.3 counts the time it took), and with a second's freshness it would
/// be stale on arrival and fetched again. Its answers count up.
fn swr_server(delay: Duration) -> (Mock, Arc<Mutex<usize>>) {
    let count = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&count);
    let mock = Mock::start(move |exchange| {
        let n = {
            let mut count = seen.lock().unwrap();
            *count += 1;
            *count
        };
        if n > 1 {
            std::thread::sleep(delay);
        }
        let body = format!("answer {n}");
        let control = match n {
            1 => "max-age=1, stale-while-revalidate=30",
            _ => "max-age=60, stale-while-revalidate=30",
        };
        exchange.respond(200, &[("Cache-Control", control)], body.as_bytes())?;
        Ok(Flow::KeepAlive)
    });
    (mock, count)
}

#[test]
fn within_stale_while_revalidate_nobody_waits_and_one_fetch_refreshes_in_the_background() {
    let delay = Duration::from_secs(3);
    let (server, count) = swr_server(delay);
    let proxy = cached_proxy(&server, "", "cache_status = true");
    assert_eq!(proxy.get("/swr").body_text(), "answer 1");
    std::thread::sleep(Duration::from_millis(2100));
    let addr = proxy.addr;
    let clients: Vec<_> = (0..10)
        .map(|_| {
            std::thread::spawn(move || {
                let began = Instant::now();
                let response = Conn::connect(addr).roundtrip(
                    b"GET /swr HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n",
                );
                (response.status(), response.body_text(), began.elapsed())
            })
        })
        .collect();
    for client in clients {
        let (status, body, took) = client.join().unwrap();
        assert_eq!((status, body.as_str()), (200, "answer 1"), "served stale");
        assert!(
            took < delay / 2,
            "answered in {took:?}, without waiting for the server's {delay:?}"
        );
    }
    // One background fetch, whose answer is stored when it comes.
    let refreshed = common::eventually(Duration::from_secs(10), || {
        proxy.get("/swr").body_text() == "answer 2"
    });
    assert!(refreshed, "the background fetch refreshed the object");
    assert_eq!(*count.lock().unwrap(), 2, "one fetch for the stale object");
}

/// A server whose `/big` sends its head and a third of its 300 KiB body, then the rest after
/// `pause`; it counts its requests.
fn pausing_server(pause: Duration) -> (Mock, Arc<Mutex<usize>>) {
    let count = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&count);
    let mock = Mock::start(move |exchange| {
        *seen.lock().unwrap() += 1;
        let body = vec![b'b'; 300 * 1024];
        let head = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        exchange.write(head.as_bytes())?;
        exchange.write(&body[..100 * 1024])?;
        std::thread::sleep(pause);
        exchange.write(&body[100 * 1024..])?;
        Ok(Flow::KeepAlive)
    });
    (mock, count)
}

#[test]
fn a_fetch_goes_on_to_the_end_when_its_client_leaves() {
    // With response buffering (the default) and without.
    for buffering in ["", "[buffering]\nresponse_buffer_memory = 0\n"] {
        let (server, count) = pausing_server(Duration::from_millis(500));
        let proxy = cached_proxy(&server, buffering, "");
        let mut leaving = Conn::connect(proxy.addr);
        leaving.send(b"GET /big HTTP/1.1\r\nHost: test.local\r\n\r\n");
        let head = leaving.response_head();
        assert_eq!(head.status(), 200);
        drop(leaving);
        std::thread::sleep(Duration::from_millis(1000));
        let later = proxy.get("/big");
        assert_eq!(later.status(), 200);
        assert_eq!(later.body.len(), 300 * 1024, "{buffering}");
        assert_eq!(
            *count.lock().unwrap(),
            1,
            "stored from the first fetch ({buffering})"
        );
    }
}

#[test]
fn when_the_leader_fails_one_waiter_takes_its_place() {
    let count = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&count);
    let server = Mock::start(move |exchange| {
        let n = {
            let mut count = seen.lock().unwrap();
            *count += 1;
            *count
        };
        std::thread::sleep(Duration::from_millis(400));
        if n == 1 {
            // The first fetch fails before any answer.
            return Ok(Flow::Reset);
        }
        exchange.respond(200, &[("Cache-Control", "max-age=60")], b"made once")?;
        Ok(Flow::KeepAlive)
    });
    let proxy = cached_proxy(&server, "", "");
    let addr = proxy.addr;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                Conn::connect(addr)
                    .roundtrip(b"GET /x HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n")
            })
        })
        .collect();
    let answers: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let served = answers
        .iter()
        .filter(|answer| answer.status() == 200 && answer.body_text() == "made once")
        .count();
    assert!(
        served >= 7,
        "all but the failed leader were served: {served}"
    );
    assert_eq!(
        *count.lock().unwrap(),
        2,
        "the failed fetch and one in its place, not one per waiter"
    );
}

#[test]
fn ranges_are_answered_from_a_stored_object() {
    let server = Mock::start(|exchange| {
        exchange.respond(
            200,
            &[("Cache-Control", "max-age=60"), ("ETag", "\"r1\"")],
            b"0123456789",
        )?;
        Ok(Flow::KeepAlive)
    });
    let proxy = cached_proxy(&server, "", "");
    assert_eq!(proxy.get("/r").body_text(), "0123456789");
    let part = proxy.get_from_host("test.local", "/r", "Range: bytes=2-5\r\n");
    assert_eq!(part.status(), 206);
    assert_eq!(part.body_text(), "2345");
    assert_eq!(part.header("content-range"), Some("bytes 2-5/10"));
    let tail = proxy.get_from_host("test.local", "/r", "Range: bytes=-3\r\n");
    assert_eq!((tail.status(), tail.body_text().as_str()), (206, "789"));
    let past = proxy.get_from_host("test.local", "/r", "Range: bytes=10-\r\n");
    assert_eq!(past.status(), 416);
    assert_eq!(past.header("content-range"), Some("bytes */10"));
    let other = proxy.get_from_host(
        "test.local",
        "/r",
        "Range: bytes=2-5\r\nIf-Range: \"r0\"\r\n",
    );
    assert_eq!(
        (other.status(), other.body_text().as_str()),
        (200, "0123456789"),
        "If-Range names another version: the whole object"
    );
    assert_eq!(server.heads().len(), 1, "all from the one stored object");
}

#[test]
fn only_if_cached_gets_a_504_unless_the_cache_holds_an_answer() {
    let server = Mock::start(|exchange| {
        exchange.respond(200, &[("Cache-Control", "max-age=60")], b"stored")?;
        Ok(Flow::KeepAlive)
    });
    let proxy = cached_proxy(&server, "", "");
    let asked = "Cache-Control: only-if-cached\r\n";
    let missing = proxy.get_from_host("test.local", "/o", asked);
    assert_eq!(missing.status(), 504);
    assert_eq!(server.heads().len(), 0, "the server is not asked");
    proxy.get("/o");
    let stored = proxy.get_from_host("test.local", "/o", asked);
    assert_eq!(
        (stored.status(), stored.body_text().as_str()),
        (200, "stored")
    );
    assert_eq!(server.heads().len(), 1);
}
