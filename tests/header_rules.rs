//! Header rules and request ids over real sockets: fields set, added and removed towards a
//! server of either protocol (with variables: the client's address as `[real_ip]` makes it, the
//! route, host, scheme), and towards the client (a server's Server and X-Powered-By gone, security fields
//! set, a route's HSTS over its listener's), for HTTP/1.1 and HTTP/2 clients and for answers
//! from the cache; request ids made, unique, kept from a trusted peer and replaced from anyone
//! else, returned when asked (in herdsman's own answers too: errors, a route's redirect, which
//! may name it, and fixed response) and in the access log; a rule that cannot compile refused on
//! reload while the old rules keep running.

mod common;
// Shared with tests/http2_servers.rs, which uses all of it.
#[allow(dead_code)]
#[path = "common/h2_server.rs"]
mod h2_server;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use common::*;
use h2_server::{H2Options, H2Server};

/// A server that says too much of itself, and echoes nothing but its answer.
fn chatty_server() -> Mock {
    Mock::start(|ex| {
        ex.read_body()?;
        let headers = [
            ("Server", "mockd/1.0"),
            ("X-Powered-By", "PHP/5.1"),
            ("X-Kept", "1"),
            ("Cache-Control", "max-age=60"),
        ];
        ex.respond(200, &headers, b"ok")?;
        Ok(Flow::KeepAlive)
    })
}

const RULES: &str = r#"
[real_ip]
trusted = ["127.0.0.0/8"]

[headers.request]
set = { "X-Client-Ip" = "{client}", "X-Route" = "{route}", "X-Seen" = "{method} {scheme}://{host}{target} {path} [{query}]" }
add = { "X-Via" = "herdsman" }
remove = ["X-Debug"]

[headers.response]
set = { "X-Frame-Options" = "DENY", "X-Answered-By" = "{server} for {client} on {route}" }
remove = ["Server", "X-Powered-By"]

[[route]]
path_prefix = "/secure/"
pool = "app"
[route.headers.response]
set = { "Strict-Transport-Security" = "max-age=63072000" }
"#;

/// herdsman in front of `server`, its pool `app`, with `rest` (routes, rules) in the config.
fn behind(server: &Mock, rest: &str, listener: &str) -> Proxy {
    let text = format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n{listener}\n\
         {rest}\n[[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
        server.addr
    );
    Proxy::start_from_file(&text)
}

#[test]
fn request_fields_are_set_added_and_removed_with_their_variables() {
    let server = chatty_server();
    let proxy = behind(&server, RULES, "");
    let mut conn = proxy.connect();
    let request =
        b"GET /secure/x?y=1 HTTP/1.1\r\nHost: app.test\r\nX-Forwarded-For: 203.0.113.9\r\n\
                    X-Debug: 1\r\nX-Client-Ip: forged\r\nX-Via: client\r\n\r\n";
    assert_eq!(conn.roundtrip(request).status(), 200);
    let other = b"GET /plain HTTP/1.1\r\nHost: other.test\r\n\r\n";
    assert_eq!(conn.roundtrip(other).status(), 200);
    let heads = server.heads();
    let head = &heads[0];
    // The client as [real_ip] names it, not the peer; the client's own X-Client-Ip gone.
    assert_eq!(head.header_all("x-client-ip"), ["203.0.113.9"]);
    assert_eq!(head.header("x-route"), Some("route[0]"));
    assert_eq!(
        head.header("x-seen"),
        Some("GET http://app.test/secure/x?y=1 /secure/x [y=1]")
    );
    // Added beside the client's own; removed; herdsman's own fields as ever.
    assert_eq!(head.header_all("x-via"), ["client", "herdsman"]);
    assert!(!head.has("x-debug"));
    assert_eq!(head.header("x-forwarded-proto"), Some("http"));
    // No route took the second: the top level's rules, and an empty route.
    assert_eq!(heads[1].header("x-route"), Some(""));
    assert_eq!(heads[1].header("x-client-ip"), Some("127.0.0.1"));
}

#[test]
fn answers_lose_what_servers_say_of_themselves_and_gain_security_fields() {
    let server = chatty_server();
    let proxy = behind(&server, RULES, "");
    let mut conn = proxy.connect();
    let response = conn.roundtrip(b"GET /plain HTTP/1.1\r\nHost: app.test\r\n\r\n");
    assert_eq!(response.status(), 200);
    assert!(!response.head.has("server"), "{:?}", response.head);
    assert!(!response.head.has("x-powered-by"));
    assert_eq!(response.header("x-kept"), Some("1"));
    assert_eq!(response.header("x-frame-options"), Some("DENY"));
    // No route: an empty {route} (the space before it is the value's end, read as trimmed).
    assert_eq!(response.header("x-answered-by"), Some("a for 127.0.0.1 on"));
    assert!(!response.head.has("strict-transport-security"));
    assert_eq!(response.body_text(), "ok");
    // A route's own, after the top level's.
    let response = conn.roundtrip(b"GET /secure/ HTTP/1.1\r\nHost: app.test\r\n\r\n");
    assert_eq!(
        response.header("strict-transport-security"),
        Some("max-age=63072000")
    );
    assert_eq!(response.header("x-frame-options"), Some("DENY"));
    assert_eq!(
        response.header("x-answered-by"),
        Some("a for 127.0.0.1 on route[0]")
    );
}

#[test]
fn a_route_s_hsts_replaces_its_tls_listener_s() {
    let server = chatty_server();
    let cert = CertFiles::issue("header-rules-hsts", &["app.test"]);
    let tls = tls_table(&[&cert], "hsts = \"max-age=31536000\"");
    let proxy = behind(&server, RULES, &tls);
    let mut conn = TlsConn::connect(proxy.addr, "app.test");
    let response = conn.roundtrip(b"GET /secure/ HTTP/1.1\r\nHost: app.test\r\n\r\n");
    assert_eq!(
        response.head.header_all("strict-transport-security"),
        ["max-age=63072000"]
    );
    let response = conn.roundtrip(b"GET /plain HTTP/1.1\r\nHost: app.test\r\n\r\n");
    assert_eq!(
        response.head.header_all("strict-transport-security"),
        ["max-age=31536000"]
    );
    // {scheme} over TLS.
    let heads = server.heads();
    assert_eq!(
        heads[0].header("x-seen"),
        Some("GET https://app.test/secure/ /secure/ []")
    );
}

#[test]
fn an_http2_client_gets_the_answer_s_rules_too() {
    let server = chatty_server();
    let rules = format!("{RULES}\n[request_id]\nrespond = true\n");
    let proxy = behind(&server, &rules, "h2c = true");
    let (status, out) = curl(
        &["--http2-prior-knowledge", "--dump-header", "-"],
        &format!("http://{}/secure/h2", proxy.addr),
        None,
    );
    assert_eq!(status, "2 200");
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert!(text.contains("x-frame-options: deny\r\n"), "{text}");
    assert!(text.contains("strict-transport-security: max-age=63072000\r\n"));
    assert!(
        !text.contains("\r\nserver:") && !text.contains("x-powered-by"),
        "{text}"
    );
    // Its request reached the server with the request's rules.
    let heads = server.heads();
    assert_eq!(heads[0].header("x-route"), Some("route[0]"));
    assert_eq!(heads[0].header_all("x-via"), ["herdsman"]);
    // Its id, made, passed on and returned.
    let id = heads[0].header("x-request-id").expect("an id");
    assert!(is_made_id(id), "{id}");
    assert!(text.contains(&format!("x-request-id: {id}\r\n")), "{text}");
}

#[test]
fn an_http2_server_gets_the_request_s_rules_too() {
    let server = H2Server::start(H2Options::default());
    let text = format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
         {RULES}\n[request_id]\n\n[[pool]]\nname = \"app\"\nprotocol = \"h2c\"\n\
         servers = [{{ name = \"a\", addr = \"{}\" }}]\n",
        server.addr
    );
    let proxy = Proxy::start_from_file(&text);
    let mut conn = proxy.connect();
    let request = b"GET /secure/h2 HTTP/1.1\r\nHost: app.test\r\nX-Debug: 1\r\n\r\n";
    let response = conn.roundtrip(request);
    assert_eq!(response.status(), 200);
    assert_eq!(response.header("x-frame-options"), Some("DENY"));
    let seen = server.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.field("x-route"), Some("route[0]"));
    assert_eq!(seen.field("x-via"), Some("herdsman"));
    assert_eq!(seen.field("x-debug"), None);
    assert!(
        seen.field("x-request-id").is_some_and(is_made_id),
        "{seen:?}"
    );
}

#[test]
fn an_answer_from_the_cache_gets_the_rules_as_it_goes_and_is_stored_without_them() {
    let server = chatty_server();
    let rules = format!("{RULES}\n[request_id]\nrespond = true\n");
    let text = format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
         {rules}\n[[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n\
         [pool.cache]\n\n[cache]\nmemory = \"1MiB\"\n",
        server.addr
    );
    let proxy = Proxy::start_from_file(&text);
    let mut conn = proxy.connect();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let response = conn.roundtrip(b"GET /cached HTTP/1.1\r\nHost: app.test\r\n\r\n");
        assert_eq!(response.status(), 200);
        assert_eq!(response.head.header_all("x-frame-options"), ["DENY"]);
        assert!(!response.head.has("server"));
        // One id each, its own.
        let id = response.head.header_all("x-request-id");
        assert_eq!(id.len(), 1, "{:?}", response.head);
        ids.push(id[0].to_string());
    }
    assert_eq!(server.heads().len(), 1, "the later ones are hits");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3);
}

/// `[request_id]` with `settings`, an access log at `log`.
fn with_request_ids(server: &Mock, settings: &str, log: &Path) -> Proxy {
    let listener = format!("access_log = \"{}\"", log.display());
    behind(server, &format!("[request_id]\n{settings}\n"), &listener)
}

fn is_made_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[test]
fn request_ids_are_made_unique_passed_on_returned_and_logged() {
    let server = Mock::named("a");
    let log = fresh_temp_dir("header-rules-ids").join("access.log");
    let proxy = with_request_ids(&server, "respond = true\ntrusted = []", &log);
    let mut conn = proxy.connect();
    let mut returned = Vec::new();
    for n in 0..1000 {
        // A client not trusted cannot choose its id.
        let forged = if n == 0 { "X-Request-Id: mine\r\n" } else { "" };
        let request = format!("GET /{n} HTTP/1.1\r\nHost: app.test\r\n{forged}\r\n");
        let response = conn.roundtrip(request.as_bytes());
        assert_eq!(response.status(), 200);
        returned.push(response.header("x-request-id").unwrap().to_string());
    }
    let seen: Vec<String> = server
        .heads()
        .iter()
        .map(|head| {
            let ids = head.header_all("x-request-id");
            assert_eq!(ids.len(), 1, "{head:?}");
            ids[0].to_string()
        })
        .collect();
    assert_eq!(seen, returned, "the client gets the id its server got");
    assert!(seen.iter().all(|id| is_made_id(id)), "{:?}", &seen[..3]);
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 1000);
    // In the access log, each line its own.
    let first = format!(" request_id={}", seen[0]);
    let last = format!(" request_id={}", seen[999]);
    eventually(Duration::from_secs(5), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains(&first) && text.contains(&last)
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines().next().unwrap().ends_with(&first),
        "{text:.300}"
    );
    assert!(text.contains(&last));
}

#[test]
fn herdsman_s_own_answers_return_the_id_but_take_no_rules() {
    let text = format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
         {RULES}\n[request_id]\nrespond = true\n\n[[route]]\npath_prefix = \"/denied/\"\n\
         pool = \"app\"\n[route.access]\ndeny = [\"127.0.0.0/8\"]\n\n\
         [[route]]\npath_prefix = \"/moved/\"\n[route.redirect]\n\
         to = \"/new/{{path_rest}}?id={{request_id}}\"\n\n\
         [[route]]\npath_prefix = \"/maintenance\"\n[route.respond]\nstatus = 503\n\
         body = \"soon\"\n\n\
         [[pool]]\nname = \"app\"\nretries = 0\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
        refusing_addr()
    );
    let proxy = Proxy::start_from_file(&text);
    for (path, status) in [("/down", 502), ("/denied/x", 403)] {
        let response = proxy.get(path);
        assert_eq!(response.status(), status, "{path}");
        let id = response.header("x-request-id").expect("an id");
        assert!(is_made_id(id), "{id}");
        assert!(!response.head.has("x-frame-options"), "{path}");
        assert!(
            !response.body_text().is_empty(),
            "{path}: its body still follows"
        );
    }
    // A route's own answers too; a redirect may name the id in its Location.
    let fixed = proxy.get("/maintenance");
    assert_eq!(fixed.status(), 503);
    assert!(is_made_id(fixed.header("x-request-id").expect("an id")));
    assert!(!fixed.head.has("x-frame-options"));
    assert_eq!(fixed.body_text(), "soon");
    let moved = proxy.get("/moved/a");
    assert_eq!(moved.status(), 302);
    let id = moved.header("x-request-id").expect("an id");
    assert!(is_made_id(id), "{id}");
    let location = format!("/new/a?id={id}");
    assert_eq!(moved.header("location"), Some(location.as_str()));
    assert!(!moved.head.has("x-frame-options"));
}

#[test]
fn a_trusted_peer_s_request_id_is_kept() {
    let server = Mock::named("a");
    let log = fresh_temp_dir("header-rules-trusted").join("access.log");
    // The peer is 127.0.0.1: trusted, by [request_id]'s own list.
    let proxy = with_request_ids(
        &server,
        "header = \"X-Trace\"\ntrusted = [\"127.0.0.0/8\"]",
        &log,
    );
    let mut conn = proxy.connect();
    let response = conn.roundtrip(b"GET / HTTP/1.1\r\nHost: a\r\nX-Trace: edge-42\r\n\r\n");
    // Not returned unless asked.
    assert!(!response.head.has("x-trace"));
    conn.roundtrip(b"GET / HTTP/1.1\r\nHost: a\r\nX-Trace: bad id with spaces\r\n\r\n");
    let heads = server.heads();
    assert_eq!(heads[0].header_all("x-trace"), ["edge-42"]);
    let replaced = heads[1].header_all("x-trace");
    assert!(
        replaced.len() == 1 && is_made_id(replaced[0]),
        "{replaced:?}"
    );
    eventually(Duration::from_secs(5), || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains(" request_id=edge-42"))
    });
}

#[test]
fn a_rule_that_cannot_compile_is_refused_on_reload_and_the_old_rules_keep_running() {
    let server = chatty_server();
    let text = |rules: &str| {
        format!(
            "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n\
             {rules}\n[[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
            server.addr
        )
    };
    let proxy = Proxy::start_from_file(&text(RULES));
    let broken = RULES.replace("{route}\",", "{routes}\",");
    let refused = proxy.reload_with(&text(&broken));
    let message = format!("{refused:?}");
    assert!(
        message.contains("headers.request.set.X-Route") && message.contains("{routes}"),
        "{message}"
    );
    let response = proxy.get("/plain");
    assert_eq!(response.header("x-frame-options"), Some("DENY"));
    // A reload that changes the rules applies them to new requests.
    let changed = RULES.replace("\"DENY\"", "\"SAMEORIGIN\"");
    proxy.reload_with(&text(&changed)).expect("a valid reload");
    let response = proxy.get("/plain");
    assert_eq!(response.header("x-frame-options"), Some("SAMEORIGIN"));
}
