//! End to end: `herdsman-bench health-checks --short`, so that the health-checks benchmark cannot
//! rot. It builds herdsman's release binary (as `health-checks` always does) and has it check 300
//! servers (loopback addresses on one port of the benchmark's own server) every second, 3 s in
//! each scenario (HTTP checks passing, some failing, TCP checks); it checks that every server was checked in the window and that the checks were
//! spread over the interval: no 10 ms held a large part of a second's checks, as firing them all
//! at one instant would. CPU figures are for the results file, not a pass or fail here: timing on
//! a shared machine is no test.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{is_number, row, run_short, table_after, take_benchmark_lock, value};

const SERVERS: f64 = 300.0;

#[test]
fn the_short_health_checks_run_checks_every_server_spread_over_the_interval() {
    let _lock = take_benchmark_lock();
    let run = run_short("health-checks");
    let (md, stdout) = (&run.md, &run.stdout);

    let checks = table_after(md, "## The checks and how they spread");
    let cpu = table_after(md, "## CPU");
    for scenario in ["steady", "changing", "tcp"] {
        assert!(stdout.contains(scenario), "{scenario} not in:\n{stdout}");
        let cells = row(&checks, scenario);
        // Every server was checked in the window.
        assert_eq!(value(&cells[2]), SERVERS, "{scenario}: {cells:?}");
        // All at one instant would put 300 in one 10 ms; spread, the busiest holds a few.
        let busiest = value(&cells[4]);
        assert!(busiest < SERVERS / 4.0, "{scenario}: {cells:?}");
        // The checker's CPU, from /proc and from its metric, and herdsman's.
        let cells = row(&cpu, scenario);
        for column in 1..=5 {
            assert!(is_number(&cells[column]), "{scenario}: {cells:?}");
        }
    }
    run.check_plot_and_remove();
}
