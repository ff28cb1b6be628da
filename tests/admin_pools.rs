//! The admin API's pool routes over real sockets: what `GET /api/pools` shows, and that each
//! change (state, weight, a server added or removed, a reload) is what the proxy then does with
//! requests. Refusals say why and change nothing.

mod admin_support;
mod common;

use admin_support::{api, count, Running};
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Servers "a" and "b" (mocks answering with their names) behind round-robin, with the admin
/// API on.
fn two_servers(a: &Mock, b: &Mock) -> Setup {
    Setup::new().admin().server("a", a.addr).server("b", b.addr)
}

fn servers_of(json: &Value) -> &Vec<Value> {
    json["pools"][0]["servers"].as_array().unwrap()
}

#[test]
fn pools_list_their_servers_with_state_and_weight() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(
        Setup::new()
            .admin()
            .balance("least-conn")
            .server("a", a.addr)
            .weighted("b", b.addr, 2),
    );
    let (status, json) = herdsman.api("GET", "/api/pools", None);
    assert_eq!(status, 200, "{json}");
    assert!(json["generation"].is_u64(), "{json}");
    let pool = &json["pools"][0];
    assert_eq!(
        (&pool["name"], &pool["balance"]),
        (&json!("app"), &json!("least-conn"))
    );
    let servers = servers_of(&json);
    assert_eq!(servers.len(), 2, "{json}");
    for (server, name, addr, weight) in
        [(&servers[0], "a", a.addr, 1), (&servers[1], "b", b.addr, 2)]
    {
        assert_eq!(server["name"], name);
        assert_eq!(server["addr"], addr.to_string());
        assert_eq!(server["state"], "ready");
        assert_eq!(server["weight"], weight);
        assert_eq!(server["added_at_run_time"], false);
    }
    // Requests are counted where they went.
    herdsman.answers(4);
    let (_, json) = herdsman.api("GET", "/api/pools", None);
    let requests: u64 = servers_of(&json)
        .iter()
        .map(|server| server["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(requests, 4, "{json}");
}

#[test]
fn a_drained_server_gets_no_new_requests_until_ready_again() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));
    assert_eq!(count(&herdsman.answers(4), "b"), 2);

    let (status, json) = herdsman.api(
        "PUT",
        "/api/pools/app/servers/b/state",
        Some(r#"{"state":"drain"}"#),
    );
    assert_eq!(status, 200, "{json}");
    assert_eq!(
        (&json["name"], &json["state"]),
        (&json!("b"), &json!("drain"))
    );
    assert_eq!(
        herdsman.servers(),
        [
            ("a".into(), "ready".into(), 1),
            ("b".into(), "drain".into(), 1)
        ]
    );
    let answers = herdsman.answers(6);
    assert_eq!(count(&answers, "a"), 6, "{answers:?}");

    let (status, _) = herdsman.api(
        "PUT",
        "/api/pools/app/servers/b/state",
        Some(r#"{"state":"ready"}"#),
    );
    assert_eq!(status, 200);
    assert_eq!(count(&herdsman.answers(6), "b"), 3);
}

#[test]
fn a_weight_changes_the_share_of_requests() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));
    let (status, json) = herdsman.api(
        "PUT",
        "/api/pools/app/servers/b/weight",
        Some(r#"{"weight":3}"#),
    );
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["weight"], 3);
    assert_eq!(herdsman.servers()[1], ("b".into(), "ready".into(), 3));
    let answers = herdsman.answers(8);
    assert_eq!(
        (count(&answers, "a"), count(&answers, "b")),
        (2, 6),
        "{answers:?}"
    );

    // Weight 0: no new requests.
    let (status, _) = herdsman.api(
        "PUT",
        "/api/pools/app/servers/b/weight",
        Some(r#"{"weight":0}"#),
    );
    assert_eq!(status, 200);
    assert_eq!(count(&herdsman.answers(4), "a"), 4);
}

#[test]
fn an_added_server_takes_requests_and_a_removed_one_none() {
    let (a, c) = (Mock::named("a"), Mock::named("c"));
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr));
    let body = format!(r#"{{"name":"c","addr":"{}"}}"#, c.addr);
    let (status, json) = herdsman.api("POST", "/api/pools/app/servers", Some(&body));
    assert_eq!(status, 201, "{json}");
    assert_eq!(
        json,
        json!({
            "name": "c", "addr": c.addr.to_string(), "state": "ready", "health": "up",
            "weight": 1, "effective_weight": 1, "max_connections": 0, "active": 0, "requests": 0,
            "latency_ms": null, "added_at_run_time": true,
            "traffic": {
                "requests": 0, "responses": [0, 0, 0, 0, 0], "unanswered": 0, "retries": 0,
                "connections_opened": 0, "duration_sum_us": 0, "buckets": vec![0; 19],
            },
        })
    );
    let answers = herdsman.answers(6);
    assert_eq!(
        (count(&answers, "a"), count(&answers, "c")),
        (3, 3),
        "{answers:?}"
    );

    let (status, json) = herdsman.api("DELETE", "/api/pools/app/servers/c", None);
    assert_eq!(status, 200, "{json}");
    assert_eq!((&json["name"], &json["requests"]), (&json!("c"), &json!(3)));
    assert_eq!(herdsman.servers(), [("a".into(), "ready".into(), 1)]);
    let reached_c = c.requests().len();
    assert_eq!(count(&herdsman.answers(4), "a"), 4);
    assert_eq!(c.requests().len(), reached_c);

    // Added with a weight and a state.
    let body = format!(
        r#"{{"name":"c","addr":"{}","weight":5,"state":"maint"}}"#,
        c.addr
    );
    let (status, json) = herdsman.api("POST", "/api/pools/app/servers", Some(&body));
    assert_eq!(
        (status, &json["weight"], &json["state"]),
        (201, &json!(5), &json!("maint"))
    );
    assert_eq!(count(&herdsman.answers(3), "a"), 3);
}

#[test]
fn a_test_token_reaches_a_server_in_test() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));
    let (status, _) = herdsman.api(
        "PUT",
        "/api/pools/app/servers/b/state",
        Some(r#"{"state":"test"}"#),
    );
    assert_eq!(status, 200);
    let (status, json) = herdsman.api("GET", "/api/pools/app/servers/b/test-token", None);
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["header"], "X-Herdsman-Test");
    let token = json["token"].as_str().unwrap();
    assert!(!token.is_empty());

    assert_eq!(count(&herdsman.answers(4), "a"), 4);
    let mut conn = Conn::connect(herdsman.web);
    let response = conn.roundtrip(&get_request(
        "/",
        &format!("X-Herdsman-Test: {token}\r\nConnection: close\r\n"),
    ));
    assert_eq!(response.body_text(), "b");
}

#[test]
fn refusals_say_why_and_change_nothing() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));
    let before = herdsman.api("GET", "/api/pools", None).1;
    let c = format!(r#"{{"name":"c","addr":"{}"}}"#, refusing_addr());
    for (method, path, body, status, says) in [
        (
            "GET",
            "/api/pools/app/servers/zz/test-token",
            None,
            404,
            r#"no server named "zz""#,
        ),
        (
            "PUT",
            "/api/pools/web/servers/a/state",
            Some(r#"{"state":"drain"}"#),
            404,
            r#"no pool named "web""#,
        ),
        ("DELETE", "/api/pools/app/servers/zz", None, 404, "zz"),
        (
            "POST",
            "/api/pools/nope/servers",
            Some(c.as_str()),
            404,
            "nope",
        ),
        (
            "PUT",
            "/api/pools/app/servers/b/state",
            Some(r#"{"state":"#),
            400,
            "not valid JSON",
        ),
        (
            "PUT",
            "/api/pools/app/servers/b/state",
            Some(r#"{"state":"asleep"}"#),
            400,
            r#""state": "asleep" is not a state; accepted: ready, drain, maint, test"#,
        ),
        (
            "PUT",
            "/api/pools/app/servers/b/state",
            Some(r#"{"sate":"drain"}"#),
            400,
            r#"unknown field "sate""#,
        ),
        (
            "PUT",
            "/api/pools/app/servers/b/weight",
            Some(r#"{"weight":300}"#),
            400,
            r#""weight": 300 is out of range"#,
        ),
        (
            "PUT",
            "/api/pools/app/servers/b/weight",
            Some(r#"{"weight":"3"}"#),
            400,
            r#""weight": "3" is a string"#,
        ),
        (
            "PUT",
            "/api/pools/app/servers/b/weight",
            Some(""),
            400,
            "the body is empty",
        ),
        (
            "POST",
            "/api/pools/app/servers",
            Some(r#"{"name":"c d","addr":"127.0.0.1:1"}"#),
            400,
            r#""name": "c d" is not a valid name"#,
        ),
        (
            "POST",
            "/api/pools/app/servers",
            Some(r#"{"name":"c","addr":"localhost:1"}"#),
            400,
            r#""addr": "localhost:1""#,
        ),
        (
            "POST",
            "/api/pools/app/servers",
            Some(r#"{"name":"b","addr":"127.0.0.1:1"}"#),
            409,
            r#"already has a server named "b""#,
        ),
        ("GET", "/api/pools/app/servers/b/weight", None, 405, "PUT"),
        (
            "GET",
            "/api/pools/app/servers/b%2F",
            None,
            404,
            "no such path",
        ),
    ] {
        let (got, json) = herdsman.api(method, path, body);
        let error = json["error"].as_str().unwrap_or_default();
        assert_eq!(got, status, "{method} {path} {body:?}: {json}");
        assert!(
            error.contains(says),
            "{method} {path} {body:?}: {error:?} lacks {says:?}"
        );
    }
    assert_eq!(herdsman.api("GET", "/api/pools", None).1, before);
}

#[test]
fn without_the_token_nothing_changes() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start_with_token(two_servers(&a, &b), "s3cret-t0ken");
    let drain = Some(r#"{"state":"drain"}"#);
    for token in [None, Some("wrong"), Some("s3cret-t0ke")] {
        let (status, json) = api(
            herdsman.admin,
            "PUT",
            "/api/pools/app/servers/b/state",
            drain,
            token,
        );
        assert_eq!(status, 401, "{token:?}: {json}");
        let (status, _) = api(herdsman.admin, "GET", "/api/pools", None, token);
        assert_eq!(status, 401);
    }
    assert_eq!(herdsman.servers()[1], ("b".into(), "ready".into(), 1));
    assert_eq!(count(&herdsman.answers(4), "b"), 2);
    let (status, _) = herdsman.api("PUT", "/api/pools/app/servers/b/state", drain);
    assert_eq!(status, 200);
    assert_eq!(herdsman.servers()[1], ("b".into(), "drain".into(), 1));
}

#[test]
fn a_broken_file_is_refused_and_the_running_config_stays() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));
    let before = herdsman.api("GET", "/api/pools", None).1;
    let good = std::fs::read_to_string(&herdsman.path).unwrap();
    herdsman.rewrite_text(&good.replace("round-robin", "fastest-first"));

    let (status, json) = herdsman.api("POST", "/api/reload", None);
    assert_eq!(status, 400, "{json}");
    assert_eq!(
        json["error"],
        "the new config was refused; the running one stays"
    );
    let problems = json["problems"].as_array().expect("problems");
    assert!(
        problems.iter().any(|problem| {
            let problem = problem.as_str().unwrap();
            problem.starts_with("line ") && problem.contains("fastest-first")
        }),
        "{json}"
    );
    assert_eq!(
        herdsman.api("GET", "/api/pools", None).1["generation"],
        before["generation"]
    );
    let answers = herdsman.answers(4);
    assert_eq!(
        (count(&answers, "a"), count(&answers, "b")),
        (2, 2),
        "{answers:?}"
    );

    // Unparsable TOML is refused the same way.
    herdsman.rewrite_text("[[pool]\n");
    let (status, json) = herdsman.api("POST", "/api/reload", None);
    assert_eq!(status, 400, "{json}");
    assert!(!json["problems"].as_array().unwrap().is_empty(), "{json}");
    assert_eq!(herdsman.answers(2).len(), 2);
}

#[test]
fn a_reload_applies_the_changed_file() {
    let (a, b, c) = (Mock::named("a"), Mock::named("b"), Mock::named("c"));
    let herdsman = Running::start(two_servers(&a, &b));
    let generation = herdsman.api("GET", "/api/pools", None).1["generation"]
        .as_u64()
        .unwrap();
    herdsman.rewrite(
        Setup::new()
            .admin()
            .server("a", a.addr)
            .weighted("b", b.addr, 3)
            .server("c", c.addr),
    );
    let (status, json) = herdsman.api("POST", "/api/reload", None);
    assert_eq!(status, 200, "{json}");
    assert!(json["generation"].as_u64().unwrap() > generation, "{json}");
    assert_eq!(
        herdsman.servers(),
        [
            ("a".into(), "ready".into(), 1),
            ("b".into(), "ready".into(), 3),
            ("c".into(), "ready".into(), 1)
        ]
    );
    let answers = herdsman.answers(10);
    assert_eq!(
        (
            count(&answers, "a"),
            count(&answers, "b"),
            count(&answers, "c")
        ),
        (2, 6, 2),
        "{answers:?}"
    );
}

#[test]
fn a_reload_opens_the_listeners_the_file_adds_and_closes_those_it_removes() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));
    let original = std::fs::read_to_string(&herdsman.path).unwrap();
    // A second listener, for pool "solo" of server b only.
    let solo_pool = format!(
        "\n[[pool]]\nname = \"solo\"\nservers = [{{ name = \"b\", addr = \"{}\" }}]\n",
        b.addr
    );
    let extra_listener =
        "\n[[listener]]\nname = \"extra\"\nbind = \"127.0.0.1:0\"\npool = \"solo\"\n";
    herdsman.rewrite_text(&format!("{original}{solo_pool}{extra_listener}"));
    let (status, json) = herdsman.api("POST", "/api/reload", None);
    assert_eq!(status, 200, "{json}");
    let extra = herdsman
        .listener("extra")
        .expect("the reload opened listener extra");
    for i in 0..6 {
        let mut conn = Conn::connect(extra);
        let response = conn.roundtrip(&get_request(&format!("/e/{i}"), "Connection: close\r\n"));
        assert_eq!(
            (response.status(), response.body_text()),
            (200, "b".to_string())
        );
    }

    // A keep-alive connection accepted on "web" before the reload that closes it.
    let mut kept = Conn::connect(herdsman.web);
    assert_eq!(kept.roundtrip(&get_request("/before", "")).status(), 200);
    let without_web = format!("{original}{solo_pool}{extra_listener}").replacen(
        "[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n",
        "",
        1,
    );
    assert!(!without_web.contains("name = \"web\""), "{without_web}");
    herdsman.rewrite_text(&without_web);
    let (status, json) = herdsman.api("POST", "/api/reload", None);
    assert_eq!(status, 200, "{json}");
    assert!(
        eventually(Duration::from_secs(2), || Conn::try_connect(herdsman.web)
            .is_err()),
        "the removed listener still accepts connections"
    );
    assert_eq!(herdsman.listener("web"), None);
    // The connection it accepted before is still served, by its pool.
    assert_eq!(kept.roundtrip(&get_request("/after", "")).status(), 200);
    let mut conn = Conn::connect(extra);
    assert_eq!(conn.roundtrip(&get_request("/still", "")).status(), 200);
}

#[test]
fn a_reload_whose_new_listener_cannot_bind_changes_nothing() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));
    let original = std::fs::read_to_string(&herdsman.path).unwrap();
    // The admin API's own address is taken.
    let taken = format!(
        "{original}\n[[listener]]\nname = \"extra\"\nbind = \"{}\"\npool = \"app\"\n",
        herdsman.admin
    );
    herdsman.rewrite_text(&taken.replace("balance = \"round-robin\"", "balance = \"random\""));
    let (status, json) = herdsman.api("POST", "/api/reload", None);
    assert_eq!(status, 400, "{json}");
    let error = json["error"].as_str().unwrap();
    assert!(error.contains("listener extra: cannot bind"), "{error}");
    let (_, pools) = herdsman.api("GET", "/api/pools", None);
    assert_eq!(pools["generation"], 1, "{pools}");
    assert_eq!(pools["pools"][0]["balance"], "round-robin");
    assert_eq!(herdsman.listener("extra"), None);
    let answers = herdsman.answers(4);
    assert_eq!(
        (count(&answers, "a"), count(&answers, "b")),
        (2, 2),
        "{answers:?}"
    );
}

#[test]
fn idle_connections_to_a_removed_or_readdressed_server_are_closed_at_once() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    // backend_idle far longer than the test, so only the change can close them.
    let herdsman = Running::start(two_servers(&a, &b).timeout("backend_idle", "60s"));
    // Keep-alive clients leave pooled connections to both servers behind.
    for _ in 0..3 {
        let mut conn = Conn::connect(herdsman.web);
        for i in 0..4 {
            assert_eq!(
                conn.roundtrip(&get_request(&format!("/{i}"), "")).status(),
                200
            );
        }
    }
    let pooled_to_b = b.connections();
    assert!(pooled_to_b > 0);
    assert_eq!(b.closed_by_peer(), 0, "closed before the change");
    let (status, json) = herdsman.api("DELETE", "/api/pools/app/servers/b", None);
    assert_eq!(status, 200, "{json}");
    assert!(
        eventually(Duration::from_millis(100), || b.closed_by_peer()
            == pooled_to_b),
        "{} of {pooled_to_b} pooled connections to the removed server closed within 100 ms",
        b.closed_by_peer()
    );

    // Re-addressed by a reload: "a" now lives where "b" did.
    let pooled_to_a = a.connections();
    herdsman.reconfigure(|text| text.replace(&a.addr.to_string(), &b.addr.to_string()));
    assert!(
        eventually(Duration::from_millis(100), || a.closed_by_peer()
            == pooled_to_a),
        "{} of {pooled_to_a} pooled connections to the old address closed within 100 ms",
        a.closed_by_peer()
    );
    assert_eq!(herdsman.answers(2), ["b", "b"]);
}
