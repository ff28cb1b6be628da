//! A thread of this program that does one thing now and again every period, keeping what it found
//! in a state of its own, until told to finish: the metrics scraper, the soak's sampler. A step
//! slower than the period skips the ticks it missed (as Prometheus does) rather than catching up
//! with a burst.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The thread at work. `finish` stops it and returns its state; dropping it stops it too (the
/// thread ends after the step in progress, if any).
pub struct Periodic<S> {
    name: &'static str,
    /// Dropped to tell the thread to stop: it waits between steps on the other end.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<S>>,
}

impl<S: Send + 'static> Periodic<S> {
    /// Starts thread `name`, which runs `step` on `state` now and every `period` after.
    pub fn start(
        name: &'static str,
        period: Duration,
        mut state: S,
        mut step: impl FnMut(&mut S) + Send + 'static,
    ) -> anyhow::Result<Periodic<S>> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut next = Instant::now();
                loop {
                    step(&mut state);
                    let now = Instant::now();
                    while next <= now {
                        next += period;
                    }
                    match stopped.recv_timeout(next - now) {
                        Err(RecvTimeoutError::Timeout) => continue,
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return state,
                    }
                }
            })
            .with_context(|| format!("starting the {name} thread"))?;
        Ok(Periodic {
            name,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops the thread after the step in progress and returns its state.
    pub fn finish(mut self) -> anyhow::Result<S> {
        self.stop.take();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(state)) => Ok(state),
            _ => bail!("the {} thread panicked", self.name),
        }
    }
}

impl<S> Drop for Periodic<S> {
    fn drop(&mut self) {
        self.stop.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_runs_at_once_and_then_every_period() {
        let counting =
            Periodic::start("counter", Duration::from_millis(50), 0u32, |n| *n += 1).unwrap();
        thread::sleep(Duration::from_millis(120));
        let steps = counting.finish().unwrap();
        assert!((2..=4).contains(&steps), "{steps} steps");
        let once = Periodic::start("once", Duration::from_secs(60), 0u32, |n| *n += 1).unwrap();
        assert_eq!(once.finish().unwrap(), 1);
    }
}
