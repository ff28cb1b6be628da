//! Once a second while the load runs: the proxy's resident memory and open descriptors, summed
//! over every process of its group (HAProxy's master and workers; herdsman's process and, during
//! and after a binary upgrade, its successor, whose parent exits), and for herdsman the pid that
//! serves (`GET /api/workers`) and its request and retry counters (`/metrics`).

use std::thread;
use std::time::{Duration, Instant};

use super::herdsman::{self, Counters};
use crate::kit::periodic::Periodic;
use crate::kit::{procstat, workers_api};

/// How often the proxy is sampled.
pub const EVERY: Duration = Duration::from_secs(1);

/// The proxy's processes at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    pub processes: usize,
    pub rss_kib: u64,
    pub descriptors: u64,
}

impl Footprint {
    /// Now, for process group `group`.
    pub fn of_group(group: u32) -> Footprint {
        let members = procstat::group_members(group);
        Footprint {
            processes: members.len(),
            rss_kib: procstat::rss_kib_of(&members),
            descriptors: procstat::descriptors_of(&members),
        }
    }

    /// The least of `samples` readings `gap` apart, field by field: what the proxy holds when
    /// nothing passes through, leaving out a health check's connection that happens to be open.
    pub fn least_of(group: u32, samples: usize, gap: Duration) -> Footprint {
        let mut least = Footprint::of_group(group);
        for _ in 1..samples {
            thread::sleep(gap);
            let now = Footprint::of_group(group);
            least.processes = least.processes.min(now.processes);
            least.rss_kib = least.rss_kib.min(now.rss_kib);
            least.descriptors = least.descriptors.min(now.descriptors);
        }
        least
    }
}

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// After the load began.
    pub at: Duration,
    pub footprint: Footprint,
    /// herdsman only: the pid serving, and its counters (each process counts from its start).
    pub pid: Option<u32>,
    pub counters: Option<Counters>,
}

/// The sampler at work; `finish` stops it and returns the samples.
pub struct Sampler(Periodic<Vec<Sample>>);

impl Sampler {
    /// Samples group `group` now and every `EVERY` after, times counted from `began`; with
    /// `admin_port`, herdsman's pid and counters too.
    pub fn start(group: u32, admin_port: Option<u16>, began: Instant) -> anyhow::Result<Sampler> {
        Periodic::start("soak-sampler", EVERY, Vec::new(), move |samples| {
            let (pid, counters) = match admin_port {
                Some(port) => (
                    workers_api::serving_pid(port).ok(),
                    herdsman::read_counters(port).ok(),
                ),
                None => (None, None),
            };
            samples.push(Sample {
                at: began.elapsed(),
                footprint: Footprint::of_group(group),
                pid,
                counters,
            });
        })
        .map(Sampler)
    }

    pub fn finish(self) -> anyhow::Result<Vec<Sample>> {
        self.0.finish()
    }
}

/// herdsman's counters over the whole run, from per-second samples: the growth between two
/// samples of the same process, and a new process's own count when the pid changed. An old
/// process's last moments after its last sample are missed.
pub fn counted_over(samples: &[Sample]) -> Option<Counters> {
    let readings: Vec<(u32, Counters)> = samples
        .iter()
        .filter_map(|s| Some((s.pid?, s.counters?)))
        .collect();
    let (first, rest) = readings.split_first()?;
    let mut total = Counters::default();
    let mut last = *first;
    for &(pid, now) in rest {
        let since = if pid == last.0 {
            Counters {
                requests: now.requests.saturating_sub(last.1.requests),
                retries: now.retries.saturating_sub(last.1.retries),
                reloads: now.reloads.saturating_sub(last.1.reloads),
                reload_failures: now.reload_failures.saturating_sub(last.1.reload_failures),
            }
        } else {
            now
        };
        total.requests += since.requests;
        total.retries += since.retries;
        total.reloads += since.reloads;
        total.reload_failures += since.reload_failures;
        last = (pid, now);
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, requests: u64, retries: u64) -> Sample {
        Sample {
            at: Duration::ZERO,
            footprint: Footprint::default(),
            pid: Some(pid),
            counters: Some(Counters {
                requests,
                retries,
                ..Counters::default()
            }),
        }
    }

    #[test]
    fn counters_follow_the_process_across_an_upgrade() {
        let samples = [
            sample(10, 100, 1),
            sample(10, 1100, 3),
            // Upgraded: the new process counts from zero.
            sample(20, 400, 0),
            sample(20, 1400, 5),
        ];
        let total = counted_over(&samples).unwrap();
        assert_eq!((total.requests, total.retries), (1000 + 400 + 1000, 2 + 5));
        assert_eq!(counted_over(&[]), None);
    }

    #[test]
    fn this_process_group_has_a_footprint() {
        // SAFETY: getpgrp has no preconditions.
        let group = unsafe { libc::getpgrp() } as u32;
        let footprint = Footprint::least_of(group, 2, Duration::from_millis(1));
        assert!(footprint.processes >= 1 && footprint.rss_kib > 0 && footprint.descriptors >= 3);
    }
}
