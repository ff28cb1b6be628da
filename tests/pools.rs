//! Pools as a user meets them over real sockets: signed sticky cookies (kept for 1,000 requests
//! and while the pool changes, refused when forged, tampered, malformed or signed with another
//! key, kept across a reload and a restart with the same `key_env`), the server's own Set-Cookie
//! lines beside herdsman's, server states (drain, maint, test) and weight 0, routes (host,
//! wildcard, path prefix, first match wins), `balance = "hash"` on a header or a cookie, servers
//! added and removed under full load, and reloads (a broken file changes nothing, a valid one
//! applies, run-time states, weights and servers survive), absolute-form targets, and clients of
//! two sticky pools.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use herdsman::config::ServerState;
use herdsman::upstream::registry::{ChangeError, NewServer, Registry};

// ---------------------------------------------------------------------------------------------
// herdsman from a config file

/// herdsman running in this process from a config file (so that a reload has a file to read).
/// Dropping it stops it (bounded wait).
struct Herd {
    server: Option<herdsman::Server>,
    /// Where the "web" listener accepts connections.
    addr: SocketAddr,
    /// The config file; rewrite it, then reload.
    path: PathBuf,
}

impl Herd {
    fn start(text: &str) -> Herd {
        let path = write_temp("pools.toml", text);
        let config = herdsman::Config::load(&path)
            .unwrap_or_else(|error| panic!("config refused: {error}\n{text}"));
        let server =
            herdsman::Server::start_with_file(config, Some(path.clone())).expect("herdsman starts");
        let addr = server.listener_addr("web").expect("the web listener");
        Herd {
            server: Some(server),
            addr,
            path,
        }
    }

    fn registry(&self) -> Arc<Registry> {
        self.server.as_ref().expect("running").registry()
    }

    fn connect(&self) -> Conn {
        Conn::connect(self.addr)
    }

    /// GET `path` with `Host: host` and the `extra` header lines, on a new connection that asks
    /// to be closed after the response.
    fn get(&self, host: &str, path: &str, extra: &str) -> Response {
        self.connect().roundtrip(&request(
            host,
            path,
            &format!("{extra}Connection: close\r\n"),
        ))
    }

    /// GET `/` with a `Cookie: HERDSMAN=value` line (none for `None`), on a new connection.
    fn get_with_cookie(&self, cookie: Option<&str>) -> Response {
        let extra = cookie
            .map(|value| format!("Cookie: {STICKY}={value}\r\n"))
            .unwrap_or_default();
        self.get("app.test", "/", &extra)
    }

    /// Writes `text` to the config file and reloads it.
    fn reload_with(&self, text: &str) -> Result<u64, ChangeError> {
        std::fs::write(&self.path, text).unwrap();
        self.registry().reload().map(|reloaded| reloaded.generation)
    }

    /// Stops herdsman gracefully and waits for it (at most 15 s).
    fn stop(mut self) {
        let server = self.server.take().expect("running");
        assert!(
            stop_and_wait(server),
            "herdsman did not stop within 15 s of Server::stop"
        );
    }
}

impl Drop for Herd {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            if !stop_and_wait(server) && !thread::panicking() {
                panic!("herdsman did not stop within 15 s of Server::stop");
            }
        }
    }
}

/// Stops `server` and waits for it on another thread (so that a hang cannot block the test);
/// whether it stopped within 15 s.
fn stop_and_wait(server: herdsman::Server) -> bool {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        server.stop();
        server.wait();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(15)).is_ok()
}

// ---------------------------------------------------------------------------------------------
// Config text

/// The default sticky cookie's name.
const STICKY: &str = "HERDSMAN";

/// Two workers, listener "web" on 127.0.0.1:0 whose default pool is "app", then `rest` (routes
/// and pools).
fn config(rest: &str) -> String {
    format!(
        "workers = 2\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n{rest}"
    )
}

/// A `[[pool]]` table: its `settings` lines (such as `balance = "hash"\n`; round-robin when they
/// name no balance), its servers as (name, address, more inline keys such as `, weight = 3`), and
/// the body of `[pool.sticky]` when `sticky` is given (`""` for all defaults).
fn pool(
    name: &str,
    settings: &str,
    servers: &[(&str, SocketAddr, &str)],
    sticky: Option<&str>,
) -> String {
    let mut text = format!("[[pool]]\nname = {name:?}\n{settings}");
    if !settings.contains("balance") {
        text.push_str("balance = \"round-robin\"\n");
    }
    text.push_str("servers = [\n");
    for (server, addr, more) in servers {
        text.push_str(&format!(
            "  {{ name = {server:?}, addr = \"{addr}\"{more} }},\n"
        ));
    }
    text.push_str("]\n");
    if let Some(sticky) = sticky {
        text.push_str(&format!("[pool.sticky]\n{sticky}"));
    }
    text.push('\n');
    text
}

/// A server to add at run time as the config's defaults would have it: ready, weight 1, no limit.
fn ready_server(name: &str, addr: SocketAddr) -> NewServer {
    NewServer {
        name: name.into(),
        addr,
        weight: 1,
        state: ServerState::Ready,
        max_connections: 0,
    }
}

/// Sets a process-wide environment variable of this test's own (so tests running at once do not
/// meet) to `secret`, for `key_env`; returns its name.
fn secret_variable(label: &str, secret: &str) -> String {
    let name = format!("HERDSMAN_TEST_KEY_{}_{label}", std::process::id());
    std::env::set_var(&name, secret);
    name
}

/// Mocks answering with their own names.
fn named<const N: usize>(names: [&str; N]) -> [Mock; N] {
    names.map(Mock::named)
}

/// (name, address, no more keys) for each mock, named as given.
fn plain<'n>(names: &[&'n str], mocks: &[Mock]) -> Vec<(&'n str, SocketAddr, &'static str)> {
    names
        .iter()
        .zip(mocks)
        .map(|(name, mock)| (*name, mock.addr, ""))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Requests and responses

fn request(host: &str, path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n").into_bytes()
}

/// Asserts a 200 and returns the name of the server that answered (mocks answer with it).
fn answered_by(response: &Response) -> String {
    assert_eq!(
        response.status(),
        200,
        "{}",
        String::from_utf8_lossy(&response.head.raw)
    );
    response.body_text()
}

/// The value herdsman's `Set-Cookie` line gives the sticky cookie, if the response has one
/// (asserting there is at most one, and that it has exactly the attributes herdsman sets).
fn sticky_cookie_set(response: &Response) -> Option<String> {
    let prefix = format!("{STICKY}=");
    let lines: Vec<&str> = response
        .head
        .header_all("set-cookie")
        .into_iter()
        .filter(|line| line.starts_with(&prefix))
        .collect();
    assert!(lines.len() <= 1, "several sticky cookies set: {lines:?}");
    let line = lines.first()?;
    let (value, attributes) = line[prefix.len()..]
        .split_once(';')
        .unwrap_or_else(|| panic!("sticky cookie without attributes: {line:?}"));
    assert_eq!(
        attributes, " Path=/; HttpOnly; SameSite=Lax",
        "attributes of {line:?}"
    );
    assert!(!value.is_empty(), "empty sticky cookie: {line:?}");
    Some(value.to_string())
}

/// Sends requests without a cookie (each on a new connection) until each of `servers` has
/// answered one; returns the cookie each was assigned with.
fn cookies_for(herd: &Herd, servers: &[&str]) -> HashMap<String, String> {
    let mut cookies = HashMap::new();
    for _ in 0..30 {
        let response = herd.get_with_cookie(None);
        let server = answered_by(&response);
        let cookie = sticky_cookie_set(&response)
            .unwrap_or_else(|| panic!("a request without a cookie was not given one"));
        if let Some(earlier) = cookies.insert(server.clone(), cookie.clone()) {
            assert_eq!(earlier, cookie, "server {server} was given two cookies");
        }
        if servers.iter().all(|s| cookies.contains_key(*s)) {
            return cookies;
        }
    }
    panic!("30 requests did not reach each of {servers:?}: got cookies for {cookies:?}");
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

fn tally(answers: &[String]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for answer in answers {
        *counts.entry(answer.clone()).or_insert(0) += 1;
    }
    counts
}

/// (name, address, state, weight) of every server of every pool, and the generation: what a
/// reload that changes nothing must leave as it was.
fn pools_summary(registry: &Registry) -> (u64, Vec<(String, String, String, u32)>) {
    let view = registry.pools();
    let servers = view
        .pools
        .iter()
        .flat_map(|pool| {
            pool.servers.iter().map(move |server| {
                (
                    format!("{}/{}", pool.name, server.name),
                    server.addr.clone(),
                    server.state.to_string(),
                    server.weight,
                )
            })
        })
        .collect();
    (view.generation, servers)
}

/// Each server of pool "app" as (name, state, weight).
fn app_servers(registry: &Registry) -> Vec<(String, String, u32)> {
    registry
        .pools()
        .pools
        .iter()
        .find(|pool| pool.name == "app")
        .expect("pool app")
        .servers
        .iter()
        .map(|server| (server.name.clone(), server.state.to_string(), server.weight))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Sticky sessions

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
            conn.roundtrip(&request("app.test", path, &extra))
        } else {
            extra.push_str("Connection: close\r\n");
            Conn::connect(self.addr).roundtrip(&request("app.test", path, &extra))
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

#[test]
fn a_cookie_jar_keeps_a_client_on_one_server_for_a_thousand_requests() {
    let names = ["a", "b", "c"];
    let mocks = named(names);
    let herd = Herd::start(&config(&pool("app", "", &plain(&names, &mocks), Some(""))));

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
    let mocks = named(names);
    let servers = plain(&names, &mocks);
    let ours = secret_variable("forged_ours", "our secret: 4f1c9a");
    let theirs = secret_variable("forged_theirs", "another herdsman's secret");
    let herd = Herd::start(&config(&pool(
        "app",
        "",
        &servers,
        Some(&format!("key_env = {ours:?}\n")),
    )));
    let other_herd = Herd::start(&config(&pool(
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
    let mocks = named(names);
    let herd = Herd::start(&config(&pool("app", "", &plain(&names, &mocks), Some(""))));
    let cookies = cookies_for(&herd, &names);
    let registry = herd.registry();

    registry.set_state("app", "b", ServerState::Drain).unwrap();
    // b's sessions stay, on a kept connection and on new ones.
    let mut conn = herd.connect();
    for i in 0..10 {
        let extra = format!("Cookie: {STICKY}={}\r\n", cookies["b"]);
        let response = conn.roundtrip(&request("app.test", &format!("/drain/{i}"), &extra));
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
    let mocks = named(names);
    let herd = Herd::start(&config(&pool("app", "", &plain(&names, &mocks), Some(""))));
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
    let herd = Herd::start(&config(&pool(
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
            let response = herd.get("app.test", &format!("/{i}"), &header);
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
        let response = conn.roundtrip(&request("app.test", &format!("/t/{i}"), &header));
        assert_eq!(answered_by(&response), "t");
        assert_eq!(sticky_cookie_set(&response), None, "a cookie for t was set");
        let response = herd.get("app.test", "/t", &header);
        assert_eq!(answered_by(&response), "t");
        assert_eq!(sticky_cookie_set(&response), None, "a cookie for t was set");
        let with_cookie = format!("{header}Cookie: {STICKY}={}\r\n", cookies["a"]);
        let response = herd.get("app.test", "/t", &with_cookie);
        assert_eq!(answered_by(&response), "t", "token and a's cookie");
        assert_eq!(sticky_cookie_set(&response), None, "a cookie for t was set");
    }
    assert_eq!(t.requests().len(), 18);

    // Put in the test state at run time, a is reached only with its own token too.
    registry.set_state("app", "a", ServerState::Test).unwrap();
    let before = a.requests().len();
    for i in 0..6 {
        let response = herd.get("app.test", &format!("/{i}"), "");
        assert_eq!(answered_by(&response), "b", "without a token");
        let response = herd.get("app.test", "/", &format!("X-Herdsman-Test: {token}\r\n"));
        assert_eq!(answered_by(&response), "t", "with t's token");
        let response = herd.get("app.test", "/", &format!("X-Herdsman-Test: {a_token}\r\n"));
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
    let herd = Herd::start(&config(&pool(
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
    let mocks = named(names);
    let variable = secret_variable("restart", "kept across restarts: 9d2e");
    let text = config(&pool(
        "app",
        "",
        &plain(&names, &mocks),
        Some(&format!("key_env = {variable:?}\n")),
    ));
    let first = Herd::start(&text);
    let cookies = cookies_for(&first, &names);
    first.stop();

    let second = Herd::start(&text);
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
    let mocks = named(names);
    let text = config(&pool("app", "", &plain(&names, &mocks), Some("")));
    let first = Herd::start(&text);
    let cookies = cookies_for(&first, &names);
    first.stop();

    let second = Herd::start(&text);
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

// ---------------------------------------------------------------------------------------------
// Routing and hashing

#[test]
fn routes_pick_the_pool_by_host_and_path_and_the_first_match_wins() {
    let names = ["app", "api", "static", "wild", "adm"];
    let mocks = named(names);
    let routes = "\
[[route]]
host = \"api.example.com\"
pool = \"api\"

[[route]]
host = \"*.example.com\"
path_prefix = \"/static/\"
pool = \"static\"

[[route]]
host = \"*.example.com\"
pool = \"wild\"

[[route]]
path_prefix = \"/admin/\"
pool = \"adm\"

";
    let pools: String = names
        .iter()
        .zip(&mocks)
        .map(|(name, mock)| pool(name, "", &[(name, mock.addr, "")], None))
        .collect();
    let herd = Herd::start(&config(&format!("{routes}{pools}")));

    let cases = [
        ("api.example.com", "/v1/users", "api"),
        ("API.Example.COM:8080", "/v1/users", "api"),
        // Route 2 matches too, but route 1 comes first.
        ("api.example.com", "/static/logo.png", "api"),
        ("www.example.com", "/static/logo.png", "static"),
        ("WWW.EXAMPLE.COM:8080", "/static/logo.png", "static"),
        ("www.example.com", "/stat", "wild"),
        ("Shop.Eu.Example.Com:8080", "/", "wild"),
        // Route 3 matches before route 4.
        ("www.example.com", "/admin/users", "wild"),
        ("other.org", "/admin/users", "adm"),
        ("other.org:8080", "/admin/", "adm"),
        // "/admin" is not under the prefix "/admin/".
        ("other.org", "/admin", "app"),
        // The wildcard wants a name under example.com, not example.com itself or a look-alike.
        ("example.com", "/", "app"),
        ("notexample.com", "/static/x", "app"),
        ("www.example.com.evil.org", "/", "app"),
        ("other.org", "/", "app"),
    ];
    let mut conn = herd.connect();
    for (host, path, expected) in cases {
        let response = herd.get(host, path, "");
        assert_eq!(
            answered_by(&response),
            expected,
            "Host: {host}, path {path}"
        );
        // The same on one kept connection, host after host.
        let response = conn.roundtrip(&request(host, path, ""));
        assert_eq!(
            answered_by(&response),
            expected,
            "Host: {host}, path {path} (keep-alive)"
        );
    }
    // An HTTP/1.0 request may have no Host: host routes cannot match it, path routes still do.
    for (path, expected) in [("/admin/users", "adm"), ("/static/x", "app")] {
        let response = herd
            .connect()
            .roundtrip(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes());
        assert_eq!(
            answered_by(&response),
            expected,
            "HTTP/1.0 {path} without Host"
        );
    }
}

#[test]
fn hash_on_a_header_sends_each_value_to_one_server_and_spreads_values() {
    let names = ["a", "b", "c"];
    let mocks = named(names);
    let herd = Herd::start(&config(&pool(
        "app",
        "balance = \"hash\"\nhash_key = \"header:X-User\"\n",
        &plain(&names, &mocks),
        None,
    )));

    let mut conn = herd.connect();
    let mut server_of_user: HashMap<String, String> = HashMap::new();
    for user in 0..50 {
        let header = format!("X-User: user-{user}@example.com\r\n");
        let mut answers = Vec::new();
        for i in 0..5 {
            // Alternate new connections and one kept connection (which may sit on either
            // worker): the choice must not depend on the connection.
            let response = if i % 2 == 0 {
                herd.get("app.test", &format!("/u/{i}"), &header)
            } else {
                conn.roundtrip(&request("app.test", &format!("/u/{i}"), &header))
            };
            answers.push(answered_by(&response));
        }
        let first = answers[0].clone();
        assert!(
            answers.iter().all(|a| *a == first),
            "user-{user} went to {answers:?}"
        );
        server_of_user.insert(format!("user-{user}"), first);
    }
    let used = tally(&server_of_user.values().cloned().collect::<Vec<_>>());
    assert!(
        used.len() > 1,
        "50 users all hashed to one server: {used:?}"
    );
    // The header name is matched whatever its case.
    for user in 0..10 {
        let header = format!("x-user: user-{user}@example.com\r\n");
        let response = herd.get("app.test", "/lower", &header);
        assert_eq!(
            answered_by(&response),
            server_of_user[&format!("user-{user}")],
            "user-{user} with a lower-case header name"
        );
    }
    // Without the header, the client's address is hashed: from 127.0.0.1, always one server.
    let without: HashSet<String> = (0..10)
        .map(|_| answered_by(&herd.get("app.test", "/anonymous", "")))
        .collect();
    assert_eq!(
        without.len(),
        1,
        "requests without X-User went to {without:?}"
    );
}

/// Which server each of `users` (sent as `X-User`) reaches.
fn hash_placement(herd: &Herd, users: &[String]) -> HashMap<String, String> {
    let mut conn = herd.connect();
    users
        .iter()
        .map(|user| {
            let header = format!("X-User: {user}\r\n");
            let response = conn.roundtrip(&request("app.test", "/", &header));
            (user.clone(), answered_by(&response))
        })
        .collect()
}

#[test]
fn hash_moves_only_the_keys_it_must_when_a_server_comes_or_goes() {
    let [a, b, c, d] = named(["a", "b", "c", "d"]);
    let herd = Herd::start(&config(&pool(
        "app",
        "balance = \"hash\"\nhash_key = \"header:X-User\"\n",
        &[("a", a.addr, ""), ("b", b.addr, ""), ("c", c.addr, "")],
        None,
    )));
    let registry = herd.registry();
    let users: Vec<String> = (0..300).map(|i| format!("user-{i}")).collect();
    let start = hash_placement(&herd, &users);

    registry
        .add_server("app", ready_server("d", d.addr))
        .unwrap();
    let with_d = hash_placement(&herd, &users);
    let mut moved = 0;
    for user in &users {
        if with_d[user] != start[user] {
            assert_eq!(
                with_d[user], "d",
                "{user} moved from {} to {}",
                start[user], with_d[user]
            );
            moved += 1;
        }
    }
    // About a quarter of the keys move to the fourth server.
    assert!(
        (30..=135).contains(&moved),
        "{moved} of 300 keys moved when a fourth server came"
    );

    registry.remove_server("app", "d").unwrap();
    assert_eq!(hash_placement(&herd, &users), start, "removing d again");

    registry.remove_server("app", "a").unwrap();
    let without_a = hash_placement(&herd, &users);
    for user in &users {
        if start[user] != "a" {
            assert_eq!(
                without_a[user], start[user],
                "{user} moved though its server stayed"
            );
        }
    }
    let a_users: HashSet<&String> = users
        .iter()
        .filter(|user| start[*user] == "a")
        .map(|user| &without_a[user])
        .collect();
    assert!(a_users.len() > 1, "a's keys all went to {a_users:?}");
}

#[test]
fn hash_on_a_cookie_sends_each_value_to_one_server() {
    let names = ["a", "b", "c"];
    let mocks = named(names);
    let herd = Herd::start(&config(&pool(
        "app",
        "balance = \"hash\"\nhash_key = \"cookie:session\"\n",
        &plain(&names, &mocks),
        None,
    )));
    let mut used = HashSet::new();
    for id in 0..30 {
        let cookie = format!("Cookie: theme=dark; session=s{id}x; lang=en\r\n");
        let answers: HashSet<String> = (0..4)
            .map(|_| answered_by(&herd.get("app.test", "/", &cookie)))
            .collect();
        assert_eq!(answers.len(), 1, "session s{id}x went to {answers:?}");
        used.extend(answers);
    }
    assert!(used.len() > 1, "30 sessions all hashed to {used:?}");
}

// ---------------------------------------------------------------------------------------------
// Changes at run time

/// A mock answering with its name that counts the request heads it reads.
struct Counted {
    mock: Mock,
    hits: Arc<AtomicUsize>,
}

impl Counted {
    fn start(name: &str) -> Counted {
        let hits = Arc::new(AtomicUsize::new(0));
        let (counter, name) = (Arc::clone(&hits), name.to_string());
        let mock = Mock::start(move |ex| {
            counter.fetch_add(1, Ordering::SeqCst);
            ex.read_body()?;
            ex.respond(200, &[("X-Server", &name)], name.as_bytes())?;
            Ok(Flow::KeepAlive)
        });
        Counted { mock, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Sends GETs one after another until `stop`, over a kept connection that it replaces every
/// `renew_every` requests (and whenever herdsman says close); returns who answered how often,
/// or the first failure.
fn load_client(
    addr: SocketAddr,
    stop: &AtomicBool,
    renew_every: usize,
) -> Result<HashMap<String, usize>, String> {
    let mut counts = HashMap::new();
    let mut conn: Option<Conn> = None;
    let mut sent = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let c = match &mut conn {
            Some(c) => c,
            None => {
                let c = Conn::try_connect(addr).map_err(|e| format!("connect: {e}"))?;
                c.set_read_timeout(Duration::from_secs(5));
                conn.insert(c)
            }
        };
        c.try_send(&request("app.test", &format!("/load/{sent}"), ""))
            .map_err(|e| format!("request {sent}: sending: {e}"))?;
        let response = c
            .read_response(false)
            .map_err(|e| format!("request {sent}: {}", describe(&e)))?;
        if response.status() != 200 {
            return Err(format!(
                "request {sent}: {}",
                String::from_utf8_lossy(&response.head.raw)
            ));
        }
        *counts.entry(response.body_text()).or_insert(0) += 1;
        sent += 1;
        if response.says_close() || sent.is_multiple_of(renew_every) {
            conn = None;
        }
    }
    Ok(counts)
}

#[test]
fn adding_and_removing_servers_under_full_load_loses_no_request() {
    const CLIENTS: usize = 6;
    let [a, b, c, d] = ["a", "b", "c", "d"].map(Counted::start);
    let herd = Herd::start(&config(&pool(
        "app",
        "",
        &[("a", a.mock.addr, ""), ("b", b.mock.addr, "")],
        None,
    )));
    let registry = herd.registry();

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (addr, stop) = (herd.addr, Arc::clone(&stop));
            // Half keep their connection for long, half renew it often.
            let renew_every = if i % 2 == 0 { 1_000_000 } else { 20 };
            thread::spawn(move || load_client(addr, &stop, renew_every))
        })
        .collect();
    let started = Instant::now();
    let pause = || thread::sleep(Duration::from_millis(250));
    let add = |name: &str, server: &Counted| {
        let view = registry
            .add_server("app", ready_server(name, server.mock.addr))
            .unwrap();
        assert!(view.added_at_run_time);
        assert!(
            eventually(Duration::from_secs(2), || server.hits() > 0),
            "{name} got no request within 2 s of being added"
        );
    };
    // Each removed server: its count of requests when remove_server returned.
    let remove = |name: &str, server: &Counted| {
        registry.remove_server("app", name).unwrap();
        server.hits()
    };

    pause();
    assert!(a.hits() > 0 && b.hits() > 0, "the load did not start");
    add("c", &c);
    pause();
    // A reload of the unchanged file keeps c, added at run time, and drops no request.
    registry.reload().expect("reload under load");
    pause();
    let a_at_removal = remove("a", &a);
    pause();
    add("d", &d);
    pause();
    let b_at_removal = remove("b", &b);
    pause();
    stop.store(true, Ordering::SeqCst);
    let elapsed = started.elapsed();

    let mut answered: HashMap<String, usize> = HashMap::new();
    for (i, client) in clients.into_iter().enumerate() {
        let counts = client
            .join()
            .expect("client thread")
            .unwrap_or_else(|failure| panic!("client {i} failed: {failure}"));
        for (name, n) in counts {
            *answered.entry(name).or_insert(0) += n;
        }
    }
    let total: usize = answered.values().sum();
    assert!(
        total > 200,
        "only {total} requests in {elapsed:?}: the load was not running"
    );
    // Every request that reached a server came back to its client, once.
    for (name, server) in [("a", &a), ("b", &b), ("c", &c), ("d", &d)] {
        assert_eq!(
            answered.get(name).copied().unwrap_or(0),
            server.hits(),
            "responses from {name} vs requests it received (all: {answered:?})"
        );
    }
    // At removal, at most one request per client can have been on its way to the server.
    for (name, server, at_removal) in [("a", &a, a_at_removal), ("b", &b, b_at_removal)] {
        let after = server.hits() - at_removal;
        assert!(
            after <= CLIENTS,
            "{name} received {after} requests after its removal returned (all: {answered:?})"
        );
    }
    assert!(
        c.hits() > 0 && d.hits() > 0,
        "added servers got nothing: {answered:?}"
    );
    assert_eq!(
        app_servers(&registry),
        [
            ("c".to_string(), "ready".to_string(), 1),
            ("d".to_string(), "ready".to_string(), 1)
        ]
    );
}

#[test]
fn a_broken_reload_changes_nothing_and_a_valid_one_applies() {
    let (a, b, o) = (Mock::named("a"), Mock::named("b"), Mock::named("o"));
    let pools = |b_more: &str| {
        format!(
            "{}{}",
            pool("app", "", &[("a", a.addr, ""), ("b", b.addr, b_more)], None),
            pool("other", "", &[("o", o.addr, "")], None)
        )
    };
    let text = config(&pools(""));
    let herd = Herd::start(&text);
    let registry = herd.registry();
    let answers = |herd: &Herd, path: &str, n: usize| -> Vec<String> {
        (0..n)
            .map(|_| answered_by(&herd.get("app.test", path, "")))
            .collect()
    };
    let before = answers(&herd, "/other/x", 6);
    assert_eq!(
        tally(&before),
        HashMap::from([("a".into(), 3), ("b".into(), 3)])
    );
    let summary = pools_summary(&registry);

    let out_of_range = config(&pools(", weight = 300"));
    let syntax_error = format!("{text}[[route]\npool = \"other\"\n");
    let misnamed_pool = format!("{text}[[route]]\npath_prefix = \"/other/\"\npool = \"nope\"\n");
    for (what, broken, marker) in [
        ("weight out of range", &out_of_range, "weight = 300"),
        ("syntax error", &syntax_error, "[[route]"),
        ("route to no pool", &misnamed_pool, "\"nope\""),
    ] {
        let line = broken
            .lines()
            .position(|l| l.contains(marker))
            .expect("marker")
            + 1;
        let error = herd
            .reload_with(broken)
            .expect_err(&format!("{what}: the reload was accepted"));
        let message = error.to_string();
        assert!(
            message.contains(&format!("line {line}")),
            "{what}: the error does not name line {line}: {message}"
        );
        match &error {
            ChangeError::Refused(config_error) => assert!(
                config_error
                    .problems
                    .iter()
                    .any(|problem| problem.line == Some(line)),
                "{what}: {config_error:?}"
            ),
            other => panic!("{what}: not a refusal: {other:?}"),
        }
        assert_eq!(
            pools_summary(&registry),
            summary,
            "{what} changed the pools"
        );
        let after = answers(&herd, "/other/x", 6);
        assert_eq!(after, before, "{what}: requests go elsewhere now");
    }

    // A valid file: b's weight to 3, and /other/ routed to pool "other".
    let changed = config(&format!(
        "[[route]]\npath_prefix = \"/other/\"\npool = \"other\"\n\n{}",
        pools(", weight = 3")
    ));
    let generation = herd.reload_with(&changed).expect("a valid reload");
    assert!(generation > summary.0, "the generation did not move");
    assert_eq!(
        app_servers(&registry),
        [
            ("a".to_string(), "ready".to_string(), 1),
            ("b".to_string(), "ready".to_string(), 3)
        ]
    );
    let weighted = answers(&herd, "/x", 8);
    assert_eq!(
        tally(&weighted),
        HashMap::from([("a".into(), 2), ("b".into(), 6)]),
        "{weighted:?}"
    );
    assert_eq!(answers(&herd, "/other/x", 3), ["o", "o", "o"]);
}

#[test]
fn a_drain_set_at_run_time_survives_a_reload_of_the_same_file() {
    let names = ["a", "b"];
    let mocks = named(names);
    let herd = Herd::start(&config(&pool("app", "", &plain(&names, &mocks), Some(""))));
    let registry = herd.registry();
    let cookies = cookies_for(&herd, &names);
    registry.set_state("app", "b", ServerState::Drain).unwrap();

    let generation = registry
        .reload()
        .expect("reload of the same file")
        .generation;
    assert!(generation > 1);
    assert_eq!(
        app_servers(&registry),
        [
            ("a".to_string(), "ready".to_string(), 1),
            ("b".to_string(), "drain".to_string(), 1)
        ]
    );
    for _ in 0..8 {
        let response = herd.get_with_cookie(None);
        assert_eq!(
            answered_by(&response),
            "a",
            "a new session reached draining b"
        );
        assert_eq!(sticky_cookie_set(&response).as_ref(), Some(&cookies["a"]));
    }
    // b's sessions still reach it: the drain kept, and the pool's generated key with it.
    for _ in 0..4 {
        let response = herd.get_with_cookie(Some(&cookies["b"]));
        assert_eq!(answered_by(&response), "b", "b's session after the reload");
        assert_eq!(sticky_cookie_set(&response), None);
    }
}

#[test]
fn sessions_stay_put_when_servers_come_and_go() {
    let [a, b, c, d] = named(["a", "b", "c", "d"]);
    let herd = Herd::start(&config(&pool(
        "app",
        "",
        &[("a", a.addr, ""), ("b", b.addr, ""), ("c", c.addr, "")],
        Some(""),
    )));
    let registry = herd.registry();
    let cookies = cookies_for(&herd, &["a", "b", "c"]);

    // The cookie names the server, not its place: adding d and removing a (so that b and c
    // move up) leaves b's and c's sessions where they were.
    registry
        .add_server("app", ready_server("d", d.addr))
        .unwrap();
    registry.remove_server("app", "a").unwrap();
    for name in ["b", "c"] {
        for _ in 0..4 {
            let response = herd.get_with_cookie(Some(&cookies[name]));
            assert_eq!(answered_by(&response), name, "{name}'s session");
            assert_eq!(sticky_cookie_set(&response), None);
        }
    }
    // a's sessions move, with a fresh cookie that then holds.
    for _ in 0..4 {
        let response = herd.get_with_cookie(Some(&cookies["a"]));
        let server = answered_by(&response);
        assert_ne!(server, "a", "a session reached the removed server");
        let fresh = sticky_cookie_set(&response)
            .unwrap_or_else(|| panic!("a's session moved to {server} without a fresh cookie"));
        let again = herd.get_with_cookie(Some(&fresh));
        assert_eq!(answered_by(&again), server);
        assert_eq!(sticky_cookie_set(&again), None);
    }
    // The added server takes new sessions, and keeps them.
    let d_cookie = cookies_for(&herd, &["d"])["d"].clone();
    for _ in 0..4 {
        assert_eq!(answered_by(&herd.get_with_cookie(Some(&d_cookie))), "d");
    }
}

#[test]
fn a_reload_keeps_run_time_servers_and_weights_unless_the_file_names_them() {
    let [a, b, c, c2] = named(["a", "b", "c", "c2"]);
    let text = config(&pool(
        "app",
        "",
        &[("a", a.addr, ""), ("b", b.addr, "")],
        None,
    ));
    let herd = Herd::start(&text);
    let registry = herd.registry();
    registry
        .add_server("app", ready_server("c", c.addr))
        .unwrap();
    registry.set_weight("app", "b", 2).unwrap();

    herd.reload_with(&text).expect("reload of the same file");
    let expected = [
        ("a".to_string(), "ready".to_string(), 1),
        ("b".to_string(), "ready".to_string(), 2),
        ("c".to_string(), "ready".to_string(), 1),
    ];
    assert_eq!(app_servers(&registry), expected);
    let answers: Vec<String> = (0..8)
        .map(|_| answered_by(&herd.get("app.test", "/", "")))
        .collect();
    assert_eq!(
        tally(&answers),
        HashMap::from([("a".into(), 2), ("b".into(), 4), ("c".into(), 2)]),
        "{answers:?}"
    );

    // Once the file defines a "c" of its own, the file's c is the one.
    let with_c = config(&pool(
        "app",
        "",
        &[
            ("a", a.addr, ""),
            ("b", b.addr, ""),
            ("c", c2.addr, ", weight = 2"),
        ],
        None,
    ));
    herd.reload_with(&with_c).expect("a valid reload");
    let view = registry.pools();
    let c_view = view.pools[0]
        .servers
        .iter()
        .find(|server| server.name == "c")
        .expect("c");
    assert_eq!(
        (
            c_view.addr.as_str(),
            c_view.weight,
            c_view.added_at_run_time
        ),
        (c2.addr.to_string().as_str(), 2, false)
    );
    let before = c.requests().len();
    let answers: Vec<String> = (0..10)
        .map(|_| answered_by(&herd.get("app.test", "/", "")))
        .collect();
    assert_eq!(
        tally(&answers),
        HashMap::from([("a".into(), 2), ("b".into(), 4), ("c2".into(), 4)]),
        "{answers:?}"
    );
    assert_eq!(
        c.requests().len(),
        before,
        "the run-time c still gets requests"
    );
}

// ---------------------------------------------------------------------------------------------
// Absolute-form targets, and clients of two sticky pools

/// RFC 9112 §3.2.2: an absolute-form target's own host and path are what is routed, not the
/// Host field (else a client could reach, or dodge, a path route's pool by its choice of form).
#[test]
fn an_absolute_form_request_is_routed_by_its_target() {
    let names = ["app", "api", "adm"];
    let mocks = named(names);
    let routes = "[[route]]\nhost = \"api.example.com\"\npool = \"api\"\n\n\
                  [[route]]\npath_prefix = \"/admin/\"\npool = \"adm\"\n\n";
    let pools: String = names
        .iter()
        .zip(&mocks)
        .map(|(name, mock)| pool(name, "", &[(name, mock.addr, "")], None))
        .collect();
    let herd = Herd::start(&config(&format!("{routes}{pools}")));
    for (target, host, expected) in [
        ("http://api.example.com/v1", "api.example.com", "api"),
        // The target's authority wins over Host.
        ("http://api.example.com/v1", "other.org", "api"),
        ("http://other.org/admin/users", "other.org", "adm"),
        ("http://other.org/static/x", "other.org", "app"),
    ] {
        let response = herd
            .connect()
            .roundtrip(&request(host, target, "Connection: close\r\n"));
        assert_eq!(
            answered_by(&response),
            expected,
            "GET {target} with Host: {host}"
        );
    }
}

/// A browser keeps one cookie per name: two sticky pools sharing one would undo each other, so
/// the config check refuses that (src/config/check.rs), and with a cookie each, a client of both
/// pools stays on one server in each.
#[test]
fn a_client_of_two_sticky_pools_stays_on_one_server_in_each() {
    let [a, b, x, y] = named(["a", "b", "x", "y"]);
    let routes = "[[route]]\npath_prefix = \"/api/\"\npool = \"api\"\n\n";
    let text = |api_cookie: &str| {
        config(&format!(
            "{routes}{}{}",
            pool("app", "", &[("a", a.addr, ""), ("b", b.addr, "")], Some("")),
            pool(
                "api",
                "",
                &[("x", x.addr, ""), ("y", y.addr, "")],
                Some(api_cookie)
            )
        ))
    };
    let clash = herdsman::Config::from_toml(&text(""), "t").unwrap_err();
    assert_eq!(clash.problems[0].key, "pool[1].sticky.cookie", "{clash}");

    let herd = Herd::start(&text("cookie = \"HERDSMAN_API\"\n"));
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
            .roundtrip(&request("app.test", &path, &extra));
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
