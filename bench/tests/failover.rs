//! Failover at full load: short scenarios of `herdsman-bench soak` with one kind of chaos, each
//! with 200 keep-alive connections through herdsman (release build) in front of three nginx
//! servers, checked on what the clients saw:
//!
//! - a graceful stop and restart of one server, three times in 12 s (each server in turn), fails
//!   no request;
//! - `kill -9` of one server and its start 4 s later, twice in 10 s (for a second, two servers are
//!   dead), fails no request that had not yet received a byte of its response ("cut
//!   mid-response" is counted apart, and is all that may fail) and closes no client connection
//!   without an answer;
//! - with all three servers killed for 4 s, every failed request is a 502 or a 503 that comes
//!   quickly (p99 under 100 ms), the retries stay within the budget (20% of the requests, with
//!   `retry_budget_floor = 0` so that the bound is exact), and the answers come back once the
//!   servers do.
//!
//! They need nginx and put load on the machine: each takes /tmp/herdsman-bench.lock first, like
//! every benchmark on a shared machine, so they run one at a time.

mod support;
use support::{row, run_short_with, table_after, take_benchmark_lock, value, ShortRun};

/// The figures table of a run, and one figure of it by its title.
fn figures(run: &ShortRun) -> Vec<Vec<String>> {
    table_after(&run.md, "## Requests, failures, memory and descriptors")
}

fn figure(table: &[Vec<String>], title: &str) -> f64 {
    value(&row(table, title)[1])
}

/// The rows of the timeline whose step contains `what`.
fn steps(run: &ShortRun, what: &str) -> usize {
    table_after(&run.md, "## herdsman: the chaos")
        .iter()
        .filter(|cells| cells[1].contains(what))
        .count()
}

#[test]
fn graceful_restarts_fail_no_request() {
    let _lock = take_benchmark_lock();
    let run = run_short_with(
        "soak",
        "failover-graceful",
        &[
            "--chaos",
            "graceful-restart",
            "--every",
            "3",
            "--duration",
            "12",
        ],
    );
    let table = figures(&run);
    assert_eq!(steps(&run, "nginx QUIT (graceful stop)"), 3, "{}", run.md);
    assert_eq!(steps(&run, ": started again"), 3, "{}", run.md);
    assert_eq!(figure(&table, "chaos steps that failed"), 0.0);
    assert!(figure(&table, "requests") > 10_000.0, "{}", run.md);
    assert_eq!(figure(&table, "failed requests"), 0.0, "{}", run.md);
    assert_eq!(
        figure(&table, "client connections closed without an answer"),
        0.0
    );
    run.check_plot_and_remove();
}

#[test]
fn a_killed_server_fails_no_request_that_had_no_answer_yet() {
    let _lock = take_benchmark_lock();
    let run = run_short_with(
        "soak",
        "failover-kill",
        &["--chaos", "kill", "--every", "3", "--duration", "10"],
    );
    let table = figures(&run);
    assert_eq!(steps(&run, ": kill -9"), 2, "{}", run.md);
    assert_eq!(figure(&table, "chaos steps that failed"), 0.0);
    let cut = figure(&table, "cut mid-response");
    eprintln!("requests cut mid-response by a kill: {cut}");
    assert_eq!(
        figure(&table, "failed requests"),
        cut,
        "only responses already started may fail:\n{}",
        run.md
    );
    assert_eq!(
        figure(&table, "client connections closed without an answer"),
        0.0,
        "{}",
        run.md
    );
    run.check_plot_and_remove();
}

#[test]
fn with_every_server_dead_the_errors_are_quick_and_retries_stay_in_budget() {
    let _lock = take_benchmark_lock();
    let run = run_short_with(
        "soak",
        "failover-all-dead",
        &[
            "--chaos",
            "kill-all",
            "--every",
            "5",
            "--duration",
            "12",
            "--retry-budget-floor",
            "0",
        ],
    );
    let md = &run.md;
    let table = figures(&run);
    assert_eq!(steps(&run, "every server: kill -9"), 1, "{md}");
    assert_eq!(figure(&table, "chaos steps that failed"), 0.0);

    // Every failure is herdsman's own 502 or 503, none a closed or broken connection.
    let failed = figure(&table, "failed requests");
    assert!(
        failed > 0.0,
        "every server was dead for 4 s, yet nothing failed:\n{md}"
    );
    let status = |code: &str| {
        table
            .iter()
            .find(|cells| cells[0] == format!("failed: status {code}"))
            .map_or(0.0, |cells| value(&cells[1]))
    };
    assert_eq!(status("502") + status("503"), failed, "{md}");
    assert_eq!(
        figure(&table, "client connections closed without an answer"),
        0.0
    );

    // Quickly: no failed request waited for a timeout.
    let p99 = figure(&table, "p99 latency of failed requests, ms");
    eprintln!("p99 latency of the failed requests: {p99} ms");
    assert!(p99 < 100.0, "p99 of failed requests {p99} ms:\n{md}");

    // Retries within the budget: with no floor, 20% of the requests.
    let herdsman = table_after(md, "## herdsman's access log");
    let requests = value(&row(&herdsman, "requests (herdsman_requests_total)")[1]);
    let retries = value(&row(&herdsman, "retries (herdsman_retries_total)")[1]);
    eprintln!("retries {retries} for {requests} requests");
    assert!(
        retries <= 0.2 * requests,
        "{retries} retries for {requests} requests:\n{md}"
    );

    // And the answers came back with the servers.
    assert!(
        figure(&table, "2xx/s over the last 2 whole seconds") > 1000.0,
        "{md}"
    );
    run.check_plot_and_remove();
}
