//! What the cache did for one request, as the access log names it and the per-pool cache
//! counters count it.

/// The cache's part in one request to a pool that caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Answered from a fresh stored response.
    Hit,
    /// Answered from a stale stored response: within `stale-while-revalidate` (while one
    /// background fetch refreshes it), or instead of a server's failure (`stale-if-error`,
    /// `grace`).
    Stale,
    /// Answered from another request's fetch of the same object, as it arrived.
    Collapsed,
    /// Waited for another request's fetch longer than `lock_timeout`, and went to the server.
    LockTimeout,
    /// Not stored, or expired: fetched, and stored as it came.
    Miss,
    /// Fetched, and the answer may not be stored.
    Uncacheable,
    /// Not for the cache at all: another method, a range, a method override, `no-store`.
    Pass,
    /// A stale object revalidated: the server answered 304 and the stored object, refreshed,
    /// answered.
    Revalidated,
    /// A stale object revalidated: the server answered with a new response, stored instead.
    Replaced,
}

impl CacheOutcome {
    /// The word the access log writes.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Stale => "stale",
            CacheOutcome::Collapsed => "collapsed",
            CacheOutcome::LockTimeout => "lock_timeout",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Uncacheable => "uncacheable",
            CacheOutcome::Pass => "pass",
            CacheOutcome::Revalidated => "revalidated",
            CacheOutcome::Replaced => "replaced",
        }
    }
}
