//! The plots `compare` writes beside its results file: NAME-connections.png (requests/s and
//! CPU-µs per request by connection count, a line per proxy and worker count, a pair of charts per
//! server) and NAME-idle.png
//! (requests/s and resident memory by idle connections, a line per proxy). A plot that cannot be
//! drawn is reported and left out; the results file does not depend on it.

use std::path::{Path, PathBuf};

use super::report::idle::{IdleExtract, IdleSweep, REQUESTS_PER_SEC, RSS_OPEN_MIB};
use super::report::{Cell, Extract, Session, SERVER_ALONE_LABEL};
use crate::kit::markdown::worker_count;
use crate::kit::plot::{write_panels_png, LineChart, Series};

/// Writes the plots and returns (what each shows, its file name) for those written.
pub fn write(session: &Session, out: &Path) -> Vec<(String, String)> {
    let mut written = Vec::new();
    let mut attempt = |what: &str, path: PathBuf, charts: Vec<LineChart>| match write_panels_png(
        &path, &charts,
    ) {
        Ok(()) => {
            let file = path
                .file_name()
                .map_or(String::new(), |f| f.to_string_lossy().into_owned());
            eprintln!("wrote {}", path.display());
            written.push((what.to_string(), file));
        }
        Err(e) => eprintln!("no plot {}: {e:#}", path.display()),
    };
    attempt(
        "Requests/s and CPU-µs per request by connections",
        beside(out, "connections"),
        connection_charts(session),
    );
    if let Some(sweep) = &session.idle {
        attempt(
            "Requests/s and resident memory by idle connections",
            beside(out, "idle"),
            idle_charts(sweep),
        );
    }
    written
}

/// `dir/compare.md` → `dir/compare-SUFFIX.png`.
fn beside(out: &Path, suffix: &str) -> PathBuf {
    let stem = out
        .file_stem()
        .map_or("compare".into(), |s| s.to_string_lossy().into_owned());
    out.with_file_name(format!("{stem}-{suffix}.png"))
}

/// Per server: requests/s, then CPU-µs per request.
fn connection_charts(s: &Session) -> Vec<LineChart> {
    let series = |server, value: Extract| {
        let mut all = Vec::new();
        for &workers in &s.workers {
            for label in s.labels.iter().filter(|l| *l != SERVER_ALONE_LABEL) {
                let points = s
                    .connections
                    .iter()
                    .filter_map(|&connections| {
                        let cell = Cell {
                            server,
                            workers,
                            connections,
                        };
                        Some((f64::from(connections), s.median(label, cell, value)?))
                    })
                    .collect();
                all.push(Series {
                    name: format!("{label}, {}", worker_count(workers)),
                    points,
                });
            }
        }
        all
    };
    s.servers
        .iter()
        .flat_map(|&server| {
            let behind = server.written();
            [
                LineChart {
                    title: format!(
                        "Requests/s by client connections, {behind} (median over rounds)"
                    ),
                    x_label: "wrk connections".into(),
                    y_label: "requests/s".into(),
                    series: series(server, |r| r.wrk.requests_per_sec),
                    log_y: false,
                },
                LineChart {
                    title: format!(
                        "Proxy CPU-µs per request by client connections, {behind} (lower is better)"
                    ),
                    x_label: "wrk connections".into(),
                    y_label: "CPU-µs per request".into(),
                    series: series(server, |r| r.cpu_us_per_request),
                    log_y: false,
                },
            ]
        })
        .collect()
}

fn idle_charts(sweep: &IdleSweep) -> Vec<LineChart> {
    let series = |value: IdleExtract| {
        sweep
            .labels
            .iter()
            .map(|label| Series {
                name: label.clone(),
                points: sweep
                    .counts
                    .iter()
                    .filter_map(|&n| Some((f64::from(n), sweep.median(label, n, value)?)))
                    .collect(),
            })
            .collect()
    };
    let load = format!(
        "wrk -c{}, {}",
        sweep.connections,
        worker_count(sweep.workers)
    );
    vec![
        LineChart {
            title: format!("Requests/s by idle keep-alive connections held open ({load})"),
            x_label: "idle connections".into(),
            y_label: "requests/s".into(),
            series: series(REQUESTS_PER_SEC),
            log_y: false,
        },
        LineChart {
            title: "Resident memory (VmRSS) with the idle connections open".into(),
            x_label: "idle connections".into(),
            y_label: "MiB".into(),
            series: series(RSS_OPEN_MIB),
            log_y: false,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_are_named_after_the_results_file() {
        assert_eq!(
            beside(Path::new("bench/results/compare.md"), "idle"),
            Path::new("bench/results/compare-idle.png")
        );
        assert_eq!(
            beside(Path::new("/t/compare-short.md"), "connections"),
            Path::new("/t/compare-short-connections.png")
        );
    }
}
