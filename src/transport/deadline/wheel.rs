//! The wheel itself: one per worker thread, its entries (a free list, with generations so that a
//! stale key is told apart), its 1,024 slots of a millisecond with a bitmap of the occupied
//! ones, and the task that drives it ([`drive`]) and the stop that ends its waits
//! ([`stop_waits`]). `deadline.rs` holds the futures that wait on it.

use std::cell::RefCell;
use std::future::Future;
use std::task::{Poll, Waker};
use std::time::Duration;

use super::Expiry;
use crate::transport::clock::Moment;

/// Slots in the wheel, of a millisecond each: one turn is a little over a second.
const SLOTS: usize = 1024;
/// A tick (a slot's time) in nanoseconds.
const NANOS_PER_TICK: u64 = 1_000_000;
/// Marks the end of the free list, and "no tick".
const NONE: u32 = u32::MAX;

/// An entry of the wheel: its index, and the generation the index had when it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Key {
    index: u32,
    generation: u32,
}

pub(super) enum Registered {
    Waiting(Key),
    Armed(Key),
    Ended(Expiry),
    NotDriven,
}

pub(super) enum State {
    /// Unused; the next unused index.
    Free {
        next: u32,
    },
    Waiting {
        waker: Waker,
        stop_ends_it: bool,
    },
    Ended(Expiry),
    /// A [`Timer`](super::Timer)'s: armed by one wait after another, and left in its slot between
    /// them.
    Owned {
        /// The task of its last wait.
        waker: Option<Waker>,
        /// A wait is under way (its deadline is `due`).
        armed: bool,
        stop_ends_it: bool,
        /// Why the wait under way ended, once it has.
        ended: Option<Expiry>,
    },
}

pub(super) struct Entry {
    /// The tick from which it is due.
    due: u64,
    generation: u32,
    /// The slot its key is in, when `position` is not `NONE`.
    slot: u32,
    /// Where its key is in its slot (`NONE`: in no slot, the wheel having passed it).
    position: u32,
    state: State,
}

/// One thread's wheel.
pub(super) struct Wheel {
    /// A driver runs on this thread.
    driven: bool,
    /// Tick 0.
    origin: Option<Moment>,
    /// The first tick whose slot has not been visited yet.
    next_tick: u64,
    pub(super) entries: Vec<Entry>,
    /// The first unused entry (`NONE`: take a new one).
    free: u32,
    /// Per slot, the entries due at one of its ticks (some let go since).
    pub(super) slots: Vec<Vec<Key>>,
    /// A bit per slot: whether it holds any key.
    occupied: [u64; SLOTS / 64],
    /// The driver's waker, and the tick it sleeps until (`u64::MAX`: until woken).
    driver: Option<Waker>,
    driver_due: u64,
    /// A graceful stop began: waits of `until_or_stop` end.
    pub(super) stopping: bool,
}

thread_local! {
    pub(super) static WHEEL: RefCell<Wheel> = const { RefCell::new(Wheel::new()) };
}

pub(super) fn with_wheel<T>(f: impl FnOnce(&mut Wheel) -> T) -> T {
    WHEEL.with(|wheel| f(&mut wheel.borrow_mut()))
}

impl Wheel {
    const fn new() -> Wheel {
        Wheel {
            driven: false,
            origin: None,
            next_tick: 0,
            entries: Vec::new(),
            free: NONE,
            slots: Vec::new(),
            occupied: [0; SLOTS / 64],
            driver: None,
            driver_due: u64::MAX,
            stopping: false,
        }
    }

    /// The first tick at or after `at` (a deadline is never met early).
    #[inline]
    fn tick_at_or_after(&self, at: Moment) -> u64 {
        let Some(origin) = self.origin else {
            return 0;
        };
        at.nanos()
            .saturating_sub(origin.nanos())
            .div_ceil(NANOS_PER_TICK)
    }

    /// The tick `at` falls in.
    fn tick_of(&self, at: Moment) -> u64 {
        let Some(origin) = self.origin else {
            return 0;
        };
        at.nanos().saturating_sub(origin.nanos()) / NANOS_PER_TICK
    }

    #[inline]
    pub(super) fn register(
        &mut self,
        deadline: Moment,
        waker: &Waker,
        stop_ends_it: bool,
    ) -> Registered {
        let due = match self.due_tick(deadline, stop_ends_it) {
            Ok(due) => due,
            Err(ended) => return ended,
        };
        let state = State::Waiting {
            waker: waker.clone(),
            stop_ends_it,
        };
        let key = self.take_entry(due, state);
        self.insert(key, due);
        Registered::Waiting(key)
    }

    /// The tick a wait until `deadline` is due at, or how it ends without waiting: the wheel is
    /// not driven, a stop ends it and the worker is stopping, or its slot was visited already
    /// (it is past).
    #[inline(always)]
    fn due_tick(&self, deadline: Moment, stop_ends_it: bool) -> Result<u64, Registered> {
        if !self.driven {
            return Err(Registered::NotDriven);
        }
        if stop_ends_it && self.stopping {
            return Err(Registered::Ended(Expiry::Stopping));
        }
        let due = self.tick_at_or_after(deadline);
        if due < self.next_tick {
            return Err(Registered::Ended(Expiry::Elapsed));
        }
        Ok(due)
    }

    /// An unused entry, now holding `state` and due at `due` (in no slot yet).
    #[inline]
    fn take_entry(&mut self, due: u64, state: State) -> Key {
        match self.free {
            NONE => {
                let index = self.entries.len() as u32;
                self.entries.push(Entry {
                    due,
                    generation: 0,
                    slot: 0,
                    position: NONE,
                    state,
                });
                Key {
                    index,
                    generation: 0,
                }
            }
            index => {
                let entry = &mut self.entries[index as usize];
                if let State::Free { next } = entry.state {
                    self.free = next;
                }
                entry.due = due;
                entry.state = state;
                Key {
                    index,
                    generation: entry.generation,
                }
            }
        }
    }

    /// Puts `key` in the slot of tick `due`, waking the driver when that comes before its sleep
    /// ends.
    #[inline]
    fn insert(&mut self, key: Key, due: u64) {
        let slot = (due % SLOTS as u64) as usize;
        let entry = &mut self.entries[key.index as usize];
        entry.slot = slot as u32;
        entry.position = self.slots[slot].len() as u32;
        self.slots[slot].push(key);
        self.occupied[slot / 64] |= 1 << (slot % 64);
        if due < self.driver_due {
            // Sooner than the driver's sleep: it sleeps again, until this one.
            self.driver_due = due;
            if let Some(driver) = &self.driver {
                driver.wake_by_ref();
            }
        }
    }

    /// Keys in slots, and entries not free.
    #[cfg(test)]
    pub(super) fn occupancy(&self) -> (usize, usize) {
        let keys = self.slots.iter().map(Vec::len).sum();
        let used = self
            .entries
            .iter()
            .filter(|entry| !matches!(entry.state, State::Free { .. }))
            .count();
        (keys, used)
    }

    /// A [`Timer`](super::Timer)'s entry, on a driven wheel.
    pub(super) fn own_entry(&mut self) -> Option<Key> {
        self.driven.then(|| {
            let state = State::Owned {
                waker: None,
                armed: false,
                stop_ends_it: false,
                ended: None,
            };
            self.take_entry(0, state)
        })
    }

    /// Arms the [`Timer`](super::Timer) entry `key` for a wait until `deadline`; `None` when it
    /// cannot serve (a wait is armed on it already, or its timer is gone): the wait takes an entry
    /// of its own.
    #[inline(always)]
    pub(super) fn arm(
        &mut self,
        key: Key,
        deadline: Moment,
        waker: &Waker,
        stop_ends_it: bool,
    ) -> Option<Registered> {
        let due = match self.due_tick(deadline, stop_ends_it) {
            Ok(due) => due,
            Err(ended) => return Some(ended),
        };
        let visits = self.next_visit(self.entries.get(key.index as usize)?.slot);
        let entry = &mut self.entries[key.index as usize];
        if entry.generation != key.generation {
            return None;
        }
        let State::Owned {
            waker: kept,
            armed,
            stop_ends_it: stops,
            ended,
        } = &mut entry.state
        else {
            return None;
        };
        if *armed {
            return None;
        }
        (*armed, *stops, *ended) = (true, stop_ends_it, None);
        match kept {
            Some(kept) if kept.will_wake(waker) => {}
            kept => *kept = Some(waker.clone()),
        }
        entry.due = due;
        if entry.position == NONE {
            self.insert(key, due);
        } else if visits > due {
            // Its slot comes up after the deadline: it moves to the deadline's.
            let (slot, position) = (entry.slot as usize, entry.position as usize);
            self.remove_from_slot(slot, position);
            self.insert(key, due);
        }
        // Otherwise its slot comes up first, and the wheel moves it on then.
        Some(Registered::Armed(key))
    }

    /// The tick at which the wheel next visits `slot`.
    #[inline]
    fn next_visit(&self, slot: u32) -> u64 {
        let from = (self.next_tick % SLOTS as u64) as u32;
        self.next_tick + u64::from((slot + SLOTS as u32 - from) % SLOTS as u32)
    }

    #[inline(always)]
    pub(super) fn poll_owned(&mut self, key: Key, waker: &Waker) -> Poll<Expiry> {
        let entry = &mut self.entries[key.index as usize];
        debug_assert_eq!(
            entry.generation, key.generation,
            "a timer dropped while it waited"
        );
        match &mut entry.state {
            State::Owned {
                ended: Some(why), ..
            } => Poll::Ready(*why),
            State::Owned {
                waker: Some(kept), ..
            } => {
                if !kept.will_wake(waker) {
                    kept.clone_from(waker);
                }
                Poll::Pending
            }
            _ => Poll::Ready(Expiry::Elapsed),
        }
    }

    /// The wait armed on the [`Timer`](super::Timer) entry `key` is over: the entry stays in its
    /// slot, for the next wait or for the wheel to drop when it comes up.
    #[inline(always)]
    pub(super) fn disarm(&mut self, key: Key) {
        let entry = &mut self.entries[key.index as usize];
        if entry.generation != key.generation {
            return;
        }
        if let State::Owned { armed, ended, .. } = &mut entry.state {
            (*armed, *ended) = (false, None);
        }
    }

    #[inline]
    pub(super) fn poll_entry(&mut self, key: Key, waker: &Waker) -> Poll<Expiry> {
        match &mut self.entries[key.index as usize].state {
            State::Waiting { waker: kept, .. } => {
                if !kept.will_wake(waker) {
                    kept.clone_from(waker);
                }
                Poll::Pending
            }
            State::Ended(why) => Poll::Ready(*why),
            State::Free { .. } | State::Owned { .. } => {
                unreachable!("a wait's entry was freed while it was held")
            }
        }
    }

    /// The wait is over (answered, or its end seen): its entry is unused from now, and its key
    /// leaves its slot at once. A slot then holds only waits under way: no slot grows with
    /// waits long answered (which made its vector allocate as a busy second went by).
    #[inline]
    pub(super) fn release(&mut self, key: Key) {
        let entry = &mut self.entries[key.index as usize];
        let (slot, position) = (entry.slot, entry.position);
        entry.generation = entry.generation.wrapping_add(1);
        entry.state = State::Free { next: self.free };
        entry.position = NONE;
        self.free = key.index;
        if position != NONE {
            self.remove_from_slot(slot as usize, position as usize);
        }
    }

    /// Takes the key at `position` out of `slot`, the last key taking its place.
    #[inline]
    fn remove_from_slot(&mut self, slot: usize, position: usize) {
        let keys = &mut self.slots[slot];
        keys.swap_remove(position);
        if let Some(moved) = keys.get(position) {
            self.entries[moved.index as usize].position = position as u32;
        }
        if keys.is_empty() {
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
    }

    /// Visits every slot whose ticks have come up to `now` (all of them once, when more than a
    /// turn passed), moving the wakers of the entries due into `woken`.
    fn advance(&mut self, now: u64, woken: &mut Vec<Waker>) {
        if now < self.next_tick {
            return;
        }
        let last = now.min(self.next_tick + SLOTS as u64 - 1);
        for tick in self.next_tick..=last {
            let slot = (tick % SLOTS as u64) as usize;
            if self.occupied[slot / 64] & (1 << (slot % 64)) == 0 {
                continue;
            }
            let mut position = 0;
            while let Some(&key) = self.slots[slot].get(position) {
                let entry = &mut self.entries[key.index as usize];
                debug_assert_eq!(entry.generation, key.generation, "a released key in a slot");
                if let State::Owned {
                    waker,
                    armed,
                    ended,
                    ..
                } = &mut entry.state
                {
                    let due = entry.due;
                    if *armed && ended.is_none() && due > now {
                        let to = (due % SLOTS as u64) as usize;
                        if to == slot {
                            // A deadline a turn or more away.
                            position += 1;
                        } else {
                            // Armed again, later, since it came here: on to its deadline's.
                            self.remove_from_slot(slot, position);
                            self.insert(key, due);
                        }
                        continue;
                    }
                    if *armed && ended.is_none() {
                        *ended = Some(Expiry::Elapsed);
                        woken.extend(waker.clone());
                    }
                    // Due, or no wait under way: out of the wheel until armed again.
                    entry.position = NONE;
                    self.remove_from_slot(slot, position);
                    continue;
                }
                // A deadline a turn or more away.
                if entry.due > now {
                    position += 1;
                    continue;
                }
                // Due (one a stop ended already keeps its reason).
                if matches!(entry.state, State::Waiting { .. }) {
                    if let State::Waiting { waker, .. } =
                        std::mem::replace(&mut entry.state, State::Ended(Expiry::Elapsed))
                    {
                        woken.push(waker);
                    }
                }
                entry.position = NONE;
                self.remove_from_slot(slot, position);
            }
        }
        self.next_tick = now + 1;
    }

    /// The first tick from `next_tick` whose slot holds a key, if any does: a word of the
    /// bitmap at a time, around the wheel from `next_tick`'s slot and back to it.
    fn next_occupied(&self) -> Option<u64> {
        const WORDS: usize = SLOTS / 64;
        let start = (self.next_tick % SLOTS as u64) as usize;
        let (first, shift) = (start / 64, start % 64);
        for step in 0..=WORDS {
            let word = (first + step) % WORDS;
            let mut bits = self.occupied[word];
            if step == 0 {
                bits &= u64::MAX << shift;
            } else if step == WORDS {
                bits &= !(u64::MAX << shift);
            }
            if bits != 0 {
                let slot = word * 64 + bits.trailing_zeros() as usize;
                let offset = (slot + SLOTS - start) % SLOTS;
                return Some(self.next_tick + offset as u64);
            }
        }
        None
    }

    /// Ends every wait a stop ends, moving their wakers into `woken`.
    fn stop(&mut self, woken: &mut Vec<Waker>) {
        self.stopping = true;
        for entry in &mut self.entries {
            if let State::Owned {
                waker,
                armed: true,
                stop_ends_it: true,
                ended: ended @ None,
            } = &mut entry.state
            {
                *ended = Some(Expiry::Stopping);
                woken.extend(waker.clone());
                continue;
            }
            if matches!(
                entry.state,
                State::Waiting {
                    stop_ends_it: true,
                    ..
                }
            ) {
                if let State::Waiting { waker, .. } =
                    std::mem::replace(&mut entry.state, State::Ended(Expiry::Stopping))
                {
                    woken.push(waker);
                }
            }
        }
    }
}

/// Ends every wait of [`until_or_stop`](super::until_or_stop) on this thread now, and any begun
/// later: the worker's graceful stop.
pub fn stop_waits() {
    let mut woken = Vec::new();
    with_wheel(|wheel| wheel.stop(&mut woken));
    woken.into_iter().for_each(Waker::wake);
}

/// Drives this thread's wheel while it runs: the worker's task for its deadlines. Until it runs,
/// and after it is dropped, waits on this thread use tokio's timer.
pub async fn drive() {
    struct Driving;
    impl Drop for Driving {
        fn drop(&mut self) {
            let _ = WHEEL.try_with(|wheel| {
                let mut wheel = wheel.borrow_mut();
                wheel.driven = false;
                wheel.driver = None;
                wheel.driver_due = u64::MAX;
            });
        }
    }
    with_wheel(|wheel| {
        let now = Moment::now();
        let origin = *wheel.origin.get_or_insert(now);
        if wheel.slots.is_empty() {
            // Room in every slot from the start (32 KiB): a slot's first key would otherwise
            // allocate, a thousand times in the wheel's first turn.
            wheel.slots = (0..SLOTS).map(|_| Vec::with_capacity(4)).collect();
        }
        wheel.next_tick = wheel.next_tick.max(wheel.tick_of(now.max(origin)));
        wheel.driven = true;
        wheel.stopping = false;
    });
    let _driving = Driving;
    let mut sleep = Box::pin(tokio::time::sleep_until(tokio::time::Instant::now()));
    let mut sleeping_until = None;
    let mut woken = Vec::new();
    std::future::poll_fn(|cx| loop {
        let target = with_wheel(|wheel| {
            let now = wheel.tick_of(Moment::now());
            wheel.advance(now, &mut woken);
            let next = wheel.next_occupied();
            wheel.driver_due = next.unwrap_or(u64::MAX);
            match &mut wheel.driver {
                Some(driver) if driver.will_wake(cx.waker()) => {}
                driver => *driver = Some(cx.waker().clone()),
            }
            let origin = wheel.origin.unwrap_or_else(Moment::now);
            next.map(|tick| origin + Duration::from_millis(tick))
        });
        woken.drain(..).for_each(Waker::wake);
        let Some(target) = target else {
            sleeping_until = None;
            return Poll::<()>::Pending;
        };
        if sleeping_until != Some(target) {
            sleep.as_mut().reset(target.to_instant());
            sleeping_until = Some(target);
        }
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        sleeping_until = None;
    })
    .await
}
