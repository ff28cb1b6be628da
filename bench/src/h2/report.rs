//! What `h2` reports: the targets (herdsman's figure over each peer's, per round, judged by the
//! median's 95% interval), each cell's medians per proxy, every run, the configurations, the
//! results file and its plot (CPU-µs per request by round, a panel per cell).

use std::fmt::Write as _;
use std::path::Path;

use crate::kit::cpu::disturbed;
use crate::kit::markdown::{thousands, write_details_table};
use crate::kit::paired::{judged, median_interval, PairedRatio};
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::proxies::ProxyKind;
use crate::kit::results::{write_plot_link, Results, RunFacts, Trouble};
use crate::kit::stats::spread;

use super::runs::{Cell, H2Run};
use super::settings::{Settings, Transport};

/// One target of the issue: herdsman's `figure` over `peer`'s, at most or at least `bound`.
struct Goal {
    what: &'static str,
    peer: ProxyKind,
    figure: fn(&H2Run) -> f64,
    bound: f64,
    at_most: bool,
}

const GOALS: [Goal; 5] = [
    Goal {
        what: "CPU per request ≤ 0.85 × HAProxy's",
        peer: ProxyKind::Haproxy,
        figure: H2Run::cpu_us,
        bound: 0.85,
        at_most: true,
    },
    Goal {
        what: "requests/s ≥ HAProxy's",
        peer: ProxyKind::Haproxy,
        figure: H2Run::requests_per_sec,
        bound: 1.0,
        at_most: false,
    },
    Goal {
        what: "requests/s ≥ nginx's",
        peer: ProxyKind::Nginx,
        figure: H2Run::requests_per_sec,
        bound: 1.0,
        at_most: false,
    },
    Goal {
        what: "p99 ≤ HAProxy's",
        peer: ProxyKind::Haproxy,
        figure: H2Run::p99_ms,
        bound: 1.0,
        at_most: true,
    },
    Goal {
        what: "p99 ≤ nginx's",
        peer: ProxyKind::Nginx,
        figure: H2Run::p99_ms,
        bound: 1.0,
        at_most: true,
    },
];

/// One figure of each cell's table, per proxy: its heading, its value, and how it is written.
struct Figure {
    heading: &'static str,
    value: fn(&H2Run) -> f64,
    written: fn(f64) -> String,
}

const FIGURES: [Figure; 6] = [
    Figure {
        heading: "requests/s",
        value: H2Run::requests_per_sec,
        written: thousands,
    },
    Figure {
        heading: "p99 ms",
        value: H2Run::p99_ms,
        written: two_places,
    },
    Figure {
        heading: "CPU-µs/req",
        value: H2Run::cpu_us,
        written: two_places,
    },
    Figure {
        heading: "user µs",
        value: H2Run::user_us,
        written: two_places,
    },
    Figure {
        heading: "kernel µs",
        value: H2Run::system_us,
        written: two_places,
    },
    Figure {
        heading: "RSS MiB",
        value: H2Run::rss_mib,
        written: one_place,
    },
];

fn two_places(value: f64) -> String {
    format!("{value:.2}")
}

fn one_place(value: f64) -> String {
    format!("{value:.1}")
}

/// A session of runs and what the results file says of them.
pub struct Session {
    facts: RunFacts,
    settings: Settings,
    failure: Option<String>,
    /// Each proxy's configuration per transport, as first started, its scratch directory written
    /// SCRATCH.
    configs: Vec<(ProxyKind, Transport, String)>,
    pub runs: Vec<H2Run>,
}

impl Session {
    pub fn new(facts: RunFacts, settings: Settings) -> Session {
        Session {
            facts,
            settings,
            failure: None,
            configs: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// Keeps `text` as `proxy`'s configuration for `transport`, unless one is kept already.
    pub fn keep_config(&mut self, proxy: ProxyKind, transport: Transport, text: String) {
        if !self
            .configs
            .iter()
            .any(|(p, t, _)| (*p, *t) == (proxy, transport))
        {
            self.configs.push((proxy, transport, text));
        }
    }

    /// Every cell in the order measured.
    fn cells(&self) -> Vec<Cell> {
        let settings = &self.settings;
        let mut cells = Vec::new();
        for &workers in &settings.workers {
            for &transport in &settings.transports {
                for load in settings.loads(settings.seconds) {
                    cells.push(Cell {
                        workers,
                        transport,
                        load,
                    });
                }
            }
        }
        cells
    }

    /// (round, value) of `proxy`'s runs in `cell`.
    fn side(&self, cell: &Cell, proxy: ProxyKind, figure: fn(&H2Run) -> f64) -> Vec<(u32, f64)> {
        self.runs
            .iter()
            .filter(|run| run.cell.is(cell) && run.proxy == proxy)
            .map(|run| (run.round, figure(run)))
            .collect()
    }

    fn has(&self, proxy: ProxyKind) -> bool {
        self.settings.proxies.contains(&proxy)
    }

    fn write_targets(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Targets\n\nEach ratio is herdsman's figure over the peer's, taken per round (the \
             two runs of a round close together) and judged by its median over rounds, with the \
             rounds' range. When the median misses a bound that its 95% interval (from the \
             rounds' order statistics) still holds, the run did not tell the two apart; more \
             rounds (`--rounds`) narrow the interval.\n\n\
             | cell | target | herdsman ÷ peer | verdict |\n|---|---|---|---|"
        );
        for cell in self.cells() {
            for goal in GOALS.iter().filter(|goal| self.has(goal.peer)) {
                let ratio = PairedRatio::of(
                    &self.side(&cell, ProxyKind::Herdsman, goal.figure),
                    &self.side(&cell, goal.peer, goal.figure),
                );
                let measured = match ratio.per_round() {
                    None => "–".to_string(),
                    Some(s) if s.count == 1 => format!("{:.3}", s.median),
                    Some(s) => format!("{:.3} (per round {:.3}–{:.3})", s.median, s.min, s.max),
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {measured} | {} |",
                    cell.written(),
                    goal.what,
                    judged(&ratio.rounds, goal.bound, goal.at_most)
                );
            }
        }
        md.push('\n');
    }

    /// A cell of the figures table: the median over rounds in bold and, with several rounds, its
    /// 95% interval; "–" without runs.
    fn median_cell(values: &[f64], format: fn(f64) -> String) -> String {
        let Some(spread) = spread(values) else {
            return "–".into();
        };
        match median_interval(values) {
            Some((low, high)) if spread.count > 1 => {
                format!(
                    "**{}** ({}–{})",
                    format(spread.median),
                    format(low),
                    format(high)
                )
            }
            _ => format!("**{}**", format(spread.median)),
        }
    }

    fn write_figures(&self, md: &mut String) {
        let _ = write!(md, "## Figures\n\nMedians over rounds");
        if self.settings.rounds > 1 {
            md.push_str(" with their 95% interval (below 6 rounds, the rounds' whole range)");
        }
        let _ = write!(
            md,
            ". CPU is the proxy's processes' (every nginx worker and its master, HAProxy's and \
             herdsman's threads) per answered request, user and kernel apart; RSS is theirs \
             halfway through the run.\n\n| cell | proxy |"
        );
        for figure in &FIGURES {
            let _ = write!(md, " {} |", figure.heading);
        }
        let _ = writeln!(md, "\n|---|---|{}", "---:|".repeat(FIGURES.len()));
        for cell in self.cells() {
            for &proxy in &self.settings.proxies {
                let _ = write!(md, "| {} | {} |", cell.written(), proxy.written());
                for figure in &FIGURES {
                    let values: Vec<f64> = self
                        .side(&cell, proxy, figure.value)
                        .into_iter()
                        .map(|(_, value)| value)
                        .collect();
                    let _ = write!(md, " {} |", Self::median_cell(&values, figure.written));
                }
                md.push('\n');
            }
        }
        md.push('\n');
    }

    fn write_runs(&self, md: &mut String) {
        write_details_table(
            md,
            "Every run",
            "| round | cell | proxy | answered | failed | requests/s | p50 ms | p99 ms | \
             CPU-µs/req | user µs | kernel µs | RSS MiB | other CPUs |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            self.runs.iter().map(|run| {
                let report = &run.report;
                format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | \
                     {:.2} |",
                    run.round,
                    run.cell.written(),
                    run.proxy.written(),
                    report.answered,
                    report.failed,
                    thousands(report.requests_per_sec),
                    report
                        .p50_us
                        .map_or("–".into(), |us| two_places(us / 1000.0)),
                    run.p99_ms(),
                    run.cpu_us(),
                    run.user_us(),
                    run.system_us(),
                    run.rss_mib(),
                    run.other_cpus
                )
            }),
        );
    }

    fn write_configs(&self, md: &mut String) {
        let _ = writeln!(md, "## Configurations\n");
        for (proxy, transport, text) in &self.configs {
            let _ = writeln!(
                md,
                "<details><summary>{} over {transport}</summary>\n\n```\n{}```\n\n</details>\n",
                proxy.written(),
                text
            );
        }
    }

    fn disturbed(&self) -> Vec<String> {
        disturbed(
            &self.runs,
            |run| run.other_cpus,
            |run| {
                format!(
                    "round {} of {} with {}",
                    run.round,
                    run.proxy.written(),
                    run.cell.written()
                )
            },
        )
    }
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.runs.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let mut text = format!(
            "h2: medians over {} round(s) of {} s\n",
            self.settings.rounds, self.settings.seconds
        );
        for cell in self.cells() {
            for &proxy in &self.settings.proxies {
                let median = |figure: fn(&H2Run) -> f64| {
                    let values: Vec<f64> = self
                        .side(&cell, proxy, figure)
                        .into_iter()
                        .map(|(_, value)| value)
                        .collect();
                    spread(&values).map(|s| s.median)
                };
                let (Some(rate), Some(p99), Some(cpu), Some(user), Some(kernel), Some(rss)) = (
                    median(H2Run::requests_per_sec),
                    median(H2Run::p99_ms),
                    median(H2Run::cpu_us),
                    median(H2Run::user_us),
                    median(H2Run::system_us),
                    median(H2Run::rss_mib),
                ) else {
                    continue;
                };
                let _ = writeln!(
                    text,
                    "{:<24} {:<9} {} req/s, p99 {p99:.2} ms, {cpu:.2} CPU-µs/req (user {user:.2}, \
                     kernel {kernel:.2}), RSS {rss:.1} MiB",
                    cell.written(),
                    proxy.written(),
                    thousands(rate)
                );
            }
        }
        let disturbed = self.disturbed();
        Trouble::new(&disturbed, self.runs.len(), &self.failure).write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let settings = &self.settings;
        let mut md =
            String::from("# HTTP/2 to clients: herdsman, HAProxy and nginx under h2load\n\n");
        let _ = writeln!(
            md,
            "h2load (one thread) against each proxy in front of the same HTTP/1.1 backend (the \
             bench's own, a 19-byte answer, keep-alive), over TLS (h2 by ALPN, an ECDSA P-256 \
             certificate) and over h2c (prior knowledge), with {} (connections × streams in \
             flight on each), {} s per run, {} round(s); the proxies take their turns \
             in an order that rotates each round. herdsman runs with a user's defaults but for \
             `h2c = true` and `http2 = true` on the TLS listener, off by default while HTTP/2 is \
             being built. p50 and p99 are by nearest rank over every answered request of the \
             run (h2load's `--log-file`). gRPC (HTTP/2 to servers) is not measured yet.\n",
            settings
                .loads(settings.seconds)
                .map(|load| load.written())
                .collect::<Vec<_>>()
                .join(" and "),
            settings.seconds,
            settings.rounds
        );
        self.facts.write_markdown(&mut md);
        let disturbed = self.disturbed();
        let trouble = Trouble::new(&disturbed, self.runs.len(), &self.failure);
        trouble.write_markdown(&mut md);
        self.write_targets(&mut md);
        self.write_figures(&mut md);
        write_plot_link(
            &mut md,
            plot,
            "CPU-µs per request by round, a panel per cell",
        );
        self.write_runs(&mut md);
        self.write_configs(&mut md);
        md
    }

    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let charts: Vec<LineChart> = self
            .cells()
            .into_iter()
            .map(|cell| LineChart {
                title: cell.written(),
                x_label: "round".into(),
                y_label: "CPU-µs per request".into(),
                series: self
                    .settings
                    .proxies
                    .iter()
                    .map(|&proxy| Series {
                        name: proxy.written().into(),
                        points: self
                            .side(&cell, proxy, H2Run::cpu_us)
                            .into_iter()
                            .map(|(round, value)| (f64::from(round), value))
                            .collect(),
                    })
                    .collect(),
                log_y: false,
            })
            .collect();
        write_panels_png(path, &charts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::h2load::{StreamLoad, StreamReport};
    use crate::kit::procstat::CpuTime;
    use std::path::PathBuf;
    use std::time::Duration;

    fn settings() -> Settings {
        Settings {
            workers: vec![1],
            proxies: vec![ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx],
            transports: vec![Transport::H2c],
            seconds: 2,
            rounds: 2,
            warm_up: 0,
            out: PathBuf::from("/tmp/h2.md"),
        }
    }

    /// A made-up run for the report's shape: `cpu_ms` of CPU over 1,000 answers.
    fn run(round: u32, proxy: ProxyKind, streams: u32, cpu_ms: u64, rate: f64) -> H2Run {
        H2Run {
            round,
            cell: Cell {
                workers: 1,
                transport: Transport::H2c,
                load: StreamLoad {
                    clients: if streams == 10 { 50 } else { 10 },
                    streams,
                    seconds: 2,
                },
            },
            proxy,
            cpu: CpuTime {
                user: Duration::from_millis(cpu_ms / 4),
                system: Duration::from_millis(cpu_ms - cpu_ms / 4),
            },
            report: StreamReport {
                answered: 1_000,
                failed: 0,
                requests_per_sec: rate,
                p50_us: Some(1_000.0),
                p99_us: Some(2_000.0),
                protocol: Some("h2c".into()),
            },
            rss_kib: 8_192,
            other_cpus: 0.0,
        }
    }

    #[test]
    fn every_cell_has_a_row_per_proxy_and_every_target_a_verdict() {
        let mut session = Session::new(RunFacts::sample("h2"), settings());
        for round in 1..=2 {
            for streams in [10, 100] {
                session
                    .runs
                    .push(run(round, ProxyKind::Herdsman, streams, 10, 900.0));
                session
                    .runs
                    .push(run(round, ProxyKind::Haproxy, streams, 15, 1000.0));
                session
                    .runs
                    .push(run(round, ProxyKind::Nginx, streams, 30, 800.0));
            }
        }
        session.keep_config(ProxyKind::Nginx, Transport::H2c, "http2\n".into());
        session.keep_config(ProxyKind::Nginx, Transport::H2c, "ignored\n".into());
        let md = session.render(None);
        let rows = |start: &str| md.lines().filter(|line| line.starts_with(start)).count();
        assert_eq!(rows("| 1 worker, h2c, 50 × 10 |"), 5 + 3, "{md}");
        assert_eq!(rows("| 1 worker, h2c, 10 × 100 |"), 5 + 3, "{md}");
        // 10 ÷ 15 of HAProxy's CPU; 0.9 of its rate, 1.125 of nginx's; p99s equal.
        for line in [
            "| 1 worker, h2c, 50 × 10 | CPU per request ≤ 0.85 × HAProxy's | 0.667 (per round \
             0.667–0.667) | met |",
            "| 1 worker, h2c, 50 × 10 | requests/s ≥ HAProxy's | 0.900 (per round 0.900–0.900) \
             | **NOT MET** (the median's 95% interval 0.900–0.900) |",
            "| 1 worker, h2c, 10 × 100 | requests/s ≥ nginx's | 1.125 (per round 1.125–1.125) | \
             met |",
            "| 1 worker, h2c, 50 × 10 | herdsman | **900** (900–900) | **2.00** (2.00–2.00) | \
             **10.00** (10.00–10.00) | **2.00** (2.00–2.00) | **8.00** (8.00–8.00) | **8.0** \
             (8.0–8.0) |",
            "<details><summary>nginx over h2c</summary>\n\n```\nhttp2\n```",
        ] {
            assert!(md.contains(line), "{line:?} missing from:\n{md}");
        }
        assert!(!md.contains("ignored"));
        let summary = session.summary();
        assert!(
            summary.contains(
                "1 worker, h2c, 50 × 10   herdsman  900 req/s, p99 2.00 ms, 10.00 CPU-µs/req \
                 (user 2.00, kernel 8.00), RSS 8.0 MiB"
            ),
            "{summary}"
        );
    }
}
