//! End to end: `herdsman-bench observability --short`, so that the observability benchmark cannot
//! rot. It builds herdsman's release binary (as `observability` always does), runs wrk through a
//! fresh herdsman per condition — off (no access log, nobody scrapes) and on (an access log, and
//! `/metrics` scraped every second) — with 1 and 2 workers, and checks that the results file has
//! both conditions' figures and their ratio, that every access log line matched wrk's requests,
//! and that every scrape got its metrics. Whether on ÷ off meets the 95% target is a figure for
//! the results file, not a pass or fail here: timing on a shared machine is no test.
//!
//! It needs wrk (`observability` installs it with apt-get when it runs as root; CI installs it
//! first). It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every
//! benchmark on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{is_number, row, run_short, table_after, table_starting, take_benchmark_lock};

#[test]
fn the_short_observability_run_measures_both_conditions() {
    let _lock = take_benchmark_lock();
    let run = run_short("observability");
    let (md, stdout) = (&run.md, &run.stdout);

    for workers in ["1 worker", "2 workers"] {
        // Requests/s, p50, p99 and herdsman's CPU per request, off and on, and on ÷ off.
        let figures = table_after(md, &format!("## {workers}: wrk through herdsman"));
        for title in [
            "requests/s",
            "p50 latency, µs",
            "p99 latency, µs",
            "herdsman CPU-µs per request",
        ] {
            let cells = row(&figures, title);
            assert_eq!(cells.len(), 4, "{title}: {cells:?}");
            for cell in &cells[1..4] {
                assert!(is_number(cell), "{workers}, {title}: {cells:?}");
            }
        }
        assert!(row(&figures, "requests/s")[3].ends_with('%'));
        // The verdict, whichever it is; and on the summary too.
        let verdict = format!("{workers}: on ÷ off requests/s: ");
        assert!(md.contains(&format!("**{verdict}")), "no verdict:\n{md}");
        assert!(
            md.contains("target ≥ 95%: met.**") || md.contains("target ≥ 95%: **NOT MET**.**"),
            "no verdict:\n{md}"
        );
        assert!(stdout.contains(&verdict), "{verdict:?} not in:\n{stdout}");
        // herdsman answered every one of wrk's requests.
        assert!(
            md.contains("wrk errors over these runs (socket errors + status ≥ 400): 0."),
            "{md}"
        );
    }

    // Every request wrk completed has its access log line, and every scrape got the metrics.
    assert!(
        md.contains("Access log lines matched wrk's requests in 2 of 2 runs."),
        "{md}"
    );
    let runs = table_starting(md, "| workers | round | condition | wrk requests |");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    for cells in &runs {
        assert_eq!(cells[2], "on", "{cells:?}");
        assert!(is_number(&cells[3]) && is_number(&cells[4]), "{cells:?}");
        assert_eq!(cells[6], "yes", "the log's lines did not match: {cells:?}");
        let (ok, made) = cells[9].split_once(" / ").expect("scrapes ok / made");
        assert_eq!(ok, made, "a scrape failed: {cells:?}");
        // A 2 s run scrapes at 0, 1 and perhaps 2 s.
        assert!(ok.parse::<u32>().unwrap() >= 2, "{cells:?}");
        assert!(cells[10] != "0" && is_number(&cells[10]), "{cells:?}");
    }

    run.check_plot_and_remove();
}
