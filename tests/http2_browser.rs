//! A real browser over HTTP/2: Debian's headless Chromium loads herdsman's stats page through
//! herdsman's own TLS listener with `http2 = true`, whose one server is herdsman's admin listener.
//! The page, and the API calls its script makes every second, go through herdsman as HTTP/2
//! streams. Chromium must agree h2 by ALPN (its own `nextHopProtocol`), the page must fill its
//! tables from the API, and herdsman's access log must say `HTTP/2.0` for what the page asked.
//! Chromium's certificate errors are ignored (`headless_chrome`'s default): the certificate is the
//! test CA's, which the browser does not know. Every wait is bounded (15 s).

mod browser_support;
mod common;

use std::net::SocketAddr;
use std::time::Duration;

use browser_support::{eval, wait_for, Chromium};
use common::*;
use serde_json::Value;

/// The access log's JSON lines so far.
fn access_log_lines(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON access-log line"))
        .collect()
}

#[test]
fn chromium_loads_the_stats_page_through_herdsman_over_tls_h2() {
    let certs = CertFiles::issue("h2-browser", &["localhost"]);
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = fresh_temp_dir("h2-browser").join("access.log");
    let text = Setup::new()
        .workers(2)
        .admin_at(admin)
        .server("admin", admin)
        .listener(&format!(
            "http2 = true\naccess_log = {log:?}\naccess_log_format = \"json\"\n{}",
            tls_table(&[&certs], "")
        ))
        .toml(&web.to_string());
    let _herdsman = run_binary_with(&write_temp("h2-browser.toml", &text));
    for addr in [web, admin] {
        assert!(
            wait_listening(addr, Duration::from_secs(10)),
            "herdsman is not listening on {addr}\n{text}"
        );
    }

    let browser = Chromium::launch();
    let tab = browser.open(&format!("https://{web}/stats"));
    assert_eq!(
        eval(
            &tab,
            "performance.getEntriesByType('navigation')[0].nextHopProtocol"
        ),
        "h2",
        "Chromium did not agree HTTP/2 with herdsman"
    );
    wait_for(
        &tab,
        "document.body.dataset.loaded === '1'",
        "the page filling its tables through herdsman",
    );
    assert_eq!(
        eval(
            &tab,
            "document.querySelectorAll('#workers tr[data-worker]').length"
        ),
        2
    );
    // The page counts the browser's own HTTP/2 connection, through which it asked.
    wait_for(
        &tab,
        "/^HTTP\\/2 open, all workers: [1-9]/.test(document.getElementById('http2').textContent)",
        "the page counting its own HTTP/2 connection",
    );

    // herdsman logged the page and its API calls as HTTP/2 streams.
    let mut lines = Vec::new();
    let logged = eventually(Duration::from_secs(5), || {
        lines = access_log_lines(&log);
        ["/stats", "/api/pools", "/api/workers"]
            .iter()
            .all(|target| lines.iter().any(|line| line["target"] == *target))
    });
    assert!(logged, "{lines:#?}");
    for line in &lines {
        assert_eq!(line["version"], "HTTP/2.0", "{line}");
        assert!(line["stream"].as_u64().is_some(), "{line}");
        assert_eq!(line["status"], 200, "{line}");
    }
}
