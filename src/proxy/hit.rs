//! The exchange's answers from the cache: a hit's head and stored body sent at once, and the
//! stored answer that stands in for a server's (stale on an error, refreshed by a 304).

use crate::transport::Moment;

use super::answered_here::answer_error;
use super::cached::{self, Hit, HitWriting};
use super::context::ProxyContext;
use super::downstream::Downstream;
use super::facts::RequestFacts;
use super::failure::Failure;
use super::header_rules;
use super::outcome::Outcome;
use super::{Client, Exchanged, Next};
use crate::cache::head::HitFraming;
use crate::stats::traffic::Ending;
use crate::upstream::Snapshot;

/// The largest stored body a hit copies behind its head, to send both with one `send` (a copy of
/// 16 KiB cost less than a second write); a larger body is not copied but gathered with the
/// head into one `sendmsg` (`Downstream::send_two`).
const HIT_BODY_WITH_HEAD: usize = 16 * 1024;

/// Answers from the cache: the head `cached::look_up` wrote into `out`, then the stored body.
/// No server is involved.
pub(super) async fn serve_hit<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    facts: RequestFacts,
    hit: Hit,
    outcome: &mut Outcome,
) -> Exchanged {
    outcome.pool = Some(facts.choice.pool);
    outcome.ending = Ending::Status(hit.status);
    outcome.cache = Some(hit.outcome);
    if snapshot.edits_heads {
        // A stored answer's head as the rules make it: the rules apply to its answer, not to
        // what is stored. A head they would make too large goes as they made it.
        let _ = header_rules::edit_answer(client, snapshot, facts.choice.route, None);
    }
    let deadline = Moment::now() + snapshot.timeouts.client_idle;
    let body = hit.body();
    // The head and the body in one write: one send, one segment, rather than two. A small body
    // is copied behind the head; a larger one goes from the store, the head beside it.
    let sent = if body.len() <= HIT_BODY_WITH_HEAD {
        client.out.extend_from_slice(body);
        client.downstream.send(&client.out, deadline).await
    } else {
        client
            .downstream
            .send_two(&client.out, body, deadline)
            .await
    };
    outcome.response_started = matches!(sent, Some(Ok(())));
    if outcome.response_started {
        outcome.body_bytes = body.len() as u64;
    }
    let keep = facts.keep_alive && !context.is_stopping();
    match sent {
        Some(Ok(())) if keep => Next::KeepAlive,
        _ => Next::Close { linger: true },
    }
    .into()
}

/// After a failure before any answer: the stale stored answer instead, when the cache has one
/// the request may still get (`cached::stale_on_error`).
#[cold]
#[inline(never)]
pub(super) async fn stale_instead<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    facts: RequestFacts,
    outcome: &mut Outcome,
) -> Option<Exchanged> {
    client.cache.stale.as_ref()?;
    let config = snapshot.cache_for(facts.choice.route, facts.choice.pool)?;
    let writing = HitWriting {
        framing: hit_framing(context, &facts),
        hsts: &client.hsts,
        cache_status: config.cache_status,
    };
    let (step, out) = (&mut client.cache, &mut client.out);
    let hit = cached::stale_on_error(step, config, writing, out)?;
    // Boxed: a rare answer's state kept out of every exchange's future.
    Some(Box::pin(serve_hit(context, client, snapshot, facts, hit, outcome)).await)
}

/// The server answered 304 to a fill's own conditions: the refreshed object answers
/// (`cached::revalidated`).
#[cold]
#[inline(never)]
pub(super) async fn revalidated<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    facts: RequestFacts,
    outcome: &mut Outcome,
) -> Exchanged {
    let plan = client.cache.fill.take();
    let config = snapshot.cache_for(facts.choice.route, facts.choice.pool);
    let writing = HitWriting {
        framing: hit_framing(context, &facts),
        hsts: &client.hsts,
        cache_status: config.is_some_and(|config| config.cache_status),
    };
    let (asked, out) = (&client.cache.asked, &mut client.out);
    let Some(hit) = plan.and_then(|plan| cached::revalidated(*plan, asked, writing, out)) else {
        // A 304 that cannot be read as one: not for a client that asked no condition.
        let failure = Failure::BadResponse("a 304 that does not refresh the stored response");
        outcome.failed(failure, false);
        answer_error(client, failure, Some(&facts), snapshot, outcome).await;
        return Next::Close { linger: true }.into();
    };
    client.cache.stale = None;
    Box::pin(serve_hit(context, client, snapshot, facts, hit, outcome)).await
}

/// How a hit's head ends the connection, as a proxied response's would.
pub(super) fn hit_framing(context: &ProxyContext, facts: &RequestFacts) -> HitFraming {
    HitFraming {
        close: !facts.keep_alive || context.is_stopping(),
        http10_keep_alive: facts.minor_version == 0 && facts.keep_alive,
    }
}
