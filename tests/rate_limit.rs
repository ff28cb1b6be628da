//! Rate limits over real sockets: a route's burst passes and the next request gets a 429 with
//! `Retry-After` and the `RateLimit` fields, never reaching the server; keys keep clients apart
//! (`header:X-Key` stands for different clients on one 127.0.0.1) and requests without the key
//! share one; the access log names the rule, the metrics and `/api/rate_limits` count it; a
//! listener's limit covers all its requests; an HTTP/2 stream gets the same answer; bad limits
//! are refused with key and line, and a refused reload leaves the limits counting. With a real
//! `redis-server` (Debian's, started by the test): two herdsman processes sharing a limit let
//! through its burst over both, and Redis stopped fails open, counted (or, with
//! `on_redis_error = "deny"`, refuses); a worker's concurrent requests are checked in Redis
//! together (pipelined on its one connection), each counted once.
//!
//! The rates are one an hour, so nothing refills while a test runs: what is let through is the
//! burst, whatever the machine's speed.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::*;

/// A listener "web" (with an access log at `log` and `listener_lines`), an admin API, pool
/// "app" of `server`, and a route for `/limited` carrying `limit` as its `[route.rate_limit]`.
fn config(server: SocketAddr, log: &Path, listener_lines: &str, limit: &str) -> String {
    format!(
        "workers = 2\n\n\
         [[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\
         access_log = {log:?}\n{listener_lines}\n\
         [admin]\nbind = \"127.0.0.1:0\"\n\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{server}\" }}]\n\n\
         [[route]]\npath_prefix = \"/limited\"\npool = \"app\"\n\
         [route.rate_limit]\n{limit}\n"
    )
}

/// GET `path` with the `extra` header lines on `conn`, kept open.
fn get(conn: &mut Conn, path: &str, extra: &str) -> Response {
    conn.roundtrip(&get_request(path, extra))
}

fn admin_get(proxy: &Proxy, path: &str) -> String {
    let admin = proxy.server().admin_addr().expect("an admin API");
    Conn::connect(admin)
        .roundtrip(&admin_get_request(path))
        .body_text()
}

#[test]
fn a_burst_passes_then_429_with_the_fields_and_keys_keep_clients_apart() {
    let server = Mock::named("a");
    let dir = fresh_temp_dir("rate-limit-burst");
    let log = dir.join("access.log");
    let limit = "rate = \"1/h\"\nburst = 3\nkey = \"header:X-Key\"";
    let proxy = Proxy::start(&config(server.addr, &log, "", limit));
    let mut alice = proxy.connect();
    for _ in 0..3 {
        assert_eq!(
            get(&mut alice, "/limited", "X-Key: alice\r\n").status(),
            200
        );
    }
    let refused = get(&mut alice, "/limited/x", "X-Key: alice\r\n");
    assert_eq!(refused.status(), 429, "{}", refused.body_text());
    // One request an hour: the next is let through within the hour.
    let retry_after: u64 = refused.header("Retry-After").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry_after), "{retry_after}");
    assert_eq!(
        refused.header("RateLimit-Policy"),
        Some("\"route[0]\";q=1;w=3600")
    );
    assert_eq!(
        refused.header("RateLimit"),
        Some(format!("\"route[0]\";r=0;t={retry_after}").as_str())
    );
    assert_eq!(
        server.requests().len(),
        3,
        "a refused request reaches no server"
    );
    // The connection stays open: another key on it (another client) has its own burst, and
    // paths outside the route are not limited.
    assert_eq!(get(&mut alice, "/limited", "X-Key: bob\r\n").status(), 200);
    assert_eq!(get(&mut alice, "/other", "X-Key: alice\r\n").status(), 200);
    // Requests without the field share one key, whatever their connection.
    for _ in 0..3 {
        assert_eq!(proxy.get("/limited").status(), 200);
    }
    assert_eq!(proxy.get("/limited").status(), 429);
    assert_eq!(server.requests().len(), 8);

    // The access log names the rule that answered.
    assert!(
        eventually(Duration::from_secs(5), || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines()
                .filter(|line| line.contains("\" 429 ") && line.ends_with(" rule=rate_limit"))
                .count()
                == 2
        }),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // The admin API: the limit's counts and the keys it refused.
    let limits: serde_json::Value =
        serde_json::from_str(&admin_get(&proxy, "/api/rate_limits")).unwrap();
    let limit = &limits["limits"][0];
    assert_eq!(limit["name"], "route[0]");
    assert_eq!(limit["rate"], "1/h");
    assert_eq!(limit["key"], "header:x-key");
    assert_eq!(
        (limit["allowed"].as_u64(), limit["limited"].as_u64()),
        (Some(7), Some(2))
    );
    let top: Vec<&str> = limit["top_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["key"].as_str().unwrap())
        .collect();
    assert_eq!(top, ["(absent)", "alice"]);
    // `herdsman ctl limits` prints them.
    let admin = proxy.server().admin_addr().unwrap().to_string();
    let (code, table) = run_binary(&["ctl", "--admin", &admin, "limits"]);
    assert_eq!(code, Some(0), "{table}");
    let row = table
        .lines()
        .find(|line| line.starts_with("route[0]"))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "route[0]",
            "1/h",
            "3",
            "header:x-key",
            "7",
            "2",
            "(absent)×1",
            "alice×1"
        ],
        "{table}"
    );
    // The metrics.
    let metrics = admin_get(&proxy, "/metrics");
    for (verdict, count) in [("allowed", 7), ("limited", 2)] {
        let sample = format!(
            "herdsman_rate_limit_requests_total{{limit=\"route[0]\",verdict=\"{verdict}\"}} {count}"
        );
        assert!(
            metrics.lines().any(|line| line == sample),
            "{sample}\n{metrics}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_listener_limit_counts_every_request_it_takes() {
    let server = Mock::named("a");
    let dir = fresh_temp_dir("rate-limit-listener");
    let listener = "[listener.rate_limit]\nrate = \"1/h\"\nburst = 2\nkey = \"client\"\n";
    let route_limit = "rate = \"100/s\"";
    let proxy = Proxy::start(&config(
        server.addr,
        &dir.join("a.log"),
        listener,
        route_limit,
    ));
    assert_eq!(proxy.get("/one").status(), 200);
    assert_eq!(proxy.get("/limited").status(), 200);
    let refused = proxy.get("/two");
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused.header("RateLimit-Policy"),
        Some("\"listener web\";q=1;w=3600")
    );
    // A HEAD request's 429 has the head alone.
    let mut conn = proxy.connect();
    conn.send(b"HEAD /three HTTP/1.1\r\nHost: x\r\n\r\n");
    let head = conn.read_response(true).unwrap();
    assert_eq!(head.status(), 429);
    assert_eq!(server.requests().len(), 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_limits_are_refused_with_key_and_line_and_a_refused_reload_keeps_counting() {
    let server = Mock::named("a");
    let dir = fresh_temp_dir("rate-limit-check");
    let good_limit = "rate = \"1/h\"\nburst = 2\nkey = \"route\"";
    let good = config(server.addr, &dir.join("a.log"), "", good_limit);
    for (bad_limit, key, value) in [
        ("rate = \"abc\"", "rate", "\"abc\": not a rate"),
        (
            "rate = \"10/s\"\nkey = \"foo:\"",
            "key",
            "\"foo:\": not a key; accepted: \"client\", \"route\", \"header:NAME\" or \"cookie:NAME\"",
        ),
    ] {
        let text = config(server.addr, &dir.join("a.log"), "", bad_limit);
        let line = text
            .lines()
            .position(|l| l.starts_with(&format!("{key} = ")))
            .unwrap()
            + 1;
        let path = write_temp("bad-rate-limit.toml", &text);
        let (code, out) = run_binary(&["check", "-c", path.to_str().unwrap()]);
        assert_eq!(code, Some(1), "{out}");
        let expected = format!("line {line}: route[0].rate_limit.{key} = {value}");
        assert!(out.contains(&expected), "{expected}\n{out}");
    }

    let proxy = Proxy::start_from_file(&good);
    assert_eq!(proxy.get("/limited").status(), 200);
    // A reload that changes something else keeps the limit and what it counted.
    let other = good.replace("workers = 2", "workers = 2\nshutdown_grace = \"3s\"");
    proxy.reload_with(&other).unwrap();
    assert_eq!(proxy.get("/limited").status(), 200);
    // A refused reload leaves it as it was.
    let bad = config(server.addr, &dir.join("a.log"), "", "rate = \"abc\"");
    assert!(proxy.reload_with(&bad).is_err());
    assert_eq!(proxy.get("/limited").status(), 429);
    assert_eq!(server.requests().len(), 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_http2_request_over_the_limit_gets_the_same_answer() {
    let server = Mock::named("a");
    let dir = fresh_temp_dir("rate-limit-h2");
    let limit = "rate = \"1/h\"\nburst = 1\nkey = \"route\"";
    let proxy = Proxy::start(&config(
        server.addr,
        &dir.join("a.log"),
        "h2c = true\n",
        limit,
    ));
    let url = format!("http://{}/limited", proxy.addr);
    let h2 = ["--http2-prior-knowledge", "--include"];
    let (status, _) = curl(&h2, &url, None);
    assert_eq!(status, "2 200");
    let (status, answer) = curl(&h2, &url, None);
    assert_eq!(status, "2 429");
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.contains("retry-after: "), "{answer}");
    assert!(
        answer.contains("ratelimit-policy: \"route[0]\";q=1;w=3600"),
        "{answer}"
    );
    assert!(
        answer.ends_with("over the rate limit route[0]\n"),
        "{answer}"
    );
    assert_eq!(server.requests().len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

/// A `redis-server` of this test's own on a free port, without persistence; killed when dropped.
fn start_redis() -> (ChildGuard, SocketAddr) {
    let port = free_port();
    let child = std::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server runs (bench/scripts/install-peers.sh installs it)");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child = ChildGuard(child);
    assert!(
        wait_listening(addr, Duration::from_secs(10)),
        "redis-server on {addr}"
    );
    (child, addr)
}

/// herdsman (the binary) on a free port with its admin API on another, the route of `config`
/// limited as `limit`, its counts in the Redis at `redis` (`[rate_limit]` with `settings` too).
fn start_sharing(
    server: SocketAddr,
    dir: &Path,
    limit: &str,
    redis: (SocketAddr, &str),
) -> (ChildGuard, SocketAddr, SocketAddr) {
    start_sharing_on(2, server, dir, limit, redis)
}

/// As [`start_sharing`], with `workers` workers.
fn start_sharing_on(
    workers: usize,
    server: SocketAddr,
    dir: &Path,
    limit: &str,
    (redis, settings): (SocketAddr, &str),
) -> (ChildGuard, SocketAddr, SocketAddr) {
    let (web, admin) = (free_port(), free_port());
    let text = config(server, &dir.join(format!("{web}.log")), "", limit)
        .replace("workers = 2\n", &format!("workers = {workers}\n"))
        .replace(
            "bind = \"127.0.0.1:0\"\npool",
            &format!("bind = \"127.0.0.1:{web}\"\npool"),
        )
        .replace(
            "[admin]\nbind = \"127.0.0.1:0\"",
            &format!("[admin]\nbind = \"127.0.0.1:{admin}\""),
        )
        + &format!("\n[rate_limit]\nredis = \"redis://{redis}\"\ntimeout = \"2s\"\n{settings}");
    let path = dir.join(format!("herdsman-{web}.toml"));
    std::fs::write(&path, text).unwrap();
    let child = run_binary_with(&path);
    let web: SocketAddr = format!("127.0.0.1:{web}").parse().unwrap();
    assert!(
        wait_listening(web, Duration::from_secs(10)),
        "herdsman on {web}"
    );
    (child, web, format!("127.0.0.1:{admin}").parse().unwrap())
}

/// The status of GET /limited with `X-Key: key` to `web`.
fn status_of(web: SocketAddr, key: &str) -> u16 {
    let extra = format!("X-Key: {key}\r\nConnection: close\r\n");
    Conn::connect(web)
        .roundtrip(&get_request("/limited", &extra))
        .status()
}

#[test]
fn two_processes_share_a_limit_through_redis_and_fail_open_without_it() {
    let server = Mock::named("a");
    let dir = fresh_temp_dir("rate-limit-redis");
    let (mut redis, redis_addr) = start_redis();
    let limit = "rate = \"1/h\"\nburst = 20\nkey = \"header:X-Key\"";
    let (_one, one, one_admin) = start_sharing(server.addr, &dir, limit, (redis_addr, ""));
    let (_two, two, two_admin) = start_sharing(server.addr, &dir, limit, (redis_addr, ""));
    // 30 requests of one key to each: over both, the burst goes through, and no more (each
    // process alone would let 20 through).
    let passed = (0..30)
        .flat_map(|_| [one, two])
        .filter(|&web| status_of(web, "shared") == 200)
        .count();
    assert_eq!(passed, 20, "one burst over both processes");
    // Redis stopped: requests of a fresh key go on (fail open), each failure counted.
    drop(redis.0.kill());
    let _ = redis.0.wait();
    for web in [one, two] {
        for _ in 0..3 {
            assert_eq!(status_of(web, "fresh"), 200);
        }
    }
    for admin in [one_admin, two_admin] {
        let metrics = Conn::connect(admin)
            .roundtrip(&admin_get_request("/metrics"))
            .body_text();
        let errors: u64 = metrics
            .lines()
            .find_map(|line| {
                line.strip_prefix("herdsman_rate_limit_redis_errors_total{limit=\"route[0]\"} ")
            })
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("{metrics}"));
        assert_eq!(errors, 3, "{metrics}");
    }
    // With `on_redis_error = "deny"`, a request Redis cannot count is refused.
    let deny = (redis_addr, "on_redis_error = \"deny\"\n");
    let (_three, three, _) = start_sharing(server.addr, &dir, limit, deny);
    assert_eq!(status_of(three, "other"), 429);
    let _ = std::fs::remove_dir_all(dir);
}

/// A relay to `redis` that holds each piece herdsman sends for `delay` before passing it on
/// (Redis's replies come back at once): a Redis far away. Serves every connection made to it
/// until the test ends; its address.
fn slow_relay(redis: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(redis) else {
                continue;
            };
            let (mut from_client, mut to_server) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let mut piece = [0u8; 65536];
                while let Ok(n @ 1..) = from_client.read(&mut piece) {
                    std::thread::sleep(delay);
                    if to_server.write_all(&piece[..n]).is_err() {
                        break;
                    }
                }
                let _ = to_server.shutdown(std::net::Shutdown::Write);
            });
            let (mut from_server, mut to_client) = (server, client);
            std::thread::spawn(move || std::io::copy(&mut from_server, &mut to_client));
        }
    });
    addr
}

#[test]
fn one_workers_concurrent_checks_share_its_redis_connection_and_each_counts_once() {
    let server = Mock::named("a");
    let dir = fresh_temp_dir("rate-limit-redis-pipelined");
    let (_redis, redis_addr) = start_redis();
    let limit = "rate = \"1/h\"\nburst = 50\nkey = \"header:X-Key\"";
    // One process near Redis takes 30 of the key's burst of 50.
    let (_near, near, _) = start_sharing(server.addr, &dir, limit, (redis_addr, ""));
    for _ in 0..30 {
        assert_eq!(status_of(near, "shared"), 200);
    }
    // Another, one worker, reaches Redis 200 ms away (each way it writes): 80 requests of the
    // key at once. Its own count lets 50 go to Redis, which lets through the 20 left.
    let delay = Duration::from_millis(200);
    let far_redis = (slow_relay(redis_addr, delay), "");
    let (_far, far, far_admin) = start_sharing_on(1, server.addr, &dir, limit, far_redis);
    let start = Arc::new(Barrier::new(80));
    let clients: Vec<_> = (0..80)
        .map(|_| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                status_of(far, "shared")
            })
        })
        .collect();
    let began = Instant::now();
    let statuses: Vec<u16> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let took = began.elapsed();
    let passed = statuses.iter().filter(|&&status| status == 200).count();
    assert_eq!(passed, 20, "the burst's rest, and no more: {statuses:?}");
    assert!(statuses
        .iter()
        .all(|&status| status == 200 || status == 429));
    // Checks in turn would take 50 delays (10 s); together, the connection's SCRIPT LOAD then
    // one or two batches of checks: a few delays.
    assert!(
        took < Duration::from_secs(4),
        "80 requests took {took:?}: the checks waited for each other"
    );
    let metrics = Conn::connect(far_admin)
        .roundtrip(&admin_get_request("/metrics"))
        .body_text();
    assert!(
        metrics.contains("herdsman_rate_limit_redis_errors_total{limit=\"route[0]\"} 0"),
        "{metrics}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
