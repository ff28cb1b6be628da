//! Config texts and helpers shared by the unit tests of `load.rs`, `check/` and `summary.rs`.

use super::load::from_toml;
use super::ConfigProblem;

/// Line numbers below count from this text's first line, which is empty.
pub(super) const VALID: &str = r#"
workers = 3
intake = "reuseport"
shutdown_grace = "15s"

[[listener]]
name = "web"
bind = "127.0.0.1:8080"
backlog = 1024
pool = "app"

[[listener]]
name = "internal"
bind = "[::1]:0"
pool = "api"

[timeouts]
connect = "1s"
client_header = "5s"
client_idle = "2m"
backend_response = "45s"
backend_idle = "3500ms"

[limits]
max_header_bytes = 16384
max_body_bytes = 1048576
max_idle_per_server = 8

[[pool]]
name = "app"
balance = "least-conn"
servers = [
  { name = "a", addr = "127.0.0.1:9001" },
  { name = "b", addr = "127.0.0.1:9002", weight = 2 },
]

[[pool]]
name = "api"
balance = "p2c"
servers = [{ name = "x", addr = "10.0.0.7:80", weight = 0 }]

[[pool]]
name = "shop"
balance = "hash"
hash_key = "header:X-User"
servers = [
  { name = "s1", addr = "127.0.0.1:9101" },
  { name = "s2", addr = "127.0.0.1:9102", state = "drain" },
]
[pool.sticky]
cookie = "SHOP"
key_env = "SHOP_STICKY_KEY"
max_age = "1h"

[[route]]
host = "*.Example.com"
path_prefix = "/api/"
pool = "api"

[[route]]
host = "shop.example.com"
pool = "shop"
[route.timeouts]
backend_response = "2m"
backend_read = "10m"
"#;

/// The smallest config: one listener, one pool of one server.
pub(super) const MINIMAL: &str = r#"
[[listener]]
name = "web"
bind = "127.0.0.1:8080"
pool = "app"

[[pool]]
name = "app"
servers = [{ name = "a", addr = "127.0.0.1:9001" }]
"#;

pub(super) fn problems(text: &str) -> Vec<ConfigProblem> {
    match from_toml(text, "test.toml") {
        Ok(config) => panic!("accepted: {config:#?}"),
        Err(error) => error.problems,
    }
}

pub(super) fn only_problem(text: &str) -> ConfigProblem {
    let mut problems = problems(text);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    problems.remove(0)
}

pub(super) fn problem(key: &str, line: usize, message: &str) -> ConfigProblem {
    ConfigProblem {
        key: key.to_string(),
        line: Some(line),
        message: message.to_string(),
    }
}

/// `VALID` with one piece of text replaced, which must occur exactly once.
pub(super) fn valid_with(from: &str, to: &str) -> String {
    assert_eq!(VALID.matches(from).count(), 1, "{from}");
    VALID.replace(from, to)
}

/// A socket address written in a test.
pub(super) fn addr(text: &str) -> std::net::SocketAddr {
    text.parse().unwrap()
}

/// A directory of its own with a self-signed certificate for `names` (chain.pem, key.pem).
pub(super) fn certificate_files(tag: &str, names: &[&str]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("herdsman-tls-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let made = rcgen::generate_simple_self_signed(names).unwrap();
    std::fs::write(dir.join("chain.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), made.signing_key.serialize_pem()).unwrap();
    dir
}
