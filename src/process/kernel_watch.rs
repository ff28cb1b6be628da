//! What the kernel does with connections before herdsman sees them, said out loud: a listen
//! backlog silently capped by `net.core.somaxconn` (checked once at start), and connections lost
//! because a listen queue was full (`ListenOverflows` / `ListenDrops`, watched while running).
//!
//! Both are invisible from user space otherwise: listen(2) accepts any backlog and quietly uses
//! less, and a connection dropped from a full queue never reaches accept(). The client only sees
//! a SYN retransmitted a second later, which looks like herdsman being slow.

use std::fmt;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use crate::stats::procfs::{self, ListenQueueDrops};

/// A listener whose requested backlog the kernel will cut down to `cap`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CappedBacklog {
    pub listener: String,
    /// The `backlog` the configuration asked for.
    pub requested: u32,
    /// `net.core.somaxconn`: what listen(2) will actually use.
    pub cap: u32,
}

/// Warns, once per listener, when its `backlog` (given as `(listener name, backlog)`) is above
/// `net.core.somaxconn`, and returns those listeners. Where somaxconn cannot be read (not Linux,
/// no /proc) nothing is known, so nothing is said.
pub fn warn_if_backlog_capped(listeners: &[(String, u32)]) -> Vec<CappedBacklog> {
    let Some(cap) = procfs::somaxconn() else {
        return Vec::new();
    };
    let capped = capped_backlogs(listeners, cap);
    for listener in &capped {
        tracing::warn!(
            listener = %listener.listener,
            backlog = listener.requested,
            somaxconn = listener.cap,
            "listener {:?} asks for backlog {} but net.core.somaxconn caps it at {}; \
             to get the full backlog run `sysctl -w net.core.somaxconn={}`",
            listener.listener,
            listener.requested,
            listener.cap,
            listener.requested,
        );
    }
    capped
}

/// The listeners whose backlog exceeds `somaxconn`. Linux uses `min(backlog, somaxconn)`, so a
/// backlog equal to the cap is not cut.
pub fn capped_backlogs(listeners: &[(String, u32)], somaxconn: u32) -> Vec<CappedBacklog> {
    listeners
        .iter()
        .filter(|(_, backlog)| *backlog > somaxconn)
        .map(|(name, backlog)| CappedBacklog {
            listener: name.clone(),
            requested: *backlog,
            cap: somaxconn,
        })
        .collect()
}

/// Connections the kernel lost before accept() between two readings of its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenQueueLoss {
    /// Growth of `ListenOverflows`: a listen queue was full.
    pub overflows: u64,
    /// Growth of `ListenDrops`: every connection dropped before accept, overflows included
    /// (the kernel counts an overflow in both).
    pub drops: u64,
}

/// What to say given two readings of the counters: `None` when nothing was lost. A counter that
/// went down (the namespace's counters were reset, or herdsman moved namespace) is treated as a
/// new baseline, not as a loss.
pub fn listen_queue_loss(
    previous: ListenQueueDrops,
    current: ListenQueueDrops,
) -> Option<ListenQueueLoss> {
    let loss = ListenQueueLoss {
        overflows: current.overflows.saturating_sub(previous.overflows),
        drops: current.drops.saturating_sub(previous.drops),
    };
    (loss.overflows > 0 || loss.drops > 0).then_some(loss)
}

impl fmt::Display for ListenQueueLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // ListenDrops includes the overflows, so the larger of the two is the number lost. The
        // kernel counts packets (a client retries its SYN), so these are attempts, not clients.
        let lost = self.drops.max(self.overflows);
        write!(
            f,
            "the kernel dropped {lost} connection attempt(s) before accept ({} because a listen \
             queue was full; the counters cover the whole network namespace); raise the \
             listener's `backlog` and net.core.somaxconn (`sysctl -w net.core.somaxconn=N`)",
            self.overflows
        )
    }
}

/// Reads the listen-queue counters now and every `interval` until `stop` becomes true (or its
/// sender is dropped), and warns — at most once per interval — when they grew. A reading that
/// fails (no /proc) is skipped; the last good reading stays the baseline.
pub async fn watch_listen_queue(interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut last = procfs::listen_queue_drops();
    // The first tick one interval from now: the reading above is the start's.
    let mut ticks = tokio::time::interval_at(Instant::now() + interval, interval);
    // After a stall, one reading covers the whole gap; a burst of catch-up readings would only
    // repeat it.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            _ = ticks.tick() => {}
        }
        let Some(current) = procfs::listen_queue_drops() else {
            continue;
        };
        if let Some(loss) = last.and_then(|previous| listen_queue_loss(previous, current)) {
            tracing::warn!(
                overflows = loss.overflows,
                drops = loss.drops,
                interval_s = interval.as_secs_f64(),
                "{loss}"
            );
        }
        last = Some(current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(overflows: u64, drops: u64) -> ListenQueueDrops {
        ListenQueueDrops { overflows, drops }
    }

    #[test]
    fn only_backlogs_above_the_cap_are_capped() {
        let listeners = [
            ("web".to_string(), 4096),
            ("api".to_string(), 1024),
            ("big".to_string(), 1025),
        ];
        assert_eq!(
            capped_backlogs(&listeners, 1024),
            vec![
                CappedBacklog {
                    listener: "web".into(),
                    requested: 4096,
                    cap: 1024
                },
                CappedBacklog {
                    listener: "big".into(),
                    requested: 1025,
                    cap: 1024
                },
            ]
        );
        assert!(capped_backlogs(&listeners, 4096).is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn warning_at_start_agrees_with_this_machines_somaxconn() {
        let cap = procfs::somaxconn().unwrap();
        let listeners = [
            ("over".to_string(), cap.saturating_add(1)),
            ("at".to_string(), cap),
        ];
        let capped = warn_if_backlog_capped(&listeners);
        if cap < u32::MAX {
            assert_eq!(capped.len(), 1);
            assert_eq!(capped[0].listener, "over");
            assert_eq!(capped[0].cap, cap);
        }
    }

    #[test]
    fn growth_is_reported_and_nothing_else() {
        assert_eq!(listen_queue_loss(reading(5, 9), reading(5, 9)), None);
        assert_eq!(
            listen_queue_loss(reading(5, 9), reading(8, 12)),
            Some(ListenQueueLoss {
                overflows: 3,
                drops: 3
            })
        );
        // Drops for a reason other than a full queue still lose connections.
        assert_eq!(
            listen_queue_loss(reading(5, 9), reading(5, 10)),
            Some(ListenQueueLoss {
                overflows: 0,
                drops: 1
            })
        );
        // Counters that went backwards were reset: a new baseline, not a loss.
        assert_eq!(listen_queue_loss(reading(5, 9), reading(0, 0)), None);
    }

    #[test]
    fn the_warning_says_how_many_and_names_the_fix() {
        let text = ListenQueueLoss {
            overflows: 3,
            drops: 4,
        }
        .to_string();
        assert!(text.contains("dropped 4 connection attempt(s)"), "{text}");
        assert!(text.contains("3 because a listen queue was full"), "{text}");
        assert!(text.contains("`backlog`"), "{text}");
        assert!(text.contains("net.core.somaxconn"), "{text}");
    }

    #[tokio::test]
    async fn the_watcher_stops_when_told_or_when_the_sender_goes() {
        let (stop, stopped) = watch::channel(false);
        let watcher = tokio::spawn(watch_listen_queue(Duration::from_millis(10), stopped));
        // Several readings go by; the watcher keeps going until told.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!watcher.is_finished());
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(1), watcher)
            .await
            .expect("the watcher stops within a second")
            .unwrap();

        let (stop, stopped) = watch::channel(false);
        let watcher = tokio::spawn(watch_listen_queue(Duration::from_millis(10), stopped));
        drop(stop);
        tokio::time::timeout(Duration::from_secs(1), watcher)
            .await
            .expect("the watcher stops within a second")
            .unwrap();
    }
}
