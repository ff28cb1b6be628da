//! What a reload does with each kind of key, through the admin API's `POST /api/reload`: the
//! keys it applies take effect (listeners, pools, timeouts and limits), those that wait for a
//! restart are named in its answer (`restart_required`) and left as they run, and connections
//! accepted on a listener the reload closes are served to their end. (`shutdown_grace` and
//! `hard_stop_after`: `reload_signal.rs`, where a real process stops.)

mod admin_support;
mod common;
mod long_lived;

use std::time::Duration;

use admin_support::{with_pool_keys, Running};
use common::*;
use long_lived::{finish_all, start_all, Pace};
use serde_json::{json, Value};

/// Writes `edit` of the config file and reloads it; the reload must be applied. Its answer.
fn reload_with(herdsman: &Running, edit: impl FnOnce(String) -> String) -> Value {
    let text = std::fs::read_to_string(&herdsman.path).unwrap();
    herdsman.rewrite_text(&edit(text));
    let (status, json) = herdsman.api("POST", "/api/reload", None);
    assert_eq!(status, 200, "{json}");
    json
}

/// GET / on a new connection to "web".
fn get(herdsman: &Running) -> Response {
    Conn::connect(herdsman.web).roundtrip(&get_request("/", "Connection: close\r\n"))
}

#[test]
fn a_listener_a_reload_closes_serves_its_connections_to_their_end() {
    let pace = Pace {
        steps: 8,
        every: Duration::from_millis(250),
    };
    let backend = long_lived::backend(pace);
    let herdsman = Running::start(Setup::new().admin().server("a", backend.addr));
    let exchanges = start_all(herdsman.web, pace);
    // "web" goes, "other" comes.
    let answer = reload_with(&herdsman, |text| {
        text.replace("name = \"web\"", "name = \"other\"")
    });
    assert_eq!(answer["restart_required"], json!([]), "{answer}");
    assert!(
        eventually(Duration::from_secs(2), || Conn::try_connect(herdsman.web)
            .is_err()),
        "the closed listener still accepts connections"
    );
    assert_eq!(finish_all(exchanges), [Ok(()), Ok(()), Ok(())]);
    let other = herdsman.listener("other").expect("listener other");
    serves(other);
}

#[test]
fn a_listeners_backlog_waits_for_a_restart_and_its_other_keys_apply() {
    let a = Mock::named("a");
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr));
    let answer = reload_with(&herdsman, |text| {
        text.replace(
            "name = \"web\"\n",
            "name = \"web\"\nbacklog = 64\nmax_connections = 1\n",
        )
    });
    assert_eq!(
        answer["restart_required"],
        json!(["backlog of listener \"web\""]),
        "{answer}"
    );
    // max_connections = 1 applies: a second connection waits for the first to close.
    let mut first = Conn::connect(herdsman.web);
    assert_eq!(first.roundtrip(&get_request("/1", "")).status(), 200);
    let mut second = Conn::connect(herdsman.web);
    second.send(&get_request("/2", ""));
    second.set_read_timeout(Duration::from_millis(300));
    assert!(second.read_head().is_err(), "served over max_connections");
    drop(first);
    second.set_read_timeout(IO_TIMEOUT);
    assert_eq!(second.response().status(), 200);
    // Named again by the next reload, until a restart.
    let again = reload_with(&herdsman, |text| text);
    assert_eq!(again["restart_required"], answer["restart_required"]);
}

#[test]
fn pool_keys_apply() {
    let a = Mock::named("a");
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr));
    assert_eq!(get(&herdsman).header("set-cookie"), None);
    let answer = reload_with(&herdsman, |text| {
        with_pool_keys(text, "retries = 1\n") + "\n[pool.sticky]\ncookie = \"SRV\"\n"
    });
    assert_eq!(answer["restart_required"], json!([]), "{answer}");
    let response = get(&herdsman);
    let cookie = response.header("set-cookie").unwrap_or_default();
    assert!(cookie.starts_with("SRV="), "Set-Cookie: {cookie:?}");
}

#[test]
fn timeouts_and_limits_apply() {
    let a = Mock::named("a");
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr));
    let large_head = get_request("/", &format!("X-Large: {}\r\n", "x".repeat(2000)));
    assert_eq!(
        Conn::connect(herdsman.web).roundtrip(&large_head).status(),
        200
    );
    let answer = reload_with(&herdsman, |text| {
        text.replace(
            "[[pool]]",
            "[limits]\nmax_header_bytes = 1024\n[timeouts]\nclient_idle = \"1s\"\n\n[[pool]]",
        )
    });
    assert_eq!(answer["restart_required"], json!([]), "{answer}");
    assert_eq!(
        Conn::connect(herdsman.web).roundtrip(&large_head).status(),
        431
    );
    let mut idle = Conn::connect(herdsman.web);
    assert_eq!(idle.roundtrip(&get_request("/", "")).status(), 200);
    assert!(
        idle.closes_within(Duration::from_secs(5)),
        "an idle connection outlived client_idle = 1s"
    );
}

#[test]
fn workers_intake_admin_and_log_wait_for_a_restart_and_say_so() {
    let a = Mock::named("a");
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr));
    let answer = reload_with(&herdsman, |text| {
        format!("intake = \"reuseport\"\n{text}\n[log]\nlevel = \"debug\"\n")
            .replace("workers = 2", "workers = 3")
            .replace("[admin]\n", "[admin]\ntoken_env = \"HERDSMAN_NOT_SET\"\n")
    });
    assert_eq!(
        answer["restart_required"],
        json!(["workers", "intake", "[admin] token_env", "[log] level"]),
        "{answer}"
    );
    // As they ran: two workers, balanced intake, the admin API without a token.
    let (status, workers) = herdsman.api("GET", "/api/workers", None);
    assert_eq!(status, 200, "{workers}");
    assert_eq!(workers["workers"].as_array().unwrap().len(), 2);
    assert_eq!(workers["intake"], "balanced");
    // Named again by the next reload, until a restart.
    let again = reload_with(&herdsman, |text| text);
    assert_eq!(again["restart_required"], answer["restart_required"]);
    serves(herdsman.web);
}
