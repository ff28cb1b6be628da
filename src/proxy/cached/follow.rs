//! Followers: requests for an object another request is fetching, answered from that fetch
//! as it arrives — its head once the leader has it, its body piece by piece, then the rest from
//! the stored object — or sent to the server themselves when that cannot be.

use std::sync::Arc;

use super::variant_of;
use crate::cache::flight::{Flight, Role};
use crate::cache::head::{write_hit_head, HitBody, HitFraming};
use crate::cache::Entry;
use crate::http1::chunked::put_size_line;
use crate::http1::Method;
use crate::proxy::context::ProxyContext;
use crate::proxy::downstream::Downstream;
use crate::proxy::facts::RequestFacts;
use crate::proxy::header_rules;
use crate::proxy::outcome::Outcome;
use crate::proxy::{Client, Exchanged, Next};
use crate::stats::cache::CacheOutcome;
use crate::stats::traffic::Ending;
use crate::transport::deadline::timeout;
use crate::transport::Moment;
use crate::upstream::Snapshot;

/// What a follower reads of its flight next.
enum Piece {
    /// Bytes of the body after those it sent (copied into its chunk).
    Bytes,
    /// The body is whole in this stored object.
    Stored(Arc<Entry>),
    /// The leader failed: the answer cannot be finished.
    Abandoned,
}

/// The most a follower copies out of its flight at a time.
const FOLLOWER_CHUNK: usize = 64 * 1024;

/// Answers a request whose object another request is fetching, from that fetch as it arrives:
/// `Some` when it answered (or began to, and the connection must close), `None` when it is to go
/// to the server itself (the answer may not be stored, the leader failed before its head, or
/// `lock_timeout` passed first).
pub async fn follow<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    facts: RequestFacts,
    flight: Arc<Flight>,
    outcome: &mut Outcome,
) -> Option<Exchanged> {
    let config = snapshot.cache_for(facts.choice.route, facts.choice.pool)?;
    let waited = Moment::now();
    let mut flight = flight;
    let head = loop {
        let head = flight.wait_for(|state| match (&state.head, state.abandoned) {
            (Some(head), _) => Some(Ok(Arc::clone(head))),
            (None, true) => Some(Err(state.passed)),
            (None, false) => None,
        });
        let patience = config.lock_timeout.saturating_sub(waited.elapsed());
        match timeout(patience, head).await {
            Ok(Ok(head)) => break head,
            Ok(Err(true)) => {
                // The answer may not be stored: each goes to the server.
                flight.leave();
                client.cache.fill = None;
                return None;
            }
            Ok(Err(false)) => {
                // The leader failed before its answer's head (its client left, its server
                // failed): one follower takes its place, and the others follow that one.
                flight.leave();
                let plan = client.cache.fill.as_mut()?;
                match plan.store.flights.join(&plan.key) {
                    Role::Lead(leader) => {
                        plan.leader = Some(leader);
                        plan.ask(&mut client.out);
                        return None;
                    }
                    Role::Follow(next) => flight = next,
                }
            }
            Err(_) => {
                flight.leave();
                outcome.cache = Some(CacheOutcome::LockTimeout);
                return None;
            }
        }
    };
    if let Some(vary) = &head.vary {
        // `out` still holds this request's head as it would be forwarded.
        if variant_of(&client.out, &vary.names).as_deref() != Some(&vary.variant[..]) {
            flight.leave();
            return None;
        }
    }
    // Answered from the flight: nothing of this request's own is stored.
    client.cache.fill = None;
    outcome.pool = Some(facts.choice.pool);
    outcome.ending = Ending::Status(head.status);
    outcome.cache = Some(CacheOutcome::Collapsed);
    // A chunked answer's length is known only once it is whole: it goes on in chunks, or to
    // an HTTP/1.0 client until the connection closes.
    let chunked = head.length.is_none() && facts.minor_version == 1;
    let unframed = head.length.is_none() && !chunked;
    let framing = HitFraming {
        close: !facts.keep_alive || context.is_stopping() || unframed,
        http10_keep_alive: facts.minor_version == 0 && facts.keep_alive && !unframed,
    };
    let cache_status: &[u8] = match config.cache_status {
        true => b"Cache-Status: herdsman; fwd=miss; collapsed\r\n",
        false => b"",
    };
    let body = match head.length {
        Some(length) => HitBody::Length(length),
        None if chunked => HitBody::Chunked,
        None => HitBody::Unframed,
    };
    let with_body = facts.method == Method::Get;
    client.out.clear();
    let (hsts, out) = (&client.hsts, &mut client.out);
    write_hit_head(&head.head, 0, body, hsts, cache_status, framing, out);
    if snapshot.edits_heads {
        // As for a hit (`hit::serve_hit`): the rules apply to the answer, not what is stored.
        let _ = header_rules::edit_answer(client, snapshot, facts.choice.route, None);
    }
    let client_idle = snapshot.timeouts.client_idle;
    let sent_head = client
        .downstream
        .send(&client.out, Moment::now() + client_idle)
        .await;
    if !matches!(sent_head, Some(Ok(()))) {
        flight.leave();
        return Some(Next::Close { linger: true }.into());
    }
    outcome.response_started = true;
    let mut sent = 0u64;
    let mut chunk = Vec::new();
    let mut framed = Vec::new();
    while with_body && head.length.is_none_or(|length| sent < length) {
        let piece = flight
            .wait_for(|state| {
                if let Some(stored) = &state.stored {
                    return Some(Piece::Stored(Arc::clone(stored)));
                }
                if state.body.len() as u64 > sent {
                    let from = sent as usize;
                    let to = state.body.len().min(from + FOLLOWER_CHUNK);
                    chunk.clear();
                    chunk.extend_from_slice(&state.body[from..to]);
                    return Some(Piece::Bytes);
                }
                state.abandoned.then_some(Piece::Abandoned)
            })
            .await;
        let deadline = Moment::now() + client_idle;
        let written = match piece {
            Piece::Bytes => {
                let bytes = framed_as_read(&mut framed, &chunk, chunked, false);
                client.downstream.send(bytes, deadline).await
            }
            Piece::Stored(entry) => {
                let Entry::Object(object) = &*entry else {
                    break;
                };
                let rest = object.body.get(sent as usize..).unwrap_or_default();
                let bytes = framed_as_read(&mut framed, rest, chunked, true);
                let written = client.downstream.send(bytes, deadline).await;
                if matches!(written, Some(Ok(()))) {
                    sent += rest.len() as u64;
                }
                outcome.body_bytes = sent;
                flight.leave();
                let whole = sent == object.body.len() as u64 && !unframed;
                return Some(finished(written, whole, facts, context));
            }
            Piece::Abandoned => break,
        };
        if !matches!(written, Some(Ok(()))) {
            break;
        }
        sent += chunk.len() as u64;
    }
    flight.leave();
    outcome.body_bytes = sent;
    let whole = !with_body || head.length == Some(sent);
    Some(finished(Some(Ok(())), whole, facts, context))
}

/// The bytes of `data` as a follower's client reads them: as they are, or when `chunked` in a
/// chunk of their own (in `framed`), with the last chunk after them when `last`.
fn framed_as_read<'a>(
    framed: &'a mut Vec<u8>,
    data: &'a [u8],
    chunked: bool,
    last: bool,
) -> &'a [u8] {
    if !chunked {
        return data;
    }
    framed.clear();
    if !data.is_empty() {
        put_size_line(framed, data.len());
        framed.extend_from_slice(data);
        framed.extend_from_slice(b"\r\n");
    }
    if last {
        framed.extend_from_slice(b"0\r\n\r\n");
    }
    framed
}

/// How the connection goes on after an answer from the cache: kept when it all went and the
/// client keeps it.
fn finished(
    written: Option<std::io::Result<()>>,
    whole: bool,
    facts: RequestFacts,
    context: &ProxyContext,
) -> Exchanged {
    let keep = whole && facts.keep_alive && !context.is_stopping();
    match written {
        Some(Ok(())) if keep => Next::KeepAlive,
        _ => Next::Close { linger: true },
    }
    .into()
}
