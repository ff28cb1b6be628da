//! The recovering case over time: the servers' counts read every `SAMPLE_PERIOD` during the run,
//! the sick server turned healthy at its time by the same thread, and from the counts the sick
//! server's share second by second, and how long after its recovery it had its share back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::servers::{CountReader, Counts, SERVERS, SICK};
use crate::kit::backend::{Answering, Conduct};
use crate::kit::periodic::Periodic;

/// How often the servers' counts are read: a bucket's edges are placed within this.
const SAMPLE_PERIOD: Duration = Duration::from_millis(100);

/// The share of a third that counts as the server's fair share back.
pub const FAIR_SHARE_BACK: f64 = 0.8;

/// A bucket's length, for the recovery and the plot.
pub const BUCKET_SECONDS: f64 = 1.0;

/// The counts over one run: when the sick server recovered, and (seconds since the start, every
/// server's count so far) every `SAMPLE_PERIOD`.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// Seconds from the start to the moment the sick server was told to answer at once.
    pub recovered_at: Option<f64>,
    pub samples: Vec<(f64, Counts)>,
}

/// The thread at work on a timeline.
pub struct Recording {
    periodic: Periodic<(Timeline, Instant)>,
    /// For the last sample, read as the recording finishes.
    reader: CountReader,
}

impl Recording {
    /// Starts reading `reader` now, and tells `sick` to answer at once `sick_for` from now.
    pub fn start(
        reader: CountReader,
        sick: Arc<Conduct>,
        sick_for: Duration,
    ) -> anyhow::Result<Recording> {
        let timeline = Timeline {
            recovered_at: None,
            samples: Vec::new(),
        };
        let sampled = reader.clone();
        let periodic = Periodic::start(
            "timeline",
            SAMPLE_PERIOD,
            (timeline, Instant::now()),
            move |state: &mut (Timeline, Instant)| {
                let (timeline, started) = state;
                let now = started.elapsed();
                if timeline.recovered_at.is_none() && now >= sick_for {
                    sick.set(Answering::AtOnce);
                    timeline.recovered_at = Some(now.as_secs_f64());
                }
                timeline.samples.push((now.as_secs_f64(), sampled.counts()));
            },
        )?;
        Ok(Recording { periodic, reader })
    }

    /// Stops the thread and reads the counts once more, so that the timeline reaches the end of
    /// the load rather than the last sample before it.
    pub fn finish(self) -> anyhow::Result<Timeline> {
        let (mut timeline, started) = self.periodic.finish()?;
        timeline
            .samples
            .push((started.elapsed().as_secs_f64(), self.reader.counts()));
        Ok(timeline)
    }
}

impl Timeline {
    /// Every server's count at `seconds`, read between the samples around it (a straight line);
    /// before the first sample (taken as the run starts), the first's; None after the last.
    fn counts_at(&self, seconds: f64) -> Option<[f64; SERVERS]> {
        let after = self.samples.iter().position(|&(t, _)| t >= seconds)?;
        let (t1, c1) = self.samples[after];
        if after == 0 {
            return Some(c1.map(|c| c as f64));
        }
        let (t0, c0) = self.samples[after - 1];
        let part = if t1 > t0 {
            (seconds - t0) / (t1 - t0)
        } else {
            1.0
        };
        Some(std::array::from_fn(|i| {
            c0[i] as f64 + (c1[i] as f64 - c0[i] as f64) * part
        }))
    }

    /// The sick server's share of the requests from `from` to `to` seconds; None when none came
    /// or the samples do not reach.
    pub fn sick_share(&self, from: f64, to: f64) -> Option<f64> {
        let (start, end) = (self.counts_at(from)?, self.counts_at(to)?);
        let total: f64 = (0..SERVERS).map(|i| end[i] - start[i]).sum();
        (total > 0.0).then(|| (end[SICK] - start[SICK]) / total)
    }

    /// The sick server's share in each whole bucket from the start: (the bucket's middle, its
    /// share).
    pub fn shares(&self) -> Vec<(f64, Option<f64>)> {
        let last = self.samples.last().map_or(0.0, |&(t, _)| t);
        let buckets = (last / BUCKET_SECONDS).floor() as usize;
        (0..buckets)
            .map(|k| {
                let from = k as f64 * BUCKET_SECONDS;
                (
                    from + BUCKET_SECONDS / 2.0,
                    self.sick_share(from, from + BUCKET_SECONDS),
                )
            })
            .collect()
    }

    /// Whole buckets recorded after the recovery.
    pub fn buckets_after_recovery(&self) -> usize {
        match (self.recovered_at, self.samples.last()) {
            (Some(at), Some(&(last, _))) => {
                ((last - at) / BUCKET_SECONDS).floor().max(0.0) as usize
            }
            _ => 0,
        }
    }

    /// Seconds from the recovery to the end of the first bucket after it in which the sick
    /// server had at least `FAIR_SHARE_BACK` of a third of the requests; None when no bucket
    /// recorded had.
    pub fn recovery_seconds(&self) -> Option<f64> {
        let at = self.recovered_at?;
        let fair = FAIR_SHARE_BACK / SERVERS as f64;
        (0..self.buckets_after_recovery()).find_map(|k| {
            let from = at + k as f64 * BUCKET_SECONDS;
            let share = self.sick_share(from, from + BUCKET_SECONDS)?;
            (share >= fair).then_some((k + 1) as f64 * BUCKET_SECONDS)
        })
    }

    /// The sick server's share while it was sick.
    pub fn share_while_sick(&self) -> Option<f64> {
        self.sick_share(self.samples.first()?.0, self.recovered_at?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeline sampled every 0.5 s for `seconds`, the sick server recovered at `at`: 100
    /// requests a second to each healthy server, and to the sick one `sick(t)` a second.
    fn made_up(seconds: f64, at: f64, sick: impl Fn(f64) -> f64) -> Timeline {
        let mut samples = Vec::new();
        let mut counts = [0.0; SERVERS];
        let mut t = 0.0;
        while t <= seconds + 1e-9 {
            samples.push((t, counts.map(|c: f64| c.round() as u64)));
            counts[0] += 50.0;
            counts[1] += 50.0;
            counts[SICK] += sick(t) / 2.0;
            t += 0.5;
        }
        Timeline {
            recovered_at: Some(at),
            samples,
        }
    }

    #[test]
    fn the_recovery_is_the_end_of_the_first_fair_bucket_after_it() {
        // Sick for 2 s (2 requests a second), then 10, 20, 100 a second from 4 s after.
        let timeline = made_up(12.0, 2.0, |t| match t {
            t if t < 2.0 => 2.0,
            t if t < 4.0 => 10.0,
            t if t < 6.0 => 20.0,
            _ => 100.0,
        });
        assert_eq!(timeline.buckets_after_recovery(), 10);
        // From 6 s on the sick server has a third: the bucket 4–5 s after the recovery.
        assert_eq!(timeline.recovery_seconds(), Some(5.0));
        let sick = timeline.share_while_sick().unwrap();
        assert!((sick - 1.0 / 101.0).abs() < 1e-9, "{sick}");
        let shares = timeline.shares();
        assert_eq!(shares.len(), 12);
        assert_eq!(shares[0].0, 0.5);
        assert!((shares[11].1.unwrap() - 1.0 / 3.0).abs() < 1e-9);
        // Between two samples the counts are read on the line between them.
        let half = timeline.sick_share(0.25, 0.75).unwrap();
        assert!((half - 1.0 / 101.0).abs() < 1e-9, "{half}");
    }

    #[test]
    fn no_recovery_within_the_run_is_none() {
        let never = made_up(5.0, 2.0, |_| 2.0);
        assert_eq!(never.recovery_seconds(), None);
        assert_eq!(never.buckets_after_recovery(), 3);
        let unrecorded = Timeline {
            recovered_at: None,
            samples: vec![],
        };
        assert_eq!(unrecorded.recovery_seconds(), None);
        assert!(unrecorded.shares().is_empty());
        assert_eq!(unrecorded.sick_share(0.0, 1.0), None);
        // The first sample is read a moment after the start: the first bucket counts from it.
        let mut late_start = made_up(3.0, 2.0, |_| 100.0);
        late_start.samples[0].0 = 0.001;
        assert_eq!(late_start.shares()[0].1, Some(1.0 / 3.0));
        assert_eq!(late_start.sick_share(2.5, 3.5), None);
    }

    #[test]
    fn a_recording_turns_the_server_healthy_at_its_time() {
        let servers = super::super::servers::Servers::start().unwrap();
        servers.set_sick(Answering::Failing);
        let recording = Recording::start(
            servers.reader(),
            servers.sick_conduct(),
            Duration::from_millis(150),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(450));
        let timeline = recording.finish().unwrap();
        let at = timeline.recovered_at.unwrap();
        assert!(at >= 0.15, "{at}");
        assert_eq!(servers.sick_conduct().get(), Answering::AtOnce);
        assert!(timeline.samples.len() >= 3, "{:?}", timeline.samples);
        // The last sample is read as it finishes, after the load.
        let last = timeline.samples.last().unwrap().0;
        assert!(last >= 0.45, "{:?}", timeline.samples);
    }
}
