//! End to end: `herdsman-bench cache-disk --short`, so that the disk tier's benchmark cannot rot.
//! It builds herdsman's release binary and runs it with one worker in front of the benchmark's
//! origin: with 8 MiB of memory and a disk tier, wrk asks for a few hot objects alone, beside a
//! second wrk asking for a few warm ones (memory hits) and beside one asking for 1,000 cold ones
//! (each read back from the disk); then a Zipf load on
//! herdsman started empty, 6 s before a binary upgrade (SIGUSR2) and 6 s after, with
//! `[cache.disk]` and memory only. It checks what a user would see: every figure is there, no
//! request failed, stored objects never went back to the origin, the cold load made disk reads,
//! the memory-only cache was cold after the upgrade, and the hit ratios are shares. Figures are
//! for the results file, not a pass or fail here: timing on a shared machine is no test.
//!
//! It needs wrk (`cache-disk` installs it with apt-get when it runs as root). It puts load on the
//! machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark on a shared machine.

mod support;
use support::{is_number, row, run_short, table_after, table_starting, take_benchmark_lock, value};

#[test]
fn the_short_disk_run_measures_hits_beside_disk_reads_and_an_upgrade() {
    let _lock = take_benchmark_lock();
    let run = run_short("cache-disk");
    let md = &run.md;

    let hot = table_after(md, "## Memory hits while disk reads run");
    let alone = row(&hot, "alone");
    let memory = row(&hot, "beside memory hits (32 KiB)");
    let disk = row(&hot, "beside disk reads (32 KiB)");
    for cells in [alone, memory, disk] {
        // requests/s, p50, p99, disk reads/s; at the origin, errors.
        for cell in cells[1..5].iter().chain(&cells[8..10]) {
            assert!(is_number(cell), "{cells:?}");
        }
        assert!(
            value(&cells[1]) > 0.0,
            "the hot load was answered: {cells:?}"
        );
        assert_eq!(
            value(&cells[8]),
            0.0,
            "a stored object was fetched: {cells:?}"
        );
        assert_eq!(value(&cells[9]), 0.0, "errors: {cells:?}");
    }
    for cells in [memory, disk] {
        for cell in &cells[5..8] {
            assert!(is_number(cell), "the second load's figures: {cells:?}");
        }
    }
    assert!(
        value(&disk[4]) > value(&alone[4]) && value(&disk[4]) > value(&memory[4]),
        "the cold load made disk reads: {hot:#?}"
    );

    let minutes = table_after(md, "## Hit ratio across a binary upgrade");
    for what in [
        "the minute before",
        "the minute after",
        "the first 2 s after",
    ] {
        let cells = row(&minutes, what);
        for cell in &cells[1..3] {
            let ratio = value(cell);
            assert!((0.0..=100.0).contains(&ratio), "{what}: {cells:?}");
        }
    }
    let serving = row(&minutes, "new process serving after SIGUSR2");
    assert!(
        serving[1].ends_with(" ms") && serving[2].ends_with(" ms"),
        "{serving:?}"
    );

    let intervals = table_starting(md, "| interval |");
    let phases: Vec<&str> = intervals.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        phases,
        [
            "warm-up (2 s)",
            "−6 to −4 s",
            "−4 to −2 s",
            "−2 to 0 s",
            "0 to +2 s",
            "+2 to +4 s",
            "+4 to +6 s"
        ]
    );
    for cells in &intervals {
        for at in [1, 2, 3, 5, 6, 7] {
            assert!(is_number(&cells[at]), "{cells:?}");
        }
        assert!(
            value(&cells[1]) > 0.0 && value(&cells[5]) > 0.0,
            "{cells:?}"
        );
        assert!(is_number(&cells[4]), "files indexed: {cells:?}");
    }
    let first_after = row(&intervals, "0 to +2 s");
    assert!(
        value(&first_after[6]) > 0.0,
        "memory only is cold after the upgrade: {first_after:?}"
    );
    assert!(
        run.stdout
            .contains("cache-disk: hit ratio across a binary upgrade"),
        "{}",
        run.stdout
    );
    run.check_plot_and_remove();
}
