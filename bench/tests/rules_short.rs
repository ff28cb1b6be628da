//! End to end: `herdsman-bench rules --short`, so that the operator-rules benchmark cannot rot.
//! It builds herdsman's release binary and runs each part with one worker, one round of 1 s a
//! row. It checks what a user would see: every row has its figures and no error; each row's
//! checked answer is what its configuration says (the rules' fields set and the server's
//! removed; the encoding asked for, smaller than the JSON); the far Redis is said to be far and
//! how; the targets were judged. How the figures compare is for a quiet machine's results file,
//! not a pass or fail here.
//!
//! The header rules come with herdsman's `[headers]` (issue 42's header rules); until a build
//! has them, the headers part stops at herdsman's refusal, saying so, and its test fails.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{
    is_number, row, run_short_with, table_after, table_starting, take_benchmark_lock, value,
};

/// Each row's figures are numbers, its requests/s above 0 and its errors none; `columns` are
/// the figures' cells (1-based after the row's name), `rate` the requests/s cell's.
fn has_figures(table: &[Vec<String>], name: &str, columns: std::ops::Range<usize>, rate: usize) {
    let cells = row(table, name);
    for cell in &cells[columns] {
        assert!(is_number(cell), "{name}: {cells:?}");
    }
    assert!(
        value(&cells[rate]) > 0.0,
        "{name} answered nothing: {cells:?}"
    );
    assert_eq!(
        cells.last().map(String::as_str),
        Some("0"),
        "{name}'s errors: {cells:?}"
    );
}

/// Each target of `md` whose name starts with `prefix` is judged.
fn judged(md: &str, prefix: &str) -> usize {
    let targets = table_starting(md, "| target | figure | verdict |");
    let ours: Vec<_> = targets
        .iter()
        .filter(|cells| cells[0].starts_with(prefix))
        .collect();
    for cells in &ours {
        assert!(cells[2] == "met" || cells[2] == "**NOT MET**", "{cells:?}");
    }
    ours.len()
}

#[test]
fn the_short_compression_and_redis_parts_measure_every_row() {
    let _lock = take_benchmark_lock();
    let run = run_short_with(
        "rules",
        "rules-compression-redis",
        &["--parts", "compression,redis"],
    );
    let md = &run.md;

    let compression = table_after(md, "### Compression, 1 worker");
    for (name, encoding) in [
        ("herdsman zstd", "zstd"),
        ("herdsman br", "br"),
        ("herdsman gzip", "gzip"),
        ("herdsman gzip 2", "gzip"),
        ("herdsman gzip 4", "gzip"),
        ("nginx gzip 1", "gzip"),
        ("nginx gzip 5", "gzip"),
        ("Caddy gzip", "gzip"),
        ("Caddy zstd", "zstd"),
    ] {
        // bytes out, ratio, CPU per MiB, user, kernel, answers/s, p99.
        has_figures(&compression, name, 2..9, 7);
        let cells = row(&compression, name);
        assert_eq!(cells[1], encoding, "{cells:?}");
        assert!(
            value(&cells[3]) > 2.0,
            "{name} hardly compressed the JSON: {cells:?}"
        );
    }
    let identity = row(&compression, "herdsman, identity");
    assert_eq!(
        (identity[1].as_str(), identity[3].as_str()),
        ("identity", "1.00")
    );
    // gzip and zstd against the peers at the defaults, and gzip 2 and 4 against theirs.
    assert_eq!(judged(md, "compression, 1 worker:"), 6);

    let redis = table_after(md, "### A rate limit shared through Redis, 1 worker");
    for name in [
        "herdsman, local limit",
        "herdsman, Redis on loopback",
        "herdsman, Redis 1 ms away",
    ] {
        // CPU per request, user, kernel, requests/s, p50, p99.
        has_figures(&redis, name, 1..7, 4);
    }
    assert!(
        md.contains("CPU per request with Redis on loopback ÷ the local limit alone:"),
        "{md}"
    );
    assert!(md.contains("The far Redis: "), "{md}");
    // Nothing the far Redis needed is left behind.
    let namespaces = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&namespaces.stdout).contains("herdsman-rules-"));
    std::fs::remove_dir_all(&run.dir).ok();
}

#[test]
fn the_short_headers_part_measures_every_proxy_with_its_rules() {
    let _lock = take_benchmark_lock();
    let run = run_short_with("rules", "rules-headers", &["--parts", "headers"]);
    let md = &run.md;

    let table = table_after(md, "### Header rules and a rate limit, 1 worker");
    for name in [
        "herdsman, rules",
        "HAProxy, rules",
        "nginx, rules",
        "Caddy, rules (no limit)",
        "herdsman, no rules",
    ] {
        has_figures(&table, name, 1..7, 4);
        let (total, user, kernel) = {
            let cells = row(&table, name);
            (value(&cells[1]), value(&cells[2]), value(&cells[3]))
        };
        assert!(
            (user + kernel - total).abs() <= total * 0.01 + 0.02,
            "{name}: {total} {user} {kernel}"
        );
    }
    let checks = table_starting(
        md,
        "| part | workers | row | status | fields | body bytes |",
    );
    for name in [
        "herdsman, rules",
        "HAProxy, rules",
        "nginx, rules",
        "Caddy, rules (no limit)",
    ] {
        let cells = row(
            &checks[..]
                .iter()
                .map(|c| c[2..].to_vec())
                .collect::<Vec<_>>(),
            name,
        )
        .to_vec();
        assert!(cells[2].contains("x-frame-options: DENY"), "{cells:?}");
        assert!(!cells[2].contains("x-powered-by"), "{cells:?}");
    }
    assert_eq!(judged(md, "headers, 1 worker:"), 2);
    assert!(
        run.stdout.contains("issue 42's targets, herdsman: "),
        "{}",
        run.stdout
    );
    std::fs::remove_dir_all(&run.dir).ok();
}
