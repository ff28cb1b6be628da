//! `slowloris --memory-only`: what one slow connection costs herdsman in memory, per kind, without
//! the wrk runs. For each kind alone (and all the kinds asked for together, when there are
//! several), in each round: a fresh herdsman, the full run's warm-up, its RSS before the slow
//! connections open and once they have settled, and the growth ÷ their number. Each opening gets
//! a fresh herdsman because the memory an earlier one leaves behind (the workers' free lists, the
//! allocator's pages) would make a later one look cheaper.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::clients::SlowClients;
use super::kinds::Kind;
use super::settings::Settings;
use super::stack;
use super::{SETTLE_WITH, WARMUP_SECONDS};
use crate::kit::markdown::thousands;
use crate::kit::procstat;
use crate::kit::slow_holders::Tally;
use crate::kit::stats::spread;
use crate::kit::wrk::{self, Load};

/// How long a holder may go on beyond settling before it stops by itself.
const HOLD_MARGIN: Duration = Duration::from_secs(30);

/// One opening: which kinds, and herdsman's RSS around it.
struct Opening {
    kinds: Vec<Kind>,
    rss_before_kib: u64,
    rss_settled_kib: u64,
    /// Summed over the kinds opened: still held when the holders were told to finish.
    held: u32,
    opened: u32,
}

impl Opening {
    fn kib_per_connection(&self, slow: u32) -> f64 {
        self.rss_settled_kib.saturating_sub(self.rss_before_kib) as f64 / f64::from(slow.max(1))
    }
}

/// Measures every kind (and the mix) in every round and prints the table on stdout.
pub fn run(
    settings: &Settings,
    herdsman: &Path,
    wrk_path: &Path,
    client_header_seconds: u32,
    scratch: &Path,
) -> anyhow::Result<()> {
    let mut sets: Vec<Vec<Kind>> = settings.kinds.iter().map(|&k| vec![k]).collect();
    if settings.kinds.len() > 1 {
        sets.push(settings.kinds.clone());
    }
    let mut openings = Vec::new();
    for round in 1..=settings.rounds {
        for kinds in &sets {
            let dir = scratch.join(format!("memory-{round}-{}", label(kinds).replace(' ', "-")));
            std::fs::create_dir_all(&dir)?;
            let opening = open_once(
                settings,
                herdsman,
                wrk_path,
                client_header_seconds,
                kinds,
                &dir,
            )
            .with_context(|| format!("round {round}, {}", label(kinds)))?;
            eprintln!(
                "round {round}/{}: {}: RSS {:.1} → {:.1} MiB, {:.1} KiB per slow connection, held \
                 {}/{}",
                settings.rounds,
                label(kinds),
                opening.rss_before_kib as f64 / 1024.0,
                opening.rss_settled_kib as f64 / 1024.0,
                opening.kib_per_connection(settings.slow),
                opening.held,
                opening.opened
            );
            openings.push(opening);
        }
    }
    print!("{}", table(settings, &sets, &openings));
    Ok(())
}

/// A fresh herdsman, its warm-up, then `settings.slow` connections of `kinds` opened, settled,
/// measured and closed.
fn open_once(
    settings: &Settings,
    herdsman: &Path,
    wrk_path: &Path,
    client_header_seconds: u32,
    kinds: &[Kind],
    dir: &Path,
) -> anyhow::Result<Opening> {
    let mut stack = stack::start(herdsman, settings.workers, client_header_seconds, dir)?;
    let warm_up = Load {
        connections: settings.connections,
        seconds: WARMUP_SECONDS,
    };
    wrk::run(wrk_path, stack.port, warm_up).context("the warm-up")?;
    // Let the warm-up's connections close on herdsman's side too.
    std::thread::sleep(Duration::from_millis(500));
    let pid = stack.herdsman.pid();
    let rss_before_kib = procstat::tree_rss_kib(pid)?;
    let clients = SlowClients::open(
        stack.port,
        settings.slow,
        kinds,
        SETTLE_WITH + HOLD_MARGIN,
        dir,
    )?;
    std::thread::sleep(SETTLE_WITH);
    let rss_settled_kib = procstat::tree_rss_kib(pid)?;
    let tallies = clients.close()?;
    stack.check_alive()?;
    let mut sum = Tally::default();
    for (_, tally) in tallies.iter().filter(|(k, _)| kinds.contains(k)) {
        sum.add(tally);
    }
    Ok(Opening {
        kinds: kinds.to_vec(),
        rss_before_kib,
        rss_settled_kib,
        held: sum.held,
        opened: sum.opened,
    })
}

/// "slow-head", or "slow-head + slow-body" for several.
fn label(kinds: &[Kind]) -> String {
    let labels: Vec<&str> = kinds.iter().map(|k| k.label()).collect();
    labels.join(" + ")
}

/// The Markdown table: one row per set of kinds, the median and range over rounds.
fn table(settings: &Settings, sets: &[Vec<Kind>], openings: &[Opening]) -> String {
    let mut md = format!(
        "herdsman RSS per slow connection: {} worker(s), {} slow connections per opening, each on \
         a fresh herdsman after a {WARMUP_SECONDS} s wrk -c{} warm-up, measured {} s after all \
         had connected; median (min–max) over {} round(s).\n\n",
        settings.workers,
        thousands(f64::from(settings.slow)),
        settings.connections,
        SETTLE_WITH.as_secs(),
        settings.rounds
    );
    md.push_str(
        "| slow connections | KiB per slow connection | herdsman RSS before → settled, MiB (median) | held at the end |\n\
         |---|---:|---:|---:|\n",
    );
    for kinds in sets {
        let of_set: Vec<&Opening> = openings.iter().filter(|o| &o.kinds == kinds).collect();
        let per: Vec<f64> = of_set
            .iter()
            .map(|o| o.kib_per_connection(settings.slow))
            .collect();
        let before: Vec<f64> = of_set.iter().map(|o| o.rss_before_kib as f64).collect();
        let settled: Vec<f64> = of_set.iter().map(|o| o.rss_settled_kib as f64).collect();
        let (Some(per), Some(before), Some(settled)) =
            (spread(&per), spread(&before), spread(&settled))
        else {
            continue;
        };
        let held: u32 = of_set.iter().map(|o| o.held).sum();
        let opened: u32 = of_set.iter().map(|o| o.opened).sum();
        let _ = writeln!(
            md,
            "| {} | {:.1} ({:.1}–{:.1}) | {:.1} → {:.1} | {held}/{opened} |",
            label(kinds),
            per.median,
            per.min,
            per.max,
            before.median / 1024.0,
            settled.median / 1024.0
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_table_has_a_row_per_kind_and_one_for_the_mix() {
        let settings = Settings {
            slow: 1000,
            workers: 2,
            connections: 50,
            seconds: 10,
            rounds: 2,
            out: PathBuf::from("x.md"),
            kinds: vec![Kind::SlowHead, Kind::SlowReader],
            memory_only: true,
        };
        let sets = vec![
            vec![Kind::SlowHead],
            vec![Kind::SlowReader],
            vec![Kind::SlowHead, Kind::SlowReader],
        ];
        let opening = |kinds: &[Kind], grown_kib: u64| Opening {
            kinds: kinds.to_vec(),
            rss_before_kib: 10_240,
            rss_settled_kib: 10_240 + grown_kib,
            held: 1000,
            opened: 1000,
        };
        let openings = vec![
            opening(&sets[0], 4_000),
            opening(&sets[1], 40_000),
            opening(&sets[0], 6_000),
        ];
        let md = table(&settings, &sets, &openings);
        assert!(
            md.contains("| slow-head | 5.0 (4.0–6.0) | 10.0 → 14.9 | 2000/2000 |"),
            "{md}"
        );
        assert!(md.contains("| slow-reader | 40.0 (40.0–40.0) |"), "{md}");
        // No opening of the mix was measured: no row.
        assert!(!md.contains("slow-head + slow-reader"), "{md}");
    }
}
