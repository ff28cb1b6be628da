//! The figures of a run — per attack, the legitimate clients' requests/s and p99 against the
//! baseline, how the attacker's connections ended, after how many frames and how long, and what
//! reached the attack's server — as a table (printed) and a results file.

use std::fmt::Write as _;
use std::time::Duration;

use super::attacks::{Attack, AttackTally};
use super::legit::Legit;
use super::settings::Settings;
use crate::kit::markdown::thousands;
use crate::kit::results::RunFacts;
use crate::kit::stats::percentile_of;

/// One attack's run.
#[derive(Debug, Clone)]
pub struct AttackRun {
    pub attack: Attack,
    pub legit: Legit,
    pub tally: AttackTally,
    /// Requests the attack's own server answered during the attack.
    pub server_requests: u64,
    /// herdsman's `herdsman_worker_http2_floods_total` grew by this much.
    pub floods: f64,
}

/// A whole run.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    pub baseline: Option<Legit>,
    pub runs: Vec<AttackRun>,
    pub failure: Option<String>,
}

/// The table's heading row.
pub const HEADING: &str = "| attack | legit requests/s (× baseline) | legit p99 ms (× baseline) | legit failed | attacker connections | how they ended | frames before the end (median · most) | time to the end (median) | server requests from the attack | floods counted |";

fn ratio(value: f64, baseline: f64) -> String {
    if baseline > 0.0 {
        format!("{:.2}×", value / baseline)
    } else {
        "–".into()
    }
}

fn median_and_most(values: &[f64]) -> (f64, f64) {
    let median = percentile_of(values, 50.0).unwrap_or_default();
    let most = values.iter().copied().fold(0.0, f64::max);
    (median, most)
}

impl AttackRun {
    /// Its row of the table, its figures against `baseline`.
    pub fn row(&self, baseline: &Legit) -> String {
        let frames: Vec<f64> = self.tally.endings.iter().map(|e| e.frames as f64).collect();
        let times: Vec<f64> = self
            .tally
            .endings
            .iter()
            .map(|e| e.took.as_secs_f64())
            .collect();
        let (frames_median, frames_most) = median_and_most(&frames);
        let (time_median, _) = median_and_most(&times);
        let ways: Vec<String> = self
            .tally
            .ways()
            .iter()
            .map(|(how, n)| format!("{how} ×{n}"))
            .collect();
        let frames = if self.attack.holds() {
            "–".to_string()
        } else {
            format!("{} · {}", thousands(frames_median), thousands(frames_most))
        };
        format!(
            "| {} | {} ({}) | {:.2} ({}) | {} | {} | {} | {} | {} | {} | {} |",
            self.attack.name(),
            thousands(self.legit.per_second),
            ratio(self.legit.per_second, baseline.per_second),
            self.legit.p99_ms,
            ratio(self.legit.p99_ms, baseline.p99_ms),
            self.legit.failed,
            self.tally.endings.len(),
            ways.join(", "),
            frames,
            format_time(Duration::from_secs_f64(time_median)),
            self.server_requests,
            self.floods,
        )
    }
}

fn format_time(time: Duration) -> String {
    if time < Duration::from_secs(1) {
        format!("{:.1} ms", time.as_secs_f64() * 1000.0)
    } else {
        format!("{:.1} s", time.as_secs_f64())
    }
}

impl Session {
    /// The table: the baseline, then a row per attack.
    pub fn table(&self) -> String {
        let mut table = format!("{HEADING}\n|---|---|---|---|---|---|---|---|---|---|\n");
        let Some(baseline) = &self.baseline else {
            return table;
        };
        let _ = writeln!(
            table,
            "| none (baseline) | {} | {:.2} | {} | – | – | – | – | – | – |",
            thousands(baseline.per_second),
            baseline.p99_ms,
            baseline.failed
        );
        for run in &self.runs {
            table.push_str(&run.row(baseline));
            table.push('\n');
        }
        table
    }

    /// The results file.
    pub fn markdown(&self) -> String {
        let settings = &self.settings;
        let mut md =
            String::from("# HTTP/2 attacks from one connection, beside legitimate clients\n\n");
        if settings.short {
            md.push_str(
                "**Short run** (`--short`): a few seconds per attack, to check the benchmark \
                 works; its figures are no measurement.\n\n",
            );
        }
        let _ = writeln!(
            md,
            "herdsman (release build, one worker, defaults plus `h2c = true`, \
             `max_requests_per_connection` raised since h2load does not reconnect after a \
             GOAWAY{}) in front of \
             herdsman-bench's own HTTP/1.1 backend. {} legitimate HTTP/2 clients (h2load, one \
             connection each, one request in flight) for {} s alone, then for {} s beside each \
             attack in turn. Each attack runs from one connection at a time, opened again as soon \
             as herdsman ends it; its requests carry `:authority: attack`, which a route sends to \
             a backend of its own, so the requests it caused at a server are counted apart. \
             requests/s and p99 are from h2load's per-request log; \"frames before the end\" are \
             the attack frames written on a connection before its GOAWAY (or reset) was read, in \
             batches of 20 a millisecond apart (rapid reset after 5 ms, CONTINUATION and the \
             HPACK attacks one frame at a time, a millisecond apart). The HPACK bomb's first stream puts its 4,000-byte field \
             in the table with an ordinary request, which may reach the server before the bomb \
             on the next stream ends the connection.\n",
            settings
                .slow_reader_window
                .map(|w| format!(", `response_min_rate_window = \"{w}\"`"))
                .unwrap_or_default(),
            settings.clients,
            settings.seconds,
            settings.seconds,
        );
        self.facts.write_markdown(&mut md);
        md.push_str(&self.table());
        if let Some(failure) = &self.failure {
            let _ = writeln!(md, "\n## Stopped early\n\n{failure}");
        }
        md
    }
}
