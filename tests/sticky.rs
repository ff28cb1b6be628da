//! Sticky sessions as a user meets them over real sockets: signed cookies kept for 1,000 requests
//! and while the pool changes, refused when forged, tampered, malformed or signed with another
//! key, kept across a reload and a restart with the same `key_env`; the server's own Set-Cookie
//! lines beside herdsman's; server states (drain, maint, test) and weight 0; and clients of two
//! sticky pools.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use common::*;
use herdsman::config::ServerState;

/// A client that keeps the sticky cookie the way a browser's cookie jar does: whatever the last
/// `Set-Cookie` gave it, sent with every request.
struct JarClient {
    addr: SocketAddr,
    cookie: Option<String>,
    /// The keep-alive connection, when requests reuse one.
    conn: Option<Conn>,
    /// Responses that set the cookie.
    cookies_set: usize,
}

impl JarClient {
    fn new(addr: SocketAddr) -> JarClient {
        JarClient {
            addr,
            cookie: None,
            conn: None,
            cookies_set: 0,
        }
    }

    /// GET `path` on the kept connection (`keep_alive`) or on a new one closed after it; returns
    /// who answered.
    fn get(&mut self, path: &str, keep_alive: bool) -> String {
        let mut extra = self
            .cookie
            .as_ref()
            .map(|value| format!("Cookie: theme=dark; {STICKY}={value}; lang=en\r\n"))
            .unwrap_or_default();
        let response = if keep_alive {
            let addr = self.addr;
            let conn = self.conn.get_or_insert_with(|| Conn::connect(addr));
            conn.roundtrip(&get_request_to("app.test", path, &extra))
        } else {
            extra.push_str("Connection: close\r\n");
            Conn::connect(self.addr).roundtrip(&get_request_to("app.test", path, &extra))
        };
        if response.says_close() {
            self.conn = None;
        }
        if let Some(value) = sticky_cookie_set(&response) {
            self.cookie = Some(value);
            self.cookies_set += 1;
        }
        answered_by(&response)
    }
}

/// Sets a process-wide environment variable of this test's own (so tests running at once do not
/// meet) to `secret`, for `key_env`; returns its name.
fn secret_variable(label: &str, secret: &str) -> String {
    let name = format!("HERDSMAN_TEST_KEY_{}_{label}", std::process::id());
    std::env::set_var(&name, secret);
    name
}

/// Unpadded base64url (RFC 4648 §5), the encoding of herdsman's cookie values.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let group = chunk
            .iter()
            .enumerate()
            .fold(0u32, |group, (i, &b)| group | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(group >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// `text` with its 11th character changed (to another base64url symbol: the value stays well
/// formed; only its signature is wrong).
fn one_character_changed(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    bytes[10] = if bytes[10] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

#[test]
fn a_cookie_jar_keeps_a_client_on_one_server_for_a_thousand_requests() {
    let names = ["a", "b", "c"];
    let (mocks, herd) = app_pool_of(names, "", Some(""));

    // Without a cookie, requests are spread: the cookie is what keeps a client in place.
    let spread: HashSet<String> = (0..3)
        .map(|_| answered_by(&herd.get_with_cookie(None)))
        .collect();
    assert_eq!(spread.len(), 3, "round-robin without cookies: {spread:?}");
    let before: Vec<usize> = mocks.iter().map(|m| m.requests().len()).collect();

    let mut client = JarClient::new(herd.addr);
    let first = client.get("/first", true);
    assert!(client.cookie.is_some(), "the first response set no cookie");
    let mut answers = Vec::new();
    for i in 0..500 {
        answers.push(client.get(&format!("/keep-alive/{i}"), true));
    }
    for i in 0..500 {
        answers.push(client.get(&format!("/new-connection/{i}"), false));
    }

    let counts = tally(&answers);
    assert_eq!(
        counts,
        HashMap::from([(first.clone(), 1000)]),
        "1,000 requests with the cookie went to"
    );
    assert_eq!(
        client.cookies_set, 1,
        "only the first response sets the cookie"
    );
    for (name, (mock, before)) in names.iter().zip(mocks.iter().zip(before)) {
        let expected = if *name == first { 1001 } else { 0 };
        assert_eq!(
            mock.requests().len() - before,
            expected,
            "requests server {name} received from the cookie holder"
        );
    }
}

#[test]
fn forged_tampered_malformed_and_foreign_cookies_are_ignored_and_replaced() {
    let names = ["a", "b", "c"];
    let mocks = named_mocks(names);
    let servers = plain(&names, &mocks);
    let ours = secret_variable("forged_ours", "our secret: 4f1c9a");
    let theirs = secret_variable("forged_theirs", "another herdsman's secret");
    let herd = Proxy::start_from_file(&pools_config(&pool_table(
        "app",
        "",
        &servers,
        Some(&format!("key_env = {ours:?}\n")),
    )));
    let other_herd = Proxy::start_from_file(&pools_config(&pool_table(
        "app",
        "",
        &servers,
        Some(&format!("key_env = {theirs:?}\n")),
    )));
    let valid = cookies_for(&herd, &names);
    let foreign = cookies_for(&other_herd, &["a"])["a"].clone();
    assert_ne!(foreign, valid["a"], "two secrets gave the same cookie");

    let (a_name, a_signature) = valid["a"].split_once('.').expect("name.signature");
    let (b_name, _) = valid["b"].split_once('.').expect("name.signature");
    let tampered = one_character_changed(a_signature);
    let bad_cookies = [
        ("random text", "q8Zr3vXw0LmNb7Tt".to_string()),
        (
            "well-formed, unsigned",
            format!("{}.{}", base64url(b"a"), base64url(&Pattern::bytes(7, 32))),
        ),
        (
            "signature with one character changed",
            format!("{a_name}.{tampered}"),
        ),
        (
            "a's cookie with b's name",
            format!("{b_name}.{a_signature}"),
        ),
        ("empty", String::new()),
        ("malformed", "abc".to_string()),
        ("signed with another key", foreign),
    ];
    for (what, bad) in bad_cookies {
        let response = herd.get_with_cookie(Some(&bad));
        let server = answered_by(&response);
        let fresh = sticky_cookie_set(&response)
            .unwrap_or_else(|| panic!("cookie {what} ({bad:?}): no fresh cookie was set"));
        assert_eq!(
            fresh, valid[&server],
            "cookie {what}: the fresh cookie is not {server}'s, who answered"
        );
        // The fresh cookie works: the client now stays with that server.
        for _ in 0..4 {
            let response = herd.get_with_cookie(Some(&fresh));
            assert_eq!(answered_by(&response), server, "after cookie {what}");
            assert_eq!(
                sticky_cookie_set(&response),
                None,
                "a valid cookie was replaced"
            );
        }
    }
}

#[test]
fn a_drained_server_keeps_its_sessions_and_maint_sends_even_those_elsewhere() {
    let names = ["a", "b", "c"];
    let (_mocks, herd) = app_pool_of(names, "", Some(""));
    let cookies = cookies_for(&herd, &names);
    let registry = herd.registry();

    registry.set_state("app", "b", ServerState::Drain).unwrap();
    // b's sessions stay, on a kept connection and on new ones.
    let mut conn = herd.connect();
    for i in 0..10 {
        let extra = format!("Cookie: {STICKY}={}\r\n", cookies["b"]);
        let response = conn.roundtrip(&get_request_to("app.test", &format!("/drain/{i}"), &extra));
        assert_eq!(answered_by(&response), "b", "b's session while draining");
        assert_eq!(sticky_cookie_set(&response), None);
        let response = herd.get_with_cookie(Some(&cookies["b"]));
        assert_eq!(answered_by(&response), "b", "b's session while draining");
    }
    // New sessions go elsewhere, with the cookie of where they went.
    for _ in 0..12 {
        let response = herd.get_with_cookie(None);
        let server = answered_by(&response);
        assert_ne!(server, "b", "a new session reached the draining server");
        assert_eq!(
            sticky_cookie_set(&response).as_ref(),
            Some(&cookies[&server])
        );
    }

    registry.set_state("app", "b", ServerState::Maint).unwrap();
    for _ in 0..6 {
        let response = herd.get_with_cookie(Some(&cookies["b"]));
        let server = answered_by(&response);
        assert_ne!(server, "b", "a session reached the server in maint");
        let fresh = sticky_cookie_set(&response)
            .unwrap_or_else(|| panic!("b's session moved to {server} without a fresh cookie"));
        assert_eq!(fresh, cookies[&server], "the fresh cookie names {server}");
        let again = herd.get_with_cookie(Some(&fresh));
        assert_eq!(answered_by(&again), server, "the fresh cookie keeps to it");
        assert_eq!(sticky_cookie_set(&again), None);
    }
    for _ in 0..6 {
        assert_ne!(answered_by(&herd.get_with_cookie(None)), "b");
    }
}

#[test]
fn weight_zero_takes_no_new_sessions_but_keeps_its_own() {
    let names = ["a", "b", "c"];
    let (_mocks, herd) = app_pool_of(names, "", Some(""));
    let cookies = cookies_for(&herd, &names);
    herd.registry().set_weight("app", "c", 0).unwrap();
    for _ in 0..12 {
        assert_ne!(
            answered_by(&herd.get_with_cookie(None)),
            "c",
            "a new session reached the weight-0 server"
        );
    }
    for _ in 0..6 {
        let response = herd.get_with_cookie(Some(&cookies["c"]));
        assert_eq!(answered_by(&response), "c", "c's session at weight 0");
        assert_eq!(sticky_cookie_set(&response), None);
    }
}

#[test]
fn a_test_server_is_reached_only_with_its_own_signed_token() {
    let (a, b, t) = (Mock::named("a"), Mock::named("b"), Mock::named("t"));
    let herd = Proxy::start_from_file(&pools_config(&pool_table(
        "app",
        "",
        &[
            ("a", a.addr, ""),
            ("t", t.addr, ", state = \"test\""),
            ("b", b.addr, ""),
        ],
        Some(""),
    )));
    let registry = herd.registry();
    let token = registry.test_token("app", "t").unwrap();
    let a_token = registry.test_token("app", "a").unwrap();
    let cookies = cookies_for(&herd, &["a", "b"]);

    let refused = [
        ("no token", String::new()),
        (
            "a wrong token",
            format!("X-Herdsman-Test: {}\r\n", base64url(&Pattern::bytes(3, 32))),
        ),
        (
            "the token one character off",
            format!("X-Herdsman-Test: {}\r\n", one_character_changed(&token)),
        ),
        ("a's token", format!("X-Herdsman-Test: {a_token}\r\n")),
        ("the server's name", "X-Herdsman-Test: t\r\n".to_string()),
    ];
    for (what, header) in refused {
        for i in 0..6 {
            let response = herd.get_from_host("app.test", &format!("/{i}"), &header);
            assert_ne!(
                answered_by(&response),
                "t",
                "a request with {what} reached the test server"
            );
        }
    }
    assert_eq!(t.requests().len(), 0, "the test server got requests");

    // With its token, every request reaches it, over one connection or many, and no cookie
    // ties the client to it — not even one that holds a's cookie.
    let header = format!("X-Herdsman-Test: {token}\r\n");
    let mut conn = herd.connect();
    for i in 0..6 {
        let response = conn.roundtrip(&get_request_to("app.test", &format!("/t/{i}"), &header));
        assert_eq!(answered_by(&response), "t");
        assert_eq!(sticky_cookie_set(&response), None, "a cookie for t was set");
        let response = herd.get_from_host("app.test", "/t", &header);
        assert_eq!(answered_by(&response), "t");
        assert_eq!(sticky_cookie_set(&response), None, "a cookie for t was set");
        let with_cookie = format!("{header}Cookie: {STICKY}={}\r\n", cookies["a"]);
        let response = herd.get_from_host("app.test", "/t", &with_cookie);
        assert_eq!(answered_by(&response), "t", "token and a's cookie");
        assert_eq!(sticky_cookie_set(&response), None, "a cookie for t was set");
    }
    assert_eq!(t.requests().len(), 18);

    // Put in the test state at run time, a is reached only with its own token too.
    registry.set_state("app", "a", ServerState::Test).unwrap();
    let before = a.requests().len();
    for i in 0..6 {
        let response = herd.get_from_host("app.test", &format!("/{i}"), "");
        assert_eq!(answered_by(&response), "b", "without a token");
        let response =
            herd.get_from_host("app.test", "/", &format!("X-Herdsman-Test: {token}\r\n"));
        assert_eq!(answered_by(&response), "t", "with t's token");
        let response =
            herd.get_from_host("app.test", "/", &format!("X-Herdsman-Test: {a_token}\r\n"));
        assert_eq!(answered_by(&response), "a", "with a's token");
        assert_eq!(sticky_cookie_set(&response), None, "a cookie for a was set");
    }
    assert_eq!(a.requests().len() - before, 6);
}

#[test]
fn a_server_response_keeps_its_own_set_cookie_lines_and_gets_a_third() {
    let server = Mock::start(|ex| {
        ex.read_body()?;
        ex.respond(
            200,
            &[
                ("Set-Cookie", "theme=dark; Path=/"),
                ("X-Server", "a"),
                ("Set-Cookie", "lang=en, fr; Max-Age=60"),
            ],
            b"a",
        )?;
        Ok(Flow::KeepAlive)
    });
    let herd = Proxy::start_from_file(&pools_config(&pool_table(
        "app",
        "",
        &[("a", server.addr, "")],
        Some("max_age = \"1h\"\n"),
    )));

    let response = herd.get_with_cookie(None);
    assert_eq!(answered_by(&response), "a");
    let text = String::from_utf8_lossy(&response.head.raw).into_owned();
    let lines: Vec<&str> = text.split("\r\n").collect();
    let set_cookie_lines: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|line| line.to_ascii_lowercase().starts_with("set-cookie:"))
        .collect();
    assert_eq!(set_cookie_lines.len(), 3, "Set-Cookie lines in:\n{text}");
    assert_eq!(
        set_cookie_lines[0], "Set-Cookie: theme=dark; Path=/",
        "{text}"
    );
    assert_eq!(
        set_cookie_lines[1], "Set-Cookie: lang=en, fr; Max-Age=60",
        "{text}"
    );
    let ours = set_cookie_lines[2];
    let value = ours
        .strip_prefix(&format!("Set-Cookie: {STICKY}="))
        .unwrap_or_else(|| panic!("the third Set-Cookie line is not herdsman's: {text}"));
    let (value, attributes) = value.split_once(';').unwrap();
    assert_eq!(
        attributes, " Path=/; HttpOnly; SameSite=Lax; Max-Age=3600",
        "{text}"
    );
    // herdsman's line comes after every line the server sent.
    let position = |line: &str| lines.iter().position(|l| *l == line).unwrap();
    for server_line in [
        "Set-Cookie: theme=dark; Path=/",
        "X-Server: a",
        "Set-Cookie: lang=en, fr; Max-Age=60",
        "Content-Length: 1",
    ] {
        assert!(
            position(server_line) < position(ours),
            "herdsman's cookie line comes before {server_line:?}:\n{text}"
        );
    }

    // With the cookie, the server's two lines still come through, and no third.
    let response = herd.get_with_cookie(Some(value));
    assert_eq!(answered_by(&response), "a");
    assert_eq!(
        response.head.header_all("set-cookie"),
        ["theme=dark; Path=/", "lang=en, fr; Max-Age=60"],
        "{}",
        String::from_utf8_lossy(&response.head.raw)
    );
}

#[test]
fn a_cookie_survives_a_restart_and_a_reload_with_the_same_key_env_secret() {
    let names = ["a", "b", "c"];
    let mocks = named_mocks(names);
    let variable = secret_variable("restart", "kept across restarts: 9d2e");
    let text = pools_config(&pool_table(
        "app",
        "",
        &plain(&names, &mocks),
        Some(&format!("key_env = {variable:?}\n")),
    ));
    let first = Proxy::start_from_file(&text);
    let cookies = cookies_for(&first, &names);
    first.stop_and_wait();

    let second = Proxy::start_from_file(&text);
    for name in names {
        for _ in 0..4 {
            let response = second.get_with_cookie(Some(&cookies[name]));
            assert_eq!(
                answered_by(&response),
                name,
                "{name}'s cookie after a restart"
            );
            assert_eq!(
                sticky_cookie_set(&response),
                None,
                "a valid cookie was replaced"
            );
        }
    }
    second.registry().reload().expect("reload of the same file");
    for name in names {
        let response = second.get_with_cookie(Some(&cookies[name]));
        assert_eq!(
            answered_by(&response),
            name,
            "{name}'s cookie after a reload"
        );
        assert_eq!(
            sticky_cookie_set(&response),
            None,
            "a valid cookie was replaced"
        );
    }
}

#[test]
fn without_key_env_a_cookie_does_not_survive_a_restart() {
    let names = ["a", "b"];
    let mocks = named_mocks(names);
    let text = pools_config(&pool_table("app", "", &plain(&names, &mocks), Some("")));
    let first = Proxy::start_from_file(&text);
    let cookies = cookies_for(&first, &names);
    first.stop_and_wait();

    let second = Proxy::start_from_file(&text);
    for name in names {
        let response = second.get_with_cookie(Some(&cookies[name]));
        answered_by(&response);
        let fresh = sticky_cookie_set(&response);
        assert!(
            fresh.is_some(),
            "{name}'s cookie from before the restart was honoured"
        );
        assert_ne!(
            fresh.as_ref(),
            Some(&cookies[name]),
            "the key did not change"
        );
    }
}

/// A browser keeps one cookie per name: two sticky pools sharing one would undo each other, so
/// the config check refuses that (src/config/check/), and with a cookie each, a client of both
/// pools stays on one server in each.
#[test]
fn a_client_of_two_sticky_pools_stays_on_one_server_in_each() {
    let [a, b, x, y] = named_mocks(["a", "b", "x", "y"]);
    let routes = "[[route]]\npath_prefix = \"/api/\"\npool = \"api\"\n\n";
    let text = |api_cookie: &str| {
        pools_config(&format!(
            "{routes}{}{}",
            pool_table("app", "", &[("a", a.addr, ""), ("b", b.addr, "")], Some("")),
            pool_table(
                "api",
                "",
                &[("x", x.addr, ""), ("y", y.addr, "")],
                Some(api_cookie)
            )
        ))
    };
    let clash = herdsman::Config::from_toml(&text(""), "t").unwrap_err();
    assert_eq!(clash.problems[0].key, "pool[1].sticky.cookie", "{clash}");

    let herd = Proxy::start_from_file(&text("cookie = \"HERDSMAN_API\"\n"));
    let mut jar: HashMap<String, String> = HashMap::new();
    let (mut pages, mut api, mut set) = (HashSet::new(), HashSet::new(), 0);
    for i in 0..20 {
        let path = if i % 2 == 0 {
            format!("/page/{i}")
        } else {
            format!("/api/{i}")
        };
        let cookies: Vec<String> = jar.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let extra = if cookies.is_empty() {
            "Connection: close\r\n".to_string()
        } else {
            format!("Cookie: {}\r\nConnection: close\r\n", cookies.join("; "))
        };
        let response = herd
            .connect()
            .roundtrip(&get_request_to("app.test", &path, &extra));
        let server = answered_by(&response);
        for line in response.head.header_all("set-cookie") {
            let pair = line.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            jar.insert(name.to_string(), value.to_string());
            set += 1;
        }
        if i % 2 == 0 {
            pages.insert(server)
        } else {
            api.insert(server)
        };
    }
    assert_eq!(
        (pages.len(), api.len(), set),
        (1, 1, 2),
        "pages went to {pages:?}, API calls to {api:?}; {set} cookies set in 20 responses"
    );
}
