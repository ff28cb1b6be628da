//! Per-worker counters and loads: each counter is written only by its own worker (relaxed
//! atomics on that worker's own cache lines, so there is no contention on the request path) and
//! read — summed, reported — by whoever asks.
//!
//! Two kinds live apart: [`WorkerCounters`] are written by their worker alone; [`WorkerLoad`] is
//! also written by other workers when they hand it a connection, and read by every acceptor that
//! chooses where a new connection goes.

pub mod cache;
pub mod client_cap;
pub mod compression;
pub mod http2;
pub mod log_every;
pub mod per_client;
pub mod procfs;
pub mod rules;
pub mod tls;
pub mod traffic;

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

/// Counters one worker writes about itself.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct WorkerCounters {
    /// The worker thread's kernel thread id (0 until it starts).
    pub tid: AtomicI32,
    /// Connections this worker took from a listening socket.
    pub accepted: AtomicU64,
    /// Of those, handed to another worker.
    pub handoffs_sent: AtomicU64,
    /// Connections other workers handed to this one.
    pub handoffs_received: AtomicU64,
    /// Wake-ups that found nothing: an accept that returned EAGAIN after readiness was reported.
    pub spurious_wakeups: AtomicU64,
    /// Time from a hand-off being queued to this worker taking it: total and worst, µs.
    pub handoff_wait_total_us: AtomicU64,
    pub handoff_wait_max_us: AtomicU64,
    /// Of the worker's client connections, those quiet long enough to wait in its parking lot
    /// (out of their tasks) now.
    pub parked: AtomicU32,
    /// Worker tasks other than connections (accept loops, the hand-off taker) restarted after
    /// a panic.
    pub restarts: AtomicU64,
    /// Requests this worker finished, answered or not.
    pub requests: AtomicU64,
    /// Of those, refused before they were routed (a malformed head, a timeout reading it).
    pub rejected: AtomicU64,
    /// Connections to servers: opened, and idle ones reused.
    pub backend_connects: AtomicU64,
    pub backend_reuses: AtomicU64,
    /// Idle connections to servers this worker keeps now.
    pub idle_backend: AtomicU32,
    /// Request bodies read whole before a server was involved (`[buffering]`).
    pub buffered_requests: AtomicU64,
    /// Request bodies that arrived slower than `request_min_rate` (answered 408).
    pub slow_request_bodies: AtomicU64,
    /// Request bodies past memory that came fast enough to stream on (`request_stream_rate`)
    /// rather than wait in a temporary file.
    pub streamed_request_bodies: AtomicU64,
    /// Streaming request bodies whose rest went from socket to socket by splice, not through a
    /// buffer (plain TCP both sides, 1 MiB or more to come).
    pub spliced_request_bodies: AtomicU64,
    /// Response bodies read from their server at its pace rather than the client's.
    pub buffered_responses: AtomicU64,
    /// Buffered bodies (requests and responses) that outgrew memory into a temporary file.
    pub spilled_bodies: AtomicU64,
    /// Bodies that streamed, or stopped growing, because `[buffering] memory_total` or
    /// `disk_total` was taken.
    pub buffering_full: AtomicU64,
    /// Clients that kept response bytes waiting slower than `response_min_rate` (their answer
    /// ended).
    pub slow_response_readers: AtomicU64,
    /// Quiet keep-alive connections this worker closed to make room at the client cap.
    pub shed_for_room: AtomicU64,
    /// Times this worker's accepting paused at the client cap, with nothing left to close.
    pub accept_paused: AtomicU64,
    /// TLS handshakes on this worker's client connections.
    pub tls: tls::TlsCounters,
    /// HTTP/2 client connections, streams, resets, GOAWAYs and floods.
    pub http2: http2::Http2Counters,
    /// Answers compressed (bytes in and out) and left as they were, by reason.
    pub compression: compression::CompressionCounters,
}

/// What all buffered bodies of the process hold now, in memory and in temporary files: written
/// by every worker, but only for bodies that outgrow what came with their head (one atomic
/// update per such body, per 64 KiB of file reserved and per write to a file, never per
/// request).
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct BufferUse {
    /// Reserved of `memory_total`: a body takes its share up front.
    pub memory: AtomicU64,
    /// Reserved of `disk_total`: a request body of known length takes all its file will need
    /// up front, a response's spool takes it 64 KiB at a time.
    pub disk: AtomicU64,
    /// Written to temporary files and not yet freed: what the files hold on disk now.
    pub disk_written: AtomicU64,
}

impl BufferUse {
    /// Takes `bytes` of `held`, if that keeps it within `total`.
    pub fn reserve(held: &AtomicU64, bytes: u64, total: u64) -> bool {
        held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
            now.checked_add(bytes).filter(|after| *after <= total)
        })
        .is_ok()
    }

    /// Gives back `bytes` taken with [`BufferUse::reserve`].
    pub fn release(held: &AtomicU64, bytes: u64) {
        held.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Takes `bytes` of memory, within `total`, until the hold is dropped.
    pub fn hold_memory(&self, bytes: u64, total: u64) -> Option<MemoryHold<'_>> {
        // `then`, not `then_some`: a hold made for a refused reservation would, dropped, give
        // back bytes it never took.
        BufferUse::reserve(&self.memory, bytes, total).then(|| MemoryHold {
            memory: &self.memory,
            bytes,
        })
    }
}

/// Memory a buffered body holds of the process's total, given back when dropped.
#[derive(Debug)]
pub struct MemoryHold<'a> {
    memory: &'a AtomicU64,
    bytes: u64,
}

impl MemoryHold<'_> {
    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for MemoryHold<'_> {
    fn drop(&mut self) {
        BufferUse::release(self.memory, self.bytes);
    }
}

/// What other workers read (and, for hand-offs, write) to choose a worker for a connection.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct WorkerLoad {
    /// Client connections the worker owns now.
    pub active: AtomicU32,
    /// Connections handed to it and not yet taken.
    pub pending: AtomicU32,
    /// When the oldest of those was queued (µs since the process clock's start; 0: none).
    pub oldest_pending_us: AtomicU64,
    /// Connections the intake has given this worker to serve since the start: those it kept
    /// and those handed to it (counted when handed, so that a burst sees them at once).
    pub assigned: AtomicU64,
    /// Of its connections, those in a TLS handshake now: the `balanced` intake counts each
    /// twice, since a handshake costs its worker more CPU (150 µs and more) than many requests.
    pub handshaking: AtomicU32,
}

impl WorkerLoad {
    /// The load the `balanced` intake compares: connections owned and queued for it, a
    /// connection in its TLS handshake counting twice.
    pub fn weight(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
            + self.pending.load(Ordering::Relaxed)
            + self.handshaking.load(Ordering::Relaxed)
    }
}

/// Every worker's counters and loads, shared by the workers, the intake and the admin API.
#[derive(Debug)]
pub struct Stats {
    pub counters: Vec<WorkerCounters>,
    pub loads: Vec<WorkerLoad>,
    /// Access log lines dropped because the log writer fell behind (it counts them).
    pub access_log_dropped_lines: Arc<AtomicU64>,
    /// What buffered bodies hold now, over all workers.
    pub buffer_use: BufferUse,
    /// The health checker thread's kernel thread id, for its CPU (0 until it starts).
    pub health_checker_tid: AtomicI32,
    /// The cap on client connections the descriptor budget sets.
    pub client_cap: client_cap::ClientCap,
    /// Client connections by address, when `max_connections_per_client` is set.
    pub per_client: per_client::PerClient,
    clock: Instant,
}

impl Stats {
    pub fn new(workers: usize) -> Arc<Stats> {
        Arc::new(Stats {
            counters: (0..workers).map(|_| WorkerCounters::default()).collect(),
            loads: (0..workers).map(|_| WorkerLoad::default()).collect(),
            access_log_dropped_lines: Arc::default(),
            buffer_use: BufferUse::default(),
            health_checker_tid: AtomicI32::new(0),
            client_cap: client_cap::ClientCap::default(),
            per_client: per_client::PerClient::default(),
            clock: Instant::now(),
        })
    }

    /// Microseconds since this `Stats` was made: a cheap monotonic clock for timestamps that
    /// must fit an atomic. Never 0, so that 0 can mean "none".
    pub fn now_us(&self) -> u64 {
        self.clock.elapsed().as_micros() as u64 + 1
    }

    /// Client connections accepted and not yet closed, over all workers: those they own and
    /// those queued for them by a hand-off. What the client cap counts.
    pub fn client_connections(&self) -> u64 {
        self.loads
            .iter()
            .map(|load| {
                u64::from(load.active.load(Ordering::Relaxed))
                    + u64::from(load.pending.load(Ordering::Relaxed))
            })
            .sum()
    }

    /// Client connections open now, over all workers.
    pub fn open_connections(&self) -> u64 {
        self.loads
            .iter()
            .map(|load| u64::from(load.active.load(Ordering::Relaxed)))
            .sum()
    }

    /// Every worker's compression counters, summed.
    pub fn compression_report(&self) -> compression::CompressionReport {
        let mut report = compression::CompressionReport::default();
        for counters in self.counters.iter() {
            counters.compression.add_to(&mut report);
        }
        report
    }

    /// Each worker's TLS handshakes, in worker order.
    pub fn tls_reports(&self) -> Vec<tls::TlsReport> {
        let loads = self.loads.iter();
        let handshaking = loads.map(|load| load.handshaking.load(Ordering::Relaxed));
        self.counters
            .iter()
            .zip(handshaking)
            .map(|(counters, in_progress)| counters.tls.report(in_progress))
            .collect()
    }

    /// TLS handshakes finished over all workers: resumed ones, or full ones.
    pub fn tls_handshakes(&self, resumed: bool) -> u64 {
        let counter = |tls: &tls::TlsCounters| match resumed {
            true => tls.resumed.load(Ordering::Relaxed),
            false => tls.full.load(Ordering::Relaxed),
        };
        self.counters.iter().map(|c| counter(&c.tls)).sum()
    }

    /// TLS handshakes failed over all workers for the reason named `reason` (see
    /// [`tls::HandshakeFailed::name`]); 0 for a name that is none.
    pub fn tls_handshake_failures(&self, reason: &str) -> u64 {
        let Some(index) = tls::HandshakeFailed::ALL
            .iter()
            .position(|why| why.name() == reason)
        else {
            return 0;
        };
        self.counters
            .iter()
            .map(|c| c.tls.failed[index].load(Ordering::Relaxed))
            .sum()
    }

    /// The health checker thread's CPU and run-queue wait since it started; `None` before it
    /// starts, or where /proc cannot be read.
    pub fn health_checker_cpu(&self) -> Option<procfs::ThreadCpu> {
        procfs::thread_cpu(self.health_checker_tid.load(Ordering::Relaxed))
    }

    /// A consistent-enough copy of every worker's figures (each counter is read once; they are
    /// not read at a single instant, which a monitor does not need).
    pub fn report(&self) -> Vec<WorkerReport> {
        self.counters
            .iter()
            .zip(&self.loads)
            .enumerate()
            .map(|(worker, (counters, load))| {
                let tid = counters.tid.load(Ordering::Relaxed);
                let received = counters.handoffs_received.load(Ordering::Relaxed);
                WorkerReport {
                    worker,
                    tid,
                    accepted: counters.accepted.load(Ordering::Relaxed),
                    active: load.active.load(Ordering::Relaxed),
                    parked: counters.parked.load(Ordering::Relaxed),
                    pending_handoffs: load.pending.load(Ordering::Relaxed),
                    handoffs_sent: counters.handoffs_sent.load(Ordering::Relaxed),
                    handoffs_received: received,
                    spurious_wakeups: counters.spurious_wakeups.load(Ordering::Relaxed),
                    restarts: counters.restarts.load(Ordering::Relaxed),
                    requests: counters.requests.load(Ordering::Relaxed),
                    rejected: counters.rejected.load(Ordering::Relaxed),
                    backend_connects: counters.backend_connects.load(Ordering::Relaxed),
                    backend_reuses: counters.backend_reuses.load(Ordering::Relaxed),
                    idle_backend: counters.idle_backend.load(Ordering::Relaxed),
                    buffered_requests: counters.buffered_requests.load(Ordering::Relaxed),
                    slow_request_bodies: counters.slow_request_bodies.load(Ordering::Relaxed),
                    streamed_request_bodies: counters
                        .streamed_request_bodies
                        .load(Ordering::Relaxed),
                    spliced_request_bodies: counters.spliced_request_bodies.load(Ordering::Relaxed),
                    buffered_responses: counters.buffered_responses.load(Ordering::Relaxed),
                    spilled_bodies: counters.spilled_bodies.load(Ordering::Relaxed),
                    buffering_full: counters.buffering_full.load(Ordering::Relaxed),
                    slow_response_readers: counters.slow_response_readers.load(Ordering::Relaxed),
                    shed_for_room: counters.shed_for_room.load(Ordering::Relaxed),
                    accept_paused: counters.accept_paused.load(Ordering::Relaxed),
                    http2: counters.http2.report(),
                    handoff_wait_us: HandoffWait {
                        total: counters.handoff_wait_total_us.load(Ordering::Relaxed),
                        max: counters.handoff_wait_max_us.load(Ordering::Relaxed),
                        count: received,
                    },
                    context_switches: procfs::thread_context_switches(tid).unwrap_or_default(),
                    cpu: procfs::thread_cpu(tid).unwrap_or_default(),
                }
            })
            .collect()
    }
}

impl WorkerCounters {
    /// Adds one to a counter only this worker writes: a relaxed load and store, no locked
    /// read-modify-write, since no other thread writes it.
    pub fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Counts a connection to a server: a reused idle one, or a new one.
    pub fn count_backend_connection(&self, reused: bool) {
        Self::bump(if reused {
            &self.backend_reuses
        } else {
            &self.backend_connects
        });
    }

    /// Records how long a handed-off connection waited to be taken.
    pub fn record_handoff_wait(&self, waited_us: u64) {
        Self::bump(&self.handoffs_received);
        let total = &self.handoff_wait_total_us;
        total.store(total.load(Ordering::Relaxed) + waited_us, Ordering::Relaxed);
        if waited_us > self.handoff_wait_max_us.load(Ordering::Relaxed) {
            self.handoff_wait_max_us.store(waited_us, Ordering::Relaxed);
        }
    }
}

/// One worker's figures, as `GET /api/workers` returns them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerReport {
    pub worker: usize,
    pub tid: i32,
    pub accepted: u64,
    pub active: u32,
    pub parked: u32,
    pub pending_handoffs: u32,
    pub handoffs_sent: u64,
    pub handoffs_received: u64,
    pub spurious_wakeups: u64,
    pub restarts: u64,
    pub requests: u64,
    pub rejected: u64,
    pub backend_connects: u64,
    pub backend_reuses: u64,
    pub idle_backend: u32,
    pub buffered_requests: u64,
    pub slow_request_bodies: u64,
    pub streamed_request_bodies: u64,
    pub spliced_request_bodies: u64,
    pub buffered_responses: u64,
    pub spilled_bodies: u64,
    pub buffering_full: u64,
    pub slow_response_readers: u64,
    pub shed_for_room: u64,
    pub accept_paused: u64,
    pub http2: http2::Http2Report,
    pub handoff_wait_us: HandoffWait,
    pub context_switches: procfs::ContextSwitches,
    pub cpu: procfs::ThreadCpu,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct HandoffWait {
    pub count: u64,
    pub total: u64,
    pub max: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_hold_gives_back_only_what_it_took() {
        let usage = BufferUse::default();
        let held = usage.hold_memory(6, 10).expect("within the total");
        assert_eq!(held.bytes(), 6);
        assert!(usage.hold_memory(5, 10).is_none(), "beyond the total");
        assert_eq!(usage.memory.load(Ordering::Relaxed), 6);
        drop(held);
        assert_eq!(usage.memory.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_report_reflects_the_counters_and_this_threads_switches() {
        let stats = Stats::new(2);
        let counters = &stats.counters[1];
        counters
            .tid
            .store(procfs::current_thread_id(), Ordering::Relaxed);
        WorkerCounters::bump(&counters.accepted);
        WorkerCounters::bump(&counters.accepted);
        counters.record_handoff_wait(30);
        counters.record_handoff_wait(10);
        stats.loads[1].active.store(5, Ordering::Relaxed);
        let report = stats.report();
        assert_eq!(report[0].accepted, 0);
        assert_eq!(report[1].accepted, 2);
        assert_eq!(report[1].active, 5);
        assert_eq!(
            report[1].handoff_wait_us,
            HandoffWait {
                count: 2,
                total: 40,
                max: 30
            }
        );
        // Sleeping is a voluntary context switch, which the report must show.
        std::thread::sleep(std::time::Duration::from_millis(2));
        let report = stats.report();
        if cfg!(target_os = "linux") {
            let switches = report[1].context_switches;
            assert!(switches.voluntary > 0, "{switches:?}");
        }
    }
}
