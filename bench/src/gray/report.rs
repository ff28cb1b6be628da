//! What `gray` prints and writes: issue 39's targets judged for the first herdsman method; per
//! case (what the sick server did, connections, workers) each row's medians over rounds —
//! requests/s, p50, p99, the sick server's share, CPU per request (user and kernel apart) — with
//! its errors; the recovering case's recovery; what was run and the configurations; every run; a
//! plot of the sick server's share second by second in the recovering case.

use std::fmt::Write as _;
use std::path::Path;

use super::scenario::{Scenario, REPORT_ORDER, SLIGHTLY_LATE, VERY_LATE};
use super::servers::{Served, SERVERS};
use super::settings::Settings;
use super::timeline::{Timeline, BUCKET_SECONDS, FAIR_SHARE_BACK};
use crate::kit::markdown::{
    and_list, milliseconds, spread_cell, thousands, worker_count, worker_counts,
    write_details_table,
};
use crate::kit::paired::{judged, PairedRatio};
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::procstat::CpuTime;
use crate::kit::results::{write_plot_link, Configurations, Results, RunFacts, Trouble};
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::{Load, WrkReport};

/// herdsman's `latency_window` by default: a recovered server must have its share back within it.
pub const RECOVERY_WINDOW_SECONDS: f64 = 10.0;

/// The recovering case's share at its end is taken over this long (or its time after the
/// recovery, when shorter).
const RECENT_SECONDS: f64 = 5.0;

/// The rows the targets compare the judged method with.
const HAPROXY_LEASTCONN: &str = "HAProxy leastconn";
const HERDSMAN_ROUND_ROBIN: &str = "herdsman round-robin";

/// One wrk run of one case through one row.
#[derive(Debug, Clone)]
pub struct GrayRun {
    pub round: u32,
    pub workers: u32,
    pub connections: u32,
    pub scenario: Scenario,
    /// Its index in the session's rows.
    pub row: usize,
    /// wrk's duration.
    pub seconds: u32,
    /// The proxy's processes' CPU over the run.
    pub cpu: CpuTime,
    pub wrk: WrkReport,
    /// What each server got during the run.
    pub served: Served,
    /// The recovering case's counts over time.
    pub timeline: Option<Timeline>,
}

/// A figure of a run; None where it has none.
type Figure = fn(&GrayRun) -> Option<f64>;

impl GrayRun {
    fn requests_per_sec(&self) -> Option<f64> {
        (self.wrk.requests > 0).then_some(self.wrk.requests_per_sec)
    }

    fn p99_ms(&self) -> Option<f64> {
        self.wrk.p99_ms()
    }

    /// None where the sick server is not in the pool.
    fn sick_share(&self) -> Option<f64> {
        self.scenario
            .has_sick_server()
            .then(|| self.served.sick_share())
            .flatten()
    }

    /// The proxy's CPU (user and kernel) per request.
    fn cpu_us(&self) -> Option<f64> {
        self.wrk.per_request_us(self.cpu.total())
    }

    /// Seconds from the recovery until the sick server had its share back; infinite when it did
    /// not within the run, None when it did not and the run recorded less than the window after
    /// the recovery (so that it cannot tell).
    fn recovery(&self) -> Option<f64> {
        let timeline = self.timeline.as_ref()?;
        match timeline.recovery_seconds() {
            Some(seconds) => Some(seconds),
            None if timeline.buckets_after_recovery() as f64 * BUCKET_SECONDS
                >= RECOVERY_WINDOW_SECONDS =>
            {
                Some(f64::INFINITY)
            }
            None => None,
        }
    }

    /// Seconds from the recovery until the sick server had its share back, infinite when it did
    /// not within the run; None but for the recovering case.
    fn recovered_within(&self) -> Option<f64> {
        let timeline = self.timeline.as_ref()?;
        Some(timeline.recovery_seconds().unwrap_or(f64::INFINITY))
    }

    /// The sick server's share over the last `RECENT_SECONDS` of the run, or of its time after
    /// the recovery when that is shorter.
    fn recent_share(&self) -> Option<f64> {
        let timeline = self.timeline.as_ref()?;
        let end = timeline.samples.last()?.0;
        let recovered_at = timeline.recovered_at?;
        timeline.sick_share((end - RECENT_SECONDS).max(recovered_at), end)
    }

    fn share_while_sick(&self) -> Option<f64> {
        self.timeline.as_ref()?.share_while_sick()
    }

    pub fn progress_text(&self, name: &str) -> String {
        let cell = |value: Option<f64>, format: fn(f64) -> String| value.map_or("–".into(), format);
        format!(
            "{name:<28} {} requests/s, p99 {} ms, sick server {}, {} CPU-µs/request, {} socket \
             error(s), {} answer(s) ≥ 400{}",
            thousands(self.wrk.requests_per_sec),
            cell(self.p99_ms(), milliseconds),
            cell(self.sick_share(), percent),
            cell(self.cpu_us(), us_text),
            self.wrk.socket_errors,
            self.wrk.bad_status,
            match self.recovered_within() {
                Some(seconds) => format!(", recovered within {}", recovery_text(Some(seconds))),
                None => String::new(),
            }
        )
    }
}

/// A share: "33.3%", two decimals below 1%.
fn percent(share: f64) -> String {
    let value = share * 100.0;
    if value < 1.0 {
        format!("{value:.2}%")
    } else {
        format!("{value:.1}%")
    }
}

/// CPU-µs: one decimal.
fn us_text(value: f64) -> String {
    format!("{value:.1}")
}

fn ratio_text(value: f64) -> String {
    format!("{value:.2}")
}

/// "3 s", "not within the run", "–".
fn recovery_text(seconds: Option<f64>) -> String {
    match seconds {
        None => "–".into(),
        Some(s) if s.is_infinite() => "not within the run".into(),
        Some(s) => format!("{s:.0} s"),
    }
}

/// A column of a case's table: its heading, its figure, how a value reads.
type Column = (&'static str, Figure, fn(f64) -> String);

const COLUMNS: [Column; 7] = [
    ("requests/s", GrayRun::requests_per_sec, thousands),
    ("p50 ms", |r| r.wrk.p50_ms(), milliseconds),
    ("p99 ms", GrayRun::p99_ms, milliseconds),
    ("sick server's share", GrayRun::sick_share, percent),
    ("CPU-µs per request", GrayRun::cpu_us, us_text),
    ("user", |r| r.wrk.per_request_us(r.cpu.user), us_text),
    ("kernel", |r| r.wrk.per_request_us(r.cpu.system), us_text),
];

/// Connections and workers: a case of every scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Case {
    connections: u32,
    workers: u32,
}

impl Case {
    fn text(self) -> String {
        format!(
            "{} connections, {}",
            self.connections,
            worker_count(self.workers)
        )
    }
}

/// A target on the ratio of the judged row's figure to another run's, taken round by round.
struct RatioGoal {
    target: String,
    /// The denominator's row; None when it is not among the rows.
    over: Option<usize>,
    /// The numerator's case and the denominator's.
    scenarios: (Scenario, Scenario),
    figure: Figure,
    bound: f64,
    at_most: bool,
    /// The denominator as the figure names it: "HAProxy leastconn's".
    whose: String,
}

/// A target judged: what, for which case, the figure, the verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub target: String,
    pub case: String,
    pub figure: String,
    pub verdict: String,
}

/// Everything one `gray` session measured.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    /// The rows' names, in order: herdsman's methods first.
    pub rows: Vec<String>,
    pub failure: Option<String>,
    pub runs: Vec<GrayRun>,
    pub configs: Configurations,
}

impl Session {
    pub fn new(facts: RunFacts, settings: Settings, rows: Vec<String>) -> Session {
        Session {
            facts,
            settings,
            rows,
            failure: None,
            runs: Vec::new(),
            configs: Configurations::default(),
        }
    }

    fn cases(&self) -> Vec<Case> {
        let mut cases = Vec::new();
        for &workers in &self.settings.workers {
            for &connections in &self.settings.connections {
                cases.push(Case {
                    connections,
                    workers,
                });
            }
        }
        cases
    }

    /// The cases the recovering case ran in.
    fn recovering_cases(&self) -> Vec<Case> {
        self.cases()
            .into_iter()
            .filter(|case| self.settings.runs(Scenario::Recovering, case.connections))
            .collect()
    }

    fn row_named(&self, name: &str) -> Option<usize> {
        self.rows.iter().position(|r| r == name)
    }

    /// The row the targets are judged for: herdsman's first method.
    fn judged_row(&self) -> usize {
        0
    }

    fn runs_of(
        &self,
        row: usize,
        scenario: Scenario,
        case: Case,
    ) -> impl Iterator<Item = &GrayRun> {
        self.runs.iter().filter(move |r| {
            r.row == row
                && r.scenario == scenario
                && r.connections == case.connections
                && r.workers == case.workers
        })
    }

    /// (round, value) of `row`'s runs of `scenario` in `case`.
    fn side(&self, row: usize, scenario: Scenario, case: Case, figure: Figure) -> Vec<(u32, f64)> {
        self.runs_of(row, scenario, case)
            .filter_map(|r| Some((r.round, figure(r)?)))
            .collect()
    }

    fn values(&self, row: usize, scenario: Scenario, case: Case, figure: Figure) -> Vec<f64> {
        self.side(row, scenario, case, figure)
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    fn spread(&self, row: usize, scenario: Scenario, case: Case, figure: Figure) -> Option<Spread> {
        spread(&self.values(row, scenario, case, figure))
    }

    /// Issue 39's targets for the judged row, case by case.
    pub fn judge(&self) -> Vec<Judged> {
        let judged_row = self.judged_row();
        let haproxy = self.row_named(HAPROXY_LEASTCONN);
        let round_robin = self.row_named(HERDSMAN_ROUND_ROBIN);
        let late = (Scenario::Late200, Scenario::Late200);
        let healthy = (Scenario::Healthy, Scenario::Healthy);
        let goal = |target: &str, over, scenarios, figure: Figure, bound, at_most, whose: &str| {
            RatioGoal {
                target: target.to_string(),
                over,
                scenarios,
                figure,
                bound,
                at_most,
                whose: whose.to_string(),
            }
        };
        let goals = [
            goal(
                &format!("200 ms late: requests/s ≥ {HAPROXY_LEASTCONN}'s"),
                haproxy,
                late,
                GrayRun::requests_per_sec,
                1.0,
                false,
                &format!("{HAPROXY_LEASTCONN}'s"),
            ),
            goal(
                "200 ms late: requests/s ≥ 0.95 × its own with the slow server removed",
                Some(judged_row),
                (Scenario::Late200, Scenario::Removed),
                GrayRun::requests_per_sec,
                0.95,
                false,
                "removed",
            ),
            goal(
                "200 ms late: p99 ≤ 2 × its own with all healthy",
                Some(judged_row),
                (Scenario::Late200, Scenario::Healthy),
                GrayRun::p99_ms,
                2.0,
                true,
                "all healthy",
            ),
            goal(
                &format!("all healthy: requests/s ≥ {HERDSMAN_ROUND_ROBIN}'s"),
                round_robin,
                healthy,
                GrayRun::requests_per_sec,
                1.0,
                false,
                &format!("{HERDSMAN_ROUND_ROBIN}'s"),
            ),
            goal(
                &format!("all healthy: CPU per request ≤ {HERDSMAN_ROUND_ROBIN}'s"),
                round_robin,
                healthy,
                GrayRun::cpu_us,
                1.0,
                true,
                &format!("{HERDSMAN_ROUND_ROBIN}'s"),
            ),
        ];
        let mut all = Vec::new();
        for case in self.cases() {
            all.extend(goals.iter().map(|goal| self.judge_ratio(case, goal)));
            let target = "200 ms late: the slow server's share ≤ 1%".to_string();
            let shares = self.values(judged_row, Scenario::Late200, case, GrayRun::sick_share);
            all.push(match spread(&shares) {
                None => not_measured(target, case),
                Some(s) => Judged {
                    target,
                    case: case.text(),
                    figure: spread_cell(Some(s), percent),
                    verdict: judged(&shares, 0.01, true),
                },
            });
            if self.settings.runs(Scenario::Recovering, case.connections) {
                all.push(self.judge_recovery(case));
            }
        }
        let name = &self.rows[judged_row];
        for j in &mut all {
            j.target = format!("{name}: {}", j.target);
        }
        all
    }

    /// `goal` in `case`: the judged row's figure over the other's, round by round.
    fn judge_ratio(&self, case: Case, goal: &RatioGoal) -> Judged {
        let target = goal.target.clone();
        let Some(over) = goal.over else {
            return not_measured(target, case);
        };
        let (mine, theirs) = goal.scenarios;
        let ratio = PairedRatio::of(
            &self.side(self.judged_row(), mine, case, goal.figure),
            &self.side(over, theirs, case, goal.figure),
        );
        match ratio.per_round() {
            None => not_measured(target, case),
            Some(rounds) => Judged {
                target,
                case: case.text(),
                figure: format!("{} × {}", spread_cell(Some(rounds), ratio_text), goal.whose),
                verdict: ratio.judged(goal.bound, goal.at_most),
            },
        }
    }

    /// Recovery within the window, over the rounds.
    fn judge_recovery(&self, case: Case) -> Judged {
        let target = format!("recovery: its share back within {RECOVERY_WINDOW_SECONDS:.0} s");
        let runs: Vec<&GrayRun> = self
            .runs_of(self.judged_row(), Scenario::Recovering, case)
            .collect();
        let seconds: Vec<f64> = runs.iter().filter_map(|r| r.recovery()).collect();
        if seconds.is_empty() {
            let mut judged = not_measured(target, case);
            if !runs.is_empty() {
                judged.verdict = format!(
                    "not measured: {} s recorded after the recovery, less than the window",
                    self.settings.recovered_seconds
                );
            }
            return judged;
        }
        Judged {
            target,
            case: case.text(),
            figure: recovery_cell(&seconds),
            verdict: judged(&seconds, RECOVERY_WINDOW_SECONDS, true).replace("inf", "∞"),
        }
    }

    fn write_intro(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "# One sick server of three: herdsman's balancing against HAProxy's and nginx's \
             (issue 39)\n\n\
             Produced by `herdsman-bench gray`: three servers behind each proxy, the last of them \
             sick — {} ms late, {} ms late, {} ms late then recovered mid-run, failing fast with \
             500s — and as references all healthy, and the sick server removed (two servers). \
             Rows: herdsman's {}, HAProxy's `balance leastconn` and `roundrobin`, nginx's \
             `least_conn` and `random two least_conn`. {} connections, {}, {} round(s) of {} s \
             runs; the recovering case {} s sick then {} s recovered, at {} connections.\n",
            SLIGHTLY_LATE.as_millis(),
            VERY_LATE.as_millis(),
            VERY_LATE.as_millis(),
            self.settings
                .herdsman_methods
                .iter()
                .map(|m| format!("`balance = \"{m}\"`"))
                .collect::<Vec<_>>()
                .join(", "),
            and_list(&self.settings.connections),
            worker_counts(&self.settings.workers),
            self.settings.rounds,
            self.settings.seconds,
            self.settings.sick_seconds,
            self.settings.recovered_seconds,
            and_list(&self.settings.recovering_connections),
        );
        if self.settings.rounds == 1 && self.settings.seconds == 1 {
            let _ = writeln!(
                md,
                "**Short run**: one round of 1 s runs, to prove the benchmark runs end to end; \
                 its figures are not for comparing.\n"
            );
        }
    }

    fn write_targets(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Targets (issue 39)\n\nJudged for the first herdsman method. A ratio is taken per \
             round (its two runs in the same round) and judged by its median over rounds, the \
             range over rounds in brackets; a share and a recovery time are judged the same way, \
             by their median. \"not told apart\" means the median misses the bound but its 95% \
             interval holds it: the machine's noise is larger than the difference.\n\n\
             | target | case | figure | verdict |\n|---|---|---|---|"
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

    fn write_cases(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Per case\n\nEach row's median over rounds (the range over rounds in brackets \
             with several). requests/s, p50 and p99 are wrk's; the sick server's share is of \
             the requests the three servers got during the run, counted at the servers; CPU is \
             the proxy's processes' (utime and stime from /proc, before and after) over the \
             requests wrk completed. Errors are wrk's socket errors and its answers of 400 or \
             more, summed over the rounds: the failing server's 500s are the second.\n"
        );
        for scenario in REPORT_ORDER {
            let _ = writeln!(md, "### {}\n", capitalised(scenario.text()));
            for case in self.cases() {
                if !self.settings.runs(scenario, case.connections) {
                    continue;
                }
                let _ = writeln!(
                    md,
                    "#### {}, {} s runs\n",
                    case.text(),
                    self.settings.seconds_of(scenario)
                );
                let mut head = String::from("| |");
                let mut rule = String::from("|---|");
                for (heading, _, _) in COLUMNS {
                    let _ = write!(head, " {heading} |");
                    rule.push_str("---:|");
                }
                let _ = writeln!(md, "{head} socket errors | 400 or more |\n{rule}---:|---:|");
                for (row, name) in self.rows.iter().enumerate() {
                    let _ = write!(md, "| {name} |");
                    for (_, figure, format) in COLUMNS {
                        let cell = spread_cell(self.spread(row, scenario, case, figure), format);
                        let _ = write!(md, " {cell} |");
                    }
                    let runs: Vec<&GrayRun> = self.runs_of(row, scenario, case).collect();
                    let socket: u64 = runs.iter().map(|r| r.wrk.socket_errors).sum();
                    let status: u64 = runs.iter().map(|r| r.wrk.bad_status).sum();
                    let _ = writeln!(md, " {socket} | {status} |");
                }
                md.push('\n');
            }
        }
    }

    fn write_recovery(&self, md: &mut String, plot: Option<&Path>) {
        let _ = writeln!(
            md,
            "## Recovery\n\nThe recovering case: the sick server answers {} ms late for {} s, \
             then at once for {} s. \"recovered within\" is the time from the recovery to the \
             end of the first {} s after it in which the server got at least {:.0}% of a third \
             of the requests (median, range in brackets); \"not within the run\" counts the \
             rounds in which none of the {} s did. The share while sick and over the run's last seconds \
             (5, or fewer when it recovered for less) are of the requests counted at the \
             servers, read every 100 ms.\n",
            VERY_LATE.as_millis(),
            self.settings.sick_seconds,
            self.settings.recovered_seconds,
            BUCKET_SECONDS,
            FAIR_SHARE_BACK * 100.0,
            self.settings.recovered_seconds,
        );
        for case in self.recovering_cases() {
            let _ = writeln!(
                md,
                "### {}\n\n| | share while sick | recovered within | share over the last {} s |\n\
                 |---|---:|---:|---:|",
                case.text(),
                RECENT_SECONDS.min(f64::from(self.settings.recovered_seconds))
            );
            for (row, name) in self.rows.iter().enumerate() {
                let runs: Vec<&GrayRun> = self.runs_of(row, Scenario::Recovering, case).collect();
                let sick: Vec<f64> = runs.iter().filter_map(|r| r.share_while_sick()).collect();
                let recovered: Vec<f64> =
                    runs.iter().filter_map(|r| r.recovered_within()).collect();
                let last: Vec<f64> = runs.iter().filter_map(|r| r.recent_share()).collect();
                let _ = writeln!(
                    md,
                    "| {name} | {} | {} | {} |",
                    spread_cell(spread(&sick), percent),
                    recovery_cell(&recovered),
                    spread_cell(spread(&last), percent),
                );
            }
            md.push('\n');
        }
        write_plot_link(
            md,
            plot,
            "the sick server's share second by second in the recovering case, per row",
        );
    }

    fn write_setup(&self, md: &mut String) {
        let load = Load {
            connections: self.settings.connections[0],
            seconds: self.settings.seconds,
        };
        let _ = writeln!(
            md,
            "## What was run\n\n\
             - **The servers**: three of this program's fast backend (a 19-byte answer, HTTP/1.1 \
             keep-alive), each on a thread of the benchmark's process, each counting the requests \
             it gets as their heads come in. The sick one, the last in every pool, answers a \
             late request after a timer (its connection waits, the server does not), and a \
             failing one with 500 and the same body at once.\n\
             - **herdsman**: its release build with its defaults (no `[pool.passive]`, \
             `retry_on` or `latency_window` set: 500s neither eject a server nor are retried by \
             default) but for the pool's `balance`, one row per method.\n\
             - **HAProxy**: `balance leastconn` or `balance roundrobin` in the backend.\n\
             - **nginx**: `least_conn` or `random two least_conn` in the upstream, with `zone \
             backend 1m`, so that with two workers each counts both workers' connections as \
             herdsman's workers and HAProxy's threads do; its default `max_fails=1` does not take \
             a server out for a 500 or a slow answer (only errors and timeouts, which none of \
             these cases has).\n\
             - Every proxy otherwise has the kit's configuration (the same as `compare`'s): the \
             same worker count, keep-alive to the servers, no access log, room for every \
             connection.\n\n\
             Per worker count each row runs twice: in front of the three servers, and of the \
             two healthy ones (the case with the sick server removed). Each is warmed up for {} s \
             with every server healthy. Then, round after round, the cases in this order — all \
             healthy, removed, failing, 50 ms, 200 ms, recovering (each case's sick server was \
             sick in the case before it; all healthy follows a recovery), each connection \
             count, every row in turn (the order turning from round to round), each run:\n\n\
             ```\nwrk {}\n```\n\n\
             The runs are short so that the whole matrix fits about 25 minutes on a 2-core \
             machine: 7 rows × 2 worker counts × 2 connection counts × 3 rounds are 84 turns of \
             5 cases, and the recovering case, whose run is {} s, is measured at {} connections \
             only; 5 s runs would take 40 minutes. `--seconds`, `--rounds`, \
             `--recovering-connections` and `--recovered-seconds` lengthen it.\n",
            self.settings.warm_up_seconds,
            load.args_for("http://127.0.0.1:PORT/").join(" "),
            self.settings.sick_seconds + self.settings.recovered_seconds,
            and_list(&self.settings.recovering_connections),
        );
    }

    fn write_runs(&self, md: &mut String) {
        let cell = |v: Option<f64>, format: fn(f64) -> String| v.map_or("–".into(), format);
        let rows = self.runs.iter().map(|r| {
            format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.round,
                r.workers,
                r.connections,
                r.scenario.word(),
                self.rows[r.row],
                r.seconds,
                thousands(r.wrk.requests as f64),
                thousands(r.wrk.requests_per_sec),
                cell(r.wrk.p50_ms(), milliseconds),
                cell(r.p99_ms(), milliseconds),
                r.served
                    .0
                    .iter()
                    .map(|&c| thousands(c as f64))
                    .collect::<Vec<_>>()
                    .join(" / "),
                cell(r.cpu_us(), us_text),
                cell(r.wrk.per_request_us(r.cpu.user), us_text),
                r.wrk.socket_errors,
                r.wrk.bad_status,
                match r.recovered_within() {
                    Some(seconds) => recovery_text(Some(seconds)),
                    None => String::new(),
                }
            )
        });
        write_details_table(
            md,
            "Every run",
            "| round | workers | connections | case | row | seconds | requests | requests/s | \
             p50 ms | p99 ms | at each server | CPU-µs per request | user | socket errors | 400 \
             or more | recovered within |",
            "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
    }

    /// Per bucket of a run, the median over rounds of `row`'s share in the recovering case.
    fn share_series(&self, row: usize, case: Case) -> Series {
        let timelines: Vec<Vec<(f64, Option<f64>)>> = self
            .runs_of(row, Scenario::Recovering, case)
            .filter_map(|r| Some(r.timeline.as_ref()?.shares()))
            .collect();
        let buckets = timelines.iter().map(Vec::len).max().unwrap_or(0);
        let points = (0..buckets)
            .filter_map(|k| {
                let at = timelines.iter().find_map(|t| Some(t.get(k)?.0))?;
                let shares: Vec<f64> = timelines.iter().filter_map(|t| t.get(k)?.1).collect();
                Some((at, spread(&shares)?.median * 100.0))
            })
            .collect();
        Series {
            name: self.rows[row].clone(),
            points,
        }
    }
}

/// "3 s (2–4)", with "; not within the run in 1 of 3" when some round did not recover.
fn recovery_cell(seconds: &[f64]) -> String {
    let within: Vec<f64> = seconds.iter().copied().filter(|s| s.is_finite()).collect();
    let never = seconds.len() - within.len();
    let mut text = match spread(&within) {
        None => "not within the run".to_string(),
        Some(s) => spread_cell(Some(s), |v| format!("{v:.0} s")),
    };
    if never > 0 && !within.is_empty() {
        let _ = write!(text, "; not within the run in {never} of {}", seconds.len());
    }
    text
}

fn not_measured(target: String, case: Case) -> Judged {
    Judged {
        target,
        case: case.text(),
        figure: "–".into(),
        verdict: "not measured".into(),
    }
}

/// "One server 200 ms late".
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or(String::new(), |first| {
        first.to_uppercase().chain(chars).collect()
    })
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
            "gray: one server of {SERVERS} 200 ms late, medians over {} round(s): requests/s, \
             p99, the sick server's share\n",
            self.settings.rounds
        );
        for case in self.cases() {
            let _ = writeln!(text, "{}", case.text());
            for (row, name) in self.rows.iter().enumerate() {
                let median = |figure: Figure, format: fn(f64) -> String| {
                    self.spread(row, Scenario::Late200, case, figure)
                        .map_or("–".into(), |s| format(s.median))
                };
                let _ = writeln!(
                    text,
                    "  {name:<28} {:>9} requests/s  p99 {:>7} ms  sick server {:>7}",
                    median(GrayRun::requests_per_sec, thousands),
                    median(GrayRun::p99_ms, milliseconds),
                    median(GrayRun::sick_share, percent),
                );
            }
        }
        let _ = writeln!(text, "gray: issue 39's targets");
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
        Trouble::new(&[], self.runs.len(), &self.failure).write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let mut md = String::new();
        self.write_intro(&mut md);
        self.facts.write_markdown(&mut md);
        Trouble::new(&[], self.runs.len(), &self.failure).write_markdown(&mut md);
        self.write_targets(&mut md);
        self.write_recovery(&mut md, plot);
        self.write_cases(&mut md);
        self.write_setup(&mut md);
        self.configs.write_markdown(&mut md);
        self.write_runs(&mut md);
        md
    }

    /// Per case of the recovering case, the sick server's share second by second (median over
    /// rounds), a line per row, beside a third.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let charts: Vec<LineChart> = self
            .recovering_cases()
            .into_iter()
            .map(|case| {
                let mut series: Vec<Series> = (0..self.rows.len())
                    .map(|row| self.share_series(row, case))
                    .collect();
                let end = f64::from(self.settings.sick_seconds + self.settings.recovered_seconds);
                series.push(Series {
                    name: "a third".into(),
                    points: vec![(0.0, 100.0 / SERVERS as f64), (end, 100.0 / SERVERS as f64)],
                });
                LineChart {
                    title: format!(
                        "sick server's share: {} ms late, recovered at {} s; {}",
                        VERY_LATE.as_millis(),
                        self.settings.sick_seconds,
                        case.text()
                    ),
                    x_label: "seconds since the run started".into(),
                    y_label: "share of the requests (%)".into(),
                    series,
                    log_y: false,
                }
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
    use std::time::Duration;

    const ROWS: [&str; 4] = [
        "herdsman peak-ewma",
        "herdsman round-robin",
        "HAProxy leastconn",
        "nginx least_conn",
    ];

    fn session() -> Session {
        let args: super::super::GrayArgs = parse_args("gray", &["--short"]).unwrap();
        let settings = Settings::resolve(&args, Path::new("/w")).unwrap();
        let rows = ROWS.iter().map(|r| r.to_string()).collect();
        Session::new(RunFacts::sample("gray"), settings, rows)
    }

    /// A 10 s run (sample_report's) at `rate` with `p99_ms`, `sick` of 1,000 requests at the
    /// sick server.
    fn run(row: usize, scenario: Scenario, rate: f64, p99_ms: f64, sick: u64) -> GrayRun {
        let mut wrk = sample_report(rate);
        wrk.p99_us = p99_ms * 1e3;
        GrayRun {
            round: 1,
            workers: 1,
            connections: 50,
            scenario,
            row,
            seconds: 1,
            cpu: CpuTime {
                user: Duration::from_millis(100),
                system: Duration::from_millis(300),
            },
            wrk,
            served: Served([500 - sick / 2, 500 - sick / 2, sick]),
            timeline: None,
        }
    }

    #[test]
    fn the_targets_are_judged_for_the_first_method() {
        let mut s = session();
        s.runs.push(run(0, Scenario::Late200, 50_000.0, 3.0, 5));
        s.runs.push(run(0, Scenario::Removed, 51_000.0, 1.0, 0));
        s.runs.push(run(0, Scenario::Healthy, 52_000.0, 1.0, 333));
        s.runs.push(run(1, Scenario::Healthy, 50_000.0, 1.0, 333));
        s.runs.push(run(2, Scenario::Late200, 57_500.0, 194.0, 20));
        let judged = s.judge();
        let verdict = |start: &str| {
            let j = judged
                .iter()
                .find(|j| {
                    j.target
                        .starts_with(&format!("herdsman peak-ewma: {start}"))
                })
                .unwrap_or_else(|| panic!("{start}: {judged:#?}"));
            (j.figure.clone(), j.verdict.clone())
        };
        let (figure, met) = verdict("200 ms late: requests/s ≥ HAProxy leastconn's");
        assert_eq!(figure, "0.87 × HAProxy leastconn's");
        assert!(met.starts_with("**NOT MET**"), "{met}");
        assert_eq!(verdict("200 ms late: requests/s ≥ 0.95 × its own").1, "met");
        let (figure, met) = verdict("200 ms late: p99 ≤ 2 × its own with all healthy");
        assert_eq!(figure, "3.00 × all healthy");
        assert!(met.starts_with("**NOT MET**"), "{met}");
        assert_eq!(verdict("200 ms late: the slow server's share").0, "0.50%");
        assert_eq!(verdict("200 ms late: the slow server's share").1, "met");
        assert_eq!(verdict("all healthy: requests/s").1, "met");
        // 400 ms of CPU over 520,000 and 500,000 requests.
        assert_eq!(verdict("all healthy: CPU per request").1, "met");
        assert_eq!(verdict("recovery").1, "not measured");

        let md = s.render(Some(Path::new("/x/gray-short.png")));
        assert_contains_all(
            &md,
            &[
                "**Short run**",
                "## Targets (issue 39)",
                "### One server 200 ms late\n",
                "#### 50 connections, 1 worker, 1 s runs\n",
                "| HAProxy leastconn | 57,500 | 0.80 | 194 | 2.0% | 0.7 | 0.2 | 0.5 | 0 | 0 |",
                "| herdsman peak-ewma | 52,000 | 0.80 | 1.00 | 33.3% |",
                "| herdsman peak-ewma | 51,000 | 0.80 | 1.00 | – |",
                "![the sick server's share",
                "zone backend 1m",
                "## Every run",
            ],
        );
        let summary = s.summary();
        assert!(
            summary.contains("herdsman peak-ewma: 200 ms late"),
            "{summary}"
        );
    }

    #[test]
    fn the_recovery_is_judged_over_the_window_or_not_at_all() {
        let timeline = |recovered: bool, after: f64| {
            let mut samples = Vec::new();
            let mut counts = [0u64; SERVERS];
            for tenth in 0..=((2.0 + after) * 10.0) as u32 {
                let t = f64::from(tenth) / 10.0;
                samples.push((t, counts));
                counts[0] += 10;
                counts[1] += 10;
                counts[2] += if recovered && t >= 3.0 { 10 } else { 0 };
            }
            Timeline {
                recovered_at: Some(2.0),
                samples,
            }
        };
        let mut recovering = run(0, Scenario::Recovering, 50_000.0, 3.0, 5);
        recovering.timeline = Some(timeline(true, 10.0));
        assert_eq!(recovering.recovery(), Some(2.0));
        recovering.timeline = Some(timeline(false, 10.0));
        assert_eq!(recovering.recovery(), Some(f64::INFINITY));
        recovering.timeline = Some(timeline(false, 3.0));
        assert_eq!(recovering.recovery(), None);
        assert_eq!(
            recovery_cell(&[2.0, 4.0, f64::INFINITY]),
            "3 s (2 s–4 s); not within the run in 1 of 3"
        );
        assert_eq!(recovery_cell(&[f64::INFINITY]), "not within the run");

        let mut s = session();
        s.runs.push(recovering.clone());
        let judged = s.judge_recovery(Case {
            connections: 50,
            workers: 1,
        });
        assert!(
            judged.verdict.starts_with("not measured: 1 s recorded"),
            "{judged:?}"
        );
        recovering.timeline = Some(timeline(true, 10.0));
        s.runs = vec![recovering];
        let judged = s.judge_recovery(Case {
            connections: 50,
            workers: 1,
        });
        assert_eq!(
            (judged.figure.as_str(), judged.verdict.as_str()),
            ("2 s", "met")
        );
        let series = s.share_series(
            0,
            Case {
                connections: 50,
                workers: 1,
            },
        );
        assert_eq!(series.points.len(), 12);
        assert_eq!(series.points[0], (0.5, 0.0));
        assert!((series.points[11].1 - 100.0 / 3.0).abs() < 1e-9);
    }
}
