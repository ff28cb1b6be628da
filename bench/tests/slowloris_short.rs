//! End to end: `herdsman-bench slowloris --short`, so that the slow-client benchmark cannot rot. It
//! builds herdsman's release binary (as `slowloris` always does), runs wrk through it once without
//! and once with 200 slow connections (50 of each kind), and checks that the results file has
//! every figure both ways and their ratio, that every slow connection was opened, and that
//! herdsman answered every one of wrk's requests while they were open. Whether the ratio meets the
//! 90% target is a figure for the results file, not a pass or fail here: timing on a shared
//! machine is no test.
//!
//! It needs wrk (`slowloris` installs it with apt-get when it runs as root; CI installs it first).
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{is_number, row, run_short, table_after, table_starting, take_benchmark_lock};

const KINDS: [&str; 4] = ["slow-head", "slow-body", "slow-reader", "reset-upload"];

#[test]
fn the_short_slowloris_run_measures_both_ways() {
    let _lock = take_benchmark_lock();
    let run = run_short("slowloris");
    let (md, stdout) = (&run.md, &run.stdout);

    // The summary on stdout gives both figures and the ratio.
    for part in ["without", "with 200 slow", "with ÷ without requests/s: "] {
        assert!(
            stdout.contains(part),
            "{part:?} not in the summary:\n{stdout}"
        );
    }

    // Requests/s, p50 and p99 without and with, and with ÷ without.
    let figures = table_after(md, "## The other clients (wrk)");
    for title in ["requests/s", "p50 latency, µs", "p99 latency, µs"] {
        let cells = row(&figures, title);
        for cell in &cells[1..4] {
            assert!(is_number(cell), "{title}: {cells:?}");
        }
    }
    assert!(row(&figures, "requests/s")[3].ends_with('%'));
    assert!(
        md.contains("target ≥ 90%: met") || md.contains("target ≥ 90%: **NOT MET**"),
        "no verdict:\n{md}"
    );

    // herdsman answered every request of wrk, with the slow connections open too.
    assert!(
        md.contains("wrk errors over all runs (socket errors + status ≥ 400): 0."),
        "{md}"
    );

    // Every slow connection opened, 50 of each kind, and counted at the end.
    let slow = table_starting(md, "| kind | opened |");
    for kind in KINDS {
        let cells = row(&slow, kind);
        assert!(is_number(&cells[2]), "{kind}: {cells:?}");
        if kind != "reset-upload" {
            assert_eq!(
                (cells[1].as_str(), cells[4].as_str()),
                ("50", "0"),
                "{kind}"
            );
        }
    }

    run.check_plot_and_remove();
}
