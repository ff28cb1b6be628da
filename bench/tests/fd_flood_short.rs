//! End to end: `herdsman-bench fd-flood --short`, so that the descriptor-flood benchmark cannot
//! rot. It builds herdsman's release binary and floods herdsman, HAProxy and nginx in turn, each
//! limited to 1,000 open files, with 1,050 connections that never send a byte, beside keep-alive
//! and new-connection clients and a prober of each one's status page. It checks what a user would
//! see: every proxy has its column and served both kinds of client before the flood; the flood
//! was opened against each; herdsman stayed under its limit, shed flood connections to make room,
//! failed no legitimate request and answered every status probe (its admin API keeps descriptors
//! of its own). How the proxies compare is for the results file, not a pass or fail here: timing
//! on a shared machine is no test.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{row, run_short, table_starting, take_benchmark_lock, value};

#[test]
fn the_short_fd_flood_run_produces_every_figure() {
    let _lock = take_benchmark_lock();
    let run = run_short("fd-flood");
    let md = &run.md;
    assert!(md.contains("**Short run**"), "{md}");
    let table = table_starting(md, "| | herdsman | HAProxy | nginx |");
    for title in [
        "keep-alive clients: requests/s before · during · after",
        "new-connection clients: requests/s before · during · after",
    ] {
        for cell in &row(&table, title)[1..4] {
            let before = value(cell.split(" · ").next().unwrap());
            assert!(before > 0.0, "{title}: {cell}");
        }
    }
    let flood = row(
        &table,
        "flood: connections opened (first and again) · closed by the proxy · connects failed",
    );
    for cell in &flood[1..4] {
        // Every connection tried at least once: opened, or left unanswered by a full listen queue.
        let figures: Vec<f64> = cell.split(" · ").map(value).collect();
        assert!(
            figures[0] + figures[2] >= 1050.0,
            "the flood was not opened: {cell}"
        );
    }

    // herdsman: under its limit, shedding, every legitimate request and status probe answered.
    let herdsman = |title: &str| row(&table, title)[1].clone();
    let files = herdsman("proxy's open files at the peak, of its limit");
    let (peak, limit) = files.split_once(" of ").unwrap();
    assert!(value(peak) <= value(limit), "{files}");
    let shed = value(herdsman(&flood[0]).split(" · ").nth(1).unwrap());
    assert!(
        shed > 0.0,
        "herdsman shed no flood connection: {}",
        herdsman(&flood[0])
    );
    for title in [
        "keep-alive clients: failed during the flood",
        "new-connection clients: failed during the flood",
    ] {
        assert_eq!(herdsman(title), "0", "{title}");
    }
    let probes = herdsman("status page answered during the flood (slowest)");
    let (answered, rest) = probes.split_once(" of ").unwrap();
    let made = rest.split(' ').next().unwrap();
    assert!(value(made) > 0.0 && answered == made, "{probes}");
    assert!(
        md.contains("Target (every legitimate request answered"),
        "{md}"
    );
    run.check_plot_and_remove();
}
