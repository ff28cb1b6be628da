//! Answers herdsman writes itself, no pool or server involved: the redirect to HTTPS, an ACME
//! HTTP-01 token's key authorization, a rate limit's 429, a route's own redirect or fixed
//! response, and what the exchange keeps of such a request; and the error answer of a failed
//! exchange (its status page, or a gRPC status).

use crate::config::answers::RouteAnswer;
use crate::config::rate_limit::RedisSettings;
use crate::http1::error_response::{
    write_acme_http01_answer, write_error_response, write_grpc_error, write_https_redirect,
};
use crate::http1::{Body, Method, Request};
use crate::rate_limit::answer::write_too_many_requests;
use crate::rate_limit::{Asked, Refusal};
use crate::rules::route_answer::{write_fixed_response, write_redirect, AnswerFacts};
use crate::stats::rules::{Answered, Site};
use crate::stats::traffic::Ending;
use crate::transport::Moment;
use crate::upstream::choice::Choice;
use crate::upstream::Snapshot;

use super::client::scratch;
use super::context::ProxyContext;
use super::downstream::Downstream;
use super::facts::RequestFacts;
use super::failure::Failure;
use super::header_rules;
use super::outcome::Outcome;
use super::outcome::Rule;
use super::Client;

/// Whether the connection closes after an answer herdsman writes itself (the client asked to,
/// or a body it sent is left unread), and whether the answer is a head alone (HEAD).
fn answer_shape(request: &Request<'_, '_>) -> (bool, bool) {
    let close = !request.keep_alive || request.body != Body::None;
    (close, request.method == Method::Head)
}

/// A request on a listener with `redirect_https`: its 308 to the same host and target over HTTPS,
/// written into `out`; no pool or server is involved. The connection stays open for the next
/// request unless the request has a body (left unread) or asks to close.
pub(super) fn redirect_to_https(
    out: &mut Vec<u8>,
    snapshot: &Snapshot,
    listener: usize,
    request: &Request<'_, '_>,
    port: u16,
) -> Result<RequestFacts, Failure> {
    let Some(host) = request.host.filter(|host| !host.is_empty()) else {
        return Err(Failure::BadRequest("a redirect to HTTPS needs a Host"));
    };
    let (close, head_only) = answer_shape(request);
    let out = scratch(out);
    write_https_redirect(host, request.forwarded_target, port, head_only, close, out);
    Ok(answered_here(snapshot, listener, request, close, 308))
}

/// A request for an open ACME HTTP-01 token: its key authorization, written into `out`; no pool
/// or server is involved. The connection stays as after a redirect.
pub(super) fn answer_acme_http01(
    out: &mut Vec<u8>,
    snapshot: &Snapshot,
    listener: usize,
    request: &Request<'_, '_>,
    key_authorization: &str,
) -> RequestFacts {
    let (close, head_only) = answer_shape(request);
    write_acme_http01_answer(key_authorization, head_only, close, scratch(out));
    answered_here(snapshot, listener, request, close, 200)
}

/// A request the route `facts.route` answers itself (`[route.redirect]`, `[route.respond]`):
/// the answer, written into `out`, counted, and what is kept of the request. The connection
/// stays as after a redirect.
pub(super) fn answer_by_route(
    (context, out): (&ProxyContext, &mut Vec<u8>),
    snapshot: &Snapshot,
    listener: usize,
    request: &Request<'_, '_>,
    (answer, facts): (&RouteAnswer, &AnswerFacts<'_>),
) -> RequestFacts {
    let (close, head_only) = answer_shape(request);
    let out = scratch(out);
    let (rule, answered) = match answer {
        RouteAnswer::Redirect(redirect) => {
            write_redirect(redirect, request, facts, (head_only, close), out);
            (Rule::Redirect, Answered::Redirect)
        }
        RouteAnswer::Respond(fixed) => {
            write_fixed_response(fixed, (head_only, close), out);
            (Rule::Respond, Answered::Respond)
        }
    };
    let site = Site::Route(facts.route);
    snapshot.rule_counts.count(site, answered, context.index);
    let kept = answered_here(snapshot, listener, request, close, answer.status());
    RequestFacts {
        rule: Some(rule),
        choice: Choice {
            route: Some(facts.route),
            ..kept.choice
        },
        ..kept
    }
}

/// What is kept of a request herdsman answered itself with `status` (the answer is in `out`).
fn answered_here(
    snapshot: &Snapshot,
    listener: usize,
    request: &Request<'_, '_>,
    close: bool,
    status: u16,
) -> RequestFacts {
    let pool = snapshot.listener_pools.get(listener).copied().unwrap_or(0);
    RequestFacts {
        method: request.method,
        minor_version: request.minor_version,
        body: request.body,
        keep_alive: !close,
        expect_continue: false,
        continue_sent: false,
        upgrade: false,
        choice: Choice {
            pool,
            route: None,
            server: None,
            assign_cookie: false,
            pinned: false,
        },
        timeouts: snapshot.timeouts.exchange(),
        buffering: snapshot.route_buffering(None),
        grpc: false,
        secure: false,
        compress: None,
        answered_here: Some(status),
        rule: None,
    }
}

/// Counts the request `asked` about against the rate limits of its listener and route; when it
/// is over one, its 429 is written into `out` and what is kept of it returned (no pool or server
/// is involved; the connection stays as after a redirect). Out of line: a config without limits
/// never calls it, and its code kept inline cost such a config's requests some 100 instructions
/// each.
#[inline(never)]
pub(super) fn over_rate_limit(
    context: &ProxyContext,
    out: &mut Vec<u8>,
    snapshot: &Snapshot,
    asked: &Asked<'_>,
) -> Option<RequestFacts> {
    let limits = context.rate_limits();
    let refusal = limits.as_deref()?.check(asked)?;
    Some(too_many_requests(out, snapshot, asked, &refusal))
}

/// [`over_rate_limit`] with the counts in Redis (`[rate_limit] redis`), asked on this worker's
/// connection.
pub(super) async fn over_shared_limit(
    (context, redis): (&ProxyContext, RedisSettings),
    out: &mut Vec<u8>,
    snapshot: &Snapshot,
    asked: &Asked<'_>,
) -> Option<RequestFacts> {
    // The limits of this snapshot, held by their `Arc` (not the worker's cell) across the wait.
    let limits = context.rate_limits().clone()?;
    let link = (context.redis(), &redis);
    let refusal = limits.check_shared(link, asked).await?;
    Some(too_many_requests(out, snapshot, asked, &refusal))
}

/// The 429 for `refusal`, written into `out`, and what is kept of the request `asked` about.
fn too_many_requests(
    out: &mut Vec<u8>,
    snapshot: &Snapshot,
    asked: &Asked<'_>,
    refusal: &Refusal<'_>,
) -> RequestFacts {
    let (listener, request) = (asked.listener, asked.request);
    let (close, head_only) = answer_shape(request);
    write_too_many_requests(refusal, head_only, close, scratch(out));
    RequestFacts {
        rule: Some(Rule::RateLimit),
        ..answered_here(snapshot, listener, request, close, 429)
    }
}

/// Answers the client with the failure's status, if it has one. `method` is the request's, when
/// its head was understood.
pub(super) async fn answer_error<D: Downstream>(
    client: &mut Client<D>,
    failure: Failure,
    facts: Option<&RequestFacts>,
    snapshot: &Snapshot,
    outcome: &mut Outcome,
) {
    let Some(status) = failure.status() else {
        outcome.ending = Ending::Unanswered;
        return;
    };
    outcome.ending = Ending::Status(status);
    let out = scratch(&mut client.out);
    match facts {
        // A gRPC client reads a status, not a page.
        Some(facts) if facts.grpc => write_grpc_error(status, failure.detail(), out),
        _ => {
            let head_only = facts.is_some_and(|facts| facts.method == Method::Head);
            write_error_response(status, failure.detail(), head_only, out);
        }
    }
    if snapshot.edits_heads {
        header_rules::id_on_own_answer(client, snapshot);
    }
    let deadline = Moment::now() + snapshot.timeouts.client_idle;
    let _ = client.downstream.send(&client.out, deadline).await;
}
