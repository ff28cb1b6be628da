//! One fetch for a herd (the lesson this project is named for): concurrent misses on one key
//! make one request to the server. The first is the flight's leader and goes to the server; the
//! others follow: they wait for its answer's head (up to the pool's `lock_timeout`) and are
//! served from its body as it arrives, not once it is whole. When the answer may not be stored,
//! the followers go to the server themselves; when the leader fails before its head, one of
//! them leads a new flight in its place.
//!
//! Flights are the process's, like the store: followers on any worker wait for a leader on any
//! other. The map of flights is touched only by misses (a hit never sees it), in one of 16
//! shards.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::store::Entry;

/// The flights in the air, by key.
#[derive(Default)]
pub struct Flights {
    shards: [Mutex<HashMap<u64, Arc<Flight>>>; 16],
    hasher: foldhash::fast::RandomState,
}

impl std::fmt::Debug for Flights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flights").finish_non_exhaustive()
    }
}

/// What a miss is to do.
pub enum Role {
    /// Go to the server, and tell the followers how it went (through the guard).
    Lead(Leader),
    /// Wait for the leader's answer.
    Follow(Arc<Flight>),
}

/// One fetch and what its followers read of it.
pub struct Flight {
    key: Box<[u8]>,
    state: Mutex<FlightState>,
    changed: Notify,
}

/// How a flight stands.
#[derive(Default)]
pub struct FlightState {
    /// The answer's stored head, its status and its body's length, once the leader has it and
    /// it may be stored.
    pub head: Option<Arc<FlightHead>>,
    /// The body so far (while the flight lasts).
    pub body: Vec<u8>,
    /// The stored object, once the body is whole: the rest is read from it.
    pub stored: Option<Arc<Entry>>,
    /// The answer may not be stored, or the leader failed: the followers that have not begun
    /// to answer go to the server themselves; those that have end their answers.
    pub abandoned: bool,
    /// … because the answer may not be stored: each follower goes to the server at once.
    /// Otherwise (the leader failed) one of them takes its place, and the others follow that
    /// one.
    pub passed: bool,
    /// Followers waiting or reading.
    pub followers: usize,
}

/// The head a flight's followers send.
#[derive(Debug)]
pub struct FlightHead {
    /// The stored head (as an object keeps it).
    pub head: Box<[u8]>,
    pub status: u16,
    /// The body's length; `None` when it is chunked (known once it is whole).
    pub length: Option<u64>,
    /// When the answer varies: what it varies on, and for which request.
    pub vary: Option<FlightVary>,
}

/// What a flight's answer varies on. A follower whose request writes another variant part is
/// not this answer's to take: it goes to the server itself.
#[derive(Debug)]
pub struct FlightVary {
    /// The field names, lower case, comma-separated (as `Vary` gave them).
    pub names: Box<[u8]>,
    /// The variant part of the leader's key (`key::write_variant`).
    pub variant: Box<[u8]>,
}

impl Flights {
    /// Joins the flight for `key`, or starts it.
    pub fn join(self: &Arc<Flights>, key: &[u8]) -> Role {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        if let Some(flight) = shard.get(&hash) {
            if *flight.key == *key {
                flight.lock().followers += 1;
                return Role::Follow(Arc::clone(flight));
            }
            // Two keys, one hash: this one goes its own way, without a flight.
            return Role::Lead(Leader {
                flights: None,
                hash,
                flight: Arc::new(Flight::new(key)),
            });
        }
        let flight = Arc::new(Flight::new(key));
        shard.insert(hash, Arc::clone(&flight));
        Role::Lead(Leader {
            flights: Some(Arc::clone(self)),
            hash,
            flight,
        })
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, HashMap<u64, Arc<Flight>>> {
        self.shards[(hash >> 60) as usize]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Flights in the air (for tests and the metrics).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().map_or(0, |shard| shard.len()))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Flight {
    fn new(key: &[u8]) -> Flight {
        Flight {
            key: key.into(),
            state: Mutex::new(FlightState::default()),
            changed: Notify::new(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, FlightState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits until `ready` says the state is what the caller waits for; returns its answer. The
    /// waiter is registered before the state is read, so no change is missed.
    pub async fn wait_for<T>(&self, mut ready: impl FnMut(&FlightState) -> Option<T>) -> T {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(answer) = ready(&self.lock()) {
                return answer;
            }
            changed.await;
        }
    }

    /// A follower is done with the flight.
    pub fn leave(&self) {
        let mut state = self.lock();
        state.followers = state.followers.saturating_sub(1);
    }

    fn changed(&self) {
        self.changed.notify_waiters();
    }
}

/// The leader's hold on its flight: what it learns goes to the followers, and when it is
/// dropped the flight lands (leaves the map), abandoned if it did not end well.
pub struct Leader {
    /// `None` for a flight not in the map (a hash shared with another key's).
    flights: Option<Arc<Flights>>,
    hash: u64,
    flight: Arc<Flight>,
}

impl Leader {
    /// The answer may be stored: its head, for the followers to send.
    pub fn head(&self, head: FlightHead) {
        self.flight.lock().head = Some(Arc::new(head));
        self.flight.changed();
    }

    /// Body bytes as they come.
    pub fn body(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.flight.lock().body.extend_from_slice(bytes);
        self.flight.changed();
    }

    /// The body is whole: `store` makes the stored object of it (and stores it), and the
    /// followers read the rest from that object; `None` (the store refused it) abandons the
    /// flight. Under the flight's lock, so that no follower sees the body between the two.
    pub fn land(self, store: impl FnOnce(Vec<u8>) -> Option<Arc<Entry>>) {
        let mut state = self.flight.lock();
        let body = std::mem::take(&mut state.body);
        state.stored = store(body);
        drop(state);
        // Drop does the rest: out of the map, and the followers told.
    }

    /// The answer may not be stored: the followers go to the server themselves, all at once.
    pub fn pass(self) {
        self.flight.lock().passed = true;
        // Drop does the rest.
    }

    /// Followers waiting or reading now.
    pub fn followers(&self) -> usize {
        self.flight.lock().followers
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if let Some(flights) = &self.flights {
            let mut shard = flights.shard(self.hash);
            if shard
                .get(&self.hash)
                .is_some_and(|flight| Arc::ptr_eq(flight, &self.flight))
            {
                shard.remove(&self.hash);
            }
        }
        let mut state = self.flight.lock();
        if state.stored.is_none() {
            state.abandoned = true;
        }
        drop(state);
        self.flight.changed();
    }
}
