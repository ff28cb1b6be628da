//! TLS to servers (`[pool.tls]`) with a real TLS server, nginx, in front of which herdsman sits
//! as it would in production: the server's certificate verified against the pool's CA and the
//! name asked (SNI, else the server's address), a certificate that does not verify refused with
//! a 502 that says why, `verify = false` taking any certificate, herdsman's own certificate
//! presented to a server that asks for one (mTLS), idle TLS connections reused, a new connection
//! resuming an earlier one's session, and health checks made over TLS. nginx must be installed (`scripts/test` installs it).

mod admin_support;
mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use admin_support::Running;
use common::*;

/// nginx serving HTTPS on 127.0.0.1 with `cert`, answering every request with what it saw of
/// the TLS connection; `extra` lines go in its `server` block.
struct Nginx {
    addr: SocketAddr,
    dir: PathBuf,
    _child: ChildGuard,
}

impl Nginx {
    fn start(tag: &str, cert: &CertFiles, extra: &str) -> Nginx {
        let dir = fresh_temp_dir(&format!("nginx-{tag}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let d = dir.display();
        let conf = format!(
            "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             keepalive_requests 1000;\n\
             server {{\n    listen {addr} ssl;\n    ssl_certificate {};\n    ssl_certificate_key {};\n\
             {extra}\n\
             location / {{ return 200 \"sni=$ssl_server_name conn=$connection reused=$ssl_session_reused client=$ssl_client_s_dn verify=$ssl_client_verify\\n\"; }}\n\
             }}\n}}\n",
            cert.chain.display(),
            cert.key.display(),
        );
        let conf_file = dir.join("nginx.conf");
        std::fs::write(&conf_file, conf).unwrap();
        let child = Command::new("/usr/sbin/nginx")
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf_file)
            .arg("-e")
            .arg(dir.join("error.log"))
            // One process: the guard's SIGKILL ends all of nginx (with a master, its workers
            // outlived every run of this file, 11 of them after one `cargo test`).
            .args(["-g", "daemon off; master_process off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx runs (scripts/test installs it)");
        let child = ChildGuard(child);
        assert!(
            wait_listening(addr, Duration::from_secs(5)),
            "nginx did not listen: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        Nginx {
            addr,
            dir,
            _child: child,
        }
    }

    /// What nginx logged (its error log, at info).
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

/// herdsman with one pool whose servers are `servers` (name, address), `pool_tls` the lines of
/// its `[pool.tls]` (and any table after it).
fn herdsman(servers: &[(&str, SocketAddr)], pool_tls: &str) -> Proxy {
    // One worker: its idle server connections are the only ones.
    let mut setup = Setup::new().workers(1);
    for &(name, addr) in servers {
        setup = setup.server(name, addr);
    }
    let text = format!("{}[pool.tls]\n{pool_tls}\n", setup.toml("127.0.0.1:0"));
    Proxy::start_from_file(&text)
}

fn ca_line(ca: &TestCa) -> String {
    format!("ca = \"{}\"\n", ca.pem_file.display())
}

#[test]
fn a_server_whose_certificate_verifies_is_proxied_to_with_the_name_asked() {
    let cert = CertFiles::issue("app-internal", &["app.internal"]);
    let nginx = Nginx::start("verified", &cert, "");
    let proxy = herdsman(
        &[("a", nginx.addr)],
        &format!("{}sni = \"app.internal\"\n", ca_line(test_ca())),
    );
    let response = proxy.get("/");
    assert_eq!(response.status(), 200, "{}", response.body_text());
    assert!(
        response.body_text().starts_with("sni=app.internal "),
        "{}",
        response.body_text()
    );
}

#[test]
fn without_sni_the_server_is_verified_by_its_address() {
    let cert = CertFiles::issue("by-address", &["127.0.0.1"]);
    let nginx = Nginx::start("by-address", &cert, "");
    let proxy = herdsman(&[("a", nginx.addr)], &ca_line(test_ca()));
    let response = proxy.get("/");
    assert_eq!(response.status(), 200, "{}", response.body_text());
    // An IP address is not sent in SNI (RFC 6066).
    assert!(
        response.body_text().starts_with("sni= "),
        "{}",
        response.body_text()
    );
}

#[test]
fn a_server_whose_certificate_does_not_verify_gets_no_request_and_the_client_a_502_saying_why() {
    let cert = CertFiles::issue("app-internal-2", &["app.internal"]);
    let nginx = Nginx::start("refused", &cert, "");
    // Signed by a CA the pool does not trust.
    let stranger = herdsman(
        &[("a", nginx.addr)],
        &format!("{}sni = \"app.internal\"\n", ca_line(stranger_ca())),
    );
    let response = stranger.get("/");
    assert_eq!(response.status(), 502, "{}", response.body_text());
    assert!(
        response
            .body_text()
            .contains("not signed by a CA the pool trusts"),
        "{}",
        response.body_text()
    );
    // The right CA, the wrong name.
    let other_name = herdsman(
        &[("a", nginx.addr)],
        &format!("{}sni = \"db.internal\"\n", ca_line(test_ca())),
    );
    let response = other_name.get("/");
    assert_eq!(response.status(), 502, "{}", response.body_text());
    assert!(
        response.body_text().contains("not for the name asked"),
        "{}",
        response.body_text()
    );
    // The system's roots (no `ca`) do not know the test CA either.
    let system = herdsman(&[("a", nginx.addr)], "sni = \"app.internal\"\n");
    assert_eq!(system.get("/").status(), 502);
}

#[test]
fn a_request_the_handshake_failed_for_goes_to_another_server() {
    let good = CertFiles::issue("good", &["app.internal"]);
    // Issued for another name: it fails verification, whoever asks.
    let bad = CertFiles::issue("bad", &["other.internal"]);
    let good_nginx = Nginx::start("retry-good", &good, "");
    let bad_nginx = Nginx::start("retry-bad", &bad, "");
    let proxy = herdsman(
        &[("bad", bad_nginx.addr), ("good", good_nginx.addr)],
        &format!("{}sni = \"app.internal\"\n", ca_line(test_ca())),
    );
    // Round-robin sends every other request to "bad" first; each, even a POST, goes on to
    // "good", as nothing of it reached "bad".
    for _ in 0..4 {
        let mut conn = proxy.connect();
        let response = conn.roundtrip(
            b"POST /orders HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
        );
        assert_eq!(response.status(), 200, "{}", response.body_text());
    }
}

#[test]
fn verify_false_takes_any_certificate() {
    let cert = CertFiles::issue("anything", &["whatever.example"]);
    let nginx = Nginx::start("unverified", &cert, "");
    let proxy = herdsman(
        &[("a", nginx.addr)],
        "verify = false\nsni = \"app.internal\"\n",
    );
    let response = proxy.get("/");
    assert_eq!(response.status(), 200, "{}", response.body_text());
    assert!(response.body_text().starts_with("sni=app.internal "));
}

#[test]
fn herdsman_presents_its_certificate_to_a_server_that_requires_one() {
    let cert = CertFiles::issue("mtls", &["app.internal"]);
    let requires = format!(
        "ssl_client_certificate {};\nssl_verify_client on;\n",
        client_ca().pem_file.display()
    );
    let nginx = Nginx::start("mtls", &cert, &requires);
    let identity = client_ca().client_identity("herdsman-edge", "spiffe://test/edge");
    let presenting = herdsman(
        &[("a", nginx.addr)],
        &format!(
            "{}sni = \"app.internal\"\ncertificate = {{ chain = \"{}\", key = \"{}\" }}\n",
            ca_line(test_ca()),
            identity.chain.display(),
            identity.key.display()
        ),
    );
    let response = presenting.get("/");
    assert_eq!(response.status(), 200, "{}", response.body_text());
    assert!(
        response
            .body_text()
            .contains("client=CN=herdsman-edge verify=SUCCESS"),
        "{}",
        response.body_text()
    );
    // Without one, nginx answers its own 400 ("No required SSL certificate was sent").
    let without = herdsman(
        &[("a", nginx.addr)],
        &format!("{}sni = \"app.internal\"\n", ca_line(test_ca())),
    );
    let response = without.get("/");
    assert_eq!(response.status(), 400, "{}", response.body_text());
    assert!(
        response.body_text().contains("No required SSL certificate"),
        "{}",
        response.body_text()
    );
}

#[test]
fn idle_tls_connections_to_a_server_are_reused() {
    let cert = CertFiles::issue("reuse", &["app.internal"]);
    let nginx = Nginx::start("reuse", &cert, "");
    let proxy = herdsman(
        &[("a", nginx.addr)],
        &format!("{}sni = \"app.internal\"\n", ca_line(test_ca())),
    );
    let connections: Vec<String> = (0..5)
        .map(|_| {
            let response = proxy.get("/");
            assert_eq!(response.status(), 200, "{}", response.body_text());
            let text = response.body_text();
            let conn = text.split_whitespace().find(|w| w.starts_with("conn="));
            conn.unwrap().to_string()
        })
        .collect();
    // One worker, one server connection for all five requests.
    assert!(
        connections.iter().all(|c| *c == connections[0]),
        "{connections:?}\n{}",
        nginx.log()
    );
}

#[test]
fn health_checks_are_made_over_tls_and_fail_a_server_whose_certificate_does_not_verify() {
    let good = CertFiles::issue("health-good", &["app.internal"]);
    let bad = CertFiles::issue("health-bad", &["other.internal"]);
    let good_nginx = Nginx::start("health-good", &good, "");
    let bad_nginx = Nginx::start("health-bad", &bad, "");
    let herdsman = Running::start(
        Setup::new()
            .admin()
            .server("good", good_nginx.addr)
            .server("bad", bad_nginx.addr),
    );
    let tables = format!(
        "[pool.tls]\n{}sni = \"app.internal\"\n[pool.health]\npath = \"/\"\ninterval = \"50ms\"\ntimeout = \"500ms\"\nfall = 2\nrise = 2\n",
        ca_line(test_ca())
    );
    herdsman.reconfigure(|text| format!("{text}{tables}"));
    let health = |name: &str| {
        let (status, json) = herdsman.api("GET", "/api/pools", None);
        assert_eq!(status, 200, "{json}");
        let servers = json["pools"][0]["servers"].as_array().unwrap().clone();
        servers.into_iter().find(|s| s["name"] == name).unwrap()
    };
    assert!(
        eventually(Duration::from_secs(3), || health("bad")["health"] == "down"),
        "{}",
        health("bad")
    );
    let bad = health("bad");
    assert!(
        bad["reason"]
            .as_str()
            .is_some_and(|why| why.contains("TLS handshake")),
        "{bad}"
    );
    // The good one passes its checks over TLS (a cleartext check would fail: nginx answers
    // cleartext on its TLS port with a 400).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(health("good")["health"], "up", "{}", health("good"));
    // The admin API shows the pool's TLS and the name each server is asked for and verified
    // against.
    let (_, json) = herdsman.api("GET", "/api/pools", None);
    assert_eq!(
        json["pools"][0]["tls"],
        serde_json::json!({
            "ca": test_ca().pem_file.display().to_string(),
            "sni": "app.internal",
            "verify": true,
            "client_certificate": null,
        })
    );
    assert_eq!(health("good")["tls_name"], "app.internal");
    assert_eq!(health("bad")["tls_name"], "app.internal");
}

#[test]
fn a_new_connection_to_a_server_resumes_the_session_of_an_earlier_one() {
    let cert = CertFiles::issue("resume", &["app.internal"]);
    // nginx closes every connection after its response: each request needs a new one.
    let nginx = Nginx::start(
        "resume",
        &cert,
        "keepalive_timeout 0;\nssl_session_cache shared:herdsman:1m;",
    );
    let proxy = herdsman(
        &[("a", nginx.addr)],
        &format!("{}sni = \"app.internal\"\n", ca_line(test_ca())),
    );
    let reused: Vec<String> = (0..3)
        .map(|_| {
            let response = proxy.get("/");
            assert_eq!(response.status(), 200, "{}", response.body_text());
            let text = response.body_text();
            let conn = text.split_whitespace().find(|w| w.starts_with("reused="));
            conn.unwrap().to_string()
        })
        .collect();
    assert_eq!(
        reused,
        ["reused=.", "reused=r", "reused=r"],
        "{}",
        nginx.log()
    );
}
