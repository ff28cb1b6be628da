//! A request body read whole before any server is involved (`[buffering] request_*`): the bytes
//! that came with the head, then the rest from the client — in memory behind the head up to
//! `request_buffer_memory`, the rest of a body of known length in a temporary file up to
//! `request_buffer_max` — so that a client that sends slowly holds herdsman's memory and disk,
//! not a server's worker. A body larger than that, of unknown length beyond memory, or on a
//! route that turns buffering off streams to the server as it arrives. A body that fits in
//! memory and comes fast (`request_stream_rate`) streams too, from the moment that shows, but is
//! kept whole in memory as it goes, so that it can still be sent again.

use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use crate::transport::Moment;

use super::context::ProxyContext;
use super::downstream::Downstream;
use super::facts::RequestFacts;
use super::failure::Failure;
use super::Client;
use crate::access_log::Buffered;
use crate::http1::forward::drop_expect;
use crate::http1::relay::{BodyRelay, RelayError};
use crate::http1::Body;
use crate::stats::{MemoryHold, WorkerCounters};
use crate::transport::deadline::timeout_at;
use crate::transport::{read_appending, recycle, write_all_by, Stream, TempFile, BUFFER_INITIAL};
use crate::upstream::Snapshot;

/// What herdsman answers a client that waits before sending its body, when herdsman reads it.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The most of a spilled body read back from its file at once, to send.
const READ_BACK: usize = 64 * 1024;

/// A request body read whole: its memory (behind the head in `client.out`) held of the process's
/// total, and the part that went to a temporary file, if any.
pub struct BufferedBody<'a> {
    /// `None` when memory was short and the body went to the file.
    _memory: Option<MemoryHold<'a>>,
    spilled: Option<(TempFile<'a>, u64)>,
}

impl BufferedBody<'_> {
    /// Sends the part in the file (after `client.out`) to `server` by `deadline`, counting what
    /// was written in `written`. `None`: the deadline passed.
    pub async fn send_spilled(
        &self,
        server: &mut Stream,
        deadline: Moment,
        written: &mut usize,
    ) -> Option<Result<(), Failure>> {
        let Some((file, length)) = &self.spilled else {
            return Some(Ok(()));
        };
        let mut chunk = recycle::take_bytes(READ_BACK);
        let mut at = 0u64;
        let result = loop {
            if at == *length {
                break Some(Ok(()));
            }
            chunk.resize((*length - at).min(READ_BACK as u64) as usize, 0);
            let n = match file.read_at(&mut chunk, at) {
                Ok(0) | Err(_) => break Some(Err(Failure::SpoolFailed)),
                Ok(n) => n,
            };
            let mut sent = 0;
            match write_all_by(server, &chunk[..n], deadline, &mut sent).await {
                None => break None,
                Some(Err(e)) => break Some(Err(Failure::server_io(&e))),
                Some(Ok(())) => {}
            }
            *written += sent;
            at += n as u64;
        };
        recycle::give_back_bytes(chunk);
        result
    }
}

/// Takes the request body's bytes at hand into `client.out` behind its head; true when the rest
/// is to be read from the client before any server is involved ([`read_rest_of_body`]): a body
/// whose length is within `request_buffer_max` (or memory, for one of unknown length), on a route
/// that buffers. Anything else streams to the server as it arrives, from where this left it.
#[inline]
pub fn body_at_hand<D: Downstream>(
    client: &mut Client<D>,
    upload: &mut BodyRelay,
    facts: RequestFacts,
    snapshot: &Snapshot,
) -> Result<bool, Failure> {
    upload
        .take_buffered(client.downstream.received(), &mut client.out)
        .map_err(upload_failure)?;
    let buffering = &snapshot.buffering;
    if !facts.buffering.request || buffering.request_memory == 0 {
        return Ok(false);
    }
    let room = buffering.request_memory as u64;
    let fits = match facts.body {
        Body::Length(length) => length <= room.max(buffering.request_max),
        Body::Chunked => true,
        Body::None | Body::UntilClose => false,
    };
    Ok(fits && !upload.is_done())
}

/// The rest of [`body_at_hand`]'s body, read from the client: `Some` when it was all read, in
/// `client.out` and perhaps a temporary file, or when it is of known length, fits its memory and
/// came fast enough to stream (`request_stream_rate`): then the upload is not done, and the rest
/// is read behind what `client.out` holds as it is sent ([`BodyRelay::relay_kept`]), kept for a
/// replay. `None` when it was larger than memory allows (one of unknown length), came fast with
/// its memory part full, or the process's totals had no room, and the rest streams unkept. A client that waits
/// for `100 Continue` gets it from herdsman. Reads wait up to `client_idle` each, and the body as
/// a whole may not fall below `request_min_rate` once its grace has passed (408). `buffered`
/// says, for the access log, whether the body went through buffering (read whole, or given up
/// on by its client partway) and whether any of it reached the temporary file.
#[cold]
pub async fn read_rest_of_body<'c, D: Downstream>(
    context: &'c ProxyContext,
    client: &mut Client<D>,
    upload: &mut BodyRelay,
    facts: &mut RequestFacts,
    snapshot: &'c Snapshot,
    buffered: &mut Buffered,
) -> Result<Option<BufferedBody<'c>>, Failure> {
    let buffering = &snapshot.buffering;
    let counters = context.counters();
    let room = buffering.request_memory as u64;
    // Memory and disk for all of it are taken up front: a body that cannot have them streams.
    let (in_memory, in_file) = match facts.body {
        Body::Length(length) if length > room => (room, length - upload.data_seen()),
        Body::Length(length) => (length, 0),
        _ => (room, 0),
    };
    let usage = context.buffer_use();
    let (memory, in_memory, in_file) = match usage.hold_memory(in_memory, buffering.memory_total) {
        Some(memory) => (Some(memory), in_memory, in_file),
        // Memory is short (the process's total is taken): a body of known length goes to a
        // temporary file, past the bytes already at hand.
        None => match facts.body {
            Body::Length(length) => (None, upload.data_seen(), length - upload.data_seen()),
            _ => (None, 0, 0),
        },
    };
    let file = match in_file {
        0 => Ok(None),
        _ => TempFile::create(&buffering.temp_dir, usage, buffering.disk_total)
            .map(|mut file| file.reserve_to(in_file).then_some(file)),
    };
    let (memory, mut file) = match (memory, file) {
        (memory, Ok(file))
            if (memory.is_some() || in_file > 0) && (in_file == 0 || file.is_some()) =>
        {
            (memory, file)
        }
        (_, result) => {
            if let Err(error) = result {
                tracing::warn!(dir = %buffering.temp_dir.display(), %error, "cannot make a temporary file for a request body; it streams");
            }
            WorkerCounters::bump(&counters.buffering_full);
            return Ok(None);
        }
    };
    if facts.expect_continue {
        let deadline = Moment::now() + snapshot.timeouts.client_idle;
        match client.downstream.send(CONTINUE, deadline).await {
            Some(Ok(())) => facts.continue_sent = true,
            None => return Err(Failure::ClientStalled),
            Some(Err(_)) => return Err(Failure::ClientGone),
        }
        // Answered here: the server is not asked again.
        drop_expect(&mut client.out);
    }
    let started = std::time::Instant::now();
    let seen_at_start = upload.data_seen();
    buffered.request = true;
    let mut spilled = 0u64;
    let memory_end = client.out.len() + (in_memory - upload.data_seen().min(in_memory)) as usize;
    if upload.length_left().is_some() {
        // Room for the memory part at once: the bytes are read straight into it, and it never
        // moves into a larger block (which copied a 1 MiB body twice more).
        client
            .out
            .reserve_exact(memory_end.saturating_sub(client.out.len()));
    }
    // The time the client kept herdsman waiting for its bytes: its pace, whatever else the
    // worker was doing meanwhile (`request_stream_rate`).
    // A body with a file part has the choice to make, and one that fits memory whole.
    let mut waited = Duration::ZERO;
    let keeps = file.is_none() && memory.is_some() && upload.length_left().is_some();
    let wake_clock = (file.is_some() || keeps).then(WakeClock::new);
    while !upload.is_done() && (file.is_some() || upload.data_seen() <= room) {
        // A body that fits memory and comes fast goes to the server as it comes, kept behind the
        // head as it goes: read whole first, a burst of 1 MiB bodies on 200 connections made the
        // slowest uploads wait (p99 258 ms through one worker, 1.6x HAProxy's).
        if keeps && buffering.streams(waited, upload.data_seen() - seen_at_start) {
            WorkerCounters::bump(&counters.streamed_request_bodies);
            buffered.request = false;
            return Ok(Some(BufferedBody {
                _memory: memory,
                spilled: None,
            }));
        }
        // The memory part is full and the file would take the rest: a body that came fast
        // enough goes on to the server as it comes instead (its file reservation let go).
        if spilled == 0
            && file.is_some()
            && client.out.len() >= memory_end
            && buffering.streams(waited, upload.data_seen() - seen_at_start)
        {
            WorkerCounters::bump(&counters.streamed_request_bodies);
            buffered.request = false;
            return Ok(None);
        }
        let idle = Moment::now() + snapshot.timeouts.client_idle;
        let slow = buffering
            .rate_deadline(started, upload.data_seen())
            .map(Moment::from)
            .filter(|slow| *slow < idle);
        // A body of known length, while its memory part has room and nothing waits in the
        // received buffer, is read straight behind the head: no copy in user space (the kernel's
        // alone), each read as large as the socket holds.
        let straight = match upload.length_left() {
            Some(left) if client.downstream.received().is_empty() => {
                (memory_end.saturating_sub(client.out.len()) as u64).min(left) as usize
            }
            _ => 0,
        };
        let read = async {
            if straight > 0 {
                let (mut source, _, _) = client.downstream.split();
                read_appending(&mut source, &mut client.out, straight).await
            } else {
                client.downstream.receive(BUFFER_INITIAL).await
            }
        };
        let (n, wait) =
            match timeout_at(slow.unwrap_or(idle), timed(wake_clock.as_ref(), read)).await {
                Err(_) if slow.is_some() => {
                    WorkerCounters::bump(&counters.slow_request_bodies);
                    return Err(Failure::BodyTooSlow);
                }
                Err(_) => return Err(Failure::ClientStalled),
                Ok((Ok(0) | Err(_), _)) => return Err(Failure::ClientGone),
                Ok((Ok(n), wait)) => (n, wait),
            };
        waited += wait;
        if straight > 0 {
            upload.took_length(n).map_err(upload_failure)?;
            continue;
        }
        let out = &mut client.out;
        upload
            .take_buffered_with(client.downstream.received(), |piece| {
                // Without a file, all of it (a body of unknown length streams once past memory).
                let to_memory = match file {
                    Some(_) => piece.len().min(memory_end.saturating_sub(out.len())),
                    None => piece.len(),
                };
                out.extend_from_slice(&piece[..to_memory]);
                let rest = &piece[to_memory..];
                if let Some(file) = file.as_ref().filter(|_| !rest.is_empty()) {
                    file.write_at(rest, spilled)
                        .map_err(|_| RelayError::Spool)?;
                    spilled += rest.len() as u64;
                    buffered.request_on_disk = true;
                }
                Ok(())
            })
            .map_err(upload_failure)?;
    }
    if !upload.is_done() {
        // Past what memory allows: the rest streams, and the body is not called buffered.
        buffered.request = false;
        return Ok(None);
    }
    WorkerCounters::bump(&counters.buffered_requests);
    if spilled > 0 {
        WorkerCounters::bump(&counters.spilled_bodies);
    }
    Ok(Some(BufferedBody {
        _memory: memory,
        spilled: file.take().map(|file| (file, spilled)),
    }))
}

/// The rest of a kept body ([`read_rest_of_body`]) whose streaming attempt failed, read behind
/// it into `client.out` before it is sent again whole. Each read may wait `client_idle`.
#[cold]
pub async fn finish_kept_body<D: Downstream>(
    client: &mut Client<D>,
    upload: &mut BodyRelay,
    client_idle: Duration,
) -> Result<(), Failure> {
    let (mut source, received, _) = client.downstream.split();
    while !upload.is_done() {
        upload
            .read_kept(&mut source, received, &mut client.out, client_idle)
            .await
            .map_err(upload_failure)?;
    }
    Ok(())
}

/// When the reads of a request body were woken: the time a client kept herdsman waiting is from
/// a read that found no bytes to the wake its bytes brought, not to when the worker, busy with
/// its other connections, came back to the read. Measured with wrk uploading 64 MiB on 200
/// connections through one worker to nginx for 60 s: judged by the clock, 57 of 1,173 bodies
/// looked slower than `request_stream_rate`, went to disk whole and made the slowest uploads
/// (p99 29 s); judged by the wake, 2 of 1,204 (p99 25 s).
///
/// One allocation a buffered body (the waker's `Arc`); none a read.
struct WakeClock {
    /// The waker the wrapped reads are given: this clock's, which wakes the task's.
    waker: Waker,
    shared: Arc<WokenAt>,
}

/// The task's waker, and when it was last woken (`Moment` nanoseconds).
struct WokenAt {
    task: Mutex<Option<Waker>>,
    at: AtomicU64,
}

impl Wake for WokenAt {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.at.store(Moment::now().nanos(), Ordering::Relaxed);
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            task.wake_by_ref();
        }
    }
}

impl WakeClock {
    fn new() -> WakeClock {
        let shared = Arc::new(WokenAt {
            task: Mutex::new(None),
            at: AtomicU64::new(0),
        });
        WakeClock {
            waker: Waker::from(Arc::clone(&shared)),
            shared,
        }
    }

    /// Awaits `read`, with how long it kept the task waiting for a wake: nothing when the bytes
    /// were already there.
    async fn time<F: Future>(&self, read: F) -> (F::Output, Duration) {
        let mut read = std::pin::pin!(read);
        let mut since: Option<Moment> = None;
        let output = poll_fn(|cx| {
            {
                let mut task = self.shared.task.lock().unwrap_or_else(|e| e.into_inner());
                if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                    *task = Some(cx.waker().clone());
                }
            }
            match read.as_mut().poll(&mut Context::from_waker(&self.waker)) {
                Poll::Pending => {
                    if since.is_none() {
                        since = Some(Moment::now());
                        self.shared.at.store(0, Ordering::Relaxed);
                    }
                    Poll::Pending
                }
                ready => ready,
            }
        })
        .await;
        let waited = since.map_or(Duration::ZERO, |since| {
            let woken = match self.shared.at.load(Ordering::Relaxed) {
                0 => Moment::now().nanos(),
                at => at,
            };
            Duration::from_nanos(woken.saturating_sub(since.nanos()))
        });
        (output, waited)
    }
}

/// Awaits `read`, timed by `clock` if there is one (zero without).
async fn timed<F: Future>(clock: Option<&WakeClock>, read: F) -> (F::Output, Duration) {
    match clock {
        Some(clock) => clock.time(read).await,
        None => (read.await, Duration::ZERO),
    }
}

/// A request body that could not be relayed, as the client's or the server's failure.
pub fn upload_failure(error: RelayError) -> Failure {
    match error {
        RelayError::SourceEnded | RelayError::SourceIo(_) => Failure::ClientGone,
        RelayError::SourceTimeout => Failure::ClientStalled,
        RelayError::SinkIo(kind) => Failure::ServerIo(kind),
        // Uploads do not watch their server (it may answer early); kept for completeness.
        RelayError::SinkGone => Failure::ServerClosed,
        RelayError::SinkTimeout | RelayError::SinkTooSlow => Failure::ResponseTimeout,
        RelayError::Spool => Failure::SpoolFailed,
        RelayError::Framing(why) => Failure::BadRequest(why),
        RelayError::TooLarge => Failure::BodyTooLarge,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A read that finds nothing the first time it is polled, leaving its waker in `waker`, and
    /// has `n` bytes the next.
    struct ReadAfterWake {
        polled: bool,
        waker: Arc<Mutex<Option<Waker>>>,
    }

    impl Future for ReadAfterWake {
        type Output = usize;
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            if std::mem::replace(&mut self.polled, true) {
                return Poll::Ready(5);
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// The task's waker, counting its wakes.
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_wait_counted_ends_when_the_bytes_come_not_when_the_worker_comes_back() {
        let clock = WakeClock::new();
        let read_waker = Arc::new(Mutex::new(None));
        let read = ReadAfterWake {
            polled: false,
            waker: Arc::clone(&read_waker),
        };
        let task = Arc::new(Task(AtomicUsize::new(0)));
        let task_waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&task_waker);
        let mut timed = std::pin::pin!(clock.time(read));
        assert!(timed.as_mut().poll(&mut cx).is_pending());
        // The client's bytes come 20 ms later...
        std::thread::sleep(Duration::from_millis(20));
        let read_waker = read_waker
            .lock()
            .unwrap()
            .take()
            .expect("the read was left a waker");
        read_waker.wake();
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "the wake reached the task"
        );
        // ...and the worker, busy with its other connections, reads them 300 ms after that.
        std::thread::sleep(Duration::from_millis(300));
        let Poll::Ready((5, waited)) = timed.as_mut().poll(&mut cx) else {
            panic!("the read completes");
        };
        assert!(
            waited >= Duration::from_millis(20) && waited < Duration::from_millis(200),
            "the client kept herdsman waiting 20 ms, not {waited:?}"
        );
    }

    #[test]
    fn bytes_already_there_cost_no_wait() {
        let clock = WakeClock::new();
        let task_waker = Waker::from(Arc::new(Task(AtomicUsize::new(0))));
        let mut cx = Context::from_waker(&task_waker);
        let mut timed = std::pin::pin!(clock.time(std::future::ready(7)));
        assert_eq!(
            timed.as_mut().poll(&mut cx),
            Poll::Ready((7, Duration::ZERO))
        );
    }
}
