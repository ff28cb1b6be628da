//! The exchange's side of the cache (`crate::cache`): a request to a pool with `[pool.cache]`
//! is looked up while its head is at hand; a fresh stored response answers it without a server
//! (`Hit`); otherwise it goes to the server, and the answer is stored as it streams to the
//! client when RFC 9111 allows (`FillPlan` becomes `Filling` once the head says so).

use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

use crate::cache::fields::{read_request, read_response, RequestFields};
use crate::cache::flight::{Flight, FlightHead, FlightVary, Leader, Role};
use crate::cache::freshness::{initial_age, storable, unix_now_ms, FreshnessRules, Verdict};
use crate::cache::gather::Gathering;
use crate::cache::head::{remove_fields, stored_head, write_hit_head, HitBody, HitFraming};
use crate::cache::key::{with_target, write_field, write_primary, write_variant};
use crate::cache::range::{requested_part, Part};
use crate::cache::validate::{ask_if_changed, has_validators, updated_head};
use crate::cache::{Entry, Freshness, Object, RequestControl, Store};
use crate::config::PoolCache;
use crate::stats::cache::CacheOutcome;
use crate::stats::traffic::Ending;
use crate::transport::deadline::timeout;
use crate::upstream::Snapshot;

use super::context::ProxyContext;
use super::downstream::Downstream;
use super::facts::RequestFacts;
use super::outcome::Outcome;
use super::{Client, Exchanged, Next};
use crate::http1::chunked::put_size_line;
use crate::http1::{header_slots, parse_request, parse_response, Body, Method, Request};
use crate::transport::Moment;

/// The process's store as a worker holds it: in an `Rc`, so that a request clones a count of
/// its own thread's rather than the `Arc`'s, which every worker's requests would bounce.
#[allow(clippy::redundant_allocation)]
pub type WorkerStore = Rc<Arc<Store>>;

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

/// A miss that may be stored: what storing its answer needs of the request.
pub struct FillPlan {
    store: WorkerStore,
    /// The fetch the other misses on this key wait for, once this request leads it (a request
    /// that followed another's and stopped waiting stores its answer without one).
    leader: Option<Leader>,
    /// The primary key, and after it the variant's part when the lookup found the names the
    /// stored response varied on (`primary_len` says where the primary key ends).
    key: Vec<u8>,
    primary_len: usize,
    /// The request head as forwarded, for the values of the fields a `Vary` names.
    forwarded_head: Vec<u8>,
    control: RequestControl,
    authorization: bool,
    /// When the request went, in milliseconds since the epoch.
    requested: u64,
    rules: FreshnessRules,
    max_object_size: u64,
    /// The stale object this fetch asks the server about, with its validators (a 304 refreshes
    /// it).
    validating: Option<Arc<Entry>>,
    /// Missed in memory, the entry may be on disk (`[cache.disk]`): read there first.
    on_disk: bool,
}

/// An answer being stored as it streams to the client (its body gathered in the flight, where
/// the followers read it as it comes).
pub struct Filling {
    store: WorkerStore,
    leader: Option<Leader>,
    /// Its whole key (with the variant's part when it varies).
    key: Vec<u8>,
    /// The primary key and the names it varies on, when it varies.
    variants: Option<(Vec<u8>, Vec<u8>)>,
    head: Box<[u8]>,
    /// The body's bytes as they come: counted, or out of their chunked framing.
    gathering: Gathering,
    /// The body, when no flight gathers it.
    body: Vec<u8>,
    status: u16,
    freshness: Freshness,
    initial_age: u64,
    etag: Option<Box<[u8]>>,
    last_modified: Option<u64>,
    tags: Vec<u8>,
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

impl FillPlan {
    fn new(
        store: WorkerStore,
        key: Vec<u8>,
        primary_len: usize,
        fields: &RequestFields<'_>,
        config: &PoolCache,
    ) -> Box<FillPlan> {
        Box::new(FillPlan {
            store,
            leader: None,
            key,
            primary_len,
            forwarded_head: Vec::new(),
            control: fields.control,
            authorization: fields.authorization,
            requested: unix_now_ms(),
            rules: FreshnessRules {
                default_ttl: config.default_ttl,
                negative_ttl: config.negative_ttl,
                store_set_cookie: config.store_set_cookie,
            },
            max_object_size: config.max_object_size,
            validating: None,
            on_disk: false,
        })
    }

    /// Leading the fetch now: when a stale object is being validated, the forwarded head in
    /// `out` asks the server about it (`validate::ask_if_changed`).
    fn ask(&self, out: &mut Vec<u8>) {
        if let Some(Entry::Object(object)) = self.validating.as_deref() {
            ask_if_changed(out, object);
        }
    }

    /// This request leads the fetch, and the entry may be read back from the disk first.
    pub fn reads_disk(&self) -> bool {
        self.on_disk && self.leader.is_some()
    }

    /// The server's 304 answers this fetch's own conditions (a stale object it validates).
    pub fn is_answered_by(&self, status: u16) -> bool {
        status == 304 && self.validating.is_some()
    }

    /// Once the server's head is in `out` (as the client gets it): whether the answer may be
    /// stored, and if so what storing it starts with. `body` is its framing to the client.
    /// Also what the cache did: a miss stored, a validated object replaced, or neither.
    pub fn start(mut self, out: &[u8], body: Body) -> (Option<Box<Filling>>, CacheOutcome) {
        let stored = match self.validating.is_some() {
            true => CacheOutcome::Replaced,
            false => CacheOutcome::Miss,
        };
        let mut leader = self.leader.take();
        match self.filling(out, body, &mut leader) {
            Some(filling) => (Some(filling), stored),
            None => {
                if let Some(leader) = leader {
                    leader.pass();
                }
                (None, CacheOutcome::Uncacheable)
            }
        }
    }

    /// The fill, if the answer may be stored (then it takes `leader`).
    fn filling(self, out: &[u8], body: Body, leader: &mut Option<Leader>) -> Option<Box<Filling>> {
        let gathering = match body {
            Body::Length(length) if length <= self.max_object_size => Gathering::of_length(length),
            Body::None => Gathering::of_length(0),
            Body::Chunked => Gathering::chunked(self.max_object_size),
            // A body the connection's close ends (or one de-chunked for an HTTP/1.0 client):
            // nothing tells its end from a server that failed in the middle of it.
            _ => return None,
        };
        let mut slots = header_slots();
        let response = parse_response(out, &mut slots, Method::Get, out.len()).ok()??;
        let fields = read_response(&response);
        let lifetime = storable(
            &self.control,
            self.authorization,
            &fields.facts,
            &self.rules,
        )
        .ok()?;
        let mut head = Vec::with_capacity(response.head_len);
        stored_head(&response, &mut head);
        let responded = unix_now_ms();
        let initial_age = initial_age(&fields.facts, self.requested, responded);
        let FillPlan {
            store,
            mut key,
            primary_len,
            forwarded_head,
            ..
        } = self;
        // The variant's part is written from the response's own Vary.
        key.truncate(primary_len);
        let variants = if fields.vary.is_empty() {
            None
        } else {
            let primary = key.clone();
            key.extend(variant_of(&forwarded_head, &fields.vary)?);
            Some((primary, fields.vary.clone()))
        };
        let head: Box<[u8]> = head.into();
        let leader = leader.take();
        if let Some(leader) = &leader {
            let vary = variants.as_ref().map(|(_, names)| FlightVary {
                names: names[..].into(),
                variant: key[primary_len..].into(),
            });
            leader.head(FlightHead {
                head: head.clone(),
                status: fields.facts.status,
                length: gathering.length(),
                vary,
            });
        }
        Some(Box::new(Filling {
            store,
            leader,
            key,
            variants,
            head,
            gathering,
            body: Vec::new(),
            status: fields.facts.status,
            freshness: Freshness {
                lifetime,
                control: fields.facts.control,
            },
            initial_age,
            etag: fields.etag,
            last_modified: fields.facts.last_modified,
            tags: fields.tags,
        }))
    }
}

impl Filling {
    /// Takes body bytes as they come from the server, framed as it framed them (their data into
    /// the flight, where followers read it); past the stated length, or `max_object_size` of a
    /// chunked body, nothing more is taken.
    pub fn take(&mut self, bytes: &[u8]) {
        let (leader, body) = (&self.leader, &mut self.body);
        self.gathering.take(bytes, |data| match leader {
            Some(leader) => leader.body(data),
            None => body.extend_from_slice(data),
        });
    }

    /// The body is whole: stores the object (and, when it varies, the names it varies on under
    /// its primary key), and the flight's followers read the rest from it. Whether the store
    /// took it.
    pub fn finish(self: Box<Self>) -> bool {
        let filling = *self;
        if !filling.gathering.is_whole() {
            return false;
        }
        let Filling {
            store,
            leader,
            key,
            variants,
            head,
            body,
            status,
            freshness,
            initial_age,
            etag,
            last_modified,
            tags,
            ..
        } = filling;
        if let Some((primary, names)) = variants {
            store.put(Arc::new(Entry::Variants {
                key: primary.into(),
                names: names.into(),
            }));
        }
        let object = |body: Vec<u8>| {
            Arc::new(Entry::Object(Object {
                key: key.into(),
                head,
                body: body.into(),
                status,
                freshness,
                initial_age,
                stored: Moment::now(),
                etag,
                last_modified,
                tags: tags.into(),
            }))
        };
        let Some(leader) = leader else {
            return store.put(object(body));
        };
        let mut stored = false;
        leader.land(|body| {
            let object = object(body);
            stored = store.put(Arc::clone(&object));
            Some(object)
        });
        stored
    }
}

/// A writer that copies what it writes into a fill (a response the cache stores). When the
/// client fails, it goes on taking the writes for the fill alone — the fetch is its followers'
/// too — and keeps the client's failure for the end.
pub struct Tee<'a, W> {
    pub inner: &'a mut W,
    pub filling: &'a mut Filling,
    pub client_failed: Option<io::ErrorKind>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Tee<'_, W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = match this.client_failed {
            Some(_) => bytes.len(),
            None => match Pin::new(&mut *this.inner).poll_write(cx, bytes) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(error)) => {
                    this.client_failed = Some(error.kind());
                    bytes.len()
                }
            },
        };
        this.filling.take(&bytes[..written]);
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.client_failed.is_some() {
            return Poll::Ready(Ok(()));
        }
        let this = &mut *self;
        match Pin::new(&mut *this.inner).poll_flush(cx) {
            Poll::Ready(Err(error)) => {
                this.client_failed = Some(error.kind());
                Poll::Ready(Ok(()))
            }
            polled => polled,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.client_failed.is_some() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

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

/// The variant part of a key (`key::write_variant`) for the request whose forwarded head is
/// `forwarded`, varying on `names`; `None` if the head does not parse.
fn variant_of(forwarded: &[u8], names: &[u8]) -> Option<Vec<u8>> {
    let mut slots = header_slots();
    let request = parse_request(forwarded, &mut slots, forwarded.len()).ok()??;
    let mut part = Vec::new();
    write_variant(&mut part, names, |name| values_of(request.headers, name));
    Some(part)
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
