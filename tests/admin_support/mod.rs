//! herdsman started in-process from a config file (so that a reload has a file to read), with its
//! admin API, for the tests of the pool routes (`admin_pools.rs`), the cache's purges
//! (`cache_admin.rs`) and of `herdsman ctl` (`ctl.rs`). Built on `common`'s `Setup` (the config
//! text), `Conn` (raw HTTP) and mocks, and a server whose answers may be cached.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::Value;

use crate::common::{get_request, get_request_to, write_temp, Conn, Flow, Mock, Setup};

/// herdsman running in this process from the file at `path`. Dropping it stops it.
pub struct Running {
    server: Option<herdsman::Server>,
    /// Where the "web" listener accepts connections.
    pub web: SocketAddr,
    /// Where the admin API listens.
    pub admin: SocketAddr,
    /// The config file; rewrite it, then reload.
    pub path: PathBuf,
    /// The admin token, when one is configured.
    pub token: Option<String>,
}

impl Running {
    /// Starts herdsman with `setup`'s config (which must have `.admin()`), written to a file.
    pub fn start(setup: Setup) -> Running {
        Running::start_text(setup.toml("127.0.0.1:0"), None)
    }

    /// Like [`Running::start`], with `after` added at the end of the config (after the pool:
    /// its `[pool.cache]`, say).
    pub fn start_with(setup: Setup, after: &str) -> Running {
        Running::start_text(setup.toml("127.0.0.1:0") + after, None)
    }

    /// Like [`Running::start`], with `[admin] token_env` naming a variable set to `token`.
    pub fn start_with_token(setup: Setup, token: &str) -> Running {
        Running::start_text(setup.toml("127.0.0.1:0"), Some(token))
    }

    /// Starts herdsman with the config `text` as it is (which must have an `[admin]` section).
    pub fn start_toml(text: String) -> Running {
        Running::start_text(text, None)
    }

    fn start_text(mut text: String, token: Option<&str>) -> Running {
        assert!(text.contains("[admin]\n"), "the setup needs .admin()");
        if let Some(token) = token {
            // A variable of its own per server, so that tests running at once do not meet.
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let variable = format!(
                "HERDSMAN_TEST_ADMIN_TOKEN_{}",
                NEXT.fetch_add(1, Ordering::SeqCst)
            );
            std::env::set_var(&variable, token);
            text = text.replace("[admin]\n", &format!("[admin]\ntoken_env = {variable:?}\n"));
        }
        let path = write_temp("herdsman.toml", &text);
        let config = herdsman::Config::load(&path)
            .unwrap_or_else(|error| panic!("config refused: {error}\n{text}"));
        let server =
            herdsman::Server::start_with_file(config, Some(path.clone())).expect("herdsman starts");
        let web = server.listener_addr("web").expect("the web listener");
        let admin = server.admin_addr().expect("the admin API");
        Running {
            server: Some(server),
            web,
            admin,
            path,
            token: token.map(str::to_string),
        }
    }

    /// Replaces the config file with `setup`'s text (the admin section as at start).
    pub fn rewrite(&self, setup: Setup) {
        let mut text = setup.toml("127.0.0.1:0");
        let running = std::fs::read_to_string(&self.path).unwrap();
        // Keep the token variable the running server was started with.
        if let Some(line) = running.lines().find(|line| line.starts_with("token_env")) {
            text = text.replace("[admin]\n", &format!("[admin]\n{line}\n"));
        }
        std::fs::write(&self.path, text).unwrap();
    }

    /// Where the listener `name` accepts connections now (listeners a reload opened included).
    pub fn listener(&self, name: &str) -> Option<SocketAddr> {
        self.server.as_ref()?.listener_addr(name)
    }

    /// Applies `edit` to the config file's text and reloads it; the reload must be accepted.
    pub fn reconfigure(&self, edit: impl FnOnce(String) -> String) {
        let text = std::fs::read_to_string(&self.path).unwrap();
        self.rewrite_text(&edit(text));
        let (status, json) = self.api("POST", "/api/reload", None);
        assert_eq!(status, 200, "{json}");
    }

    /// Replaces the config file with `text` as it is.
    pub fn rewrite_text(&self, text: &str) {
        std::fs::write(&self.path, text).unwrap();
    }

    /// Calls the admin API with the configured token (if any).
    pub fn api(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        api(self.admin, method, path, body, self.token.as_deref())
    }

    /// `GET /api/pools`: the pool "app"'s servers as (name, state, weight), in order.
    pub fn servers(&self) -> Vec<(String, String, u64)> {
        let (status, json) = self.api("GET", "/api/pools", None);
        assert_eq!(status, 200, "{json}");
        let app = json["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|pool| pool["name"] == "app")
            .expect("pool app");
        app["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|server| {
                (
                    server["name"].as_str().unwrap().to_string(),
                    server["state"].as_str().unwrap().to_string(),
                    server["weight"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    /// `GET /api/pools`: the pool "app"'s servers as JSON, by name.
    pub fn servers_json(&self) -> serde_json::Map<String, Value> {
        let (status, json) = self.api("GET", "/api/pools", None);
        assert_eq!(status, 200, "{json}");
        json["pools"][0]["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|server| (server["name"].as_str().unwrap().to_string(), server.clone()))
            .collect()
    }

    /// Sends `n` GETs through the proxy, each on a new connection, and returns the bodies (the
    /// mocks answer with their names), or the status line for anything but 200.
    pub fn answers(&self, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                let mut conn = Conn::connect(self.web);
                let response =
                    conn.roundtrip(&get_request(&format!("/r/{i}"), "Connection: close\r\n"));
                if response.status() == 200 {
                    response.body_text()
                } else {
                    response.head.first_line
                }
            })
            .collect()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        // On another thread, so that a hang in stop or wait fails the test instead of blocking.
        let (done, finished) = mpsc::channel();
        thread::spawn(move || {
            server.stop();
            server.wait();
            let _ = done.send(());
        });
        let stopped = finished.recv_timeout(Duration::from_secs(15)).is_ok();
        if !stopped && !thread::panicking() {
            panic!("herdsman did not stop within 15 s of Server::stop");
        }
    }
}

/// One admin API call on a new connection: the status and the JSON body (`Value::Null` when
/// the body is not JSON).
pub fn api(
    admin: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, Value) {
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    // A change says JSON, body or not, as `herdsman ctl` does: the API refuses any other.
    if body.is_some() || !matches!(method, "GET" | "HEAD") {
        request.push_str("Content-Type: application/json\r\n");
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || !matches!(method, "GET" | "HEAD") {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let response = Conn::connect(admin).roundtrip(request.as_bytes());
    let json = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status(), json)
}

/// How many of `answers` came from `server`.
pub fn count(answers: &[String], server: &str) -> usize {
    answers.iter().filter(|answer| *answer == server).count()
}

/// `text` with `keys` (lines such as `retries = 0\n`) added at the top of pool "app".
pub fn with_pool_keys(text: String, keys: &str) -> String {
    text.replace(
        "[[pool]]\nname = \"app\"\n",
        &format!("[[pool]]\nname = \"app\"\n{keys}"),
    )
}

/// A server whose every answer may be cached for a minute and varies on `Accept-Encoding`; a
/// target `/t/{tag}/…` is tagged with `Surrogate-Key: {tag}`, `/c/{tag}/…` with `Cache-Tag:
/// {tag}, all`; `/slow/…` is answered after 500 ms; `/stale/…` is stale at once but may stand
/// in for an error for a minute, and is answered 503 after the first time. The body is the
/// target and how many requests for it the server has seen, so a client tells a stored answer
/// from a fresh one; `Mock::targets` says what reached it.
pub fn caching_server() -> Mock {
    let seen = std::sync::Mutex::new(std::collections::HashMap::<String, usize>::new());
    Mock::start(move |exchange| {
        let target = exchange.head.target().to_string();
        let count = {
            let mut seen = seen.lock().unwrap();
            let count = seen.entry(target.clone()).or_default();
            *count += 1;
            *count
        };
        let mut parts = target.split('/').skip(1);
        let (kind, tag) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let tag_field = match kind {
            "t" => Some(("Surrogate-Key", tag.to_string())),
            "c" => Some(("Cache-Tag", format!("{tag}, all"))),
            _ => None,
        };
        let (status, control) = match kind {
            "slow" => {
                std::thread::sleep(Duration::from_millis(500));
                (200, "max-age=60")
            }
            "stale" if count > 1 => (503, "no-store"),
            "stale" => (200, "max-age=0, stale-if-error=60"),
            _ => (200, "max-age=60"),
        };
        let mut headers = vec![("Cache-Control", control), ("Vary", "Accept-Encoding")];
        if kind == "stale" {
            // Kept though stale at once: it has a validator to be revalidated with.
            headers.push(("ETag", "\"v1\""));
        }
        if let Some((name, value)) = &tag_field {
            headers.push((*name, value.as_str()));
        }
        let body = format!("{target} answer {count}");
        exchange.respond(status, &headers, body.as_bytes())?;
        Ok(Flow::KeepAlive)
    })
}

/// How many requests for `target` reached `server`.
pub fn requests_for(server: &Mock, target: &str) -> usize {
    server
        .targets()
        .iter()
        .filter(|seen| *seen == target)
        .count()
}

/// The body of a GET through `web` for `host` and `target`, with the extra header lines `extra`.
pub fn body_of(web: SocketAddr, host: &str, target: &str, extra: &str) -> String {
    let mut conn = Conn::connect(web);
    let response = conn.roundtrip(&get_request_to(
        host,
        target,
        &format!("{extra}Connection: close\r\n"),
    ));
    assert_eq!(response.status(), 200, "{}", response.head.first_line);
    response.body_text()
}
