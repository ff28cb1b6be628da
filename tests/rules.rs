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

#[test]
fn herdsman_check_refuses_a_bad_address_list_with_its_key_and_line() {
    let text = pools_config(&format!(
        "[[route]]\npath_prefix = \"/a/\"\npool = \"app\"\nwhen = {{ client = [\"10.0.0.1/8\"] }}\n\n{}",
        pool_table("app", "", &[("a", refusing_addr(), "")], None)
    ));
    let path = write_temp("rules-bad-cidr.toml", &text);
    let (code, output) = run_binary(&["check", "-c", path.to_str().unwrap()]);
    assert_ne!(code, Some(0), "{output}");
    assert!(output.contains("line 11"), "{output}");
    assert!(output.contains("route[0].when.client"), "{output}");
    assert!(
        output.contains("\"10.0.0.1/8\": bits set after the first 8"),
        "{output}"
    );
}
