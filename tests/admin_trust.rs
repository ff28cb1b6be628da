//! The admin API answers only its operator, over real sockets: a request naming a foreign Host
//! (DNS rebinding) is refused before anything else; "simple" requests a web page on another
//! origin could send (a form, a `text/plain` fetch) change nothing, and no preflight is answered;
//! on a UNIX socket `herdsman ctl` works while the file's mode keeps other users out; and every
//! change is logged with who asked. The same attacks from a real browser are in
//! `tests/stats_page.rs`.

mod admin_support;
mod common;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use admin_support::Running;
use common::*;

/// herdsman in-process with its admin API on loopback TCP, pool "app" of server "a".
fn herdsman() -> (Running, Mock) {
    let a = Mock::named("a");
    (Running::start(Setup::new().admin().server("a", a.addr)), a)
}

/// Sends `request` as it is to the admin API at `admin`.
fn raw(admin: SocketAddr, request: &str) -> Response {
    Conn::connect(admin).roundtrip(request.as_bytes())
}

/// The names of pool "app"'s servers.
fn server_names(herdsman: &Running) -> Vec<String> {
    herdsman
        .servers()
        .into_iter()
        .map(|(name, _, _)| name)
        .collect()
}

const EVIL_SERVER: &str = r#"{"name":"evil","addr":"127.0.0.2:80"}"#;

/// `POST /api/pools/app/servers` adding "evil", with `host` and the extra header lines `extra`.
fn add_evil(host: &str, extra: &str) -> String {
    format!(
        "POST /api/pools/app/servers HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{EVIL_SERVER}",
        EVIL_SERVER.len()
    )
}

#[test]
fn a_foreign_host_is_refused_before_anything_else() {
    let (herdsman, _a) = herdsman();
    let port = herdsman.admin.port();
    let foreign = format!("evil.example:{port}");
    let read = raw(
        herdsman.admin,
        &format!("GET /api/pools HTTP/1.1\r\nHost: {foreign}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(read.status(), 403, "{}", read.body_text());
    assert!(
        read.body_text().contains("allowed_hosts"),
        "{}",
        read.body_text()
    );
    let json = "Content-Type: application/json\r\n";
    assert_eq!(raw(herdsman.admin, &add_evil(&foreign, json)).status(), 403);
    assert_eq!(server_names(&herdsman), ["a"]);
    // Its own names: IP literals and localhost.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let read = raw(
            herdsman.admin,
            &format!("GET /api/pools HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(read.status(), 200, "{host}");
    }

    // A name of the operator's own, once listed.
    let a = Mock::named("a");
    let text = Setup::new()
        .admin()
        .server("a", a.addr)
        .toml("127.0.0.1:0")
        .replace(
            "[admin]\n",
            "[admin]\nallowed_hosts = [\"herdsman-admin.test\"]\n",
        );
    let proxy = Proxy::start(&text);
    let admin = proxy.server().admin_addr().unwrap();
    let named = |host: &str| {
        raw(
            admin,
            &format!("GET /api/pools HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .status()
    };
    assert_eq!(named("herdsman-admin.test:9900"), 200);
    assert_eq!(named("other-admin.test:9900"), 403);
}

#[test]
fn what_a_page_on_another_origin_can_send_changes_nothing() {
    let (herdsman, _a) = herdsman();
    let host = format!("127.0.0.1:{}", herdsman.admin.port());
    // The "simple" requests of the issue: no preflight needed, so a browser sends them.
    let attacks = [
        (
            "text/plain from another origin",
            add_evil(
                &host,
                "Content-Type: text/plain\r\nOrigin: http://evil.example\r\n",
            ),
            403,
        ),
        (
            "text/plain, no Origin",
            add_evil(&host, "Content-Type: text/plain\r\n"),
            415,
        ),
        (
            "a form",
            add_evil(&host, "Content-Type: application/x-www-form-urlencoded\r\n"),
            415,
        ),
        (
            "JSON, but the browser says cross-site",
            add_evil(
                &host,
                "Content-Type: application/json\r\nSec-Fetch-Site: cross-site\r\n",
            ),
            403,
        ),
        (
            "JSON from another origin",
            add_evil(
                &host,
                "Content-Type: application/json\r\nOrigin: http://127.0.0.1:8080\r\n",
            ),
            403,
        ),
    ];
    for (case, request, status) in attacks {
        let answer = raw(herdsman.admin, &request);
        assert_eq!(answer.status(), status, "{case}: {}", answer.body_text());
        assert!(
            answer.header("Access-Control-Allow-Origin").is_none(),
            "{case}: a CORS header"
        );
    }
    for (path, content_type) in [
        ("/api/reload", "application/x-www-form-urlencoded"),
        ("/api/upgrade", "text/plain"),
    ] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(raw(herdsman.admin, &request).status(), 415, "{path}");
    }
    // The preflight a page would need before a JSON request is not answered.
    let preflight = raw(
        herdsman.admin,
        &format!(
            "OPTIONS /api/pools/app/servers HTTP/1.1\r\nHost: {host}\r\n\
             Origin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\n\
             Access-Control-Request-Headers: content-type\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(preflight.status() >= 400, "{}", preflight.status());
    assert!(preflight.header("Access-Control-Allow-Origin").is_none());
    assert!(preflight.header("Access-Control-Allow-Methods").is_none());
    assert_eq!(server_names(&herdsman), ["a"]);
    assert_eq!(
        herdsman.api("GET", "/api/workers", None).1["predecessors"],
        serde_json::json!([])
    );

    // What `herdsman ctl` sends — JSON, no Origin — does change things.
    let made = raw(
        herdsman.admin,
        &add_evil(&host, "Content-Type: application/json\r\n"),
    );
    assert_eq!(made.status(), 201, "{}", made.body_text());
    assert_eq!(server_names(&herdsman), ["a", "evil"]);
}

/// A folder others may enter (so that only the socket's own mode keeps them out), under
/// the tests' temporary folder.
fn open_folder(name: &str) -> PathBuf {
    let folder = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("admin-trust-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    for dir in folder.ancestors() {
        if dir.as_os_str().is_empty() || dir == Path::new("/") {
            break;
        }
        let mode = std::fs::metadata(dir).unwrap().permissions().mode();
        if mode & 0o005 != 0o005 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o005)).unwrap();
        }
    }
    folder
}

fn wait_for_socket(path: &Path) -> bool {
    eventually(Duration::from_secs(10), || {
        std::os::unix::net::UnixStream::connect(path).is_ok()
    })
}

#[test]
fn ctl_works_over_the_socket_and_other_users_are_kept_out() {
    let a = Mock::named("a");
    let folder = open_folder("socket");
    let socket = folder.join("admin.sock");
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        "{}\n[admin]\nsocket = {:?}\n",
        Setup::new().server("a", a.addr).toml(&web.to_string()),
        socket.display().to_string()
    );
    let config = write_temp("admin-socket.toml", &text);
    let log = folder.join("herdsman.log");
    let _herdsman = run_binary_logged(&config, &[], &log);
    assert!(
        wait_for_socket(&socket),
        "no socket at {}",
        socket.display()
    );
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket's mode is {mode:o}");

    let socket_arg = socket.to_str().unwrap();
    let (code, output) = run_binary(&["ctl", "--socket", socket_arg, "servers"]);
    assert_eq!(code, Some(0), "{output}");
    assert!(
        output.contains("app") && output.contains(&a.addr.to_string()),
        "{output}"
    );
    // With the config file, ctl finds the socket itself.
    let config_arg = config.to_str().unwrap();
    let (code, output) = run_binary(&["ctl", "--config", config_arg, "drain", "app/a"]);
    assert_eq!(code, Some(0), "{output}");
    let (_, output) = run_binary(&["ctl", "--config", config_arg, "servers"]);
    assert!(output.contains("drain"), "{output}");
    // The change is in herdsman's log, with who made it: this test's uid.
    let uid = unsafe { libc::geteuid() };
    assert!(
        eventually(Duration::from_secs(5), || {
            std::fs::read_to_string(&log).is_ok_and(|log| {
                log.lines().any(|line| {
                    line.contains("admin API: change made")
                        && line.contains(&format!("uid {uid}"))
                        && line.contains("/api/pools/app/servers/a/state")
                })
            })
        }),
        "no log line of the change: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // A binary upgrade hands the socket over: the new process answers on it, and the old one,
    // gone, did not take the file with it.
    let (code, output) = run_binary(&["ctl", "--socket", socket_arg, "upgrade", "--wait", "15"]);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("upgraded"), "{output}");
    // The new process, stopped with the test (it is not this test's child).
    let pid = output
        .split("pid ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no new pid in {output:?}"));
    let _successor = Successor(pid);
    let (code, output) = run_binary(&["ctl", "--socket", socket_arg, "servers"]);
    assert_eq!(code, Some(0), "after the upgrade: {output}");

    // Another user: `herdsman ctl` as nobody cannot connect. Only root can be another user.
    if uid != 0 {
        eprintln!("not root: the other-user case needs root to switch users; skipped");
        return;
    }
    // A copy of the binary that nobody may run (target/ may not be theirs to enter).
    let copy = folder.join("herdsman");
    std::fs::copy(binary(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = Command::new(&copy)
        .args(["ctl", "--socket", socket_arg, "servers"])
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&nobody.stderr);
    assert!(
        !nobody.status.success(),
        "another user reached the API: {said}"
    );
    assert!(said.contains("permission denied"), "{said}");
}
