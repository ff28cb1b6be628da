//! End to end: `herdsman-bench scale --short`, so that the scale benchmark cannot rot. It builds
//! herdsman's release binary and runs herdsman, HAProxy and nginx with 1 and 100 host routes, each
//! asked for the first route's host, the last's and an unknown one; reloads herdsman's 100 routes
//! under load; puts herdsman in front of a pool of 300 servers with least-conn and with
//! round-robin; and adds and removes servers through the admin API, with no load and under it.
//! It checks what a user would see: every proxy answered every host, every request of every run
//! (reloads and server changes included) was answered without an error, every reload and change
//! was accepted, and each proxy's start and memory were read. CPU figures are for the results
//! file, not a pass or fail here: timing on a shared machine is no test.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{is_number, run_short, table_after, table_starting, take_benchmark_lock, value};

#[test]
fn the_short_scale_run_answers_every_host_and_every_change() {
    let _lock = take_benchmark_lock();
    let run = run_short("scale");
    let md = &run.md;

    // Every proxy, every route count, every host: a CPU figure and a request rate.
    let cpu = table_after(md, "## CPU per request by route count");
    assert_eq!(cpu.len(), 2, "{cpu:?}");
    for row in &cpu {
        assert_eq!(row.len(), 10, "{row:?}");
        for cell in &row[1..] {
            assert!(is_number(cell), "{row:?}");
        }
    }
    // No run saw an error or a status other than 2xx/3xx.
    let runs = table_starting(md, "| round | proxy |");
    assert_eq!(runs.len(), 2 * 3 * 3 + 2, "{runs:?}");
    for row in &runs {
        assert_eq!(value(&row[9]), 0.0, "{row:?}");
    }
    // Each proxy's start time and memory, and herdsman's memory per route.
    let memory = table_after(md, "## Start and memory by route count");
    assert_eq!(memory.len(), 6, "{memory:?}");
    assert!(memory
        .iter()
        .all(|row| is_number(&row[2]) && is_number(&row[3])));
    // Every reload accepted, and none cost a request.
    let reloads = table_after(md, "## Reloads of 100 routes under load");
    assert_eq!(reloads.len(), 3, "{reloads:?}");
    assert!(reloads.iter().all(|row| row[1] == "200"), "{reloads:?}");
    assert!(
        md.contains("requests/s, 0 socket errors, 0 answers other than 2xx/3xx, p99"),
        "{md}"
    );
    // Both algorithms served over the pool; every change answered, none cost a request.
    let pool = table_after(md, "## least-conn and round-robin over 300 servers");
    assert_eq!(pool.len(), 2, "{pool:?}");
    let changes = table_after(md, "## Adding and removing a server in a pool of 300");
    assert_eq!(changes.len(), 8, "{changes:?}");
    for balance in ["least-conn", "round-robin"] {
        assert!(
            md.contains(&format!("- {balance}, under the changes: ")),
            "{md}"
        );
    }
    assert_eq!(
        md.matches("requests/s, 0 socket errors, 0 answers other than 2xx/3xx, slowest")
            .count(),
        2,
        "{md}"
    );
    run.check_plot_and_remove();
}
