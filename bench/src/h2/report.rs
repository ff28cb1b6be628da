//! What `h2` reports: the targets (herdsman's figure over each peer's, per round, judged by the
//! median's 95% interval), each cell's medians per proxy — the requests' cells, then the gRPC
//! cells in a section of their own, a call counted as a request — every run, the configurations,
//! the results file and its plot (CPU-µs per request by round, a panel per cell).

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
use super::settings::{Settings, Traffic};
use super::settings::{GRPC_LOADS, LOADS};

/// Whom a target compares herdsman with.
#[derive(Debug, Clone, Copy)]
enum Peer {
    Only(ProxyKind),
    /// Of the peers measured, the one whose median over rounds is better in the cell (lower when
    /// the target is at most, higher otherwise); herdsman's runs are paired with its, per round.
    Better,
}

/// One target of the issue: herdsman's `figure` over `peer`'s, at most or at least `bound`.
struct Goal {
    what: &'static str,
    peer: Peer,
    figure: fn(&H2Run) -> f64,
    bound: f64,
    at_most: bool,
}

const GOALS: [Goal; 5] = [
    Goal {
        what: "CPU per request ≤ 0.85 × HAProxy's",
        peer: Peer::Only(ProxyKind::Haproxy),
        figure: H2Run::cpu_us,
        bound: 0.85,
        at_most: true,
    },
    Goal {
        what: "requests/s ≥ HAProxy's",
        peer: Peer::Only(ProxyKind::Haproxy),
        figure: H2Run::requests_per_sec,
        bound: 1.0,
        at_most: false,
    },
    Goal {
        what: "requests/s ≥ nginx's",
        peer: Peer::Only(ProxyKind::Nginx),
        figure: H2Run::requests_per_sec,
        bound: 1.0,
        at_most: false,
    },
    Goal {
        what: "p99 ≤ HAProxy's",
        peer: Peer::Only(ProxyKind::Haproxy),
        figure: H2Run::p99_ms,
        bound: 1.0,
        at_most: true,
    },
    Goal {
        what: "p99 ≤ nginx's",
        peer: Peer::Only(ProxyKind::Nginx),
        figure: H2Run::p99_ms,
        bound: 1.0,
        at_most: true,
    },
];

/// The issue's gRPC target: CPU per call against the better of the peers.
const GRPC_GOALS: [Goal; 1] = [Goal {
    what: "CPU per call ≤ 0.85 × the better peer's",
    peer: Peer::Better,
    figure: H2Run::cpu_us,
    bound: 0.85,
    at_most: true,
}];

/// One figure of each cell's table, per proxy: its heading (in the requests' tables and the gRPC
/// ones), its value, and how it is written.
struct Figure {
    heading: &'static str,
    grpc_heading: &'static str,
    value: fn(&H2Run) -> f64,
    written: fn(f64) -> String,
}

const FIGURES: [Figure; 6] = [
    Figure {
        heading: "requests/s",
        grpc_heading: "calls/s",
        value: H2Run::requests_per_sec,
        written: thousands,
    },
    Figure {
        heading: "p99 ms",
        grpc_heading: "p99 ms",
        value: H2Run::p99_ms,
        written: two_places,
    },
    Figure {
        heading: "CPU-µs/req",
        grpc_heading: "CPU-µs/call",
        value: H2Run::cpu_us,
        written: two_places,
    },
    Figure {
        heading: "user µs",
        grpc_heading: "user µs",
        value: H2Run::user_us,
        written: two_places,
    },
    Figure {
        heading: "kernel µs",
        grpc_heading: "kernel µs",
        value: H2Run::system_us,
        written: two_places,
    },
    Figure {
        heading: "RSS MiB",
        grpc_heading: "RSS MiB",
        value: H2Run::rss_mib,
        written: one_place,
    },
];

/// A part of the results file: the cells of one kind of traffic, their targets and figures.
struct Section {
    /// Whether its cells are gRPC's (else the requests').
    grpc: bool,
    goals: &'static [Goal],
    /// The headings of its targets and figures tables.
    targets_heading: &'static str,
    figures_heading: &'static str,
}

const REQUESTS: Section = Section {
    grpc: false,
    goals: &GOALS,
    targets_heading: "## Targets",
    figures_heading: "## Figures",
};

const GRPC: Section = Section {
    grpc: true,
    goals: &GRPC_GOALS,
    targets_heading: "### gRPC targets",
    figures_heading: "### gRPC figures",
};

impl Section {
    fn holds(&self, cell: &Cell) -> bool {
        (cell.traffic == Traffic::Grpc) == self.grpc
    }

    fn heading(&self, figure: &Figure) -> &'static str {
        if self.grpc {
            figure.grpc_heading
        } else {
            figure.heading
        }
    }
}

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
    /// Each proxy's configuration per traffic, as first started, its scratch directory written
    /// SCRATCH.
    configs: Vec<(ProxyKind, Traffic, String)>,
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

    /// Keeps `text` as `proxy`'s configuration for `traffic`, unless one is kept already.
    pub fn keep_config(&mut self, proxy: ProxyKind, traffic: Traffic, text: String) {
        if !self
            .configs
            .iter()
            .any(|(p, t, _)| (*p, *t) == (proxy, traffic))
        {
            self.configs.push((proxy, traffic, text));
        }
    }

    /// Every cell in the order measured.
    fn cells(&self) -> Vec<Cell> {
        let settings = &self.settings;
        let mut cells = Vec::new();
        for &workers in &settings.workers {
            for traffic in settings.traffics() {
                for load in Settings::loads(traffic, settings.seconds) {
                    cells.push(Cell {
                        workers,
                        traffic,
                        load,
                    });
                }
            }
        }
        cells
    }

    /// The cells of `section`, in the order measured.
    fn cells_of(&self, section: &Section) -> Vec<Cell> {
        self.cells()
            .into_iter()
            .filter(|cell| section.holds(cell))
            .collect()
    }

    /// (round, value) of `proxy`'s runs in `cell`.
    fn side(&self, cell: &Cell, proxy: ProxyKind, figure: fn(&H2Run) -> f64) -> Vec<(u32, f64)> {
        self.runs
            .iter()
            .filter(|run| run.cell.is(cell) && run.proxy == proxy)
            .map(|run| (run.round, figure(run)))
            .collect()
    }

    /// The median over rounds of `proxy`'s `figure` in `cell`; None without runs.
    fn median(&self, cell: &Cell, proxy: ProxyKind, figure: fn(&H2Run) -> f64) -> Option<f64> {
        let values: Vec<f64> = self
            .side(cell, proxy, figure)
            .into_iter()
            .map(|(_, value)| value)
            .collect();
        spread(&values).map(|s| s.median)
    }

    /// The peer `goal` compares herdsman with in `cell`, if it was measured there.
    fn peer(&self, cell: &Cell, goal: &Goal) -> Option<ProxyKind> {
        let measured = |proxy: &ProxyKind| {
            *proxy != ProxyKind::Herdsman && self.median(cell, *proxy, goal.figure).is_some()
        };
        match goal.peer {
            Peer::Only(proxy) => Some(proxy).filter(measured),
            Peer::Better => self
                .settings
                .proxies
                .iter()
                .copied()
                .filter(measured)
                .min_by(|a, b| {
                    let (a, b) = (
                        self.median(cell, *a, goal.figure).unwrap_or(f64::NAN),
                        self.median(cell, *b, goal.figure).unwrap_or(f64::NAN),
                    );
                    if goal.at_most {
                        a.total_cmp(&b)
                    } else {
                        b.total_cmp(&a)
                    }
                }),
        }
    }

    fn write_targets(&self, md: &mut String, section: &Section) {
        let _ = writeln!(md, "{}\n", section.targets_heading);
        if !section.grpc {
            let _ = writeln!(
                md,
                "Each ratio is herdsman's figure over the peer's, taken per round (the two runs \
                 of a round close together) and judged by its median over rounds, with the \
                 rounds' range. When the median misses a bound that its 95% interval (from the \
                 rounds' order statistics) still holds, the run did not tell the two apart; more \
                 rounds (`--rounds`) narrow the interval.\n"
            );
        }
        let _ = writeln!(
            md,
            "| cell | target | herdsman ÷ peer | verdict |\n|---|---|---|---|"
        );
        for cell in self.cells_of(section) {
            for goal in section.goals {
                let Some(peer) = self.peer(&cell, goal) else {
                    // A peer left out by --proxies has no row; one that never ran, "not measured".
                    let asked = match goal.peer {
                        Peer::Only(proxy) => self.has(proxy),
                        Peer::Better => self.settings.proxies.len() > 1,
                    };
                    if asked {
                        self.write_target(md, &cell, goal, goal.what.into(), &[]);
                    }
                    continue;
                };
                let what = match goal.peer {
                    Peer::Better => format!("{} ({})", goal.what, peer.written()),
                    Peer::Only(_) => goal.what.into(),
                };
                let ratio = PairedRatio::of(
                    &self.side(&cell, ProxyKind::Herdsman, goal.figure),
                    &self.side(&cell, peer, goal.figure),
                );
                self.write_target(md, &cell, goal, what, &ratio.rounds);
            }
        }
        md.push('\n');
    }

    /// A row of the targets table: `goal` in `cell`, from the rounds' ratios.
    fn write_target(
        &self,
        md: &mut String,
        cell: &Cell,
        goal: &Goal,
        what: String,
        rounds: &[f64],
    ) {
        let measured = match spread(rounds) {
            None => "–".to_string(),
            Some(s) if s.count == 1 => format!("{:.3}", s.median),
            Some(s) => format!("{:.3} (per round {:.3}–{:.3})", s.median, s.min, s.max),
        };
        let _ = writeln!(
            md,
            "| {} | {what} | {measured} | {} |",
            cell.written(),
            judged(rounds, goal.bound, goal.at_most)
        );
    }

    fn has(&self, proxy: ProxyKind) -> bool {
        self.settings.proxies.contains(&proxy)
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

    fn write_figures(&self, md: &mut String, section: &Section) {
        let _ = write!(md, "{}\n\n", section.figures_heading);
        if !section.grpc {
            md.push_str("Medians over rounds");
            if self.settings.rounds > 1 {
                md.push_str(" with their 95% interval (below 6 rounds, the rounds' whole range)");
            }
            md.push_str(
                ". CPU is the proxy's processes' (every nginx worker and its master, HAProxy's \
                 and herdsman's threads) per answered request, user and kernel apart; RSS is \
                 theirs halfway through the run.\n\n",
            );
        }
        md.push_str("| cell | proxy |");
        for figure in &FIGURES {
            let _ = write!(md, " {} |", section.heading(figure));
        }
        let _ = writeln!(md, "\n|---|---|{}", "---:|".repeat(FIGURES.len()));
        for cell in self.cells_of(section) {
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

    /// The gRPC section: how calls were made and checked, its targets and its figures.
    fn write_grpc(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## gRPC: HTTP/2 to clients and to servers\n\n\
             Unary calls by h2load (one thread, `-d` with a 25-byte message, `content-type: \
             application/grpc`, `te: trailers`, hence POSTs) over h2c to each proxy, with {}, \
             forwarded over h2c to the bench's own gRPC server (`herdsman-bench grpc-server`, \
             the h2 crate on two threads, its own process, whose CPU is not the proxy's), which \
             answers each call with its message echoed in one DATA frame and `grpc-status: 0` \
             in the trailers. herdsman's pool has `protocol = \"h2c\"`; HAProxy's frontend \
             binds with `proto h2` and its server has `proto h2`; nginx listens with `http2` \
             and passes with `grpc_pass` (one server connection per call in flight, kept alive \
             by the upstream's `keepalive`, where herdsman and HAProxy multiplex). Before any \
             call was timed, one call through each proxy came back whole (200, \
             `application/grpc`, the message echoed byte for byte, `grpc-status: 0`); after \
             each run the server's own count of calls answered covered every 2xx h2load \
             counted. A call is a request in the tables: the same rounds, the same figures, \
             judged as above; the better peer is the one with the lower median CPU per call in \
             the cell, and herdsman's runs are paired with its by round.\n",
            GRPC_LOADS
                .map(|(clients, streams)| format!(
                    "{clients} connections × {streams} calls in flight"
                ))
                .join(" and "),
        );
        self.write_targets(md, &GRPC);
        self.write_figures(md, &GRPC);
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
        for (proxy, traffic, text) in &self.configs {
            let what = match traffic {
                Traffic::Grpc => "for gRPC (h2c to clients and to the server)".to_string(),
                Traffic::Requests(transport) => format!("over {transport}"),
            };
            let _ = writeln!(
                md,
                "<details><summary>{} {what}</summary>\n\n```\n{}```\n\n</details>\n",
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
                let median = |figure: fn(&H2Run) -> f64| self.median(&cell, proxy, figure);
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
                let (rate_unit, per) = cell.units();
                let _ = writeln!(
                    text,
                    "{:<24} {:<9} {} {rate_unit}, p99 {p99:.2} ms, {cpu:.2} CPU-µs/{per} (user \
                     {user:.2}, kernel {kernel:.2}), RSS {rss:.1} MiB",
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
             `h2c = true` on the cleartext listener (a TLS listener offers h2 by default) and, \
             for gRPC, `protocol = \"h2c\"` on the pool. p50 and p99 are by nearest rank over \
             every answered request of the run (h2load's `--log-file`).{}\n",
            LOADS
                .map(|(clients, streams)| format!("{clients} × {streams}"))
                .join(" and "),
            settings.seconds,
            settings.rounds,
            if settings.grpc {
                " gRPC unary calls, in the same rounds, are in a section of their own."
            } else {
                ""
            }
        );
        self.facts.write_markdown(&mut md);
        let disturbed = self.disturbed();
        let trouble = Trouble::new(&disturbed, self.runs.len(), &self.failure);
        trouble.write_markdown(&mut md);
        self.write_targets(&mut md, &REQUESTS);
        self.write_figures(&mut md, &REQUESTS);
        write_plot_link(
            &mut md,
            plot,
            "CPU-µs per request (or call) by round, a panel per cell",
        );
        if settings.grpc {
            self.write_grpc(&mut md);
        }
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
    use crate::h2::settings::Transport;
    use crate::kit::h2load::{StreamLoad, StreamReport};
    use crate::kit::procstat::CpuTime;
    use std::path::PathBuf;
    use std::time::Duration;

    fn settings() -> Settings {
        Settings {
            workers: vec![1],
            proxies: vec![ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx],
            transports: vec![Transport::H2c],
            grpc: true,
            seconds: 2,
            rounds: 2,
            warm_up: 0,
            out: PathBuf::from("/tmp/h2.md"),
        }
    }

    /// A made-up run of GETs over h2c for the report's shape: `cpu_ms` of CPU over 1,000 answers.
    fn run(round: u32, proxy: ProxyKind, streams: u32, cpu_ms: u64, rate: f64) -> H2Run {
        traffic_run(
            Traffic::Requests(Transport::H2c),
            round,
            proxy,
            streams,
            cpu_ms,
            rate,
        )
    }

    fn traffic_run(
        traffic: Traffic,
        round: u32,
        proxy: ProxyKind,
        streams: u32,
        cpu_ms: u64,
        rate: f64,
    ) -> H2Run {
        H2Run {
            round,
            cell: Cell {
                workers: 1,
                traffic,
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
            // gRPC: nginx is the better peer (12 ms of CPU to HAProxy's 15).
            for (proxy, cpu_ms) in [
                (ProxyKind::Herdsman, 10),
                (ProxyKind::Haproxy, 15),
                (ProxyKind::Nginx, 12),
            ] {
                let grpc = traffic_run(Traffic::Grpc, round, proxy, 10, cpu_ms, 700.0);
                session.runs.push(grpc);
            }
        }
        let h2c = Traffic::Requests(Transport::H2c);
        session.keep_config(ProxyKind::Nginx, h2c, "http2\n".into());
        session.keep_config(ProxyKind::Nginx, h2c, "ignored\n".into());
        session.keep_config(ProxyKind::Nginx, Traffic::Grpc, "grpc_pass\n".into());
        let md = session.render(None);
        let rows = |start: &str| md.lines().filter(|line| line.starts_with(start)).count();
        assert_eq!(rows("| 1 worker, h2c, 50 × 10 |"), 5 + 3, "{md}");
        assert_eq!(rows("| 1 worker, h2c, 10 × 100 |"), 5 + 3, "{md}");
        // One target, a figures row per proxy, a run per proxy and round.
        assert_eq!(rows("| 1 worker, gRPC, 50 × 10 |"), 1 + 3, "{md}");
        assert_eq!(rows("| 1 | 1 worker, gRPC, 50 × 10 |"), 3, "{md}");
        // The gRPC tables are in their own section, after the requests' ones.
        let grpc_at = md.find("## gRPC").unwrap();
        assert!(md.find("## Figures").unwrap() < grpc_at);
        assert!(md[grpc_at..].contains("| cell | proxy | calls/s | p99 ms | CPU-µs/call |"));
        assert!(!md[..grpc_at].contains("gRPC, 50 × 10"));
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
            "| 1 worker, gRPC, 50 × 10 | CPU per call ≤ 0.85 × the better peer's (nginx) | 0.833 \
             (per round 0.833–0.833) | met |",
            "| 1 worker, gRPC, 50 × 10 | nginx | **700** (700–700) | **2.00** (2.00–2.00) | \
             **12.00** (12.00–12.00) |",
            "<details><summary>nginx for gRPC (h2c to clients and to the server)</summary>",
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
        assert!(
            summary.contains(
                "1 worker, gRPC, 50 × 10  herdsman  700 calls/s, p99 2.00 ms, 10.00 CPU-µs/call"
            ),
            "{summary}"
        );
    }

    #[test]
    fn the_better_peer_is_the_one_measured_and_without_runs_the_target_is_not_measured() {
        let only_haproxy = Settings {
            proxies: vec![ProxyKind::Herdsman, ProxyKind::Haproxy],
            ..settings()
        };
        let mut session = Session::new(RunFacts::sample("h2"), only_haproxy);
        let md = session.render(None);
        assert!(
            md.contains(
                "| 1 worker, gRPC, 50 × 10 | CPU per call ≤ 0.85 × the better peer's | – | not \
                 measured |"
            ),
            "{md}"
        );
        for proxy in [ProxyKind::Herdsman, ProxyKind::Haproxy] {
            session
                .runs
                .push(traffic_run(Traffic::Grpc, 1, proxy, 10, 10, 700.0));
        }
        let md = session.render(None);
        assert!(
            md.contains(
                "| CPU per call ≤ 0.85 × the better peer's (HAProxy) | 1.000 | **NOT MET**"
            ),
            "{md}"
        );
    }
}
