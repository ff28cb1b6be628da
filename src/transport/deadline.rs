//! Deadlines on the waits of the request path, kept by each worker in a timer wheel of its own:
//! registering one and letting it go are a push and a generation bump on this thread's wheel,
//! with no lock, no atomic and no clock read. tokio's timer, which they replace, cost about 700
//! instructions for each wait a request makes (registration under its driver's mutex, its entry's
//! atomic state, the deadline's conversion to ticks, its removal on drop): two a keep-alive
//! request, 1,400 of its 12,200 (callgrind, bench/results/diet.md).
//!
//! The worker runs [`drive`] as a task: it sleeps on one tokio timer until the next slot of the
//! wheel that holds entries, wakes those due and sleeps again, and is woken early only when a
//! deadline comes before the one it sleeps until. The wheel has `SLOTS` slots of a millisecond
//! (tokio's own resolution); a deadline further away waits in its slot for its turn of the wheel.
//! An entry let go before its deadline (the usual end: the wait was answered) leaves its slot at
//! once (its key swapped with the slot's last), so the wheel holds only the waits under way.
//!
//! A connection's waits that come one after another go through a [`Timer`] of its own: one
//! entry, armed for each wait and left in its slot between them (see there).
//!
//! Deadlines are [`Moment`]s, the request path's clock; a wait on tokio's timer converts.
//!
//! The worker's graceful stop also goes through the wheel: [`stop_waits`] ends every wait made
//! with [`until_or_stop`] at once, and any made after it, as a connection between requests needs.
//!
//! A thread with no driver (a test, a thread of the control plane) gets tokio's timer instead,
//! through the same calls.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Sleep;

use super::clock::Moment;

/// Slots in the wheel, of a millisecond each: one turn is a little over a second.
const SLOTS: usize = 1024;
/// A tick (a slot's time) in nanoseconds.
const NANOS_PER_TICK: u64 = 1_000_000;
/// Marks the end of the free list, and "no tick".
const NONE: u32 = u32::MAX;

/// The deadline of a wait passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

/// Why a wait of [`until_or_stop`] ended before what it waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Its deadline passed.
    Elapsed,
    /// The worker began a graceful stop.
    Stopping,
}

/// `future`, unless `deadline` passes first. As `tokio::time::timeout_at`, with the worker's
/// wheel.
pub fn timeout_at<F: Future>(deadline: Moment, future: F) -> Timeout<F> {
    Timeout(Bounded::new(deadline, future, false))
}

/// `future`, unless `limit` passes first.
pub fn timeout<F: Future>(limit: Duration, future: F) -> Timeout<F> {
    timeout_at(Moment::now() + limit, future)
}

/// `future`, unless `deadline` passes or the worker begins a graceful stop first.
pub fn until_or_stop<F: Future>(deadline: Moment, future: F) -> UntilOrStop<F> {
    UntilOrStop(Bounded::new(deadline, future, true))
}

/// A connection's own entry in its worker's wheel, kept from one wait to the next: the waits
/// of its request path that come one after another (the next request, a server's response
/// head) arm it and let it go, where a plain wait takes an entry and frees it. Arming stores the
/// new deadline and, when the entry's slot comes later than the deadline, moves it; letting go
/// leaves it where it is: the wheel skips or moves it when its slot comes up. So a wait that is
/// answered costs a few stores, not a registration and a removal (callgrind: about 400 of a
/// keep-alive request's instructions, bench/results/diet.md).
///
/// One wait at a time: a wait made through it while another is armed takes a plain entry. It
/// belongs to the thread that made it (a wheel is per thread), and frees its entry when dropped.
pub struct Timer {
    key: Option<Key>,
    /// Not `Send`: its key is an index into this thread's wheel.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Timer {
    /// An entry in this thread's wheel, or none on a thread that drives no wheel (its waits
    /// then use tokio's timer, as plain ones do).
    pub fn new() -> Timer {
        let key = WHEEL
            .try_with(|wheel| wheel.borrow_mut().own_entry())
            .ok()
            .flatten();
        Timer {
            key,
            _thread: std::marker::PhantomData,
        }
    }

    /// What the waits are made through: a copy of the entry's key.
    pub fn waits(&self) -> TimerWaits {
        TimerWaits { key: self.key }
    }
}

impl Default for Timer {
    fn default() -> Timer {
        Timer::new()
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            let _ = WHEEL.try_with(|wheel| wheel.borrow_mut().release(key));
        }
    }
}

/// The waits made through a [`Timer`]; as [`timeout_at`] and [`until_or_stop`].
#[derive(Clone, Copy)]
pub struct TimerWaits {
    key: Option<Key>,
}

impl TimerWaits {
    /// `future`, unless `deadline` passes first.
    pub fn timeout_at<F: Future>(self, deadline: Moment, future: F) -> Timeout<F> {
        Timeout(Bounded::owned(deadline, future, false, self.key))
    }

    /// `future`, unless `deadline` passes or the worker begins a graceful stop first.
    pub fn until_or_stop<F: Future>(self, deadline: Moment, future: F) -> UntilOrStop<F> {
        UntilOrStop(Bounded::owned(deadline, future, true, self.key))
    }
}

/// Completes at `deadline`.
pub async fn sleep_until(deadline: Moment) {
    let _ = timeout_at(deadline, std::future::pending::<()>()).await;
}

/// The future of [`timeout_at`].
pub struct Timeout<F>(Bounded<F>);

/// The future of [`until_or_stop`].
pub struct UntilOrStop<F>(Bounded<F>);

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning of the only field.
        let bounded = unsafe { self.map_unchecked_mut(|timeout| &mut timeout.0) };
        bounded.poll(cx).map(|done| done.map_err(|_| Elapsed))
    }
}

impl<F: Future> Future for UntilOrStop<F> {
    type Output = Result<F::Output, Expiry>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning of the only field.
        let bounded = unsafe { self.map_unchecked_mut(|until| &mut until.0) };
        bounded.poll(cx)
    }
}

/// A future with a deadline, and its place in the wheel once it had to wait.
struct Bounded<F> {
    future: F,
    deadline: Moment,
    stop_ends_it: bool,
    /// The [`Timer`] it waits through, if any.
    owner: Option<Key>,
    timer: Waiting,
}

enum Waiting {
    /// Not yet registered: the future has not had to wait.
    None,
    /// An entry of its own in this thread's wheel.
    Wheel(Key),
    /// Its owner's entry, armed for it.
    Owned(Key),
    /// tokio's timer, on a thread that drives no wheel (boxed: rare, and large).
    Tokio(Pin<Box<Sleep>>),
}

impl<F: Future> Bounded<F> {
    fn new(deadline: Moment, future: F, stop_ends_it: bool) -> Bounded<F> {
        Bounded::owned(deadline, future, stop_ends_it, None)
    }

    #[inline]
    fn owned(deadline: Moment, future: F, stop_ends_it: bool, owner: Option<Key>) -> Bounded<F> {
        Bounded {
            future,
            deadline,
            stop_ends_it,
            owner,
            timer: Waiting::None,
        }
    }

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<F::Output, Expiry>> {
        // SAFETY: `future` is pinned with `self` and never moved; the other fields are not
        // pinned (the tokio timer is boxed).
        let this = unsafe { self.get_unchecked_mut() };
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        if let Poll::Ready(output) = future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        let ended = match &mut this.timer {
            Waiting::Owned(key) => with_wheel(|wheel| wheel.poll_owned(*key, cx.waker())),
            Waiting::Wheel(key) => with_wheel(|wheel| wheel.poll_entry(*key, cx.waker())),
            Waiting::Tokio(sleep) => sleep.as_mut().poll(cx).map(|()| Expiry::Elapsed),
            Waiting::None => {
                let waker = cx.waker();
                let (deadline, stop_ends_it) = (this.deadline, this.stop_ends_it);
                let registered = with_wheel(|wheel| {
                    this.owner
                        .and_then(|key| wheel.arm(key, deadline, waker, stop_ends_it))
                        .unwrap_or_else(|| wheel.register(deadline, waker, stop_ends_it))
                });
                match registered {
                    Registered::Armed(key) => {
                        this.timer = Waiting::Owned(key);
                        Poll::Pending
                    }
                    Registered::Waiting(key) => {
                        this.timer = Waiting::Wheel(key);
                        Poll::Pending
                    }
                    Registered::Ended(why) => Poll::Ready(why),
                    Registered::NotDriven => {
                        let mut sleep = Box::pin(tokio::time::sleep_until(deadline.to_instant()));
                        let polled = sleep.as_mut().poll(cx).map(|()| Expiry::Elapsed);
                        this.timer = Waiting::Tokio(sleep);
                        polled
                    }
                }
            }
        };
        ended.map(Err)
    }
}

impl<F> Drop for Bounded<F> {
    fn drop(&mut self) {
        // `try_with`: a task dropped while the thread ends finds its wheel gone.
        match self.timer {
            Waiting::Wheel(key) => {
                let _ = WHEEL.try_with(|wheel| wheel.borrow_mut().release(key));
            }
            Waiting::Owned(key) => {
                let _ = WHEEL.try_with(|wheel| wheel.borrow_mut().disarm(key));
            }
            Waiting::None | Waiting::Tokio(_) => {}
        }
    }
}

/// An entry of the wheel: its index, and the generation the index had when it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    index: u32,
    generation: u32,
}

enum Registered {
    Waiting(Key),
    Armed(Key),
    Ended(Expiry),
    NotDriven,
}

enum State {
    /// Unused; the next unused index.
    Free {
        next: u32,
    },
    Waiting {
        waker: Waker,
        stop_ends_it: bool,
    },
    Ended(Expiry),
    /// A [`Timer`]'s: armed by one wait after another, and left in its slot between them.
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

struct Entry {
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
struct Wheel {
    /// A driver runs on this thread.
    driven: bool,
    /// Tick 0.
    origin: Option<Moment>,
    /// The first tick whose slot has not been visited yet.
    next_tick: u64,
    entries: Vec<Entry>,
    /// The first unused entry (`NONE`: take a new one).
    free: u32,
    /// Per slot, the entries due at one of its ticks (some let go since).
    slots: Vec<Vec<Key>>,
    /// A bit per slot: whether it holds any key.
    occupied: [u64; SLOTS / 64],
    /// The driver's waker, and the tick it sleeps until (`u64::MAX`: until woken).
    driver: Option<Waker>,
    driver_due: u64,
    /// A graceful stop began: waits of `until_or_stop` end.
    stopping: bool,
}

thread_local! {
    static WHEEL: RefCell<Wheel> = const { RefCell::new(Wheel::new()) };
}

fn with_wheel<T>(f: impl FnOnce(&mut Wheel) -> T) -> T {
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
    fn register(&mut self, deadline: Moment, waker: &Waker, stop_ends_it: bool) -> Registered {
        if !self.driven {
            return Registered::NotDriven;
        }
        if stop_ends_it && self.stopping {
            return Registered::Ended(Expiry::Stopping);
        }
        let due = self.tick_at_or_after(deadline);
        if due < self.next_tick {
            // Its slot was visited already: it is past.
            return Registered::Ended(Expiry::Elapsed);
        }
        let state = State::Waiting {
            waker: waker.clone(),
            stop_ends_it,
        };
        let key = self.take_entry(due, state);
        self.insert(key, due);
        Registered::Waiting(key)
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

    /// A [`Timer`]'s entry, on a driven wheel.
    fn own_entry(&mut self) -> Option<Key> {
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

    /// Arms the [`Timer`] entry `key` for a wait until `deadline`; `None` when it cannot serve
    /// (a wait is armed on it already, or its timer is gone): the wait takes an entry of its own.
    #[inline(always)]
    fn arm(
        &mut self,
        key: Key,
        deadline: Moment,
        waker: &Waker,
        stop_ends_it: bool,
    ) -> Option<Registered> {
        if !self.driven {
            return Some(Registered::NotDriven);
        }
        if stop_ends_it && self.stopping {
            return Some(Registered::Ended(Expiry::Stopping));
        }
        let due = self.tick_at_or_after(deadline);
        if due < self.next_tick {
            return Some(Registered::Ended(Expiry::Elapsed));
        }
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
    fn poll_owned(&mut self, key: Key, waker: &Waker) -> Poll<Expiry> {
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

    /// The wait armed on the [`Timer`] entry `key` is over: the entry stays in its slot, for
    /// the next wait or for the wheel to drop when it comes up.
    #[inline(always)]
    fn disarm(&mut self, key: Key) {
        let entry = &mut self.entries[key.index as usize];
        if entry.generation != key.generation {
            return;
        }
        if let State::Owned { armed, ended, .. } = &mut entry.state {
            (*armed, *ended) = (false, None);
        }
    }

    #[inline]
    fn poll_entry(&mut self, key: Key, waker: &Waker) -> Poll<Expiry> {
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
    fn release(&mut self, key: Key) {
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

/// Ends every wait of [`until_or_stop`] on this thread now, and any begun later: the worker's
/// graceful stop.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    fn on_a_driven_thread<F: Future<Output = ()> + 'static>(test: impl FnOnce() -> F) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async {
            let driver = tokio::task::spawn_local(drive());
            tokio::task::yield_now().await;
            test().await;
            driver.abort();
        });
    }

    #[test]
    fn a_wait_ends_at_its_deadline_never_before() {
        on_a_driven_thread(|| async {
            for millis in [0u64, 3, 20, 45] {
                let began = Moment::now();
                let deadline = began + Duration::from_millis(millis);
                let waited = timeout_at(deadline, std::future::pending::<()>()).await;
                assert_eq!(waited, Err(Elapsed));
                let now = Moment::now();
                assert!(now >= deadline, "{millis} ms: ended early");
                assert!(
                    now - deadline < Duration::from_millis(30),
                    "{millis} ms: ended {:?} late",
                    now - deadline
                );
            }
        });
    }

    /// A receiver of `value`, sent by another task after a turn of the runtime.
    fn answered_soon(value: u32) -> tokio::sync::oneshot::Receiver<u32> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        tokio::task::spawn_local(async move {
            tokio::task::yield_now().await;
            let _ = sender.send(value);
        });
        receiver
    }

    #[test]
    fn an_answered_wait_is_answered_and_lets_its_entry_go() {
        on_a_driven_thread(|| async {
            let far = Moment::now() + Duration::from_secs(60);
            for round in 0..1000 {
                let receiver = answered_soon(round);
                assert_eq!(timeout_at(far, receiver).await, Ok(Ok(round)));
            }
            // Each entry was let go before the next was taken: one is reused throughout, and
            // no slot keeps the keys of waits that were answered.
            assert_eq!(with_wheel(|wheel| wheel.entries.len()), 1);
            assert!(with_wheel(|wheel| wheel.slots.iter().all(Vec::is_empty)));
        });
    }

    #[test]
    fn deadlines_a_turn_of_the_wheel_and_more_away_wait_for_their_turn() {
        on_a_driven_thread(|| async {
            let began = Moment::now();
            let ended = Rc::new(Cell::new(Vec::new()));
            // 1,030 ms is a turn of the wheel and 6 slots on: it must not end at slot 6.
            let waits: Vec<_> = [1030u64, 6, 500]
                .into_iter()
                .map(|millis| {
                    let ended = Rc::clone(&ended);
                    tokio::task::spawn_local(async move {
                        let deadline = began + Duration::from_millis(millis);
                        let _ = timeout_at(deadline, std::future::pending::<()>()).await;
                        assert!(Moment::now() >= deadline);
                        let mut order = ended.take();
                        order.push(millis);
                        ended.set(order);
                    })
                })
                .collect();
            for wait in waits {
                wait.await.unwrap();
            }
            assert_eq!(ended.take(), vec![6, 500, 1030]);
        });
    }

    #[test]
    fn a_stop_ends_waits_that_it_ends_now_and_later_and_no_others() {
        on_a_driven_thread(|| async {
            let far = Moment::now() + Duration::from_secs(60);
            let idle = tokio::task::spawn_local(until_or_stop(far, std::future::pending::<()>()));
            let bounded = tokio::task::spawn_local(timeout_at(
                Moment::now() + Duration::from_millis(200),
                std::future::pending::<()>(),
            ));
            tokio::task::yield_now().await;
            stop_waits();
            assert_eq!(idle.await.unwrap(), Err(Expiry::Stopping));
            let later = until_or_stop(far, std::future::pending::<()>()).await;
            assert_eq!(later, Err(Expiry::Stopping));
            // A plain deadline keeps running to its end.
            let began = Moment::now();
            assert_eq!(bounded.await.unwrap(), Err(Elapsed));
            assert!(began.elapsed() > Duration::from_millis(100));
            with_wheel(|wheel| wheel.stopping = false);
        });
    }

    /// Keys in slots, and entries not free.
    fn occupancy() -> (usize, usize) {
        with_wheel(|wheel| {
            let keys = wheel.slots.iter().map(Vec::len).sum();
            let used = wheel
                .entries
                .iter()
                .filter(|entry| !matches!(entry.state, State::Free { .. }))
                .count();
            (keys, used)
        })
    }

    #[test]
    fn a_timer_s_waits_end_at_their_deadlines_and_share_one_entry() {
        on_a_driven_thread(|| async {
            let timer = Timer::new();
            assert_eq!(occupancy(), (0, 1));
            let far = Moment::now() + Duration::from_secs(60);
            for round in 0..1000 {
                let receiver = answered_soon(round);
                let waits = timer.waits();
                assert_eq!(waits.timeout_at(far, receiver).await, Ok(Ok(round)));
            }
            // One entry throughout, in one slot at most, whatever the waits did.
            assert_eq!(occupancy(), (1, 1));
            for millis in [3u64, 20, 45] {
                let deadline = Moment::now() + Duration::from_millis(millis);
                let waited = timer
                    .waits()
                    .timeout_at(deadline, std::future::pending::<()>())
                    .await;
                assert_eq!(waited, Err(Elapsed));
                let now = Moment::now();
                assert!(now >= deadline, "{millis} ms: ended early");
                assert!(
                    now - deadline < Duration::from_millis(30),
                    "{millis} ms late"
                );
            }
            drop(timer);
            assert_eq!(occupancy(), (0, 0));
        });
    }

    #[test]
    fn a_timer_armed_later_than_its_slot_waits_for_its_own_deadline() {
        on_a_driven_thread(|| async {
            let timer = Timer::new();
            // Armed for 20 ms and answered: its key stays in the 20 ms slot.
            let soon = Moment::now() + Duration::from_millis(20);
            assert_eq!(timer.waits().timeout_at(soon, async { 1 }).await, Ok(1));
            let ready = timer.waits().timeout_at(soon, tokio::task::yield_now());
            assert_eq!(ready.await, Ok(()));
            // Armed again for a minute: when the 20 ms slot comes up, it is moved on, not
            // ended (a plain deadline of 150 ms ends first).
            let far = Moment::now() + Duration::from_secs(60);
            let long = timer.waits().timeout_at(far, std::future::pending::<()>());
            let began = Moment::now();
            let outer = timeout_at(began + Duration::from_millis(150), long).await;
            assert_eq!(outer, Err(Elapsed));
            assert!(began.elapsed() >= Duration::from_millis(150));
            // Armed for a minute and then, sooner, for 40 ms: it moves back to 40 ms.
            let began = Moment::now();
            let short = timer.waits().timeout_at(
                began + Duration::from_millis(40),
                std::future::pending::<()>(),
            );
            assert_eq!(short.await, Err(Elapsed));
            assert!(began.elapsed() >= Duration::from_millis(40));
            assert!(began.elapsed() < Duration::from_millis(100));
        });
    }

    #[test]
    fn a_second_wait_on_a_busy_timer_takes_an_entry_of_its_own() {
        on_a_driven_thread(|| async {
            let timer = Timer::new();
            let waits = timer.waits();
            let began = Moment::now();
            let first = waits.timeout_at(
                began + Duration::from_millis(60),
                std::future::pending::<()>(),
            );
            let second = waits.timeout_at(began + Duration::from_millis(20), async {
                assert_eq!(occupancy(), (1, 1));
                std::future::pending::<()>().await
            });
            let (first, second) = tokio::join!(first, second);
            assert_eq!((first, second), (Err(Elapsed), Err(Elapsed)));
            assert!(began.elapsed() >= Duration::from_millis(60));
            assert_eq!(occupancy().1, 1);
        });
    }

    #[test]
    fn a_stop_ends_a_timer_s_wait_until_a_stop() {
        on_a_driven_thread(|| async {
            let timer = Timer::new();
            let far = Moment::now() + Duration::from_secs(60);
            let idle = tokio::task::spawn_local(
                timer
                    .waits()
                    .until_or_stop(far, std::future::pending::<()>()),
            );
            tokio::task::yield_now().await;
            stop_waits();
            assert_eq!(idle.await.unwrap(), Err(Expiry::Stopping));
            let later = timer
                .waits()
                .until_or_stop(far, std::future::pending::<()>());
            assert_eq!(later.await, Err(Expiry::Stopping));
            // A plain deadline through it keeps running to its end.
            let soon = Moment::now() + Duration::from_millis(10);
            let bounded = timer.waits().timeout_at(soon, std::future::pending::<()>());
            assert_eq!(bounded.await, Err(Elapsed));
            with_wheel(|wheel| wheel.stopping = false);
        });
    }

    #[tokio::test]
    async fn a_thread_without_a_driver_waits_on_tokios_timer() {
        let deadline = Moment::now() + Duration::from_millis(20);
        let waited = timeout_at(deadline, std::future::pending::<()>()).await;
        assert_eq!(waited, Err(Elapsed));
        assert!(Moment::now() >= deadline);
        assert_eq!(timeout_at(deadline, async { 7 }).await, Ok(7));
        let timer = Timer::new();
        let deadline = Moment::now() + Duration::from_millis(20);
        let waited = timer
            .waits()
            .timeout_at(deadline, std::future::pending::<()>());
        assert_eq!(waited.await, Err(Elapsed));
        assert!(Moment::now() >= deadline);
    }
}
