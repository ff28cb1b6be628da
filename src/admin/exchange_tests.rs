//! The admin listener's answers, byte for byte: requests as a client sends them, read and
//! answered as on a connection (`connection::answer_buffered`), against a registry of one pool.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::connection::{answer_buffered, Buffered, Exchange, Peer, MAX_BODY, MAX_HEAD};
use super::guard::Guard;
use super::routes::{Shared, STATS_PAGE};
use crate::stats::Stats;
use crate::transport::Buffer;
use crate::upstream::registry::Registry;

const TEST_PEER: Peer = Peer::Local { uid: 0, pid: None };

/// A pool "app" of two servers, "a" and "b" (weight 2).
fn registry() -> Arc<Registry> {
    let config = crate::Config::from_toml(
        r#"
        [[listener]]
        name = "web"
        bind = "127.0.0.1:0"
        pool = "app"

        [[pool]]
        name = "app"
        servers = [
          { name = "a", addr = "127.0.0.1:9001" },
          { name = "b", addr = "127.0.0.1:9002", weight = 2 },
        ]
        "#,
        "test",
    )
    .unwrap();
    Arc::new(Registry::new(config, None, None, Vec::new()).unwrap())
}

fn shared(token: Option<&str>) -> Shared {
    let stats = Stats::new(2);
    stats.counters[1].accepted.store(7, Ordering::Relaxed);
    Shared {
        guard: Guard {
            allowed_hosts: Vec::new(),
            token: token.map(str::to_string),
        },
        intake: "balanced",
        stats,
        registry: registry(),
        predecessors: None,
        cache: crate::cache::shared::SharedStore::new(),
        rate_limits: crate::rate_limit::RateLimits::new(2),
    }
}

/// The bytes written for `request` and whether the connection stays open.
fn exchange(shared: &Shared, request: &str) -> (String, Option<bool>) {
    let mut buffer = Buffer::new();
    let mut source = request.as_bytes();
    read_everything(&mut buffer, &mut source);
    let mut out = Vec::new();
    let keep_open = match answer_buffered(&mut buffer, shared, TEST_PEER, &mut out) {
        Buffered::Done(Exchange::Answered { keep_open }) => Some(keep_open),
        Buffered::Done(Exchange::Refused) => None,
        Buffered::Done(Exchange::Closed) | Buffered::Incomplete { .. } => {
            panic!("no answer to {request:?}")
        }
    };
    (String::from_utf8(out).unwrap(), keep_open)
}

fn read_everything(buffer: &mut Buffer, source: &mut &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        while buffer
            .read_from(source, 64, MAX_HEAD + MAX_BODY)
            .await
            .unwrap()
            > 0
        {}
    });
}

#[test]
fn workers_are_reported_as_json() {
    let shared = shared(None);
    let (response, keep_open) = exchange(
        &shared,
        "GET /api/workers?pretty HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
    );
    assert_eq!(keep_open, Some(true));
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: application/json\r\n"),
        "{head}"
    );
    assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
    assert!(!head.contains("Connection:"), "{head}");
    let json: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(json["intake"], "balanced");
    assert_eq!(json["workers"].as_array().unwrap().len(), 2);
    assert_eq!(json["workers"][1]["accepted"], 7);
}

#[test]
fn the_token_is_checked_before_anything_else() {
    let shared = shared(Some("s3cret"));
    for authorization in [
        "",
        "Authorization: Bearer wrong\r\n",
        "Authorization: Basic s3cret\r\n",
        "Authorization: Bearer\r\n",
        "Authorization: Bearer s3cret\r\nAuthorization: Bearer s3cret\r\n",
    ] {
        for path in ["/api/workers", "/nowhere"] {
            let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{authorization}\r\n");
            let (response, keep_open) = exchange(&shared, &request);
            assert!(
                response.starts_with("HTTP/1.1 401 "),
                "{request:?}: {response}"
            );
            assert!(response.contains("WWW-Authenticate: Bearer\r\n"));
            assert_eq!(keep_open, Some(true));
        }
    }
    let (response, _) = exchange(
        &shared,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nauthorization: bearer  s3cret \r\n\r\n",
    );
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\nok\n"), "{response}");
}

#[test]
fn unknown_paths_other_methods_and_bodies() {
    let shared = shared(None);
    let (response, _) = exchange(
        &shared,
        "GET /api/nothing HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
    );
    assert!(
        response.starts_with("HTTP/1.1 404 Not Found\r\n"),
        "{response}"
    );

    let (response, keep_open) = exchange(
        &shared,
        "POST /api/workers HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    );
    assert!(response.starts_with("HTTP/1.1 405 "), "{response}");
    assert!(response.contains("Allow: GET, HEAD\r\n"), "{response}");
    assert!(response.contains(r#""error":"#), "{response}");
    // The body was read, so the next request's start is known.
    assert_eq!(keep_open, Some(true));

    let (response, _) = exchange(
        &shared,
        "HEAD /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
    );
    assert!(response.contains("Content-Length: 3\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\n"), "{response}");
}

#[test]
fn persistence_follows_the_client() {
    let shared = shared(None);
    let (response, keep_open) = exchange(
        &shared,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(keep_open, Some(false));
    assert!(response.contains("Connection: close\r\n"), "{response}");
    let (response, keep_open) = exchange(&shared, "GET /healthz HTTP/1.0\r\n\r\n");
    assert_eq!(keep_open, Some(false));
    assert!(response.contains("Connection: close\r\n"), "{response}");
    let (response, keep_open) = exchange(
        &shared,
        "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    );
    assert_eq!(keep_open, Some(true));
    assert!(
        response.contains("Connection: keep-alive\r\n"),
        "{response}"
    );
}

#[test]
fn malformed_and_oversized_heads_are_refused() {
    let shared = shared(None);
    let (response, keep_open) = exchange(&shared, "GET /healthz HTTP/1.1\r\n\r\n");
    assert_eq!(keep_open, None);
    assert!(response.starts_with("HTTP/1.1 400 "), "{response}");
    assert!(response.contains("Connection: close\r\n"), "{response}");

    let huge = format!(
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-Big: {}\r\n\r\n",
        "x".repeat(MAX_HEAD)
    );
    let (response, keep_open) = exchange(&shared, &huge);
    assert_eq!(keep_open, None);
    assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
}

/// Status and JSON body of one request with `body`, on a new connection.
fn call(shared: &Shared, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (response, _) = exchange(shared, &request);
    let status = response[9..12].parse().unwrap();
    let (_, json) = response.split_once("\r\n\r\n").unwrap();
    let json = serde_json::from_str(json).unwrap_or_else(|_| panic!("not JSON: {response}"));
    (status, json)
}

#[test]
fn bodies_are_read_by_length_and_only_so() {
    let shared = shared(None);
    // A body in two reads, with a pipelined request after it.
    let mut buffer = Buffer::new();
    let mut first: &[u8] = b"PUT /api/pools/app/servers/b/weight HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
        Content-Length: 12\r\nExpect: 100-continue\r\n\r\n{\"weig";
    read_everything(&mut buffer, &mut first);
    let mut out = Vec::new();
    assert!(matches!(
        answer_buffered(&mut buffer, &shared, TEST_PEER, &mut out),
        Buffered::Incomplete {
            expects_continue: true
        }
    ));
    assert!(out.is_empty());
    let mut rest: &[u8] = b"ht\":3}GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n";
    read_everything(&mut buffer, &mut rest);
    assert!(matches!(
        answer_buffered(&mut buffer, &shared, TEST_PEER, &mut out),
        Buffered::Done(Exchange::Answered { keep_open: true })
    ));
    let response = String::from_utf8(std::mem::take(&mut out)).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains(r#""weight":3"#), "{response}");
    assert!(matches!(
        answer_buffered(&mut buffer, &shared, TEST_PEER, &mut out),
        Buffered::Done(Exchange::Answered { keep_open: true })
    ));
    assert!(String::from_utf8(out).unwrap().ends_with("ok\n"));

    let (response, keep_open) = exchange(
        &shared,
        "POST /api/pools/app/servers HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    );
    assert!(
        response.starts_with("HTTP/1.1 411 Length Required\r\n"),
        "{response}"
    );
    assert!(response.contains("Content-Length"), "{response}");
    assert_eq!(keep_open, None);

    let (response, keep_open) = exchange(
        &shared,
        &format!(
            "POST /api/pools/app/servers HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        ),
    );
    assert!(response.starts_with("HTTP/1.1 413 "), "{response}");
    assert_eq!(keep_open, None);
    // Exactly the limit is read.
    let body = format!("{{\"weight\":3{}}}", " ".repeat(MAX_BODY - 12));
    assert_eq!(body.len(), MAX_BODY);
    let (status, json) = call(&shared, "PUT", "/api/pools/app/servers/a/weight", &body);
    assert_eq!((status, &json["weight"]), (200, &serde_json::json!(3)));
}

#[test]
fn without_the_token_nothing_is_read_or_changed() {
    let shared = shared(Some("s3cret"));
    let (response, keep_open) = exchange(
        &shared,
        "PUT /api/pools/app/servers/b/state HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"state\":\"maint\"}",
    );
    assert!(response.starts_with("HTTP/1.1 401 "), "{response}");
    assert_eq!(keep_open, Some(true));
    let (response, _) = exchange(
        &shared,
        "POST /api/pools/app/servers HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    assert!(response.starts_with("HTTP/1.1 401 "), "{response}");
    // Waiting for 100 Continue: refused at once, without inviting the body.
    let mut buffer = Buffer::new();
    let mut head: &[u8] = b"PUT /api/pools/app/servers/b/state HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
        Content-Length: 17\r\nExpect: 100-continue\r\n\r\n";
    read_everything(&mut buffer, &mut head);
    let mut out = Vec::new();
    assert!(matches!(
        answer_buffered(&mut buffer, &shared, TEST_PEER, &mut out),
        Buffered::Done(Exchange::Refused)
    ));
    let response = String::from_utf8(out).unwrap();
    assert!(response.starts_with("HTTP/1.1 401 "), "{response}");
    assert!(response.contains("Connection: close\r\n"), "{response}");

    let servers = shared.registry.pools().pools[0].servers.clone();
    assert!(servers.iter().all(|s| s.state == "ready"), "{servers:?}");
}

#[test]
fn pool_routes_change_the_registry() {
    let shared = shared(None);
    let (status, json) = call(&shared, "GET", "/api/pools", "");
    assert_eq!(status, 200);
    assert_eq!(json["pools"][0]["name"], "app");
    assert_eq!(json["pools"][0]["servers"][1]["weight"], 2);

    let (status, json) = call(
        &shared,
        "PUT",
        "/api/pools/app/servers/b/state",
        r#"{"state":"drain"}"#,
    );
    assert_eq!((status, json["state"].as_str()), (200, Some("drain")));

    let added = r#"{"name":"c","addr":"127.0.0.1:9003"}"#;
    let (status, json) = call(&shared, "POST", "/api/pools/app/servers", added);
    assert_eq!(status, 201, "{json}");
    assert_eq!(
        (&json["weight"], &json["state"], &json["added_at_run_time"]),
        (
            &serde_json::json!(1),
            &serde_json::json!("ready"),
            &serde_json::json!(true)
        )
    );
    let (status, json) = call(&shared, "POST", "/api/pools/app/servers", added);
    assert_eq!(status, 409, "{json}");
    assert!(json["error"].as_str().unwrap().contains("\"c\""), "{json}");

    let (status, json) = call(&shared, "GET", "/api/pools/app/servers/c/test-token", "");
    assert_eq!(status, 200);
    assert_eq!(json["header"], "X-Herdsman-Test");
    assert!(!json["token"].as_str().unwrap().is_empty());

    let (status, json) = call(&shared, "DELETE", "/api/pools/app/servers/c", "");
    assert_eq!((status, json["name"].as_str()), (200, Some("c")));
    assert_eq!(shared.registry.pools().pools[0].servers.len(), 2);

    for (method, path, body, expected) in [
        ("DELETE", "/api/pools/app/servers/c", "", 404),
        ("DELETE", "/api/pools/web/servers/a", "", 404),
        (
            "PUT",
            "/api/pools/app/servers/zz/weight",
            r#"{"weight":1}"#,
            404,
        ),
        (
            "PUT",
            "/api/pools/app/servers/a/weight",
            r#"{"weight":300}"#,
            400,
        ),
        (
            "PUT",
            "/api/pools/app/servers/a/state",
            r#"{"state":"asleep"}"#,
            400,
        ),
        ("PUT", "/api/pools/app/servers/a/state", "{", 400),
        ("GET", "/api/pools/app/servers/a/state", "", 405),
        ("POST", "/api/reload", "", 409),
    ] {
        let (status, json) = call(&shared, method, path, body);
        assert_eq!(status, expected, "{method} {path} {body}: {json}");
        assert!(json["error"].is_string(), "{json}");
    }
}

#[test]
fn the_stats_page_is_served_without_the_token_and_nothing_else_is() {
    let with_token = shared(Some("s3cret"));
    for method in ["GET", "HEAD"] {
        let (response, keep_open) = exchange(
            &with_token,
            &format!("{method} /stats?refresh HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n"),
        );
        assert_eq!(keep_open, Some(true));
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{method}: {head}");
        assert!(
            head.contains("\r\nContent-Type: text/html; charset=utf-8\r\n"),
            "{head}"
        );
        assert!(
            head.contains(&format!("\r\nContent-Length: {}\r\n", STATS_PAGE.len())),
            "{head}"
        );
        let policy = head
            .lines()
            .find_map(|line| line.strip_prefix("Content-Security-Policy: "))
            .unwrap_or_else(|| panic!("no CSP: {head}"));
        for directive in [
            "default-src 'none'",
            "script-src 'unsafe-inline'",
            "style-src 'unsafe-inline'",
            "connect-src 'self'",
            "img-src 'self' data:",
            "frame-ancestors 'none'",
        ] {
            assert!(
                policy.split("; ").any(|part| part == directive),
                "{directive} in {policy}"
            );
        }
        let expected = if method == "GET" { STATS_PAGE } else { "" };
        assert!(body == expected, "{method}: the body is not the page");
    }
    // What the page shows comes from the API, which still wants the token; so do other
    // methods on /stats and paths that merely look like it.
    for request in [
        "GET /api/pools HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
        "GET /stats/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
        "GET /stats.html HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
        "GET /Stats HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
        "POST /stats HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n",
        "PUT /stats HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    ] {
        let (response, _) = exchange(&with_token, request);
        assert!(
            response.starts_with("HTTP/1.1 401 "),
            "{request:?}: {response}"
        );
    }
    // Without a token configured, the page answers reads only, like the other pages.
    let without_token = shared(None);
    let (response, _) = exchange(
        &without_token,
        "POST /stats HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n",
    );
    assert!(response.starts_with("HTTP/1.1 405 "), "{response}");
    assert!(response.contains("Allow: GET, HEAD\r\n"), "{response}");
}

#[test]
fn a_405_says_what_the_path_answers() {
    let shared = shared(None);
    for (method, path, allow) in [
        ("GET", "/api/pools/app/servers", "Allow: POST\r\n"),
        ("GET", "/api/reload", "Allow: POST\r\n"),
        ("POST", "/api/pools", "Allow: GET, HEAD\r\n"),
        ("PUT", "/api/pools/app/servers/a", "Allow: DELETE\r\n"),
        ("POST", "/api/pools/app/servers/a/weight", "Allow: PUT\r\n"),
    ] {
        let (response, _) = exchange(
            &shared,
            &format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n"),
        );
        assert!(
            response.starts_with("HTTP/1.1 405 "),
            "{method} {path}: {response}"
        );
        assert!(response.contains(allow), "{method} {path}: {response}");
    }
}
