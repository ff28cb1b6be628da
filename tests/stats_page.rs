//! The live stats page (`GET /stats`) in a real browser: Debian's headless Chromium, driven over
//! the DevTools protocol (`headless_chrome`), against the herdsman binary with three in-process
//! mock servers and traffic flowing. The page's own script must fill its tables from the API, show
//! what `/api/pools` says, draw its chart, show each worker's HTTP/2 connections and streams in
//! flight, list the rate limits with the keys they refused most, and change a server's state with
//! a button; with a token
//! configured it must ask for the token in a form and then work the same. A screenshot of each
//! case is left in `target/` for a person to look at.
//!
//! A page on another origin, open in the same browser, tries what a cross-site attacker would —
//! `fetch` and form posts that add a server, reload and upgrade — and changes nothing.
//!
//! Chromium is required, not optional: without it these tests fail and say how to install it
//! (`bench/scripts/install-peers.sh`, which CI runs). Every wait is bounded.

mod admin_support;
mod browser_support;
mod common;

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::Tab;
use serde_json::{json, Value};

use browser_support::{eval, wait_for, Chromium, WAIT};
use common::*;

/// Workers, so that the workers table and the chart have several rows and lines.
const WORKERS: usize = 3;
/// The variable the binary reads its admin token from, in the token case.
const TOKEN_ENV: &str = "HERDSMAN_STATS_PAGE_TOKEN";

/// The herdsman binary serving pool "app" of servers a, b and c, with its admin API.
struct Herdsman {
    /// Declared first so that it stops before its servers go.
    _process: ChildGuard,
    web: SocketAddr,
    admin: SocketAddr,
    token: Option<String>,
    /// Its own log (stderr).
    log: PathBuf,
    _servers: Vec<Mock>,
}

impl Herdsman {
    /// Starts it; with `token`, the admin API wants `Authorization: Bearer <token>`.
    fn start(token: Option<&str>) -> Herdsman {
        Herdsman::start_with(token, None, "")
    }

    /// As [`Herdsman::start`], its listener a TLS one when `tls` (a `[listener.tls]` table) is
    /// given, `pool_tables` (e.g. `[pool.tls]`) after the pool.
    fn start_with(token: Option<&str>, tls: Option<&str>, pool_tables: &str) -> Herdsman {
        let servers = vec![Mock::named("a"), Mock::named("b"), slow_and_failing("c")];
        let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut setup = Setup::new().workers(WORKERS).admin_at(admin);
        for (name, server) in ["a", "b", "c"].into_iter().zip(&servers) {
            setup = setup.server(name, server.addr);
        }
        let mut text = format!("{}{pool_tables}", setup.toml(&web.to_string()));
        if let Some(tls) = tls {
            text = text.replacen(
                "pool = \"app\"\n\n",
                &format!("pool = \"app\"\n\n{tls}\n"),
                1,
            );
        }
        let mut env: Vec<(&str, &OsStr)> = Vec::new();
        if let Some(token) = token {
            text = text.replace(
                "[admin]\n",
                &format!("[admin]\ntoken_env = {TOKEN_ENV:?}\n"),
            );
            env.push((TOKEN_ENV, OsStr::new(token)));
        }
        let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "stats-page-{}-{}.log",
            std::process::id(),
            admin.port()
        ));
        let process = run_binary_logged(&write_temp("stats-page.toml", &text), &env, &log);
        for addr in [web, admin] {
            assert!(
                wait_listening(addr, Duration::from_secs(10)),
                "herdsman is not listening on {addr}\n{text}"
            );
        }
        Herdsman {
            _process: process,
            web,
            admin,
            token: token.map(str::to_string),
            log,
            _servers: servers,
        }
    }

    fn api(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        admin_support::api(self.admin, method, path, body, self.token.as_deref())
    }

    fn pools(&self) -> Value {
        let (status, json) = self.api("GET", "/api/pools", None);
        assert_eq!(status, 200, "{json}");
        json
    }

    fn page_url(&self) -> String {
        format!("http://{}/stats", self.admin)
    }
}

/// A server that takes 2–14 ms to answer and answers every seventh request with a 500, so that
/// the page has latencies and errors to show.
fn slow_and_failing(name: &str) -> Mock {
    let name = name.to_string();
    let seen = AtomicUsize::new(0);
    Mock::start(move |ex| {
        ex.read_body()?;
        let n = seen.fetch_add(1, Ordering::Relaxed);
        thread::sleep(Duration::from_millis(2 + (n % 7) as u64 * 2));
        let status = if n % 7 == 6 { 500 } else { 200 };
        ex.respond(status, &[("X-Server", &name)], name.as_bytes())?;
        Ok(Flow::KeepAlive)
    })
}

/// Requests through the proxy until dropped: a new connection every 20 ms, and a few
/// connections held open, so that workers have active connections for the chart.
struct Traffic {
    stop: Arc<AtomicBool>,
    sender: Option<JoinHandle<()>>,
    _held: Vec<Conn>,
}

impl Traffic {
    fn start(web: SocketAddr) -> Traffic {
        let held = (0..7).map(|_| Conn::connect(web)).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let sender = thread::spawn(move || {
            let mut n = 0;
            while !stopped.load(Ordering::Relaxed) {
                // A refused or failed request is not this test's concern: the page shows it.
                if let Ok(mut conn) = Conn::try_connect(web) {
                    let request = get_request(&format!("/load/{n}"), "Connection: close\r\n");
                    if conn.try_send(&request).is_ok() {
                        let _ = conn.read_response(false);
                    }
                }
                n += 1;
                thread::sleep(Duration::from_millis(20));
            }
        });
        Traffic {
            stop,
            sender: Some(sender),
            _held: held,
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(sender) = self.sender.take() {
            let _ = sender.join();
        }
    }
}

/// Waits for a refresh after now: the page has redrawn from the API since this was called.
fn wait_for_next_refresh(tab: &Tab) {
    let seen = eval(tab, "Number(document.body.dataset.refreshes || 0)");
    let seen = seen.as_u64().unwrap_or(0);
    wait_for(
        tab,
        &format!("Number(document.body.dataset.refreshes || 0) > {seen}"),
        "another refresh",
    );
}

/// The server rows as the page shows them: (pool, server, state, health), in page order.
fn rows_on_page(tab: &Tab) -> Vec<(String, String, String, String)> {
    let rows = eval(
        tab,
        "[...document.querySelectorAll('#servers tr[data-server]')].map((row) => [
            row.dataset.pool, row.dataset.server,
            row.querySelector('td.state').textContent,
            row.querySelector('td.health').textContent])",
    );
    serde_json::from_value(rows).unwrap()
}

/// The same rows as `GET /api/pools` has them.
fn rows_in_api(pools: &Value) -> Vec<(String, String, String, String)> {
    let text = |value: &Value| value.as_str().unwrap().to_string();
    let mut rows = Vec::new();
    for pool in pools["pools"].as_array().unwrap() {
        for server in pool["servers"].as_array().unwrap() {
            rows.push((
                text(&pool["name"]),
                text(&server["name"]),
                text(&server["state"]),
                text(&server["health"]),
            ));
        }
    }
    rows
}

/// The state cell of one server's row.
fn state_on_page(server: &str) -> String {
    format!("document.querySelector('#servers tr[data-pool=\"app\"][data-server=\"{server}\"] td.state').textContent")
}

/// Clicks `action`'s button in `server`'s row, as a person would (a real mouse click at the
/// button's place on the page).
fn click(tab: &Tab, server: &str, action: &str) {
    let selector = format!(
        "#servers tr[data-pool=\"app\"][data-server=\"{server}\"] button[data-action=\"{action}\"]"
    );
    tab.wait_for_element(&selector)
        .and_then(|button| button.click().map(|_| ()))
        .unwrap_or_else(|error| panic!("cannot click {selector}: {error:#}"));
}

/// Waits until the page and the API both say `server` is in `state`.
fn wait_for_state(tab: &Tab, herdsman: &Herdsman, server: &str, state: &str) {
    wait_for(
        tab,
        &format!("{} === {state:?}", state_on_page(server)),
        &format!("the page showing {server} in {state}"),
    );
    let api_state = rows_in_api(&herdsman.pools())
        .into_iter()
        .find(|row| row.1 == server)
        .map(|row| row.2);
    assert_eq!(api_state.as_deref(), Some(state), "/api/pools for {server}");
}

/// Asserts the page met no script error and nothing its security policy blocked.
fn assert_no_page_errors(tab: &Tab) {
    let errors = eval(tab, "document.body.dataset.pageErrors");
    assert_eq!(
        errors,
        Value::Null,
        "the page reported errors: {}",
        eval(tab, "document.getElementById('status').textContent")
    );
}

/// Saves a PNG of the whole window as `target/<name>`; returns where.
fn screenshot(tab: &Tab, name: &str) -> PathBuf {
    let png = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .expect("a screenshot");
    // CARGO_TARGET_TMPDIR is target/tmp.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory");
    let path = target.join(name);
    std::fs::write(&path, png).unwrap();
    path
}

#[test]
fn the_page_shows_the_pools_and_workers_and_drains_a_server() {
    let herdsman = Herdsman::start(None);
    let _traffic = Traffic::start(herdsman.web);
    let browser = Chromium::launch();
    let tab = browser.open(&herdsman.page_url());
    wait_for(
        &tab,
        "document.body.dataset.loaded === '1'",
        "the page filling its tables",
    );
    // A few refreshes, so that rates, latencies and the chart have something to show.
    for _ in 0..3 {
        wait_for_next_refresh(&tab);
    }

    // The same servers, states and health as the API, in the API's order.
    let on_page = rows_on_page(&tab);
    assert_eq!(on_page, rows_in_api(&herdsman.pools()));
    assert_eq!(on_page.len(), 3, "{on_page:?}");
    // Each row has its three buttons, and the requests column counts.
    let buttons = eval(
        &tab,
        "[...document.querySelectorAll('#servers tr[data-server]')].map((row) =>
            [...row.querySelectorAll('button[data-action]')].map((b) => b.dataset.action))",
    );
    assert_eq!(
        buttons,
        serde_json::json!([
            ["drain", "ready", "maint"],
            ["drain", "ready", "maint"],
            ["drain", "ready", "maint"]
        ])
    );
    let requests = eval(
        &tab,
        "[...document.querySelectorAll('#servers tr[data-server] td.requests')]
            .map((cell) => Number(cell.textContent.replace(/,/g, '')))",
    );
    assert!(
        requests
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n.as_f64() > Some(0.0)),
        "every server had requests: {requests}"
    );

    // One row per worker, and a chart with a line and a legend entry for each.
    let (status, workers) = herdsman.api("GET", "/api/workers", None);
    assert_eq!(status, 200, "{workers}");
    let worker_count = workers["workers"].as_array().unwrap().len();
    assert_eq!(worker_count, WORKERS);
    let rows = eval(
        &tab,
        "[...document.querySelectorAll('#workers tr[data-worker]')].map((row) => row.dataset.worker)",
    );
    assert_eq!(rows, serde_json::json!(["0", "1", "2"]));
    // The descriptors against the limit and the client cap, as /api/workers reports them.
    let cap = workers["descriptors"]["client_cap"].as_u64().unwrap();
    assert!(cap > 1_000, "{workers}");
    let said = eval(&tab, "document.getElementById('descriptors').textContent");
    let said = said.as_str().unwrap();
    assert!(said.starts_with("descriptors: "), "{said}");
    let cap_text = format!(
        "(cap {})",
        cap.to_string()
            .as_bytes()
            .rchunks(3)
            .rev()
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join(",")
    );
    assert!(said.contains(&cap_text), "{said} lacks {cap_text}");
    assert_eq!(
        eval(&tab, "document.querySelectorAll('#workers td.shed').length"),
        WORKERS
    );
    assert_eq!(
        eval(&tab, "document.querySelectorAll('#legend li').length"),
        worker_count
    );
    let chart = eval(
        &tab,
        "(() => {
            const chart = document.getElementById('chart');
            const pixels = chart.getContext('2d').getImageData(0, 0, chart.width, chart.height).data;
            let coloured = 0;
            for (let i = 0; i < pixels.length; i += 4) {
                // Neither white background nor grey grid: a worker's line.
                const [r, g, b] = [pixels[i], pixels[i + 1], pixels[i + 2]];
                if (Math.max(r, g, b) - Math.min(r, g, b) > 60) coloured++;
            }
            return { drawn: chart.dataset.drawn, samples: Number(chart.dataset.samples), coloured };
        })()",
    );
    assert_eq!(chart["drawn"], "1", "{chart}");
    assert!(chart["samples"].as_u64() >= Some(3), "{chart}");
    // A few seconds of five minutes is a short stretch at the right, and lines at the same
    // height cover each other: any coloured pixel at all is a line.
    assert!(
        chart["coloured"].as_u64() > Some(0),
        "no line drawn: {chart}"
    );

    // No TLS listener: no certificates section.
    assert_eq!(eval(&tab, "document.getElementById('tls').hidden"), true);

    // Drain b with its button: the row and the API say so.
    click(&tab, "b", "drain");
    wait_for_state(&tab, &herdsman, "b", "drain");
    wait_for(
        &tab,
        "document.getElementById('status').textContent === 'app/b: drain'",
        "the status line confirming the drain",
    );
    wait_for_next_refresh(&tab);
    assert_no_page_errors(&tab);
    let saved = screenshot(&tab, "stats-page.png");
    eprintln!("screenshot: {}", saved.display());
}

/// The workers' (HTTP/2 connections, HTTP/2 streams) cells as the page shows them, in order.
fn http2_cells_on_page(tab: &Tab) -> Value {
    eval(
        tab,
        "[...document.querySelectorAll('#workers tr[data-worker]')].map((row) =>
            [Number(row.querySelector('td.h2conns').textContent),
             Number(row.querySelector('td.h2streams').textContent)])",
    )
}

#[test]
fn the_page_shows_http2_connections_and_streams_in_flight() {
    let gate = Gate::new();
    let herdsman = HoldingH2c::start(WORKERS, &gate);
    let admin = herdsman.admin;
    let browser = Chromium::launch();
    let tab = browser.open(&format!("http://{admin}/stats"));
    wait_for(
        &tab,
        "document.body.dataset.loaded === '1'",
        "the page filling its tables",
    );
    assert_eq!(
        http2_cells_on_page(&tab),
        serde_json::json!([[0, 0], [0, 0], [0, 0]])
    );

    // A request held at the server: one worker shows its connection and its stream.
    let mut held = herdsman.hold("/held");
    wait_for(
        &tab,
        "document.getElementById('http2').textContent === \
         'HTTP/2 open, all workers: 1 connections, 1 streams'",
        "the HTTP/2 totals counting the stream in flight",
    );
    let mut cells: Vec<Value> = http2_cells_on_page(&tab).as_array().unwrap().clone();
    cells.sort_by_key(|pair| pair.to_string());
    assert_eq!(cells, [json!([0, 0]), json!([0, 0]), json!([1, 1])]);
    let saved = screenshot(&tab, "stats-page-http2.png");
    eprintln!("screenshot: {}", saved.display());

    // Answered: the stream is gone, the connection stays.
    gate.open();
    assert!(
        held.wait_for(b"held"),
        "the held request was never answered"
    );
    wait_for(
        &tab,
        "document.getElementById('http2').textContent === \
         'HTTP/2 open, all workers: 1 connections, 0 streams'",
        "the HTTP/2 totals without the stream",
    );
    assert_no_page_errors(&tab);
}

#[test]
fn the_page_lists_the_tls_listeners_certificates() {
    let first = CertFiles::issue("page-first", &["app.test", "*.app.test"]);
    let second = CertFiles::issue("page-second", &["other.test"]);
    // The pool speaks TLS to its servers too, unverified (no request is sent here).
    let herdsman = Herdsman::start_with(
        None,
        Some(&tls_table(&[&first, &second], "")),
        "[pool.tls]\nverify = false\n",
    );
    let browser = Chromium::launch();
    let tab = browser.open(&herdsman.page_url());
    wait_for(
        &tab,
        "document.body.dataset.loaded === '1'",
        "the page filling its tables",
    );
    assert_eq!(eval(&tab, "document.getElementById('tls').hidden"), false);
    let rows = eval(
        &tab,
        "[...document.querySelectorAll('#certificates tbody tr')].map((row) =>
            [...row.querySelectorAll('td')].map((cell) => cell.textContent))",
    );
    assert_eq!(
        rows,
        serde_json::json!([
            [
                "web",
                "app.test, *.app.test",
                "CN=herdsman test CA",
                "4096-01-01 00:00:00",
                rows[0][4],
                "no",
                "-"
            ],
            [
                "web",
                "other.test",
                "CN=herdsman test CA",
                "4096-01-01 00:00:00",
                rows[1][4],
                "no",
                "-"
            ],
        ])
    );
    let days = rows[0][4].as_str().unwrap().parse::<u64>().unwrap();
    assert!(days > 700_000, "{rows}");
    // The pool's row says it speaks TLS to its servers, unverified; a server's title, the name
    // it is asked for.
    let pool_row = eval(
        &tab,
        "document.querySelector('tr[data-pool-total=\"app\"] td.server').textContent",
    );
    assert_eq!(pool_row, "pool, round-robin, TLS unverified");
    let title = eval(
        &tab,
        "document.querySelector('tr[data-pool=\"app\"][data-server=\"a\"] td.server').title",
    );
    assert!(
        title.as_str().unwrap().ends_with(", TLS to 127.0.0.1"),
        "{title}"
    );
    assert_no_page_errors(&tab);
    screenshot(&tab, "stats-page-certificates.png");
}

#[test]
fn with_a_token_the_page_asks_for_it_then_works() {
    let token = "page-token-8c1f";
    let herdsman = Herdsman::start(Some(token));
    let _traffic = Traffic::start(herdsman.web);
    let browser = Chromium::launch();
    // The page itself comes without the token (a browser cannot send one with a navigation)...
    let tab = browser.open(&herdsman.page_url());
    // ... and its first API call is refused, so it asks.
    wait_for(
        &tab,
        "!document.getElementById('token-form').hidden",
        "the token form",
    );
    assert_eq!(eval(&tab, "document.body.dataset.loaded"), Value::Null);
    assert_eq!(eval(&tab, "sessionStorage.length"), 0);

    // Typed in and submitted as a person would.
    tab.wait_for_element("#token-input")
        .and_then(|input| input.click().map(|_| ()))
        .expect("the token input");
    tab.type_str(token).expect("typing the token");
    tab.wait_for_element("#token-submit")
        .and_then(|button| button.click().map(|_| ()))
        .expect("the token form's button");

    wait_for(
        &tab,
        "document.body.dataset.loaded === '1'",
        "the page filling its tables once it has the token",
    );
    assert_eq!(
        eval(&tab, "document.getElementById('token-form').hidden"),
        true
    );
    assert_eq!(
        eval(&tab, "sessionStorage.getItem('herdsman-admin-token')"),
        token
    );
    assert_eq!(rows_on_page(&tab), rows_in_api(&herdsman.pools()));
    assert_eq!(
        eval(
            &tab,
            "document.querySelectorAll('#workers tr[data-worker]').length"
        ),
        WORKERS
    );

    // The buttons send the token too.
    click(&tab, "c", "maint");
    wait_for_state(&tab, &herdsman, "c", "maint");
    wait_for_next_refresh(&tab);
    assert_no_page_errors(&tab);
    screenshot(&tab, "stats-page-token.png");
}

/// Serves `page` (HTML) to every request on 127.0.0.1, until dropped: another origin than the
/// admin API's (another port, and the test opens it as `localhost`, another site).
struct OtherSite {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl OtherSite {
    fn serve(page: String) -> OtherSite {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let Ok((stream, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(10));
                    continue;
                };
                stream.set_nonblocking(false).unwrap();
                let mut conn = Conn::new(stream);
                if let Ok(Some(_)) = conn.read_head() {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n",
                        page.len()
                    );
                    let _ = conn.try_send(head.as_bytes());
                    let _ = conn.try_send(page.as_bytes());
                }
            }
        });
        OtherSite {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for OtherSite {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The attacker's page: a `text/plain` fetch that needs no preflight (the issue's 201), a JSON
/// fetch that does, and form posts into hidden frames — adding a server, reloading, upgrading.
fn attacking_page(admin: SocketAddr) -> String {
    format!(
        r#"<!doctype html><html><body>
<iframe name="sink" style="display:none"></iframe>
<form id="add" method="POST" action="http://{admin}/api/pools/app/servers" target="sink" enctype="text/plain">
<input type="hidden" name='{{"name":"evil","addr":"127.0.0.2:80","x":"' value='"}}'></form>
<form id="reload" method="POST" action="http://{admin}/api/reload" target="sink"></form>
<form id="upgrade" method="POST" action="http://{admin}/api/upgrade" target="sink"></form>
<script>
const admin = "http://{admin}";
const evil = JSON.stringify({{ name: "evil", addr: "127.0.0.2:80" }});
const results = {{}};
async function attack() {{
  try {{
    await fetch(admin + "/api/pools/app/servers", {{ method: "POST", mode: "no-cors",
      headers: {{ "Content-Type": "text/plain" }}, body: evil }});
    results.simple = "sent";
  }} catch (e) {{ results.simple = "failed: " + e; }}
  try {{
    const r = await fetch(admin + "/api/pools/app/servers", {{ method: "POST",
      headers: {{ "Content-Type": "application/json" }}, body: evil }});
    results.json = "answered " + r.status;
  }} catch (e) {{ results.json = "blocked"; }}
  for (const form of ["add", "reload", "upgrade"]) {{
    document.getElementById(form).submit();
    await new Promise((done) => setTimeout(done, 300));
  }}
  document.body.dataset.done = JSON.stringify(results);
}}
attack();
</script></body></html>"#
    )
}

#[test]
fn a_page_on_another_origin_changes_nothing() {
    let herdsman = Herdsman::start(None);
    let pid_before = herdsman.api("GET", "/api/workers", None).1["pid"].clone();
    let site = OtherSite::serve(attacking_page(herdsman.admin));
    let chromium = Chromium::launch();
    let tab = chromium.open(&format!("http://localhost:{}/", site.addr.port()));
    wait_for(&tab, "document.body.dataset.done", "the attack to finish");
    let results = eval(&tab, "JSON.parse(document.body.dataset.done)");
    // The preflight is not answered, so the browser never sends the JSON request itself.
    assert_eq!(results["json"], "blocked", "{results}");
    // Each attempt reached herdsman and was refused there, not just by the browser: the
    // no-cors fetch and the three forms are four refused changes in its log.
    let refused = |log: &str| {
        log.lines()
            .filter(|line| line.contains("admin API: change refused"))
            .count()
    };
    let reached = eventually(WAIT, || {
        std::fs::read_to_string(&herdsman.log).is_ok_and(|log| refused(&log) >= 4)
    });
    let log = std::fs::read_to_string(&herdsman.log).unwrap_or_default();
    assert!(
        reached,
        "not every attempt reached herdsman and was refused:\n{log}"
    );
    // Nothing changed: no server added, no reload, no upgrade.
    let servers: Vec<String> = herdsman.pools()["pools"][0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|server| server["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(servers, ["a", "b", "c"]);
    thread::sleep(Duration::from_millis(500));
    let workers = herdsman.api("GET", "/api/workers", None).1;
    assert_eq!(workers["pid"], pid_before, "an upgrade was started");
    let metrics = Conn::connect(herdsman.admin)
        .roundtrip(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .body_text();
    let reloads = metrics
        .lines()
        .find(|line| line.starts_with("herdsman_config_reloads_total "))
        .unwrap_or_else(|| panic!("no reload counter in /metrics:\n{metrics}"));
    assert_eq!(
        reloads, "herdsman_config_reloads_total 0",
        "a reload was made"
    );
}

#[test]
fn a_caching_pool_s_row_shows_its_hit_ratio() {
    let herdsman = Herdsman::start_with(None, None, "[pool.cache]\n");
    let browser = Chromium::launch();
    let tab = browser.open(&herdsman.page_url());
    wait_for(
        &tab,
        "document.body.dataset.loaded === '1'",
        "the page filling its tables",
    );
    let hits = |row: &str| {
        eval(
            &tab,
            &format!("document.querySelector('{row} td.hits').textContent"),
        )
    };
    let pool_row = "tr[data-pool-total=\"app\"]";
    // Before any request asked the cache: no ratio yet; a server's row has none at all.
    assert_eq!(hits(pool_row), "–", "{}", herdsman.pools());
    assert_eq!(hits("tr[data-pool=\"app\"][data-server=\"a\"]"), "");
    // The servers answer without freshness: every request asks the cache, and none is stored.
    for n in 0..3 {
        let mut conn = Conn::connect(herdsman.web);
        conn.roundtrip(&get_request(&format!("/r/{n}"), "Connection: close\r\n"));
    }
    wait_for(
        &tab,
        "document.querySelector('tr[data-pool-total=\"app\"] td.hits').textContent === '0.0'",
        "the pool's hit ratio",
    );
    assert_eq!(herdsman.pools()["pools"][0]["cache"]["hit_ratio"], 0.0);
    let title = eval(
        &tab,
        "document.querySelector('tr[data-pool-total=\"app\"] td.hits').title",
    );
    assert_eq!(title, "0 objects, 0 bytes held; 0 evicted");
    assert_no_page_errors(&tab);
}

#[test]
fn the_page_lists_the_rate_limits_and_the_keys_they_refused() {
    let limit = "\n[[route]]\npath_prefix = \"/limited\"\npool = \"app\"\n\
                 [route.rate_limit]\nrate = \"1/h\"\nburst = 2\nkey = \"header:X-Key\"\n";
    let herdsman = Herdsman::start_with(None, None, limit);
    let browser = Chromium::launch();
    let tab = browser.open(&herdsman.page_url());
    wait_for(
        &tab,
        "document.body.dataset.loaded === '1'",
        "the page filling its tables",
    );
    assert_eq!(
        eval(&tab, "document.getElementById('limits').hidden"),
        false
    );
    // alice's burst of 2 passes, her next 3 are refused; bob's one passes.
    let mut conn = Conn::connect(herdsman.web);
    for (key, status) in [
        ("alice", 200),
        ("alice", 200),
        ("alice", 429),
        ("alice", 429),
    ]
    .into_iter()
    .chain([("alice", 429), ("bob", 200)])
    {
        let response = conn.roundtrip(&get_request("/limited", &format!("X-Key: {key}\r\n")));
        assert_eq!(response.status(), status, "{key}");
    }
    let row = "tr[data-limit=\"route[0]\"]";
    wait_for(
        &tab,
        &format!("document.querySelector('{row} td.top-keys').textContent === 'alice×3'"),
        "the limit's top key",
    );
    let cells = eval(
        &tab,
        &format!("[...document.querySelectorAll('{row} td')].map((cell) => cell.textContent)"),
    );
    assert_eq!(
        cells,
        json!([
            "route[0]",
            "1/h",
            "2",
            "header:x-key",
            "3",
            "3",
            cells[6],
            "0",
            "alice×3"
        ]),
    );
    assert_no_page_errors(&tab);
    screenshot(&tab, "stats-page-rate-limits.png");
}
