//! End to end: `herdsman-bench cache --short`, so that the cache benchmark cannot rot. It builds
//! herdsman's release binary and runs it, Varnish, nginx and HAProxy with one worker, each with
//! its cache in front of the benchmark's origin: wrk hits a 1 KiB and a 64 KiB object for one
//! round of 1 s (beside herdsman's proxied listener), then 1,000 clients at once ask for an object
//! the origin takes 500 ms to make, fresh, just expired, and just expired with
//! stale-while-revalidate. It checks what a user would see: every cache's row has its figures,
//! every hit was answered without the origin, every expired object reached the origin again, no
//! client failed, and issue 38's targets were judged. Figures and verdicts are for the results
//! file, not a pass or fail here: timing on a shared machine is no test.
//!
//! It needs varnish, nginx, haproxy and wrk: `cache` installs them with apt-get when it runs as
//! root, and `scripts/test` installs them first (bench/scripts/install-peers.sh). A peer that is
//! still not installed is left out with a note here, and the results file must say why.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{is_number, row, run_short, table_after, take_benchmark_lock, value};

use std::path::Path;

/// Each peer's name in the results, and its program.
const PEERS: [(&str, &str); 3] = [
    ("Varnish", "varnishd"),
    ("nginx", "nginx"),
    ("HAProxy", "haproxy"),
];

fn installed(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(Into::into))
        .any(|dir| Path::new(&dir).join(program).is_file())
}

#[test]
fn the_short_cache_run_measures_every_cache_and_judges_the_targets() {
    let _lock = take_benchmark_lock();
    let run = run_short("cache");
    let md = &run.md;

    let mut caches = vec!["herdsman"];
    let mut all_peers = true;
    for (name, program) in PEERS {
        if installed(program) {
            caches.push(name);
        } else {
            all_peers = false;
            eprintln!("note: {program} is not installed: {name}'s rows are not checked");
            assert!(
                md.contains(&format!("- {name}: ")),
                "why {name} is missing: {md}"
            );
        }
    }

    for case in ["### 1 KiB, 1 worker", "### 64 KiB, 1 worker"] {
        let table = table_after(md, case);
        let proxied = row(&table, "herdsman, proxied (no cache)");
        for name in caches
            .iter()
            .copied()
            .chain(["herdsman, proxied (no cache)"])
        {
            let cells = row(&table, name);
            // CPU per request, user, kernel, requests/s, p50, p99; at the origin; errors.
            for cell in &cells[1..9] {
                assert!(is_number(cell), "{case}, {name}: {cells:?}");
            }
            assert!(value(&cells[4]) > 0.0, "{case}, {name} answered nothing");
            let (total, user, kernel) = (value(&cells[1]), value(&cells[2]), value(&cells[3]));
            assert!(
                (user + kernel - total).abs() <= total * 0.01 + 0.2,
                "{case}, {name}: user + kernel is not the total: {cells:?}"
            );
            assert_eq!(value(&cells[8]), 0.0, "{case}, {name}'s errors: {cells:?}");
        }
        for name in &caches {
            let cells = row(&table, name);
            assert_eq!(
                value(&cells[7]),
                0.0,
                "{case}: {name} let a request through: {cells:?}"
            );
        }
        assert!(
            value(&proxied[7]) > 0.0,
            "{case}: proxied requests reach the origin"
        );
    }

    let stampede = table_after(md, "### 1 worker");
    for name in &caches {
        for object in [
            "fresh (every answer a hit)",
            "just expired (max-age=1)",
            "just expired, stale-while-revalidate=30",
        ] {
            let cells = stampede
                .iter()
                .find(|r| r[0] == object && r[1] == *name)
                .unwrap_or_else(|| panic!("no row {object} / {name} in {stampede:#?}"));
            for cell in &cells[2..] {
                assert!(is_number(cell), "{object}, {name}: {cells:?}");
            }
            assert_eq!(
                value(&cells[6]),
                0.0,
                "{object}, {name}: failures: {cells:?}"
            );
            let server_requests = value(&cells[2]);
            if object.starts_with("fresh") {
                assert_eq!(
                    server_requests, 0.0,
                    "{name} fetched a fresh object: {cells:?}"
                );
            } else {
                assert!(
                    server_requests >= 1.0,
                    "{name}'s object never expired: {cells:?}"
                );
            }
        }
    }

    let targets = table_after(md, "## Targets (issue 38)");
    assert_eq!(targets.len(), 2 * 4 + 2, "{targets:#?}");
    for cells in &targets {
        let verdict = &cells[3];
        let judged = verdict == "met"
            || verdict.starts_with("**NOT MET**")
            || verdict.starts_with("not told apart");
        if all_peers || cells[0].contains("proxied") || cells[0].contains("server") {
            assert!(judged, "{cells:?}");
        }
    }
    assert!(
        md.contains("[cache-hit-ratio.md](cache-hit-ratio.md)"),
        "{md}"
    );
    assert!(
        run.stdout
            .contains("cache: issue 38's targets for herdsman"),
        "{}",
        run.stdout
    );
    run.check_plot_and_remove();
}
