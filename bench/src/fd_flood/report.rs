//! What `fd-flood` measured and how it is written: per proxy, the run's timeline, both client
//! groups' answers and failures, the prober's samples and what the flood's connections met; from
//! them the figures per phase (before the flood, from its first connect to its end, after it), the
//! recovery time, the target (every legitimate request answered), the results file and its plot.
//! A request belongs to the phase in which it ended.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::kit::load::Tally;
use crate::kit::markdown::{one_line, thousands};
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::proxies::ProxyKind;
use crate::kit::results::{write_plot_link, Results, RunFacts};
use crate::kit::slow_holders;
use crate::kit::stats::percentile_of;

use super::settings::Settings;

/// A group is back once it answers this share of its rate before the flood over a whole second.
const RECOVERED_SHARE: f64 = 0.9;

/// Seconds since the clients began, of each moment of one proxy's run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeline {
    /// The warm-up's end: the phase before the flood starts here.
    pub before_start: f64,
    /// The holders were started.
    pub flood_start: f64,
    /// Every flood connection had made its first connect.
    pub flood_ready: f64,
    /// The holders were told to let go.
    pub flood_end: f64,
    /// They had closed every connection and exited.
    pub released: f64,
    pub end: f64,
}

/// One sample of the prober.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub at: f64,
    /// The proxy's open files (every process of it).
    pub descriptors: u64,
    /// How long its status page took to answer 200, or why it did not.
    pub answer: Result<Duration, String>,
}

/// One proxy's run.
pub struct ProxyRun {
    pub kind: ProxyKind,
    pub config: String,
    pub timeline: Timeline,
    pub keep_alive: Tally,
    pub new_connections: Tally,
    pub probes: Vec<Probe>,
    /// What the flood's connections met, summed over the holders.
    pub flood: slow_holders::Tally,
}

/// The three phases, in order: name, start, end (seconds since the clients began).
fn phases(t: &Timeline) -> [(&'static str, f64, f64); 3] {
    [
        ("before", t.before_start, t.flood_start),
        ("during", t.flood_start, t.flood_end),
        ("after", t.flood_end, t.end),
    ]
}

/// One client group's figures over one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupPhase {
    pub ok: u64,
    pub per_second: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Requests that ended in the phase without a 2xx, by how.
    pub failed: BTreeMap<String, u64>,
}

impl GroupPhase {
    pub fn of(tally: &Tally, start: f64, end: f64) -> GroupPhase {
        let inside = |at: Duration| (start..end).contains(&at.as_secs_f64());
        let took: Vec<f64> = tally
            .latencies
            .iter()
            .filter(|l| inside(l.at))
            .map(|l| l.took.as_secs_f64() * 1e3)
            .collect();
        let mut failed = BTreeMap::new();
        for failure in tally.failures.iter().filter(|f| inside(f.at)) {
            *failed.entry(failure.what.label()).or_default() += 1;
        }
        GroupPhase {
            ok: took.len() as u64,
            per_second: took.len() as f64 / (end - start).max(1e-9),
            p50_ms: percentile_of(&took, 50.0),
            p99_ms: percentile_of(&took, 99.0),
            failed,
        }
    }

    pub fn failed_count(&self) -> u64 {
        self.failed.values().sum()
    }

    fn failed_cell(&self) -> String {
        if self.failed.is_empty() {
            return "0".into();
        }
        let parts: Vec<String> = self
            .failed
            .iter()
            .map(|(what, count)| format!("{} {what}", thousands(*count as f64)))
            .collect();
        format!(
            "**{}**: {}",
            thousands(self.failed_count() as f64),
            parts.join(", ")
        )
    }
}

/// Seconds from the flood's end until both groups answered at least `RECOVERED_SHARE` of their
/// rate before it over a whole second (looked at every 0.1 s); None when they never did before the
/// run ended.
pub fn recovery_seconds(run: &ProxyRun) -> Option<f64> {
    let t = run.timeline;
    let groups = [&run.keep_alive, &run.new_connections];
    let rates: Vec<f64> = groups
        .iter()
        .map(|g| GroupPhase::of(g, t.before_start, t.flood_start).per_second)
        .collect();
    (0..)
        .map(|step| f64::from(step) / 10.0)
        .take_while(|after| t.flood_end + after + 1.0 <= t.end)
        .find(|after| {
            let at = t.flood_end + after;
            groups.iter().zip(&rates).all(|(group, rate)| {
                GroupPhase::of(group, at, at + 1.0).ok as f64 >= RECOVERED_SHARE * rate
            })
        })
}

/// The status page during the flood: probes answered, probes made, the slowest answer in ms.
fn admin_during(run: &ProxyRun) -> (usize, usize, Option<f64>) {
    let t = run.timeline;
    let during: Vec<&Probe> = run
        .probes
        .iter()
        .filter(|p| (t.flood_start..t.flood_end).contains(&p.at))
        .collect();
    let answered: Vec<f64> = during
        .iter()
        .filter_map(|p| p.answer.as_ref().ok())
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    let slowest = answered.iter().copied().reduce(f64::max);
    (answered.len(), during.len(), slowest)
}

/// The first reason a probe during the flood was not answered, if one was not.
fn admin_failure(run: &ProxyRun) -> Option<&str> {
    let t = run.timeline;
    run.probes
        .iter()
        .filter(|p| (t.flood_start..t.flood_end).contains(&p.at))
        .find_map(|p| p.answer.as_ref().err().map(String::as_str))
}

fn peak_descriptors(run: &ProxyRun) -> u64 {
    run.probes.iter().map(|p| p.descriptors).max().unwrap_or(0)
}

/// Legitimate requests that ended during the flood: answered 2xx, and all.
fn legitimate_during(run: &ProxyRun) -> (u64, u64) {
    let t = run.timeline;
    let mut ok = 0;
    let mut all = 0;
    for group in [&run.keep_alive, &run.new_connections] {
        let phase = GroupPhase::of(group, t.flood_start, t.flood_end);
        ok += phase.ok;
        all += phase.ok + phase.failed_count();
    }
    (ok, all)
}

/// Milliseconds with one decimal, or a dash for none.
fn ms(value: Option<f64>) -> String {
    value.map_or("–".into(), |v| format!("{v:.1}"))
}

/// The line printed after each proxy's run.
pub fn progress_line(run: &ProxyRun) -> String {
    let t = run.timeline;
    let kept = GroupPhase::of(&run.keep_alive, t.flood_start, t.flood_end);
    let fresh = GroupPhase::of(&run.new_connections, t.flood_start, t.flood_end);
    let (answered, probes, _) = admin_during(run);
    format!(
        "{}: during the flood keep-alive {:.0}/s ({} failed), new connections {:.0}/s ({} failed), \
         status page {answered} of {probes}, peak {} open files",
        run.kind.written(),
        kept.per_second,
        kept.failed_count(),
        fresh.per_second,
        fresh.failed_count(),
        peak_descriptors(run)
    )
}

/// The whole session: the settings, the facts, each proxy's run.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    pub runs: Vec<ProxyRun>,
    pub failure: Option<String>,
}

impl Session {
    pub fn new(facts: RunFacts, settings: Settings) -> Session {
        Session {
            facts,
            settings,
            runs: Vec::new(),
            failure: None,
        }
    }

    /// The main table: a row per figure, a column per proxy.
    fn table(&self) -> String {
        let mut md = String::from("| |");
        for run in &self.runs {
            let _ = write!(md, " {} |", run.kind.written());
        }
        md.push_str("\n|---|");
        md.push_str(&"---:|".repeat(self.runs.len()));
        md.push('\n');
        let mut row = |title: &str, cell: &dyn Fn(&ProxyRun) -> String| {
            let _ = write!(md, "| {title} |");
            for run in &self.runs {
                let _ = write!(md, " {} |", cell(run));
            }
            md.push('\n');
        };
        let per_phase = |tally: fn(&ProxyRun) -> &Tally, figure: fn(&GroupPhase) -> String| {
            move |run: &ProxyRun| {
                phases(&run.timeline)
                    .iter()
                    .map(|(_, start, end)| figure(&GroupPhase::of(tally(run), *start, *end)))
                    .collect::<Vec<_>>()
                    .join(" · ")
            }
        };
        let during = |tally: fn(&ProxyRun) -> &Tally| {
            move |run: &ProxyRun| {
                let t = run.timeline;
                GroupPhase::of(tally(run), t.flood_start, t.flood_end).failed_cell()
            }
        };
        let kept: fn(&ProxyRun) -> &Tally = |r| &r.keep_alive;
        let fresh: fn(&ProxyRun) -> &Tally = |r| &r.new_connections;
        for (name, group) in [
            ("keep-alive clients", kept),
            ("new-connection clients", fresh),
        ] {
            row(
                &format!("{name}: requests/s before · during · after"),
                &per_phase(group, |p| thousands(p.per_second)),
            );
            row(
                &format!("{name}: p50 ms before · during · after"),
                &per_phase(group, |p| ms(p.p50_ms)),
            );
            row(
                &format!("{name}: p99 ms before · during · after"),
                &per_phase(group, |p| ms(p.p99_ms)),
            );
            row(&format!("{name}: failed during the flood"), &during(group));
        }
        row(
            "keep-alive requests that met an idle close and were sent again (whole run)",
            &|r| thousands(r.keep_alive.retried as f64),
        );
        row("legitimate requests answered during the flood", &|r| {
            let (ok, all) = legitimate_during(r);
            let share = if all == 0 {
                0.0
            } else {
                ok as f64 * 100.0 / all as f64
            };
            format!(
                "{} of {} ({share:.2}%)",
                thousands(ok as f64),
                thousands(all as f64)
            )
        });
        row("status page answered during the flood (slowest)", &|r| {
            let (answered, probes, slowest) = admin_during(r);
            let slowest = slowest.map_or(String::new(), |ms| format!(" ({ms:.0} ms)"));
            if answered == probes {
                format!("{answered} of {probes}{slowest}")
            } else {
                format!("**{answered} of {probes}**{slowest}")
            }
        });
        let limit = self.settings.descriptor_limit;
        row("proxy's open files at the peak, of its limit", &|r| {
            format!(
                "{} of {}",
                thousands(peak_descriptors(r) as f64),
                thousands(limit as f64)
            )
        });
        row(
            "flood: connections opened (first and again) · closed by the proxy · connects failed",
            &|r| {
                format!(
                    "{} · {} · {}",
                    thousands(f64::from(r.flood.opened)),
                    thousands(f64::from(r.flood.ended)),
                    thousands(f64::from(r.flood.failed))
                )
            },
        );
        row(
            "flood: seconds until every connection had tried once",
            &|r| format!("{:.1}", r.timeline.flood_ready - r.timeline.flood_start),
        );
        row(
            "recovery: seconds from the flood's end until both groups are back to 90% of their \
             rate before",
            &|r| {
                recovery_seconds(r).map_or_else(
                    || format!("not within {:.0} s", r.timeline.end - r.timeline.flood_end),
                    |s| format!("{s:.1}"),
                )
            },
        );
        md
    }

    /// Whether herdsman met the issue's target, in one line.
    fn target_line(&self) -> Option<String> {
        let herdsman = self.runs.iter().find(|r| r.kind == ProxyKind::Herdsman)?;
        let (ok, all) = legitimate_during(herdsman);
        let (answered, probes, _) = admin_during(herdsman);
        let met = ok == all && answered == probes;
        Some(format!(
            "Target (every legitimate request answered during the flood, and the status page): \
             {} — herdsman answered {} of {} requests and {answered} of {probes} status probes.",
            if met { "**met**" } else { "**not met**" },
            thousands(ok as f64),
            thousands(all as f64)
        ))
    }

    /// Requests/s per second of one group, for each proxy, with 0 at the flood's start.
    fn chart(&self, title: &str, tally: fn(&ProxyRun) -> &Tally) -> LineChart {
        let series = self
            .runs
            .iter()
            .map(|run| {
                let t = run.timeline;
                let mut per_second = BTreeMap::<i64, u64>::new();
                for latency in &tally(run).latencies {
                    let second = (latency.at.as_secs_f64() - t.flood_start).floor() as i64;
                    *per_second.entry(second).or_default() += 1;
                }
                let first = (t.before_start - t.flood_start).ceil() as i64;
                let last = (t.end - t.flood_start).floor() as i64 - 1;
                Series {
                    name: run.kind.written().to_string(),
                    points: (first..=last)
                        .map(|s| (s as f64, per_second.get(&s).copied().unwrap_or(0) as f64))
                        .collect(),
                }
            })
            .collect();
        LineChart {
            title: title.into(),
            x_label: "seconds from the flood's start".into(),
            y_label: "requests/s".into(),
            series,
            log_y: false,
        }
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
        let mut text = self.table();
        if let Some(line) = self.target_line() {
            let _ = writeln!(text, "\n{line}");
        }
        if let Some(failure) = &self.failure {
            let _ = writeln!(text, "stopped early: {failure}");
        }
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let s = &self.settings;
        let mut md =
            String::from("# Descriptor flood: idle connections past the open-files limit\n\n");
        if s.short {
            md.push_str(
                "**Short run**: the same shape scaled down to fit a test; the figures show the \
                 benchmark works, not how the proxies compare.\n\n",
            );
        }
        self.facts.write_markdown(&mut md);
        let _ = writeln!(
            md,
            "Each proxy in turn, as a user first runs it (shipped defaults, one worker; the \
             configurations are below), may open **{limit} files** (RLIMIT_NOFILE, soft and hard), \
             in front of this program's fast backend. Beside it the whole run: {clients} \
             keep-alive clients (connected {warm} s before the first phase, so they are clients \
             the proxy already serves) and {clients} clients that open a new connection for every \
             request, each sending `GET /` as fast as it is answered (this program's own client, \
             which classifies every failure; a keep-alive request that meets an idle close before \
             any byte of its answer is sent again on a new connection, as browsers and curl do, \
             and counted apart); and a prober that asks the proxy's status page (herdsman's \
             `/api/workers`, HAProxy's stats page, nginx's stub_status, each on a port of its own) \
             twice a second with 2 s to answer, and counts the proxy's open files. After {before} \
             s, holder processes open **{flood} connections that never send a byte**, the first \
             connects spread over 2 s, each opened again at once when the proxy closes it (a \
             connect the proxy's full listen queue leaves unanswered for 5 s counts as failed and \
             is tried again a second later); {during} s after every one has tried once they let \
             go, and {after} s more are measured. A request belongs to the phase in which it \
             ended; \"during\" runs from the flood's first connect to its end.\n",
            limit = thousands(s.descriptor_limit as f64),
            clients = s.clients,
            warm = super::settings::WARM_UP_SECONDS,
            before = s.before,
            flood = thousands(f64::from(s.flood)),
            during = s.during,
            after = s.after,
        );
        md.push_str(&self.table());
        md.push('\n');
        if let Some(line) = self.target_line() {
            let _ = writeln!(md, "{line}\n");
        }
        for run in &self.runs {
            if let Some(why) = admin_failure(run) {
                let _ = writeln!(
                    md,
                    "{}'s status page, the first probe it did not answer: {}\n",
                    run.kind.written(),
                    one_line(why)
                );
            }
            if let Some(first) = &run.flood.first_end {
                let _ = writeln!(
                    md,
                    "{}: the first flood connection it ended or refused: {}\n",
                    run.kind.written(),
                    one_line(first)
                );
            }
        }
        write_plot_link(&mut md, plot, "requests/s per second through the flood");
        md.push_str("## Configurations\n\n");
        for run in &self.runs {
            let _ = writeln!(md, "{}:\n\n```\n{}```\n", run.kind.written(), run.config);
        }
        if let Some(failure) = &self.failure {
            let _ = writeln!(md, "## Stopped early\n\n{}\n", one_line(failure));
        }
        md
    }

    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let charts = [
            self.chart("keep-alive clients", |r| &r.keep_alive),
            self.chart("new-connection clients", |r| &r.new_connections),
        ];
        write_panels_png(path, &charts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::load::{Failed, Failure, Latency};

    fn tally(oks: &[(f64, f64)], failures: &[f64]) -> Tally {
        Tally {
            latencies: oks
                .iter()
                .map(|&(at, ms)| Latency {
                    at: Duration::from_secs_f64(at),
                    took: Duration::from_secs_f64(ms / 1e3),
                })
                .collect(),
            failures: failures
                .iter()
                .map(|&at| Failure {
                    at: Duration::from_secs_f64(at),
                    what: Failed::Status(503),
                    latency: Duration::ZERO,
                })
                .collect(),
            ..Tally::default()
        }
    }

    fn run(keep_alive: Tally, new_connections: Tally) -> ProxyRun {
        ProxyRun {
            kind: ProxyKind::Herdsman,
            config: String::new(),
            timeline: Timeline {
                before_start: 0.0,
                flood_start: 2.0,
                flood_ready: 2.5,
                flood_end: 4.0,
                released: 4.2,
                end: 8.0,
            },
            keep_alive,
            new_connections,
            probes: vec![],
            flood: slow_holders::Tally::default(),
        }
    }

    /// Ten answers a second at `ms` each, from `from` to `to` seconds.
    fn steady(from: f64, to: f64, ms: f64) -> Vec<(f64, f64)> {
        let mut at = from;
        let mut oks = Vec::new();
        while at < to {
            oks.push((at, ms));
            at += 0.1;
        }
        oks
    }

    #[test]
    fn a_phase_counts_what_ended_in_it() {
        let t = tally(&[(0.5, 1.0), (1.5, 3.0), (2.5, 9.0)], &[1.9, 2.1]);
        let before = GroupPhase::of(&t, 0.0, 2.0);
        assert_eq!((before.ok, before.per_second), (2, 1.0));
        assert_eq!(before.p99_ms, Some(3.0));
        assert_eq!(before.failed.get("503"), Some(&1));
        let during = GroupPhase::of(&t, 2.0, 4.0);
        assert_eq!((during.ok, during.failed_count()), (1, 1));
        assert_eq!(during.failed_cell(), "**1**: 1 503");
    }

    #[test]
    fn recovery_is_when_both_groups_are_back() {
        // The keep-alive group is steady; the new connections stop during the flood and come back
        // 1.5 s after its end.
        let mut fresh = steady(0.0, 2.0, 1.0);
        fresh.extend(steady(5.5, 8.0, 1.0));
        let r = run(tally(&steady(0.0, 8.0, 1.0), &[]), tally(&fresh, &[]));
        // Back once a whole second holds 90% of the rate before: from 1.4 s after the end, when the
        // window [5.4, 6.4) holds nine answers.
        assert_eq!(recovery_seconds(&r), Some(1.4));
        assert_eq!(legitimate_during(&r), (20, 20));
        // Never back: None.
        let r = run(
            tally(&steady(0.0, 8.0, 1.0), &[]),
            tally(&steady(0.0, 2.0, 1.0), &[]),
        );
        assert_eq!(recovery_seconds(&r), None);
    }
}
