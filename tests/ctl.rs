//! `herdsman ctl` as a person runs it: the built binary against a herdsman started in-process,
//! its output and exit status, and the messages of the ways a call fails.

mod admin_support;
mod common;

use std::net::SocketAddr;
use std::process::Command;

use admin_support::{body_of, caching_server, count, requests_for, Running};
use common::*;

/// What a `ctl` run printed, and how it ended.
#[derive(Debug)]
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `herdsman ctl --admin ADMIN ARGS…` with HERDSMAN_ADMIN_TOKEN set to `token` (or unset,
/// whatever the environment of the tests says). ctl's own timeouts bound how long it runs.
fn ctl(admin: SocketAddr, token: Option<&str>, args: &[&str]) -> Outcome {
    let mut command = Command::new(binary());
    command
        .arg("ctl")
        .arg("--admin")
        .arg(admin.to_string())
        .args(args)
        .env_remove("HERDSMAN_ADMIN_TOKEN")
        .env("RUST_LOG", "off");
    if let Some(token) = token {
        command.env("HERDSMAN_ADMIN_TOKEN", token);
    }
    let output = command.output().expect("run herdsman ctl");
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// `ctl` against `herdsman`, with its token if it has one; asserts success and returns stdout.
fn ctl_ok(herdsman: &Running, args: &[&str]) -> String {
    let outcome = ctl(herdsman.admin, herdsman.token.as_deref(), args);
    assert_eq!(outcome.code, Some(0), "ctl {args:?}: {outcome:?}");
    assert!(outcome.stderr.is_empty(), "ctl {args:?}: {outcome:?}");
    outcome.stdout
}

/// `ctl` against `herdsman`, expecting failure; returns stderr.
fn ctl_fails(admin: SocketAddr, token: Option<&str>, args: &[&str]) -> String {
    let outcome = ctl(admin, token, args);
    assert_eq!(outcome.code, Some(1), "ctl {args:?}: {outcome:?}");
    assert!(outcome.stdout.is_empty(), "ctl {args:?}: {outcome:?}");
    outcome.stderr
}

fn two_servers(a: &Mock, b: &Mock) -> Setup {
    Setup::new().admin().server("a", a.addr).server("b", b.addr)
}

/// The cells of a line of `ctl servers`, as words.
fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn servers_prints_an_aligned_table() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr).weighted(
        "backend-b",
        b.addr,
        12,
    ));
    herdsman.answers(3);
    let table = ctl_ok(&herdsman, &["servers"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert_eq!(
        words(lines[0]),
        ["POOL", "SERVER", "ADDR", "STATE", "HEALTH", "WEIGHT", "ACTIVE", "REQUESTS", "LATMS"]
    );
    // A round-robin pool keeps no latency estimate.
    assert!(
        lines[1..].iter().all(|line| words(line)[8] == "-"),
        "{table}"
    );
    assert_eq!(
        words(lines[1])[..6],
        ["app", "a", &a.addr.to_string(), "ready", "up", "1"]
    );
    assert_eq!(
        words(lines[2])[..6],
        ["app", "backend-b", &b.addr.to_string(), "ready", "up", "12"]
    );
    let requests: u64 = lines[1..]
        .iter()
        .map(|line| words(line)[7].parse::<u64>().unwrap())
        .sum();
    assert_eq!(requests, 3, "{table}");
    // Aligned: every column starts at the same offset on every line.
    let addr_at = lines[0].find("ADDR").unwrap();
    assert_eq!(lines[1].find(&a.addr.to_string()), Some(addr_at), "{table}");
    assert_eq!(lines[2].find(&b.addr.to_string()), Some(addr_at), "{table}");
    // Numbers are right-aligned under their headings.
    let weight_end = lines[0].find("WEIGHT").unwrap() + "WEIGHT".len();
    assert_eq!(&lines[2][weight_end - 2..weight_end], "12", "{table}");
}

#[test]
fn servers_names_what_each_server_of_a_tls_pool_is_verified_against() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));
    // Without a TLS pool, no TLS column.
    assert!(!ctl_ok(&herdsman, &["servers"]).contains("TLS"));
    // The servers are asked for by their addresses (no sni), and not verified.
    herdsman.reconfigure(|text| format!("{text}[pool.tls]\nverify = false\n"));
    let table = ctl_ok(&herdsman, &["servers"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        words(lines[0])[..5],
        ["POOL", "SERVER", "ADDR", "TLS", "STATE"]
    );
    for (line, mock) in lines[1..].iter().zip([&a, &b]) {
        let ip = mock.addr.ip().to_string();
        assert_eq!(
            words(line)[3..6],
            [ip.as_str(), "unverified", "ready"],
            "{table}"
        );
    }
    // The API says the same.
    let (_, json) = herdsman.api("GET", "/api/pools", None);
    assert_eq!(json["pools"][0]["tls"]["verify"], false, "{json}");
    assert_eq!(json["pools"][0]["tls"]["ca"], "system", "{json}");
    assert_eq!(
        json["pools"][0]["servers"][0]["tls_name"], "127.0.0.1",
        "{json}"
    );
}

#[test]
fn state_and_weight_commands_confirm_and_take_effect() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));

    assert_eq!(ctl_ok(&herdsman, &["drain", "app/b"]), "app/b: drain\n");
    assert_eq!(herdsman.servers()[1], ("b".into(), "drain".into(), 1));
    assert_eq!(count(&herdsman.answers(4), "a"), 4);
    assert_eq!(ctl_ok(&herdsman, &["maint", "app/b"]), "app/b: maint\n");
    assert_eq!(ctl_ok(&herdsman, &["ready", "app/b"]), "app/b: ready\n");
    assert_eq!(count(&herdsman.answers(4), "b"), 2);

    assert_eq!(
        ctl_ok(&herdsman, &["weight", "app/b", "3"]),
        "app/b: weight 3\n"
    );
    assert_eq!(herdsman.servers()[1], ("b".into(), "ready".into(), 3));
    let answers = herdsman.answers(8);
    assert_eq!(
        (count(&answers, "a"), count(&answers, "b")),
        (2, 6),
        "{answers:?}"
    );
    // The option may come after the command, too.
    let admin = herdsman.admin.to_string();
    let outcome = Command::new(binary())
        .args(["ctl", "servers", "--admin", &admin])
        .env_remove("HERDSMAN_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(outcome.status.success());
    assert!(String::from_utf8_lossy(&outcome.stdout).contains(" 3 "));
}

#[test]
fn add_and_remove_a_server() {
    let (a, c) = (Mock::named("a"), Mock::named("c"));
    let herdsman = Running::start(Setup::new().admin().server("a", a.addr));
    let c_addr = c.addr.to_string();
    assert_eq!(
        ctl_ok(&herdsman, &["add", "app", "c", &c_addr, "--weight", "2"]),
        format!("app/c: added at {c_addr}, weight 2, ready\n")
    );
    let answers = herdsman.answers(6);
    assert_eq!(
        (count(&answers, "a"), count(&answers, "c")),
        (2, 4),
        "{answers:?}"
    );
    assert!(ctl_ok(&herdsman, &["servers"]).contains(&c_addr));

    assert_eq!(
        ctl_ok(&herdsman, &["remove", "app/c"]),
        format!("app/c: removed (was at {c_addr})\n")
    );
    assert_eq!(count(&herdsman.answers(4), "a"), 4);
    assert!(!ctl_ok(&herdsman, &["servers"]).contains(&c_addr));

    // Added in a state: test servers take only requests with their token.
    ctl_ok(&herdsman, &["add", "app", "c", &c_addr, "--state", "test"]);
    assert_eq!(count(&herdsman.answers(4), "a"), 4);
    let printed = ctl_ok(&herdsman, &["test-token", "app/c"]);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 2, "{printed}");
    let token = lines[0];
    assert!(!token.is_empty() && !token.contains(' '), "{printed}");
    assert_eq!(lines[1], format!("X-Herdsman-Test: {token}"));
    let mut conn = Conn::connect(herdsman.web);
    let response = conn.roundtrip(&get_request(
        "/",
        &format!("{}\r\nConnection: close\r\n", lines[1]),
    ));
    assert_eq!(response.body_text(), "c");
}

#[test]
fn reload_applies_a_good_file_and_shows_a_bad_ones_problems() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start(two_servers(&a, &b));
    herdsman.rewrite(
        Setup::new()
            .admin()
            .server("a", a.addr)
            .weighted("b", b.addr, 3),
    );
    let printed = ctl_ok(&herdsman, &["reload"]);
    assert!(printed.starts_with("reloaded: generation "), "{printed}");
    assert_eq!(printed.lines().count(), 1, "{printed}");
    assert_eq!(herdsman.servers()[1], ("b".into(), "ready".into(), 3));

    // A key that waits for a restart is named.
    let good = std::fs::read_to_string(&herdsman.path).unwrap();
    herdsman.rewrite_text(&good.replace("workers = 2", "workers = 3"));
    let printed = ctl_ok(&herdsman, &["reload"]);
    assert!(
        printed
            .ends_with("\nchanged in the file, taking effect on restart (or upgrade): workers\n"),
        "{printed}"
    );

    herdsman.rewrite_text(&good.replace("round-robin", "fastest-first"));
    let stderr = ctl_fails(herdsman.admin, None, &["reload"]);
    let mut lines = stderr.lines();
    assert_eq!(
        lines.next(),
        Some("herdsman ctl: the new config was refused; the running one stays")
    );
    let problem = lines.next().unwrap_or_default();
    assert!(
        problem.starts_with("  line ") && problem.contains("fastest-first"),
        "{stderr}"
    );
    assert_eq!(herdsman.servers()[1], ("b".into(), "ready".into(), 3));
    assert_eq!(herdsman.answers(4).len(), 4);
}

#[test]
fn failures_say_why() {
    // Nothing listens.
    let nowhere = refusing_addr();
    let stderr = ctl_fails(nowhere, None, &["servers"]);
    assert!(
        stderr.starts_with(&format!(
            "herdsman ctl: cannot reach the admin API at {nowhere}: connection refused"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("[admin] bind"), "{stderr}");

    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let herdsman = Running::start_with_token(two_servers(&a, &b), "s3cret-t0ken");
    let stderr = ctl_fails(herdsman.admin, Some("wrong"), &["drain", "app/b"]);
    assert!(stderr.contains("refused the token"), "{stderr}");
    assert!(stderr.contains("HERDSMAN_ADMIN_TOKEN"), "{stderr}");
    let stderr = ctl_fails(herdsman.admin, None, &["servers"]);
    assert!(stderr.contains("set HERDSMAN_ADMIN_TOKEN"), "{stderr}");
    assert_eq!(herdsman.servers()[1], ("b".into(), "ready".into(), 1));

    // The API's reasons.
    let token = Some("s3cret-t0ken");
    let stderr = ctl_fails(herdsman.admin, token, &["drain", "app/zz"]);
    assert_eq!(
        stderr,
        "herdsman ctl: pool \"app\" has no server named \"zz\"\n"
    );
    let stderr = ctl_fails(herdsman.admin, token, &["weight", "app/b", "300"]);
    assert!(stderr.contains("300") && stderr.contains("256"), "{stderr}");
    let addr = a.addr.to_string();
    let stderr = ctl_fails(herdsman.admin, token, &["add", "app", "a", &addr]);
    assert!(
        stderr.contains("already has a server named \"a\""),
        "{stderr}"
    );
    let stderr = ctl_fails(
        herdsman.admin,
        token,
        &["add", "app", "c", "127.0.0.1:1", "--state", "asleep"],
    );
    assert!(stderr.contains("\"asleep\" is not a state"), "{stderr}");

    // Usage mistakes are clap's: exit status 2 and no request.
    let outcome = ctl(herdsman.admin, token, &["drain", "b"]);
    assert_eq!(outcome.code, Some(2), "{outcome:?}");
    assert!(outcome.stderr.contains("POOL/SERVER"), "{outcome:?}");
}

#[test]
fn certs_lists_each_tls_listeners_certificates_with_names_issuer_and_expiry() {
    let a = Mock::named("a");
    let running = Running::start(Setup::new().admin().server("a", a.addr));
    assert_eq!(ctl_ok(&running, &["certs"]), "no TLS listener\n");
    let first = CertFiles::issue("ctl-first", &["app.test", "*.app.test"]);
    let second = CertFiles::issue("ctl-second", &["other.test"]);
    running.reconfigure(|text| {
        let listener_end = "pool = \"app\"\n\n";
        let at = text.find(listener_end).unwrap() + listener_end.len();
        let tls = tls_table(&[&first, &second], "");
        format!("{}{tls}\n{}", &text[..at], &text[at..])
    });
    let out = ctl_ok(&running, &["certs"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let heading: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        heading,
        ["LISTENER", "NAMES", "ISSUER", "EXPIRES", "LEFT", "ACME", "RENEWS"]
    );
    for (line, names) in lines[1..].iter().zip(["app.test,*.app.test", "other.test"]) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[..2], ["web", names], "{out}");
        assert!(line.contains("  CN=herdsman test CA  "), "{out}");
        // rcgen's default validity runs to 4096.
        assert!(cells[cells.len() - 4].starts_with("4096-01-01T"), "{out}");
        assert!(cells[cells.len() - 3].ends_with('d'), "{out}");
        assert_eq!(cells[cells.len() - 2..], ["no", "-"], "{out}");
    }
}

#[test]
fn cache_commands_purge_and_say_how_many_responses_went() {
    let server = caching_server();
    let herdsman = Running::start_with(
        Setup::new().admin().server("s1", server.addr),
        "[pool.cache]\n",
    );
    for target in ["/a", "/img/1", "/t/red/1"] {
        body_of(herdsman.web, "test.local", target, "");
    }
    body_of(
        herdsman.web,
        "test.local",
        "/a",
        "Accept-Encoding: gzip\r\n",
    );
    assert_eq!(
        ctl_ok(&herdsman, &["cache", "purge", "test.local/a"]),
        "test.local/a: 2 responses purged\n"
    );
    assert_eq!(
        ctl_ok(&herdsman, &["cache", "ban", "test.local", "/img/"]),
        "test.local/img/*: 1 response purged\n"
    );
    assert_eq!(
        ctl_ok(&herdsman, &["cache", "purge-tag", "red"]),
        "tag red: 1 response purged\n"
    );
    // What went is asked of the server again.
    for target in ["/a", "/img/1", "/t/red/1"] {
        let before = requests_for(&server, target);
        body_of(herdsman.web, "test.local", target, "");
        assert_eq!(requests_for(&server, target), before + 1, "{target}");
    }
    let refused = ctl_fails(herdsman.admin, None, &["cache", "purge", "ftp://h/a"]);
    assert!(
        refused.contains("scheme other than http or https"),
        "{refused}"
    );
}
