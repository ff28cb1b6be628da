//! End to end: `herdsman-bench tls-load --short`, so that the TLS load benchmark cannot rot. It
//! builds herdsman's release binary and runs it with two workers and one TLS listener: wrk over
//! https without and with 1,000 connections that never send a ClientHello (`tls_handshake`
//! lowered to 2 s, so that herdsman times them out, and the holder opens them again, within the
//! run), then wrk's established connections without and with a storm of new handshakes from
//! this program's own rustls clients. It checks what a user would see: every figure was produced
//! and is a positive, finite number; the silent connections were held (herdsman had them all
//! under way), timed out by herdsman and opened again by the holder; each worker made handshakes
//! under the storm; no request of wrk failed and no handshake of the storm. Whether a target was
//! met is for the results file, not a pass or fail here: timing on a shared machine is no test.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{row, run_short, table_after, table_starting, take_benchmark_lock, value};

/// The leading figure of a cell: "12,345 (11,000–13,000)" → 12345, "76.8%" → 76.8.
fn figure(cell: &str) -> f64 {
    let first = cell
        .trim_start_matches("**")
        .split([' ', '*'])
        .next()
        .unwrap_or_default();
    value(first)
}

fn assert_sane(what: &str, figure: f64) {
    assert!(
        figure.is_finite() && figure > 0.0,
        "{what}: {figure} is not a positive figure"
    );
}

#[test]
fn the_short_tls_load_run_produces_every_figure() {
    let _lock = take_benchmark_lock();
    let run = run_short("tls-load");
    let md = &run.md;
    assert!(md.contains("**Short run**"), "{md}");
    assert!(md.contains("**`tls_handshake` lowered to 2 s**"), "{md}");

    // wrk's figures without and with, and their ratio, for both measurements.
    for heading in [
        "## Silent TLS connections",
        "### The established connections beside it",
    ] {
        let table = table_after(md, heading);
        for title in [
            "requests/s",
            "p50 latency, µs",
            "p99 latency, µs",
            "herdsman user CPU-µs per request",
            "herdsman system CPU-µs per request",
        ] {
            let cells = row(&table, title);
            for cell in &cells[1..4] {
                assert_sane(&format!("{heading}: {title}"), figure(cell));
            }
        }
    }

    // The silent connections were held, timed out by herdsman and opened again.
    let held = table_after(md, "### Were they held");
    let under_way = figure(&row(&held, "herdsman's handshakes under way when wrk started")[1]);
    assert!(under_way >= 950.0, "only {under_way} of 1,000 under way");
    for title in [
        "the same when wrk ended",
        "timeouts herdsman counted per second of the wrk run",
        "timeouts herdsman counted, from the first connect to the holder's end",
        "connections the holder saw closed by herdsman over the same span",
    ] {
        assert_sane(title, figure(&row(&held, title)[1]));
    }
    let runs = table_starting(md, "| round | silent |");
    let with = runs
        .iter()
        .find(|r| r[1] == "with")
        .expect("a run with the silent connections");
    let opened = value(&with[9]);
    assert!(opened > 1000.0, "the holder opened {opened}: none again");
    assert_eq!(value(&with[10]), 1000.0, "held at the end: {with:?}");
    assert!(md.contains("; 0 connects failed;"), "{md}");
    assert_sane(
        "bytes per silent connection",
        figure(
            md.split("### Memory")
                .nth(1)
                .unwrap()
                .split("**")
                .nth(1)
                .unwrap(),
        ),
    );

    // Under the storm, every worker made handshakes and used CPU, and the spread was measured.
    let workers = table_after(md, "## Handshake storm");
    assert_eq!(workers.len(), 2, "{workers:?}");
    for cells in &workers {
        for cell in [&cells[1], &cells[2], &cells[3], &cells[5]] {
            assert_sane(&format!("worker {}", cells[0]), figure(cell));
        }
    }
    let storm_runs = table_starting(md, "| round | storm |");
    let storm = storm_runs.iter().find(|r| r[1] == "with").unwrap();
    assert_sane("the storm's handshakes", value(&storm[10]));
    assert_eq!(value(&storm[11]), 0.0, "storm handshakes failed: {storm:?}");
    // Each worker's requests (wrk's, the established connections'), from /metrics.
    let requests: Vec<f64> = storm[7].split(" / ").map(value).collect();
    assert_eq!(requests.len(), 2, "{storm:?}");
    assert_sane(
        "the established connections' requests",
        requests.iter().sum(),
    );
    // Each worker's open connections halfway, as /api/workers told them.
    assert_eq!(storm[9].split(" / ").count(), 2, "{storm:?}");

    // Nothing failed, and every target was judged, whatever the verdict.
    assert!(
        md.contains("wrk errors over all runs (socket errors + status ≥ 400): 0."),
        "{md}"
    );
    let targets = table_after(md, "## Targets");
    assert_eq!(targets.len(), 3, "{targets:?}");
    for cells in &targets {
        // A coefficient of variation may be 0 when the workers tie exactly.
        let measured = figure(&cells[1]);
        assert!(measured.is_finite() && measured >= 0.0, "{cells:?}");
        assert!(!cells[2].contains("not measured"), "{cells:?}");
    }
    run.check_plot_and_remove();
}
