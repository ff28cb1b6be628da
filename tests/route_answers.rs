//! Routes that answer themselves and routes that rewrite, over real sockets: a redirect with
//! each status and a Location built from the request (scheme, host, path, path_rest, the query
//! kept or dropped), HEAD answered with the head alone, the connection kept; a fixed response
//! from `body` and from `body_file` (robots.txt, a maintenance 503 with Retry-After); a rewrite
//! by prefix and by regex with captures, seen by the server while the access log keeps the
//! client's target; none of those routes needs a pool; an HTTP/2 client gets the same answers;
//! the access log names the rule (`rule=redirect`, `respond`, `deny`) and `/metrics` counts each;
//! a bad status, regex or body_file is refused by `herdsman check` with key and line, and a
//! reload with one keeps the old rules running.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

/// Routes 0-4 redirect (301, 302 by default, 303, 307, 308), 5 and 6 answer fixed responses,
/// 7 and 8 rewrite, 9 is only for the office; the listener refuses 198.51.100.0/24.
const ROUTES: &str = r#"
[[route]]
path_prefix = "/old/"
[route.redirect]
status = 301
to = "https://{host}/new/{path_rest}"

[[route]]
path_prefix = "/found"
[route.redirect]
to = "/elsewhere"
query = "drop"

[[route]]
path_prefix = "/see-other"
[route.redirect]
status = 303
to = "{scheme}://{host}/result?from={route}"

[[route]]
path_prefix = "/temporary"
[route.redirect]
status = 307
to = "/t{path}"

[[route]]
path_prefix = "/permanent"
[route.redirect]
status = 308
to = "http://other.test{path}"

[[route]]
path_prefix = "/robots.txt"
[route.respond]
body_file = "ROBOTS"
headers = { "Cache-Control" = "max-age=3600" }

[[route]]
path_prefix = "/maintenance"
[route.respond]
status = 503
content_type = "text/html; charset=utf-8"
body = "<h1>Back soon</h1>"
headers = { "Retry-After" = "120" }

[[route]]
path_prefix = "/api/"
pool = "app"
[route.rewrite]
path_prefix = "/v2/"

[[route]]
path_prefix = "/user/"
pool = "app"
[route.rewrite]
path_regex = '^/user/(\d+)/(?P<tab>\w+)$'
path = "/users/$1/${tab}"

[[route]]
path_prefix = "/office/"
pool = "app"
[route.access]
allow = ["10.0.0.0/8"]
"#;

/// The listener "web" (h2c, an access log at `log`, a deny list, a trusted proxy on
/// 127.0.0.1), an admin API, pool "app" of `server`, then `routes` with `ROBOTS` replaced.
fn config(server: &Mock, log: &Path, robots: &Path, routes: &str) -> String {
    format!(
        "workers = 2\n\n\
         [[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\nh2c = true\n\
         access_log = {log:?}\n\
         [listener.access]\ndeny = [\"198.51.100.0/24\"]\n\n\
         [real_ip]\ntrusted = [\"127.0.0.1\"]\n\n\
         [admin]\nbind = \"127.0.0.1:0\"\n\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n\n{}",
        server.addr,
        routes.replace("ROBOTS", robots.to_str().unwrap())
    )
}

/// A mock, a temporary directory with robots.txt, and herdsman (from a file) with [`ROUTES`].
fn start(name: &str) -> (Mock, std::path::PathBuf, Proxy) {
    let server = Mock::named("a");
    let dir = fresh_temp_dir(name);
    let robots = dir.join("robots.txt");
    std::fs::write(&robots, "User-agent: *\nDisallow: /private/\n").unwrap();
    let text = config(&server, &dir.join("access.log"), &robots, ROUTES);
    let proxy = Proxy::start_from_file(&text);
    (server, dir, proxy)
}

fn admin_get(proxy: &Proxy, path: &str) -> String {
    let admin = proxy.server().admin_addr().expect("an admin API");
    Conn::connect(admin)
        .roundtrip(&admin_get_request(path))
        .body_text()
}

/// Waits until `n` lines of the access log at `log` pass `counted` (two workers write theirs
/// in their own time).
fn wait_for_lines(log: &Path, n: usize, counted: impl Fn(&str) -> bool) {
    let read = || std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(5), || {
            read().lines().filter(|line| counted(line)).count() == n
        }),
        "{}",
        read()
    );
}

/// Asserts that `/metrics` has each of `samples` as a line.
fn assert_metrics(proxy: &Proxy, samples: &[&str]) {
    let metrics = admin_get(proxy, "/metrics");
    for sample in samples {
        assert!(
            metrics.lines().any(|line| line == *sample),
            "{sample}\n{metrics}"
        );
    }
}

/// GET `path` with Host `host` on `conn`, kept open.
fn get_on(conn: &mut Conn, host: &str, path: &str) -> Response {
    conn.roundtrip(&get_request_to(host, path, ""))
}

#[test]
fn redirects_answer_with_their_status_and_a_location_built_from_the_request() {
    let (server, dir, proxy) = start("answers-redirects");
    let mut conn = proxy.connect();
    let cases = [
        (
            "/old/a/b?x=1&y=2",
            301,
            "https://example.test:8080/new/a/b?x=1&y=2",
        ),
        ("/found/here?x=1", 302, "/elsewhere"),
        (
            "/see-other?q=2",
            303,
            "http://example.test:8080/result?from=route[2]&q=2",
        ),
        ("/temporary/x?q", 307, "/t/temporary/x?q"),
        ("/permanent", 308, "http://other.test/permanent"),
    ];
    // One connection for all: each redirect keeps it open.
    for (path, status, location) in cases {
        let answer = get_on(&mut conn, "example.test:8080", path);
        assert_eq!(answer.status(), status, "{path}");
        assert_eq!(answer.header("Location"), Some(location), "{path}");
        assert_eq!(answer.header("Content-Length"), Some("0"), "{path}");
        assert!(!answer.says_close(), "{path}");
    }
    // HEAD: the same head, no body.
    conn.send(b"HEAD /old/x HTTP/1.1\r\nHost: example.test\r\n\r\n");
    let head = conn.read_response(true).unwrap();
    assert_eq!(head.status(), 301);
    assert_eq!(head.header("Location"), Some("https://example.test/new/x"));
    // A request that asks to close is answered, then closed.
    conn.send(b"GET /found HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n");
    let last = conn.response();
    assert_eq!(last.status(), 302);
    assert!(last.says_close());
    conn.expect_closed();
    assert!(server.requests().is_empty(), "a redirect reaches no server");

    // The log names the rule; the metrics count each route's.
    wait_for_lines(&dir.join("access.log"), 7, |line| {
        line.ends_with(" rule=redirect")
    });
    assert_metrics(
        &proxy,
        &[
            r#"herdsman_rule_answers_total{route="route[0]",rule="redirect"} 2"#,
            r#"herdsman_rule_answers_total{route="route[1]",rule="redirect"} 2"#,
            r#"herdsman_rule_answers_total{route="route[4]",rule="redirect"} 1"#,
            r#"herdsman_rule_answers_total{route="route[9]",rule="deny"} 0"#,
            r#"herdsman_rule_answers_total{listener="web",rule="deny"} 0"#,
        ],
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn fixed_responses_come_from_body_and_body_file() {
    let (server, dir, proxy) = start("answers-fixed");
    let mut conn = proxy.connect();
    let robots = get_on(&mut conn, "example.test", "/robots.txt");
    assert_eq!(robots.status(), 200);
    assert_eq!(robots.body_text(), "User-agent: *\nDisallow: /private/\n");
    assert_eq!(
        robots.header("Content-Type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(robots.header("Cache-Control"), Some("max-age=3600"));
    let down = get_on(&mut conn, "example.test", "/maintenance/page");
    assert_eq!(down.status(), 503);
    assert_eq!(down.body_text(), "<h1>Back soon</h1>");
    assert_eq!(down.header("Retry-After"), Some("120"));
    assert_eq!(
        down.header("Content-Type"),
        Some("text/html; charset=utf-8")
    );
    conn.send(b"HEAD /maintenance HTTP/1.1\r\nHost: example.test\r\n\r\n");
    let head = conn.read_response(true).unwrap();
    assert_eq!(head.status(), 503);
    assert_eq!(head.header("Content-Length"), Some("18"));
    assert!(head.body.is_empty());
    // Still open after all three.
    assert_eq!(
        get_on(&mut conn, "example.test", "/robots.txt").status(),
        200
    );
    assert!(
        server.requests().is_empty(),
        "a fixed answer reaches no server"
    );
    wait_for_lines(&dir.join("access.log"), 4, |line| {
        line.ends_with(" rule=respond")
    });
    assert_metrics(
        &proxy,
        &[r#"herdsman_rule_answers_total{route="route[5]",rule="respond"} 2"#],
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_rewrite_changes_the_target_the_server_gets_and_the_log_keeps_the_clients() {
    let (server, dir, proxy) = start("answers-rewrite");
    assert_eq!(answered_by(&proxy.get("/api/users?id=1")), "a");
    assert_eq!(answered_by(&proxy.get("/user/42/posts?page=2")), "a");
    // No match of the regex: the path as it came.
    assert_eq!(answered_by(&proxy.get("/user/x")), "a");
    assert_eq!(
        server.targets(),
        ["/v2/users?id=1", "/users/42/posts?page=2", "/user/x"]
    );
    let log = dir.join("access.log");
    assert!(
        eventually(Duration::from_secs(5), || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("\"GET /api/users?id=1 HTTP/1.1\" 200")
                && text.contains("\"GET /user/42/posts?page=2 HTTP/1.1\" 200")
        }),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn refusals_by_access_rules_are_logged_and_counted_as_deny() {
    let (_server, dir, proxy) = start("answers-deny");
    let from = |client: &str, path: &str| {
        let extra = format!("X-Forwarded-For: {client}\r\n");
        proxy.get_from_host("example.test", path, &extra)
    };
    assert_eq!(from("198.51.100.7", "/").status(), 403);
    assert_eq!(from("192.0.2.1", "/office/x").status(), 403);
    assert_eq!(answered_by(&from("10.0.0.1", "/office/x")), "a");
    wait_for_lines(&dir.join("access.log"), 2, |line| {
        line.contains("\" 403 ") && line.ends_with(" rule=deny")
    });
    assert_metrics(
        &proxy,
        &[
            r#"herdsman_rule_answers_total{route="route[9]",rule="deny"} 1"#,
            r#"herdsman_rule_answers_total{listener="web",rule="deny"} 1"#,
        ],
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_http2_client_gets_redirects_and_fixed_responses() {
    let (server, dir, proxy) = start("answers-h2");
    let h2 = ["--http2-prior-knowledge", "--include"];
    let (status, answer) = curl(&h2, &format!("http://{}/old/a?b=1", proxy.addr), None);
    assert_eq!(status, "2 301");
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    let host = proxy.addr.to_string();
    assert!(
        answer.contains(&format!("location: https://{host}/new/a?b=1")),
        "{answer}"
    );
    let (status, answer) = curl(&h2, &format!("http://{}/maintenance", proxy.addr), None);
    assert_eq!(status, "2 503");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.contains("retry-after: 120"), "{answer}");
    assert!(answer.ends_with("<h1>Back soon</h1>"), "{answer}");
    assert!(server.requests().is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

/// `herdsman check`'s output for [`ROUTES`] with `from` replaced by `to`, once it refused it.
fn refused_by_check(from: &str, to: &str) -> (String, String) {
    let server = Mock::named("a");
    let dir = fresh_temp_dir("answers-check");
    let text = config(
        &server,
        &dir.join("a.log"),
        &dir.join("robots.txt"),
        &ROUTES.replace(from, to),
    );
    let path = dir.join("check.toml");
    std::fs::write(&path, &text).unwrap();
    let (code, output) = run_binary(&["check", "-c", path.to_str().unwrap()]);
    assert_ne!(code, Some(0), "{to}: {output}");
    let _ = std::fs::remove_dir_all(dir);
    (text, output)
}

/// The line `needle` is on in `text`, from 1.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|line| line.contains(needle)).unwrap() + 1
}

#[test]
fn herdsman_check_refuses_a_bad_status_regex_or_body_file_with_key_and_line() {
    let (text, output) = refused_by_check("status = 307", "status = 305");
    let line = line_of(&text, "status = 305");
    assert!(
        output.contains(&format!("line {line}: route[3].redirect.status = 305:")),
        "{output}"
    );
    let (text, output) = refused_by_check(r"(\d+)", r"(\d+");
    let line = line_of(&text, "path_regex");
    assert!(
        output.contains(&format!("line {line}: route[8].rewrite.path_regex")),
        "{output}"
    );
    assert!(output.contains("unclosed group"), "{output}");
    // The robots.txt of `refused_by_check` is never written.
    let (text, output) = refused_by_check("\"ROBOTS\"", "\"ROBOTS\"");
    let line = line_of(&text, "body_file");
    assert!(
        output.contains(&format!("line {line}: route[5].respond.body_file")),
        "{output}"
    );
    assert!(output.contains("cannot read it"), "{output}");
    let (_, output) = refused_by_check("to = \"/t{path}\"", "to = \"/t{paht}\"");
    assert!(
        output.contains("route[3].redirect.to = \"/t{paht}\": unknown variable {paht}"),
        "{output}"
    );
}

#[test]
fn a_reload_with_a_bad_rule_keeps_the_old_rules_running() {
    let (server, dir, proxy) = start("answers-reload");
    let robots = dir.join("robots.txt");
    let broken = config(
        &server,
        &dir.join("access.log"),
        &robots,
        &ROUTES.replace("status = 301", "status = 200"),
    );
    let error = proxy
        .reload_with(&broken)
        .expect_err("a redirect with status 200 was accepted");
    assert!(
        error.to_string().contains("route[0].redirect.status = 200"),
        "{error}"
    );
    let old = proxy.get_from_host("example.test", "/old/x", "");
    assert_eq!(old.status(), 301);
    // A good reload applies at once: the same route now answers 308.
    let changed = config(
        &server,
        &dir.join("access.log"),
        &robots,
        &ROUTES.replace("status = 301", "status = 308"),
    );
    proxy.reload_with(&changed).expect("a valid config");
    let new = proxy.get_from_host("example.test", "/old/x", "");
    assert_eq!(new.status(), 308);
    let _ = std::fs::remove_dir_all(dir);
}
