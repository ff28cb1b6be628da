//! What `tls-load` measured, and what it prints and writes: each run of the two measurements, the
//! targets judged on paired rounds, the silent connections (the others' requests/s and latency
//! without and with them, herdsman's timeouts and the holder's re-opening, memory per silent
//! connection), the storm (per-worker handshakes and CPU and their spread, the established
//! connections' latency without and with it), every run, and a plot by round.

use std::fmt::Write as _;
use std::path::Path;

use super::settings::Settings;
use super::storm::PerWorker;
use crate::kit::cpu::{self, CpuSplit};
use crate::kit::markdown::{spread_cell, thousands, write_details_table};
use crate::kit::paired::{judged, PairedRatio};
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::procstat::CpuTime;
use crate::kit::results::{write_plot_link, Results, RunFacts, Trouble};
use crate::kit::slow_holders::Tally;
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::WrkReport;

/// The issue's bounds: requests/s kept with the silent connections (the slowloris target), and
/// the coefficient of variation across workers under the storm.
const SILENT_KEPT_AT_LEAST: f64 = 0.9;
const STORM_CV_AT_MOST: f64 = 0.05;

/// One wrk run of the silent measurement.
#[derive(Debug, Clone)]
pub struct SilentRun {
    pub round: u32,
    /// herdsman's CPU over the wrk run.
    pub cpu: CpuTime,
    pub wrk: WrkReport,
    /// Where the machine's CPU went over the wrk run (`slow_clients`: the holder).
    pub machine: CpuSplit,
    /// With the silent connections: what they saw and cost; None without.
    pub side: Option<SilentSide>,
}

/// The silent connections of one run "with".
#[derive(Debug, Clone)]
pub struct SilentSide {
    /// What the holder saw, from its first connect to being told to finish.
    pub tally: Tally,
    /// Handshakes herdsman counted as timed out (its `/metrics`) over the same span, read just
    /// before the holder was told to finish.
    pub timeouts: u64,
    /// That span, seconds.
    pub held_seconds: f64,
    /// Handshakes herdsman counted as timed out over the wrk run alone.
    pub timeouts_during_wrk: u64,
    /// herdsman's handshakes under way just before wrk started: the silent connections it held.
    pub in_progress: u64,
    /// The same just after wrk ended.
    pub in_progress_after: u64,
    /// Connections established on the TLS port then (the kernel's count, /proc/net/tcp).
    pub established: usize,
    /// herdsman's resident memory then, KiB.
    pub rss_kib: u64,
}

/// One wrk run of the storm measurement.
#[derive(Debug, Clone)]
pub struct StormRun {
    pub round: u32,
    pub cpu: CpuTime,
    pub wrk: WrkReport,
    /// Where the machine's CPU went over the wrk run (`slow_clients`: the storm's holder).
    pub machine: CpuSplit,
    /// What each worker did over the wrk run.
    pub workers: PerWorker,
    /// With the storm: what its clients saw over the whole storm, and its seconds.
    pub storm: Option<(Tally, f64)>,
}

impl SilentRun {
    fn with(&self) -> bool {
        self.side.is_some()
    }
}

impl StormRun {
    fn with(&self) -> bool {
        self.storm.is_some()
    }
}

/// A figure of one wrk run, from its report and herdsman's CPU over it.
type WrkFigure<'a> = &'a dyn Fn(&WrkReport, &CpuTime) -> f64;

/// A row of a table of wrk's figures: its title, how a value is written, and the figure.
type WrkRow<'a> = (&'a str, fn(f64) -> String, WrkFigure<'a>);

/// CPU-µs of `cpu` per request of `wrk`.
fn us_per_request(cpu: std::time::Duration, wrk: &WrkReport) -> f64 {
    cpu.as_secs_f64() * 1e6 / wrk.requests.max(1) as f64
}

fn errors(wrk: &WrkReport) -> u64 {
    wrk.socket_errors + wrk.bad_status
}

/// Everything one `tls-load` session measured.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    pub failure: Option<String>,
    /// herdsman's configuration as run, the scratch directory written SCRATCH.
    pub config: String,
    /// herdsman's resident memory after the warm-up, before any silent connection, KiB.
    pub rss_baseline_kib: u64,
    pub silent: Vec<SilentRun>,
    pub storm: Vec<StormRun>,
}

/// (round, value) of the runs `pick` keeps.
fn side<R>(
    runs: &[R],
    pick: impl Fn(&R) -> bool,
    round: impl Fn(&R) -> u32,
    value: impl Fn(&R) -> f64,
) -> Vec<(u32, f64)> {
    runs.iter()
        .filter(|r| pick(r))
        .map(|r| (round(r), value(r)))
        .collect()
}

fn values(side: &[(u32, f64)]) -> Vec<f64> {
    side.iter().map(|&(_, v)| v).collect()
}

fn spread_of(side: &[(u32, f64)]) -> Option<Spread> {
    spread(&values(side))
}

/// A cell of a figure's median over rounds and its range, by `format`.
fn cell(side: &[(u32, f64)], format: fn(f64) -> String) -> String {
    spread_cell(spread_of(side), format)
}

fn whole(value: f64) -> String {
    thousands(value)
}

fn two(value: f64) -> String {
    format!("{value:.2}")
}

/// A median alone, two places; "–" when none ran.
fn median_text(spread: Option<Spread>) -> String {
    spread.map_or("–".into(), |s| two(s.median))
}

fn percent(value: f64) -> String {
    format!("{:.1}%", value * 100.0)
}

impl Session {
    pub fn new(facts: RunFacts, settings: Settings) -> Session {
        Session {
            facts,
            settings,
            failure: None,
            config: String::new(),
            rss_baseline_kib: 0,
            silent: Vec::new(),
            storm: Vec::new(),
        }
    }

    fn silent_side(&self, with: bool, value: impl Fn(&SilentRun) -> f64) -> Vec<(u32, f64)> {
        side(&self.silent, |r| r.with() == with, |r| r.round, value)
    }

    fn storm_side(&self, with: bool, value: impl Fn(&StormRun) -> f64) -> Vec<(u32, f64)> {
        side(&self.storm, |r| r.with() == with, |r| r.round, value)
    }

    /// The silent connections' sides, in the order run.
    fn silent_sides(&self) -> impl Iterator<Item = &SilentSide> {
        self.silent.iter().filter_map(|r| r.side.as_ref())
    }

    /// Resident bytes per silent connection in one run: (RSS with them − RSS after the warm-up)
    /// ÷ silent connections.
    fn bytes_per_silent(&self, side: &SilentSide) -> f64 {
        (side.rss_kib as f64 - self.rss_baseline_kib as f64) * 1024.0
            / f64::from(self.settings.silent.max(1))
    }

    fn silent_kept(&self) -> PairedRatio {
        let rps = |with| self.silent_side(with, |r| r.wrk.requests_per_sec);
        PairedRatio::of(&rps(true), &rps(false))
    }

    /// The coefficient of variation across workers of each storm run "with", by round.
    fn storm_cv(&self, value: fn(&PerWorker) -> f64) -> Vec<(u32, f64)> {
        self.storm_side(true, |r| value(&r.workers))
    }

    fn write_intro(&self, md: &mut String) {
        let s = &self.settings;
        let _ = writeln!(
            md,
            "# TLS under bad load: silent connections and a handshake storm (herdsman)\n\n\
             herdsman (release build) with {} workers, `intake = \"balanced\"`, one TLS listener \
             serving a self-signed ECDSA P-256 certificate for `bench.test` (TLS 1.2 and 1.3, ALPN \
             http/1.1), `[timeouts] tls_handshake` {} s, in front of this program's fast backend, \
             its admin API answering `/metrics` for its own counts. Two measurements, each in {} \
             paired round(s) of {} s wrk runs: once without and once with the disturbance, back \
             to back, without first in odd rounds and with first in even ones; a ratio is taken \
             per round and judged by its median over rounds. Clients share the machine's {} CPUs \
             with herdsman.\n",
            s.workers,
            s.handshake_timeout(),
            s.rounds,
            s.seconds,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        if s.short {
            let _ = writeln!(
                md,
                "**Short run** (`--short`): one round of {} s runs on a shared, busy machine, to \
                 show that every figure is produced; these are not the issue's figures.\n",
                s.seconds
            );
        }
        if let Some(seconds) = s.tls_handshake {
            let _ = writeln!(
                md,
                "**`tls_handshake` lowered to {seconds} s** (herdsman's default is 10 s), so that \
                 herdsman times the silent connections out, and the holder opens them again, \
                 within the run.\n"
            );
        }
    }

    fn write_targets(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Targets\n\nJudged by the median over rounds; when the median misses a bound that \
             its 95% interval (from the rounds' order statistics) still holds, the run did not \
             tell them apart, and more rounds (`--rounds`) narrow the interval.\n\n\
             | target | measured: median (range) | verdict |\n|---|---|---|"
        );
        let kept = self.silent_kept();
        let _ = writeln!(
            md,
            "| others' requests/s with {} silent TLS connections ÷ without ≥ {SILENT_KEPT_AT_LEAST} | {} | {} |",
            thousands(f64::from(self.settings.silent)),
            spread_cell(kept.per_round(), three_places),
            kept.judged(SILENT_KEPT_AT_LEAST, false)
        );
        for (what, figure) in [
            (
                "handshakes",
                PerWorker::handshakes_cv as fn(&PerWorker) -> f64,
            ),
            ("CPU time", PerWorker::cpu_cv),
        ] {
            let cvs = self.storm_cv(figure);
            let _ = writeln!(
                md,
                "| under the handshake storm, coefficient of variation of the workers' {what} ≤ {STORM_CV_AT_MOST} | {} | {} |",
                cell(&cvs, three_places),
                judged(&values(&cvs), STORM_CV_AT_MOST, true)
            );
        }
        md.push('\n');
    }

    /// A table of wrk's figures without and with, and with ÷ without.
    fn write_wrk_table(
        &self,
        md: &mut String,
        with_label: &str,
        side: impl Fn(bool, WrkFigure) -> Vec<(u32, f64)>,
    ) {
        let _ = writeln!(
            md,
            "| figure | without | {with_label} | with ÷ without |\n|---|---:|---:|---:|"
        );
        let rows: [WrkRow; 6] = [
            ("requests/s", whole, &|w, _| w.requests_per_sec),
            ("p50 latency, µs", whole, &|w, _| w.p50_us),
            ("p99 latency, µs", whole, &|w, _| w.p99_us),
            ("max latency, µs", whole, &|w, _| w.max_us),
            ("herdsman user CPU-µs per request", two, &|w, c| {
                us_per_request(c.user, w)
            }),
            ("herdsman system CPU-µs per request", two, &|w, c| {
                us_per_request(c.system, w)
            }),
        ];
        for (title, format, value) in rows {
            let without = side(false, value);
            let with = side(true, value);
            let _ = writeln!(
                md,
                "| {title} | {} | {} | {} |",
                cell(&without, format),
                cell(&with, format),
                PairedRatio::of(&with, &without).text()
            );
        }
        md.push('\n');
    }

    fn write_silent(&self, md: &mut String) {
        let s = &self.settings;
        let load = s.load(s.connections);
        let _ = writeln!(
            md,
            "## Silent TLS connections\n\nThe other clients: `wrk {}`, keep-alive over TLS. \
             With: a holder process (`herdsman-bench silent-holder`) opens {} TCP connections \
             to the TLS port and sends nothing on them, so no ClientHello ever comes; herdsman \
             closes each when `tls_handshake` ({} s) passes, and the holder connects again at \
             once. The first connects are spread over {} s, so that the timeouts, and the \
             connects again, come evenly; wrk starts {} s after every one has connected once. \
             Median over rounds (range).\n",
            load.args_for("https://127.0.0.1:PORT/").join(" "),
            thousands(f64::from(s.silent)),
            s.handshake_timeout(),
            s.handshake_timeout(),
            super::SETTLE_WITH.as_secs_f64()
        );
        self.write_wrk_table(
            md,
            &format!("with {} silent", thousands(f64::from(s.silent))),
            |with, value| self.silent_side(with, |r| value(&r.wrk, &r.cpu)),
        );
        let runs: Vec<(&SilentRun, &SilentSide)> = self
            .silent
            .iter()
            .filter_map(|r| Some((r, r.side.as_ref()?)))
            .collect();
        let median_of = |value: &dyn Fn(&SilentRun, &SilentSide) -> f64| {
            spread(&runs.iter().map(|(r, s)| value(r, s)).collect::<Vec<_>>())
        };
        let fmt = |spread: Option<Spread>| spread_cell(spread, whole);
        let sum =
            |value: &dyn Fn(&SilentSide) -> u64| runs.iter().map(|(_, s)| value(s)).sum::<u64>();
        let _ = writeln!(
            md,
            "### Were they held, timed out and opened again?\n\n\
             herdsman's own counts are from its `/metrics`: \
             `herdsman_worker_tls_handshakes_in_progress` (handshakes under way) and \
             `herdsman_worker_tls_handshake_failures_total{{reason=\"timeout\"}}`. Held for the \
             whole run, {} silent connections timed out every {} s make {} timeouts a second.\n\n\
             | figure | per run with them: median (range) |\n|---|---:|\n\
             | herdsman's handshakes under way when wrk started | {} |\n\
             | the same when wrk ended | {} |\n\
             | connections established on the TLS port when wrk started, wrk's not yet among them (/proc/net/tcp) | {} |\n\
             | timeouts herdsman counted per second of the wrk run | {} |\n\
             | timeouts herdsman counted, from the first connect to the holder's end | {} |\n\
             | connections the holder saw closed by herdsman over the same span | {} |\n\
             | that span, seconds | {} |\n\n\
             Over every run with them: herdsman timed out {} handshakes and the holder saw {} of \
             its connections closed; the holder opened {} connections, {} of them again after a \
             close; {} connects failed; {} were open when it was told to finish ({} per run). The \
             first close it saw: {}.\n",
            thousands(f64::from(s.silent)),
            s.handshake_timeout(),
            thousands(f64::from(s.silent) / f64::from(s.handshake_timeout())),
            fmt(median_of(&|_, s| s.in_progress as f64)),
            fmt(median_of(&|_, s| s.in_progress_after as f64)),
            fmt(median_of(&|_, s| s.established as f64)),
            fmt(median_of(&|r, s| s.timeouts_during_wrk as f64 / r.wrk.seconds.max(1e-9))),
            fmt(median_of(&|_, s| s.timeouts as f64)),
            fmt(median_of(&|_, s| f64::from(s.tally.ended))),
            spread_cell(median_of(&|_, s| s.held_seconds), |v| format!("{v:.1}")),
            thousands(sum(&|s| s.timeouts) as f64),
            thousands(sum(&|s| u64::from(s.tally.ended)) as f64),
            thousands(sum(&|s| u64::from(s.tally.opened)) as f64),
            thousands(
                sum(&|s| u64::from(s.tally.opened))
                    .saturating_sub(u64::from(s.silent) * runs.len() as u64) as f64
            ),
            thousands(sum(&|s| u64::from(s.tally.failed)) as f64),
            thousands(sum(&|s| u64::from(s.tally.held)) as f64),
            thousands(f64::from(s.silent)),
            runs.iter()
                .find_map(|(_, s)| s.tally.first_end.clone())
                .unwrap_or_else(|| "none".into())
        );
        let _ = writeln!(
            md,
            "### Memory\n\nherdsman's resident memory (VmRSS) with the silent connections held, \
             when wrk started, less its resident memory after the warm-up ({} KiB, before any \
             silent connection), ÷ {}: **{}** bytes per silent connection, median (range) over \
             rounds.\n",
            thousands(self.rss_baseline_kib as f64),
            thousands(f64::from(s.silent)),
            spread_cell(median_of(&|_, side| self.bytes_per_silent(side)), whole)
        );
    }

    fn write_storm(&self, md: &mut String) {
        let s = &self.settings;
        let load = s.load(s.storm_connections);
        let _ = writeln!(
            md,
            "## Handshake storm\n\nThe established connections: `wrk {}`, keep-alive over TLS \
             (their {} handshakes at wrk's start are all they make). With: beside them, on the \
             same listener, {} clients in one holder process (`herdsman-bench tls-load-holder`, \
             rustls on one thread) that each connect, make a full TLS handshake (no session \
             offered), shut their side, wait for herdsman to close, and connect again at once, \
             from {} s before wrk starts until it ends. The clients pin herdsman's certificate \
             but do not check its handshake signature: checking an ECDSA signature costs more \
             than making it, and the storm is to load herdsman rather than itself (h2load \
             batches, whose clients check it and make a request, took about 780 µs of client \
             CPU per handshake in a first short run here, about twice what herdsman spends). \
             Per worker over each wrk run: the handshakes it completed (herdsman's own \
             count, `herdsman_worker_tls_handshakes_total`) and its thread's CPU time \
             (`herdsman-wN` in /proc/PID/task), with and without the storm; every run's table \
             below adds each worker's open client connections halfway through (`active` in \
             `/api/workers`), how the established ones were spread. Median (range) over \
             rounds.\n",
            load.args_for("https://127.0.0.1:PORT/").join(" "),
            s.storm_connections,
            s.storm_clients,
            super::STORM_LEAD.as_secs_f64()
        );
        let _ = writeln!(
            md,
            "| worker | handshakes with the storm | per second | CPU-s with the storm | user / sys, median | CPU-s without |\n|---|---:|---:|---:|---:|---:|"
        );
        for worker in 0..s.workers as usize {
            let of = |value: &dyn Fn(&StormRun) -> Option<f64>, with: bool| {
                spread(
                    &self
                        .storm
                        .iter()
                        .filter(|r| r.with() == with)
                        .filter_map(value)
                        .collect::<Vec<_>>(),
                )
            };
            let handshakes = |r: &StormRun| r.workers.handshakes.get(worker).map(|&h| h as f64);
            let cpu = |r: &StormRun, part: fn(&CpuTime) -> std::time::Duration| {
                r.workers.cpu.get(worker).map(|c| part(c).as_secs_f64())
            };
            let _ = writeln!(
                md,
                "| {worker} | {} | {} | {} | {} / {} | {} |",
                spread_cell(of(&handshakes, true), whole),
                spread_cell(
                    of(&|r| Some(handshakes(r)? / r.wrk.seconds.max(1e-9)), true),
                    whole
                ),
                spread_cell(of(&|r| cpu(r, |c| c.total()), true), two),
                median_text(of(&|r| cpu(r, |c| c.user), true)),
                median_text(of(&|r| cpu(r, |c| c.system), true)),
                spread_cell(of(&|r| cpu(r, |c| c.total()), false), two),
            );
        }
        let hs_cv = self.storm_cv(PerWorker::handshakes_cv);
        let cpu_cv = self.storm_cv(PerWorker::cpu_cv);
        let without_cpu_cv = self.storm_side(false, |r| r.workers.cpu_cv());
        let storms: Vec<&(Tally, f64)> =
            self.storm.iter().filter_map(|r| r.storm.as_ref()).collect();
        let sum = |value: fn(&Tally) -> u32| storms.iter().map(|(t, _)| value(t)).sum::<u32>();
        let _ = writeln!(
            md,
            "\nCoefficient of variation across workers (population standard deviation ÷ mean) \
             with the storm: handshakes **{}**, CPU time **{}**; CPU time without it {}. The \
             established connections' requests (the storm's clients make none) with the storm: \
             {}, without it {}; `balanced` counts connections, not their requests, so a worker \
             that was given more of wrk's connections as they opened beside the storm's takes \
             fewer of the storm's handshakes for as long as they last. The \
             storm's clients, over the whole storm: {} handshakes per second, median (range) \
             over rounds, for {} µs of the holder's CPU each; {} handshakes completed in all, {} ended otherwise, {} connects \
             failed. The first that ended: {}.\n",
            cell(&hs_cv, percent),
            cell(&cpu_cv, percent),
            cell(&without_cpu_cv, percent),
            cell(&self.storm_cv(PerWorker::requests_cv), percent),
            cell(
                &self.storm_side(false, |r| r.workers.requests_cv()),
                percent
            ),
            spread_cell(
                spread(
                    &storms
                        .iter()
                        .map(|(t, seconds)| f64::from(t.completed) / seconds.max(1e-9))
                        .collect::<Vec<_>>()
                ),
                whole
            ),
            cell(
                &self.storm_side(true, |r| {
                    let (tally, seconds) = r.storm.as_ref().map_or((0, 1.0), |(t, s)| (t.completed, *s));
                    r.machine.slow_clients * 1e6 / (f64::from(tally) / seconds.max(1e-9)).max(1e-9)
                }),
                whole
            ),
            thousands(f64::from(sum(|t| t.completed))),
            thousands(f64::from(sum(|t| t.ended))),
            thousands(f64::from(sum(|t| t.failed))),
            storms
                .iter()
                .find_map(|(t, _)| t.first_end.clone())
                .unwrap_or_else(|| "none".into())
        );
        let _ = writeln!(md, "### The established connections beside it\n");
        self.write_wrk_table(md, "with the storm", |with, value| {
            self.storm_side(with, |r| value(&r.wrk, &r.cpu))
        });
    }

    fn write_runs(&self, md: &mut String) {
        let _ = writeln!(md, "## Configuration\n\n```toml\n{}```\n", self.config);
        let rows = self.silent.iter().map(|r| {
            let side = r.side.as_ref();
            let or_dash = |value: Option<String>| value.unwrap_or_else(|| "–".into());
            format!(
                "{} {} | {} | {} | {} | {} | {} |",
                wrk_cells(r.round, r.with(), &r.wrk),
                or_dash(side.map(|s| format!("{} / {}", s.in_progress, s.in_progress_after))),
                or_dash(side.map(|s| format!("{} / {}", s.timeouts, s.timeouts_during_wrk))),
                or_dash(side.map(|s| s.tally.ended.to_string())),
                or_dash(side.map(|s| s.tally.opened.to_string())),
                or_dash(side.map(|s| s.tally.held.to_string())),
                or_dash(side.map(|s| s.rss_kib.to_string())),
            )
        });
        write_details_table(
            md,
            "Every silent run",
            "| round | silent | req/s | p50 µs | p99 µs | errors | under way: wrk's start / end | \
             timeouts: all / in wrk's run | closed seen | opened | held at end | RSS KiB |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
        let rows = self.storm.iter().map(|r| {
            let list = |values: Vec<String>| values.join(" / ");
            format!(
                "{} {} | {} | {} | {} | {} | {} |",
                wrk_cells(r.round, r.with(), &r.wrk),
                list(r.workers.handshakes.iter().map(u64::to_string).collect()),
                list(r.workers.requests.iter().map(u64::to_string).collect()),
                list(
                    r.workers
                        .cpu
                        .iter()
                        .map(|c| format!("{:.2}", c.total().as_secs_f64()))
                        .collect()
                ),
                list(r.workers.open_midway.iter().map(u64::to_string).collect()),
                r.storm
                    .as_ref()
                    .map_or("–".into(), |(t, _)| t.completed.to_string()),
                r.storm
                    .as_ref()
                    .map_or("–".into(), |(t, _)| (t.ended + t.failed).to_string()),
            )
        });
        write_details_table(
            md,
            "Every storm run",
            "| round | storm | req/s | p50 µs | p99 µs | errors | handshakes per worker | requests \
             per worker | CPU-s per worker | open connections per worker halfway | storm's \
             handshakes | storm's failures |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
    }

    /// "silent round 2 with (0.45 CPU)", for every run that other processes disturbed.
    fn disturbed(&self) -> Vec<String> {
        let mut named = cpu::disturbed(
            &self.silent,
            |r| r.machine.other,
            |r| format!("silent round {} {}", r.round, with_word(r.with())),
        );
        named.extend(cpu::disturbed(
            &self.storm,
            |r| r.machine.other,
            |r| format!("storm round {} {}", r.round, with_word(r.with())),
        ));
        named
    }

    /// Medians, without and with, of where the CPU went in each measurement.
    fn write_cpu(&self, md: &mut String) {
        let silent: Vec<(bool, CpuSplit)> =
            self.silent.iter().map(|r| (r.with(), r.machine)).collect();
        let storm: Vec<(bool, CpuSplit)> =
            self.storm.iter().map(|r| (r.with(), r.machine)).collect();
        for (what, holder, runs) in [
            ("the silent measurement's wrk runs", "silent holder", silent),
            ("the storm measurement's wrk runs", "storm holder", storm),
        ] {
            let rows = [(false, "without"), (true, "with")].map(|(with, label)| {
                let splits = runs.iter().filter(|(w, _)| *w == with);
                (label, splits.map(|&(_, split)| split).collect())
            });
            cpu::write_split_table(md, what, ["wrk", holder], &rows);
        }
    }

    /// wrk errors over every run of both measurements.
    fn wrk_errors(&self) -> u64 {
        self.silent.iter().map(|r| errors(&r.wrk)).sum::<u64>()
            + self.storm.iter().map(|r| errors(&r.wrk)).sum::<u64>()
    }
}

fn three_places(value: f64) -> String {
    format!("{value:.3}")
}

/// "without" or "with" the disturbance.
pub fn with_word(with: bool) -> &'static str {
    if with {
        "with"
    } else {
        "without"
    }
}

/// The first cells of a row of every run: round, without or with, and what wrk saw.
fn wrk_cells(round: u32, with: bool, wrk: &WrkReport) -> String {
    format!(
        "| {round} | {} | {} | {:.0} | {:.0} | {} |",
        with_word(with),
        thousands(wrk.requests_per_sec),
        wrk.p50_us,
        wrk.p99_us,
        errors(wrk)
    )
}

/// The progress line after a silent run.
pub fn silent_progress(run: &SilentRun) -> String {
    let mut line = format!(
        "{:<8} {:.0} req/s, p99 {:.0} µs",
        with_word(run.with()),
        run.wrk.requests_per_sec,
        run.wrk.p99_us
    );
    if let Some(side) = &run.side {
        let _ = write!(
            line,
            "; {} under way, {} timeouts, {} opened",
            side.in_progress, side.timeouts, side.tally.opened
        );
    }
    line
}

/// The progress line after a storm run.
pub fn storm_progress(run: &StormRun) -> String {
    format!(
        "{:<8} {:.0} req/s, p99 {:.0} µs; handshakes per worker {:?}, CV {:.1}% (CPU {:.1}%, \
         requests {:?})",
        with_word(run.with()),
        run.wrk.requests_per_sec,
        run.wrk.p99_us,
        run.workers.handshakes,
        run.workers.handshakes_cv() * 100.0,
        run.workers.cpu_cv() * 100.0,
        run.workers.requests
    )
}

/// A panel of figures by round, one line per (name, points).
fn panel(title: &str, y_label: &str, lines: Vec<(String, Vec<(u32, f64)>)>) -> LineChart {
    LineChart {
        title: title.into(),
        x_label: "round".into(),
        y_label: y_label.into(),
        series: lines
            .into_iter()
            .map(|(name, points)| Series {
                name,
                points: points
                    .into_iter()
                    .map(|(round, v)| (f64::from(round), v))
                    .collect(),
            })
            .collect(),
        log_y: false,
    }
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.silent.is_empty() && self.storm.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let s = &self.settings;
        let median =
            |side: Vec<(u32, f64)>| spread_of(&side).map_or("–".into(), |s| whole(s.median));
        let mut text = format!(
            "tls-load: medians over {} round(s) of {} s, herdsman with {} workers\n",
            s.rounds, s.seconds, s.workers
        );
        let _ = writeln!(
            text,
            "silent: without {} req/s, with {} silent {} req/s; with ÷ without requests/s: {} \
             (target ≥ 90%: {})",
            median(self.silent_side(false, |r| r.wrk.requests_per_sec)),
            s.silent,
            median(self.silent_side(true, |r| r.wrk.requests_per_sec)),
            self.silent_kept().text(),
            self.silent_kept().judged(SILENT_KEPT_AT_LEAST, false)
        );
        let sides: Vec<&SilentSide> = self.silent_sides().collect();
        let _ = writeln!(
            text,
            "silent: {} under way when wrk started; {} timeouts counted by herdsman, {} closes seen \
             and {} connections opened by the holder; {} bytes per silent connection",
            median(self.silent_side(true, |r| r.side.as_ref().map_or(0.0, |s| s.in_progress as f64))),
            sides.iter().map(|s| s.timeouts).sum::<u64>(),
            sides.iter().map(|s| s.tally.ended).sum::<u32>(),
            sides.iter().map(|s| s.tally.opened).sum::<u32>(),
            median(self.silent_side(true, |r| r.side.as_ref().map_or(0.0, |s| self.bytes_per_silent(s)))),
        );
        let hs = self.storm_cv(PerWorker::handshakes_cv);
        let cpu = self.storm_cv(PerWorker::cpu_cv);
        let _ = writeln!(
            text,
            "storm: handshakes per worker CV {} ({}), CPU CV {} ({}); established p99 without {} \
             µs, with {} µs; requests/s with ÷ without {}",
            cell(&hs, percent),
            judged(&values(&hs), STORM_CV_AT_MOST, true),
            cell(&cpu, percent),
            judged(&values(&cpu), STORM_CV_AT_MOST, true),
            median(self.storm_side(false, |r| r.wrk.p99_us)),
            median(self.storm_side(true, |r| r.wrk.p99_us)),
            PairedRatio::of(
                &self.storm_side(true, |r| r.wrk.requests_per_sec),
                &self.storm_side(false, |r| r.wrk.requests_per_sec)
            )
            .text()
        );
        let _ = writeln!(text, "wrk errors over all runs: {}", self.wrk_errors());
        Trouble::new(
            &self.disturbed(),
            self.silent.len() + self.storm.len(),
            &self.failure,
        )
        .write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let mut md = String::new();
        self.write_intro(&mut md);
        self.facts.write_markdown(&mut md);
        Trouble::new(
            &self.disturbed(),
            self.silent.len() + self.storm.len(),
            &self.failure,
        )
        .write_markdown(&mut md);
        self.write_targets(&mut md);
        self.write_silent(&mut md);
        self.write_storm(&mut md);
        self.write_cpu(&mut md);
        let _ = writeln!(
            md,
            "wrk errors over all runs (socket errors + status ≥ 400): {}.\n",
            self.wrk_errors()
        );
        write_plot_link(&mut md, plot, "both measurements by round");
        self.write_runs(&mut md);
        md
    }

    /// Both measurements by round: the others' requests/s without and with the silent
    /// connections, the established connections' p99 without and with the storm, each worker's
    /// handshakes under the storm, and the coefficients of variation.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let both = |name: &str, side: &dyn Fn(bool) -> Vec<(u32, f64)>| {
            vec![
                (format!("without {name}"), side(false)),
                (format!("with {name}"), side(true)),
            ]
        };
        let mut charts = vec![
            panel(
                "Others' requests/s, without and with the silent TLS connections",
                "requests/s",
                both("silent connections", &|with| {
                    self.silent_side(with, |r| r.wrk.requests_per_sec)
                }),
            ),
            panel(
                "Established connections' p99, without and with the handshake storm",
                "p99 latency, µs",
                both("the storm", &|with| self.storm_side(with, |r| r.wrk.p99_us)),
            ),
        ];
        charts.push(panel(
            "Handshakes per worker under the storm",
            "handshakes per wrk run",
            (0..self.settings.workers as usize)
                .map(|worker| {
                    (
                        format!("worker {worker}"),
                        self.storm_side(true, |r| {
                            r.workers
                                .handshakes
                                .get(worker)
                                .map_or(f64::NAN, |&h| h as f64)
                        }),
                    )
                })
                .collect(),
        ));
        charts.push(panel(
            "Coefficient of variation across workers under the storm",
            "CV, %",
            vec![
                (
                    "handshakes".into(),
                    self.storm_side(true, |r| r.workers.handshakes_cv() * 100.0),
                ),
                (
                    "CPU time".into(),
                    self.storm_side(true, |r| r.workers.cpu_cv() * 100.0),
                ),
            ],
        ));
        write_panels_png(path, &charts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::markdown::assert_contains_all;
    use crate::kit::wrk::sample_report;
    use std::time::Duration;

    fn session() -> Session {
        let settings = Settings::resolve(
            &crate::kit::settings::parse_args::<super::super::TlsLoadArgs>("tls-load", &[])
                .unwrap(),
            Path::new("/w"),
        );
        let mut session = Session::new(RunFacts::sample("tls-load"), settings);
        session.rss_baseline_kib = 20_000;
        session
    }

    fn cpu(ms: u64) -> CpuTime {
        CpuTime {
            user: Duration::from_millis(ms),
            system: Duration::from_millis(ms),
        }
    }

    fn silent(round: u32, requests_per_sec: f64, with: bool) -> SilentRun {
        SilentRun {
            round,
            cpu: cpu(100),
            wrk: sample_report(requests_per_sec),
            machine: CpuSplit::default(),
            side: with.then(|| SilentSide {
                tally: Tally {
                    opened: 3_000,
                    ended: 2_000,
                    held: 1_000,
                    first_end: Some("closed".into()),
                    ..Tally::default()
                },
                timeouts: 2_000,
                held_seconds: 30.0,
                timeouts_during_wrk: 1_000,
                in_progress: 1_000,
                in_progress_after: 998,
                established: 1_000,
                rss_kib: 22_000,
            }),
        }
    }

    fn storm(round: u32, with: bool, handshakes: [u64; 2]) -> StormRun {
        StormRun {
            round,
            cpu: cpu(100),
            wrk: sample_report(if with { 8_000.0 } else { 10_000.0 }),
            machine: CpuSplit {
                herdsman: 1.2,
                ..CpuSplit::default()
            },
            workers: PerWorker {
                handshakes: handshakes.to_vec(),
                requests: vec![90_000, 110_000],
                cpu: vec![cpu(450), cpu(550)],
                open_midway: vec![30, 40],
            },
            storm: with.then(|| {
                (
                    Tally {
                        opened: 10_000,
                        completed: 10_000,
                        ..Tally::default()
                    },
                    20.0,
                )
            }),
        }
    }

    #[test]
    fn both_measurements_are_judged_and_told() {
        let mut session = session();
        for round in 1..=2 {
            session.silent.push(silent(round, 10_000.0, false));
            session.silent.push(silent(round, 9_500.0, true));
            session.storm.push(storm(round, false, [10, 10]));
            session.storm.push(storm(round, true, [4_900, 5_100]));
        }
        let md = session.render(None);
        assert_contains_all(
            &md,
            &[
                "| others' requests/s with 1,000 silent TLS connections ÷ without ≥ 0.9 | 0.950 (0.950–0.950) | met |",
                // |4,900 − 5,100| ÷ 10,000: 0.02; CPU 0.9 and 1.1 s: 0.1.
                "coefficient of variation of the workers' handshakes ≤ 0.05 | 0.020 (0.020–0.020) | met |",
                "coefficient of variation of the workers' CPU time ≤ 0.05 | 0.100 (0.100–0.100) | **NOT MET**",
                "| requests/s | 10,000 (10,000–10,000) | 9,500 (9,500–9,500) | 95.0%",
                "| herdsman's handshakes under way when wrk started | 1,000 (1,000–1,000) |",
                "| timeouts herdsman counted per second of the wrk run | 100 (100–100) |",
                "the holder opened 6,000 connections, 4,000 of them again after a close; 0 connects failed; 2,000 were open",
                // (22,000 − 20,000) KiB ÷ 1,000.
                "**2,048 (2,048–2,048)** bytes per silent connection",
                "| 0 | 4,900 (4,900–4,900) | 490 (490–490) | 0.90 (0.90–0.90) | 0.45 / 0.45 | 0.90 (0.90–0.90) |",
                "20,000 handshakes completed in all, 0 ended otherwise, 0 connects failed. The first that ended: none.",
                // 90,000 and 110,000 requests: 0.1.
                "The established connections' requests (the storm's clients make none) with the storm: 10.0% (10.0%–10.0%), without it 10.0% (10.0%–10.0%)",
                "| 1 | with | 9,500 | 800 | 1500 | 0 | 1000 / 998 | 2000 / 1000 | 2000 | 3000 | 1000 | 22000 |",
                "| 2 | with | 8,000 | 800 | 1500 | 0 | 4900 / 5100 | 90000 / 110000 | 0.90 / 1.10 | 30 / 40 | 10000 | 0 |",
                "| with | 1.20 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 |",
            ],
        );
        assert!(!md.contains("Short run"), "{md}");
        let summary = session.summary();
        assert!(
            summary.contains("with ÷ without requests/s: 95.0%"),
            "{summary}"
        );
        assert!(summary.contains("wrk errors over all runs: 0"), "{summary}");
    }
}
