//! What `soak` prints and writes: per proxy, requests and every failure by status and by cause,
//! client connections closed without an answer, the latency of failed requests, memory and
//! descriptors from before the load to after it (and their growth), herdsman's access log lines
//! against the requests it answered and its retries against its requests, the targets, a
//! timeline of the chaos with the failures near each event, the failures away from every event,
//! the warnings and errors in the proxy's own log, the configurations, and a plot.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use super::chaos::Done;
use super::herdsman::Counters;
use super::sampler::{self, Footprint, Sample};
use super::settings::Settings;
use crate::kit::load::{Cause, Failed, Failure, Live, Tally};
use crate::kit::logfile::LogCount;
use crate::kit::markdown::{one_line, thousands};
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::results::{Results, RunFacts};
use crate::kit::stats::percentile;

/// A failure counts as near an event when it ends within this of the event's step (before its
/// start or after its end).
pub const NEAR: Duration = Duration::from_secs(1);
/// RSS "at the start" of the load is read this long into it, once every connection is open and
/// every buffer has been through a few requests.
pub const WARM: Duration = Duration::from_secs(2);
/// The issue's retry budget: retries add at most this share to the requests (herdsman's
/// `retry_budget_percent` default).
pub const RETRY_SHARE: f64 = 0.20;
/// herdsman's `retry_budget_floor` default: retries a second allowed whatever the traffic.
const DEFAULT_FLOOR: u32 = 10;
/// Lines of the proxy's log shown at most, among its warnings, and around a burst of failures.
const LOG_LINES_SHOWN: usize = 15;
/// Failures less than this apart make one burst, whose log lines are shown together.
const BURST_GAP: Duration = Duration::from_secs(1);

/// How the descriptors came back once the load had stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdleAfter {
    pub footprint: Footprint,
    pub waited: Duration,
    /// How long the wait could last.
    pub limit: Duration,
}

/// One proxy's soak.
#[derive(Debug, Clone)]
pub struct ProxyRun {
    pub label: &'static str,
    /// Its configuration as first written.
    pub config: String,
    /// Before the load: the least of a few readings.
    pub baseline: Footprint,
    pub tally: Tally,
    /// When the load's last connection ended, after it began.
    pub load_ended: Duration,
    pub samples: Vec<Sample>,
    pub timeline: Vec<Done>,
    pub idle: IdleAfter,
    /// herdsman: its access log's lines over the run (every file, rotated ones too), counted
    /// after it stopped gracefully.
    pub log: Option<LogCount>,
    /// The proxy's own output (stdout and stderr).
    pub proxy_log: String,
    /// When the load began, by the wall clock: where the log's timestamps fall in the run.
    pub began_wall: SystemTime,
}

impl ProxyRun {
    fn is_herdsman(&self) -> bool {
        self.label == "herdsman"
    }

    /// Samples taken while the load ran.
    fn under_load(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(|s| s.at <= self.load_ended)
    }

    /// RSS once the load has warmed up, and at its end, in KiB.
    fn rss_warm_and_end(&self) -> Option<(u64, u64)> {
        let warm = self.under_load().find(|s| s.at >= WARM)?.footprint.rss_kib;
        let end = self.under_load().last()?.footprint.rss_kib;
        Some((warm, end))
    }

    fn most(&self, field: fn(&Footprint) -> u64) -> u64 {
        self.under_load()
            .map(|s| field(&s.footprint))
            .max()
            .unwrap_or(0)
    }

    /// herdsman's request and retry counters over the run.
    fn counters(&self) -> Option<Counters> {
        sampler::counted_over(&self.samples)
    }

    /// The pids that served, in order (herdsman: a new one per upgrade).
    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = Vec::new();
        for pid in self.samples.iter().filter_map(|s| s.pid) {
            if pids.last() != Some(&pid) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Latencies of the failed requests, in ms, sorted.
    fn failed_latencies_ms(&self) -> Vec<f64> {
        let mut ms: Vec<f64> = self
            .tally
            .failures
            .iter()
            .map(|f| f.latency.as_secs_f64() * 1e3)
            .collect();
        ms.sort_by(f64::total_cmp);
        ms
    }

    /// The failures within `NEAR` of `step`.
    fn near<'a>(&'a self, step: &'a Done) -> impl Iterator<Item = &'a Failure> {
        let from = step.started.saturating_sub(NEAR);
        let to = step.started + step.took + NEAR;
        self.tally
            .failures
            .iter()
            .filter(move |f| f.at >= from && f.at <= to)
    }

    /// The failures near no event.
    fn away(&self) -> Vec<&Failure> {
        let mut away: Vec<&Failure> = self
            .tally
            .failures
            .iter()
            .filter(|f| {
                !self.timeline.iter().any(|step| {
                    f.at + NEAR >= step.started && f.at <= step.started + step.took + NEAR
                })
            })
            .collect();
        away.sort_by_key(|f| f.at);
        away
    }

    /// The failures in bursts, each a run of failures less than `BURST_GAP` apart: (first, last).
    fn bursts(&self) -> Vec<(Duration, Duration)> {
        let mut times: Vec<Duration> = self.tally.failures.iter().map(|f| f.at).collect();
        times.sort();
        let mut bursts: Vec<(Duration, Duration)> = Vec::new();
        for at in times {
            match bursts.last_mut() {
                Some((_, last)) if at <= *last + BURST_GAP => *last = at,
                _ => bursts.push((at, at)),
            }
        }
        bursts
    }

    /// The proxy's log lines from `from` to `to` after the load began, with their time in the
    /// run; only herdsman's lines carry a timestamp.
    fn logged_between(&self, from: f64, to: f64) -> Vec<(f64, &str)> {
        let began = self
            .began_wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.proxy_log
            .lines()
            .filter_map(|line| Some((logged_at(line)? - began, line)))
            .filter(|(at, _)| (from..=to).contains(at))
            .collect()
    }

    fn steps_failed(&self) -> usize {
        self.timeline.iter().filter(|d| d.failed).count()
    }
}

/// "3 × 502 (10.012–10.540 s), 1 × closed without an answer (10.013 s)": failures grouped by
/// what they were, with when the first and the last of each ended.
fn grouped<'a>(failures: impl Iterator<Item = &'a Failure>) -> String {
    let mut groups: BTreeMap<Failed, (u64, Duration, Duration)> = BTreeMap::new();
    for failure in failures {
        let group = groups
            .entry(failure.what)
            .or_insert((0, failure.at, failure.at));
        group.0 += 1;
        group.1 = group.1.min(failure.at);
        group.2 = group.2.max(failure.at);
    }
    groups
        .iter()
        .map(|(what, (count, first, last))| {
            let (first, last) = (
                format!("{:.3}", first.as_secs_f64()),
                format!("{:.3}", last.as_secs_f64()),
            );
            let when = if first == last {
                format!("{first} s")
            } else {
                format!("{first}–{last} s")
            };
            format!("{} × {} ({when})", thousands(*count as f64), what.label())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The warnings and errors of a proxy's log, alike lines counted together: (count, first line).
/// herdsman's lines start with a timestamp and a level; HAProxy's with `[WARNING]` or `[ALERT]`.
fn warnings(log: &str) -> Vec<(u64, String)> {
    alike_lines(log, |words| {
        words.iter().take(3).any(|w| {
            matches!(*w, "WARN" | "ERROR") || w.starts_with("[WARNING]") || w.starts_with("[ALERT]")
        })
    })
}

/// The lines of `log` that `keep` takes (by their words), alike ones — the same words once the
/// first (a timestamp) and every digit are left out — counted together: (count, first line), in
/// the order each first appears.
fn alike_lines(log: &str, keep: impl Fn(&[&str]) -> bool) -> Vec<(u64, String)> {
    let mut seen: Vec<(u64, String, String)> = Vec::new();
    for line in log.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if !keep(&words) {
            continue;
        }
        let key: String = words
            .iter()
            .skip(1)
            .map(|w| {
                w.chars()
                    .filter(|c| !c.is_ascii_digit())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join(" ");
        match seen.iter_mut().find(|(_, k, _)| *k == key) {
            Some((count, _, _)) => *count += 1,
            None => seen.push((1, key, line.to_string())),
        }
    }
    seen.into_iter()
        .map(|(count, _, line)| (count, line))
        .collect()
}

/// Seconds since the Unix epoch of a line of herdsman's log, from its RFC 3339 UTC timestamp
/// ("2026-11-24T18:49:07.793393Z  INFO …"); None for a line without one (HAProxy's have none).
fn logged_at(line: &str) -> Option<f64> {
    let stamp = line.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    let mut date = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let mut time = time.splitn(3, ':').map(str::parse::<f64>);
    let (hours, minutes, seconds) = (time.next()?.ok()?, time.next()?.ok()?, time.next()?.ok()?);
    let days = days_from_civil(year, month, day) as f64;
    Some(days * 86_400.0 + hours * 3_600.0 + minutes * 60.0 + seconds)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`: years counted from March, so that the leap day ends a year).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Everything the results file says.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    /// One server's nginx.conf (the others differ in name and port).
    pub server_config: String,
    pub runs: Vec<ProxyRun>,
    /// Why the soak stopped before the end, if it did.
    pub failure: Option<String>,
}

/// A row of the figures table: its title and the cell for one run.
type FigureRow = (&'static str, fn(&ProxyRun) -> String);

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn count(value: u64) -> String {
    thousands(value as f64)
}

fn rss_growth(run: &ProxyRun) -> Option<(f64, f64)> {
    let (warm, end) = run.rss_warm_and_end()?;
    let grown = end as f64 - warm as f64;
    Some((grown / 1024.0, grown / warm.max(1) as f64 * 100.0))
}

/// The figures every proxy has, in this order; the tests read them by their titles.
const FIGURES: [FigureRow; 19] = [
    ("requests", |r| count(r.tally.requests())),
    ("requests/s", |r| {
        thousands(r.tally.requests() as f64 / r.tally.seconds.max(1e-3))
    }),
    ("answered 2xx", |r| count(r.tally.ok)),
    ("2xx/s over the last 2 whole seconds", |r| {
        // The last second is cut short by the end of the load.
        let seconds = &r.tally.ok_per_second;
        let whole = &seconds[..seconds.len().saturating_sub(1)];
        let last = &whole[whole.len().saturating_sub(2)..];
        thousands(last.iter().sum::<u64>() as f64 / last.len().max(1) as f64)
    }),
    ("failed requests", |r| count(r.tally.failed())),
    ("client connections closed without an answer", |r| {
        count(r.tally.closed_without_answer())
    }),
    ("cut mid-response", |r| {
        count(r.tally.cause(Cause::CutMidResponse))
    }),
    ("p99 latency of failed requests, ms", |r| {
        percentile(&r.failed_latencies_ms(), 99.0).map_or("–".into(), |ms| format!("{ms:.1}"))
    }),
    ("slowest failed request, ms", |r| {
        r.failed_latencies_ms()
            .last()
            .map_or("–".into(), |ms| format!("{ms:.1}"))
    }),
    ("client connections opened", |r| {
        count(r.tally.connections_opened)
    }),
    ("RSS before the load, MiB", |r| mib(r.baseline.rss_kib)),
    ("RSS at 2 s of load, MiB", |r| {
        r.rss_warm_and_end()
            .map_or("–".into(), |(warm, _)| mib(warm))
    }),
    ("RSS at the end of the load, MiB", |r| {
        r.rss_warm_and_end().map_or("–".into(), |(_, end)| mib(end))
    }),
    ("RSS growth under load, MiB", |r| {
        rss_growth(r).map_or("–".into(), |(mib, _)| format!("{mib:.1}"))
    }),
    ("RSS growth under load, %", |r| {
        rss_growth(r).map_or("–".into(), |(_, share)| format!("{share:.1}%"))
    }),
    ("RSS at most, MiB", |r| mib(r.most(|f| f.rss_kib))),
    ("descriptors before the load", |r| {
        count(r.baseline.descriptors)
    }),
    ("descriptors at most under load", |r| {
        count(r.most(|f| f.descriptors))
    }),
    ("descriptors after the load, once idle", |r| {
        count(r.idle.footprint.descriptors)
    }),
];

impl Session {
    fn herdsman(&self) -> Option<&ProxyRun> {
        self.runs.iter().find(|r| r.is_herdsman())
    }

    fn peer(&self) -> Option<&ProxyRun> {
        self.runs.iter().find(|r| !r.is_herdsman())
    }

    /// The targets and whether each was met.
    fn verdicts(&self) -> Vec<String> {
        let met = |ok: bool| if ok { "met" } else { "**NOT MET**" };
        let mut lines = Vec::new();
        if let Some(h) = self.herdsman() {
            let failed = h.tally.failed();
            lines.push(format!(
                "herdsman: {} failed requests of {} — target 0: {}.",
                count(failed),
                count(h.tally.requests()),
                met(failed == 0)
            ));
            if let Some(p) = self.peer() {
                let (ours, theirs) = (
                    h.tally.closed_without_answer(),
                    p.tally.closed_without_answer(),
                );
                lines.push(format!(
                    "Client connections closed without an answer: herdsman {}, {} {} — target \
                     fewer than {}'s, or none: {}.",
                    count(ours),
                    p.label,
                    count(theirs),
                    p.label,
                    met(ours < theirs || (ours == 0 && theirs == 0))
                ));
            }
        }
        lines
    }
}

impl Results for Session {
    /// The summary printed at the end.
    fn summary(&self) -> String {
        let mut text = String::new();
        for run in &self.runs {
            let _ = writeln!(text, "{}", progress_line(run));
            if let Some((grown, share)) = rss_growth(run) {
                let (warm, end) = run.rss_warm_and_end().unwrap_or_default();
                let _ = writeln!(
                    text,
                    "  RSS {} → {} MiB under load ({grown:+.1} MiB, {share:+.1}%); descriptors {} \
                     before, {} at most, {} {:.1} s after the load",
                    mib(warm),
                    mib(end),
                    run.baseline.descriptors,
                    run.most(|f| f.descriptors),
                    run.idle.footprint.descriptors,
                    run.idle.waited.as_secs_f64()
                );
            }
            if let Some(log) = run.log {
                let _ = writeln!(
                    text,
                    "  access log: {} lines for {} requests answered (difference {})",
                    count(log.lines),
                    count(run.tally.answered),
                    log.lines as i64 - run.tally.answered as i64
                );
            }
            if let Some(c) = run.counters() {
                let _ = writeln!(
                    text,
                    "  retries {} for {} requests ({:.2}%)",
                    count(c.retries),
                    count(c.requests),
                    c.retries as f64 * 100.0 / c.requests.max(1) as f64
                );
            }
            if run.steps_failed() > 0 {
                let _ = writeln!(text, "  chaos steps that failed: {}", run.steps_failed());
            }
        }
        for verdict in self.verdicts() {
            let _ = writeln!(text, "{}", verdict.replace("**", ""));
        }
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let s = &self.settings;
        let mut md = String::new();
        let peer = self
            .peer()
            .map_or(String::new(), |p| format!(", beside {}", p.label));
        let _ = writeln!(md, "# Soak: herdsman through a day's chaos{peer}\n");
        let _ = writeln!(
            md,
            "Three nginx servers, each a single process (`master_process off`, so that `kill -9` \
             kills it whole and QUIT is its graceful stop), answering `GET /` with a 14-byte body \
             and keep-alive, behind the proxy with {workers} worker thread(s). The load is this \
             program's own client on one thread: {c} keep-alive connections, each sending \
             `GET /` as soon as the last answer is whole, classifying every request that does \
             not end in a whole 2xx (a status, or a cause: connect refused or failed, closed or \
             reset before a whole response head — \"closed without an answer\" — cut inside the \
             body, no answer within 10 s), and connecting again after any close. For {d} s, \
             every {every} s one event, in turn (each that acts on a server takes the next of \
             the three):\n",
            workers = s.workers,
            c = s.connections,
            d = s.seconds,
            every = s.every,
        );
        for kind in &s.chaos {
            let _ = writeln!(md, "- `{kind}`: {}", kind.describe());
        }
        let _ = writeln!(
            md,
            "\nThe proxy's resident memory (VmRSS) and open descriptors are summed over every \
             process of its process group, once a second: herdsman's binary upgrade starts a new \
             process (the old one's child, whose parent then exits) in the same group, and its pid \
             is read from `GET /api/workers`. \"Before the load\" is the least of four readings \
             once the proxy has started and its idle server connections have closed; \"after the \
             load, once idle\" is read when the count is back at that baseline, or after the \
             client and server idle timeouts and {margin} s more. herdsman's access log lines are \
             counted over the log and its rotated files once herdsman has stopped gracefully.{short}\n",
            margin = super::IDLE_MARGIN.as_secs(),
            short = s.idle.map_or(String::new(), |idle| format!(
                " This run sets short idle timeouts (herdsman's `client_idle` {} s and \
                 `backend_idle` {} s; HAProxy's `timeout client` the same), so that the \
                 descriptors come back within seconds.",
                idle.client_seconds, idle.backend_seconds
            )),
        );
        if self.peer().is_some() {
            let _ = writeln!(md, "{}\n", super::haproxy::EQUIVALENCE);
        }
        self.facts.write_markdown(&mut md);
        for verdict in self.verdicts() {
            let _ = writeln!(md, "**{verdict}**\n");
        }
        if let Some(failure) = &self.failure {
            let _ = writeln!(md, "## Stopped early\n\n{}\n", one_line(failure));
        }
        self.write_figures(&mut md);
        if let Some(plot) = plot.and_then(Path::file_name) {
            let _ = writeln!(
                md,
                "![requests/s, RSS and descriptors, second by second]({})\n",
                plot.to_string_lossy()
            );
        }
        self.write_herdsman_figures(&mut md);
        for run in &self.runs {
            write_timeline(&mut md, run);
            write_away(&mut md, run);
            write_log_near_failures(&mut md, run);
            write_warnings(&mut md, run);
        }
        self.write_configs(&mut md);
        md
    }

    /// Requests/s (and failures/s, where there were any), RSS and descriptors, second by second.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        // The last second is cut short by the end of the load: left out.
        let per_second = |values: &[u64]| -> Vec<(f64, f64)> {
            values[..values.len().saturating_sub(1)]
                .iter()
                .enumerate()
                .map(|(second, &n)| (second as f64 + 0.5, n as f64))
                .collect()
        };
        let mut requests = Vec::new();
        for run in &self.runs {
            requests.push(Series {
                name: format!("{}: 2xx/s", run.label),
                points: per_second(&run.tally.ok_per_second),
            });
            if run.tally.failed() > 0 {
                requests.push(Series {
                    name: format!("{}: failed/s", run.label),
                    points: per_second(&run.tally.failed_per_second),
                });
            }
        }
        let footprint = |field: fn(&Footprint) -> f64| -> Vec<Series> {
            self.runs
                .iter()
                .map(|run| Series {
                    name: run.label.to_string(),
                    points: run
                        .samples
                        .iter()
                        .map(|s| (s.at.as_secs_f64(), field(&s.footprint)))
                        .collect(),
                })
                .collect()
        };
        let chart = |title: &str, y: &str, series: Vec<Series>| LineChart {
            title: title.to_string(),
            x_label: "seconds since the load began".into(),
            y_label: y.to_string(),
            series,
            log_y: false,
        };
        write_panels_png(
            path,
            &[
                chart(
                    &format!(
                        "{} keep-alive connections, an event every {} s: answers per second",
                        self.settings.connections, self.settings.every
                    ),
                    "per second",
                    requests,
                ),
                chart(
                    "Resident memory of the proxy's processes",
                    "MiB",
                    footprint(|f| f.rss_kib as f64 / 1024.0),
                ),
                chart(
                    "Open descriptors of the proxy's processes",
                    "descriptors",
                    footprint(|f| f.descriptors as f64),
                ),
            ],
        )
    }

    fn measured_nothing(&self) -> bool {
        self.runs.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }
}

impl Session {
    fn write_figures(&self, md: &mut String) {
        let _ = writeln!(md, "## Requests, failures, memory and descriptors\n");
        let header: Vec<&str> = self.runs.iter().map(|r| r.label).collect();
        let _ = writeln!(md, "| | {} |", header.join(" | "));
        let _ = writeln!(md, "|---|{}", "---:|".repeat(self.runs.len()));
        let row = |md: &mut String, title: &str, cell: &dyn Fn(&ProxyRun) -> String| {
            let cells: Vec<String> = self.runs.iter().map(cell).collect();
            let _ = writeln!(md, "| {title} | {} |", cells.join(" | "));
        };
        for (title, cell) in &FIGURES[..5] {
            row(md, title, cell);
        }
        // Every status other than 2xx that any run saw, then every cause.
        let mut statuses: Vec<u16> = self
            .runs
            .iter()
            .flat_map(|r| r.tally.statuses.keys().copied())
            .filter(|status| !(200..300).contains(status))
            .collect();
        statuses.sort_unstable();
        statuses.dedup();
        for status in statuses {
            row(md, &format!("failed: status {status}"), &|r| {
                count(r.tally.statuses.get(&status).copied().unwrap_or(0))
            });
        }
        for cause in Cause::ALL {
            row(md, &format!("failed: {}", cause.label()), &|r| {
                count(r.tally.cause(cause))
            });
        }
        for (title, cell) in &FIGURES[5..] {
            row(md, title, cell);
        }
        row(md, "seconds until idle", &|r| {
            format!("{:.1}", r.idle.waited.as_secs_f64())
        });
        row(md, "chaos steps that failed", &|r| {
            count(r.steps_failed() as u64)
        });
        let _ = writeln!(md);
    }

    fn write_herdsman_figures(&self, md: &mut String) {
        let Some(h) = self.herdsman() else {
            return;
        };
        let _ = writeln!(md, "## herdsman's access log, retries and processes\n");
        let _ = writeln!(md, "| | |\n|---|---:|");
        if let Some(log) = h.log {
            let _ = writeln!(md, "| access log lines | {} |", count(log.lines));
            let _ = writeln!(md, "| requests answered | {} |", count(h.tally.answered));
            let _ = writeln!(
                md,
                "| access log lines − requests answered | {} |",
                log.lines as i64 - h.tally.answered as i64
            );
        }
        if let Some(c) = h.counters() {
            let floor = self.settings.retry_budget_floor.unwrap_or(DEFAULT_FLOOR);
            let bound =
                RETRY_SHARE * c.requests as f64 + f64::from(floor) * h.load_ended.as_secs_f64();
            let _ = writeln!(
                md,
                "| requests (herdsman_requests_total) | {} |",
                count(c.requests)
            );
            let _ = writeln!(
                md,
                "| retries (herdsman_retries_total) | {} |",
                count(c.retries)
            );
            let _ = writeln!(
                md,
                "| retries ÷ requests | {:.2}% |",
                c.retries as f64 * 100.0 / c.requests.max(1) as f64
            );
            let _ = writeln!(
                md,
                "| retry budget: 20% of requests + floor {floor}/s × {:.0} s | {} |",
                h.load_ended.as_secs_f64(),
                thousands(bound)
            );
        }
        let pids = h.pids();
        let _ = writeln!(
            md,
            "| processes that served, in turn | {} |",
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" → ")
        );
        let _ = writeln!(
            md,
            "\nherdsman's counters are per process (an upgraded process counts from zero); they \
             are summed over the per-second samples, so an old process's last second before it \
             exits is missed.\n"
        );
    }

    fn write_configs(&self, md: &mut String) {
        let _ = writeln!(md, "## Configurations\n");
        for run in &self.runs {
            let name = if run.is_herdsman() {
                "herdsman.toml"
            } else {
                "haproxy.cfg"
            };
            let _ = writeln!(
                md,
                "<details><summary>{} ({name}, as first written; a reload switches the balance \
                 algorithm)</summary>\n\n```\n{}```\n\n</details>\n",
                run.label, run.config
            );
        }
        let _ = writeln!(
            md,
            "<details><summary>nginx.conf of s1 (s2 and s3 differ in name and port)</summary>\n\n\
             ```\n{}```\n\n</details>",
            self.server_config
        );
    }
}

fn write_timeline(md: &mut String, run: &ProxyRun) {
    let _ = writeln!(
        md,
        "## {}: the chaos, and the failed requests within {} s of each step\n",
        run.label,
        NEAR.as_secs()
    );
    let _ = writeln!(
        md,
        "| t, s | step | took, ms | what it saw | failed within {} s |\n|---:|---|---:|---|---|",
        NEAR.as_secs()
    );
    for step in &run.timeline {
        let near = grouped(run.near(step));
        // A step starts late when the one before it ran long (a server slow to start).
        let late = step.started.saturating_sub(step.step.at);
        let planned = if late > Duration::from_millis(100) {
            format!(" (planned {:.0})", step.step.at.as_secs_f64())
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| {:.1}{planned} | {} | {} | {}{} | {} |",
            step.started.as_secs_f64(),
            step.what,
            step.took.as_millis(),
            if step.failed { "**FAILED**: " } else { "" },
            one_line(&step.note).replace('|', "/"),
            if near.is_empty() { "0".into() } else { near }
        );
    }
    let _ = writeln!(md);
}

fn write_away(md: &mut String, run: &ProxyRun) {
    let away = run.away();
    if away.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "{}: {} failed requests fell more than {} s from every step:\n",
        run.label,
        count(away.len() as u64),
        NEAR.as_secs()
    );
    let mut by_second: BTreeMap<u64, Vec<&Failure>> = BTreeMap::new();
    for failure in away {
        by_second
            .entry(failure.at.as_secs())
            .or_default()
            .push(failure);
    }
    let _ = writeln!(md, "| second | failed |\n|---:|---|");
    for (second, failures) in by_second {
        let _ = writeln!(md, "| {second} | {} |", grouped(failures.into_iter()));
    }
    let _ = writeln!(md);
}

/// For each burst of failures, what the proxy logged from a second before it to half a second
/// after, alike lines counted together.
fn write_log_near_failures(md: &mut String, run: &ProxyRun) {
    for (first, last) in run.bursts() {
        let (from, to) = (first.as_secs_f64() - 1.0, last.as_secs_f64() + 0.5);
        let lines = run.logged_between(from, to);
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(
            md,
            "{}'s log from {from:.1} s to {to:.1} s, around the failed requests of {:.3}–{:.3} s \
             (alike lines counted together):\n",
            run.label,
            first.as_secs_f64(),
            last.as_secs_f64()
        );
        let text: String = lines.iter().map(|(_, line)| format!("{line}\n")).collect();
        let mut alike = alike_lines(&text, |_| true);
        alike.truncate(LOG_LINES_SHOWN);
        let _ = writeln!(md, "| t, s | times | first line |\n|---:|---:|---|");
        for (times, line) in alike {
            let at = lines
                .iter()
                .find(|(_, l)| *l == line)
                .map_or(f64::NAN, |(t, _)| *t);
            let _ = writeln!(
                md,
                "| {at:.3} | {times} | `{}` |",
                line.replace('|', "/").replace('`', "'")
            );
        }
        let _ = writeln!(md);
    }
}

fn write_warnings(md: &mut String, run: &ProxyRun) {
    let warnings = warnings(&run.proxy_log);
    if warnings.is_empty() {
        let _ = writeln!(md, "{}'s own log has no warning or error.\n", run.label);
        return;
    }
    let _ = writeln!(
        md,
        "{}'s own log: {} kinds of warning or error (alike lines counted together; the first of \
         each shown{}):\n",
        run.label,
        warnings.len(),
        if warnings.len() > LOG_LINES_SHOWN {
            format!(", the {LOG_LINES_SHOWN} most frequent")
        } else {
            String::new()
        }
    );
    let mut shown = warnings;
    shown.sort_by_key(|(times, _)| std::cmp::Reverse(*times));
    shown.truncate(LOG_LINES_SHOWN);
    let _ = writeln!(md, "| times | first line |\n|---:|---|");
    for (times, line) in shown {
        let _ = writeln!(
            md,
            "| {times} | `{}` |",
            line.replace('|', "/").replace('`', "'")
        );
    }
    let _ = writeln!(md);
}

/// One line on stderr when a proxy's soak is done, and in the summary.
pub fn progress_line(run: &ProxyRun) -> String {
    let t = &run.tally;
    format!(
        "{}: {} requests in {:.0} s, {} failed ({}), {} closed without an answer, {} cut \
         mid-response",
        run.label,
        count(t.requests()),
        t.seconds,
        count(t.failed()),
        if t.failed() == 0 {
            "none".to_string()
        } else {
            grouped(t.failures.iter())
        },
        count(t.closed_without_answer()),
        count(t.cause(Cause::CutMidResponse))
    )
}

/// One line on stderr per chaos step, with the load's counts so far.
pub fn step_line(done: &Done, live: &Live) -> String {
    format!(
        "[{:6.1} s] {} — {}{} | {} answered, {} failed so far",
        done.started.as_secs_f64(),
        done.what,
        if done.failed { "FAILED: " } else { "" },
        one_line(&done.note),
        count(live.answered.load(Ordering::Relaxed)),
        count(live.failed.load(Ordering::Relaxed))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::chaos::{Action, Kind, Step};

    fn failure(at_ms: u64, what: Failed) -> Failure {
        Failure {
            at: Duration::from_millis(at_ms),
            what,
            latency: Duration::from_millis(3),
        }
    }

    fn done(started_ms: u64, took_ms: u64) -> Done {
        Done {
            step: Step {
                at: Duration::from_millis(started_ms),
                kind: Kind::Kill,
                action: Action::Kill(0),
            },
            started: Duration::from_millis(started_ms),
            took: Duration::from_millis(took_ms),
            what: "s1: kill -9".into(),
            note: String::new(),
            failed: false,
        }
    }

    fn run(failures: Vec<Failure>, timeline: Vec<Done>) -> ProxyRun {
        ProxyRun {
            label: "herdsman",
            config: String::new(),
            baseline: Footprint::default(),
            tally: Tally {
                failures,
                ..Tally::default()
            },
            load_ended: Duration::from_secs(30),
            samples: Vec::new(),
            timeline,
            idle: IdleAfter {
                footprint: Footprint::default(),
                waited: Duration::ZERO,
                limit: Duration::ZERO,
            },
            log: None,
            proxy_log: String::new(),
            began_wall: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn failures_are_put_near_the_steps_they_follow_or_away() {
        let run = run(
            vec![
                failure(9_500, Failed::Status(502)),
                failure(10_200, Failed::Cause(Cause::ClosedWithoutAnswer)),
                failure(11_000, Failed::Status(502)),
                failure(20_000, Failed::Cause(Cause::Reset)),
            ],
            vec![done(10_000, 50)],
        );
        let step = &run.timeline[0];
        assert_eq!(
            grouped(run.near(step)),
            "2 × 502 (9.500–11.000 s), 1 × closed without an answer (10.200 s)"
        );
        let away: Vec<u64> = run.away().iter().map(|f| f.at.as_secs()).collect();
        assert_eq!(away, vec![20]);
    }

    #[test]
    fn log_timestamps_are_read_as_seconds_since_the_epoch() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1) * 86_400, 951_868_800);
        let at = logged_at("2026-11-24T18:49:07.250000Z  INFO herdsman: stopped").unwrap();
        assert!((at - 1_795_546_147.25).abs() < 1e-6, "{at}");
        assert_eq!(logged_at("[WARNING]  (9469) : Server app/s1 is DOWN"), None);
    }

    #[test]
    fn failures_make_bursts_and_the_log_around_them_is_found() {
        let mut r = run(
            vec![
                failure(18_068, Failed::Cause(Cause::Reset)),
                failure(18_069, Failed::Cause(Cause::Reset)),
                failure(91_000, Failed::Status(502)),
            ],
            Vec::new(),
        );
        assert_eq!(
            r.bursts(),
            vec![
                (Duration::from_millis(18_068), Duration::from_millis(18_069)),
                (Duration::from_secs(91), Duration::from_secs(91)),
            ]
        );
        r.began_wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_546_129);
        r.proxy_log = "\
2026-11-24T18:49:07.719318Z  INFO herdsman::process::signals: SIGUSR2: upgrading the binary
2026-11-24T18:49:07.793393Z  INFO herdsman: stopped
2026-11-24T18:49:20.893388Z  INFO herdsman: stopping gracefully signal=\"SIGTERM\"
"
        .to_string();
        let near: Vec<f64> = r
            .logged_between(17.0, 19.0)
            .iter()
            .map(|(t, _)| *t)
            .collect();
        assert_eq!(near.len(), 2, "{near:?}");
        assert!((near[1] - 18.793393).abs() < 1e-3, "{near:?}");
    }

    #[test]
    fn alike_warnings_are_counted_together() {
        let log = "\
2026-11-24T18:00:00.000001Z  INFO herdsman: serving
2026-11-24T18:00:01.000001Z  WARN herdsman::proxy: server refused the connection server=s1 worker=0
2026-11-24T18:00:02.000002Z  WARN herdsman::proxy: server refused the connection server=s1 worker=1
2026-11-24T18:00:03.000002Z ERROR herdsman::proxy: cannot write
[WARNING]  (1234) : Server app/s1 is DOWN.
";
        let found = warnings(log);
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0].0, 2);
        assert!(found[0].1.contains("worker=0"));
        assert!(found[2].1.contains("is DOWN"));
    }

    #[test]
    fn rss_is_read_once_warm_and_at_the_end_of_the_load() {
        let mut r = run(Vec::new(), Vec::new());
        r.samples = [
            (0, 10_000),
            (1, 20_000),
            (2, 20_480),
            (29, 21_504),
            (31, 30_000),
        ]
        .iter()
        .map(|&(second, rss_kib)| Sample {
            at: Duration::from_secs(second),
            footprint: Footprint {
                processes: 1,
                rss_kib,
                descriptors: 10,
            },
            pid: None,
            counters: None,
        })
        .collect();
        assert_eq!(r.rss_warm_and_end(), Some((20_480, 21_504)));
        let (grown_mib, share) = rss_growth(&r).unwrap();
        assert!((grown_mib - 1.0).abs() < 1e-9);
        assert!((share - 5.0).abs() < 1e-9);
    }
}
