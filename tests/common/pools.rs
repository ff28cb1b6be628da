//! What the tests of pools share (sticky sessions, routing, run-time changes, reloads): config
//! text with pools and servers, mocks answering with their names, who answered, the sticky
//! cookie herdsman set, and the servers a pool has.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use herdsman::config::ServerState;
use herdsman::upstream::registry::{NewServer, Registry};

use super::heads::Response;
use super::mock::{Flow, Mock};
use super::start::Proxy;

/// The default sticky cookie's name.
pub const STICKY: &str = "HERDSMAN";

/// Two workers, listener "web" on 127.0.0.1:0 whose default pool is "app", then `rest` (routes
/// and pools).
pub fn pools_config(rest: &str) -> String {
    format!(
        "workers = 2\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n{rest}"
    )
}

/// A `[[pool]]` table: its `settings` lines (such as `balance = "hash"\n`; round-robin when they
/// name no balance), its servers as (name, address, more inline keys such as `, weight = 3`), and
/// the body of `[pool.sticky]` when `sticky` is given (`""` for all defaults).
pub fn pool_table(
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

/// Mocks named `names` answering with their names, and herdsman started from a file with one
/// pool "app" of them in that order: its `settings` lines and `[pool.sticky]` body as
/// [`pool_table`] takes them.
pub fn app_pool_of<const N: usize>(
    names: [&str; N],
    settings: &str,
    sticky: Option<&str>,
) -> ([Mock; N], Proxy) {
    let mocks = named_mocks(names);
    let text = pools_config(&pool_table("app", settings, &plain(&names, &mocks), sticky));
    (mocks, Proxy::start_from_file(&text))
}

/// A server to add at run time as the config's defaults would have it: ready, weight 1, no limit.
pub fn ready_server(name: &str, addr: SocketAddr) -> NewServer {
    NewServer {
        name: name.into(),
        addr: addr.into(),
        weight: 1,
        state: ServerState::Ready,
        max_connections: 0,
    }
}

/// Mocks answering with their own names.
pub fn named_mocks<const N: usize>(names: [&str; N]) -> [Mock; N] {
    names.map(Mock::named)
}

/// A round-robin `[[pool]]` per mock, of that one server, pool and server named as given.
pub fn pool_per_mock(names: &[&str], mocks: &[Mock]) -> String {
    names
        .iter()
        .zip(mocks)
        .map(|(name, mock)| pool_table(name, "", &[(name, mock.addr, "")], None))
        .collect()
}

/// (name, address, no more keys) for each mock, named as given.
pub fn plain<'n>(names: &[&'n str], mocks: &[Mock]) -> Vec<(&'n str, SocketAddr, &'static str)> {
    names
        .iter()
        .zip(mocks)
        .map(|(name, mock)| (*name, mock.addr, ""))
        .collect()
}

/// Asserts a 200 and returns the name of the server that answered (mocks answer with it).
pub fn answered_by(response: &Response) -> String {
    assert_eq!(
        response.status(),
        200,
        "{}",
        String::from_utf8_lossy(&response.head.raw)
    );
    response.body_text()
}

impl Proxy {
    /// GET `/` with `Host: app.test` and a `Cookie: HERDSMAN=value` line (none for `None`), on a
    /// new connection.
    pub fn get_with_cookie(&self, cookie: Option<&str>) -> Response {
        let extra = cookie
            .map(|value| format!("Cookie: {STICKY}={value}\r\n"))
            .unwrap_or_default();
        self.get_from_host("app.test", "/", &extra)
    }
}

/// The value herdsman's `Set-Cookie` line gives the sticky cookie, if the response has one
/// (asserting there is at most one, and that it has exactly the attributes herdsman sets).
pub fn sticky_cookie_set(response: &Response) -> Option<String> {
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
pub fn cookies_for(proxy: &Proxy, servers: &[&str]) -> HashMap<String, String> {
    let mut cookies = HashMap::new();
    for _ in 0..30 {
        let response = proxy.get_with_cookie(None);
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

pub fn tally(answers: &[String]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for answer in answers {
        *counts.entry(answer.clone()).or_insert(0) += 1;
    }
    counts
}

/// Each server of pool "app" as (name, state, weight).
pub fn app_servers(registry: &Registry) -> Vec<(String, String, u32)> {
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

/// A mock answering with its name that counts the request heads it reads.
pub struct Counted {
    pub mock: Mock,
    hits: Arc<AtomicUsize>,
}

impl Counted {
    pub fn start(name: &str) -> Counted {
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

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}
