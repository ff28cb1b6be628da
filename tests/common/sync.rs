//! Synchronisation between a test and its mocks: a one-way latch and polling until a condition
//! holds.

use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A one-way latch: tests and mocks use it to hold a step until another side has reached a
/// point ("the server has seen the first body bytes").
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    pub fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    pub fn is_open(&self) -> bool {
        *self.0 .0.lock().unwrap()
    }

    /// Waits until open; false on timeout.
    pub fn wait(&self, timeout: Duration) -> bool {
        let guard = self.0 .0.lock().unwrap();
        let (guard, _) = self
            .0
             .1
            .wait_timeout_while(guard, timeout, |open| !*open)
            .unwrap();
        *guard
    }
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes.
pub fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}
