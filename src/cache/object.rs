//! One stored response: its key, its head as the server sent it (less the fields that framed
//! its body there), its body whole, and what its freshness and validators were.

use crate::transport::Moment;

use super::freshness::Freshness;

/// A response kept in the cache. Immutable once stored: a refresh stores a new one.
#[derive(Debug)]
pub struct Object {
    /// The whole key it is stored under (see `key.rs`), compared on every lookup.
    pub key: Box<[u8]>,
    /// The status line and fields as the server sent them, ending with the blank line, without
    /// `Content-Length`, `Transfer-Encoding`, hop-by-hop fields and `Age`: what a hit sends
    /// before its own `Age` and framing.
    pub head: Box<[u8]>,
    /// The body, whole and decoded of any transfer coding (shared: a 304 refreshes the object
    /// around the same bytes).
    pub body: bytes::Bytes,
    pub status: u16,
    pub freshness: Freshness,
    /// Its age when it arrived (RFC 9111 §4.2.3), in seconds.
    pub initial_age: u64,
    /// When it arrived, on the monotonic clock: its resident time counts from here.
    pub stored: Moment,
    /// Its `ETag` value, when it has one (for `If-None-Match` to the server and from clients).
    pub etag: Option<Box<[u8]>>,
    /// Its `Last-Modified`, in seconds since the epoch.
    pub last_modified: Option<u64>,
    /// Its surrogate keys (`Surrogate-Key` or `Cache-Tag`), space-separated, for purges by tag.
    pub tags: Box<[u8]>,
}

impl Object {
    /// The bytes it holds beyond its fixed fields.
    pub fn bytes(&self) -> u64 {
        let etag = self.etag.as_ref().map_or(0, |etag| etag.len());
        (self.key.len() + self.head.len() + self.body.len() + etag + self.tags.len()) as u64
    }

    /// Its current age at `now`, in whole seconds (RFC 9111 §4.2.3: the initial age plus the
    /// time it has been here).
    pub fn age(&self, now: Moment) -> u64 {
        self.initial_age + now.saturating_duration_since(self.stored).as_secs()
    }

    /// Seconds it stays fresh from `now` on (0 when stale).
    pub fn fresh_for(&self, now: Moment) -> u64 {
        self.freshness.lifetime.saturating_sub(self.age(now))
    }

    /// An object stored now with `head` and `body`, fresh for `lifetime` seconds, without
    /// validators or tags (for the benchmarks' replays and the tests).
    pub fn fresh(key: &[u8], head: &[u8], body: Vec<u8>, lifetime: u64) -> Object {
        Object {
            key: key.into(),
            head: head.into(),
            body: body.into(),
            status: 200,
            freshness: Freshness {
                lifetime,
                control: Default::default(),
            },
            initial_age: 0,
            stored: Moment::now(),
            etag: None,
            last_modified: None,
            tags: Box::default(),
        }
    }

    /// An object with a one-line head and the given body, fresh for a minute.
    #[cfg(test)]
    pub fn for_test(key: &[u8], body: Vec<u8>) -> Object {
        Object::fresh(key, b"HTTP/1.1 200 OK\r\n\r\n", body, 60)
    }
}
