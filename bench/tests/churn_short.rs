//! End to end: `herdsman-bench churn --short`, so that the churn benchmark cannot rot. It builds
//! herdsman's release binary and runs it, HAProxy and nginx with one and with two workers, each
//! driven by wrk with a new connection for every request, then counts each one's system calls
//! with strace over 300 connections made one after another. It checks what a user would see:
//! every proxy answered every run without an error, and each one's system calls per connection
//! were counted (herdsman's read, written, accepted and closed at least once per connection).
//! CPU figures are for the results file, not a pass or fail here: timing on a shared machine is
//! no test.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{is_number, row, run_short, table_after, table_starting, take_benchmark_lock, value};

#[test]
fn the_short_churn_run_measures_every_proxy_and_counts_their_system_calls() {
    let _lock = take_benchmark_lock();
    let run = run_short("churn");
    let md = &run.md;

    let cpu = table_after(md, "## CPU per request with a new connection each time");
    assert_eq!(cpu.len(), 2, "{cpu:?}");
    for cells in &cpu {
        for cell in &cells[1..4] {
            assert!(cell.ends_with(" req/s"), "{cells:?}");
        }
    }
    let runs = table_starting(md, "| round | workers | proxy |");
    assert_eq!(runs.len(), 6, "{runs:?}");
    for cells in &runs {
        assert_eq!(value(&cells[8]), 0.0, "errors in {cells:?}");
    }
    let syscalls = table_after(md, "## System calls per connection");
    let total = row(&syscalls, "**all**");
    for cell in &total[1..] {
        assert!(is_number(cell.trim_matches('*')), "{total:?}");
    }
    for call in ["accept4", "recvfrom", "close"] {
        let cells = row(&syscalls, call);
        assert!(value(&cells[1]) >= 1.0, "herdsman's {call}: {cells:?}");
    }
    run.check_plot_and_remove();
}
