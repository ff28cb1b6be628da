//! End to end: `herdsman-bench slow-clients --short`, so that the slow-clients benchmark cannot
//! rot. It builds herdsman's release binary (as `slow-clients` always does), and for herdsman,
//! nginx and the control (herdsman with buffering off), each in front of its own sync server, runs
//! wrk once without and once with 100 slow uploads and 100 slow readers attached; it checks that
//! the results file has every row's figures both ways and the share kept, that every slow client
//! connected and was counted, and that each row ran the configuration it claims. Whether a row
//! keeps its requests/s is a figure for the results file, not a pass or fail here: timing on a
//! shared machine is no test.
//!
//! It needs wrk and nginx (`slow-clients` installs them with apt-get when it runs as root; CI
//! installs them first). It puts load on the machine, so it takes /tmp/herdsman-bench.lock first,
//! like every benchmark on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{is_number, run_short, table_after, table_starting, take_benchmark_lock, value};

const ROWS: [&str; 3] = ["herdsman", "nginx", "control: herdsman, buffering off"];

#[test]
fn the_short_slow_clients_run_measures_every_row_both_ways() {
    let _lock = take_benchmark_lock();
    let run = run_short("slow-clients");
    let (md, stdout) = (&run.md, &run.stdout);

    for row in ROWS {
        assert!(
            stdout.contains(row),
            "{row:?} not in the summary:\n{stdout}"
        );
    }

    // Each row: its baseline, then the run with 100 + 100 slow clients right below it.
    let figures = table_after(md, "## The other clients (wrk)");
    for row in ROWS {
        let at = figures
            .iter()
            .position(|cells| cells[0] == row)
            .unwrap_or_else(|| panic!("no row {row:?} in {figures:#?}"));
        let (without, with) = (&figures[at], &figures[at + 1]);
        assert_eq!((without[1].as_str(), with[1].as_str()), ("0", "100 + 100"));
        // requests/s both ways, the share kept, and the proxy's memory and temporary files.
        for cells in [without, with] {
            for column in [2, 11, 12] {
                assert!(is_number(&cells[column]), "{row}: {cells:?}");
            }
        }
        assert!(with[5].ends_with('%'), "{row}: {with:?}");
        // The slow clients were counted: none of the 100 readers went uncounted.
        for column in [7, 8, 9, 10] {
            assert!(is_number(&with[column]), "{row}: {with:?}");
        }
        assert!(value(&with[9]) <= 100.0, "{row}: {with:?}");
    }

    // Every slow client connected.
    assert!(md.contains("Connects that failed: 0."), "{md}");
    let slow = table_starting(md, "| row | uploads: connections |");
    for row in ROWS {
        let cells = slow.iter().find(|c| c[0] == row).expect("the row");
        assert!(value(&cells[1]) >= 100.0, "{row}: {cells:?}");
        assert_eq!(value(&cells[5]), 100.0, "{row}: {cells:?}");
    }

    // Each row ran what it claims.
    for part in [
        "proxy_request_buffering on;\n    proxy_buffering on;\n",
        "[buffering]\nrequest_buffer_memory = 0\n",
    ] {
        assert!(
            md.contains(part),
            "{part:?} not in the configurations:\n{md}"
        );
    }

    run.check_plot_and_remove();
}
