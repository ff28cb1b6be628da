//! When a request may go again, and where: the replay rules in one place, as a property of the
//! failure an attempt met and of how much of the request reached the server (pingora's
//! `RetryType` is the model).
//!
//! - A reused connection that fails before any response byte (`ServerClosed`, `ServerIo`): the
//!   same server again on a fresh connection, once, when the request is idempotent or the
//!   server's TCP took none of its bytes (a keep-alive close crossed it on the wire). Not
//!   counted as a retry, nor as a failure of the server.
//! - A refused connection: another server at once, outside `retries` and the retry budget
//!   (nothing reached the refusing server, and nothing loads it).
//! - A failure the pool's `retry_on` lists, before any response byte: another server, as one of
//!   the pool's `retries` within its budget, when nothing reached the first server (connecting
//!   failed), or the request is idempotent and all of it is at hand, or all of it is at hand (its
//!   body buffered) and the server's TCP took none of it, whatever its method.
//! - A response whose status `retry_on` lists, to such a request: likewise another server (the
//!   request is kept for it, in pools that retry on statuses).
//! - Anything else goes to the client as it is.

use crate::transport::Moment;

use super::context::ProxyContext;
use super::failure::Failure;
use crate::transport::recycle;
use crate::upstream::retry_budget::second_of;
use crate::upstream::snapshot::ActiveGuard;
use crate::upstream::Pool;

/// How an attempt that failed before any response byte may go again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Replay {
    /// The same server, on a fresh connection.
    SameServer,
    /// Another server: `Failover::Refused` outside `retries`, or `Failover::Retry` if the
    /// pool's `retry_on` lists the failure's condition.
    Elsewhere(Failover),
    /// Not at all: the failure is the client's answer.
    Never,
}

/// What is known of an attempt that failed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Attempt {
    /// It went out on a connection kept idle from an earlier request.
    pub reused: bool,
    /// All of the request was at hand when it went (no body still arriving).
    pub whole: bool,
    /// The request's method is idempotent.
    pub idempotent: bool,
    /// Bytes of a response had arrived.
    pub response_began: bool,
}

impl Replay {
    /// The rule for `failure` met by `attempt`. `took_none` asks the kernel whether the
    /// server's TCP took none of the request's bytes: a syscall, made only when it decides.
    pub(super) fn of(
        failure: Failure,
        attempt: Attempt,
        took_none: impl FnOnce() -> bool,
    ) -> Replay {
        if attempt.response_began {
            return Replay::Never;
        }
        // Asked at most once, and only where the answer decides.
        let (mut asked, mut ask) = (None, Some(took_none));
        let mut none_taken = || *asked.get_or_insert_with(|| ask.take().is_some_and(|ask| ask()));
        let closed = matches!(failure, Failure::ServerClosed | Failure::ServerIo(_));
        if attempt.reused && attempt.whole && closed && (attempt.idempotent || none_taken()) {
            return Replay::SameServer;
        }
        if failure.is_refusal() {
            return Replay::Elsewhere(Failover::Refused);
        }
        if failure.reached_no_server() || (attempt.whole && attempt.idempotent) {
            return Replay::Elsewhere(Failover::Retry);
        }
        // A whole request (a body buffered with it, say a POST) that the server's TCP took none
        // of reached no process: another server may have it, whatever its method.
        if attempt.whole && closed && none_taken() {
            return Replay::Elsewhere(Failover::Retry);
        }
        Replay::Never
    }
}

/// Whether a request that got its answer may be asked of another server should the status be
/// one `retry_on` lists: all of it was at hand and it is idempotent, in a pool that retries on
/// statuses. Such a request is kept ([`KeptRequest`]) while its answer is awaited.
pub(super) fn may_retry_on_status(pool: &Pool, whole: bool, idempotent: bool) -> bool {
    whole && idempotent && pool.retries > 0 && pool.retry_on.has_statuses()
}

/// The request's bytes, kept while a retry on a status may need them again.
pub(super) struct KeptRequest(Vec<u8>);

impl KeptRequest {
    /// A copy of the request in `out`, in a block from the free list.
    pub(super) fn of(out: &[u8]) -> KeptRequest {
        let mut copy = recycle::take_bytes(out.len());
        copy.extend_from_slice(out);
        KeptRequest(copy)
    }

    /// Nothing kept yet: a request whose body streams fills it as it goes
    /// ([`KeptRequest::bytes_mut`]).
    pub(super) fn empty() -> KeptRequest {
        KeptRequest(Vec::new())
    }

    /// The bytes kept, to fill.
    pub(super) fn bytes_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }

    /// Puts the request back in `out`, for the next server.
    pub(super) fn restore(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.0);
    }
}

impl Drop for KeptRequest {
    fn drop(&mut self) {
        recycle::give_back_bytes(std::mem::take(&mut self.0));
    }
}

/// Most servers one request is tried on.
const MOST_ATTEMPTS: usize = 12;

/// Why a request goes to another server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failover {
    /// Its server refused the connection: nothing reached it, and nothing loads it.
    Refused,
    /// A failure `retry_on` lists: one of the pool's `retries`, within its budget.
    Retry,
}

/// The servers a request has been tried on, and whether it may be tried on one more.
pub(super) struct Retry {
    /// By index in the pool.
    tried: [usize; MOST_ATTEMPTS],
    attempts: usize,
    /// Of the attempts, those that were retries (not failovers after a refusal).
    retries: usize,
}

impl Retry {
    pub(super) fn new(first: Option<usize>) -> Retry {
        let mut tried = [usize::MAX; MOST_ATTEMPTS];
        tried[0] = first.unwrap_or(usize::MAX);
        Retry {
            tried,
            attempts: 1,
            retries: 0,
        }
    }

    /// Another server of `pool` and a slot on it, when the request may go again: the request's
    /// deadline has not passed, a server not yet tried takes requests and has room, and — for a
    /// retry — the pool's `retries` are not used up and its budget has one to spare. Counts it.
    pub(super) fn next_server<'s>(
        &mut self,
        context: &ProxyContext,
        pool: &'s Pool,
        deadline: Option<Moment>,
        why: Failover,
    ) -> Option<(usize, ActiveGuard<'s>)> {
        if self.attempts == MOST_ATTEMPTS {
            return None;
        }
        if why == Failover::Retry && self.retries >= pool.retries as usize {
            return None;
        }
        if deadline.is_some_and(|deadline| Moment::now() >= deadline) {
            return None;
        }
        let next = pool.balancer.pick_other(
            &pool.servers,
            &mut context.rng.borrow_mut(),
            &self.tried[..self.attempts],
        )?;
        let slot = ActiveGuard::try_take(pool, next, context.index)?;
        if why == Failover::Retry {
            let second = second_of(Moment::now());
            let (percent, floor) = (pool.retry_budget_percent, pool.retry_budget_floor);
            if !pool
                .retry_budget
                .try_retry(context.index, second, percent, floor)
            {
                tracing::warn!(pool = %pool.name, "retry budget spent: not retrying");
                return None;
            }
            pool.traffic.record_retry(context.index);
            self.retries += 1;
        }
        self.tried[self.attempts] = next;
        self.attempts += 1;
        Some((next, slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(reused: bool, whole: bool, idempotent: bool) -> Attempt {
        Attempt {
            reused,
            whole,
            idempotent,
            response_began: false,
        }
    }

    const CLOSED: Failure = Failure::ServerClosed;

    #[test]
    fn a_reused_connection_closed_under_a_request_goes_again_to_the_same_server() {
        let get = attempt(true, true, true);
        assert_eq!(
            Replay::of(CLOSED, get, || panic!("not asked")),
            Replay::SameServer
        );
        let post = attempt(true, true, false);
        assert_eq!(Replay::of(CLOSED, post, || true), Replay::SameServer);
        assert_eq!(Replay::of(CLOSED, post, || false), Replay::Never);
    }

    #[test]
    fn a_whole_post_the_server_took_none_of_goes_to_another_server() {
        let buffered_post = attempt(false, true, false);
        let retry = Replay::Elsewhere(Failover::Retry);
        assert_eq!(Replay::of(CLOSED, buffered_post, || true), retry);
        assert_eq!(Replay::of(CLOSED, buffered_post, || false), Replay::Never);
        // A body still streaming cannot be sent again.
        let streaming_post = attempt(false, false, false);
        assert_eq!(Replay::of(CLOSED, streaming_post, || true), Replay::Never);
        // A timeout proves nothing of what the server did.
        assert_eq!(
            Replay::of(Failure::ResponseTimeout, buffered_post, || true),
            Replay::Never
        );
    }

    #[test]
    fn refusals_and_failed_connects_go_elsewhere_whatever_the_method() {
        let streaming_post = attempt(false, false, false);
        let refused = Failure::ConnectFailed(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            Replay::of(refused, streaming_post, || panic!("not asked")),
            Replay::Elsewhere(Failover::Refused)
        );
        assert_eq!(
            Replay::of(Failure::ConnectTimeout, streaming_post, || panic!(
                "not asked"
            )),
            Replay::Elsewhere(Failover::Retry)
        );
    }

    #[test]
    fn nothing_goes_again_after_a_response_byte() {
        let mut get = attempt(true, true, true);
        get.response_began = true;
        assert_eq!(Replay::of(CLOSED, get, || true), Replay::Never);
    }
}
