//! The operator's rules over real sockets: a route's `when` (method, header, query parameter,
//! cookie, client address, all/any/not) takes only the requests that meet it and passes the rest
//! to the next route; a condition that cannot compile is refused with its key and line, on
//! reload too, while the old rules keep running.

mod common;

use common::*;

/// Pools `names`, each of one mock answering with its name, behind `routes`.
fn routed(names: &[&'static str], routes: &str) -> (Vec<Mock>, Proxy) {
    let mocks: Vec<Mock> = names.iter().map(|name| Mock::named(name)).collect();
    let pools = pool_per_mock(names, &mocks);
    let herd = Proxy::start_from_file(&pools_config(&format!("{routes}{pools}")));
    (mocks, herd)
}

const CONDITIONAL_ROUTES: &str = r#"
[[route]]
path_prefix = "/api/"
pool = "beta"
when = { any = [ { header = "X-Beta", equals = "1" }, { cookie = "beta", present = true }, { query = "beta", prefix = "y" } ] }

[[route]]
path_prefix = "/api/"
pool = "writes"
when = { all = [ { not = { method = ["GET", "HEAD"] } }, { client = ["127.0.0.0/8", "::1"] } ] }

[[route]]
path_prefix = "/api/"
pool = "far"
when = { client = ["10.0.0.0/8"] }

[[route]]
path_prefix = "/api/"
pool = "api"

"#;

#[test]
fn a_route_with_a_condition_takes_only_the_requests_that_meet_it() {
    let (_mocks, herd) = routed(&["app", "beta", "writes", "far", "api"], CONDITIONAL_ROUTES);
    let cases = [
        ("GET", "/api/x", "", "api"),
        ("GET", "/api/x", "X-Beta: 1\r\n", "beta"),
        ("GET", "/api/x", "x-beta: 1\r\n", "beta"),
        ("GET", "/api/x", "X-Beta: 2\r\n", "api"),
        ("GET", "/api/x", "Cookie: a=1; beta=on\r\n", "beta"),
        ("GET", "/api/x", "Cookie: Beta=on\r\n", "api"),
        ("GET", "/api/x?a=1&beta=yes", "", "beta"),
        ("GET", "/api/x?beta=no", "", "api"),
        // From 127.0.0.1, not a GET or HEAD: the second route.
        ("DELETE", "/api/x", "", "writes"),
        ("POST", "/api/x", "Content-Length: 0\r\n", "writes"),
        // A route that meets its condition wins over later ones that would too.
        ("DELETE", "/api/x", "X-Beta: 1\r\n", "beta"),
        // No route's host and path: the listener's pool, whatever the conditions.
        ("GET", "/other?beta=yes", "X-Beta: 1\r\n", "app"),
    ];
    let mut conn = herd.connect();
    for (method, target, extra, expected) in cases {
        let request = format!("{method} {target} HTTP/1.1\r\nHost: app.test\r\n{extra}\r\n");
        let response = conn.roundtrip(request.as_bytes());
        assert_eq!(
            answered_by(&response),
            expected,
            "{method} {target} {extra:?}"
        );
    }
}

#[test]
fn a_condition_that_cannot_compile_is_refused_on_reload_and_the_old_rules_keep_running() {
    let (_mocks, herd) = routed(&["app", "beta", "writes", "far", "api"], CONDITIONAL_ROUTES);
    let broken_routes = CONDITIONAL_ROUTES.replace(
        r#"{ client = ["10.0.0.0/8"] }"#,
        r#"{ header = "X-Far", matches = "(unclosed" }"#,
    );
    let pools = |names: &[&str]| -> String {
        names
            .iter()
            .map(|name| pool_table(name, "", &[(name, refusing_addr(), "")], None))
            .collect()
    };
    let broken = pools_config(&format!(
        "{broken_routes}{}",
        pools(&["app", "beta", "writes", "far", "api"])
    ));
    let line = broken
        .lines()
        .position(|line| line.contains("(unclosed"))
        .unwrap()
        + 1;
    let error = herd
        .reload_with(&broken)
        .expect_err("a bad regex was accepted");
    let message = error.to_string();
    assert!(message.contains(&format!("line {line}")), "{message}");
    assert!(message.contains("route[2].when.matches"), "{message}");
    assert!(message.contains("not a regex"), "{message}");
    // The old rules, and their servers, still answer.
    let beta = herd.get_from_host("app.test", "/api/x", "X-Beta: 1\r\n");
    assert_eq!(answered_by(&beta), "beta");
    assert_eq!(
        answered_by(&herd.get_from_host("app.test", "/api/x", "")),
        "api"
    );
}

/// `herdsman check` of a config whose listener's table goes on with `rules` (then a pool "app"):
/// the output, once it was seen to refuse the file.
fn refused_by_check(rules: &str) -> String {
    let text = pools_config(&format!(
        "{rules}\n{}",
        pool_table("app", "", &[("a", refusing_addr(), "")], None)
    ));
    let path = write_temp("rules-check.toml", &text);
    let (code, output) = run_binary(&["check", "-c", path.to_str().unwrap()]);
    assert_ne!(code, Some(0), "{rules}: {output}");
    output
}

#[test]
fn herdsman_check_refuses_a_bad_address_list_with_its_key_and_line() {
    let output = refused_by_check(
        "[[route]]\npath_prefix = \"/a/\"\npool = \"app\"\nwhen = { client = [\"10.0.0.1/8\"] }\n",
    );
    assert!(output.contains("line 11"), "{output}");
    assert!(output.contains("route[0].when.client"), "{output}");
    assert!(
        output.contains("\"10.0.0.1/8\": bits set after the first 8"),
        "{output}"
    );
}

/// The listener's keys, `[listener.access]` and `[real_ip]`, then routes: a trusted proxy on
/// 127.0.0.1 names the client; one network is denied everywhere; `/admin/` is the office's, and
/// closes on anyone else.
const CLIENT_RULES: &str = r#"access_log = "LOG"
access_log_format = "combined"
[listener.access]
deny = ["198.51.100.0/24"]

[real_ip]
trusted = ["127.0.0.1"]

[[route]]
path_prefix = "/admin/"
pool = "app"
[route.access]
allow = ["10.0.0.0/8"]
refuse = "close"

[[route]]
pool = "far"
when = { client = ["203.0.113.0/24"] }

"#;

#[test]
fn the_client_a_trusted_proxy_names_is_what_routes_access_rules_and_the_log_see() {
    let log = std::env::temp_dir().join(format!("herdsman-rules-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let rules = CLIENT_RULES.replace("LOG", log.to_str().unwrap());
    let (mocks, herd) = routed(&["app", "far"], &rules);
    let get = |target: &str, forwarded_for: &str| {
        let extra = match forwarded_for {
            "" => String::new(),
            chain => format!("X-Forwarded-For: {chain}\r\n"),
        };
        herd.get_from_host("app.test", target, &extra)
    };
    // The rightmost address the trusted peer did not add itself is the client.
    assert_eq!(answered_by(&get("/", "203.0.113.9")), "far");
    assert_eq!(answered_by(&get("/", "")), "app");
    assert_eq!(answered_by(&get("/", "203.0.113.9, 192.0.2.4")), "app");
    // The server still gets the whole chain, the peer last.
    let seen = mocks[1].heads();
    assert_eq!(
        seen[0].header("x-forwarded-for"),
        Some("203.0.113.9, 127.0.0.1")
    );
    // Denied on the listener: 403, whatever the route.
    assert_eq!(get("/", "198.51.100.7").status(), 403);
    assert_eq!(get("/admin/users", "198.51.100.7").status(), 403);
    // The office reaches /admin/; anyone else finds the connection closed, unanswered.
    assert_eq!(answered_by(&get("/admin/users", "10.1.2.3")), "app");
    let mut refused = herd.connect();
    refused.send(&get_request_to("app.test", "/admin/users", ""));
    refused.expect_closed();
    // The access log names the client each request was served as (two workers write their
    // lines in their own order).
    assert!(eventually(std::time::Duration::from_secs(5), || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.lines().count() >= 7)
    }));
    let text = std::fs::read_to_string(&log).unwrap();
    let from = |client: &str| -> Vec<&str> {
        let start = format!("{client} ");
        text.lines()
            .filter(|line| line.starts_with(&start))
            .collect()
    };
    for (client, lines) in [
        ("203.0.113.9", 1),
        ("192.0.2.4", 1),
        ("10.1.2.3", 1),
        // The request without a chain, and the one refused with a close.
        ("127.0.0.1", 2),
        ("198.51.100.7", 2),
    ] {
        assert_eq!(from(client).len(), lines, "{client}: {text}");
    }
    assert!(
        from("198.51.100.7")
            .iter()
            .all(|line| line.contains("\" 403 ")),
        "{text}"
    );
    let _ = std::fs::remove_file(&log);
}

#[test]
fn a_peer_that_is_not_trusted_is_the_client_whatever_it_claims() {
    let rules = "[real_ip]\ntrusted = [\"10.0.0.0/8\"]\n\n[[route]]\npool = \"far\"\nwhen = { client = [\"203.0.113.0/24\"] }\n\n";
    let (_mocks, herd) = routed(&["app", "far"], rules);
    let claimed = herd.get_from_host("app.test", "/", "X-Forwarded-For: 203.0.113.9\r\n");
    assert_eq!(answered_by(&claimed), "app");
}

#[test]
fn bad_client_address_rules_are_refused_with_their_key_and_line() {
    let cases = [
        (
            "[listener.access]\nallow = [\"10.0.0.0/8\", \"10.0.0.300\"]\n",
            "listener[0].access.allow",
            9,
            "not an IP address",
        ),
        (
            "[listener.access]\ndeny = [\"::1\"]\nrefuse = \"drop\"\n",
            "listener[0].access.refuse",
            10,
            "accepted: \"403\"",
        ),
        (
            "[listener.access]\nrefuse = \"close\"\n",
            "listener[0].access",
            8,
            "neither allow nor deny",
        ),
        (
            "[real_ip]\ntrusted = [\"10.0.0.0/40\"]\n",
            "real_ip.trusted",
            9,
            "from 0 to 32",
        ),
        (
            "[real_ip]\nheader = \"X-Real-IP\"\n",
            "real_ip.trusted",
            8,
            "missing",
        ),
        (
            "[real_ip]\ntrusted = []\nheader = \"X-Real-IP\"\n",
            "real_ip.header",
            10,
            "\"Forwarded\"",
        ),
    ];
    for (rules, key, line, why) in cases {
        let output = refused_by_check(rules);
        assert!(
            output.contains(&format!("line {line}: {key}")),
            "{rules}: {output}"
        );
        assert!(output.contains(why), "{rules}: {output}");
    }
}
