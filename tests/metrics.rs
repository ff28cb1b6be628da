//! `GET /metrics` on the admin API: the whole output passes Prometheus's own checker (`promtool
//! check metrics`, which parses it and lints the names) and parses with a Rust text-format
//! parser, and the values move as traffic flows, servers change state and the config reloads,
//! and the cache's outcomes and holdings are counted per pool.

mod admin_support;
mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use admin_support::{body_of, caching_server, Running};
use common::*;
use prometheus_parse::{Scrape, Value};

/// One scrape: the text and its parsed samples.
struct Metrics {
    text: String,
    scrape: Scrape,
}

impl Metrics {
    fn scrape(running: &Running) -> Metrics {
        let mut conn = Conn::connect(running.admin);
        let response = conn.roundtrip(&admin_get_request("/metrics"));
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let text = response.body_text();
        let scrape = Scrape::parse(text.lines().map(|line| Ok(line.to_string())))
            .expect("the exposition parses");
        Metrics { text, scrape }
    }

    /// The samples `name` whose labels include `labels`.
    fn samples<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a prometheus_parse::Sample> + 'a {
        self.scrape
            .samples
            .iter()
            .filter(move |sample| sample.metric == name)
            .filter(move |sample| labels.iter().all(|(k, v)| sample.labels.get(k) == Some(*v)))
    }

    /// The value of the sample `name` whose labels include `labels`; panics unless exactly one
    /// sample matches.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let matching: Vec<f64> = self
            .samples(name, labels)
            .map(|sample| match &sample.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
                other => panic!("{name} is not a plain sample: {other:?}"),
            })
            .collect();
        assert_eq!(matching.len(), 1, "{name} {labels:?} in:\n{}", self.text);
        matching[0]
    }

    /// The sum of every sample `name` whose labels include `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels)
            .map(|sample| match &sample.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
                _ => 0.0,
            })
            .sum()
    }

    /// The cumulative buckets of the histogram `name` with exactly `labels`.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
        let sample = self
            .scrape
            .samples
            .iter()
            .find(|sample| {
                sample.metric == name
                    && matches!(sample.value, Value::Histogram(_))
                    && labels.iter().all(|(k, v)| sample.labels.get(k) == Some(*v))
            })
            .unwrap_or_else(|| panic!("no histogram {name} {labels:?}"));
        let Value::Histogram(buckets) = &sample.value else {
            unreachable!()
        };
        buckets.iter().map(|b| (b.less_than, b.count)).collect()
    }
}

/// Runs `promtool check metrics` on `text`: Prometheus's own parser and linter. CI installs it
/// (Debian's prometheus package) with bench/scripts/install-peers.sh.
fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool is not installed: run bench/scripts/install-peers.sh (Debian's prometheus \
             package)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool refused it: {said}");
    // Lint findings are printed even when the exit status is 0.
    assert!(said.trim().is_empty(), "promtool's findings: {said}");
}

/// A server that answers `/fail` with 500 and everything else with 200.
fn server() -> Mock {
    Mock::start(|ex| {
        ex.read_body()?;
        let status = if ex.head.target() == "/fail" {
            500
        } else {
            200
        };
        ex.respond(status, &[], b"body")?;
        Ok(Flow::KeepAlive)
    })
}

#[test]
fn metrics_parse_and_follow_the_traffic() {
    let (a, b) = (server(), server());
    let running = Running::start(
        Setup::new()
            .admin()
            .server("a", a.addr)
            .server("b", b.addr)
            .workers(2),
    );
    let before = Metrics::scrape(&running);
    promtool_check(&before.text);
    assert_eq!(
        before.value(
            "herdsman_requests_total",
            &[("pool", "app"), ("class", "2xx")]
        ),
        0.0
    );
    assert_eq!(before.sum("herdsman_worker_requests_total", &[]), 0.0);
    for server in ["a", "b"] {
        let labels = [("pool", "app"), ("server", server)];
        assert_eq!(before.value("herdsman_server_up", &labels), 1.0);
        let ready = [labels[0], labels[1], ("state", "ready")];
        assert_eq!(before.value("herdsman_server_state", &ready), 1.0);
    }

    // 20 answered 200 and 4 answered 500, over a few keep-alive connections, and one request
    // refused before routing.
    let mut conns: Vec<Conn> = (0..4).map(|_| Conn::connect(running.web)).collect();
    for i in 0..24 {
        let path = if i % 6 == 5 { "/fail" } else { "/" };
        let response = conns[i % 4].roundtrip(&get_request(path, ""));
        assert_eq!(response.status(), if path == "/fail" { 500 } else { 200 });
    }
    let mut bad = Conn::connect(running.web);
    bad.send(b"NOT A REQUEST\r\n\r\n");
    assert_eq!(bad.response().status(), 400);

    let after = eventually_scraped(&running, |m| {
        m.sum("herdsman_worker_requests_total", &[]) >= 25.0
    });
    promtool_check(&after.text);
    let pool = |class| {
        after.value(
            "herdsman_requests_total",
            &[("pool", "app"), ("class", class)],
        )
    };
    assert_eq!(
        (pool("2xx"), pool("5xx"), pool("4xx"), pool("none")),
        (20.0, 4.0, 0.0, 0.0)
    );
    let by_server = |class| after.sum("herdsman_server_requests_total", &[("class", class)]);
    assert_eq!((by_server("2xx"), by_server("5xx")), (20.0, 4.0));
    // Round-robin: both servers answered.
    for server in ["a", "b"] {
        let answered = after.sum("herdsman_server_requests_total", &[("server", server)]);
        assert!(answered >= 10.0, "{server}: {answered}");
    }
    assert_eq!(after.sum("herdsman_worker_requests_total", &[]), 25.0);
    assert_eq!(
        after.sum("herdsman_worker_rejected_requests_total", &[]),
        1.0
    );
    assert!(after.sum("herdsman_worker_accepted_connections_total", &[]) >= 5.0);
    let opened = after.sum("herdsman_worker_backend_connections_opened_total", &[]);
    let reused = after.sum("herdsman_worker_backend_connections_reused_total", &[]);
    assert_eq!(
        opened + reused,
        24.0,
        "one server connection per proxied request"
    );
    assert!(reused > 0.0, "keep-alive to the servers: {reused} reused");
    assert!(after.sum("herdsman_worker_backend_connections_idle", &[]) >= 1.0);
    assert!(
        after.sum("herdsman_worker_connections", &[]) >= 4.0,
        "the 4 open clients"
    );

    // The pool's histogram: cumulative, ends in +Inf with the count, and the sum is sane.
    let buckets = after.histogram("herdsman_request_duration_seconds", &[("pool", "app")]);
    assert_eq!(buckets.last().unwrap().0, f64::INFINITY);
    assert_eq!(buckets.last().unwrap().1, 24.0);
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "{buckets:?}"
    );
    let count = after.value(
        "herdsman_request_duration_seconds_count",
        &[("pool", "app")],
    );
    let sum = after.value("herdsman_request_duration_seconds_sum", &[("pool", "app")]);
    assert_eq!(count, 24.0);
    assert!(
        sum > 0.0 && sum < 24.0 * 5.0,
        "24 quick requests took {sum} s in all"
    );

    // CPU and run-queue time only grow.
    for worker in ["0", "1"] {
        for mode in ["user", "system"] {
            let labels = [("worker", worker), ("mode", mode)];
            let (then, now) = (
                before.value("herdsman_worker_cpu_seconds_total", &labels),
                after.value("herdsman_worker_cpu_seconds_total", &labels),
            );
            assert!(now >= then, "worker {worker} {mode}: {then} → {now}");
        }
    }
    // The kernel charges CPU in ticks (10 ms): keep the workers busy until one is charged.
    let busy = eventually_scraped(&running, |m| {
        for _ in 0..200 {
            conns[0].roundtrip(&get_request("/", ""));
        }
        m.sum("herdsman_worker_cpu_seconds_total", &[]) > 0.0
    });
    let cpu = busy.sum("herdsman_worker_cpu_seconds_total", &[]);
    assert!(cpu > 0.0, "the workers used no CPU: {cpu}");

    // A drained server says so; reloads are counted, refused ones too.
    let (status, _) = running.api(
        "PUT",
        "/api/pools/app/servers/b/state",
        Some(r#"{"state":"drain"}"#),
    );
    assert_eq!(status, 200);
    let (status, _) = running.api("POST", "/api/reload", None);
    assert_eq!(status, 200);
    running.rewrite_text("this is not toml");
    let (status, _) = running.api("POST", "/api/reload", None);
    assert_eq!(status, 400);
    let changed = Metrics::scrape(&running);
    promtool_check(&changed.text);
    let b = [("pool", "app"), ("server", "b")];
    assert_eq!(
        changed.value("herdsman_server_state", &[b[0], b[1], ("state", "drain")]),
        1.0
    );
    assert_eq!(
        changed.value("herdsman_server_state", &[b[0], b[1], ("state", "ready")]),
        0.0
    );
    assert_eq!(changed.value("herdsman_config_reloads_total", &[]), 1.0);
    assert_eq!(
        changed.value("herdsman_config_reload_failures_total", &[]),
        1.0
    );
    let generation = |m: &Metrics| m.value("herdsman_config_generation", &[]);
    assert!(generation(&changed) >= generation(&before) + 2.0);
}

#[test]
fn the_health_checkers_cpu_is_reported_as_it_checks() {
    let servers: Vec<Mock> = (0..4).map(|_| server()).collect();
    let setup = servers
        .iter()
        .enumerate()
        .fold(Setup::new().admin(), |setup, (index, mock)| {
            setup.server(&format!("s{index}"), mock.addr)
        });
    let running = Running::start(setup);
    running
        .reconfigure(|text| format!("{text}[pool.health]\ncheck = \"tcp\"\ninterval = \"10ms\"\n"));
    // The kernel charges CPU in ticks (10 ms): 400 checks a second are charged one soon.
    let metrics = eventually_scraped(&running, |m| {
        m.sum("herdsman_health_checker_cpu_seconds_total", &[]) > 0.0
    });
    promtool_check(&metrics.text);
    let user = metrics.value(
        "herdsman_health_checker_cpu_seconds_total",
        &[("mode", "user")],
    );
    let system = metrics.value(
        "herdsman_health_checker_cpu_seconds_total",
        &[("mode", "system")],
    );
    assert!(user + system > 0.0, "{user} + {system}");
    // The admin API reports the same thread beside the workers.
    let (status, json) = running.api("GET", "/api/workers", None);
    assert_eq!(status, 200);
    let cpu = &json["health_checker"];
    let seconds = cpu["user_seconds"].as_f64().unwrap() + cpu["system_seconds"].as_f64().unwrap();
    assert!(seconds >= user + system, "{json}");
}

/// Scrapes until `ready` holds (the last request's count lands just after its response).
fn eventually_scraped(running: &Running, mut ready: impl FnMut(&Metrics) -> bool) -> Metrics {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let metrics = Metrics::scrape(running);
        if ready(&metrics) || std::time::Instant::now() > deadline {
            return metrics;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn tls_handshakes_failures_and_certificate_expiry_are_reported() {
    let backend = server();
    let running = Running::start(Setup::new().admin().server("a", backend.addr));
    let before = Metrics::scrape(&running);
    assert_eq!(before.sum("herdsman_worker_tls_handshakes_total", &[]), 0.0);
    // A reload makes the listener a TLS one; its next connections handshake.
    let cert = CertFiles::issue("metrics", &["app.test", "*.app.test"]);
    running.reconfigure(|text| {
        let listener_end = "pool = \"app\"\n\n";
        let at = text.find(listener_end).unwrap() + listener_end.len();
        format!(
            "{}{}\n{}",
            &text[..at],
            tls_table(&[&cert], ""),
            &text[at..]
        )
    });
    let config = client_config();
    for _ in 0..2 {
        let mut conn = TlsConn::try_connect(running.web, "app.test", &config).unwrap();
        let response = conn.roundtrip(b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n");
        assert_eq!(response.status(), 200);
    }
    let mut plain = Conn::connect(running.web);
    assert_eq!(plain.roundtrip(&get_request("/", "")).status(), 400);

    let after = eventually_scraped(&running, |m| {
        m.sum(
            "herdsman_worker_tls_handshake_failures_total",
            &[("reason", "plain_http")],
        ) >= 1.0
    });
    promtool_check(&after.text);
    let handshakes = |kind| after.sum("herdsman_worker_tls_handshakes_total", &[("kind", kind)]);
    assert_eq!((handshakes("full"), handshakes("resumed")), (1.0, 1.0));
    let failures = |reason| {
        after.sum(
            "herdsman_worker_tls_handshake_failures_total",
            &[("reason", reason)],
        )
    };
    assert_eq!((failures("plain_http"), failures("timeout")), (1.0, 0.0));
    let timed: f64 = ["0", "1"]
        .iter()
        .map(|worker| {
            let buckets = after.histogram(
                "herdsman_worker_tls_handshake_duration_seconds",
                &[("worker", worker)],
            );
            buckets.last().map_or(0.0, |(_, count)| *count)
        })
        .sum();
    assert_eq!(timed, 2.0);
    let expiry = after.value(
        "herdsman_certificate_expiry_seconds",
        &[("listener", "web")],
    );
    assert!(expiry > 86_400.0, "{expiry}");
    for host in ["app.test", "*.app.test"] {
        let labels = [("listener", "web"), ("name", host)];
        assert_eq!(after.value("herdsman_certificate_name_info", &labels), 1.0);
    }
}

#[test]
fn cache_outcomes_and_holdings_are_counted_per_pool() {
    let server = caching_server();
    let running = Running::start_with(
        Setup::new().admin().server("s1", server.addr),
        "[pool.cache]\n",
    );
    // A miss, then two hits.
    for _ in 0..3 {
        body_of(running.web, "test.local", "/m/1", "");
    }
    // Four at once on an object the server takes 500 ms to make: one fetches, three follow it.
    let web = running.web;
    let herd: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || body_of(web, "test.local", "/slow/1", "")))
        .collect();
    for client in herd {
        assert_eq!(client.join().unwrap(), "/slow/1 answer 1");
    }
    // Stored stale; then the server fails and the stale answer stands in.
    body_of(running.web, "test.local", "/stale/1", "");
    assert_eq!(
        body_of(running.web, "test.local", "/stale/1", ""),
        "/stale/1 answer 1"
    );

    let metrics = eventually_scraped(&running, |metrics| {
        metrics.sum("herdsman_cache_requests_total", &[("pool", "app")]) == 9.0
    });
    let requests = |result| {
        metrics.value(
            "herdsman_cache_requests_total",
            &[("pool", "app"), ("result", result)],
        )
    };
    assert_eq!(
        [
            requests("hit"),
            requests("miss"),
            requests("collapsed"),
            requests("stale")
        ],
        [2.0, 3.0, 3.0, 1.0],
        "{}",
        metrics.text
    );
    assert_eq!(requests("lock_timeout"), 0.0);
    assert_eq!(
        metrics.value("herdsman_cache_objects", &[("pool", "app")]),
        3.0
    );
    let bytes = metrics.value("herdsman_cache_bytes", &[("pool", "app")]);
    assert!(bytes > 3.0 * 576.0, "{bytes}");
    assert_eq!(
        metrics.value("herdsman_cache_evictions_total", &[("pool", "app")]),
        0.0
    );
    promtool_check(&metrics.text);

    // The pools' JSON says the same, with the hit ratio: 6 of the 9 answered from the cache.
    let (status, pools) = running.api("GET", "/api/pools", None);
    assert_eq!(status, 200);
    let cache = &pools["pools"][0]["cache"];
    assert_eq!(cache["requests"]["collapsed"], 3, "{cache}");
    assert_eq!(cache["objects"], 3, "{cache}");
    let ratio = cache["hit_ratio"].as_f64().unwrap();
    assert!((ratio - 6.0 / 9.0).abs() < 1e-9, "{cache}");
}

#[test]
fn compressed_bytes_and_skipped_answers_are_counted_by_algorithm_and_reason() {
    let page = "<p>compress me, again and again</p>\n".repeat(300);
    let length = page.len() as f64;
    let backend = Mock::start(move |ex| {
        ex.read_body()?;
        let media = match ex.head.target() {
            "/image" => "image/png",
            _ => "text/html",
        };
        ex.respond(200, &[("Content-Type", media)], page.as_bytes())?;
        Ok(Flow::KeepAlive)
    });
    let setup = Setup::new().admin().server("a", backend.addr);
    let running = Running::start_with(setup, "\n[compression]\nenabled = true\n");
    for path in ["/page", "/image"] {
        let request = get_request(path, "Accept-Encoding: gzip\r\nConnection: close\r\n");
        assert_eq!(Conn::connect(running.web).roundtrip(&request).status(), 200);
    }
    let bytes = |m: &Metrics, direction| {
        let labels = [("algorithm", "gzip"), ("direction", direction)];
        m.value("herdsman_compression_bytes_total", &labels)
    };
    let after = eventually_scraped(&running, |m| bytes(m, "in") == length);
    promtool_check(&after.text);
    assert_eq!(bytes(&after, "in"), length);
    assert!(bytes(&after, "out") > 0.0 && bytes(&after, "out") < length / 4.0);
    let gzip = [("algorithm", "gzip")];
    assert_eq!(
        after.value("herdsman_compression_responses_total", &gzip),
        1.0
    );
    let zstd = [("algorithm", "zstd")];
    assert_eq!(
        after.value("herdsman_compression_responses_total", &zstd),
        0.0
    );
    let skipped = |reason| after.value("herdsman_compression_skipped_total", &[("reason", reason)]);
    assert_eq!((skipped("type"), skipped("too_small")), (1.0, 0.0));
}
