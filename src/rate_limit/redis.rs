//! The limits' counts in Redis (`[rate_limit] redis`), so that several herdsman instances share
//! them: one atomic Lua script per check (GCRA, the same rule as `table.rs`, on Redis's clock),
//! loaded once per connection with SCRIPT LOAD and run with EVALSHA, over a small RESP client of
//! herdsman's own on a `transport::Stream`.
//!
//! One connection per worker, on the worker's own runtime (async I/O: no worker thread ever
//! blocks on Redis), taken by one check at a time: a check waits behind the worker's others
//! (an async mutex of this worker alone, never shared with another thread). Each check is
//! bounded by `timeout`, connecting included; a connection that failed or timed out is dropped
//! and made again by the next check.

use std::io;
use std::io::Write as _;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::rate_limit::RedisSettings;
use crate::transport::deadline::timeout_at;
use crate::transport::{Moment, Stream};

use super::key::RequestKey;
use super::Limiter;

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
#[derive(Debug)]
pub enum RedisFailure {
    /// Not within `timeout`.
    Timeout,
    Io(io::Error),
    /// An error reply, or one the client cannot read.
    Reply(String),
}

impl std::fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisFailure::Timeout => write!(f, "no answer within the timeout"),
            RedisFailure::Io(error) => write!(f, "{error}"),
            RedisFailure::Reply(text) => write!(f, "{text}"),
        }
    }
}

impl From<io::Error> for RedisFailure {
    fn from(error: io::Error) -> RedisFailure {
        RedisFailure::Io(error)
    }
}

/// One worker's link to Redis.
#[derive(Default)]
pub struct RedisLink {
    connection: tokio::sync::Mutex<Option<Connection>>,
}

/// A connection with the script loaded on it, and the buffers its commands reuse.
struct Connection {
    stream: Stream,
    /// The script's SHA-1, as SCRIPT LOAD answered it.
    sha: Vec<u8>,
    /// The command being written, then the reply being read.
    out: Vec<u8>,
    reply: Vec<u8>,
    /// The Redis key of the request being checked.
    key: Vec<u8>,
}

/// A reply this client reads: an integer pair (the script's), a bulk string, or an error.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Pair(i64, i64),
    Bulk(std::ops::Range<usize>),
    Error(String),
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
        let mut held = match timeout_at(deadline, self.connection.lock()).await {
            Ok(held) => held,
            Err(_) => return Err(RedisFailure::Timeout),
        };
        let asked = async {
            if held.is_none() {
                *held = Some(Connection::open(settings).await?);
            }
            let connection = held.as_mut().expect("opened above");
            connection.check(limiter, key).await
        };
        let answer = match timeout_at(deadline, asked).await {
            Ok(answer) => answer,
            Err(_) => Err(RedisFailure::Timeout),
        };
        if answer.is_err() {
            // What comes on it later would answer the wrong question.
            *held = None;
        }
        answer
    }
}

impl Connection {
    async fn open(settings: &RedisSettings) -> Result<Connection, RedisFailure> {
        let stream = Stream::connect(settings.addr).await?;
        let mut connection = Connection {
            stream,
            sha: Vec::new(),
            out: Vec::with_capacity(256),
            reply: Vec::with_capacity(256),
            key: Vec::with_capacity(128),
        };
        write_command(
            &mut connection.out,
            &[b"SCRIPT", b"LOAD", GCRA_SCRIPT.as_bytes()],
        );
        match connection.round_trip().await? {
            Reply::Bulk(range) => connection.sha = connection.reply[range].to_vec(),
            other => return Err(RedisFailure::Reply(format!("SCRIPT LOAD: {other:?}"))),
        }
        Ok(connection)
    }

    /// One EVALSHA of the script for `key` under `limiter`.
    async fn check(
        &mut self,
        limiter: &Limiter,
        key: RequestKey<'_>,
    ) -> Result<Option<u64>, RedisFailure> {
        let rule = &limiter.rule;
        self.key.clear();
        // The limit's name and rule in the key: instances share a limit only when they agree
        // on it, and a changed rule starts afresh.
        let _ = write!(
            self.key,
            "herdsman:rate_limit:{}:{}:{}:{}:",
            rule.name,
            rule.rate_text(),
            rule.burst,
            rule.key.text()
        );
        key.write_full(&mut self.key);
        let (mut interval, mut burst) = ([0u8; 20], [0u8; 10]);
        let interval = decimal(limiter.interval_micros(), &mut interval);
        let burst = decimal(u64::from(rule.burst), &mut burst);
        let (sha, key_bytes) = (std::mem::take(&mut self.sha), std::mem::take(&mut self.key));
        let command: [&[u8]; 6] = [b"EVALSHA", &sha, b"1", &key_bytes, interval, burst];
        write_command(&mut self.out, &command);
        let reply = self.round_trip().await;
        (self.sha, self.key) = (sha, key_bytes);
        match reply? {
            Reply::Pair(1, _) => Ok(None),
            Reply::Pair(0, wait) => Ok(Some(u64::try_from(wait).unwrap_or(0).max(1))),
            other => Err(RedisFailure::Reply(format!("EVALSHA: {other:?}"))),
        }
    }

    /// Writes `out` and reads one reply into `reply`.
    async fn round_trip(&mut self) -> Result<Reply, RedisFailure> {
        self.stream.write_all(&self.out).await?;
        self.reply.clear();
        loop {
            if let Some(reply) = read_reply(&self.reply)? {
                return Ok(reply);
            }
            let mut chunk = [0u8; 512];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(RedisFailure::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            self.reply.extend_from_slice(&chunk[..n]);
        }
    }
}

/// `value` in decimal, written into `room`.
fn decimal(value: u64, room: &mut [u8]) -> &[u8] {
    let mut cursor = io::Cursor::new(&mut room[..]);
    let _ = write!(cursor, "{value}");
    let len = cursor.position() as usize;
    &room[..len]
}

/// A RESP array of bulk strings, in `out` (cleared first).
fn write_command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.clear();
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

/// The reply at the start of `bytes`: `None` while it is incomplete.
fn read_reply(bytes: &[u8]) -> Result<Option<Reply>, RedisFailure> {
    let Some((first, next)) = line(bytes) else {
        return Ok(None);
    };
    let (kind, rest) = first
        .split_first()
        .ok_or_else(|| RedisFailure::Reply("an empty line".into()))?;
    match kind {
        b'-' => Ok(Some(Reply::Error(
            String::from_utf8_lossy(rest).into_owned(),
        ))),
        b'$' => {
            let len = usize::try_from(number(rest)?)
                .map_err(|_| RedisFailure::Reply("a nil string".into()))?;
            let end = next + len;
            Ok((bytes.len() >= end + 2).then_some(Reply::Bulk(next..end)))
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
            Ok(Some(Reply::Pair(values[0], values[1])))
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
            Some(Reply::Pair(0, 1500))
        );
        assert_eq!(read_reply(b"$3\r\nab").unwrap(), None);
        assert_eq!(
            read_reply(b"$3\r\nabc\r\n").unwrap(),
            Some(Reply::Bulk(4..7))
        );
        assert_eq!(
            read_reply(b"-NOSCRIPT No matching script\r\n").unwrap(),
            Some(Reply::Error("NOSCRIPT No matching script".into()))
        );
        assert!(read_reply(b"+OK\r\n").is_err());
        let mut room = [0u8; 20];
        assert_eq!(decimal(1_000_000, &mut room), b"1000000");
    }
}
