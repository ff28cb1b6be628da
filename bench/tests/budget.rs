//! The instruction budget of the request path (issue 45): `herdsman-bench instructions --short
//! --check` builds herdsman's release binary, counts its instructions per request under callgrind
//! for keep-alive requests, keep-alive requests over TLS and a new connection per request (and
//! keep-alive with the access log on, which has no budget), and fails when a budgeted case counts
//! more than 2% over its budget in bench/budget.toml; this test fails with its message, which
//! names the case, the figure and the budget. A change that must spend more raises the budget in
//! the same commit, with the reason in its message. Counting is repeatable to a fraction of a
//! percent whatever else the machine does, so this is not a timed test. It also checks that every
//! case counted enough requests, so that a broken load cannot pass.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{is_number, row, table_starting, take_benchmark_lock, value};

use std::process::Command;
use std::time::Instant;

/// Fewer requests than this in a case's count means its load did not run as meant (the
/// subcommand refuses such a count too).
const MIN_REQUESTS: f64 = 1_000.0;

#[test]
fn every_case_stays_within_its_instruction_budget() {
    let _lock = take_benchmark_lock();
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_herdsman-bench"))
        .args(["instructions", "--short", "--check"])
        .output()
        .expect("starting herdsman-bench");
    eprintln!(
        "instructions --short --check took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The subcommand's own words come last on stderr, after its progress lines.
    let message = stderr
        .find("Error:")
        .map_or(stderr.as_ref(), |at| &stderr[at..]);
    assert!(
        output.status.success(),
        "herdsman-bench instructions --short --check failed ({}):\n{message}\n\n{stdout}",
        output.status
    );

    let table = table_starting(&stdout, "| case |");
    for case in [
        "keep-alive",
        "tls-keep-alive",
        "new-connection",
        "keep-alive-access-log",
    ] {
        let cells = row(&table, case);
        assert!(cells[1..4].iter().all(|c| is_number(c)), "{cells:?}");
        let requests = value(&cells[1]);
        assert!(requests >= MIN_REQUESTS, "too few requests: {cells:?}");
        // Far more than a request could cost, and far less: a count of something else.
        let per_request = value(&cells[3]);
        assert!((1_000.0..1_000_000.0).contains(&per_request), "{cells:?}");
        let budgeted = case != "keep-alive-access-log";
        assert_eq!(is_number(&cells[4]), budgeted, "{cells:?}");
    }
}
