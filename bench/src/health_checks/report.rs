//! What `health-checks` prints and writes: per scenario, the checks received per second, how
//! many servers were checked and how often, how the checks spread over time (the busiest 10 ms
//! against the mean, and against all of them at one instant), the checker's CPU (its thread from
//! /proc, and its metric) and herdsman's, per second and per check, the state changes and
//! snapshots, descriptors and TIME_WAIT; every run; a plot of checks per 10 ms.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::server::Arrival;
use super::settings::{Scenario, Settings};
use crate::kit::markdown::{spread_cell, thousands, write_details_table};
use crate::kit::plot::{LineChart, Series};
use crate::kit::procstat::{CpuTime, TimeWait};
use crate::kit::results::{write_plot_link, Results, RunFacts, Trouble};
use crate::kit::stats::spread;

/// The width of a bin in which checks are counted to see how they spread.
pub const BIN: Duration = Duration::from_millis(10);

/// One measured run: one scenario against a fresh herdsman.
#[derive(Debug, Clone)]
pub struct Run {
    pub round: u32,
    pub scenario: Scenario,
    /// The measured window.
    pub seconds: f64,
    /// Checks the server received in the window.
    pub probes: usize,
    /// Servers checked at least once in the window, and the fewest and most checks of one.
    pub probed_servers: u32,
    pub fewest: u32,
    pub most: u32,
    /// Checks in each 10 ms of the window.
    pub bins: Vec<u32>,
    /// herdsman's CPU in the window, and its checker thread's (/proc).
    pub process: CpuTime,
    pub checker: Option<CpuTime>,
    /// The checker's CPU in the window by its metric; None from a build without it.
    pub checker_metric: Option<f64>,
    /// Snapshots published in the window (the generation's growth).
    pub snapshots: Option<f64>,
    /// Servers checks took out, and brought back, in the window.
    pub downs: usize,
    pub ups: usize,
    /// herdsman's open descriptors: the most seen, sampled every half second.
    pub peak_descriptors: u64,
    /// Connections to the server's port in TIME_WAIT at the window's end.
    pub time_wait: TimeWait,
    /// The slower of the two `/metrics` scrapes (outside the window).
    pub scrape: Duration,
}

impl Run {
    pub fn probes_per_second(&self) -> f64 {
        self.probes as f64 / self.seconds
    }

    /// The busiest 10 ms's checks ÷ the mean's.
    pub fn busiest_over_mean(&self) -> f64 {
        let busiest = self.bins.iter().copied().max().unwrap_or(0);
        f64::from(busiest) / self.mean_per_bin()
    }

    pub fn busiest(&self) -> u32 {
        self.bins.iter().copied().max().unwrap_or(0)
    }

    pub fn mean_per_bin(&self) -> f64 {
        self.probes as f64 / self.bins.len().max(1) as f64
    }

    /// CPUs (1.0: one busy the whole window) and µs per check of a CPU time.
    fn share(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() / self.seconds
    }

    fn per_probe_us(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1e6 / self.probes.max(1) as f64
    }

    pub fn checker_share(&self) -> Option<f64> {
        self.checker.map(|cpu| self.share(cpu.total()))
    }

    pub fn checker_us(&self) -> Option<f64> {
        self.checker.map(|cpu| self.per_probe_us(cpu.total()))
    }

    pub fn metric_us(&self) -> Option<f64> {
        self.checker_metric
            .map(|seconds| self.per_probe_us(Duration::from_secs_f64(seconds.max(0.0))))
    }

    pub fn process_share(&self) -> f64 {
        self.share(self.process.total())
    }

    pub fn process_us(&self) -> f64 {
        self.per_probe_us(self.process.total())
    }

    /// herdsman's CPU outside the checker thread (workers, admin API, log), in CPUs.
    pub fn elsewhere_share(&self) -> Option<f64> {
        self.checker
            .map(|checker| self.share(self.process.total().saturating_sub(checker.total())))
    }
}

/// Checks per `BIN` from `from_us` (inclusive) to `to_us` (exclusive), whole bins only.
pub fn bins(arrivals: &[Arrival], from_us: u64, to_us: u64) -> Vec<u32> {
    let width = BIN.as_micros() as u64;
    let count = (to_us.saturating_sub(from_us) / width) as usize;
    let mut bins = vec![0u32; count];
    for arrival in arrivals {
        if arrival.at_us < from_us {
            continue;
        }
        if let Some(bin) = bins.get_mut(((arrival.at_us - from_us) / width) as usize) {
            *bin += 1;
        }
    }
    bins
}

/// Checks per server among `servers`, from the arrivals: (servers checked, fewest, most).
pub fn per_server(arrivals: &[Arrival], servers: u32) -> (u32, u32, u32) {
    let mut counts = vec![0u32; servers as usize];
    for arrival in arrivals {
        if let Some(count) = counts.get_mut(arrival.server as usize) {
            *count += 1;
        }
    }
    let checked = counts.iter().filter(|&&c| c > 0).count() as u32;
    let fewest = counts.iter().copied().min().unwrap_or(0);
    let most = counts.iter().copied().max().unwrap_or(0);
    (checked, fewest, most)
}

/// Everything the results file says.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    /// herdsman's configuration, as written for the first run (the servers cut short).
    pub config: Option<String>,
    pub runs: Vec<Run>,
    pub failure: Option<String>,
}

impl Session {
    fn runs_of(&self, scenario: Scenario) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(move |r| r.scenario == scenario)
    }

    /// A table cell of `value` over the runs of `scenario`: median, and min–max.
    fn cell(
        &self,
        scenario: Scenario,
        value: impl Fn(&Run) -> Option<f64>,
        format: fn(f64) -> String,
    ) -> String {
        let values: Vec<f64> = self.runs_of(scenario).filter_map(value).collect();
        spread_cell(spread(&values), format)
    }

    /// The fewest and most checks of one server in a run, over the runs of `scenario`: "19–21".
    fn fewest_to_most(&self, scenario: Scenario) -> String {
        let runs: Vec<&Run> = self.runs_of(scenario).collect();
        match (
            runs.iter().map(|r| r.fewest).min(),
            runs.iter().map(|r| r.most).max(),
        ) {
            (Some(fewest), Some(most)) => format!("{fewest}–{most}"),
            _ => "–".to_string(),
        }
    }

    fn write_checks(&self, md: &mut String) {
        let s = &self.settings;
        let instant = f64::from(s.servers);
        let _ = writeln!(
            md,
            "## The checks and how they spread\n\nChecks received per second; servers checked \
             in the window (of {servers}) and the fewest and most checks of one server in any \
             run; checks in \
             the busiest {bin} ms of the window, the mean per {bin} ms, and their ratio. Were \
             every server checked at one instant, once per interval, that instant's {bin} ms would \
             hold {instant} checks, {ratio:.0} × the mean.\n",
            servers = thousands(instant),
            bin = BIN.as_millis(),
            instant = thousands(instant),
            ratio = s.interval.as_secs_f64() / BIN.as_secs_f64(),
        );
        let _ = writeln!(
            md,
            "| scenario | checks/s | servers checked | checks per server | busiest {bin} ms | mean per {bin} ms | busiest ÷ mean |\n|---|---:|---:|---:|---:|---:|---:|",
            bin = BIN.as_millis()
        );
        for &scenario in &self.settings.scenarios {
            let _ = writeln!(
                md,
                "| {scenario} | {} | {} | {} | {} | {} | {} |",
                self.cell(scenario, |r| Some(r.probes_per_second()), thousands),
                self.cell(scenario, |r| Some(f64::from(r.probed_servers)), thousands),
                self.fewest_to_most(scenario),
                self.cell(scenario, |r| Some(f64::from(r.busiest())), thousands),
                self.cell(scenario, |r| Some(r.mean_per_bin()), one_decimal),
                self.cell(scenario, |r| Some(r.busiest_over_mean()), two_decimals),
            );
        }
        let _ = writeln!(md);
    }

    fn write_cpu(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## CPU\n\nThe checker thread (`herdsman-health`, from /proc/PID/task/TID/stat, \
             10 ms ticks) and, beside it, the same thread's CPU by the metric \
             `herdsman_health_checker_cpu_seconds_total` (scraped before and after the window; \
             – from a build without it); the whole herdsman process (/proc/PID/stat), nothing \
             else asking anything of it; each in CPUs (1.00: one CPU busy all the window) and in \
             µs per check received.\n"
        );
        let _ = writeln!(
            md,
            "| scenario | checker CPUs | checker µs/check | metric µs/check | herdsman CPUs | herdsman µs/check | herdsman user / system CPUs | herdsman outside the checker, CPUs |\n|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        for &scenario in &self.settings.scenarios {
            let user = self.cell(
                scenario,
                |r| Some(r.process.user.as_secs_f64() / r.seconds),
                three_decimals,
            );
            let system = self.cell(
                scenario,
                |r| Some(r.process.system.as_secs_f64() / r.seconds),
                three_decimals,
            );
            let _ = writeln!(
                md,
                "| {scenario} | {} | {} | {} | {} | {} | {user} / {system} | {} |",
                self.cell(scenario, Run::checker_share, three_decimals),
                self.cell(scenario, Run::checker_us, two_decimals),
                self.cell(scenario, Run::metric_us, two_decimals),
                self.cell(scenario, |r| Some(r.process_share()), three_decimals),
                self.cell(scenario, |r| Some(r.process_us()), two_decimals),
                self.cell(scenario, Run::elsewhere_share, three_decimals),
            );
        }
        let _ = writeln!(md);
    }

    fn write_changes(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## State changes, snapshots and sockets\n\nServers the checks took out and brought \
             back in the window (herdsman's log), snapshots published per second (the growth of \
             `herdsman_config_generation`), herdsman's open descriptors (the most seen, sampled \
             every half second: each check in flight holds one, so it grows with the server's \
             answer time and with any pause of the checker), connections to the server's port in \
             TIME_WAIT at the window's \
             end, held by herdsman's side (it closed first) and by the server's, and the slower \
             `/metrics` scrape.\n"
        );
        let _ = writeln!(
            md,
            "| scenario | taken out | brought back | snapshots/s | descriptors | TIME_WAIT herdsman / server | /metrics took |\n|---|---:|---:|---:|---:|---:|---:|"
        );
        for &scenario in &self.settings.scenarios {
            let _ = writeln!(
                md,
                "| {scenario} | {} | {} | {} | {} | {} / {} | {} |",
                self.cell(scenario, |r| Some(r.downs as f64), thousands),
                self.cell(scenario, |r| Some(r.ups as f64), thousands),
                self.cell(
                    scenario,
                    |r| r.snapshots.map(|s| s / r.seconds),
                    one_decimal
                ),
                self.cell(scenario, |r| Some(r.peak_descriptors as f64), thousands),
                self.cell(
                    scenario,
                    |r| Some(r.time_wait.client_side as f64),
                    thousands
                ),
                self.cell(
                    scenario,
                    |r| Some(r.time_wait.server_side as f64),
                    thousands
                ),
                self.cell(
                    scenario,
                    |r| Some(r.scrape.as_secs_f64() * 1e3),
                    |v| format!("{v:.0} ms")
                ),
            );
        }
        let _ = writeln!(md);
    }

    fn write_runs(&self, md: &mut String) {
        let rows = self.runs.iter().map(|r| {
            let optional = |value: Option<f64>, format: fn(f64) -> String| {
                value.map_or("–".to_string(), format)
            };
            format!(
                "| {} | {} | {:.1} | {} | {} | {}–{} | {} | {:.2} | {} | {} | {} | {:.3} | {:.2} | {} | {} / {} | {} |",
                r.round,
                r.scenario,
                r.seconds,
                thousands(r.probes as f64),
                thousands(f64::from(r.probed_servers)),
                r.fewest,
                r.most,
                r.busiest(),
                r.busiest_over_mean(),
                optional(r.checker_share(), three_decimals),
                optional(r.checker_us(), two_decimals),
                optional(r.metric_us(), two_decimals),
                r.process_share(),
                r.process_us(),
                optional(r.snapshots, thousands),
                r.downs,
                r.ups,
                thousands(r.peak_descriptors as f64),
            )
        });
        write_details_table(
            md,
            "Every run, in order",
            "| round | scenario | seconds | checks | servers checked | checks per server | busiest 10 ms | busiest ÷ mean | checker CPUs | checker µs/check | metric µs/check | herdsman CPUs | herdsman µs/check | snapshots | out / back | descriptors |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
    }
}

fn one_decimal(value: f64) -> String {
    format!("{value:.1}")
}

fn two_decimals(value: f64) -> String {
    format!("{value:.2}")
}

fn three_decimals(value: f64) -> String {
    format!("{value:.3}")
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.runs.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let s = &self.settings;
        let mut text = format!(
            "health-checks: {} servers checked every {:?}, {} s per run, {} round(s)\n",
            thousands(f64::from(s.servers)),
            s.interval,
            s.seconds,
            s.rounds
        );
        let _ = writeln!(
            text,
            "{:<9} {:>9} {:>8} {:>15} {:>13} {:>14} {:>14} {:>12}",
            "scenario",
            "checks/s",
            "checked",
            "busiest÷mean",
            "checker CPUs",
            "checker µs/ck",
            "herdsman CPUs",
            "snapshots/s"
        );
        for &scenario in &self.settings.scenarios {
            let median = |value: &dyn Fn(&Run) -> Option<f64>, format: fn(f64) -> String| {
                let values: Vec<f64> = self.runs_of(scenario).filter_map(value).collect();
                spread(&values).map_or("–".to_string(), |sp| format(sp.median))
            };
            let _ = writeln!(
                text,
                "{:<9} {:>9} {:>8} {:>15} {:>13} {:>14} {:>14} {:>12}",
                scenario.to_string(),
                median(&|r| Some(r.probes_per_second()), thousands),
                median(&|r| Some(f64::from(r.probed_servers)), thousands),
                median(&|r| Some(r.busiest_over_mean()), two_decimals),
                median(&Run::checker_share, three_decimals),
                median(&Run::checker_us, two_decimals),
                median(&|r| Some(r.process_share()), three_decimals),
                median(&|r| r.snapshots.map(|n| n / r.seconds), one_decimal),
            );
        }
        let _ = writeln!(
            text,
            "all at one instant would put {} checks in one {} ms: {:.0} × the mean",
            thousands(f64::from(s.servers)),
            BIN.as_millis(),
            s.interval.as_secs_f64() / BIN.as_secs_f64()
        );
        Trouble::new(&[], self.runs.len(), &self.failure).write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let s = &self.settings;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# Health checks: {} servers at a {:?} interval\n",
            thousands(f64::from(s.servers)),
            s.interval
        );
        let _ = writeln!(
            md,
            "herdsman (one worker, no client traffic) with one pool of {servers} servers, each at \
             a loopback address of its own (127.0.x.y) on one port, checked over HTTP \
             (`GET /healthz`, `[pool.health]` with interval {interval:?} and the other keys at \
             their defaults: timeout 1 s, rise 2, fall 3) or TCP. Every address reaches one server, a \
             thread of this program listening on 0.0.0.0 that answers each check and closes \
             (`Connection: close`), noting when it came and to which address. Scenarios: \
             **steady** (every check passes), **changing** ({failing} servers' checks fail — \
             answered 503 — at a time, another {failing} every {rotation:?}, so that servers go \
             down and come back all through the window), and **tcp** (`check = \"tcp\"`: a \
             connection that opens passes, and herdsman closes it at once). Each run has a \
             herdsman of its own, waits {warm:?} (every server checked once, the start \
             settled), then measures {seconds} s; each round runs every scenario, in an order \
             that turns from round to round, {rounds} round(s). Figures are the median over \
             rounds, with the range.\n",
            servers = thousands(f64::from(s.servers)),
            interval = s.interval,
            failing = s.failing,
            rotation = s.rotation(),
            warm = s.warm_up(),
            seconds = s.seconds,
            rounds = s.rounds,
        );
        self.facts.write_markdown(&mut md);
        Trouble::new(&[], self.runs.len(), &self.failure).write_markdown(&mut md);
        self.write_checks(&mut md);
        write_plot_link(&mut md, plot, "checks received per 10 ms over one second");
        self.write_cpu(&mut md);
        self.write_changes(&mut md);
        self.write_runs(&mut md);
        if let Some(config) = &self.config {
            let _ = writeln!(
                md,
                "## herdsman's configuration (as written for the first run)\n\n```toml\n{config}```\n"
            );
        }
        md
    }

    /// Checks per 10 ms over the last second of each scenario's first run.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let per_second = (1.0 / BIN.as_secs_f64()) as usize;
        let series = self
            .settings
            .scenarios
            .iter()
            .filter_map(|&scenario| {
                let run = self.runs_of(scenario).next()?;
                let last = &run.bins[run.bins.len().saturating_sub(per_second)..];
                Some(Series {
                    name: scenario.to_string(),
                    points: last
                        .iter()
                        .enumerate()
                        .map(|(at, &count)| (at as f64 * BIN.as_secs_f64() * 1e3, f64::from(count)))
                        .collect(),
                })
            })
            .collect();
        LineChart {
            title: format!(
                "{} servers checked every {:?}: checks received per {} ms, the last second",
                thousands(f64::from(self.settings.servers)),
                self.settings.interval,
                BIN.as_millis()
            ),
            x_label: "ms".into(),
            y_label: format!("checks per {} ms", BIN.as_millis()),
            series,
            log_y: false,
        }
        .write_png(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(at_us: u64, server: u32) -> Arrival {
        Arrival { at_us, server }
    }

    #[test]
    fn checks_are_counted_per_bin_within_the_window() {
        let arrivals = [
            arrival(5_000, 0),
            arrival(10_000, 1),
            arrival(10_500, 2),
            arrival(19_999, 0),
            arrival(20_000, 1),
            arrival(45_000, 2),
        ];
        // From 10 ms to 40 ms: three bins; the first arrival is before, the last after.
        assert_eq!(bins(&arrivals, 10_000, 40_000), [3, 1, 0]);
        assert_eq!(per_server(&arrivals, 4), (3, 0, 2));
    }
}
