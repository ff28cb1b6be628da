//! herdsman's own log names the process on every line, in text and in JSON (`[log] format`), so
//! that the two processes of a binary upgrade, writing to one stderr, are told apart.

mod common;

use std::time::Duration;

use common::*;

/// Runs herdsman with `[log] format = "format"` until it listens and has logged a reload; its
/// pid and every line it logged.
fn logged_lines(format: &str) -> (u32, Vec<String>) {
    let app = Mock::named("app");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        "workers = 1\n[log]\nformat = \"{format}\"\n\
         [[listener]]\nname = \"web\"\nbind = \"{addr}\"\npool = \"app\"\n\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
        app.addr
    );
    let path = write_temp(&format!("log-{format}.toml"), &text);
    let log = path.with_extension("log");
    let child = run_binary_logged(&path, &[], &log);
    assert!(wait_listening(addr, Duration::from_secs(10)));
    // SIGHUP kills a process that does not catch it yet.
    assert!(wait_signal_caught(
        &child,
        libc::SIGHUP,
        Duration::from_secs(10)
    ));
    child.signal(libc::SIGHUP);
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(5), || read()
            .contains("config reloaded")),
        "{}",
        read()
    );
    let lines = read().lines().map(str::to_string).collect();
    (child.0.id(), lines)
}

#[test]
fn every_text_line_starts_with_the_process_id() {
    let (pid, lines) = logged_lines("text");
    assert!(lines.len() >= 2, "{lines:#?}");
    let prefix = format!("herdsman[{pid}] ");
    for line in &lines {
        assert!(line.starts_with(&prefix), "{line:?} of {lines:#?}");
    }
}

#[test]
fn every_json_line_is_an_object_whose_pid_is_the_process() {
    let (pid, lines) = logged_lines("json");
    assert!(lines.len() >= 2, "{lines:#?}");
    for line in &lines {
        let object: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(object["pid"], pid, "{line}");
        assert!(object["level"].is_string(), "{line}");
        assert!(object["fields"]["message"].is_string(), "{line}");
    }
    assert!(
        lines.iter().any(|line| line.contains("config reloaded")),
        "{lines:#?}"
    );
}

#[test]
fn the_listening_line_names_tls_and_alpn_refusals_are_logged_at_most_once_a_while() {
    let app = Mock::named("app");
    let cert = CertFiles::issue("log-alpn", &["app.test"]);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        "workers = 1\n[[listener]]\nname = \"secure\"\nbind = \"{addr}\"\npool = \"app\"\n\
         http2 = false\n{}[[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
        tls_table(&[&cert], ""),
        app.addr
    );
    let path = write_temp("log-alpn.toml", &text);
    let log = path.with_extension("log");
    let _child = run_binary_logged(&path, &[], &log);
    assert!(wait_listening(addr, Duration::from_secs(10)));
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(eventually(Duration::from_secs(5), || read().contains(" listening")));
    let text = read();
    let listening = text
        .lines()
        .find(|line| line.contains(" listening") && line.contains("secure"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(listening.contains("TLS 1.2+  ALPN http/1.1"), "{listening}");
    assert!(
        listening.contains("certificate app.test until "),
        "{listening}"
    );

    // A client that speaks only HTTP/2 (a gRPC client, say), on a listener with HTTP/2 turned
    // off: refused, three times over.
    let mut h2_only = (*client_config()).clone();
    h2_only.alpn_protocols = vec![b"h2".to_vec()];
    let h2_only = std::sync::Arc::new(h2_only);
    for _ in 0..3 {
        assert!(TlsConn::try_connect(addr, "app.test", &h2_only).is_err());
    }
    // Served as ever with HTTP/1.1.
    let mut ok = TlsConn::connect(addr, "app.test");
    assert_eq!(
        ok.roundtrip(&get_request("/", "Connection: close\r\n"))
            .status(),
        200
    );
    let refusals = || {
        read()
            .lines()
            .filter(|line| line.contains("TLS handshake refused"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(eventually(Duration::from_secs(5), || !refusals().is_empty()));
    let lines = refusals();
    assert_eq!(lines.len(), 1, "not rate-limited: {lines:#?}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(lines[0].contains("offered=\"h2\""), "{}", lines[0]);
    assert!(lines[0].contains("speaks=\"http/1.1\""), "{}", lines[0]);
}
