//! End to end: `herdsman-bench gray --short`, so that the sick-server benchmark cannot rot. It
//! builds herdsman's release binary and runs every case once for 1 s (the recovering one 1 s sick,
//! 1 s recovered) through herdsman's peak-ewma, round-robin and least-conn, HAProxy's leastconn
//! and roundrobin and nginx's least_conn and random two least_conn, with one worker and 50
//! connections. It checks what a user would see: every row of every case has its figures; no run
//! had an error but for the failing server's 500s, which are the answers of 400 or more and come
//! only with it; the sick server's share is given wherever it is in the pool (a third or so with
//! round-robin and every server healthy) and not where it was removed; the targets were judged and
//! the recovering case's plot drawn. How the figures compare is for a quiet machine's results
//! file, not a pass or fail here.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{row, run_short, table_after, take_benchmark_lock, value};

/// Every row of the default run.
const ROWS: [&str; 7] = [
    "herdsman peak-ewma",
    "herdsman round-robin",
    "herdsman least-conn",
    "HAProxy leastconn",
    "HAProxy roundrobin",
    "nginx least_conn",
    "nginx random two least_conn",
];

/// The cases as the results file heads them, and whether the sick server is in the pool.
const CASES: [(&str, bool); 6] = [
    ("### One server 50 ms late", true),
    ("### One server 200 ms late", true),
    ("### One server 200 ms late, then recovered", true),
    ("### One server failing fast (500)", true),
    ("### All healthy", true),
    ("### The sick server removed (two servers)", false),
];

#[test]
fn the_short_gray_run_has_every_row_of_every_case_and_no_unexplained_error() {
    let _lock = take_benchmark_lock();
    let run = run_short("gray");
    let md = &run.md;
    assert!(md.contains("**Short run**"), "{md}");
    for (heading, has_sick) in CASES {
        // "| row | requests/s | p50 ms | p99 ms | share | CPU | user | kernel | socket errors |
        // 400 or more |"
        let table = table_after(md, heading);
        for name in ROWS {
            let cells = row(&table, name);
            for (column, cell) in cells.iter().enumerate().take(8).skip(1) {
                if column == 4 && !has_sick {
                    assert_eq!(cell, "–", "{heading}: {name}: no sick server: {cells:?}");
                    continue;
                }
                assert!(
                    value(cell.split(' ').next().unwrap()) >= 0.0,
                    "{heading}: {name}: column {column}: {cells:?}"
                );
            }
            assert!(value(&cells[1]) > 0.0, "{heading}: {name}: {cells:?}");
            assert_eq!(
                value(&cells[8]),
                0.0,
                "{heading}: {name}: socket errors: {cells:?}"
            );
            let failing = heading.contains("failing");
            let bad_status = value(&cells[9]);
            assert_eq!(
                bad_status > 0.0,
                failing && value(&cells[4]) > 0.0,
                "{heading}: {name}: answers of 400 or more come with the failing server's \
                 requests, and only then: {cells:?}"
            );
        }
    }
    // With round-robin and every server healthy the third server has about a third.
    let healthy = table_after(md, "### All healthy");
    let share = value(&row(&healthy, "herdsman round-robin")[4]);
    assert!((20.0..=45.0).contains(&share), "{share}");
    // The targets were judged (on a short run's figures), the recovery among them.
    let targets = table_after(md, "## Targets (issue 39)");
    assert!(targets.len() >= 7, "{targets:#?}");
    assert!(
        targets.iter().any(|r| r[0].contains("recovery")),
        "{targets:#?}"
    );
    assert!(targets
        .iter()
        .all(|r| r[0].starts_with("herdsman peak-ewma: ")));
    // The recovering case's figures for every row.
    let recovery = table_after(md, "## Recovery");
    for name in ROWS {
        let cells = row(&recovery, name);
        assert!(cells[1].ends_with('%'), "{cells:?}");
        assert!(
            cells[2].ends_with(" s") || cells[2].starts_with("not within"),
            "{cells:?}"
        );
    }
    run.check_plot_and_remove();
}
