//! The figures of a run — per attack, the legitimate clients' requests/s and p99 against the
//! baseline, how the attacker's connections ended, after how many frames and how long, and what
//! reached the attack's server — as a table (printed) and a results file.

use std::fmt::Write as _;
use std::time::Duration;

use super::attacks::{Attack, AttackTally};
use super::legit::Legit;
use super::settings::Settings;
use crate::kit::cpu::CpuSplit;
use crate::kit::markdown::thousands;
use crate::kit::results::RunFacts;
use crate::kit::stats::{percentile_of, spread, Spread};

/// The legitimate clients' periods of one condition (the baseline, or beside one attack), a
/// period a round, with where the CPU went in each.
#[derive(Debug, Clone, Default)]
pub struct Periods {
    pub legit: Vec<Legit>,
    pub cpu: Vec<CpuSplit>,
}

impl Periods {
    pub fn per_second(&self) -> Spread {
        self.spread(|l| l.per_second)
    }

    pub fn p99_ms(&self) -> Spread {
        self.spread(|l| l.p99_ms)
    }

    fn spread(&self, value: impl Fn(&Legit) -> f64) -> Spread {
        let values: Vec<f64> = self.legit.iter().map(value).collect();
        spread(&values).unwrap_or(Spread {
            median: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
            count: 0,
        })
    }

    fn failed(&self) -> u64 {
        self.legit.iter().map(|l| l.failed).sum()
    }

    /// The median over rounds of a CPU figure.
    fn cpu_median(&self, value: impl Fn(&CpuSplit) -> f64) -> f64 {
        let values: Vec<f64> = self.cpu.iter().map(value).collect();
        spread(&values).map_or(f64::NAN, |s| s.median)
    }
}

/// An attack alone, no legitimate client beside it: what its connections cost herdsman.
#[derive(Debug, Clone, Copy)]
pub struct Alone {
    pub connections: usize,
    /// herdsman's CPU time (user + system) over the period, less its CPU time over as long
    /// with nothing to do.
    pub herdsman_cpu: Duration,
}

/// One attack's runs, a period a round.
#[derive(Debug, Clone)]
pub struct AttackRun {
    pub attack: Attack,
    pub periods: Periods,
    /// The legitimate clients alone just before each of its periods: its control. Beside
    /// attacks one after another, the clients' figures drift over a round (the attackers' closed
    /// connections and the machine's state accumulate), so each period is judged against the
    /// period right before it, not against the round's first.
    pub before: Vec<Legit>,
    /// Every round's connections.
    pub tally: AttackTally,
    /// Requests the attack's own server answered during the attack, over the rounds.
    pub server_requests: u64,
    /// herdsman's `herdsman_worker_http2_floods_total` grew by this much, over the rounds.
    pub floods: f64,
    pub alone: Option<Alone>,
}

/// A whole run.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    pub baseline: Periods,
    /// herdsman's CPU time over `alone_seconds` with nothing to do.
    pub idle_cpu: Option<Duration>,
    pub runs: Vec<AttackRun>,
    pub failure: Option<String>,
}

/// The table's heading row.
pub const HEADING: &str = "| attack | legit requests/s, median (lowest–highest) | × the control before it, median (lowest–highest) | legit p99 ms, median (lowest–highest) | × the control before it | legit failed | attacker connections | how they ended | frames before the end (median · most) | time to the end (median) | server requests from the attack | floods counted |";

fn median_and_most(values: &[f64]) -> (f64, f64) {
    let median = percentile_of(values, 50.0).unwrap_or_default();
    let most = values.iter().copied().fold(0.0, f64::max);
    (median, most)
}

/// "25,188 (24,040–26,204)".
fn requests_cell(spread: &Spread) -> String {
    format!(
        "{} ({}–{})",
        thousands(spread.median),
        thousands(spread.min),
        thousands(spread.max)
    )
}

/// "3.54 (3.29–4.08)".
fn p99_cell(spread: &Spread) -> String {
    format!("{:.2} ({:.2}–{:.2})", spread.median, spread.min, spread.max)
}

impl AttackRun {
    /// The median over rounds of its period's figure over the control period's before it.
    fn paired_ratio(&self, value: impl Fn(&Legit) -> f64) -> String {
        let ratios: Vec<f64> = self
            .periods
            .legit
            .iter()
            .zip(&self.before)
            .filter(|(_, before)| value(before) > 0.0)
            .map(|(during, before)| value(during) / value(before))
            .collect();
        match spread(&ratios) {
            Some(ratios) => format!(
                "{:.2}× ({:.2}–{:.2})",
                ratios.median, ratios.min, ratios.max
            ),
            None => "–".into(),
        }
    }

    /// Its row of the table, each figure against the control period right before it.
    pub fn row(&self) -> String {
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
        let frames = if !self.attack.floods() {
            "–".to_string()
        } else {
            format!("{} · {}", thousands(frames_median), thousands(frames_most))
        };
        let (per_second, p99) = (self.periods.per_second(), self.periods.p99_ms());
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.attack.name(),
            requests_cell(&per_second),
            self.paired_ratio(|l| l.per_second),
            p99_cell(&p99),
            self.paired_ratio(|l| l.p99_ms),
            self.periods.failed(),
            self.tally.endings.len(),
            ways.join(", "),
            frames,
            format_time(Duration::from_secs_f64(time_median)),
            self.server_requests,
            self.floods,
        )
    }

    /// herdsman's CPU time per attacking connection with the attack alone, µs; None for an
    /// attack that holds a connection or two.
    fn herdsman_per_connection(&self) -> Option<f64> {
        let alone = self.alone?;
        if self.attack.holds() || alone.connections == 0 {
            return None;
        }
        Some(alone.herdsman_cpu.as_secs_f64() * 1e6 / alone.connections as f64)
    }
}

/// The CPU table's heading row.
const CPU_HEADING: &str = "| | herdsman | the attacker (this program) | h2load | the two servers | kernel irq + softirq | other processes | idle | herdsman per attacking connection, the attack alone |";

/// A row of the CPU table: `periods`' cells in CPUs (medians over rounds), then
/// `per_connection` in µs.
fn cpu_row(label: &str, periods: &Periods, per_connection: Option<f64>) -> String {
    let fields: [fn(&CpuSplit) -> f64; 7] = [
        |c| c.herdsman,
        |c| c.this_program,
        |c| c.wrk,
        |c| c.backend + c.slow_clients,
        |c| c.interrupts,
        |c| c.other,
        |c| c.idle,
    ];
    let cells: Vec<String> = fields
        .iter()
        .map(|field| format!("{:.2}", periods.cpu_median(field)))
        .collect();
    let per_connection = per_connection.map_or("–".into(), |us| format!("{us:.0} µs"));
    format!("| {label} | {} | {per_connection} |", cells.join(" | "))
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
        let mut table =
            format!("{HEADING}\n|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|\n");
        if self.baseline.legit.is_empty() {
            return table;
        }
        let _ = writeln!(
            table,
            "| none (baseline) | {} | – | {} | – | {} | – | – | – | – | – | – |",
            requests_cell(&self.baseline.per_second()),
            p99_cell(&self.baseline.p99_ms()),
            self.baseline.failed()
        );
        for run in &self.runs {
            table.push_str(&run.row());
            table.push('\n');
        }
        table
    }

    /// Where the CPU went in each period, and what each attacking connection cost herdsman.
    pub fn cpu_table(&self) -> String {
        let mut table = format!("{CPU_HEADING}\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        if self.baseline.cpu.is_empty() {
            return table;
        }
        let _ = writeln!(
            table,
            "{}",
            cpu_row("none (baseline)", &self.baseline, None)
        );
        for run in &self.runs {
            let row = cpu_row(
                run.attack.name(),
                &run.periods,
                run.herdsman_per_connection(),
            );
            let _ = writeln!(table, "{row}");
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
             GOAWAY{}) in front of herdsman-bench's own HTTP/1.1 backend. {} legitimate HTTP/2 \
             clients (h2load, one connection each, one request in flight) for {} s alone (the \
             baseline), then for {} s beside each attack in turn, each attack after a control \
             period of the clients alone (the baseline before the first); {} rounds of that, \
             each condition's figures the median over its rounds (with the lowest and highest: \
             on this shared 2-CPU machine two periods of the same condition differ by up to a \
             tenth). Each ratio is the median over rounds of an attack period's figure over its \
             control's: the clients' figures drift over a round of attacks (in one run with a \
             single baseline a round, the later attacks of each round measured up to a tenth \
             lower whatever they were, a stream never read among them), so each attack is \
             judged against the clients just before it. Each attack runs from one connection at a time, opened again as soon as \
             herdsman ends it but at most {} a second (faster, the connections themselves are \
             the attack: a bare connect-and-close loop at some 11,000 a second cut h2load's \
             requests/s here to about 40%, whatever a proxy does with them); the first row, \
             connections alone at that pace (the preface and SETTINGS, then closed), shows what \
             the connections cost without an attack. The attack's requests carry `:authority: \
             attack`, which a route sends to a backend of its own, so the requests it caused at \
             a server are counted apart. requests/s and p99 are from h2load's per-request log; \
             \"frames before the end\" are the attack frames written on a connection before its \
             GOAWAY (or reset) was read, in batches of 20 a millisecond apart (rapid reset after \
             5 ms, CONTINUATION and the HPACK attacks one frame at a time, a millisecond apart). \
             The HPACK bomb's every block puts a 4,000-byte field in the table and refers to it \
             a hundred times (400 KB decoded from 4 KB).\n",
            settings
                .slow_reader_window
                .map(|w| format!(", `response_min_rate_window = \"{w}\"`"))
                .unwrap_or_default(),
            settings.clients,
            settings.seconds,
            settings.seconds,
            settings.rounds,
            settings.reconnects_per_second,
        );
        self.facts.write_markdown(&mut md);
        md.push_str(&self.table());
        let _ = writeln!(
            md,
            "\n## Where the CPU went (CPUs of {}, medians over rounds)\n\n\
             Each process tree's utime + stime, the attacker's from this program's own threads \
             (nothing else runs in it meanwhile), h2load's from this program's reaped children, \
             the kernel's irq + softirq time from /proc/stat (charged to no process; on \
             loopback mostly these connections' packets), and busy time left over (**other \
             processes**). The attacker shares the machine's 2 CPUs with herdsman, h2load and \
             the servers, so what it burns itself comes out of theirs. **herdsman per \
             attacking connection**: herdsman's CPU time over {} s of the attack alone (no \
             legitimate client), at the same pace, less its CPU time over as long with nothing \
             to do ({:.1} ms), over the connections the attack made.\n",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            self.settings.alone_seconds,
            self.idle_cpu.unwrap_or_default().as_secs_f64() * 1000.0
        );
        md.push_str(&self.cpu_table());
        if let Some(failure) = &self.failure {
            let _ = writeln!(md, "\n## Stopped early\n\n{failure}");
        }
        md
    }
}
