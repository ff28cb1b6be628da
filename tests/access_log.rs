//! Access logs: `combined` and `json` lines checked field by field, lines written by a graceful
//! stop, rotation with SIGUSR1 under concurrent load (no line lost, none twice), a reload that
//! moves a log, `check` on the new keys, and heap allocations per request with a log on.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;

// ---------------------------------------------------------------------------------------------
// Counting the allocations of one thread (a herdsman worker), for the last test. Other tests in
// this binary run meanwhile on their own threads, so only the watched thread's are counted.

struct CountingAllocator;

/// The kernel thread id whose allocations are counted (-1: none).
static WATCHED_THREAD: AtomicI32 = AtomicI32::new(-1);
static WATCHED_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // A const-initialised Cell: no allocation and no destructor, so usable inside `alloc`.
    static THREAD_ID: Cell<i32> = const { Cell::new(0) };
}

fn count_if_watched() {
    let watched = WATCHED_THREAD.load(Ordering::Relaxed);
    if watched < 0 {
        return;
    }
    let this = THREAD_ID
        .try_with(|id| {
            if id.get() == 0 {
                // SAFETY: gettid takes no arguments and cannot fail.
                id.set(unsafe { libc::gettid() });
            }
            id.get()
        })
        .unwrap_or(0);
    if this == watched {
        WATCHED_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the count is a side effect.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_if_watched();
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_if_watched();
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_if_watched();
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A fresh, empty directory for one test's log files.
fn log_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("herdsman-access-log-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A config with listener "web" on `bind`, logging to `log` in `format`, and pool "app" of the
/// named servers (`sticky`: with a sticky cookie `H`).
fn config(
    bind: &str,
    log: &Path,
    format: &str,
    servers: &[(&str, SocketAddr)],
    sticky: bool,
) -> String {
    let mut text = format!(
        "workers = 2\nshutdown_grace = \"5s\"\n\n[[listener]]\nname = \"web\"\nbind = \"{bind}\"\n\
         pool = \"app\"\naccess_log = {:?}\naccess_log_format = \"{format}\"\n\n\
         [[pool]]\nname = \"app\"\nservers = [\n",
        log.display()
    );
    for (name, addr) in servers {
        text.push_str(&format!("  {{ name = \"{name}\", addr = \"{addr}\" }},\n"));
    }
    text.push_str("]\n");
    if sticky {
        text.push_str("[pool.sticky]\ncookie = \"H\"\n");
    }
    text
}

/// The lines of the file at `path` (none if it does not exist).
fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The lines of `path` once there are `count` of them (they reach the file within a fraction of
/// a second of the requests); fails the test if there are not, or more.
fn wait_for_lines(path: &Path, count: usize) -> Vec<String> {
    eventually(Duration::from_secs(5), || lines(path).len() >= count);
    // A moment more, to catch lines that should not be there.
    thread::sleep(Duration::from_millis(300));
    let found = lines(path);
    assert_eq!(
        found.len(),
        count,
        "lines in {}:\n{}",
        path.display(),
        found.join("\n")
    );
    found
}

/// A `combined` line taken apart: the fields before the request line, the request line, status
/// and bytes, referer, user agent, and herdsman's `key=value` fields.
#[derive(Debug)]
struct Combined {
    client: String,
    time: String,
    request: String,
    status: String,
    bytes: String,
    referer: String,
    user_agent: String,
    extra: HashMap<String, String>,
}

fn parse_combined(line: &str) -> Combined {
    // Quotes inside fields are escaped (\x22), so the line splits on them cleanly.
    let parts: Vec<&str> = line.split('"').collect();
    assert_eq!(parts.len(), 7, "{line}");
    let (client, rest) = parts[0].split_once(" - - [").expect(line);
    let time = rest.strip_suffix("] ").expect(line);
    let mut status_bytes = parts[2].split_whitespace();
    assert_eq!(parts[4], " ", "{line}");
    let extra = parts[6]
        .split_whitespace()
        .map(|pair| {
            let (key, value) = pair.split_once('=').expect(line);
            (key.to_string(), value.to_string())
        })
        .collect();
    Combined {
        client: client.to_string(),
        time: time.to_string(),
        request: parts[1].to_string(),
        status: status_bytes.next().expect(line).to_string(),
        bytes: status_bytes.next().expect(line).to_string(),
        referer: parts[3].to_string(),
        user_agent: parts[5].to_string(),
        extra,
    }
}

/// Milliseconds as the log writes them: digits, a point, three digits.
fn millis(text: &str) -> f64 {
    let (whole, fraction) = text.split_once('.').expect(text);
    assert!(
        whole.chars().all(|c| c.is_ascii_digit()) && fraction.len() == 3,
        "{text}"
    );
    text.parse().expect(text)
}

// ---------------------------------------------------------------------------------------------
// Tests

/// A server that answers with its name, or with no body at all for `/empty`.
fn named_or_empty(name: &'static str) -> Mock {
    Mock::start(move |ex| {
        ex.read_body()?;
        let body: &[u8] = if ex.head.target() == "/empty" {
            b""
        } else {
            name.as_bytes()
        };
        ex.respond(200, &[], body)?;
        Ok(Flow::KeepAlive)
    })
}

#[test]
fn combined_lines_say_what_happened_field_by_field() {
    let (a, b) = (named_or_empty("a"), named_or_empty("bee"));
    let dir = log_dir("combined");
    let log = dir.join("access.log");
    let proxy = Proxy::start(&config(
        "127.0.0.1:0",
        &log,
        "combined",
        &[("a", a.addr), ("b", b.addr)],
        true,
    ));

    // A new client: the response assigns it a server (sticky).
    let mut conn = proxy.connect();
    let first = conn.roundtrip(
        b"GET /first?x=1 HTTP/1.1\r\nHost: shop.example\r\nReferer: http://ref.example/page\r\n\
          User-Agent: agent \"quoted\"\r\n\r\n",
    );
    assert_eq!(first.status(), 200);
    let answered = first.body_text();
    let cookie = first
        .header("set-cookie")
        .expect("a sticky cookie")
        .to_string();
    let cookie = cookie.split(';').next().unwrap().to_string();
    // Back with its cookie, on HTTP/1.0: the same server, and an empty body.
    let second = conn.roundtrip(
        format!("GET /empty HTTP/1.0\r\nHost: shop.example\r\nCookie: {cookie}\r\n\r\n").as_bytes(),
    );
    assert_eq!(second.status(), 200);
    // A head herdsman refuses before routing it.
    let mut bad = proxy.connect();
    let refused = bad.roundtrip(b"GET /bad HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n");
    assert_eq!(refused.status(), 400);

    // Lines of different workers reach the file in the order their buffers do.
    let mut found = wait_for_lines(&log, 3);
    found.sort_by_key(|line| {
        ["/first", "/empty", "\"-\""]
            .iter()
            .position(|mark| line.contains(mark))
    });
    let lines: Vec<Combined> = found.iter().map(|line| parse_combined(line)).collect();
    let server = if answered == "a" { "a" } else { "b" };

    let first = &lines[0];
    assert_eq!(first.client, "127.0.0.1");
    assert!(
        first.time.ends_with(" +0000") && first.time.len() == 26,
        "{}",
        first.time
    );
    assert_eq!(first.request, "GET /first?x=1 HTTP/1.1");
    assert_eq!(first.status, "200");
    assert_eq!(first.bytes, answered.len().to_string());
    assert_eq!(first.referer, "http://ref.example/page");
    assert_eq!(first.user_agent, "agent \\x22quoted\\x22");
    assert_eq!(first.extra["pool"], "app");
    assert_eq!(first.extra["server"], server);
    assert_eq!(first.extra["sticky"], "1");
    let (upstream, total) = (
        millis(&first.extra["upstream_ms"]),
        millis(&first.extra["total_ms"]),
    );
    assert!(upstream <= total && total < 5_000.0, "{upstream} {total}");

    let second = &lines[1];
    assert_eq!(second.request, "GET /empty HTTP/1.0");
    assert_eq!(
        (second.status.as_str(), second.bytes.as_str()),
        ("200", "-")
    );
    assert_eq!(
        (second.referer.as_str(), second.user_agent.as_str()),
        ("-", "-")
    );
    assert_eq!(second.extra["server"], server);
    assert_eq!(second.extra["sticky"], "1");

    let refused = &lines[2];
    assert_eq!(refused.request, "-");
    assert_eq!(refused.status, "400");
    assert_eq!(refused.extra["pool"], "-");
    assert_eq!(refused.extra["server"], "-");
    assert_eq!(refused.extra["upstream_ms"], "-");
    assert_eq!(refused.extra["sticky"], "0");
    assert_eq!(refused.extra["ended"], "bad_request");
    assert_eq!(second.extra["ended"], "done");
    millis(&refused.extra["total_ms"]);
    let keys: Vec<&str> = found[0]
        .rsplit('"')
        .next()
        .unwrap()
        .split_whitespace()
        .map(|pair| pair.split('=').next().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "pool",
            "server",
            "upstream_ms",
            "total_ms",
            "sticky",
            "buffered",
            "spooled",
            "received",
            "ended"
        ]
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn json_lines_parse_and_carry_every_field() {
    let a = Mock::named("alpha");
    let dir = log_dir("json");
    let log = dir.join("access.json");
    let proxy = Proxy::start(&config(
        "127.0.0.1:0",
        &log,
        "json",
        &[("a", a.addr)],
        false,
    ));
    let mut conn = proxy.connect();
    let response = conn.roundtrip(
        b"GET /caf\xc3\xa9?q=\"x\" HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: tab\there\r\n\r\n",
    );
    assert_eq!(response.status(), 200);
    let unreachable = refusing_addr();
    drop(proxy);

    let found = wait_for_lines(&log, 1);
    let line: serde_json::Value =
        serde_json::from_str(&found[0]).expect("one JSON object per line");
    let field = |name: &str| {
        line.get(name)
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            .clone()
    };
    let time = field("time");
    let time = time.as_str().unwrap();
    assert!(
        time.len() == 24 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
        "{time}"
    );
    assert_eq!(field("client"), "127.0.0.1");
    assert_eq!(field("method"), "GET");
    assert_eq!(field("target"), "/café?q=\"x\"");
    assert_eq!(field("version"), "HTTP/1.1");
    assert_eq!(field("host"), "shop.example");
    assert_eq!(field("status"), 200);
    assert_eq!(field("bytes"), 5);
    assert_eq!(field("referer"), serde_json::Value::Null);
    assert_eq!(field("user_agent"), "tab\there");
    assert_eq!(field("pool"), "app");
    assert_eq!(field("server"), "a");
    assert_eq!(field("sticky"), false);
    assert_eq!(field("spooled"), "none");
    assert_eq!(field("received"), 0);
    assert_eq!(field("ended"), "done");
    let upstream = field("upstream_ms").as_f64().expect("a number");
    let total = field("total_ms").as_f64().expect("a number");
    assert!(upstream >= 0.0 && upstream <= total, "{upstream} {total}");

    // A server that cannot be reached: 502, no response head from a server.
    let log = dir.join("down.json");
    let proxy = Proxy::start(&config(
        "127.0.0.1:0",
        &log,
        "json",
        &[("down", unreachable)],
        false,
    ));
    let response = proxy.get("/x");
    assert_eq!(response.status(), 502);
    let found = wait_for_lines(&log, 1);
    let line: serde_json::Value = serde_json::from_str(&found[0]).unwrap();
    assert_eq!(line["status"], 502);
    assert_eq!(line["server"], "down");
    assert_eq!(line["upstream_ms"], serde_json::Value::Null);
    assert_eq!(line["ended"], "connect_failed");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_graceful_stop_writes_every_line_first() {
    let a = Mock::named("a");
    let dir = log_dir("stop");
    let log = dir.join("access.log");
    let proxy = Proxy::start(&config(
        "127.0.0.1:0",
        &log,
        "combined",
        &[("a", a.addr)],
        false,
    ));
    let mut conn = proxy.connect();
    for i in 0..50 {
        assert_eq!(
            conn.roundtrip(&get_request(&format!("/{i}"), "")).status(),
            200
        );
    }
    drop(conn);
    proxy.stop();
    assert!(proxy.wait_stopped(Duration::from_secs(10)));
    // No waiting: the lines were written before `wait` returned.
    assert_eq!(lines(&log).len(), 50);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_log_to_standard_output_goes_there() {
    let a = Mock::named("a");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = config(
        &addr.to_string(),
        Path::new("-"),
        "json",
        &[("a", a.addr)],
        false,
    );
    let path = write_temp("stdout-log.toml", &text);
    let child = std::process::Command::new(binary())
        .args(["run", "-c", path.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn herdsman run");
    let mut child = ChildGuard(child);
    assert!(wait_listening(addr, Duration::from_secs(10)));
    let mut conn = Conn::connect(addr);
    for i in 0..5 {
        assert_eq!(
            conn.roundtrip(&get_request(&format!("/out{i}"), ""))
                .status(),
            200
        );
    }
    drop(conn);
    child.signal(libc::SIGTERM);
    assert!(
        child.wait_timeout(Duration::from_secs(15)).is_some(),
        "herdsman did not stop"
    );
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.0.stdout.take().unwrap(), &mut out).unwrap();
    let targets: Vec<String> = out
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect(line))
        .map(|json| json["target"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(targets, ["/out0", "/out1", "/out2", "/out3", "/out4"]);
}

#[test]
fn sigusr1_after_a_rename_moves_later_lines_to_a_new_file_and_loses_none() {
    let a = Mock::named("a");
    let dir = log_dir("rotate");
    let log = dir.join("access.log");
    let rotated = dir.join("access.log.1");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let path = write_temp(
        "rotate.toml",
        &config(&addr.to_string(), &log, "combined", &[("a", a.addr)], false),
    );
    let child = run_binary_with(&path);
    assert!(wait_listening(addr, Duration::from_secs(10)));
    assert!(wait_signal_caught(
        &child,
        libc::SIGUSR1,
        Duration::from_secs(10)
    ));

    // Every request has its own target, so that each line can be matched to one request.
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let send = |conn: &mut Conn, target: String, sent: &std::sync::Mutex<Vec<String>>| {
        let response = conn.roundtrip(&get_request(&target, ""));
        assert_eq!(response.status(), 200);
        sent.lock().unwrap().push(target);
    };
    let mut conn = Conn::connect(addr);
    for i in 0..100 {
        send(&mut conn, format!("/before/{i}"), &sent);
    }
    assert!(eventually(Duration::from_secs(5), || lines(&log).len() == 100));

    // Concurrent clients keep sending while the file is renamed and the signal sent.
    let stop = Arc::new(AtomicBool::new(false));
    let during = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (stop, sent, during) = (Arc::clone(&stop), Arc::clone(&sent), Arc::clone(&during));
            thread::spawn(move || {
                let mut conn = Conn::connect(addr);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let response =
                        conn.roundtrip(&get_request(&format!("/during/{client}/{i}"), ""));
                    assert_eq!(response.status(), 200);
                    sent.lock().unwrap().push(format!("/during/{client}/{i}"));
                    during.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    std::fs::rename(&log, &rotated).unwrap();
    thread::sleep(Duration::from_millis(50));
    child.signal(libc::SIGUSR1);
    assert!(
        eventually(Duration::from_secs(5), || log.exists()),
        "SIGUSR1 did not open a new file at the path"
    );
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    assert!(during.load(Ordering::Relaxed) > 0);
    for i in 0..100 {
        send(&mut conn, format!("/after/{i}"), &sent);
    }

    let sent = sent.lock().unwrap().clone();
    let logged = || {
        let mut all = lines(&rotated);
        all.extend(lines(&log));
        all
    };
    eventually(Duration::from_secs(5), || logged().len() >= sent.len());
    thread::sleep(Duration::from_millis(300));
    let old = lines(&rotated);
    let new = lines(&log);
    let target = |line: &String| {
        parse_combined(line)
            .request
            .split(' ')
            .nth(1)
            .unwrap()
            .to_string()
    };
    let mut logged: Vec<String> = old.iter().chain(&new).map(target).collect();
    logged.sort();
    let mut expected = sent.clone();
    expected.sort();
    assert_eq!(
        logged.len(),
        expected.len(),
        "lines logged vs requests answered"
    );
    assert_eq!(
        logged, expected,
        "every request once, in one file or the other"
    );
    // Before the rename: the old file; after the reopen: the new one.
    assert!(
        old.iter().filter(|l| l.contains("/before/")).count() == 100,
        "{old:?}"
    );
    assert!(
        new.iter().filter(|l| l.contains("/after/")).count() == 100,
        "{new:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_reload_moves_a_listeners_log_to_its_new_path_and_format() {
    let a = Mock::named("a");
    let dir = log_dir("reload");
    let (first, second) = (dir.join("first.log"), dir.join("second.json"));
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let path = write_temp(
        "reload.toml",
        &config(
            &addr.to_string(),
            &first,
            "combined",
            &[("a", a.addr)],
            false,
        ),
    );
    let child = run_binary_with(&path);
    assert!(wait_listening(addr, Duration::from_secs(10)));
    assert!(wait_signal_caught(
        &child,
        libc::SIGHUP,
        Duration::from_secs(10)
    ));
    let get = |target: &str| {
        let mut conn = Conn::connect(addr);
        conn.roundtrip(&get_request(target, "Connection: close\r\n"))
            .status()
    };
    assert_eq!(get("/one"), 200);
    std::fs::write(
        &path,
        config(&addr.to_string(), &second, "json", &[("a", a.addr)], false),
    )
    .unwrap();
    child.signal(libc::SIGHUP);
    // The reload applies to the requests after it; before it applies, lines still go to the first.
    assert!(eventually(Duration::from_secs(5), || {
        get("/probe");
        !lines(&second).is_empty()
    }));
    assert_eq!(get("/two"), 200);
    assert!(eventually(Duration::from_secs(5), || lines(&second)
        .iter()
        .any(|l| l.contains("/two"))));
    let json = lines(&second);
    for line in &json {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_ne!(value["target"], "/one");
    }
    let combined = lines(&first);
    assert!(
        combined.iter().any(|l| l.contains("\"GET /one HTTP/1.1\"")),
        "{combined:?}"
    );
    assert!(!combined.iter().any(|l| l.contains("/two")));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_names_a_bad_access_log_format_with_its_key_and_line() {
    let dir = log_dir("check");
    let text = config(
        "127.0.0.1:8080",
        &dir.join("a.log"),
        "apache",
        &[("a", "127.0.0.1:9001".parse().unwrap())],
        false,
    );
    let line = text.lines().position(|l| l.contains("apache")).unwrap() + 1;
    let path = write_temp("bad-format.toml", &text);
    let (code, out) = run_binary(&["check", "-c", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "line {line}: listener[0].access_log_format = \"apache\": unknown; accepted: combined, json"
        )),
        "{out}"
    );

    let good = text.replace("apache", "json") + "\n[log]\nlevel = \"debug\"\n";
    let path = write_temp("good-format.toml", &good);
    let (code, out) = run_binary(&["check", "-c", path.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!(
            "access log {} (json)",
            dir.join("a.log").display()
        )),
        "{out}"
    );
    assert!(out.contains("log level debug"), "{out}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn run_refuses_an_access_log_it_cannot_open_naming_the_listener() {
    let dir = log_dir("unopenable");
    let missing = dir.join("no-such-dir").join("access.log");
    let text = config(
        "127.0.0.1:0",
        &missing,
        "combined",
        &[("a", "127.0.0.1:9001".parse().unwrap())],
        false,
    );
    let path = write_temp("unopenable.toml", &text);
    let (code, out) = run_binary(&["run", "-c", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "listener web: cannot open access log {}",
            missing.display()
        )),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The same bound as tests/allocations.rs, with an access log on: a line is formatted into the
/// worker's buffer, which allocates only when a new buffer starts (every 32 KiB of lines, or
/// each 100 ms flush).
#[test]
fn a_logged_request_on_a_warm_connection_allocates_next_to_nothing() {
    const WARM_UP: usize = 500;
    const MEASURED: u64 = 2_000;
    const MOST_PER_REQUEST: f64 = 0.25;
    let a = Mock::named("a");
    let dir = log_dir("allocations");
    let log = dir.join("access.log");
    let text = config("127.0.0.1:0", &log, "combined", &[("a", a.addr)], false)
        .replace("workers = 2", "workers = 1");
    let proxy = Proxy::start(&text);
    let mut conn = proxy.connect();
    let request = b"GET /item?id=7 HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: allocations-test\r\nReferer: http://r.example/\r\n\r\n";
    for _ in 0..WARM_UP {
        assert_eq!(conn.roundtrip(request).status(), 200);
    }
    let worker = proxy.server().stats().counters[0]
        .tid
        .load(Ordering::Relaxed);
    assert!(worker > 0);
    WATCHED_THREAD.store(worker, Ordering::Relaxed);
    let before = WATCHED_ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..MEASURED {
        assert_eq!(conn.roundtrip(request).status(), 200);
    }
    let allocations = WATCHED_ALLOCATIONS.load(Ordering::Relaxed) - before;
    WATCHED_THREAD.store(-1, Ordering::Relaxed);
    let per_request = allocations as f64 / MEASURED as f64;
    eprintln!("{allocations} worker allocations over {MEASURED} logged requests ({per_request:.3} per request)");
    assert!(
        per_request <= MOST_PER_REQUEST,
        "{per_request:.3} allocations per logged request"
    );
    drop(conn);
    drop(proxy);
    assert_eq!(lines(&log).len(), WARM_UP + MEASURED as usize);
    let _ = std::fs::remove_dir_all(dir);
}
