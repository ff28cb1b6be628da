//! herdsman's TLS listener with the clients people use: curl (verifying the chain against the
//! test CA, SNI from the URL) and `openssl s_client` (SNI, ALPN, TLS 1.2 and 1.3, sessions saved
//! with `-sess_out` and resumed with `-sess_in`, unknown names refused, old versions refused).
//! Both must be installed (`scripts/test` installs them).

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// herdsman serving `certs` over TLS with `extra` lines in `[listener.tls]`, in front of a
/// server answering "hello".
fn start(certs: &[&CertFiles], extra: &str) -> (Proxy, Mock) {
    let server = Mock::named("hello");
    let text = Setup::new().server("a", server.addr).toml("127.0.0.1:0");
    let end_of_listener = "pool = \"app\"\n\n";
    let at = text.find(end_of_listener).unwrap() + end_of_listener.len();
    let text = format!(
        "{}{}\n{}",
        &text[..at],
        tls_table(certs, extra),
        &text[at..]
    );
    (Proxy::start_from_file(&text), server)
}

/// curl's output (`-w` `format` after the body) for https://`host`:port/ resolved to herdsman.
fn curl(addr: SocketAddr, host: &str, format: &str) -> (bool, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--http1.1", "--max-time", "10"])
        .arg("--cacert")
        .arg(&test_ca().pem_file)
        .arg("--resolve")
        .arg(format!("{host}:{}:127.0.0.1", addr.port()))
        .args(["--write-out", format])
        .arg(format!("https://{host}:{}/", addr.port()))
        .output()
        .expect("curl runs (scripts/test installs it)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// `openssl s_client` to herdsman with `args`, sending one request that closes the connection;
/// its whole output.
fn s_client(addr: SocketAddr, args: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string(), "-ign_eof"])
        .arg("-CAfile")
        .arg(&test_ca().pem_file)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl runs (scripts/test installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

#[test]
fn curl_verifies_the_chain_and_gets_the_answer_for_exact_and_wildcard_names() {
    let exact = CertFiles::issue("curl-exact", &["app.test"]);
    let wildcard = CertFiles::issue("curl-wild", &["*.example.test"]);
    let (proxy, _server) = start(&[&exact, &wildcard], "");
    for host in ["app.test", "api.example.test"] {
        let (ok, out) = curl(proxy.addr, host, " %{http_code} %{ssl_verify_result}");
        assert!(ok, "curl to {host} failed: {out}");
        assert_eq!(out, "hello 200 0", "{host}");
    }
    // A name no certificate holds gets the default, whose name curl then refuses.
    let (ok, out) = curl(proxy.addr, "other.test", "%{http_code}");
    assert!(!ok, "curl accepted a certificate for another name: {out}");
    assert!(out.contains("SSL") || out.contains("certificate"), "{out}");
}

#[test]
fn s_client_sees_sni_alpn_and_a_verified_chain_and_resumes_tls13_and_tls12_sessions() {
    let cert = CertFiles::issue("sclient", &["app.test"]);
    let (proxy, _server) = start(&[&cert], "");
    let dir = fresh_temp_dir("sclient-sessions");
    for (version, flag) in [("TLSv1.3", "-tls1_3"), ("TLSv1.2", "-tls1_2")] {
        let session = dir.join(format!("{version}.pem"));
        let session = session.to_str().unwrap();
        let first = s_client(
            proxy.addr,
            &[
                flag,
                "-servername",
                "app.test",
                "-alpn",
                "http/1.1",
                "-sess_out",
                session,
            ],
        );
        assert!(first.contains(&format!("New, {version}")), "{first}");
        assert!(first.contains("Verify return code: 0 (ok)"), "{first}");
        assert!(first.contains("ALPN protocol: http/1.1"), "{first}");
        assert!(first.contains("HTTP/1.1 200 OK"), "{first}");
        assert!(first.contains("hello"), "{first}");
        assert!(Path::new(session).exists(), "no session was saved: {first}");
        let again = s_client(
            proxy.addr,
            &[flag, "-servername", "app.test", "-sess_in", session],
        );
        assert!(again.contains(&format!("Reused, {version}")), "{again}");
        assert!(again.contains("HTTP/1.1 200 OK"), "{again}");
    }
}

#[test]
fn s_client_is_refused_an_unknown_name_and_versions_below_the_minimum() {
    let cert = CertFiles::issue("sclient-refuse", &["app.test"]);
    let (proxy, _server) = start(&[&cert], "unknown_name = \"refuse\"\nmin_version = \"1.3\"");
    let unknown = s_client(proxy.addr, &["-servername", "other.test"]);
    assert!(!unknown.contains("HTTP/1.1 200 OK"), "{unknown}");
    assert!(unknown.contains("alert"), "{unknown}");
    let old = s_client(proxy.addr, &["-servername", "app.test", "-tls1_2"]);
    assert!(!old.contains("HTTP/1.1 200 OK"), "{old}");
    assert!(old.contains("alert protocol version"), "{old}");
    let ok = s_client(proxy.addr, &["-servername", "app.test"]);
    assert!(
        ok.contains("New, TLSv1.3") && ok.contains("HTTP/1.1 200 OK"),
        "{ok}"
    );
}

#[test]
fn curl_and_s_client_with_a_client_certificate_are_served_and_without_one_are_refused() {
    let cert = CertFiles::issue("curl-mtls", &["app.test"]);
    let extra = format!(
        "client_ca = \"{}\"\nclient_auth = \"required\"",
        client_ca().pem_file.display()
    );
    let (proxy, _server) = start(&[&cert], &extra);
    let carol = client_ca().client_identity("carol", "spiffe://test/carol");
    let with = |extra_args: &[&str]| {
        Command::new("curl")
            .args(["--silent", "--show-error", "--http1.1", "--max-time", "10"])
            .arg("--cacert")
            .arg(&test_ca().pem_file)
            .arg("--resolve")
            .arg(format!("app.test:{}:127.0.0.1", proxy.addr.port()))
            .args(extra_args)
            .arg(format!("https://app.test:{}/", proxy.addr.port()))
            .output()
            .unwrap()
    };
    let (chain, key) = (carol.chain.to_str().unwrap(), carol.key.to_str().unwrap());
    let served = with(&["--cert", chain, "--key", key]);
    assert!(served.status.success(), "{served:?}");
    assert_eq!(served.stdout, b"hello");
    let refused = with(&[]);
    assert!(
        !refused.status.success(),
        "served without a certificate: {refused:?}"
    );

    let accepted = s_client(
        proxy.addr,
        &["-servername", "app.test", "-cert", chain, "-key", key],
    );
    assert!(accepted.contains("HTTP/1.1 200 OK"), "{accepted}");
    let turned_away = s_client(proxy.addr, &["-servername", "app.test"]);
    assert!(!turned_away.contains("HTTP/1.1 200 OK"), "{turned_away}");
    assert!(turned_away.contains("alert"), "{turned_away}");
}
