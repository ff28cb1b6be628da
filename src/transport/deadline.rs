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

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

use super::clock::Moment;

mod wheel;

pub use wheel::{drive, stop_waits};
use wheel::{with_wheel, Key, Registered, WHEEL};

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
        with_wheel(|wheel| wheel.occupancy())
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
