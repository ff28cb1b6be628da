//! The command line: `--version`, `help`, `check` on good and bad configs (errors name the key,
//! the value and the line), and `demo` serving its three backends in turn.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;

const VALID: &str = r#"# A small but complete config.
workers = 2
shutdown_grace = "3s"

[[listener]]
name = "frontdoor"
bind = "127.0.0.1:8089"
backlog = 128
pool = "shop"

[timeouts]
connect = "1s"
client_header = "5s"
backend_response = "150ms"

[limits]
max_header_bytes = 8192
max_body_bytes = 0

[[pool]]
name = "shop"
balance = "least-conn"
servers = [
  { name = "alpha", addr = "127.0.0.1:9001" },
  { name = "beta", addr = "127.0.0.1:9002", weight = 2 },
]
"#;

/// 1-based line number of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in the config"))
        + 1
}

/// Runs `herdsman check` on a config file holding `text`; returns (exit code, output).
fn run_check(text: &str) -> (Option<i32>, String) {
    let path = write_temp("check.toml", text);
    run_binary(&["check", "-c", path.to_str().unwrap()])
}

/// Runs `check` on `text`; asserts it fails and returns its output.
fn check_fails(text: &str) -> String {
    let (code, out) = run_check(text);
    assert!(
        code.is_some_and(|c| c != 0),
        "check accepted a bad config (exit {code:?}); output:\n{out}\nconfig:\n{text}"
    );
    out
}

/// Asserts one output line reports a problem at `line` mentioning every one of `words`.
fn assert_problem(out: &str, line: usize, words: &[&str]) {
    let marker = format!("line {line}:");
    let found = out
        .lines()
        .any(|l| l.contains(&marker) && words.iter().all(|w| l.contains(w)));
    assert!(
        found,
        "expected a line with {marker:?} naming {words:?}; output was:\n{out}"
    );
}

#[test]
fn version_prints_name_and_version() {
    let (code, out) = run_binary(&["--version"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("herdsman 0.1.0"), "{out}");
}

#[test]
fn help_lists_the_commands() {
    let (code, out) = run_binary(&["help"]);
    assert_eq!(code, Some(0), "{out}");
    for command in ["run", "check", "demo"] {
        assert!(
            out.contains(command),
            "help does not mention {command}:\n{out}"
        );
    }
}

#[test]
fn unknown_command_fails() {
    let (code, out) = run_binary(&["frobnicate"]);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}: {out}");
}

#[test]
fn check_accepts_a_valid_config_and_summarises_it() {
    let (code, out) = run_check(VALID);
    assert_eq!(code, Some(0), "a valid config was refused:\n{out}");
    for name in ["frontdoor", "shop", "alpha", "beta"] {
        assert!(
            out.contains(name),
            "the summary does not name {name}:\n{out}"
        );
    }
}

#[test]
fn check_does_not_bind_the_listeners() {
    // The listener address is busy; check only validates, so it still succeeds.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let text = VALID.replace("127.0.0.1:8089", &format!("127.0.0.1:{port}"));
    let (code, out) = run_check(&text);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn run_refuses_a_busy_address_naming_the_listener_and_the_reason_once() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let text = VALID.replace("127.0.0.1:8089", &format!("127.0.0.1:{port}"));
    let path = write_temp("busy.toml", &text);
    let (code, out) = run_binary(&["run", "-c", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("frontdoor") && out.contains(&port.to_string()),
        "{out}"
    );
    assert_eq!(
        out.matches("Address already in use").count(),
        1,
        "the reason should be given once:\n{out}"
    );
}

#[test]
fn check_names_an_unknown_key_and_its_line() {
    let text = VALID.replace("[timeouts]\n", "[timeouts]\ncolour = \"blue\"\n");
    let out = check_fails(&text);
    assert_problem(&out, line_of(&text, "colour"), &["colour"]);
}

#[test]
fn check_names_an_unknown_top_level_key_and_its_line() {
    let text = VALID.replace("workers = 2\n", "workers = 2\nwrokers = 3\n");
    let out = check_fails(&text);
    assert_problem(&out, line_of(&text, "wrokers"), &["wrokers"]);
}

#[test]
fn check_names_a_bad_listener_address() {
    let text = VALID.replace("127.0.0.1:8089", "127.0.0.1:99999");
    let out = check_fails(&text);
    assert_problem(&out, line_of(&text, "99999"), &["bind", "127.0.0.1:99999"]);
}

#[test]
fn check_names_a_bad_server_address() {
    let text = VALID.replace("127.0.0.1:9002", "no-port-here");
    let out = check_fails(&text);
    assert_problem(&out, line_of(&text, "no-port-here"), &["no-port-here"]);
}

#[test]
fn check_names_a_listener_pool_that_does_not_exist() {
    let text = VALID.replace("pool = \"shop\"", "pool = \"nope\"");
    let out = check_fails(&text);
    assert_problem(&out, line_of(&text, "\"nope\""), &["pool", "nope"]);
}

#[test]
fn check_names_a_bad_duration() {
    let text = VALID.replace("connect = \"1s\"", "connect = \"2 parsecs\"");
    let out = check_fails(&text);
    assert_problem(&out, line_of(&text, "parsecs"), &["connect", "2 parsecs"]);
}

#[test]
fn check_names_an_unknown_balance_algorithm() {
    let text = VALID.replace("\"least-conn\"", "\"fastest\"");
    let out = check_fails(&text);
    assert_problem(&out, line_of(&text, "fastest"), &["balance", "fastest"]);
}

#[test]
fn check_refuses_duplicate_server_names() {
    let text = VALID.replace("name = \"beta\"", "name = \"alpha\"");
    let out = check_fails(&text);
    let first = line_of(&text, "name = \"alpha\"");
    let second = first + 1;
    let reported = [first, second].iter().any(|n| {
        out.lines()
            .any(|l| l.contains(&format!("line {n}:")) && l.contains("alpha"))
    });
    assert!(
        reported,
        "expected the duplicate \"alpha\" reported at line {first} or {second}:\n{out}"
    );
}

#[test]
fn check_warns_of_a_route_that_can_never_match_naming_both_lines_and_accepts_the_file() {
    let text = format!(
        "{VALID}\n[[route]]\nhost = \"*.example.com\"\npath_prefix = \"/api/\"\npool = \"shop\"\n\n\
         [[route]]\nhost = \"www.example.com\"\npath_prefix = \"/api/v2/\"\npool = \"shop\"\n"
    );
    let (code, out) = run_check(&text);
    assert_eq!(code, Some(0), "a warning refused the file:\n{out}");
    // Each route is named at its [[route]] line, the one above its host.
    let shadowing = line_of(&text, "*.example.com") - 1;
    let shadowed = line_of(&text, "www.example.com") - 1;
    assert_problem(
        &out,
        shadowed,
        &[
            "route[1] (host www.example.com, path /api/v2/*) can never match",
            &format!("route[0] on line {shadowing} (host *.example.com, path /api/*)"),
        ],
    );
    assert!(out.contains("check.toml: 1 warning"), "{out}");
    assert!(out.contains("check.toml: ok"), "{out}");
    let (_, clean) = run_check(VALID);
    assert!(!clean.contains("warning"), "{clean}");
}

#[test]
fn check_reports_a_missing_file() {
    let (code, out) = run_binary(&["check", "-c", "/nonexistent/herdsman.toml"]);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}: {out}");
    assert!(out.contains("/nonexistent/herdsman.toml"), "{out}");
}

/// The `http://IP:PORT` address in a line of text.
fn url_addr(line: &str) -> Option<std::net::SocketAddr> {
    let start = line.find("http://")? + "http://".len();
    let rest = &line[start..];
    let end = rest
        .find(|c: char| c == '/' || c.is_whitespace())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[test]
fn demo_serves_three_backends_in_turn() {
    let child = Command::new(binary())
        .args(["demo", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn herdsman demo");
    let mut child = ChildGuard(child);
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("demo printed nothing within 10 s");
    let addr =
        url_addr(&first).unwrap_or_else(|| panic!("first line has no http://IP:PORT: {first:?}"));
    assert_ne!(
        addr.port(),
        0,
        "the printed address must be the real one: {first:?}"
    );

    let bodies: Vec<String> = (0..6)
        .map(|_| {
            let mut conn = Conn::connect(addr);
            let response = conn.roundtrip(&get_request("/", "Connection: close\r\n"));
            assert_eq!(response.status(), 200);
            response.body_text()
        })
        .collect();
    let mut firsts = bodies[..3].to_vec();
    firsts.sort();
    assert_eq!(
        firsts,
        ["hello from a\n", "hello from b\n", "hello from c\n"],
        "{bodies:?}"
    );
    assert_eq!(
        bodies[..3],
        bodies[3..],
        "backends do not take turns: {bodies:?}"
    );
}

/// The systemd unit in contrib/ keeps the promises the README makes for it, and the commands it
/// runs are ones this binary accepts.
#[test]
fn the_systemd_unit_restarts_on_failure_with_least_privilege() {
    let unit = include_str!("../contrib/herdsman.service");
    let settings: Vec<(&str, &str)> = unit
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .collect();
    let value = |key: &str| {
        settings
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("the unit has no {key}"))
    };
    assert_eq!(value("Restart"), "on-failure");
    assert_eq!(value("NoNewPrivileges"), "yes");
    assert_eq!(value("ProtectSystem"), "strict");
    assert_eq!(value("CapabilityBoundingSet"), "CAP_NET_BIND_SERVICE");
    assert_eq!(value("AmbientCapabilities"), "CAP_NET_BIND_SERVICE");
    assert!(value("LimitNOFILE").parse::<u64>().unwrap() >= 100_000);
    // The commands, run against the example config instead of /etc/herdsman/herdsman.toml.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/herdsman.toml");
    let check = value("ExecStartPre");
    let args: Vec<&str> = check.split_whitespace().skip(1).collect();
    assert_eq!(args, ["check", "-c", "/etc/herdsman/herdsman.toml"]);
    let status = std::process::Command::new(common::binary())
        .args(["check", "-c", example])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let run: Vec<&str> = value("ExecStart").split_whitespace().skip(1).collect();
    assert_eq!(run, ["run", "-c", "/etc/herdsman/herdsman.toml"]);
    assert_eq!(value("ExecReload"), "/bin/kill -HUP $MAINPID");
}

#[test]
fn check_names_a_listeners_tls_its_certificates_and_their_expiry() {
    let cert = CertFiles::issue("check-summary", &["app.test", "www.app.test"]);
    let text = format!(
        "[[listener]]\nname = \"secure\"\nbind = \"127.0.0.1:8443\"\npool = \"app\"\n{}\
         [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"127.0.0.1:9\" }}]\n",
        tls_table(&[&cert], "min_version = \"1.3\"")
    );
    let (code, out) = run_check(&text);
    assert_eq!(code, Some(0), "{out}");
    let line = out
        .lines()
        .find(|line| line.trim_start().starts_with("TLS "))
        .unwrap_or_else(|| panic!("no TLS line under the listener:\n{out}"));
    assert!(line.contains("TLS 1.3+"), "{line}");
    // HTTP/2 first, as a TLS listener offers it unless told not to.
    assert!(line.contains("ALPN h2,http/1.1"), "{line}");
    // rcgen's default validity runs to 4096; the date and the days left both show.
    assert!(
        line.contains("certificate app.test,www.app.test until 4096-01-01 ("),
        "{line}"
    );
    assert!(line.contains(" days left)"), "{line}");
}
