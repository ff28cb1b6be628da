//! The limits' counts in Redis (`[rate_limit] redis`), so that several herdsman instances share
//! them: one atomic Lua script per check (GCRA, the same rule as `table.rs`, on Redis's clock),
//! loaded once per connection with SCRIPT LOAD and run with EVALSHA, over a small RESP client of
//! herdsman's own on a `transport::Stream`.
//!
//! One connection per worker, on the worker's own runtime (async I/O: no worker thread ever
//! blocks on Redis), pipelined: a check writes its command into the worker's queue and waits for
//! its reply; the connection's task (one per worker, started by the first check) sends what is
//! queued back to back and hands each reply to the check whose command it answers, in order
//! (Redis answers a connection's commands in the order they came). So a worker's checks share
//! the round trip to Redis instead of taking turns: with Redis 1 ms away, one check at a time
//! capped a worker at about 1,000 checks a second. At most `MOST_IN_FLIGHT` checks wait at
//! once; one more fails at once, as a check Redis did not answer does (counted, then let
//! through or refused by `on_redis_error`).
//!
//! Each check is bounded by `timeout`, connecting included. A check that times out has the
//! connection dropped (what comes on it may never come); the checks still waiting on it fail,
//! and the next check makes a new one. Nothing here is shared with another thread: the queue is
//! the worker's own (`RefCell`), and the task runs on the worker's `LocalSet`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::io::Write as _;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::task::{Poll, Waker};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::config::rate_limit::RedisSettings;
use crate::transport::deadline::{timeout, timeout_at};
use crate::transport::{Moment, Stream};

use super::key::RequestKey;
use super::Limiter;

/// The most checks of one worker waiting for Redis at once. Beyond it a check fails at once
/// rather than queue: 128 in flight with Redis 1 ms away is 128,000 checks a second per worker,
/// above what a worker proxies (about 60,000 requests a second here), so only a Redis that has
/// stopped answering fills it, and then failing at once is what `on_redis_error` asks for.
pub const MOST_IN_FLIGHT: usize = 128;

/// GCRA in Redis: KEYS[1] the key, ARGV[1] the interval in microseconds, ARGV[2] the burst.
/// Returns `{1, 0}` when the request is let through (its time moved on and kept until it is in
/// the past), `{0, wait}` when it is over the limit (nothing changed). Redis's own clock, so
/// that instances whose clocks differ count alike.
pub const GCRA_SCRIPT: &str = r#"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local next_tat = tat + interval
local ahead = next_tat - now
if ahead > tolerance then return {0, ahead - tolerance} end
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', math.ceil(ahead / 1000) + 1)
return {1, 0}
"#;

/// Why Redis gave no verdict.
#[derive(Debug, Clone)]
pub enum RedisFailure {
    /// Not within `timeout`.
    Timeout,
    /// `MOST_IN_FLIGHT` checks of this worker were already waiting.
    Busy,
    /// The connection failed (every check waiting on it is told the same).
    Io(Arc<io::Error>),
    /// An error reply, or one the client cannot read.
    Reply(String),
}

impl std::fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisFailure::Timeout => write!(f, "no answer within the timeout"),
            RedisFailure::Busy => write!(
                f,
                "{MOST_IN_FLIGHT} checks of this worker already waiting for Redis"
            ),
            RedisFailure::Io(error) => write!(f, "{error}"),
            RedisFailure::Reply(text) => write!(f, "{text}"),
        }
    }
}

impl From<io::Error> for RedisFailure {
    fn from(error: io::Error) -> RedisFailure {
        RedisFailure::Io(Arc::new(error))
    }
}

/// One worker's link to Redis: the checks' queue, and its connection's task.
#[derive(Default)]
pub struct RedisLink {
    shared: Rc<Shared>,
}

/// What the checks and the connection's task share (one worker's, never another thread's).
#[derive(Default)]
struct Shared {
    queue: RefCell<Queue>,
    /// Wakes the connection's task: commands to send, or the connection to drop.
    wake: Notify,
}

/// The checks in flight on one worker.
#[derive(Default)]
struct Queue {
    /// The Redis the connection's task is for, while it runs (connecting or connected).
    task: Option<SocketAddr>,
    /// Which connection the task is on: one more for each task started, so that a check that
    /// timed out on an earlier one does not drop a newer one.
    connection: u64,
    /// The task is to drop its connection: a check timed out on it, or Redis moved.
    drop_connection: bool,
    /// Commands written by checks and not yet sent.
    out: Vec<u8>,
    /// The slots of the checks whose commands are queued or sent, in the order of their
    /// replies.
    order: VecDeque<usize>,
    /// One per check in flight, reused (never more than `MOST_IN_FLIGHT`).
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// The Redis key of the check being written.
    key: Vec<u8>,
}

/// One check's place: its answer once the reply came, and how to wake it.
#[derive(Default)]
struct Slot {
    answer: Option<Result<Option<u64>, RedisFailure>>,
    waker: Option<Waker>,
    /// Its check is gone (timed out, or its request ended): the reply is read and dropped.
    abandoned: bool,
}

/// A reply this client reads: an integer pair (the script's), a bulk string, or an error.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Pair(i64, i64),
    Bulk(std::ops::Range<usize>),
    Error(String),
}

/// The script's SHA-1 in hex, as SCRIPT LOAD answers it and EVALSHA names it: known before any
/// connection, so that checks queue their commands while the first one is made.
fn script_sha() -> &'static [u8] {
    static SHA: OnceLock<Vec<u8>> = OnceLock::new();
    SHA.get_or_init(|| {
        let digest = ring::digest::digest(
            &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            GCRA_SCRIPT.as_bytes(),
        );
        let mut hex = Vec::with_capacity(40);
        for byte in digest.as_ref() {
            let _ = write!(hex, "{byte:02x}");
        }
        hex
    })
}

impl RedisLink {
    /// Asks Redis about one request of `key` under `limiter`, within `settings.timeout`: `None`
    /// when it is let through, the wait in microseconds when it is over.
    pub async fn check(
        &self,
        settings: &RedisSettings,
        limiter: &Limiter,
        key: RequestKey<'_>,
    ) -> Result<Option<u64>, RedisFailure> {
        let deadline = Moment::now() + settings.timeout;
        let (slot, connection) = self.queue_check(settings, limiter, key)?;
        let mut ticket = Ticket {
            shared: &self.shared,
            slot,
            settled: false,
        };
        let answer = std::future::poll_fn(|cx| ticket.poll_answer(cx.waker()));
        match timeout_at(deadline, answer).await {
            Ok(answer) => answer,
            Err(_) => {
                // What comes on this connection may never come: the next check makes another.
                let mut queue = self.shared.queue.borrow_mut();
                if queue.task.is_some() && queue.connection == connection {
                    queue.drop_connection = true;
                    self.shared.wake.notify_one();
                }
                Err(RedisFailure::Timeout)
            }
        }
    }

    /// Writes the check's EVALSHA into the queue, starting the connection's task if none runs:
    /// the check's slot, and the connection it goes on.
    fn queue_check(
        &self,
        settings: &RedisSettings,
        limiter: &Limiter,
        key: RequestKey<'_>,
    ) -> Result<(usize, u64), RedisFailure> {
        let mut queue = self.shared.queue.borrow_mut();
        if queue.task.is_some_and(|addr| addr != settings.addr) {
            // A reload moved Redis: the old connection goes, and its checks with it.
            queue.drop_connection = true;
            self.shared.wake.notify_one();
            return Err(RedisFailure::Reply(
                "the connection to the Redis before a reload is closing".into(),
            ));
        }
        let slot = match queue.free.pop() {
            Some(slot) => slot,
            None if queue.slots.len() < MOST_IN_FLIGHT => {
                queue.slots.push(Slot::default());
                queue.slots.len() - 1
            }
            None => return Err(RedisFailure::Busy),
        };
        let queue = &mut *queue;
        write_check(&mut queue.out, &mut queue.key, limiter, key);
        queue.order.push_back(slot);
        if queue.task.is_none() {
            queue.task = Some(settings.addr);
            queue.connection += 1;
            queue.drop_connection = false;
            tokio::task::spawn_local(run_connection(Rc::clone(&self.shared), *settings));
        }
        self.shared.wake.notify_one();
        Ok((slot, queue.connection))
    }
}

/// The EVALSHA of the script for `key` under `limiter`, appended to `out` (`key_room` holds the
/// Redis key meanwhile).
fn write_check(out: &mut Vec<u8>, key_room: &mut Vec<u8>, limiter: &Limiter, key: RequestKey<'_>) {
    let rule = &limiter.rule;
    key_room.clear();
    key_room.extend_from_slice(limiter.redis_key_prefix().as_bytes());
    key.write_full(key_room);
    let (mut interval, mut burst) = ([0u8; 20], [0u8; 10]);
    let interval = decimal(limiter.interval_micros(), &mut interval);
    let burst = decimal(u64::from(rule.burst), &mut burst);
    let command: [&[u8]; 6] = [b"EVALSHA", script_sha(), b"1", key_room, interval, burst];
    write_command(out, &command);
}

/// A check's claim on its slot until it has its answer; dropped before (the check timed out,
/// or its request's future was dropped), the slot's reply is read and dropped when it comes.
struct Ticket<'a> {
    shared: &'a Shared,
    slot: usize,
    settled: bool,
}

impl Ticket<'_> {
    fn poll_answer(&mut self, waker: &Waker) -> Poll<Result<Option<u64>, RedisFailure>> {
        let mut queue = self.shared.queue.borrow_mut();
        let slot = &mut queue.slots[self.slot];
        match slot.answer.take() {
            Some(answer) => {
                slot.waker = None;
                queue.free.push(self.slot);
                self.settled = true;
                Poll::Ready(answer)
            }
            None => {
                match &mut slot.waker {
                    Some(known) if known.will_wake(waker) => {}
                    other => *other = Some(waker.clone()),
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut queue = self.shared.queue.borrow_mut();
        let slot = &mut queue.slots[self.slot];
        slot.waker = None;
        if slot.answer.take().is_some() {
            queue.free.push(self.slot);
        } else {
            slot.abandoned = true;
        }
    }
}

impl Queue {
    /// Gives `answer` to the check of the oldest command in flight.
    fn answer_next(
        &mut self,
        answer: Result<Option<u64>, RedisFailure>,
    ) -> Result<(), RedisFailure> {
        let index = self
            .order
            .pop_front()
            .ok_or_else(|| RedisFailure::Reply("a reply to no command".into()))?;
        let slot = &mut self.slots[index];
        if slot.abandoned {
            *slot = Slot::default();
            self.free.push(index);
        } else {
            slot.answer = Some(answer);
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
        Ok(())
    }
}

/// The connection's task, ended: every check still in flight fails with why it ended (or, when
/// the worker's loop dropped it, with a failure saying so), and the next check starts another.
struct Ending<'a> {
    shared: &'a Shared,
    why: RedisFailure,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        let mut queue = self.shared.queue.borrow_mut();
        while !queue.order.is_empty() {
            let _ = queue.answer_next(Err(self.why.clone()));
        }
        queue.out.clear();
        queue.task = None;
        queue.drop_connection = false;
    }
}

/// One worker's connection to Redis, from connecting until it fails or is dropped.
async fn run_connection(shared: Rc<Shared>, settings: RedisSettings) {
    let mut ending = Ending {
        shared: &shared,
        why: RedisFailure::Reply("the worker's event loop restarted".into()),
    };
    ending.why = serve_connection(&shared, &settings).await;
}

/// Connects, loads the script, then sends what the checks queue and answers them as replies
/// come, until something fails: what did.
async fn serve_connection(shared: &Shared, settings: &RedisSettings) -> RedisFailure {
    let mut reply = Vec::with_capacity(512);
    let mut stream = match timeout(settings.timeout, open(settings.addr, &mut reply)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(failure)) => return failure,
        Err(_) => return RedisFailure::Timeout,
    };
    let mut sending = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        {
            let mut queue = shared.queue.borrow_mut();
            if queue.drop_connection {
                return RedisFailure::Timeout;
            }
            std::mem::swap(&mut sending, &mut queue.out);
        }
        if !sending.is_empty() {
            match timeout(settings.timeout, stream.write_all(&sending)).await {
                Ok(Ok(())) => sending.clear(),
                Ok(Err(error)) => return error.into(),
                Err(_) => return RedisFailure::Timeout,
            }
        }
        tokio::select! {
            biased;
            read = stream.read(&mut chunk) => match read {
                Ok(0) => return io::Error::from(io::ErrorKind::UnexpectedEof).into(),
                Ok(n) => reply.extend_from_slice(&chunk[..n]),
                Err(error) => return error.into(),
            },
            () = shared.wake.notified() => continue,
        }
        if let Err(failure) = answer_replies(shared, &mut reply) {
            return failure;
        }
    }
}

/// Answers the checks whose replies are whole in `reply`, and takes those replies out of it.
fn answer_replies(shared: &Shared, reply: &mut Vec<u8>) -> Result<(), RedisFailure> {
    let mut used = 0;
    let mut queue = shared.queue.borrow_mut();
    let outcome = loop {
        let (answer, len) = match read_reply(&reply[used..]) {
            Ok(Some(read)) => read,
            Ok(None) => break Ok(()),
            Err(failure) => break Err(failure),
        };
        used += len;
        let answer = match answer {
            Reply::Pair(1, _) => Ok(None),
            Reply::Pair(0, wait) => Ok(Some(u64::try_from(wait).unwrap_or(0).max(1))),
            // Redis lost the script (restarted, or SCRIPT FLUSH): a new connection loads it.
            Reply::Error(text) if text.starts_with("NOSCRIPT") => {
                break Err(RedisFailure::Reply(format!("EVALSHA: {text}")));
            }
            other => Err(RedisFailure::Reply(format!("EVALSHA: {other:?}"))),
        };
        if let Err(failure) = queue.answer_next(answer) {
            break Err(failure);
        }
    };
    reply.drain(..used);
    outcome
}

/// A connection to Redis at `addr` with the script loaded on it (`reply` is its buffer).
async fn open(addr: SocketAddr, reply: &mut Vec<u8>) -> Result<Stream, RedisFailure> {
    let mut stream = Stream::connect(&addr.into()).await?;
    let mut load = Vec::with_capacity(GCRA_SCRIPT.len() + 64);
    write_command(&mut load, &[b"SCRIPT", b"LOAD", GCRA_SCRIPT.as_bytes()]);
    stream.write_all(&load).await?;
    let (answer, len) = loop {
        if let Some(read) = read_reply(reply)? {
            break read;
        }
        let mut chunk = [0u8; 512];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        reply.extend_from_slice(&chunk[..n]);
    };
    let loaded = match answer {
        Reply::Bulk(range) => reply[range] == *script_sha(),
        _ => false,
    };
    if !loaded {
        let text = String::from_utf8_lossy(&reply[..len]).into_owned();
        return Err(RedisFailure::Reply(format!("SCRIPT LOAD: {text:?}")));
    }
    reply.drain(..len);
    Ok(stream)
}

/// `value` in decimal, written into `room`.
fn decimal(value: u64, room: &mut [u8]) -> &[u8] {
    let mut cursor = io::Cursor::new(&mut room[..]);
    let _ = write!(cursor, "{value}");
    let len = cursor.position() as usize;
    &room[..len]
}

/// A RESP array of bulk strings, appended to `out`.
fn write_command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    let _ = write!(out, "*{}\r\n", parts.len());
    for part in parts {
        let _ = write!(out, "${}\r\n", part.len());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
}

/// The line at the start of `bytes` (without its CRLF) and where the next begins.
fn line(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let end = bytes.windows(2).position(|pair| pair == b"\r\n")?;
    Some((&bytes[..end], end + 2))
}

fn number(text: &[u8]) -> Result<i64, RedisFailure> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| RedisFailure::Reply("a number that is not one".into()))
}

/// The reply at the start of `bytes` and its length: `None` while it is incomplete.
fn read_reply(bytes: &[u8]) -> Result<Option<(Reply, usize)>, RedisFailure> {
    let Some((first, next)) = line(bytes) else {
        return Ok(None);
    };
    let (kind, rest) = first
        .split_first()
        .ok_or_else(|| RedisFailure::Reply("an empty line".into()))?;
    match kind {
        b'-' => Ok(Some((
            Reply::Error(String::from_utf8_lossy(rest).into_owned()),
            next,
        ))),
        b'$' => {
            let len = usize::try_from(number(rest)?)
                .map_err(|_| RedisFailure::Reply("a nil string".into()))?;
            let end = next + len;
            Ok((bytes.len() >= end + 2).then_some((Reply::Bulk(next..end), end + 2)))
        }
        b'*' => {
            let mut at = next;
            let mut values = [0i64; 2];
            if number(rest)? != 2 {
                return Err(RedisFailure::Reply("an array that is not a pair".into()));
            }
            for value in &mut values {
                let Some((item, after)) = line(&bytes[at..]) else {
                    return Ok(None);
                };
                match item.split_first() {
                    Some((b':', digits)) => *value = number(digits)?,
                    _ => return Err(RedisFailure::Reply("a pair that is not of integers".into())),
                }
                at += after;
            }
            Ok(Some((Reply::Pair(values[0], values[1]), at)))
        }
        _ => Err(RedisFailure::Reply(format!(
            "an unexpected reply: {}",
            String::from_utf8_lossy(first)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies_in_resp() {
        let mut out = Vec::new();
        write_command(&mut out, &[b"EVALSHA", b"ab", b"1", b"k"]);
        assert_eq!(
            out,
            b"*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\nk\r\n"
        );
        assert_eq!(read_reply(b"*2\r\n:1\r\n").unwrap(), None);
        assert_eq!(
            read_reply(b"*2\r\n:0\r\n:1500\r\n").unwrap(),
            Some((Reply::Pair(0, 1500), 15))
        );
        assert_eq!(read_reply(b"$3\r\nab").unwrap(), None);
        assert_eq!(
            read_reply(b"$3\r\nabc\r\n").unwrap(),
            Some((Reply::Bulk(4..7), 9))
        );
        assert_eq!(
            read_reply(b"-NOSCRIPT No matching script\r\n").unwrap(),
            Some((Reply::Error("NOSCRIPT No matching script".into()), 30))
        );
        assert!(read_reply(b"+OK\r\n").is_err());
        let mut room = [0u8; 20];
        assert_eq!(decimal(1_000_000, &mut room), b"1000000");
    }

    #[test]
    fn pipelined_replies_answer_their_checks_in_order() {
        let shared = Shared::default();
        {
            let mut queue = shared.queue.borrow_mut();
            queue.slots = (0..3).map(|_| Slot::default()).collect();
            queue.order.extend([2, 0, 1]);
            queue.slots[0].abandoned = true;
        }
        // Two whole replies and half of the third.
        let mut reply = b"*2\r\n:1\r\n:0\r\n*2\r\n:0\r\n:250\r\n*2\r\n:1".to_vec();
        answer_replies(&shared, &mut reply).unwrap();
        assert_eq!(reply, b"*2\r\n:1");
        {
            let queue = shared.queue.borrow();
            assert!(matches!(queue.slots[2].answer, Some(Ok(None))));
            // The abandoned check's reply is read and its slot freed.
            assert!(queue.slots[0].answer.is_none() && queue.free == [0]);
            assert_eq!(queue.order, [1]);
        }
        reply.extend_from_slice(b"\r\n:0\r\n");
        answer_replies(&shared, &mut reply).unwrap();
        assert!(reply.is_empty());
        assert!(matches!(
            shared.queue.borrow().slots[1].answer,
            Some(Ok(None))
        ));
        // A reply nobody asked for ends the connection.
        reply.extend_from_slice(b"*2\r\n:1\r\n:0\r\n");
        assert!(answer_replies(&shared, &mut reply).is_err());
    }

    #[test]
    fn the_script_is_named_by_its_sha1() {
        let sha = script_sha();
        assert_eq!(sha.len(), 40);
        assert!(sha.iter().all(u8::is_ascii_hexdigit));
    }
}
