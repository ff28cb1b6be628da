//! What `cache` prints and writes: issue 38's targets judged; per case (object size, workers)
//! each row's medians over rounds of hits — CPU per request (user and kernel apart), requests/s,
//! p50, p99 — with the requests that reached the origin and the errors; per stampede each cache's
//! server requests per expiry and its clients' p50/p99/max; the configurations; every run; a plot
//! of the stampedes' latencies.

use std::fmt::Write as _;
use std::path::Path;

use super::caches::{CacheTarget, Cacher};
use super::origin::{Freshness, SLOW_ANSWER};
use super::settings::{Settings, CONNECTIONS, SIZES};
use super::stampede::{ExpiryOutcome, EXPIRY_MARGIN};
use super::STAMPEDES;
use crate::kit::markdown::{
    milliseconds, one_line, spread_cell, thousands, worker_count, write_details_table,
};
use crate::kit::paired::PairedRatio;
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::procstat::CpuTime;
use crate::kit::results::{write_plot_link, Configurations, Results, RunFacts, Trouble};
use crate::kit::stats::{percentile_of, spread, Spread};
use crate::kit::wrk::{Load, WrkReport};

/// A row of the hits: a cache, or herdsman's listener on a pool without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    Cache(Cacher),
    /// herdsman forwarding every request (the same object, the same process, no cache).
    Proxied,
}

impl Row {
    pub fn name(self) -> String {
        match self {
            Row::Cache(cacher) => cacher.written().to_string(),
            Row::Proxied => PROXIED.to_string(),
        }
    }
}

const PROXIED: &str = "herdsman, proxied (no cache)";

/// One wrk run of hits (or proxied requests) on one row.
#[derive(Debug, Clone)]
pub struct HitRun {
    pub round: u32,
    pub size: usize,
    pub workers: u32,
    pub row: Row,
    /// The cache's processes' CPU over the run.
    pub cpu: CpuTime,
    pub wrk: WrkReport,
    /// Requests for the object that reached the origin during the run: none for a hit.
    pub origin_requests: u64,
}

/// A figure of a run; None where it has none (CPU per request without a request).
type Figure = fn(&HitRun) -> Option<f64>;

/// A column of a case's table: its heading, its figure, how a value reads.
type Column = (&'static str, Figure, fn(f64) -> String);

impl HitRun {
    fn cpu_us(&self) -> Option<f64> {
        self.wrk.per_request_us(self.cpu.total())
    }

    fn user_us(&self) -> Option<f64> {
        self.wrk.per_request_us(self.cpu.user)
    }

    fn kernel_us(&self) -> Option<f64> {
        self.wrk.per_request_us(self.cpu.system)
    }

    fn requests_per_sec(&self) -> Option<f64> {
        (self.wrk.requests > 0).then_some(self.wrk.requests_per_sec)
    }

    fn p50_ms(&self) -> Option<f64> {
        self.wrk.p50_ms()
    }

    fn p99_ms(&self) -> Option<f64> {
        self.wrk.p99_ms()
    }

    fn errors(&self) -> u64 {
        self.wrk.errors()
    }

    pub fn progress_text(&self) -> String {
        format!(
            "{:<28} {} requests/s, {} CPU-µs/request (user {}), p99 {} ms, {} at the origin, {} \
             error(s)",
            self.row.name(),
            thousands(self.wrk.requests_per_sec),
            self.cpu_us().map_or("–".into(), us_text),
            self.user_us().map_or("–".into(), us_text),
            self.p99_ms().map_or("–".into(), milliseconds),
            self.origin_requests,
            self.errors()
        )
    }
}

/// One expiry of one stampede through one cache.
#[derive(Debug, Clone)]
pub struct ExpiryRun {
    pub freshness: Freshness,
    pub workers: u32,
    pub expiry: u32,
    pub cacher: Cacher,
    pub outcome: ExpiryOutcome,
}

impl ExpiryRun {
    fn latency(&self, p: f64) -> Option<f64> {
        percentile_of(&self.outcome.latencies_ms, p)
    }

    pub fn progress_text(&self) -> String {
        let o = &self.outcome;
        format!(
            "{:<9} {} server request(s), p50 {} ms, p99 {} ms, max {} ms, {} failure(s){}",
            self.cacher.written(),
            o.server_requests,
            self.latency(50.0).map_or("–".into(), milliseconds),
            self.latency(99.0).map_or("–".into(), milliseconds),
            self.latency(100.0).map_or("–".into(), milliseconds),
            o.failures,
            o.first_failure
                .as_ref()
                .map_or(String::new(), |f| format!(" (first: {f})"))
        )
    }
}

/// "1 KiB", "64 KiB".
pub fn size_text(size: usize) -> String {
    if size >= 1024 && size.is_multiple_of(1024) {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} bytes")
    }
}

/// How a stampede's object is named in the results.
pub fn freshness_text(freshness: Freshness) -> &'static str {
    match freshness {
        Freshness::Fresh => "fresh (every answer a hit)",
        Freshness::Expiring => "just expired (max-age=1)",
        Freshness::StaleWhileRevalidate => "just expired, stale-while-revalidate=30",
    }
}

/// CPU-µs: one decimal.
fn us_text(value: f64) -> String {
    format!("{value:.1}")
}

fn ratio_text(value: f64) -> String {
    format!("{value:.2}")
}

/// One case of the hits.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Case {
    size: usize,
    workers: u32,
}

impl Case {
    fn text(self) -> String {
        format!("{}, {}", size_text(self.size), worker_count(self.workers))
    }
}

/// (cache, why it was not measured).
pub type NotRun = Vec<(String, String)>;

/// A target judged: what, for which case, the figure, the verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub target: String,
    pub case: String,
    pub figure: String,
    pub verdict: String,
}

/// Everything one `cache` session measured.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    /// The caches measured, in order.
    pub cachers: Vec<Cacher>,
    pub not_run: NotRun,
    pub failure: Option<String>,
    pub hits: Vec<HitRun>,
    pub expiries: Vec<ExpiryRun>,
    pub configs: Configurations,
}

impl Session {
    pub fn new(
        facts: RunFacts,
        settings: Settings,
        targets: &[CacheTarget],
        not_run: NotRun,
    ) -> Session {
        Session {
            facts,
            settings,
            cachers: targets.iter().map(|t| t.cacher).collect(),
            not_run,
            failure: None,
            hits: Vec::new(),
            expiries: Vec::new(),
            configs: Configurations::default(),
        }
    }

    /// The hits' rows: every cache, herdsman's proxied requests after herdsman.
    fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for &cacher in &self.cachers {
            rows.push(Row::Cache(cacher));
            if cacher == Cacher::Herdsman {
                rows.push(Row::Proxied);
            }
        }
        rows
    }

    fn peers(&self) -> Vec<Cacher> {
        self.cachers
            .iter()
            .copied()
            .filter(|&c| c != Cacher::Herdsman)
            .collect()
    }

    fn cases(&self) -> Vec<Case> {
        let mut cases = Vec::new();
        for &workers in &self.settings.workers {
            for size in SIZES {
                cases.push(Case { size, workers });
            }
        }
        cases
    }

    fn runs_of(&self, row: Row, case: Case) -> impl Iterator<Item = &HitRun> {
        self.hits
            .iter()
            .filter(move |r| r.row == row && r.size == case.size && r.workers == case.workers)
    }

    /// (round, value) of `row`'s runs of `case`.
    fn side(&self, row: Row, case: Case, figure: Figure) -> Vec<(u32, f64)> {
        self.runs_of(row, case)
            .filter_map(|r| Some((r.round, figure(r)?)))
            .collect()
    }

    fn spread(&self, row: Row, case: Case, figure: Figure) -> Option<Spread> {
        let values: Vec<f64> = self
            .side(row, case, figure)
            .iter()
            .map(|&(_, v)| v)
            .collect();
        spread(&values)
    }

    /// The peer whose median `figure` is the best in `case` (the lowest, or the highest when
    /// `higher_is_better`), with it.
    fn best_peer(&self, case: Case, figure: Figure, higher_is_better: bool) -> Option<Cacher> {
        self.peers()
            .into_iter()
            .filter_map(|peer| Some((peer, self.spread(Row::Cache(peer), case, figure)?.median)))
            .max_by(|a, b| {
                let order = a.1.total_cmp(&b.1);
                if higher_is_better {
                    order
                } else {
                    order.reverse()
                }
            })
            .map(|(peer, _)| peer)
    }

    fn expiries_of(&self, freshness: Freshness, workers: u32, cacher: Cacher) -> Vec<&ExpiryRun> {
        self.expiries
            .iter()
            .filter(|e| e.freshness == freshness && e.workers == workers && e.cacher == cacher)
            .collect()
    }

    /// Issue 38's targets for herdsman, each case: the hits' three against the best peer and a
    /// hit's CPU against a proxied request's, then the stampedes'.
    pub fn judge(&self) -> Vec<Judged> {
        let mut all = Vec::new();
        let herdsman = Row::Cache(Cacher::Herdsman);
        let versus = |target: &str,
                      case: Case,
                      figure: Figure,
                      higher_is_better: bool,
                      bound: f64,
                      all: &mut Vec<Judged>| {
            let Some(peer) = self.best_peer(case, figure, higher_is_better) else {
                all.push(not_measured(target, case.text()));
                return;
            };
            let ratio = PairedRatio::of(
                &self.side(herdsman, case, figure),
                &self.side(Row::Cache(peer), case, figure),
            );
            all.push(Judged {
                target: target.to_string(),
                case: case.text(),
                figure: format!(
                    "{} × {}'s",
                    spread_cell(ratio.per_round(), ratio_text),
                    peer.written()
                ),
                verdict: ratio.judged(bound, !higher_is_better),
            });
        };
        for case in self.cases() {
            versus(
                "CPU per hit ≤ 0.9 × the fastest peer's",
                case,
                HitRun::cpu_us,
                false,
                0.9,
                &mut all,
            );
            versus(
                "requests/s ≥ every peer's",
                case,
                HitRun::requests_per_sec,
                true,
                1.0,
                &mut all,
            );
            versus(
                "p99 ≤ every peer's",
                case,
                HitRun::p99_ms,
                false,
                1.0,
                &mut all,
            );
            let target = "CPU per hit ≤ 0.5 × a proxied request's";
            let ratio = PairedRatio::of(
                &self.side(herdsman, case, HitRun::cpu_us),
                &self.side(Row::Proxied, case, HitRun::cpu_us),
            );
            all.push(match ratio.per_round() {
                None => not_measured(target, case.text()),
                Some(rounds) => Judged {
                    target: target.to_string(),
                    case: case.text(),
                    figure: spread_cell(Some(rounds), ratio_text),
                    verdict: ratio.judged(0.5, true),
                },
            });
        }
        for &workers in &self.settings.workers {
            let case = format!(
                "{} clients, {}",
                thousands(f64::from(self.settings.clients)),
                worker_count(workers)
            );
            let expired = self.expiries_of(Freshness::Expiring, workers, Cacher::Herdsman);
            let target = "server requests per expiry = 1";
            if expired.is_empty() {
                all.push(not_measured(target, case.clone()));
            } else {
                let counts: Vec<String> = expired
                    .iter()
                    .map(|e| e.outcome.server_requests.to_string())
                    .collect();
                let every_one = expired.iter().all(|e| e.outcome.server_requests == 1);
                all.push(Judged {
                    target: target.to_string(),
                    case: case.clone(),
                    figure: format!("{} (each expiry)", counts.join(", ")),
                    verdict: verdict_word(every_one),
                });
            }
            let swr = self.expiries_of(Freshness::StaleWhileRevalidate, workers, Cacher::Herdsman);
            let server_ms = SLOW_ANSWER.as_secs_f64() * 1e3;
            let target = "stale-while-revalidate: no client waits on the server";
            let maxima: Vec<f64> = swr.iter().filter_map(|e| e.latency(100.0)).collect();
            if maxima.is_empty() {
                all.push(not_measured(target, case));
            } else {
                let no_failure = swr.iter().all(|e| e.outcome.failures == 0);
                all.push(Judged {
                    target: target.to_string(),
                    case,
                    figure: format!(
                        "slowest client {} ms (the server takes {})",
                        spread_cell(spread(&maxima), milliseconds),
                        thousands(server_ms)
                    ),
                    verdict: verdict_word(no_failure && maxima.iter().all(|&m| m < server_ms)),
                });
            }
        }
        all
    }

    fn write_intro(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "# herdsman's cache against Varnish, nginx and HAProxy (issue 38)\n\n\
             Produced by `herdsman-bench cache`: each cache in front of the same origin, with \
             the same worker count; hits on a 1 KiB and a 64 KiB object by wrk on {} keep-alive \
             connections, and a stampede of {} clients on one object the origin takes {} ms to \
             make. The hit ratio on a Zipf \
             replay is `herdsman-bench cache-replay`'s: \
             [cache-hit-ratio.md](cache-hit-ratio.md).\n",
            CONNECTIONS,
            thousands(f64::from(self.settings.clients)),
            SLOW_ANSWER.as_millis()
        );
    }

    fn write_targets(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Targets (issue 38)\n\nThe hits' targets are ratios of herdsman's figure to the \
             best peer's in the case (the peer named), taken per round (their runs back to back) \
             and judged by their median over rounds, with the range over rounds in brackets. The \
             stampedes' are judged on every expiry.\n\n| target | case | figure | verdict |\n\
             |---|---|---|---|"
        );
        for j in self.judge() {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                j.target, j.case, j.figure, j.verdict
            );
        }
        md.push('\n');
    }

    fn write_hits(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Hits\n\nEach row's median over {} round(s) of {} s (the range over rounds in \
             brackets with several). \"at the origin\" is the requests for the object that \
             reached the origin during the runs, summed: none for a cache that answered every \
             request itself; errors are wrk's socket errors and answers of 400 or more, \
             summed.\n",
            self.settings.rounds, self.settings.duration
        );
        const COLUMNS: [Column; 6] = [
            ("CPU-µs per request", HitRun::cpu_us, us_text),
            ("user", HitRun::user_us, us_text),
            ("kernel", HitRun::kernel_us, us_text),
            ("requests/s", HitRun::requests_per_sec, thousands),
            ("p50 ms", HitRun::p50_ms, milliseconds),
            ("p99 ms", HitRun::p99_ms, milliseconds),
        ];
        for case in self.cases() {
            let _ = writeln!(md, "### {}\n", case.text());
            let mut head = String::from("| |");
            let mut rule = String::from("|---|");
            for (heading, _, _) in COLUMNS {
                let _ = write!(head, " {heading} |");
                rule.push_str("---:|");
            }
            let _ = writeln!(md, "{head} at the origin | errors |\n{rule}---:|---:|");
            for row in self.rows() {
                let _ = write!(md, "| {} |", row.name());
                for (_, figure, format) in COLUMNS {
                    let _ = write!(
                        md,
                        " {} |",
                        spread_cell(self.spread(row, case, figure), format)
                    );
                }
                let origin: u64 = self.runs_of(row, case).map(|r| r.origin_requests).sum();
                let errors: u64 = self.runs_of(row, case).map(HitRun::errors).sum();
                let _ = writeln!(md, " {} | {errors} |", thousands(origin as f64));
            }
            md.push('\n');
        }
    }

    fn write_stampedes(&self, md: &mut String, plot: Option<&Path>) {
        let _ = writeln!(
            md,
            "## The stampede\n\n{} clients, each on a connection of its own opened beforehand, \
             send one request for the same object at once; the origin takes {} ms to answer it. \
             The object is fetched once through the cache first; for the two expired cases the \
             clients go {:.1} s after its max-age of 1 s ran out (nginx and HAProxy count \
             freshness in whole seconds). \"server requests\" is the requests for the object \
             that reached the origin from the release until {} ms after the last answer \
             (a background fetch included). Latencies run from each client's request to the end \
             of its answer. Each figure is the median over {} expiries, the range in brackets \
             with several; failures are summed; \"sent within\" is how far apart the first and \
             the last client's requests left.\n",
            thousands(f64::from(self.settings.clients)),
            SLOW_ANSWER.as_millis(),
            EXPIRY_MARGIN.as_secs_f64(),
            SLOW_ANSWER.as_millis() + 300,
            self.settings.expiries
        );
        for &workers in &self.settings.workers {
            let _ = writeln!(md, "### {}\n", worker_count(workers));
            let _ = writeln!(
                md,
                "| object | cache | server requests per expiry | p50 ms | p99 ms | max ms | \
                 failures | sent within ms |\n|---|---|---:|---:|---:|---:|---:|---:|"
            );
            for freshness in STAMPEDES {
                for &cacher in &self.cachers {
                    let runs = self.expiries_of(freshness, workers, cacher);
                    let over = |f: &dyn Fn(&ExpiryRun) -> Option<f64>| {
                        let values: Vec<f64> = runs.iter().filter_map(|e| f(e)).collect();
                        spread(&values)
                    };
                    let failures: u64 = runs.iter().map(|e| e.outcome.failures).sum();
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {} | {} | {} | {failures} | {} |",
                        freshness_text(freshness),
                        cacher.written(),
                        spread_cell(over(&|e| Some(e.outcome.server_requests as f64)), thousands),
                        spread_cell(over(&|e| e.latency(50.0)), milliseconds),
                        spread_cell(over(&|e| e.latency(99.0)), milliseconds),
                        spread_cell(over(&|e| e.latency(100.0)), milliseconds),
                        spread_cell(over(&|e| Some(e.outcome.release_spread_ms)), milliseconds),
                    );
                }
            }
            md.push('\n');
        }
        let failures: Vec<String> = self
            .expiries
            .iter()
            .filter_map(|e| {
                let first = e.outcome.first_failure.as_ref()?;
                Some(format!(
                    "{} ({}, {}, expiry {}): {}",
                    e.cacher.written(),
                    e.freshness.path_word(),
                    worker_count(e.workers),
                    e.expiry,
                    one_line(first)
                ))
            })
            .collect();
        if !failures.is_empty() {
            let _ = writeln!(md, "First failure of each expiry that had one:\n");
            for failure in failures {
                let _ = writeln!(md, "- {failure}");
            }
            md.push('\n');
        }
        write_plot_link(
            md,
            plot,
            "each stampede's latencies by share of clients answered, per cache",
        );
    }

    fn write_setup(&self, md: &mut String) {
        let load = Load {
            connections: CONNECTIONS,
            seconds: self.settings.duration,
        };
        let _ = writeln!(
            md,
            "## What was run\n\n\
             - **The origin** runs in the benchmark's process: `/object/SIZE` answers at once \
             with `Cache-Control: max-age=86400, public`; the stampede's object answers 1 KiB \
             after {} ms, with `max-age=86400, public` (fresh), `max-age=1, public` (expired) or \
             `max-age=1, stale-while-revalidate=30`, one path per expiry. No answer has a \
             validator or a `Date`. `public` changes nothing for these answers; it is there \
             because HAProxy 2.6 reads past a `max-age` value that ends its field (in a trial \
             run a `max-age=1` object stayed fresh through its stampede).\n\
             - **herdsman**: `[cache] memory = \"256MiB\"` (its default) and `[pool.cache] \
             enabled = true`, nothing else. Its proxied row is a second listener of the same \
             process on a pool without a cache, in front of the same origin: the same object, \
             forwarded every time.\n\
             - **Varnish**: `-s malloc,256m`, a VCL that only names the origin (the built-in VCL \
             does the rest), `-p thread_pools=N` for N workers (Varnish runs a thread per busy \
             connection and cannot be held to N; its pools are the nearest it has), and `-p \
             default_grace=0`: Varnish's default serves any object 10 s past its freshness while \
             it fetches anew, which RFC 9111 does not allow unless the answer says \
             `stale-while-revalidate` (which Varnish takes as the object's grace).\n\
             - **nginx**: `proxy_cache` on a 256 MB `proxy_cache_path` (files in the scratch \
             directory, so in the page cache: nginx keeps bodies nowhere else), \
             `proxy_cache_lock on`, and `proxy_cache_background_update on`, so that a stale \
             answer it may serve (`stale-while-revalidate`) is refreshed by a request in the \
             background rather than by one client's. Its lock holds back only the requests for \
             an object not yet in the cache (\"a new cache element\", as its documentation \
             says): every request for an expired one goes to the server, unless \
             `proxy_cache_use_stale updating` has them served stale, which RFC 9111 does not \
             allow for a `max-age=1` answer, so it is not set.\n\
             - **HAProxy**: a 256 MB `cache` section, used and stored in the backend \
             (`http-request cache-use`, `http-response cache-store`), `max-age 86400` (its \
             default, 60 s, would cap every object's freshness) and `max-object-size 1048576`.\n\
             - Every cache otherwise has the kit's configuration (the same as `compare`'s): the \
             same worker count (`workers`, `worker_processes`, `nbthread`), keep-alive to the \
             origin, no access log, room for every connection.\n\n\
             Hits: each object is stored and warmed by {} s of wrk per cache, then every row \
             takes its turn in each round (the order turning from round to round), each run:\n\n\
             ```\nwrk {}\n```\n\n\
             CPU is the cache's processes' (utime and stime from /proc, before and after) \
             divided by the requests completed.\n",
            SLOW_ANSWER.as_millis(),
            super::settings::WARM_UP_SECONDS,
            load.args_for("http://127.0.0.1:PORT/object/1024").join(" ")
        );
        if !self.not_run.is_empty() {
            let _ = writeln!(md, "**Not measured**:\n");
            for (cache, why) in &self.not_run {
                let _ = writeln!(md, "- {cache}: {}", one_line(why));
            }
            md.push('\n');
        }
    }

    fn write_runs(&self, md: &mut String) {
        let cell = |v: Option<f64>, format: fn(f64) -> String| v.map_or("–".into(), format);
        let hits = self.hits.iter().map(|r| {
            format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.round,
                size_text(r.size),
                r.workers,
                r.row.name(),
                thousands(r.wrk.requests as f64),
                thousands(r.wrk.requests_per_sec),
                cell(r.cpu_us(), us_text),
                cell(r.user_us(), us_text),
                cell(r.kernel_us(), us_text),
                cell(r.p50_ms(), milliseconds),
                cell(r.p99_ms(), milliseconds),
                r.origin_requests,
                r.errors()
            )
        });
        write_details_table(
            md,
            "Every hits run",
            "| round | object | workers | row | requests | requests/s | CPU-µs per request | \
             user | kernel | p50 ms | p99 ms | at the origin | errors |",
            "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            hits.collect::<Vec<_>>().into_iter(),
        );
        let expiries = self.expiries.iter().map(|e| {
            format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                e.freshness.path_word(),
                e.workers,
                e.expiry,
                e.cacher.written(),
                e.outcome.server_requests,
                e.outcome.latencies_ms.len(),
                cell(e.latency(50.0), milliseconds),
                cell(e.latency(99.0), milliseconds),
                cell(e.latency(100.0), milliseconds),
                e.outcome.failures,
                milliseconds(e.outcome.release_spread_ms)
            )
        });
        write_details_table(
            md,
            "Every expiry",
            "| object | workers | expiry | cache | server requests | answered | p50 ms | p99 ms \
             | max ms | failures | sent within ms |",
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
            expiries.collect::<Vec<_>>().into_iter(),
        );
    }
}

fn not_measured(target: &str, case: String) -> Judged {
    Judged {
        target: target.to_string(),
        case,
        figure: "–".into(),
        verdict: "not measured".into(),
    }
}

/// A target met or not on every expiry, in the words of the ratios' verdicts.
fn verdict_word(met: bool) -> String {
    if met { "met" } else { "**NOT MET**" }.to_string()
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.hits.is_empty() && self.expiries.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let mut text = format!(
            "cache: hits, medians over {} round(s): CPU-µs per request (user + kernel), \
             requests/s, p99\n",
            self.settings.rounds
        );
        for case in self.cases() {
            let _ = writeln!(text, "{}", case.text());
            for row in self.rows() {
                let median = |figure: Figure, format: fn(f64) -> String| {
                    self.spread(row, case, figure)
                        .map_or("–".into(), |s| format(s.median))
                };
                let _ = writeln!(
                    text,
                    "  {:<28} {:>7} CPU-µs  {:>9} requests/s  p99 {:>7} ms",
                    row.name(),
                    median(HitRun::cpu_us, us_text),
                    median(HitRun::requests_per_sec, thousands),
                    median(HitRun::p99_ms, milliseconds)
                );
            }
        }
        let _ = writeln!(
            text,
            "cache: stampedes of {} clients: server requests, p50 / p99 / max ms (first expiry)",
            self.settings.clients
        );
        for e in self.expiries.iter().filter(|e| e.expiry == 1) {
            let _ = writeln!(
                text,
                "  {:<40} {}",
                format!(
                    "{}, {}",
                    freshness_text(e.freshness),
                    worker_count(e.workers)
                ),
                e.progress_text()
            );
        }
        let _ = writeln!(text, "cache: issue 38's targets for herdsman");
        for j in self.judge() {
            let _ = writeln!(
                text,
                "  {}: {}: {}: {}",
                j.target,
                j.case,
                j.figure,
                j.verdict.replace("**", "")
            );
        }
        Trouble::new(&[], self.hits.len() + self.expiries.len(), &self.failure)
            .write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let mut md = String::new();
        self.write_intro(&mut md);
        self.facts.write_markdown(&mut md);
        Trouble::new(&[], self.hits.len() + self.expiries.len(), &self.failure)
            .write_markdown(&mut md);
        self.write_targets(&mut md);
        self.write_hits(&mut md);
        self.write_stampedes(&mut md, plot);
        self.write_setup(&mut md);
        self.configs.write_markdown(&mut md);
        self.write_runs(&mut md);
        md
    }

    /// Per stampede, the first worker count's latencies pooled over its expiries, a line per
    /// cache: latency against the share of clients answered by then.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let workers = self.settings.workers[0];
        let charts: Vec<LineChart> = STAMPEDES
            .iter()
            .map(|&freshness| LineChart {
                title: format!(
                    "{}, {} clients, {}",
                    freshness_text(freshness),
                    self.settings.clients,
                    worker_count(workers)
                ),
                x_label: "clients answered (%)".into(),
                y_label: "latency (ms)".into(),
                series: self
                    .cachers
                    .iter()
                    .map(|&cacher| {
                        let latencies: Vec<f64> = self
                            .expiries_of(freshness, workers, cacher)
                            .iter()
                            .flat_map(|e| e.outcome.latencies_ms.iter().copied())
                            .collect();
                        Series {
                            name: cacher.written().to_string(),
                            points: (1..=100)
                                .filter_map(|p| {
                                    let p = f64::from(p);
                                    Some((p, percentile_of(&latencies, p)?))
                                })
                                .collect(),
                        }
                    })
                    .collect(),
                log_y: true,
            })
            .collect();
        write_panels_png(path, &charts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::markdown::assert_contains_all;
    use crate::kit::settings::parse_args;
    use crate::kit::wrk::sample_report;
    use std::path::PathBuf;
    use std::time::Duration;

    fn session() -> Session {
        let args: super::super::CacheArgs = parse_args("cache", &["--short"]).unwrap();
        let settings = Settings::resolve(&args, Path::new("/w")).unwrap();
        let targets: Vec<CacheTarget> = Cacher::ALL
            .iter()
            .map(|&cacher| CacheTarget {
                cacher,
                program: PathBuf::from("/bin/true"),
            })
            .collect();
        Session::new(RunFacts::sample("cache"), settings, &targets, vec![])
    }

    fn hit(row: Row, size: usize, cpu_ms: u64, requests_per_sec: f64) -> HitRun {
        HitRun {
            round: 1,
            size,
            workers: 1,
            row,
            cpu: CpuTime {
                user: Duration::from_millis(cpu_ms / 4),
                system: Duration::from_millis(cpu_ms - cpu_ms / 4),
            },
            wrk: sample_report(requests_per_sec),
            origin_requests: 0,
        }
    }

    fn expiry(freshness: Freshness, cacher: Cacher, server_requests: u64, ms: f64) -> ExpiryRun {
        ExpiryRun {
            freshness,
            workers: 1,
            expiry: 1,
            cacher,
            outcome: ExpiryOutcome {
                server_requests,
                latencies_ms: vec![ms; 10],
                failures: 0,
                first_failure: None,
                release_spread_ms: 3.0,
            },
        }
    }

    #[test]
    fn the_targets_are_judged_against_the_best_peer() {
        let mut s = session();
        for size in SIZES {
            // 10 s at the rate: CPU per request = cpu_ms × 1000 ÷ (rate × 10) µs.
            s.hits
                .push(hit(Row::Cache(Cacher::Herdsman), size, 4000, 100_000.0));
            s.hits.push(hit(Row::Proxied, size, 10_000, 50_000.0));
            s.hits
                .push(hit(Row::Cache(Cacher::Varnish), size, 8000, 40_000.0));
            s.hits
                .push(hit(Row::Cache(Cacher::Nginx), size, 7000, 70_000.0));
            s.hits
                .push(hit(Row::Cache(Cacher::Haproxy), size, 5000, 90_000.0));
        }
        for cacher in Cacher::ALL {
            let (requests, ms) = match cacher {
                Cacher::Herdsman => (1, 520.0),
                Cacher::Haproxy => (1000, 510.0),
                _ => (1, 900.0),
            };
            s.expiries
                .push(expiry(Freshness::Expiring, cacher, requests, ms));
            s.expiries.push(expiry(
                Freshness::StaleWhileRevalidate,
                cacher,
                requests,
                ms,
            ));
        }
        let judged = s.judge();
        assert_eq!(judged.len(), 2 * 4 + 2);
        // herdsman 4 µs against HAProxy's 5.56: 0.72 × — met; rate 100k against HAProxy's 90k.
        assert_eq!(judged[0].figure, "0.72 × HAProxy's");
        assert_eq!(judged[0].verdict, "met");
        assert_eq!(judged[1].figure, "1.11 × HAProxy's");
        assert_eq!(judged[1].verdict, "met");
        assert_eq!(judged[2].verdict, "met");
        // 4 µs a hit against 20 µs proxied.
        assert_eq!(judged[3].figure, "0.20");
        assert_eq!(judged[8].figure, "1 (each expiry)");
        assert_eq!(judged[8].verdict, "met");
        assert!(
            judged[9].verdict.starts_with("**NOT MET**"),
            "{:?}",
            judged[9]
        );

        let md = s.render(Some(Path::new("/x/cache-short.png")));
        assert_contains_all(
            &md,
            &[
                "[cache-hit-ratio.md](cache-hit-ratio.md)",
                "## Targets (issue 38)",
                "### 1 KiB, 1 worker\n",
                "### 64 KiB, 1 worker\n",
                "| herdsman, proxied (no cache) | 20.0 | 5.0 | 15.0 | 50,000 |",
                "| just expired (max-age=1) | HAProxy | 1,000 | 510 | 510 | 510 | 0 | 3.00 |",
                "![each stampede's latencies",
                "-p default_grace=0",
                "## Every expiry",
            ],
        );
        let summary = s.summary();
        assert!(
            summary.contains("server requests per expiry = 1: 1,000 clients, 1 worker"),
            "{summary}"
        );
    }

    #[test]
    fn a_cache_without_figures_is_not_measured_and_says_why() {
        let mut s = session();
        s.not_run = vec![("Varnish".into(), "missing varnishd".into())];
        let judged = s.judge();
        assert!(judged.iter().all(|j| j.verdict == "not measured"));
        s.hits
            .push(hit(Row::Cache(Cacher::Herdsman), 1024, 4000, 100_000.0));
        let md = s.render(None);
        assert!(md.contains("- Varnish: missing varnishd"), "{md}");
        assert!(!md.contains("!["));
    }
}
