//! The `balanced` intake's hand-off: the worker that accepted a connection serves it, or gives it
//! to the lighter of two candidate workers through that worker's bounded queue when that spreads
//! the load better.
//!
//! What it balances: a worker's load is its active client connections plus the connections
//! already queued to it and not yet taken. Counting the queued ones matters: a burst of accepts
//! would otherwise all see the same idle worker and pile onto it before it could take any.
//!
//! Why two choices: the accepting worker is whoever the kernel woke — with EPOLLEXCLUSIVE that
//! is the first idle waiter in the socket's wait queue, so the same (least busy, most recently
//! idle) worker keeps winning. Handing off fixes who serves the connection without fixing who
//! wakes. Comparing two candidates, not all workers, keeps the choice O(1) and avoids every
//! acceptor herding onto the same momentary minimum, while still keeping the spread within a
//! small constant of the mean (the power of two choices). The first candidate walks all workers
//! in turn (a per-acceptor rotation), the second is random; on a tie the rotating one comes first.
//!
//! When to keep it: a hand-off costs a wake-up of the other worker's thread (a write to its
//! eventfd and one more return from its epoll_wait), which serving the connection here does not.
//! So the acceptor keeps a connection when it is lighter than the chosen candidate, and on equal
//! loads — short connections, mostly zero active — until it has been given `TIE_SLACK` (4)
//! connections more than the candidate: equal loads still get equal shares of
//! new connections (within that slack) however the kernel picks whom to wake, and a hand-off is
//! paid only when the kernel's picks drift apart. Nor is a connection handed to a candidate
//! heavier than the acceptor. Measured (bench/results/handoff-ties.md): 15–20% fewer hand-offs
//! in `fairness`'s short mix at 2 and 8 workers with the same spread; with 50 busy connections
//! at 2 workers loads rarely tie, and the CPU per request did not move whatever share was handed
//! over (0.19 to 0.41 of connections).
//!
//! Never to a stalled worker: a worker whose queue has held a connection for longer than
//! `STALLED_AFTER_US` (50 ms) is not taking its hand-offs (blocked in a long computation), so it
//! is no candidate until it catches up. The kernel, for its part, does not wake a worker that
//! is not waiting in epoll_wait, so a stalled worker accepts nothing either.
//!
//! When a queue is full: the other candidate is tried; if both are full or stalled, the
//! accepting worker keeps the connection. A connection is never dropped for want of a queue.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::stats::{Stats, WorkerCounters};
use crate::transport::Detached;

/// Connections one worker may have queued to it before acceptors look elsewhere.
const QUEUE_CAPACITY: usize = 256;
/// A healthy worker takes a hand-off within one turn of its event loop, but with more workers
/// than cores the scheduler may not run it for tens of milliseconds. At 10 ms, such descheduled
/// but healthy workers were passed over as stalled and the spread suffered (8 workers, 2 cores,
/// 10,000 short connections: coefficient of variation 6.9% at 10 ms, 3.0% at 50 ms). 50 ms still
/// catches a real stall early: the stall benchmark blocks a worker for 500 ms and balanced's p99
/// stays at the no-stall figure (bench/results/stall.md).
const STALLED_AFTER_US: u64 = 50_000;
/// On equal loads, how many connections more than the candidate the accepting worker is given
/// before it hands one over instead of serving it.
const TIE_SLACK: u64 = 4;

/// A connection on its way from the accepting worker to the one that will serve it.
pub struct HandedConnection {
    pub stream: Detached,
    pub peer: SocketAddr,
    pub listener: usize,
    queued_at_us: u64,
}

/// Every worker's hand-off queue, shared by all acceptors.
pub struct HandoffBoard {
    queues: Vec<mpsc::Sender<HandedConnection>>,
    stats: Arc<Stats>,
}

/// One worker's end: where it takes connections handed to it.
pub struct HandoffInbox {
    worker: usize,
    receiver: mpsc::Receiver<HandedConnection>,
    stats: Arc<Stats>,
}

/// Where a freshly accepted connection should be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    Here,
    Worker(usize),
}

impl HandoffBoard {
    /// The board and each worker's inbox (index = worker).
    pub fn new(stats: Arc<Stats>) -> (Arc<HandoffBoard>, Vec<HandoffInbox>) {
        let workers = stats.loads.len();
        let (queues, inboxes) = (0..workers)
            .map(|worker| {
                let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
                let inbox = HandoffInbox {
                    worker,
                    receiver,
                    stats: Arc::clone(&stats),
                };
                (sender, inbox)
            })
            .unzip();
        (Arc::new(HandoffBoard { queues, stats }), inboxes)
    }

    fn load(&self, worker: usize) -> u32 {
        self.stats.loads[worker].weight()
    }

    fn assigned(&self, worker: usize) -> u64 {
        self.stats.loads[worker].assigned.load(Ordering::Relaxed)
    }

    /// Whether worker `me`, which accepted a connection, serves it rather than hand it to
    /// `candidate`: when it is lighter, or as light and fewer than `TIE_SLACK` connections ahead
    /// in what it has been given.
    fn keeps(&self, me: usize, candidate: usize) -> bool {
        let (mine, theirs) = (self.load(me), self.load(candidate));
        mine < theirs
            || (mine == theirs && self.assigned(me) < self.assigned(candidate) + TIE_SLACK)
    }

    fn is_stalled(&self, worker: usize, now_us: u64) -> bool {
        let oldest = self.stats.loads[worker]
            .oldest_pending_us
            .load(Ordering::Relaxed);
        oldest != 0 && now_us.saturating_sub(oldest) > STALLED_AFTER_US
    }

    /// The two candidates for a connection accepted by worker `me`, lighter first; stalled
    /// workers are left out (`None`).
    fn candidates(
        &self,
        me: usize,
        rotation: &Cell<usize>,
        rng: &mut fastrand::Rng,
    ) -> [Option<usize>; 2] {
        let workers = self.queues.len();
        let first = rotation.get() % workers;
        rotation.set(first + 1);
        let second = (first + 1 + rng.usize(..workers.max(2) - 1)) % workers;
        let now = self.stats.now_us();
        let usable = |w: usize| (w == me || !self.is_stalled(w, now)).then_some(w);
        let (a, b) = (usable(first), usable(second));
        match (a, b) {
            (Some(x), Some(y)) if self.load(y) < self.load(x) => [Some(y), Some(x)],
            (None, Some(y)) => [Some(y), None],
            pair => [pair.0, pair.1],
        }
    }

    /// Chooses where a connection accepted by worker `me` is served, and hands it over if that
    /// is another worker. Returns the connection back when it is to be served here.
    pub fn dispatch(
        &self,
        me: usize,
        rotation: &Cell<usize>,
        rng: &mut fastrand::Rng,
        stream: Detached,
        peer: SocketAddr,
        listener: usize,
    ) -> Option<(Detached, SocketAddr)> {
        let mut connection = HandedConnection {
            stream,
            peer,
            listener,
            queued_at_us: 0,
        };
        for candidate in self.candidates(me, rotation, rng).into_iter().flatten() {
            // The acceptor is weighed against every other candidate, whichever came first.
            if candidate == me {
                continue;
            }
            if self.keeps(me, candidate) {
                break;
            }
            match self.try_hand(candidate, connection) {
                Ok(()) => {
                    WorkerCounters::bump(&self.stats.counters[me].handoffs_sent);
                    return None;
                }
                Err(back) => connection = back,
            }
        }
        self.stats.loads[me]
            .assigned
            .fetch_add(1, Ordering::Relaxed);
        Some((connection.stream, connection.peer))
    }

    fn try_hand(
        &self,
        worker: usize,
        mut connection: HandedConnection,
    ) -> Result<(), HandedConnection> {
        let load = &self.stats.loads[worker];
        let now = self.stats.now_us();
        connection.queued_at_us = now;
        load.pending.fetch_add(1, Ordering::Relaxed);
        // Approximate by design: marks when the queue last went from empty to non-empty.
        let _ =
            load.oldest_pending_us
                .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        match self.queues[worker].try_send(connection) {
            Ok(()) => {
                load.assigned.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(
                mpsc::error::TrySendError::Full(back) | mpsc::error::TrySendError::Closed(back),
            ) => {
                load.pending.fetch_sub(1, Ordering::Relaxed);
                Err(back)
            }
        }
    }
}

impl HandoffInbox {
    /// Takes no more connections: a hand-off to this worker is refused from now on (the
    /// acceptor serves the connection itself), and [`HandoffInbox::take`] gives those already
    /// queued, then `None`.
    pub fn close(&mut self) {
        self.receiver.close();
    }

    /// The next connection handed to this worker; `None` once every acceptor is gone (or the
    /// inbox is closed and empty).
    pub async fn take(&mut self) -> Option<HandedConnection> {
        let connection = self.receiver.recv().await?;
        let load = &self.stats.loads[self.worker];
        let now = self.stats.now_us();
        if load.pending.fetch_sub(1, Ordering::Relaxed) == 1 {
            load.oldest_pending_us.store(0, Ordering::Relaxed);
        } else {
            // The rest were queued after this one; the worker is taking them, so not stalled.
            load.oldest_pending_us.store(now, Ordering::Relaxed);
        }
        self.stats.counters[self.worker]
            .record_handoff_wait(now.saturating_sub(connection.queued_at_us));
        Some(connection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection_pair() -> Detached {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        drop(listener.accept().unwrap());
        use std::os::fd::{FromRawFd, IntoRawFd};
        // SAFETY: a connected socket whose descriptor `client` gives up.
        unsafe { Detached::from_raw_fd(client.into_raw_fd()) }
    }

    #[test]
    fn equal_loads_rotate_over_every_worker() {
        let stats = Stats::new(4);
        let (board, _inboxes) = HandoffBoard::new(Arc::clone(&stats));
        let rotation = Cell::new(0);
        let mut rng = fastrand::Rng::with_seed(3);
        let mut firsts = Vec::new();
        for _ in 0..8 {
            firsts.push(board.candidates(0, &rotation, &mut rng)[0].unwrap());
        }
        assert_eq!(firsts, vec![0, 1, 2, 3, 0, 1, 2, 3]);
    }

    #[test]
    fn the_lighter_candidate_comes_first_and_stalled_workers_are_skipped() {
        let stats = Stats::new(2);
        let (board, _inboxes) = HandoffBoard::new(Arc::clone(&stats));
        let mut rng = fastrand::Rng::with_seed(1);
        stats.loads[1].active.store(3, Ordering::Relaxed);
        // rotation points at worker 1, but worker 0 is lighter
        assert_eq!(
            board.candidates(0, &Cell::new(1), &mut rng),
            [Some(0), Some(1)]
        );
        stats.loads[1].active.store(0, Ordering::Relaxed);
        stats.loads[0].active.store(5, Ordering::Relaxed);
        assert_eq!(
            board.candidates(0, &Cell::new(0), &mut rng),
            [Some(1), Some(0)]
        );
        // worker 1 has held a hand-off for far longer than STALLED_AFTER
        stats.loads[1].pending.store(1, Ordering::Relaxed);
        stats.loads[1].oldest_pending_us.store(1, Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(
            board.candidates(0, &Cell::new(0), &mut rng),
            [Some(0), None]
        );
    }

    /// Dispatches a connection accepted by worker `me`; true when it is served there. One handed
    /// over is taken from its inbox at once, as a running worker would.
    fn kept_by(
        board: &HandoffBoard,
        inboxes: &mut [HandoffInbox],
        me: usize,
        rotation: &Cell<usize>,
        rng: &mut fastrand::Rng,
    ) -> bool {
        let peer: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        if board
            .dispatch(me, rotation, rng, connection_pair(), peer, 0)
            .is_some()
        {
            return true;
        }
        let taken = inboxes
            .iter_mut()
            .any(|inbox| inbox.receiver.try_recv().is_ok());
        assert!(taken, "a connection handed over is in some inbox");
        // As `HandoffInbox::take` leaves an emptied queue: nothing pending, and so no worker
        // that looks stalled once the test has run past STALLED_AFTER_US (a loaded machine
        // takes that long over a hundred connections, and every connection was then kept).
        for load in &board.stats.loads {
            load.pending.store(0, Ordering::Relaxed);
            load.oldest_pending_us.store(0, Ordering::Relaxed);
        }
        false
    }

    #[test]
    fn workers_woken_in_turn_keep_what_they_accept() {
        let stats = Stats::new(2);
        let (board, mut inboxes) = HandoffBoard::new(Arc::clone(&stats));
        let rotations = [Cell::new(0), Cell::new(1)];
        let mut rng = fastrand::Rng::with_seed(7);
        for turn in 0..100 {
            let me = turn % 2;
            assert!(
                kept_by(&board, &mut inboxes, me, &rotations[me], &mut rng),
                "connection {turn}, accepted by worker {me}, crossed to the other worker"
            );
        }
        assert_eq!(stats.report()[0].handoffs_sent, 0);
        assert_eq!(stats.report()[1].handoffs_sent, 0);
    }

    #[test]
    fn one_worker_woken_every_time_shares_within_the_slack() {
        let stats = Stats::new(2);
        let (board, mut inboxes) = HandoffBoard::new(Arc::clone(&stats));
        let rotation = Cell::new(0);
        let mut rng = fastrand::Rng::with_seed(9);
        let kept = (0..100)
            .filter(|_| kept_by(&board, &mut inboxes, 0, &rotation, &mut rng))
            .count() as u64;
        let handed = 100 - kept;
        assert!(
            kept >= handed && kept - handed <= TIE_SLACK,
            "kept {kept}, handed over {handed}"
        );
    }

    #[test]
    fn a_lighter_acceptor_keeps_the_connection() {
        let stats = Stats::new(3);
        let (board, mut inboxes) = HandoffBoard::new(Arc::clone(&stats));
        stats.loads[1].active.store(2, Ordering::Relaxed);
        stats.loads[2].active.store(2, Ordering::Relaxed);
        // Far ahead in connections given: the loads decide before the counts do.
        stats.loads[0].assigned.store(1_000, Ordering::Relaxed);
        let rotation = Cell::new(1);
        let mut rng = fastrand::Rng::with_seed(11);
        for turn in 0..30 {
            assert!(
                kept_by(&board, &mut inboxes, 0, &rotation, &mut rng),
                "connection {turn} went to a busier worker"
            );
        }
    }

    #[test]
    fn a_worker_busy_with_tls_handshakes_is_the_heavier_for_them() {
        let stats = Stats::new(2);
        let (board, mut inboxes) = HandoffBoard::new(Arc::clone(&stats));
        // As many connections each; worker 0's are all still in their handshakes.
        for load in &stats.loads {
            load.active.store(3, Ordering::Relaxed);
        }
        stats.loads[0].handshaking.store(3, Ordering::Relaxed);
        let rotation = Cell::new(1);
        let mut rng = fastrand::Rng::with_seed(3);
        for turn in 0..3 {
            assert!(
                !kept_by(&board, &mut inboxes, 0, &rotation, &mut rng),
                "connection {turn} stayed with the worker busy handshaking"
            );
        }
    }

    #[tokio::test]
    async fn a_handed_connection_arrives_and_the_counts_follow_it() {
        let stats = Stats::new(2);
        let (board, mut inboxes) = HandoffBoard::new(Arc::clone(&stats));
        let rotation = Cell::new(1);
        let mut rng = fastrand::Rng::with_seed(5);
        stats.loads[0].active.store(4, Ordering::Relaxed);
        let peer: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        let kept = board.dispatch(0, &rotation, &mut rng, connection_pair(), peer, 0);
        assert!(
            kept.is_none(),
            "worker 1 is lighter; the connection goes there"
        );
        assert_eq!(stats.loads[1].pending.load(Ordering::Relaxed), 1);
        let handed = inboxes[1].take().await.unwrap();
        assert_eq!(handed.peer, peer);
        assert_eq!(stats.loads[1].pending.load(Ordering::Relaxed), 0);
        assert_eq!(stats.loads[1].oldest_pending_us.load(Ordering::Relaxed), 0);
        let report = stats.report();
        assert_eq!(
            (report[0].handoffs_sent, report[1].handoffs_received),
            (1, 1)
        );
    }
}
