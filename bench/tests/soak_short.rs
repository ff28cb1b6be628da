//! End to end: `herdsman-bench soak --short`, so that the soak cannot rot and herdsman cannot
//! regress on it. Twenty-seven seconds of 200 keep-alive connections through herdsman (release
//! build) in front of three nginx servers while, every 3 s, one of the soak's seven events happens
//! in turn (each at least once): a server stopped gracefully and started again, drain then ready,
//! a reload that changes the balance algorithm, a log rotation, a server killed and started again,
//! a binary upgrade, maintenance then ready. It checks what an operator would: no request failed
//! and no client connection was closed without an answer; every request herdsman answered has
//! its access log line (over the rotated files too); memory did not grow much under load; and the
//! open descriptors came back to their count before the load once the (short) idle timeouts had
//! passed.
//!
//! It needs nginx (`soak` installs nginx-light with apt-get when it runs as root; CI installs it
//! first). It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every
//! benchmark on a shared machine (or runs under it when started by `flock` on it).
mod support;
use support::{row, run_short, table_after, take_benchmark_lock, value};

/// RSS may grow under load by less than this share of what it was 2 s into the load…
const RSS_GROWTH_SHARE: f64 = 50.0;
/// … and by less than this many MiB (herdsman's RSS under this load is about 25 MiB).
const RSS_GROWTH_MIB: f64 = 32.0;

#[test]
fn the_short_soak_fails_no_request_and_leaks_nothing() {
    let _lock = take_benchmark_lock();
    let run = run_short("soak");
    let md = &run.md;
    let figures = table_after(md, "## Requests, failures, memory and descriptors");
    let figure = |title: &str| value(&row(&figures, title)[1]);

    assert!(figure("requests") > 10_000.0, "{md}");
    assert_eq!(figure("failed requests"), 0.0, "{md}");
    assert_eq!(
        figure("client connections closed without an answer"),
        0.0,
        "{md}"
    );
    assert!(md.contains("**herdsman: 0 failed requests of "), "{md}");
    assert!(run.stdout.contains("target 0: met."), "{}", run.stdout);

    // Every kind of event happened, and every step did what it was told.
    assert_eq!(figure("chaos steps that failed"), 0.0, "{md}");
    let timeline = table_after(md, "## herdsman: the chaos");
    for step in [
        "nginx QUIT (graceful stop)",
        ": drain",
        "reload, balance changed",
        "access log rotated",
        ": kill -9",
        "binary upgrade",
        ": maint",
        ": ready",
        ": started again",
    ] {
        assert!(
            timeline.iter().any(|cells| cells[1].contains(step)),
            "no {step:?} in {timeline:#?}"
        );
    }

    // Every request answered has its line, the rotated files counted too.
    let log = table_after(md, "## herdsman's access log");
    assert_eq!(
        value(&row(&log, "access log lines")[1]),
        value(&row(&log, "requests answered")[1]),
        "{md}"
    );
    assert_eq!(
        value(&row(&log, "access log lines − requests answered")[1]),
        0.0
    );
    // The upgrade brought a new process.
    assert!(
        row(&log, "processes that served, in turn")[1].contains(" → "),
        "{md}"
    );

    // Memory under load, from 2 s in to the end.
    let grown_mib = figure("RSS growth under load, MiB");
    let grown_share = figure("RSS growth under load, %");
    assert!(
        grown_mib < RSS_GROWTH_MIB && grown_share < RSS_GROWTH_SHARE,
        "RSS grew by {grown_mib} MiB ({grown_share}%):\n{md}"
    );

    // Descriptors back to their count before the load.
    let before = figure("descriptors before the load");
    let after = figure("descriptors after the load, once idle");
    assert!(
        figure("descriptors at most under load") > before + 200.0,
        "{md}"
    );
    assert!(
        after <= before,
        "{after} descriptors after the load, {before} before:\n{md}"
    );

    run.check_plot_and_remove();
}
