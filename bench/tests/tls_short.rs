//! End to end: `herdsman-bench tls --short`, so that the TLS benchmark cannot rot. It builds
//! herdsman's release binary and runs it, HAProxy and nginx with one worker, each terminating TLS
//! with the same ECDSA and RSA certificates made by openssl: full handshakes driven by h2load,
//! resumed ones by `openssl s_time -reuse`, keep-alive requests and 1 MiB answers by wrk over
//! https, then 1,000 idle TLS connections held by this program's own holder. It checks what a user
//! would see: every figure of every proxy was produced and is a positive, finite number; every
//! connection of the resumed runs was resumed, and herdsman's own count agrees that the full ones
//! were full; no request failed and no idle connection was dropped. Whether a target was met is
//! for the results file, not a pass or fail here: timing on a shared machine is no test.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{row, run_short, table_after, table_starting, take_benchmark_lock, value};

/// The first bold figure of a cell, as a number: "**3,043**/CPU-s (…)" → 3043.
fn bold_figure(cell: &str) -> f64 {
    let figure = cell
        .split("**")
        .nth(1)
        .unwrap_or_else(|| panic!("no bold figure in {cell:?}"));
    value(figure)
}

fn assert_sane(what: &str, figure: f64) {
    assert!(
        figure.is_finite() && figure > 0.0,
        "{what}: {figure} is not a positive figure"
    );
}

#[test]
fn the_short_tls_run_produces_every_figure_for_every_proxy() {
    let _lock = take_benchmark_lock();
    let run = run_short("tls");
    let md = &run.md;
    let proxies = ["herdsman", "HAProxy", "nginx"];

    // Full (ECDSA, RSA) and resumed handshakes per CPU-second, one worker.
    let handshakes = table_after(md, "## Handshakes per CPU-second");
    assert_eq!(handshakes.len(), 3, "{handshakes:?}");
    for cells in &handshakes {
        for (proxy, cell) in proxies.iter().zip(&cells[2..5]) {
            assert_sane(&format!("{proxy}, {}", cells[1]), bold_figure(cell));
            assert!(cell.contains("user ") && cell.contains("sys "), "{cell}");
        }
    }

    // Resumption seen on every connection counted, and nothing failed.
    assert!(
        md.contains("Resumption: seen on every one of the"),
        "resumption was not seen on every connection:\n{md}"
    );
    let seen = table_starting(
        md,
        "| workers | handshakes | proxy | counted by the client |",
    );
    assert_eq!(seen.len(), 9, "{seen:?}");
    for cells in &seen {
        assert!(value(&cells[3]) > 0.0, "{cells:?}");
        assert_eq!(value(&cells[6]), 0.0, "failed requests in {cells:?}");
        if cells[1] == "resumed" {
            assert_eq!(value(&cells[4]), value(&cells[3]), "{cells:?}");
        }
    }
    // herdsman's own count: the full runs' handshakes were all full.
    for cells in seen
        .iter()
        .filter(|c| c[2] == "herdsman" && c[1].starts_with("full"))
    {
        let (full, resumed) = cells[5].split_once(" / ").expect("herdsman's own count");
        assert_eq!(value(full), value(&cells[3]), "{cells:?}");
        assert_eq!(value(resumed), 0.0, "{cells:?}");
    }

    // Keep-alive requests, 1 MiB answers and idle connections: a figure for every proxy.
    for heading in [
        "## Keep-alive requests over TLS",
        "## 1 MiB answers over TLS",
        "## Memory per idle TLS connection",
    ] {
        let table = table_after(md, heading);
        let cells = row(&table, "1 worker");
        for (proxy, cell) in proxies.iter().zip(&cells[2..5]) {
            assert_sane(&format!("{proxy}, {heading}"), bold_figure(cell));
        }
    }
    assert!(md.contains("Over every idle run: 0 connection(s) closed by a proxy while held, 0 not on TLS 1.3, 0 not a full handshake."), "{md}");
    let runs = table_starting(md, "| round | workers | proxy | path |");
    assert_eq!(runs.len(), 6, "{runs:?}");
    for cells in &runs {
        assert_eq!(value(&cells[10]), 0.0, "errors in {cells:?}");
    }

    // Every target was judged, whatever the verdict.
    let targets = table_after(md, "## Targets");
    assert_eq!(targets.len(), 13, "{targets:?}");
    for cells in &targets {
        assert!(
            !cells[2].contains("not measured"),
            "{} was not measured",
            cells[0]
        );
    }
    run.check_plot_and_remove();
}
