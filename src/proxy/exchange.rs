//! One request/response exchange: read and check the request head, pick a server, send the
//! request (retrying once where that is safe), then hand over to `respond` for the response.

use std::sync::Arc;

use crate::transport::Moment;

use super::answered_here::{
    answer_acme_http01, answer_by_route, answer_error, over_rate_limit, over_shared_limit,
    redirect_to_https,
};
use super::attempt::{send_streaming, send_whole, Sending};
use super::background;
use super::cached::HitWriting;
use super::cached::{self, CacheStep, Lookup};
use super::client::scratch;
use super::compressed::compression;
use super::context::ProxyContext;
use super::downstream::Downstream;
use super::facts::RequestFacts;
use super::failure::Failure;
use super::header_rules;
use super::hit::{hit_framing, revalidated, serve_hit, stale_instead};
use super::outcome::Outcome;
use super::replay::{self, Attempt, Failover, KeptRequest, Replay, Retry};
use super::request_body::{body_at_hand, finish_kept_body, read_rest_of_body, BufferedBody};
use super::respond::{self, Answer, ResponseStart};
use super::{tunnel, Client, Exchanged, Next};
use crate::config::acme::AcmeBoard;
use crate::config::{ExchangeTimeouts, RouteBuffering};
use crate::http1::forward::write_request_head;
use crate::http1::forward::{client_ip, AddressText, Forwarded};
use crate::http1::head::read_as_http11;
use crate::http1::relay::BodyRelay;
use crate::http1::upgrade;
use crate::http1::{header_slots, parse_request, Body, HeadError, Method};
use crate::rate_limit::Asked;
use crate::rules;
use crate::rules::request_id::request_id_of;
use crate::rules::rewrite::rewritten_target;
use crate::rules::route_answer::AnswerFacts;
use crate::stats::cache::CacheOutcome;
use crate::stats::rules::{Answered, Site};
use crate::stats::traffic::Ending;
use crate::transport::deadline::timeout_at;
use crate::transport::{recycle, Stream};
use crate::upstream::choice::choose;
use crate::upstream::latency::{LatencyRules, Sample};
use crate::upstream::retry_budget::second_of;
use crate::upstream::snapshot::ActiveGuard;
use crate::upstream::{Pool, Server, Snapshot};

/// Room first taken for an access log's copy of a request head's logged parts (method, target,
/// Host, Referer, User-Agent): enough for most, from a free list of its own size.
const CAPTURE_INITIAL: usize = 1024;

/// Serves one request on `client`; returns whether the connection stays open, and when the
/// exchange ended (where the wait for the next request starts). Counts it, and logs it where
/// the listener keeps an access log.
pub async fn serve_one<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Arc<Snapshot>,
    listener: usize,
) -> (Next, Moment) {
    let mut outcome = Outcome::new();
    let next = match exchange(context, client, snapshot, listener, &mut outcome).await {
        Exchanged::Next(next) => next,
        Exchanged::Switched(server) => {
            return serve_tunnel(context, client, snapshot, listener, outcome, server).await
        }
    };
    let ended = Moment::now();
    if outcome.request {
        let took = ended.saturating_duration_since(outcome.started);
        context.record(snapshot, &outcome, took);
        context.log_access(snapshot, listener, client, &outcome, took);
    }
    (next, ended)
}

/// After a 101: counts the exchange as answered then (its duration is the handshake's, not the
/// tunnel's), runs the tunnel, and logs the line when it ends, with what went through it and
/// how it ended. The connection closes after.
#[cold]
#[inline(never)]
async fn serve_tunnel<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Arc<Snapshot>,
    listener: usize,
    mut outcome: Outcome,
    server: Stream,
) -> (Next, Moment) {
    context.record(snapshot, &outcome, outcome.started.elapsed());
    // Boxed: the tunnel's state would otherwise enlarge every exchange's future (and the
    // recycled block each request's lives in) for the rare request that upgrades.
    let idle = snapshot.timeouts.tunnel_idle;
    let tunnelled = Box::pin(tunnel::run(context, client, server, idle)).await;
    outcome.body_bytes += tunnelled.to_client;
    outcome.received += tunnelled.from_client;
    outcome.ended = tunnelled.ended;
    let ended = Moment::now();
    let took = ended.saturating_duration_since(outcome.started);
    context.log_access(snapshot, listener, client, &outcome, took);
    (Next::Close { linger: true }, ended)
}

/// The exchange itself; `outcome` is filled in as it goes.
async fn exchange<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Arc<Snapshot>,
    listener: usize,
    outcome: &mut Outcome,
) -> Exchanged {
    let facts = match read_request(context, client, snapshot, listener, outcome.started).await {
        Ok(Some(facts)) => facts,
        Ok(None) => {
            // The client closed (or reset) the connection: nothing more will come.
            outcome.request = false;
            return Next::Close { linger: false }.into();
        }
        Err(failure) => {
            report(client, failure, None);
            outcome.failed(failure, false);
            answer_error(client, failure, None, snapshot, outcome).await;
            return Next::Close { linger: true }.into();
        }
    };
    if let Some(hit) = client.cache.hit.take() {
        if let Some(refresh) = client.cache.refresh.take() {
            background::refresh(context, refresh, &client.downstream, listener);
        }
        return serve_hit(context, client, snapshot, facts, hit, outcome).await;
    }
    if client.cache.not_cached {
        client.cache.not_cached = false;
        let failure = Failure::NotCached;
        outcome.failed(failure, false);
        answer_error(client, failure, Some(&facts), snapshot, outcome).await;
        let keep = facts.keep_alive && !context.is_stopping();
        return if keep {
            Next::KeepAlive
        } else {
            Next::Close { linger: true }
        }
        .into();
    }
    if let Some(status) = facts.answered_here {
        // Answered by herdsman itself (a redirect to HTTPS, a rate limit's 429): the answer is
        // in `out`.
        outcome.ending = Ending::Status(status);
        outcome.rule = facts.rule;
        if snapshot.edits_heads {
            header_rules::id_on_own_answer(client, snapshot);
        }
        let deadline = Moment::now() + snapshot.timeouts.client_idle;
        let sent = client.downstream.send(&client.out, deadline).await;
        let body_unread = facts.body != Body::None;
        return match sent {
            Some(Ok(())) if facts.keep_alive && !body_unread => Next::KeepAlive,
            _ => Next::Close { linger: true },
        }
        .into();
    }
    if facts.secure {
        // The listener's HSTS line for this response (a reload may have changed it).
        let hsts = snapshot
            .listener_tls(listener)
            .map_or(&[][..], |tls| &tls.hsts_line);
        client.hsts.clear();
        client.hsts.extend_from_slice(hsts);
    }
    if let Some(flight) = client.cache.follow.take() {
        // Another request is fetching this object: answered from its fetch, or on to the
        // server when that cannot be.
        // Boxed, as the tunnel is: its waits would otherwise enlarge every exchange's future.
        let followed = Box::pin(cached::follow(
            context, client, snapshot, facts, flight, outcome,
        ))
        .await;
        if let Some(answered) = followed {
            return answered;
        }
    }
    if client
        .cache
        .fill
        .as_ref()
        .is_some_and(|plan| plan.reads_disk())
    {
        if let Some(config) = snapshot.cache_for(facts.choice.route, facts.choice.pool) {
            // Boxed, as following is: a rare wait kept out of every exchange's future.
            let framing = hit_framing(context, &facts);
            if let Some(hit) = Box::pin(cached::from_disk(client, config, framing)).await {
                return Box::pin(serve_hit(context, client, snapshot, facts, hit, outcome)).await;
            }
        }
    }
    outcome.pool = Some(facts.choice.pool);
    outcome.sticky = facts.choice.pinned || facts.choice.assign_cookie;
    let pool = &snapshot.pools[facts.choice.pool];
    let Some(chosen) = facts.choice.server else {
        report(client, Failure::NoServer, None);
        if let Some(served) = stale_instead(context, client, snapshot, facts, outcome).await {
            return served;
        }
        outcome.failed(Failure::NoServer, false);
        answer_error(client, Failure::NoServer, Some(&facts), snapshot, outcome).await;
        return Next::Close { linger: true }.into();
    };
    let mut facts = facts;
    // `[timeouts] request` counts from the request's first bytes.
    let deadline = facts.timeouts.request.map(|limit| outcome.started + limit);
    // The body first, while no server is involved: a client that sends it slowly holds
    // herdsman's memory, not a server's worker (`[buffering]`).
    // Most requests have no body, or all of it came with the head: no reading, and no future
    // for it (awaiting one on every request cost about 150 instructions, callgrind).
    let mut upload = BodyRelay::new(facts.body, false, snapshot.limits.max_body_bytes);
    let mut body = None;
    let read = match body_at_hand(client, &mut upload, facts, snapshot) {
        Ok(true) => {
            let buffered = &mut outcome.buffered;
            read_rest_of_body(context, client, &mut upload, &mut facts, snapshot, buffered)
                .await
                .map(|read| {
                    body = read;
                })
        }
        at_hand => at_hand.map(|_| ()),
    };
    outcome.received = upload.data_seen();
    if let Err(failure) = read {
        report(client, failure, None);
        outcome.failed(failure, true);
        answer_error(client, failure, Some(&facts), snapshot, outcome).await;
        return Next::Close { linger: true }.into();
    }
    let (server, slot) = match take_slot(context, pool, chosen, &mut facts, deadline).await {
        Ok(taken) => taken,
        Err(failure) => {
            report(client, failure, Some(&pool.servers[chosen]));
            if let Some(served) = stale_instead(context, client, snapshot, facts, outcome).await {
                return served;
            }
            outcome.failed(failure, false);
            answer_error(client, failure, Some(&facts), snapshot, outcome).await;
            return Next::Close { linger: true }.into();
        }
    };
    let sending = Sending {
        facts,
        deadline,
        began: Moment::now(),
    };
    let forwarded = forward(
        context,
        client,
        snapshot,
        (server, slot),
        sending,
        (&mut upload, body.as_ref()),
        outcome,
    )
    .await;
    outcome.received = upload.data_seen();
    match forwarded {
        Ok(next) => next,
        Err(failure) => {
            if !outcome.response_started {
                if let Some(served) = stale_instead(context, client, snapshot, facts, outcome).await
                {
                    return served;
                }
            }
            outcome.failed(failure, !upload.is_done());
            if !outcome.response_started {
                answer_error(client, failure, Some(&facts), snapshot, outcome).await;
                return Next::Close { linger: true }.into();
            }
            outcome.ending = Ending::Unanswered;
            // A client too slow for its answer loses what the kernel still holds for it too
            // (nginx's `reset_timedout_connection`): a FIN would wait behind megabytes.
            match failure {
                Failure::ReaderTooSlow | Failure::ClientStalled => Next::Reset,
                _ => Next::Close { linger: true },
            }
            .into()
        }
    }
}

/// A slot on the chosen server, or, when it is at its `max_connections`, on the least loaded
/// other server that may take the request; when every one is full, the first slot that frees
/// within the pool's `queue_timeout`. A request that names its server (cookie, test token) waits
/// for that one.
async fn take_slot<'s>(
    context: &ProxyContext,
    pool: &'s Pool,
    chosen: usize,
    facts: &mut RequestFacts,
    deadline: Option<Moment>,
) -> Result<(&'s Server, ActiveGuard<'s>), Failure> {
    if let Some(slot) = ActiveGuard::try_take(pool, chosen, context.index) {
        return Ok((&pool.servers[chosen], slot));
    }
    let pinned = facts.choice.pinned;
    let take = || {
        if pinned {
            return ActiveGuard::try_take(pool, chosen, context.index).map(|slot| (None, slot));
        }
        let other = pool
            .balancer
            .pick_other(&pool.servers, &mut context.rng.borrow_mut(), &[])?;
        ActiveGuard::try_take(pool, other, context.index).map(|slot| (Some(other), slot))
    };
    let patience = match deadline {
        Some(deadline) => pool
            .queue_timeout
            .min(deadline.saturating_duration_since(Moment::now())),
        None => pool.queue_timeout,
    };
    let (other, slot) = pool
        .queue
        .wait_for(patience, take)
        .await
        .ok_or(Failure::QueueTimeout)?;
    let Some(other) = other else {
        return Ok((&pool.servers[chosen], slot));
    };
    // Another server: the client is now on it, which a sticky pool says with its cookie.
    facts.choice.server = Some(other);
    facts.choice.assign_cookie = pool.sticky_cookie.is_some();
    Ok((&pool.servers[other], slot))
}

/// Reads the rest of a request head whose first bytes were received at `started`, and chooses
/// its pool and server. `Ok(None)`: the connection should close quietly (the client closed it or
/// reset it). On success the head to forward is in `client.out` and the head's bytes are
/// consumed from what was received.
async fn read_request<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    listener: usize,
    started: Moment,
) -> Result<Option<RequestFacts>, Failure> {
    let limits = snapshot.limits;
    let timeouts = snapshot.timeouts;
    let logged = snapshot.access_log(listener).is_some();
    let peer = client.peer();
    // Its TLS version and cipher, for a redirect's template (two words: no copy of the rest).
    let tls = client.downstream.tls().map(|tls| (tls.version, tls.cipher));
    let secure = tls.is_some();
    let stream = client.downstream.stream_id();
    client.request_log.forget();
    client.request_id.forget();
    let mut deadline = None;
    loop {
        if !client.downstream.received().is_empty() {
            let mut headers = header_slots();
            let received = client.downstream.received();
            let parsed = parse_request(received.data(), &mut headers, limits.max_header_bytes);
            let parsed = match parsed {
                // HTTP/1.2 and later minor versions read as HTTP/1.1: its digit is rewritten in
                // place, and the head parsed again.
                Err(HeadError::LaterMinorVersion { digit_at }) => {
                    read_as_http11(client.downstream.received().data_mut(), digit_at);
                    continue;
                }
                parsed => parsed.map_err(Failure::from_request_head)?,
            };
            if let Some(mut request) = parsed {
                #[cfg(feature = "fault-injection")]
                match request.target {
                    "/__herdsman/panic" => {
                        panic!("fault injection: a panic inside a connection task")
                    }
                    // The next connection this worker accepts panics its accept loop.
                    "/__herdsman/panic-accept" => context.panic_next_accept.set(true),
                    // The worker's event loop panics (its connections are lost with it).
                    "/__herdsman/panic-worker" => context.panic_loop.notify_one(),
                    // Blocks the whole worker thread, as a long computation or a page fault storm
                    // would: the intake benchmarks measure what new connections suffer meanwhile.
                    "/__herdsman/stall" => {
                        std::thread::sleep(std::time::Duration::from_millis(500))
                    }
                    _ => {}
                }
                if logged {
                    // Copied now: the head leaves what was received before the response comes.
                    let storage = || recycle::take_bytes(CAPTURE_INITIAL);
                    client.request_log.capture(&request, storage);
                    client.request_log.came_on_stream(stream);
                }
                // One address per request, before anything answers it: the peer's, or the one a
                // trusted proxy names. Formatted for the log only when it changes.
                let real_ip = snapshot.real_ip.as_ref();
                let address = rules::client_address::client_of(real_ip, client_ip(peer), &request);
                if address != client.address {
                    client.address = address;
                    client.address_text = AddressText::new(address);
                }
                // Before anything answers it, so that every line of the access log has it.
                if let Some(settings) = &snapshot.request_id {
                    let ids = &context.request_ids;
                    client.request_id = request_id_of(settings, client_ip(peer), &request, ids);
                }
                if let Some(access) = snapshot.listener_access(listener) {
                    if !access.admits(address) {
                        let site = Site::Listener(listener);
                        snapshot
                            .rule_counts
                            .count(site, Answered::Deny, context.index);
                        return Err(Failure::denied(access.refuse));
                    }
                }
                if request.method == Method::Connect {
                    return Err(Failure::NotImplemented("CONNECT is not supported"));
                }
                // Before the redirect: the CA asks over cleartext HTTP, and follows no redirect
                // to a port it did not choose.
                if let Some(answer) = AcmeBoard::global().http01_answer(request.target) {
                    let out = &mut client.out;
                    let facts = answer_acme_http01(out, snapshot, listener, &request, &answer);
                    let head_len = request.head_len;
                    client.downstream.received().consume(head_len);
                    return Ok(Some(facts));
                }
                if let Some(port) = snapshot.redirect_https(listener) {
                    let out = &mut client.out;
                    let facts = redirect_to_https(out, snapshot, listener, &request, port)?;
                    let head_len = request.head_len;
                    client.downstream.received().consume(head_len);
                    return Ok(Some(facts));
                }
                if let Body::Length(length) = request.body {
                    if limits.max_body_bytes > 0 && length > limits.max_body_bytes {
                        return Err(Failure::BodyTooLarge);
                    }
                }
                let choice = choose(
                    snapshot,
                    listener,
                    &request,
                    address,
                    started,
                    &mut context.rng.borrow_mut(),
                    |condition| rules::condition::holds(condition, &request, address),
                );
                let route_access = choice
                    .route
                    .and_then(|route| snapshot.routes[route].access.as_deref());
                if let Some(access) = route_access {
                    if !access.admits(address) {
                        // `route_access` is only `Some` for a route.
                        let site = Site::Route(choice.route.unwrap_or_default());
                        snapshot
                            .rule_counts
                            .count(site, Answered::Deny, context.index);
                        return Err(Failure::denied(access.refuse));
                    }
                }
                // A background refresh of a cached answer is herdsman's own request, not the
                // client's again: the client's request that started it was counted.
                if context.rate_limited() && client.cache.refreshing.is_none() {
                    let asked = Asked {
                        listener,
                        route: choice.route,
                        request: &request,
                        client: address,
                        now: started,
                        worker: context.index,
                    };
                    let out = &mut client.out;
                    let over = match snapshot.rate_limit_redis {
                        None => over_rate_limit(context, out, snapshot, &asked),
                        // Boxed: the wait for Redis would otherwise enlarge every exchange's
                        // future. One allocation a request, beside a round trip to Redis of
                        // 15-25 us even on loopback (redis-benchmark, one client, p50 here).
                        Some(redis) => {
                            let shared = (context, redis);
                            Box::pin(over_shared_limit(shared, out, snapshot, &asked)).await
                        }
                    };
                    if let Some(facts) = over {
                        let head_len = request.head_len;
                        client.downstream.received().consume(head_len);
                        return Ok(Some(facts));
                    }
                }
                let route = choice.route.map(|index| (index, &snapshot.routes[index]));
                if let Some((index, answer)) =
                    route.and_then(|(index, route)| Some((index, route.answer.as_deref()?)))
                {
                    let facts = AnswerFacts {
                        tls,
                        client: client.address_text.as_bytes(),
                        client_port: peer.port(),
                        request_id: client.request_id.as_bytes(),
                        route: index,
                        route_prefix: snapshot.routes[index].path_prefix.as_deref(),
                    };
                    let out = (context, &mut client.out);
                    let facts =
                        answer_by_route(out, snapshot, listener, &request, (answer, &facts));
                    let head_len = request.head_len;
                    client.downstream.received().consume(head_len);
                    return Ok(Some(facts));
                }
                // One allocation of the target's size per request a rewrite applies to, only
                // on routes with `[route.rewrite]`: the server gets it, the access log (captured
                // above) keeps the client's.
                let rewritten = route.and_then(|(_, route)| {
                    let rewrite = route.rewrite.as_deref()?;
                    let prefix = route.path_prefix.as_deref();
                    Some(rewritten_target(rewrite, request.forwarded_target, prefix))
                });
                if let Some(target) = &rewritten {
                    request.forwarded_target = target.as_str();
                }
                let upgrades = snapshot.upgrade_protocols(listener);
                let grpc = request.grpc();
                let (timeouts, buffering) = grpc_bounds(
                    grpc,
                    snapshot.exchange_timeouts(choice.route),
                    snapshot.route_buffering(choice.route),
                );
                let upgrade = upgrade::forwards(upgrades, &request);
                let compress = match snapshot.compression_for(choice.route) {
                    Some(rules) => {
                        let streams = (grpc.is_some(), upgrade);
                        compression(context, snapshot, rules, &request, &choice, streams)
                    }
                    None => None,
                };
                let facts = RequestFacts {
                    method: request.method,
                    minor_version: request.minor_version,
                    body: request.body,
                    keep_alive: request.keep_alive,
                    expect_continue: request.expect_continue,
                    continue_sent: false,
                    upgrade,
                    choice,
                    timeouts,
                    buffering,
                    grpc: grpc.is_some(),
                    secure,
                    compress,
                    answered_here: None,
                    rule: None,
                };
                if snapshot.edits_heads {
                    // Before the cache: a hit's answer may render them too.
                    let route = facts.choice.route;
                    let text = &mut client.request_text;
                    header_rules::keep_request_text(text, snapshot, route, &request);
                }
                // The cache first: a hit forwards no head.
                let cache = snapshot.cache_for(facts.choice.route, facts.choice.pool);
                let mut lookup = None;
                if let Some(config) = cache {
                    let hsts = snapshot
                        .listener_tls(listener)
                        .filter(|_| secure)
                        .map_or(&[][..], |tls| &tls.hsts_line);
                    let writing = HitWriting {
                        framing: hit_framing(context, &facts),
                        hsts,
                        cache_status: config.cache_status,
                    };
                    let refreshing = client.cache.refreshing.take();
                    let found = cached::look_up(
                        context.cache(),
                        config,
                        &snapshot.pools[facts.choice.pool].name,
                        secure,
                        &request,
                        writing,
                        refreshing,
                        scratch(&mut client.out),
                    );
                    match found {
                        Lookup::Decided(step) if step.hit.is_some() => {
                            client.cache = step;
                            if let Some(refresh) = &mut client.cache.refresh {
                                // Sent again by the background fetch, as the client sent it.
                                let head = &received.data()[..request.head_len];
                                refresh.request_head.extend_from_slice(head);
                            }
                            let head_len = request.head_len;
                            client.downstream.received().consume(head_len);
                            return Ok(Some(facts));
                        }
                        found => lookup = Some(found),
                    }
                } else if client.cache.fill.is_some()
                    || client.cache.stale.is_some()
                    || client.cache.invalidate.is_some()
                {
                    // Left by an exchange that failed before its answer.
                    client.cache = CacheStep::default();
                }
                write_request_head(
                    &request,
                    upgrades,
                    &client.forwarded_for,
                    Forwarded {
                        secure: facts.secure,
                        client_certificate: &client.client_certificate,
                        trailers: facts.grpc,
                    },
                    limits.max_header_bytes,
                    scratch(&mut client.out),
                )
                .map_err(Failure::from_request_head)?;
                if let (Some(lookup), Some(config)) = (lookup, cache) {
                    let out = &mut client.out;
                    client.cache = match lookup {
                        Lookup::Missed(missed) => {
                            cached::after_miss(missed, config, request.headers, out)
                        }
                        Lookup::Decided(step) => {
                            cached::strip_unkeyed(config, request.headers, out);
                            step
                        }
                    };
                }
                let head_len = request.head_len;
                client.downstream.received().consume(head_len);
                if snapshot.edits_heads {
                    header_rules::edit_request(client, snapshot, facts.choice.route)?;
                }
                return Ok(Some(facts));
            }
        }
        // The clock for a head starts once part of it is here (the connection's task read the
        // first bytes before this exchange began).
        let deadline = *deadline.get_or_insert_with(|| Moment::now() + timeouts.client_header);
        let read = timeout_at(deadline, client.downstream.receive(limits.max_header_bytes)).await;
        match read {
            Err(_elapsed) => return Err(Failure::HeadTimeout),
            Ok(Ok(n)) if n > 0 => {}
            // end of stream or a reset: nothing to answer
            _ => return Ok(None),
        }
    }
}

/// Sends the request to `server` and relays the response, sending it again where the replay
/// rules allow (`replay.rs`). Each failure is logged and counted for passive checks here.
async fn forward<'s, D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &'s Snapshot,
    (first, first_slot): (&'s Server, ActiveGuard<'s>),
    mut sending: Sending,
    (upload, body): (&mut BodyRelay, Option<&BufferedBody<'_>>),
    outcome: &mut Outcome,
) -> Result<Exchanged, Failure> {
    let pool = &snapshot.pools[sending.facts.choice.pool];
    let first_sent = sending.began;
    // The request is in `out` now, as far as it has come: the wait for the server holds no
    // buffer of the client's (the rest of a body, if any, is read into a new one).
    client.downstream.received().release_if_empty();
    let mut whole = upload.is_done();
    // A body that fits memory streams as it came fast, kept behind the head as it goes
    // (`read_rest_of_body`): an attempt that fails may send it again, whole, as a buffered one.
    let keeps = !whole && body.is_some();
    let mut kept_body = KeptRequest::empty();
    let idempotent = sending.facts.method.is_idempotent();
    // A response head takes the request's place in `out`; a pool that retries on a status keeps
    // a copy to send again (a block from the free list, only in such pools).
    let mut kept_request =
        replay::may_retry_on_status(pool, whole, idempotent).then(|| KeptRequest::of(&client.out));
    pool.retry_budget
        .count_request(context.index, second_of(outcome.started));
    // Made at the first failure: most requests never need it.
    let first_choice = sending.facts.choice.server;
    let mut retry: Option<Retry> = None;
    let mut server = first;
    let mut slot = Some(first_slot);
    let mut fresh_only = false;
    let mut tried = false;
    loop {
        if keeps && tried && !whole {
            // Sent again: the rest of the kept body first, then all of it at once.
            let client_idle = snapshot.timeouts.client_idle;
            finish_kept_body(client, upload, client_idle).await?;
            whole = true;
        }
        tried = true;
        let held_slot = slot.take();
        let facts = sending.facts;
        outcome.server = facts.choice.server;
        outcome.sticky = facts.choice.pinned || facts.choice.assign_cookie;
        let sent = if whole {
            send_whole(
                context, client, snapshot, server, &sending, fresh_only, body,
            )
            .await
        } else {
            let kept = keeps.then(|| kept_body.bytes_mut());
            send_streaming(context, client, snapshot, server, &sending, upload, kept).await
        };
        let failed = match sent {
            Ok((upstream, start, upload_finished)) => {
                outcome.upstream = Some(start.arrived.saturating_duration_since(first_sent));
                outcome.ending = Ending::Status(start.status);
                if let Some(rules) = pool.balancer.latency() {
                    answered(rules, server, sending.began, &start, !whole);
                }
                if pool.passive.count_5xx && start.status >= 500 {
                    context.server_failed(server, &pool.passive);
                } else {
                    server.counters.succeeded();
                }
                if keeps && upload_finished && kept_request.is_none() {
                    // All of a kept body went: it may be asked of another server like a buffered
                    // one, no copy made.
                    kept_request = replay::may_retry_on_status(pool, true, idempotent)
                        .then(|| std::mem::replace(&mut kept_body, KeptRequest::empty()));
                }
                if let Some(kept) = kept_request
                    .as_ref()
                    .filter(|_| pool.retry_on.has_status(start.status))
                {
                    let again = retry
                        .get_or_insert_with(|| Retry::new(first_choice))
                        .next_server(context, pool, sending.deadline, Failover::Retry);
                    if let Some((next, next_slot)) = again {
                        tracing::info!(pool = %pool.name, from = %server.name, to = %pool.servers[next].name, status = start.status, "retrying on another server after its answer");
                        // The answer is dropped with its connection (reset: its body was not read).
                        drop(upstream);
                        let unread = client.server_buffer.len();
                        client.server_buffer.consume(unread);
                        kept.restore(&mut client.out);
                        (server, slot) = (&pool.servers[next], Some(next_slot));
                        sending.moved_to(next, pool);
                        continue;
                    }
                }
                drop(kept_request.take());
                // Its answer came: a kept body is not sent again, and its memory goes back now
                // rather than after the response.
                drop(std::mem::replace(&mut kept_body, KeptRequest::empty()));
                // A gRPC call is full duplex: the rest of its request goes on beside its
                // response (an HTTP/1.1 request answered early ends with the answer instead).
                let duplex_upload = (!upload_finished && facts.grpc).then_some(&mut *upload);
                if start.status >= 500 && client.cache.stale.is_some() {
                    // A server error, and a stale answer the request may get instead.
                    let facts = sending.facts;
                    if let Some(served) =
                        stale_instead(context, client, snapshot, facts, outcome).await
                    {
                        // Its answer is dropped with its connection (reset: its body unread).
                        drop(upstream);
                        let unread = client.server_buffer.len();
                        client.server_buffer.consume(unread);
                        return Ok(served);
                    }
                }
                // The answer goes to the client: a stale stored one is not needed.
                client.cache.stale = None;
                if let Some((store, key)) = client.cache.invalidate.take() {
                    // An unsafe request answered without an error: what was stored for its
                    // target is no longer what the server would answer.
                    if start.status < 400 {
                        cached::invalidate(&store, &key, &client.out);
                    }
                }
                let revalidating = client.cache.fill.as_ref();
                if revalidating.is_some_and(|plan| plan.is_answered_by(start.status)) {
                    // The stale object is still current: refreshed, it answers the client.
                    let answer = Answer {
                        server,
                        start,
                        upstream,
                        upload_finished,
                        duplex_upload: None,
                    };
                    respond::release_bodiless(context, answer, &client.server_buffer);
                    let facts = sending.facts;
                    return Ok(revalidated(context, client, snapshot, facts, outcome).await);
                }
                if let Some(config) = snapshot.cache_for(facts.choice.route, facts.choice.pool) {
                    if let Some(plan) = client.cache.fill.take() {
                        let (filling, did) = (*plan).start(&client.out, start.body_to_client());
                        client.cache.filling = filling;
                        outcome.cache = Some(did);
                    } else if outcome.cache.is_none() {
                        // Not for the cache: another method, a range, a method override,
                        // no-store.
                        outcome.cache = Some(CacheOutcome::Pass);
                    }
                    if config.cache_status {
                        let did = outcome.cache.unwrap_or(CacheOutcome::Pass);
                        cached::say_forwarded(did, start.status, &mut client.out);
                    }
                }
                if snapshot.edits_heads {
                    let (route, name) = (facts.choice.route, Some(server.name.as_str()));
                    header_rules::edit_answer(client, snapshot, route, name)?;
                }
                let answer = Answer {
                    server,
                    start,
                    upstream,
                    upload_finished,
                    duplex_upload,
                };
                let relayed = respond::respond(context, client, snapshot, answer, outcome).await;
                if let Err(failure) = relayed {
                    report(client, failure, Some(server));
                }
                return relayed;
            }
            Err(failed) => failed,
        };
        if !kept_body.bytes_mut().is_empty() {
            // The request as far as it came goes back to `out`, for the next attempt.
            client.out.clear();
            std::mem::swap(&mut client.out, kept_body.bytes_mut());
        }
        let attempt = Attempt {
            reused: failed.reused,
            whole: whole || keeps,
            idempotent,
            response_began: !client.server_buffer.is_empty(),
        };
        let failure = failed.failure;
        let took_none = || {
            failed
                .connection
                .as_ref()
                .is_some_and(|(upstream, written)| upstream.took_none_of(*written))
        };
        let replay = Replay::of(failure, attempt, took_none);
        if replay == Replay::SameServer {
            tracing::debug!(server = %server.name, "reused connection was closed; sending again on a fresh one");
            fresh_only = true;
            slot = held_slot;
            continue;
        }
        fresh_only = false;
        if failure.is_server_unreachable() {
            context.server_failed(server, &pool.passive);
        }
        if let Some(rules) = pool.balancer.latency() {
            if failure.is_server_failure() {
                let now = Moment::now();
                let took = now.saturating_duration_since(sending.began);
                server
                    .counters
                    .latency
                    .record(rules, Sample::Error(took), now);
            }
        }
        if replay == Replay::Elsewhere(Failover::Refused) {
            // The health checker takes the refusing server out of rotation until it listens
            // again.
            context.server_refused(server);
            if let Some((next, next_slot)) = retry
                .get_or_insert_with(|| Retry::new(first_choice))
                .next_server(context, pool, sending.deadline, Failover::Refused)
            {
                tracing::debug!(pool = %pool.name, from = %server.name, to = %pool.servers[next].name, "connection refused: on to another server");
                (server, slot) = (&pool.servers[next], Some(next_slot));
                sending.moved_to(next, pool);
                continue;
            }
        }
        // Logged once it is not a refusal made good on another server (the health checker
        // says once that the server refuses; a warning per request would say it thousands of
        // times a second under load).
        report(client, failure, Some(server));
        let listed = failure
            .retry_condition()
            .is_some_and(|condition| pool.retry_on.has(condition));
        if !(listed && matches!(replay, Replay::Elsewhere(_))) {
            return Err(failure);
        }
        let Some((next, next_slot)) = retry
            .get_or_insert_with(|| Retry::new(first_choice))
            .next_server(context, pool, sending.deadline, Failover::Retry)
        else {
            return Err(failure);
        };
        tracing::info!(pool = %pool.name, from = %server.name, to = %pool.servers[next].name, "retrying on another server");
        (server, slot) = (&pool.servers[next], Some(next_slot));
        sending.moved_to(next, pool);
    }
}

/// What a server's answer tells a peak-ewma pool of its latency: the time from `began` (the
/// attempt's start, connecting included) to its response head, or for a 5xx an error. An answer
/// to a request whose body `streamed` is not timed: that time is the client's upload as much as
/// the server's. No clock is read: the head's arrival was.
#[inline]
fn answered(
    rules: LatencyRules,
    server: &Server,
    began: Moment,
    start: &ResponseStart,
    streamed: bool,
) {
    let took = start.arrived.saturating_duration_since(began);
    let sample = match start.status {
        500.. => Sample::Error(took),
        _ if streamed => return,
        _ => Sample::Answer(took),
    };
    server.counters.latency.record(rules, sample, start.arrived);
}

/// The timeouts and buffering of a request that may be a gRPC call: a call is never buffered
/// either way (a streaming call's messages go one by one, and a bidirectional one would wait on
/// itself), and its `grpc-timeout` bounds it as `[timeouts] request` does, the shorter winning.
fn grpc_bounds(
    grpc: Option<crate::http1::GrpcCall>,
    timeouts: ExchangeTimeouts,
    buffering: RouteBuffering,
) -> (ExchangeTimeouts, RouteBuffering) {
    let Some(call) = grpc else {
        return (timeouts, buffering);
    };
    let request = match (timeouts.request, call.timeout) {
        (Some(limit), Some(deadline)) => Some(limit.min(deadline)),
        (limit, deadline) => limit.or(deadline),
    };
    let unbuffered = RouteBuffering {
        request: false,
        response: false,
    };
    (
        ExchangeTimeouts {
            request,
            ..timeouts
        },
        unbuffered,
    )
}

/// Logs a failure once, with its cause: server-side ones as warnings (the operator's concern),
/// client-side ones at info, vanished clients at debug.
fn report<D: Downstream>(client: &Client<D>, failure: Failure, server: Option<&Server>) {
    let server = server.map(|s| s.name.as_str()).unwrap_or("-");
    let status = failure.status().unwrap_or(0);
    match failure {
        Failure::ClientGone => {
            tracing::debug!(client = %client.peer(), server, cause = ?failure, "client went away")
        }
        _ if failure.is_client_side() => {
            tracing::info!(client = %client.peer(), server, status, cause = ?failure, "{}", failure.detail())
        }
        _ => {
            tracing::warn!(client = %client.peer(), server, status, cause = ?failure, "{}", failure.detail())
        }
    }
}
