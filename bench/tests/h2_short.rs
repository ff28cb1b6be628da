//! End to end: `herdsman-bench h2 --short`, so that the HTTP/2 benchmark cannot rot. It builds
//! herdsman's release binary and runs it, HAProxy and nginx with one worker, each speaking HTTP/2
//! over TLS (ALPN h2) and over h2c, under h2load's two loads (50 connections × 10 streams, 10 ×
//! 100). It checks what a user would see: every cell has a row for every proxy with every figure a
//! positive, finite number; every run answered requests over HTTP/2 and none failed; every
//! target was judged. Whether a target was met is for the results file, not a pass or fail here:
//! timing on a shared machine is no test.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{run_short, table_after, take_benchmark_lock, value};

/// The cells of the short run: one worker, both transports, both loads.
const CELLS: [&str; 4] = [
    "1 worker, TLS, 50 × 10",
    "1 worker, TLS, 10 × 100",
    "1 worker, h2c, 50 × 10",
    "1 worker, h2c, 10 × 100",
];
const PROXIES: [&str; 3] = ["herdsman", "HAProxy", "nginx"];

/// The bold median of a figures cell: "**51,234** (…)" → 51234.
fn bold_figure(cell: &str) -> f64 {
    value(
        cell.split("**")
            .nth(1)
            .unwrap_or_else(|| panic!("no bold figure in {cell:?}")),
    )
}

#[test]
fn the_short_h2_run_measures_every_cell_for_every_proxy() {
    let _lock = take_benchmark_lock();
    let run = run_short("h2");
    let md = &run.md;

    // requests/s, p99, CPU-µs per request, user, kernel, RSS: a row per cell and proxy.
    let figures = table_after(md, "## Figures");
    assert_eq!(figures.len(), CELLS.len() * PROXIES.len(), "{figures:?}");
    for cell in CELLS {
        for proxy in PROXIES {
            let row = figures
                .iter()
                .find(|row| row[0] == cell && row[1] == proxy)
                .unwrap_or_else(|| panic!("no row for {proxy} in {cell}:\n{md}"));
            assert_eq!(row.len(), 8, "{row:?}");
            for figure in &row[2..] {
                let figure = bold_figure(figure);
                assert!(figure.is_finite() && figure > 0.0, "{row:?}");
            }
            // The user and kernel parts add up to the whole (each rounded to 0.01).
            let (whole, user, kernel) = (
                bold_figure(&row[4]),
                bold_figure(&row[5]),
                bold_figure(&row[6]),
            );
            assert!((user + kernel - whole).abs() <= 0.02, "{row:?}");
        }
    }

    // Every run answered over HTTP/2 (a run that agreed anything else stops the benchmark) and
    // none failed.
    let runs = table_after(md, "## Every run");
    assert_eq!(runs.len(), CELLS.len() * PROXIES.len(), "{runs:?}");
    for row in &runs {
        assert!(value(&row[3]) > 0.0, "nothing answered: {row:?}");
        assert_eq!(value(&row[4]), 0.0, "failed requests: {row:?}");
    }

    // Every target judged, whatever the verdict: five per cell.
    let targets = table_after(md, "## Targets");
    assert_eq!(targets.len(), CELLS.len() * 5, "{targets:?}");
    for row in &targets {
        assert!(!row[3].contains("not measured"), "{row:?}");
    }

    // The configurations that turned HTTP/2 on, as the results file shows them.
    for line in [
        "h2c = true",
        "http2 = true",
        " proto h2",
        "alpn h2,http/1.1",
        " http2 backlog=",
        " ssl http2 backlog=",
    ] {
        assert!(
            md.contains(line),
            "{line:?} missing from the configurations:\n{md}"
        );
    }
    assert!(
        run.stdout
            .starts_with("h2: medians over 1 round(s) of 2 s\n"),
        "{}",
        run.stdout
    );
    run.check_plot_and_remove();
}
