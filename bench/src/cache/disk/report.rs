//! What `cache-disk` prints and writes: the hot load's requests/s and p50/p99 alone and beside
//! the cold load (medians over rounds, with the disk reads a second), the hit ratio of every
//! interval across the upgrade and of the minutes before and after it, with the disk tier and
//! without; what was run, the configurations, every run; a plot of the hit ratio over time.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::settings::{
    Settings, COLD_BYTES, COLD_CONNECTIONS, COLD_LEAD_SECONDS, DISK_SIZE, HOT_BYTES,
    HOT_CONNECTIONS, HOT_OBJECTS, SMALL_MEMORY, ZIPF_BYTES, ZIPF_CONNECTIONS, ZIPF_EXPONENT,
};
use crate::cache::caches::CACHE_MIB;
use crate::cache::report::size_text;
use crate::kit::markdown::{spread_cell, thousands, worker_count, write_details_table};
use crate::kit::plot::{LineChart, Series};
use crate::kit::results::{write_plot_link, Configurations, Results, RunFacts, Trouble};
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::WrkReport;

/// Where the second part's cache keeps its objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// `[cache.disk]` beside the memory.
    Disk,
    /// Memory only: cold after the upgrade.
    Memory,
}

impl Tier {
    pub const ALL: [Tier; 2] = [Tier::Disk, Tier::Memory];

    /// Its folder's and configuration's name.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Disk => "upgrade-disk",
            Tier::Memory => "upgrade-memory",
        }
    }

    /// How the results name it.
    pub fn written(self) -> &'static str {
        match self {
            Tier::Disk => "with [cache.disk]",
            Tier::Memory => "memory only",
        }
    }

    /// Its objects' names start with this, so that the origin counts each run's apart.
    pub fn prefix(self) -> &'static str {
        match self {
            Tier::Disk => "zd-",
            Tier::Memory => "zm-",
        }
    }
}

/// What runs beside the hot load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beside {
    /// Nothing: the hot load alone.
    Nothing,
    /// A second load like the cold one, on a few objects of the same size that memory holds:
    /// what a second load costs the hot one on this machine, without a disk read.
    MemoryHits,
    /// The cold load: its requests read back from the disk.
    DiskReads,
}

impl Beside {
    pub const ALL: [Beside; 3] = [Beside::Nothing, Beside::MemoryHits, Beside::DiskReads];

    pub fn text(self) -> &'static str {
        match self {
            Beside::Nothing => "alone",
            Beside::MemoryHits => "beside memory hits (32 KiB)",
            Beside::DiskReads => "beside disk reads (32 KiB)",
        }
    }
}

/// One run of the hot load.
#[derive(Debug, Clone)]
pub struct HotRun {
    pub round: u32,
    pub beside: Beside,
    pub hot: WrkReport,
    /// The second load's, when one ran beside.
    pub second: Option<WrkReport>,
    /// `herdsman_cache_disk_reads_total`'s growth during the hot run.
    pub disk_reads: u64,
    /// Requests that reached the origin during the whole run (both loads): none when every
    /// object was stored.
    pub origin_requests: u64,
}

impl HotRun {
    fn disk_reads_per_sec(&self) -> Option<f64> {
        (self.hot.seconds > 0.0).then(|| self.disk_reads as f64 / self.hot.seconds)
    }

    fn errors(&self) -> u64 {
        self.hot.errors() + self.second.as_ref().map_or(0, WrkReport::errors)
    }

    pub fn progress_text(&self) -> String {
        format!(
            "hot {}: {} requests/s, p99 {} ms; {} disk reads/s",
            self.beside.text(),
            thousands(self.hot.requests_per_sec),
            self.hot.p99_ms().map_or("–".into(), ms_text),
            self.disk_reads_per_sec().map_or("–".into(), thousands)
        )
    }
}

/// Where an interval of the second part is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the minute before: the cache, started empty, fills.
    WarmUp,
    /// The n-th interval (from 0) of the minute before the upgrade.
    Before(u32),
    /// The n-th interval (from 0) of the minute after it: the upgrade is made as the first
    /// starts.
    After(u32),
}

impl Phase {
    /// "warm-up (30 s)", "−60 to −50 s", "−10 to 0 s", "0 to +10 s".
    pub fn text(self, settings: &Settings) -> String {
        match self {
            Phase::WarmUp => format!("warm-up ({} s)", settings.warm_up),
            _ => {
                let end = self.end_seconds(settings).unwrap_or(0.0);
                let start = end - f64::from(settings.interval);
                format!("{} to {} s", signed(start), signed(end))
            }
        }
    }

    /// Seconds from the upgrade to the interval's end; None for the warm-up.
    fn end_seconds(self, settings: &Settings) -> Option<f64> {
        let (step, minute) = (settings.interval, settings.minute);
        match self {
            Phase::WarmUp => None,
            Phase::Before(n) => Some(-f64::from(minute - (n + 1) * step)),
            Phase::After(n) => Some(f64::from((n + 1) * step)),
        }
    }
}

/// Whole seconds from the upgrade: "−10", "0", "+10".
fn signed(seconds: f64) -> String {
    match seconds {
        s if s < 0.0 => format!("−{}", -s),
        s if s > 0.0 => format!("+{s}"),
        _ => "0".into(),
    }
}

/// One interval of the Zipf load.
#[derive(Debug, Clone)]
pub struct Interval {
    pub tier: Tier,
    pub phase: Phase,
    pub wrk: WrkReport,
    /// Requests for the run's objects that reached the origin during the interval.
    pub origin_requests: u64,
    /// `herdsman_cache_disk_objects` at its end, from the process serving then.
    pub files: Option<u64>,
}

impl Interval {
    /// The share of the answers given without the origin.
    fn hit_ratio(&self) -> Option<f64> {
        hit_ratio(self.wrk.requests, self.origin_requests)
    }

    pub fn progress_text(&self) -> String {
        format!(
            "{} requests, {} at the origin: hit ratio {}",
            thousands(self.wrk.requests as f64),
            thousands(self.origin_requests as f64),
            self.hit_ratio().map_or("–".into(), percent_text)
        )
    }
}

/// `1 − origin ÷ requests`, none without a request.
fn hit_ratio(requests: u64, origin_requests: u64) -> Option<f64> {
    (requests > 0).then(|| 1.0 - origin_requests as f64 / requests as f64)
}

/// How the objects of the first part were stored.
#[derive(Debug, Clone, Copy)]
pub struct Stored {
    pub objects: u64,
    /// `herdsman_cache_disk_objects` once they all were.
    pub files: u64,
    /// From the first request until every file was written.
    pub seconds: f64,
}

/// One binary upgrade.
#[derive(Debug, Clone, Copy)]
pub struct Upgrade {
    pub tier: Tier,
    pub old_pid: u32,
    pub new_pid: u32,
    /// From SIGUSR2 until `/api/workers` named the new process.
    pub serving_after: Duration,
}

/// The whole session, as the results file shows it.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    pub failure: Option<String>,
    pub configs: Configurations,
    pub stored: Option<Stored>,
    pub hot_runs: Vec<HotRun>,
    pub intervals: Vec<Interval>,
    pub upgrades: Vec<Upgrade>,
}

fn ms_text(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn percent_text(ratio: f64) -> String {
    format!("{:.2}%", ratio * 100.0)
}

/// A figure of a hot run; None where it has none.
type Figure = fn(&HotRun) -> Option<f64>;

impl Session {
    pub fn new(facts: RunFacts, settings: Settings) -> Session {
        Session {
            facts,
            settings,
            failure: None,
            configs: Configurations::default(),
            stored: None,
            hot_runs: Vec::new(),
            intervals: Vec::new(),
            upgrades: Vec::new(),
        }
    }

    fn hot_spread(&self, beside: Beside, figure: Figure) -> Option<Spread> {
        let values: Vec<f64> = self
            .hot_runs
            .iter()
            .filter(|r| r.beside == beside)
            .filter_map(figure)
            .collect();
        spread(&values)
    }

    fn intervals_of(&self, tier: Tier) -> impl Iterator<Item = &Interval> {
        self.intervals.iter().filter(move |i| i.tier == tier)
    }

    /// The hit ratio over the intervals of `tier` that `which` picks.
    fn ratio_over(&self, tier: Tier, which: impl Fn(Phase) -> bool) -> Option<f64> {
        let (requests, origin) = self
            .intervals_of(tier)
            .filter(|i| which(i.phase))
            .fold((0, 0), |(r, o), i| {
                (r + i.wrk.requests, o + i.origin_requests)
            });
        hit_ratio(requests, origin)
    }

    /// The minute before, the minute after, and the first interval after.
    fn minutes(&self, tier: Tier) -> [Option<f64>; 3] {
        [
            self.ratio_over(tier, |p| matches!(p, Phase::Before(_))),
            self.ratio_over(tier, |p| matches!(p, Phase::After(_))),
            self.ratio_over(tier, |p| p == Phase::After(0)),
        ]
    }

    /// Why it stopped, if it did, out of how many runs (no run here is judged disturbed).
    fn trouble(&self) -> Trouble<'_> {
        Trouble::new(
            &[],
            self.hot_runs.len() + self.intervals.len(),
            &self.failure,
        )
    }

    fn upgrade_of(&self, tier: Tier) -> Option<&Upgrade> {
        self.upgrades.iter().find(|u| u.tier == tier)
    }

    fn write_intro(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "# herdsman's disk tier: memory hits beside disk reads, and the hit ratio across a \
             binary upgrade (issue 38)\n\n\
             Issue 38, \"Warm after a restart\": disk reads must never block a worker's event \
             loop (measure memory hits' p99 while disk reads run), and the benchmark is the hit \
             ratio in the first minute after an upgrade against the minute before it. \
             `herdsman-bench cache-disk`, {}; how it was run is under \"What was run\".\n",
            worker_count(self.settings.workers)
        );
    }

    fn write_hot(&self, md: &mut String) {
        let _ = writeln!(md, "## Memory hits while disk reads run\n");
        if let Some(stored) = self.stored {
            let _ = writeln!(
                md,
                "{} objects stored ({HOT_OBJECTS} hot of {}, {HOT_OBJECTS} warm and {} cold of \
                 {}, {} MiB of cold objects for `memory = \"{SMALL_MEMORY}\"`), {} files on disk \
                 after {:.1} s. Medians over {} round(s), min–max in brackets.\n",
                thousands(stored.objects as f64),
                size_text(HOT_BYTES),
                thousands(f64::from(self.settings.cold_objects)),
                size_text(COLD_BYTES),
                (u64::from(self.settings.cold_objects) * COLD_BYTES as u64) >> 20,
                thousands(stored.files as f64),
                stored.seconds,
                self.settings.rounds
            );
        }
        let _ = writeln!(
            md,
            "| hot load | requests/s | p50 ms | p99 ms | disk reads/s | second load requests/s | \
             its p50 ms | its p99 ms | at the origin | errors |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for beside in Beside::ALL {
            let cell = |figure: Figure, format: fn(f64) -> String| {
                spread_cell(self.hot_spread(beside, figure), format)
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                beside.text(),
                cell(|r| Some(r.hot.requests_per_sec), thousands),
                cell(|r| r.hot.p50_ms(), ms_text),
                cell(|r| r.hot.p99_ms(), ms_text),
                cell(HotRun::disk_reads_per_sec, thousands),
                cell(|r| r.second.as_ref().map(|c| c.requests_per_sec), thousands),
                cell(|r| r.second.as_ref()?.p50_ms(), ms_text),
                cell(|r| r.second.as_ref()?.p99_ms(), ms_text),
                cell(|r| Some(r.origin_requests as f64), thousands),
                cell(|r| Some(r.errors() as f64), thousands),
            );
        }
        md.push('\n');
        if let Some(line) = self.p99_line() {
            let _ = writeln!(md, "{line}\n");
        }
        let _ = writeln!(
            md,
            "Beside a second load the worker and the machine's CPUs also serve its requests, so \
             the hot load's requests/s fall whatever it asks for; the memory-hits row is that \
             cost alone. A disk read that held the worker's event loop would hold every hot \
             request behind it, and show as the difference between the disk-reads row and the \
             memory-hits row.\n"
        );
    }

    /// The hot p99 beside disk reads against beside memory hits and alone, medians.
    fn p99_line(&self) -> Option<String> {
        let p99 = |beside| Some(self.hot_spread(beside, |r| r.hot.p99_ms())?.median);
        let reads = self
            .hot_spread(Beside::DiskReads, HotRun::disk_reads_per_sec)?
            .median;
        let (disk, memory) = (p99(Beside::DiskReads)?, p99(Beside::MemoryHits)?);
        let alone = p99(Beside::Nothing)?;
        Some(format!(
            "The hot load's p99 beside {} disk reads a second: {} ms; beside as many \
             connections asking for objects of the same size from memory: {} ms ({:.2}× that); \
             alone: {} ms.",
            thousands(reads),
            ms_text(disk),
            ms_text(memory),
            disk / memory,
            ms_text(alone)
        ))
    }

    fn write_upgrade(&self, md: &mut String, plot: Option<&Path>) {
        let _ = writeln!(
            md,
            "## Hit ratio across a binary upgrade\n\n\
             The share of answers given without the origin, counted at the origin (the old \
             process's counters go with it). SIGUSR2 at +0 s; files indexed is \
             `herdsman_cache_disk_objects` at the interval's end, from the process answering \
             the admin API then.\n"
        );
        let _ = writeln!(
            md,
            "| | {} | {} |\n|---|---:|---:|",
            Tier::Disk.written(),
            Tier::Memory.written()
        );
        let minutes = Tier::ALL.map(|tier| self.minutes(tier));
        let first = self.settings.interval;
        for (at, what) in [
            "the minute before".to_string(),
            "the minute after".to_string(),
            format!("the first {first} s after"),
        ]
        .iter()
        .enumerate()
        {
            let _ = writeln!(
                md,
                "| {what} | {} | {} |",
                minutes[0][at].map_or("–".into(), percent_text),
                minutes[1][at].map_or("–".into(), percent_text)
            );
        }
        let serving = Tier::ALL.map(|tier| {
            self.upgrade_of(tier).map_or("–".into(), |u| {
                format!("{} ms", u.serving_after.as_millis())
            })
        });
        let _ = writeln!(
            md,
            "| new process serving after SIGUSR2 | {} | {} |\n",
            serving[0], serving[1]
        );
        let _ = writeln!(
            md,
            "| interval | {0}: requests | at the origin | hit ratio | files indexed | {1}: \
             requests | at the origin | hit ratio |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|",
            Tier::Disk.written(),
            Tier::Memory.written()
        );
        for disk in self.intervals_of(Tier::Disk) {
            let memory = self
                .intervals_of(Tier::Memory)
                .find(|m| m.phase == disk.phase);
            let cells = |i: Option<&Interval>| {
                i.map_or(["–".to_string(), "–".into(), "–".into()], |i| {
                    [
                        thousands(i.wrk.requests as f64),
                        thousands(i.origin_requests as f64),
                        i.hit_ratio().map_or("–".into(), percent_text),
                    ]
                })
            };
            let [r, o, h] = cells(Some(disk));
            let [mr, mo, mh] = cells(memory);
            let _ = writeln!(
                md,
                "| {} | {r} | {o} | {h} | {} | {mr} | {mo} | {mh} |",
                disk.phase.text(&self.settings),
                disk.files.map_or("–".into(), |f| thousands(f as f64)),
            );
        }
        md.push('\n');
        write_plot_link(md, plot, "hit ratio per interval, across the upgrade");
    }

    fn write_setup(&self, md: &mut String) {
        let s = &self.settings;
        let _ = writeln!(
            md,
            "## What was run\n\n\
             - **The origin** is `cache`'s, in the benchmark's process: `/object/SIZE/NAME` \
             answers SIZE bytes at once with `Cache-Control: max-age=86400, public`, and counts \
             the requests for each path.\n\
             - **Memory hits beside disk reads**: herdsman with `[cache] memory = \
             \"{SMALL_MEMORY}\"` and `[cache.disk] size = \"{DISK_SIZE}\"`, {}. {HOT_OBJECTS} \
             hot objects of {}, {HOT_OBJECTS} warm ones and {} cold ones of {} are each asked \
             for once, then the files are waited for and the hot and warm objects asked for \
             during a second each. Each round runs the hot load alone, beside the warm load and \
             beside the cold load, the order turning from round to round: wrk, \
             {HOT_CONNECTIONS} connections, {} s, each request for a hot object drawn at random \
             (a Lua script); the second load, another wrk with {COLD_CONNECTIONS} connections, \
             starts {COLD_LEAD_SECONDS} s before and ends {COLD_LEAD_SECONDS} s after, each \
             request for a warm object (a memory hit) or a cold one (a miss in memory, read back \
             from the disk) drawn at random. The files are in the page cache (they were just \
             written): what is measured is the worker's event loop, not the device. Disk reads/s \
             is `herdsman_cache_disk_reads_total`'s growth over the hot run.\n\
             - **Across a binary upgrade**: herdsman started empty with `[cache] memory = \
             \"{CACHE_MIB}MiB\"` (its default), with `[cache.disk] size = \"{DISK_SIZE}\"` and \
             without; wrk, {ZIPF_CONNECTIONS} connections, each request for one of {} objects of \
             {} drawn by Zipf({ZIPF_EXPONENT}) popularity (object N asked for in proportion to \
             1/N), paced to about {} requests a second (each connection waits {} ms after each \
             answer: a steady load, under which a cache started empty fills over tens of \
             seconds rather than within one), one wrk run per interval: {} s of warm-up, {} intervals of {} s, SIGUSR2 to \
             the serving process, and at once {} intervals more. The answers of every interval \
             are wrk's; its requests at the origin are counted there.\n",
            worker_count(s.workers),
            size_text(HOT_BYTES),
            thousands(f64::from(s.cold_objects)),
            size_text(COLD_BYTES),
            s.duration,
            thousands(f64::from(s.zipf_objects)),
            size_text(ZIPF_BYTES),
            thousands(f64::from(s.rate)),
            s.pause_ms(),
            s.warm_up,
            s.intervals(),
            s.interval,
            s.intervals()
        );
        for upgrade in &self.upgrades {
            let _ = writeln!(
                md,
                "- {}: pid {} → {}.",
                upgrade.tier.written(),
                upgrade.old_pid,
                upgrade.new_pid
            );
        }
        md.push('\n');
    }

    fn write_runs(&self, md: &mut String) {
        let cell = |v: Option<f64>, format: fn(f64) -> String| v.map_or("–".into(), format);
        let rows: Vec<String> = self
            .hot_runs
            .iter()
            .map(|r| {
                format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.round,
                    r.beside.text(),
                    thousands(r.hot.requests as f64),
                    thousands(r.hot.requests_per_sec),
                    cell(r.hot.p50_ms(), ms_text),
                    cell(r.hot.p99_ms(), ms_text),
                    thousands(r.disk_reads as f64),
                    cell(r.second.as_ref().map(|c| c.requests as f64), thousands),
                    r.origin_requests,
                    r.errors()
                )
            })
            .collect();
        write_details_table(
            md,
            "Every hot run",
            "| round | hot load | requests | requests/s | p50 ms | p99 ms | disk reads | second \
             load's requests | at the origin | errors |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            rows.into_iter(),
        );
        let rows: Vec<String> = self
            .intervals
            .iter()
            .map(|i| {
                format!(
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    i.tier.written(),
                    i.phase.text(&self.settings),
                    thousands(i.wrk.requests as f64),
                    thousands(i.origin_requests as f64),
                    cell(i.wrk.p99_ms(), ms_text),
                    i.wrk.errors(),
                    i.files.map_or("–".into(), |f| f.to_string())
                )
            })
            .collect();
        write_details_table(
            md,
            "Every interval",
            "| tier | interval | requests | at the origin | p99 ms | errors | files indexed |",
            "|---|---|---:|---:|---:|---:|---:|",
            rows.into_iter(),
        );
    }
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.hot_runs.is_empty() && self.intervals.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let mut text = format!(
            "cache-disk: memory hits alone, beside memory hits and beside disk reads, medians over \
             {} round(s)\n",
            self.settings.rounds
        );
        for beside in Beside::ALL {
            let median = |figure: Figure, format: fn(f64) -> String| {
                self.hot_spread(beside, figure)
                    .map_or("–".into(), |s| format(s.median))
            };
            let _ = writeln!(
                text,
                "  hot {:<28} {:>9} requests/s  p50 {:>6} ms  p99 {:>6} ms  {:>7} disk reads/s",
                beside.text(),
                median(|r| Some(r.hot.requests_per_sec), thousands),
                median(|r| r.hot.p50_ms(), ms_text),
                median(|r| r.hot.p99_ms(), ms_text),
                median(HotRun::disk_reads_per_sec, thousands)
            );
        }
        let _ = writeln!(
            text,
            "cache-disk: hit ratio across a binary upgrade, counted at the origin: minute before, \
             minute after, first {} s after",
            self.settings.interval
        );
        for tier in Tier::ALL {
            let [before, after, first] = self
                .minutes(tier)
                .map(|r| r.map_or("–".into(), percent_text));
            let serving = self.upgrade_of(tier).map_or("–".into(), |u| {
                format!("{} ms", u.serving_after.as_millis())
            });
            let _ = writeln!(
                text,
                "  {:<18} {before:>8}  {after:>8}  {first:>8}  (new process serving after \
                 {serving})",
                tier.written()
            );
        }
        self.trouble().write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let mut md = String::new();
        self.write_intro(&mut md);
        self.facts.write_markdown(&mut md);
        self.trouble().write_markdown(&mut md);
        self.write_hot(&mut md);
        self.write_upgrade(&mut md, plot);
        self.write_setup(&mut md);
        self.configs.write_markdown(&mut md);
        self.write_runs(&mut md);
        md
    }

    /// The hit ratio of every interval against the time from the upgrade, a line per tier.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let series = Tier::ALL
            .iter()
            .map(|&tier| Series {
                name: tier.written().to_string(),
                points: self
                    .intervals_of(tier)
                    .filter_map(|i| {
                        Some((i.phase.end_seconds(&self.settings)?, i.hit_ratio()? * 100.0))
                    })
                    .collect(),
            })
            .collect();
        LineChart {
            title: format!(
                "Zipf({ZIPF_EXPONENT}) over {} objects, binary upgrade at 0 s",
                thousands(f64::from(self.settings.zipf_objects))
            ),
            x_label: "seconds from the upgrade (interval's end)".into(),
            y_label: "hit ratio (%)".into(),
            series,
            log_y: false,
        }
        .write_png(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::wrk::sample_report;

    fn settings() -> Settings {
        let args: super::super::CacheDiskArgs =
            crate::kit::settings::parse_args("cache-disk", &["--short"]).unwrap();
        Settings::resolve(&args, Path::new("/w")).unwrap()
    }

    fn interval(tier: Tier, phase: Phase, requests: u64, origin_requests: u64) -> Interval {
        let mut wrk = sample_report(1000.0);
        wrk.requests = requests;
        Interval {
            tier,
            phase,
            wrk,
            origin_requests,
            files: None,
        }
    }

    #[test]
    fn intervals_are_named_from_the_upgrade() {
        let s = settings();
        assert_eq!(Phase::Before(0).text(&s), "−6 to −4 s");
        assert_eq!(Phase::Before(2).text(&s), "−2 to 0 s");
        assert_eq!(Phase::After(0).text(&s), "0 to +2 s");
        assert_eq!(Phase::After(2).text(&s), "+4 to +6 s");
        assert_eq!(Phase::Before(2).end_seconds(&s), Some(0.0));
        assert_eq!(Phase::After(0).end_seconds(&s), Some(2.0));
        assert_eq!(Phase::WarmUp.end_seconds(&s), None);
    }

    #[test]
    fn the_minutes_pool_their_intervals() {
        let mut session = Session::new(RunFacts::sample("cache-disk"), settings());
        session.intervals = vec![
            interval(Tier::Disk, Phase::WarmUp, 100, 100),
            interval(Tier::Disk, Phase::Before(0), 1000, 10),
            interval(Tier::Disk, Phase::Before(1), 1000, 0),
            interval(Tier::Disk, Phase::After(0), 500, 50),
            interval(Tier::Disk, Phase::After(1), 1500, 0),
            interval(Tier::Memory, Phase::Before(0), 0, 0),
        ];
        let [before, after, first] = session.minutes(Tier::Disk);
        assert_eq!(before, Some(0.995));
        assert_eq!(after, Some(0.975));
        assert_eq!(first, Some(0.9));
        assert_eq!(session.minutes(Tier::Memory), [None, None, None]);
        let md = session.render(None);
        assert!(md.contains("| the minute before | 99.50% | – |"), "{md}");
        assert!(
            md.contains("| 0 to +2 s | 500 | 50 | 90.00% | – | – | – | – |"),
            "{md}"
        );
    }
}
