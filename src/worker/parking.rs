//! The parking lot: keep-alive connections that stay idle leave their task and wait in the
//! worker's own epoll set, so an idle connection costs a small slot rather than a task, its
//! timers and a tokio registration.
//!
//! A connection that has sent nothing for `session::PARK_AFTER` since its last response (or since it was
//! accepted) is parked: its socket moves out of tokio's reactor into this lot's epoll instance,
//! which is itself registered with tokio, and its task ends. When the client sends its next
//! request (or closes), one `epoll_wait` on the lot names exactly the connections that woke —
//! the cost grows with the connections that are doing something, not with those that wait —
//! and each is served by a new task as if just accepted. Parked connections are closed, as idle
//! ones always were, when `client_idle` has passed since their last response; they leave in
//! the order they arrived, and all share that timeout, so a queue in arrival order is a timer
//! list with the earliest deadline in front.
//!
//! Busy connections never park: a keep-alive client under load sends its next request within
//! microseconds. The cost of parking (three epoll_ctl calls and a task) is paid only by
//! connections that have been quiet for `PARK_AFTER` anyway. Figures in
//! bench/results/optimisation.md.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::stats::Stats;
use crate::transport::Detached;

/// Connections woken per `epoll_wait` call on the lot.
const WAKE_BATCH: usize = 64;

/// A connection waiting in the lot.
pub struct Parked<G> {
    pub stream: Detached,
    pub peer: SocketAddr,
    pub listener: usize,
    /// Counts the connection as open while it waits here.
    pub guard: G,
    /// An HTTP/2 connection's state (settings, windows, the client's HPACK table), boxed so
    /// that an HTTP/1.1 connection's slot stays small.
    pub h2: Option<Box<crate::session::h2::Parked>>,
    /// When it is closed unless the client sends something first.
    pub deadline: Instant,
}

struct Slot<G> {
    parked: Parked<G>,
    /// Tells this occupant of the slot from a later one, for the deadline queue.
    serial: u32,
}

pub struct ParkingLot<G> {
    epoll: AsyncFd<OwnedFd>,
    slots: RefCell<slab::Slab<Slot<G>>>,
    /// (deadline, slot, serial) in the order connections were parked.
    deadlines: RefCell<VecDeque<(Instant, u32, u32)>>,
    next_serial: Cell<u32>,
    /// Wakes the lot's task when a connection is parked in an empty lot (its timer is unset).
    parked_into_empty: Notify,
    /// Where the number parked is published (`WorkerCounters::parked`), and whose.
    stats: Arc<Stats>,
    worker: usize,
}

impl<G> ParkingLot<G> {
    /// A lot with its own epoll instance, registered with the current runtime, for `worker`.
    pub fn new(stats: Arc<Stats>, worker: usize) -> io::Result<ParkingLot<G>> {
        // SAFETY: plain syscall; a non-negative result is a new descriptor nobody else owns.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned here alone.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an OwnedFd owns its descriptor until dropped and as_raw_fd always returns it,
        // which is what tokio requires of the registered object.
        let epoll = unsafe { AsyncFd::register_with_interest(epoll, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(ParkingLot {
            epoll,
            slots: RefCell::new(slab::Slab::new()),
            deadlines: RefCell::new(VecDeque::new()),
            next_serial: Cell::new(0),
            parked_into_empty: Notify::new(),
            stats,
            worker,
        })
    }

    /// Publishes how many connections are parked (`WorkerCounters::parked`).
    fn publish_len(&self, len: usize) {
        let gauge = &self.stats.counters[self.worker].parked;
        gauge.store(u32::try_from(len).unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// Parks a connection (already out of tokio's reactor). On error the connection is handed
    /// back, so the caller can close it.
    pub fn park(&self, parked: Parked<G>) -> Result<(), Parked<G>> {
        let mut slots = self.slots.borrow_mut();
        let entry = slots.vacant_entry();
        let Ok(key) = u32::try_from(entry.key()) else {
            return Err(parked);
        };
        let fd = parked.stream.as_raw_fd();
        // Level-triggered: a wake-up that does not fit in one batch is reported again.
        if let Err(error) = epoll_ctl(
            &self.epoll,
            libc::EPOLL_CTL_ADD,
            fd,
            libc::EPOLLIN | libc::EPOLLRDHUP,
            key,
        ) {
            tracing::debug!(%error, "cannot park a connection; closing it");
            return Err(parked);
        }
        let serial = self.next_serial.get().wrapping_add(1);
        self.next_serial.set(serial);
        let deadline = parked.deadline;
        entry.insert(Slot { parked, serial });
        self.publish_len(slots.len());
        let mut deadlines = self.deadlines.borrow_mut();
        let was_empty = deadlines.is_empty();
        deadlines.push_back((deadline, key, serial));
        if was_empty {
            self.parked_into_empty.notify_one();
        }
        Ok(())
    }

    /// Takes the connection in `key` out of the lot and its epoll set.
    fn unpark(&self, key: usize) -> Option<Parked<G>> {
        let slot = {
            let mut slots = self.slots.borrow_mut();
            let slot = slots.try_remove(key)?;
            self.publish_len(slots.len());
            slot
        };
        let fd = slot.parked.stream.as_raw_fd();
        // A descriptor that is closed leaves the set by itself; any error here changes nothing.
        let _ = epoll_ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0, 0);
        Some(slot.parked)
    }

    /// Waits until parked connections have something to say (a request, or their close), and
    /// hands each to `resume`, out of the lot. Closes those whose deadline passes meanwhile.
    pub async fn resume_woken(&self, mut resume: impl FnMut(Parked<G>)) {
        loop {
            let next_deadline = self.deadlines.borrow().front().map(|(at, _, _)| *at);
            tokio::select! {
                ready = self.epoll.readable() => {
                    let Ok(mut ready) = ready else {
                        // The reactor is shutting down.
                        std::future::pending::<()>().await;
                        unreachable!();
                    };
                    if self.take_woken(&mut resume) == 0 {
                        ready.clear_ready();
                        continue;
                    }
                    return;
                }
                () = sleep_until(next_deadline) => self.close_expired(&mut resume),
                () = self.parked_into_empty.notified(), if next_deadline.is_none() => {}
            }
        }
    }

    /// Hands the connections one `epoll_wait` reports to `resume`; returns how many it reported.
    fn take_woken(&self, resume: &mut impl FnMut(Parked<G>)) -> usize {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; WAKE_BATCH];
        // SAFETY: `events` is a writable array of WAKE_BATCH entries; timeout 0 never blocks.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.get_ref().as_raw_fd(),
                events.as_mut_ptr(),
                WAKE_BATCH as i32,
                0,
            )
        };
        let n = usize::try_from(n).unwrap_or(0);
        for event in &events[..n] {
            if let Some(parked) = self.unpark(event.u64 as usize) {
                resume(parked);
            }
        }
        n
    }

    /// Closes the connections whose deadline has passed. An HTTP/2 one is handed to `resume`
    /// marked expired instead: its task sends GOAWAY before the close (over TLS too).
    fn close_expired(&self, resume: &mut impl FnMut(Parked<G>)) {
        let now = Instant::now();
        while let Some(mut parked) = self.take_oldest_if(|deadline| deadline <= now) {
            match &mut parked.h2 {
                Some(h2) => {
                    h2.expire();
                    resume(parked);
                }
                // Dropping it closes the socket and uncounts the connection.
                None => drop(parked),
            }
        }
    }

    /// Closes the connection parked longest (the first in line for its idle timeout), to make
    /// room for a new client at the descriptor budget's cap: false when none is parked.
    pub fn close_oldest(&self) -> bool {
        self.close_oldest_if(|_| true)
    }

    /// Closes the oldest parked connection if `due` says so of its deadline; false when there is
    /// none, or it is not due. Entries of connections that left the lot are skipped.
    fn close_oldest_if(&self, due: impl Fn(Instant) -> bool) -> bool {
        // Dropping it closes the socket and uncounts the connection.
        self.take_oldest_if(due).is_some()
    }

    /// Takes the oldest parked connection out of the lot if `due` says so of its deadline.
    fn take_oldest_if(&self, due: impl Fn(Instant) -> bool) -> Option<Parked<G>> {
        loop {
            let front = self.deadlines.borrow().front().copied();
            let (deadline, key, serial) = front?;
            if !due(deadline) {
                return None;
            }
            self.deadlines.borrow_mut().pop_front();
            let current = self
                .slots
                .borrow()
                .get(key as usize)
                .is_some_and(|slot| slot.serial == serial);
            if current {
                return self.unpark(key as usize);
            }
        }
    }

    /// Hands every parked connection to `resume`, out of the lot (a graceful stop: each then
    /// gets the last call any connection between requests gets, so that a request already on
    /// its way is served rather than met with a close).
    pub fn take_all(&self, mut resume: impl FnMut(Parked<G>)) {
        self.deadlines.borrow_mut().clear();
        let keys: Vec<usize> = self.slots.borrow().iter().map(|(key, _)| key).collect();
        for key in keys {
            if let Some(parked) = self.unpark(key) {
                resume(parked);
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn epoll_ctl(
    epoll: &AsyncFd<OwnedFd>,
    op: libc::c_int,
    fd: RawFd,
    events: libc::c_int,
    key: u32,
) -> io::Result<()> {
    let mut event = libc::epoll_event {
        events: events as u32,
        u64: u64::from(key),
    };
    // SAFETY: both descriptors are open for the duration of the call, and `event` is a valid
    // epoll_event (ignored for EPOLL_CTL_DEL).
    let result = unsafe { libc::epoll_ctl(epoll.get_ref().as_raw_fd(), op, fd, &mut event) };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
