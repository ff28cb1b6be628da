//! The exchange's side of the cache (`crate::cache`): a request to a pool with `[pool.cache]`
//! is looked up while its head is at hand; a fresh stored response answers it without a server
//! (`Hit`); otherwise it goes to the server, and the answer is stored as it streams to the
//! client when RFC 9111 allows (`fill.rs`: `FillPlan` becomes `Filling` once the head says so);
//! a miss on an object another request is fetching follows that fetch (`follow.rs`).

use std::rc::Rc;
use std::sync::Arc;

use crate::cache::fields::{read_request, read_response, RequestFields};
use crate::cache::flight::{Flight, FlightHead, FlightVary, Role};
use crate::cache::freshness::{initial_age, storable, unix_now_ms, Verdict};
use crate::cache::head::{remove_fields, write_hit_head, HitBody, HitFraming};
use crate::cache::key::{with_target, write_field, write_primary, write_variant};
use crate::cache::range::{requested_part, Part};
use crate::cache::validate::{has_validators, updated_head};
use crate::cache::{Entry, Freshness, Object, Store};
use crate::config::PoolCache;
use crate::http1::{header_slots, parse_request, parse_response, Body, Method, Request};
use crate::stats::cache::CacheOutcome;
use crate::transport::Moment;

use super::downstream::Downstream;
use super::Client;

/// The process's store as a worker holds it: in an `Rc`, so that a request clones a count of
/// its own thread's rather than the `Arc`'s, which every worker's requests would bounce.
#[allow(clippy::redundant_allocation)]
pub type WorkerStore = Rc<Arc<Store>>;

mod fill;
mod follow;

pub use fill::{FillPlan, Filling, Tee};
pub use follow::follow;

/// What the cache does for the current request.
#[derive(Default)]
pub struct CacheStep {
    /// Answer with this stored response (its head already in `out`).
    pub hit: Option<Hit>,
    /// On the way to the server: store its answer if it may be stored.
    pub fill: Option<Box<FillPlan>>,
    /// The answer is being stored as it goes to the client.
    pub filling: Option<Box<Filling>>,
    /// A stored answer too stale to serve, which may still answer if the server fails
    /// (`stale-if-error`, the pool's `grace`).
    pub stale: Option<Arc<Entry>>,
    /// Another request is fetching this object: wait for its answer.
    pub follow: Option<Arc<Flight>>,
    /// An unsafe request (POST, PUT, DELETE…): the stored answers for its target go once the
    /// server answers it without an error (RFC 9111 §4.4).
    pub invalidate: Option<(WorkerStore, Vec<u8>)>,
    /// A stale answer served at once (`stale-while-revalidate`, `grace`): the fetch that
    /// refreshes it, to run in the background (`background.rs`), leading its key's flight.
    pub refresh: Option<Refresh>,
    /// This exchange is such a background fetch: its plan, made by the request that served
    /// the stale answer.
    pub refreshing: Option<Box<FillPlan>>,
    /// What the request asks of a stored answer, kept for one made after the server answered
    /// (a 304 that refreshed the object, a stale answer instead of an error).
    pub asked: Asked,
    /// `only-if-cached`, and the cache holds nothing the request may get: 504.
    pub not_cached: bool,
}

/// A background refresh: its plan, and the client's request head it sends again.
pub struct Refresh {
    pub plan: Box<FillPlan>,
    pub request_head: Vec<u8>,
}

/// A request answered from the cache.
pub struct Hit {
    pub object: Arc<Entry>,
    /// The part of the stored body that goes (empty for HEAD, a 304, a 416).
    body: std::ops::Range<usize>,
    /// The status the client gets.
    pub status: u16,
    /// What the cache did, for the log and the counters.
    pub outcome: CacheOutcome,
}

impl Hit {
    /// The body that goes.
    pub fn body(&self) -> &[u8] {
        match &*self.object {
            Entry::Object(object) => &object.body[self.body.clone()],
            Entry::Variants { .. } => &[],
        }
    }
}

/// What a request asks of a stored answer beyond its key: the body or only the head, its own
/// conditions, a range.
#[derive(Debug, Clone, Copy, Default)]
pub struct AskedOf<'a> {
    pub head_only: bool,
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<u64>,
    pub range: Option<&'a [u8]>,
    pub if_range: Option<&'a [u8]>,
}

/// [`AskedOf`], owned: kept past the request head (copies only what the request carried).
#[derive(Debug, Clone, Default)]
pub struct Asked {
    head_only: bool,
    if_none_match: Option<Box<[u8]>>,
    if_modified_since: Option<u64>,
    range: Option<Box<[u8]>>,
    if_range: Option<Box<[u8]>>,
}

impl Asked {
    fn of(asked: AskedOf<'_>) -> Asked {
        Asked {
            head_only: asked.head_only,
            if_none_match: asked.if_none_match.map(Box::from),
            if_modified_since: asked.if_modified_since,
            range: asked.range.map(Box::from),
            if_range: asked.if_range.map(Box::from),
        }
    }

    fn view(&self) -> AskedOf<'_> {
        AskedOf {
            head_only: self.head_only,
            if_none_match: self.if_none_match.as_deref(),
            if_modified_since: self.if_modified_since,
            range: self.range.as_deref(),
            if_range: self.if_range.as_deref(),
        }
    }
}

/// How a hit's head is written: the connection's framing, herdsman's HSTS line, and whether
/// the pool sends `Cache-Status`.
#[derive(Clone, Copy)]
pub struct HitWriting<'a> {
    pub framing: HitFraming,
    pub hsts: &'a [u8],
    pub cache_status: bool,
}

/// What the lookup found, before the request head is forwarded.
pub enum Lookup<'r> {
    /// The cache's step is decided: a hit (its head in `out`: no request head is forwarded),
    /// a request not for the cache, an invalidation.
    Decided(CacheStep),
    /// A miss that may be filled: decided once the forwarded head is written
    /// ([`after_miss`]).
    Missed(Missed<'r>),
}

/// A miss as the lookup left it.
pub struct Missed<'r> {
    store: WorkerStore,
    key: Vec<u8>,
    primary_len: usize,
    fields: RequestFields<'r>,
    asked: AskedOf<'r>,
    stale: Option<Arc<Entry>>,
    validating: Option<Arc<Entry>>,
    head_only: bool,
    /// A background refresh's plan, made by the request that served the stale answer.
    refreshing: Option<Box<FillPlan>>,
}

/// Looks `request` (routed to a pool or route with `config`) up, before its head is forwarded:
/// a hit's head is written into `out` at once. `refreshing`: the request is a background
/// refresh with this plan.
#[allow(clippy::too_many_arguments)]
pub fn look_up<'r>(
    store: Option<WorkerStore>,
    config: &PoolCache,
    pool: &str,
    secure: bool,
    request: &Request<'_, 'r>,
    writing: HitWriting<'_>,
    refreshing: Option<Box<FillPlan>>,
    out: &mut Vec<u8>,
) -> Lookup<'r> {
    let decided = Lookup::Decided;
    let Some(store) = store else {
        return decided(CacheStep::default());
    };
    let fields = read_request(request.headers);
    let missed = |store, key, primary_len, fields, refreshing| {
        Lookup::Missed(Missed {
            store,
            key,
            primary_len,
            fields,
            asked: AskedOf::default(),
            stale: None,
            validating: None,
            head_only: false,
            refreshing,
        })
    };
    if refreshing.is_some() {
        return missed(store, Vec::new(), 0, fields, refreshing);
    }
    let mut key = Vec::with_capacity(128);
    write_primary(
        &mut key,
        pool,
        secure,
        request.host.unwrap_or_default(),
        request.forwarded_target.as_bytes(),
    );
    for name in &config.key_headers {
        let values = values_of(request.headers, name.as_bytes());
        write_field(&mut key, name.as_bytes(), &values);
    }
    for name in &config.key_cookies {
        let values = cookie_values(request.headers, name.as_bytes());
        key.extend_from_slice(b"cookie ");
        write_field(&mut key, name.as_bytes(), &values);
    }
    let safe = matches!(
        request.method,
        Method::Get | Method::Head | Method::Options | Method::Trace
    );
    if !safe {
        return decided(CacheStep {
            invalidate: Some((store, key)),
            ..CacheStep::default()
        });
    }
    let cacheable_method = matches!(request.method, Method::Get | Method::Head);
    if !cacheable_method || request.body != Body::None || request.upgrade {
        return decided(CacheStep::default());
    }
    if fields.method_override {
        return decided(CacheStep::default());
    }
    let asked = AskedOf {
        head_only: request.method == Method::Head,
        if_none_match: fields.if_none_match,
        if_modified_since: fields.if_modified_since,
        range: fields.range,
        if_range: fields.if_range,
    };
    let now = Moment::now();
    let primary_len = key.len();
    let mut found = store.get(&key);
    if let Some(Entry::Variants { names, .. }) = found.as_deref() {
        let names = names.clone();
        write_variant(&mut key, &names, |name| values_of(request.headers, name));
        found = store.get(&key);
    }
    let mut stale = None;
    let mut validating = None;
    if let Some(entry) = found {
        if let Entry::Object(object) = &*entry {
            let age = object.age(now);
            let grace = config.grace.as_secs();
            match object.freshness.judge(age, &fields.control, grace) {
                Verdict::Fresh => {
                    let hit = answer(&entry, asked, now, CacheOutcome::Hit, writing, out);
                    return decided(CacheStep {
                        hit: Some(hit),
                        ..CacheStep::default()
                    });
                }
                Verdict::StaleServe { refresh } => {
                    let hit = answer(&entry, asked, now, CacheOutcome::Stale, writing, out);
                    // One request refreshes it in the background; the others, and this one,
                    // are answered stale at once.
                    let refresh = (refresh && request.method == Method::Get)
                        .then(|| match store.flights.join(&key) {
                            Role::Lead(leader) => Some(leader),
                            Role::Follow(flight) => {
                                flight.leave();
                                None
                            }
                        })
                        .flatten()
                        .map(|leader| {
                            let mut plan =
                                FillPlan::new(Rc::clone(&store), key, primary_len, &fields, config);
                            plan.leader = Some(leader);
                            plan.validating = has_validators(object).then(|| Arc::clone(&entry));
                            Refresh {
                                plan,
                                request_head: Vec::new(),
                            }
                        });
                    return decided(CacheStep {
                        hit: Some(hit),
                        refresh,
                        ..CacheStep::default()
                    });
                }
                Verdict::Validate => {}
            }
            if has_validators(object) && request.method == Method::Get {
                validating = Some(Arc::clone(&entry));
            }
        }
        stale = Some(entry);
    }
    if fields.control.only_if_cached {
        return decided(CacheStep {
            not_cached: true,
            ..CacheStep::default()
        });
    }
    Lookup::Missed(Missed {
        store,
        key,
        primary_len,
        fields,
        asked,
        stale,
        validating,
        head_only: request.method != Method::Get,
        refreshing: None,
    })
}

/// The cache's step for a miss, once its head as forwarded is in `out`: the poisoning fields
/// the pool neither keys nor forwards are taken out of it, and a GET the cache may store leads
/// its key's flight (its validators, if it validates a stale object, added to `out`) or
/// follows another request's.
pub fn after_miss(
    missed: Missed<'_>,
    config: &PoolCache,
    headers: &[httparse::Header<'_>],
    out: &mut Vec<u8>,
) -> CacheStep {
    strip_unkeyed(config, headers, out);
    let Missed {
        store,
        key,
        primary_len,
        fields,
        asked,
        stale,
        validating,
        head_only,
        refreshing,
    } = missed;
    if let Some(mut plan) = refreshing {
        plan.forwarded_head.clear();
        plan.forwarded_head.extend_from_slice(out);
        plan.ask(out);
        return CacheStep {
            fill: Some(plan),
            ..CacheStep::default()
        };
    }
    let asked_owned = Asked::of(asked);
    if head_only || fields.control.no_store || fields.range.is_some() {
        // Not stored from here: a range is fetched as asked, and answered from the cache only
        // once a whole object is stored.
        return CacheStep {
            stale,
            asked: asked_owned,
            ..CacheStep::default()
        };
    }
    let mut plan = FillPlan::new(Rc::clone(&store), key, primary_len, &fields, config);
    plan.forwarded_head.extend_from_slice(out);
    plan.on_disk = validating.is_none() && stale.is_none() && store.on_disk(&plan.key);
    plan.validating = validating;
    match store.flights.join(&plan.key) {
        Role::Lead(leader) => {
            plan.leader = Some(leader);
            plan.ask(out);
            CacheStep {
                fill: Some(plan),
                stale,
                asked: asked_owned,
                ..CacheStep::default()
            }
        }
        Role::Follow(flight) => CacheStep {
            follow: Some(flight),
            fill: Some(plan),
            stale,
            asked: asked_owned,
            ..CacheStep::default()
        },
    }
}

/// The answer `entry` (an object) gives a request that asked `asked`, its head written into
/// `out`: a 304 when the request's own condition holds, a 206 or 416 for a range, else the
/// object; with `outcome` saying how the cache came by it.
fn answer(
    entry: &Arc<Entry>,
    asked: AskedOf<'_>,
    now: Moment,
    outcome: CacheOutcome,
    writing: HitWriting<'_>,
    out: &mut Vec<u8>,
) -> Hit {
    let Entry::Object(object) = &**entry else {
        unreachable!("an answer is made of an object")
    };
    let age = object.age(now);
    let ttl = match outcome {
        CacheOutcome::Stale => -(age.saturating_sub(object.freshness.lifetime) as i64),
        _ => object.fresh_for(now) as i64,
    };
    let cache_status = cache_status_line(writing.cache_status, outcome, ttl);
    let length = object.body.len();
    let whole = |status| Hit {
        object: Arc::clone(entry),
        body: if asked.head_only { 0..0 } else { 0..length },
        status,
        outcome,
    };
    out.clear();
    let HitWriting { framing, hsts, .. } = writing;
    if matches_condition(asked, object) {
        let head = not_modified_head(&object.head);
        write_hit_head(
            &head,
            age,
            HitBody::Unframed,
            hsts,
            &cache_status,
            framing,
            out,
        );
        return Hit {
            body: 0..0,
            ..whole(304)
        };
    }
    let part = asked.range.map_or(Part::Whole, |range| {
        requested_part(range, asked.if_range, object)
    });
    match part {
        Part::Whole => {
            let length = HitBody::Length(length as u64);
            write_hit_head(&object.head, age, length, hsts, &cache_status, framing, out);
            whole(object.status)
        }
        Part::Bytes { from, to } => {
            let head = with_status_line(&object.head, b"HTTP/1.1 206 Partial Content\r\n");
            let mut lines = format!("Content-Range: bytes {from}-{to}/{length}\r\n").into_bytes();
            lines.extend_from_slice(&cache_status);
            let part_length = HitBody::Length(to - from + 1);
            write_hit_head(&head, age, part_length, hsts, &lines, framing, out);
            let body = match asked.head_only {
                true => 0..0,
                false => from as usize..to as usize + 1,
            };
            Hit { body, ..whole(206) }
        }
        Part::Unsatisfiable => {
            let mut lines = format!("Content-Range: bytes */{length}\r\n").into_bytes();
            lines.extend_from_slice(&cache_status);
            let head = b"HTTP/1.1 416 Range Not Satisfiable\r\n";
            write_hit_head(head, age, HitBody::Length(0), hsts, &lines, framing, out);
            Hit {
                body: 0..0,
                ..whole(416)
            }
        }
    }
}

/// When the server could not answer (or answered 5xx): the stale stored answer the request may
/// still get instead, within its `stale-if-error` or the pool's `grace` and unless it forbids
/// serving stale (RFC 9111 §4.2.4, RFC 5861 §4), its head written into `out`.
pub fn stale_on_error(
    step: &mut CacheStep,
    config: &PoolCache,
    writing: HitWriting<'_>,
    out: &mut Vec<u8>,
) -> Option<Hit> {
    let entry = step.stale.take()?;
    step.fill = None;
    let Entry::Object(object) = &*entry else {
        return None;
    };
    let now = Moment::now();
    let age = object.age(now);
    if !object
        .freshness
        .serves_on_error(age, config.grace.as_secs())
    {
        return None;
    }
    let asked = step.asked.view();
    Some(answer(
        &entry,
        asked,
        now,
        CacheOutcome::Stale,
        writing,
        out,
    ))
}

/// The server answered 304 to the conditions a fill asked with: the stale object, refreshed
/// with the 304's fields (its head in `out`, as the client gets it), is stored again and
/// answers the request — and the flight's followers.
pub fn revalidated(
    plan: FillPlan,
    asked: &Asked,
    writing: HitWriting<'_>,
    out: &mut Vec<u8>,
) -> Option<Hit> {
    let FillPlan {
        store,
        leader,
        validating,
        control,
        authorization,
        requested,
        rules,
        ..
    } = plan;
    let entry = validating?;
    let Entry::Object(stale) = &*entry else {
        return None;
    };
    let mut slots = header_slots();
    let not_modified = parse_response(out, &mut slots, Method::Get, out.len()).ok()??;
    let mut head = updated_head(&stale.head, &not_modified);
    head.extend_from_slice(b"\r\n");
    let mut slots = header_slots();
    let merged = parse_response(&head, &mut slots, Method::Head, head.len()).ok()??;
    let fields = read_response(&merged);
    let lifetime = storable(&control, authorization, &fields.facts, &rules).ok();
    head.truncate(head.len() - 2);
    let refreshed = Arc::new(Entry::Object(Object {
        key: stale.key.clone(),
        head: head.into(),
        body: stale.body.clone(),
        status: stale.status,
        freshness: Freshness {
            lifetime: lifetime.unwrap_or(0),
            control: fields.facts.control,
        },
        initial_age: initial_age(&fields.facts, requested, unix_now_ms()),
        stored: Moment::now(),
        etag: fields.etag.or_else(|| stale.etag.clone()),
        last_modified: fields.facts.last_modified.or(stale.last_modified),
        tags: stale.tags.clone(),
    }));
    if lifetime.is_some() {
        store.put(Arc::clone(&refreshed));
    }
    if let (Some(leader), Entry::Object(object)) = (leader, &*refreshed) {
        leader.head(FlightHead {
            head: object.head.clone(),
            status: object.status,
            length: Some(object.body.len() as u64),
            vary: None,
        });
        leader.land(|_| Some(Arc::clone(&refreshed)));
    }
    let now = Moment::now();
    let asked = asked.view();
    Some(answer(
        &refreshed,
        asked,
        now,
        CacheOutcome::Revalidated,
        writing,
        out,
    ))
}

/// After an unsafe request to `key` was answered without an error (its head in `response`):
/// what is stored for its target goes, and for the targets of the same origin its `Location`
/// and `Content-Location` name (RFC 9111 §4.4).
pub fn invalidate(store: &Store, key: &[u8], response: &[u8]) {
    store.remove(key);
    let mut slots = header_slots();
    let Ok(Some(response)) = parse_response(response, &mut slots, Method::Get, response.len())
    else {
        return;
    };
    for header in response.headers {
        let names_one = header.name.eq_ignore_ascii_case("location")
            || header.name.eq_ignore_ascii_case("content-location");
        if let Some(other) = names_one.then(|| with_target(key, header.value)).flatten() {
            store.remove(&other);
        }
    }
}

/// Takes out of the forwarded head in `out` the poisoning fields (`config::POISONING_FIELDS`)
/// the pool neither keys nor forwards: what reaches the server is what the key says.
pub fn strip_unkeyed(config: &PoolCache, headers: &[httparse::Header<'_>], out: &mut Vec<u8>) {
    let present = headers.iter().any(|header| {
        config
            .stripped
            .iter()
            .any(|name| header.name.eq_ignore_ascii_case(name))
    });
    if present {
        remove_fields(out, &config.stripped);
    }
}

/// A miss in memory that leads its key's flight, with the entry on disk (`[cache.disk]`): the
/// entry is read back (off the event loop, its checksum checked) and kept in memory again.
/// Fresh, it answers (its head written into `client.out`) and lands the flight for the
/// followers; stale, it goes to the server with its validators, and stands by in case the
/// server fails. `None`: to the server.
pub async fn from_disk<D: Downstream>(
    client: &mut Client<D>,
    config: &PoolCache,
    framing: HitFraming,
) -> Option<Hit> {
    let plan = client.cache.fill.as_mut()?;
    plan.on_disk = false;
    let disk = Arc::clone(plan.store.disk()?);
    let mut entry = disk.read(plan.key.clone()).await?;
    let mut vary = None;
    if let Entry::Variants { names, .. } = &*entry {
        plan.store.keep(Arc::clone(&entry));
        // `out` holds the request head as it is forwarded.
        let variant = variant_of(&client.out, names)?;
        let mut key = plan.key.clone();
        key.extend_from_slice(&variant);
        vary = Some(FlightVary {
            names: names.clone(),
            variant: variant.into(),
        });
        entry = disk.read(key).await?;
    }
    let Entry::Object(object) = &*entry else {
        return None;
    };
    plan.store.keep(Arc::clone(&entry));
    let now = Moment::now();
    let age = object.age(now);
    if object
        .freshness
        .judge(age, &plan.control, config.grace.as_secs())
        == Verdict::Validate
    {
        if has_validators(object) {
            plan.validating = Some(Arc::clone(&entry));
            plan.ask(&mut client.out);
        }
        client.cache.stale = Some(entry);
        return None;
    }
    if let Some(leader) = plan.leader.take() {
        leader.head(FlightHead {
            head: object.head.clone(),
            status: object.status,
            length: Some(object.body.len() as u64),
            vary,
        });
        leader.land(|_| Some(Arc::clone(&entry)));
    }
    client.cache.fill = None;
    let writing = HitWriting {
        framing,
        hsts: &client.hsts,
        cache_status: config.cache_status,
    };
    let asked = client.cache.asked.view();
    Some(answer(
        &entry,
        asked,
        now,
        CacheOutcome::Hit,
        writing,
        &mut client.out,
    ))
}

/// The request's values of cookie `name`, from its `Cookie` fields (`a=1; b=2`).
fn cookie_values<'b>(headers: &[httparse::Header<'b>], name: &[u8]) -> Vec<&'b [u8]> {
    values_of(headers, b"cookie")
        .into_iter()
        .flat_map(|line| line.split(|&byte| byte == b';'))
        .filter_map(|pair| {
            let pair = pair.trim_ascii();
            let at = pair.iter().position(|&byte| byte == b'=')?;
            (pair[..at].trim_ascii() == name).then(|| pair[at + 1..].trim_ascii())
        })
        .collect()
}

/// The request's values of field `name`.
fn values_of<'b>(headers: &[httparse::Header<'b>], name: &[u8]) -> Vec<&'b [u8]> {
    headers
        .iter()
        .filter(|header| header.name.as_bytes().eq_ignore_ascii_case(name))
        .map(|header| header.value)
        .collect()
}

/// The client's own condition holds for the stored response: `If-None-Match` names its ETag
/// (weak comparison, RFC 9110 §13.1.2), or without one, `If-Modified-Since` is no earlier than
/// its `Last-Modified`.
fn matches_condition(asked: AskedOf<'_>, object: &Object) -> bool {
    if let Some(list) = asked.if_none_match {
        let Some(etag) = object.etag.as_deref() else {
            return false;
        };
        let opaque = |tag: &[u8]| -> Vec<u8> { tag.strip_prefix(b"W/").unwrap_or(tag).to_vec() };
        let ours = opaque(etag);
        return list.trim_ascii() == b"*"
            || list
                .split(|&byte| byte == b',')
                .any(|tag| opaque(tag.trim_ascii()) == ours);
    }
    match (asked.if_modified_since, object.last_modified) {
        (Some(since), Some(modified)) => modified <= since,
        _ => false,
    }
}

/// A stored head with another status line.
fn with_status_line(stored: &[u8], line: &[u8]) -> Vec<u8> {
    let fields = stored
        .iter()
        .position(|&byte| byte == b'\n')
        .map_or(&[][..], |end| &stored[end + 1..]);
    [line, fields].concat()
}

/// A stored head as a 304's: its status line rewritten, its content fields left out (RFC 9110
/// §15.4.5 lists what a 304 carries: the validators and the caching fields).
fn not_modified_head(stored: &[u8]) -> Vec<u8> {
    let mut head = b"HTTP/1.1 304 Not Modified\r\n".to_vec();
    let fields = stored
        .iter()
        .position(|&byte| byte == b'\n')
        .map_or(&[][..], |end| &stored[end + 1..]);
    for line in fields.split_inclusive(|&byte| byte == b'\n') {
        let name_end = line.iter().position(|&byte| byte == b':').unwrap_or(0);
        let name = &line[..name_end];
        let kept = [
            "etag",
            "cache-control",
            "expires",
            "vary",
            "date",
            "content-location",
        ]
        .iter()
        .any(|kept| name.eq_ignore_ascii_case(kept.as_bytes()));
        if kept {
            head.extend_from_slice(line);
        }
    }
    head
}

/// Adds to the client's head of a response from the server (in `out`, ending with its blank
/// line) the `Cache-Status` line that says why it went to the server (RFC 9211): `fwd=miss`,
/// `fwd=stale` for a stale object revalidated, `fwd=bypass` for a request not for the cache;
/// `fwd-status` the server's status; `stored` when the answer is being stored.
pub fn say_forwarded(did: CacheOutcome, status: u16, out: &mut Vec<u8>) {
    let (forwarded, stored) = match did {
        CacheOutcome::Miss => ("miss", true),
        CacheOutcome::Replaced => ("stale", true),
        CacheOutcome::Uncacheable | CacheOutcome::LockTimeout => ("miss", false),
        _ => ("bypass", false),
    };
    let stored = if stored { "; stored" } else { "" };
    let line = format!("Cache-Status: herdsman; fwd={forwarded}; fwd-status={status}{stored}\r\n");
    let at = out.len().saturating_sub(2);
    out.splice(at..at, line.into_bytes());
}

/// The `Cache-Status` line of an answer from the cache (RFC 9211) when the pool sends one, else
/// nothing: `ttl` is how long it stays fresh, negative when it is already stale by so much.
fn cache_status_line(sends: bool, outcome: CacheOutcome, ttl: i64) -> Vec<u8> {
    if !sends {
        return Vec::new();
    }
    let how = match outcome {
        CacheOutcome::Revalidated => "fwd=stale; fwd-status=304; stored",
        _ => "hit",
    };
    format!("Cache-Status: herdsman; {how}; ttl={ttl}\r\n").into_bytes()
}

/// The variant part of a key (`key::write_variant`) for the request whose forwarded head is
/// `forwarded`, varying on `names`; `None` if the head does not parse.
fn variant_of(forwarded: &[u8], names: &[u8]) -> Option<Vec<u8>> {
    let mut slots = header_slots();
    let request = parse_request(forwarded, &mut slots, forwarded.len()).ok()??;
    let mut part = Vec::new();
    write_variant(&mut part, names, |name| values_of(request.headers, name));
    Some(part)
}
