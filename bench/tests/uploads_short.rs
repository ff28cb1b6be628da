//! End to end: `herdsman-bench uploads --short`, so that the uploads benchmark cannot rot. It
//! builds herdsman's release binary and runs it, HAProxy and nginx with one worker in front of one
//! nginx server, each driven by wrk posting 1 MiB bodies on 20 keep-alive connections for one
//! round of 2 s (at most 20 MiB in flight: light on the disk). It checks what a user would see:
//! every proxy completed uploads without an error, each one's CPU per upload was read with its
//! user and kernel parts, and issue 51's targets were judged. CPU figures and verdicts are for the
//! results file, not a pass or fail here: timing on a shared machine is no test.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{is_number, row, run_short, table_after, table_starting, take_benchmark_lock, value};

#[test]
fn the_short_uploads_run_measures_every_proxy_and_judges_the_targets() {
    let _lock = take_benchmark_lock();
    let run = run_short("uploads");
    let md = &run.md;

    let case = table_after(md, "### 1 MiB, 20 connections, 1 worker");
    for proxy in ["herdsman", "HAProxy", "nginx"] {
        let cells = row(&case, proxy);
        // CPU per upload, user, kernel, uploads/s, p50, p99; then errors.
        for cell in &cells[1..7] {
            assert!(is_number(cell), "{proxy}: {cells:?}");
        }
        assert!(
            value(&cells[4]) > 0.0,
            "{proxy} completed no upload: {cells:?}"
        );
        let (total, user, kernel) = (value(&cells[1]), value(&cells[2]), value(&cells[3]));
        assert!(
            (user + kernel - total).abs() <= total * 0.01 + 1.0,
            "{proxy}: user + kernel is not the total: {cells:?}"
        );
        assert_eq!(value(&cells[7]), 0.0, "{proxy}'s errors: {cells:?}");
    }
    for ratio in ["herdsman ÷ HAProxy", "herdsman ÷ nginx"] {
        let cells = row(&case, ratio);
        assert!(is_number(&cells[1]), "{cells:?}");
    }

    let targets = table_after(md, "### herdsman: ");
    let judged = row(&targets, "1 MiB, 20 connections, 1 worker");
    for cell in &judged[1..5] {
        assert!(
            cell.ends_with(": met") || cell.ends_with(": **NOT MET**"),
            "{judged:?}"
        );
    }

    let runs = table_starting(md, "| round | body | connections | workers | proxy |");
    assert_eq!(runs.len(), 3, "{runs:?}");
    for cells in &runs {
        assert!(value(&cells[6]) > 0.0, "no uploads in {cells:?}");
        assert_eq!(value(&cells[14]), 0.0, "socket errors in {cells:?}");
        assert_eq!(value(&cells[15]), 0.0, "non-2xx answers in {cells:?}");
    }
    // The server's configuration is in the file: an answer only once the body has arrived.
    assert!(md.contains("mirror_request_body on;"), "{md}");
    assert!(
        run.stdout.contains("issue 51's targets, herdsman: met"),
        "{}",
        run.stdout
    );
    run.check_plot_and_remove();
}
