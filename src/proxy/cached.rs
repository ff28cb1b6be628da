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
use crate::cache::head::{stored_head, write_hit_head, HitFraming};
use crate::cache::key::{write_field, write_primary, write_variant};
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
}

/// A request answered from the cache.
pub struct Hit {
    pub object: Arc<Entry>,
    /// The body goes too (not for HEAD, nor for a 304 to a client's own condition).
    pub with_body: bool,
    /// The status the client gets.
    pub status: u16,
    /// Served stale because its server failed.
    pub stale: bool,
}

impl Hit {
    /// The stored body.
    pub fn body(&self) -> &[u8] {
        match &*self.object {
            Entry::Object(object) if self.with_body => &object.body,
            _ => &[],
        }
    }
}

/// A miss that may be stored: what storing its answer needs of the request.
pub struct FillPlan {
    store: WorkerStore,
    /// The fetch the other misses on this key wait for.
    leader: Leader,
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
}

/// An answer being stored as it streams to the client (its body gathered in the flight, where
/// the followers read it as it comes).
pub struct Filling {
    store: WorkerStore,
    leader: Leader,
    /// Its whole key (with the variant's part when it varies).
    key: Vec<u8>,
    /// The primary key and the names it varies on, when it varies.
    variants: Option<(Vec<u8>, Vec<u8>)>,
    head: Box<[u8]>,
    /// Body bytes taken so far, up to `length`.
    taken: u64,
    length: u64,
    status: u16,
    freshness: Freshness,
    initial_age: u64,
    etag: Option<Box<[u8]>>,
    last_modified: Option<u64>,
    tags: Vec<u8>,
}

/// Decides the cache's step for `request` (GET or HEAD, no body) routed to a pool with
/// `config`; `out` holds the request head as forwarded. On a hit, the response head replaces
/// it in `out`.
#[allow(clippy::too_many_arguments)]
pub fn look_up(
    store: Option<WorkerStore>,
    config: &PoolCache,
    pool: &str,
    secure: bool,
    request: &Request<'_, '_>,
    framing: HitFraming,
    hsts: &[u8],
    out: &mut Vec<u8>,
) -> CacheStep {
    let Some(store) = store else {
        return CacheStep::default();
    };
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
    let safe = matches!(
        request.method,
        Method::Get | Method::Head | Method::Options | Method::Trace
    );
    if !safe {
        return CacheStep {
            invalidate: Some((store, key)),
            ..CacheStep::default()
        };
    }
    let cacheable_method = matches!(request.method, Method::Get | Method::Head);
    if !cacheable_method || request.body != Body::None || request.upgrade {
        return CacheStep::default();
    }
    let fields = read_request(request.headers);
    if fields.method_override || fields.range.is_some() {
        return CacheStep::default();
    }
    let now = Moment::now();
    let primary_len = key.len();
    let mut found = store.get(&key);
    if let Some(Entry::Variants { names, .. }) = found.as_deref() {
        let names = names.clone();
        write_variant(&mut key, &names, |name| values_of(request.headers, name));
        found = store.get(&key);
    }
    let mut stale = None;
    if let Some(entry) = found {
        if let Entry::Object(object) = &*entry {
            let age = object.age(now);
            let grace = config.grace.as_secs();
            let usable = match object.freshness.judge(age, &fields.control, grace) {
                Verdict::Fresh | Verdict::StaleServe { refresh: false } => true,
                // Served stale while one request refreshes it comes with the herd's lock;
                // until then a stale object is fetched again.
                Verdict::StaleServe { refresh: true } | Verdict::Validate => false,
            };
            if usable {
                let not_modified = matches_condition(&fields, object);
                let status = if not_modified { 304 } else { object.status };
                let with_body = request.method == Method::Get && !not_modified;
                let length = (!not_modified).then_some(object.body.len() as u64);
                let cache_status = cache_status_line(config, object.fresh_for(now) as i64);
                out.clear();
                let stored = if not_modified {
                    not_modified_head(&object.head)
                } else {
                    object.head.to_vec()
                };
                write_hit_head(&stored, age, length, hsts, &cache_status, framing, out);
                return CacheStep {
                    hit: Some(Hit {
                        object: Arc::clone(&entry),
                        with_body,
                        status,
                        stale: false,
                    }),
                    ..CacheStep::default()
                };
            }
        }
        stale = Some(entry);
    }
    if request.method != Method::Get || fields.control.no_store {
        return CacheStep {
            stale,
            ..CacheStep::default()
        };
    }
    let leader = match store.flights.join(&key) {
        Role::Lead(leader) => leader,
        Role::Follow(flight) => {
            return CacheStep {
                follow: Some(flight),
                stale,
                ..CacheStep::default()
            }
        }
    };
    let fill = Some(Box::new(FillPlan {
        store,
        leader,
        key,
        primary_len,
        forwarded_head: out.clone(),
        control: fields.control,
        authorization: fields.authorization,
        requested: unix_now_ms(),
        rules: FreshnessRules {
            default_ttl: config.default_ttl,
            negative_ttl: config.negative_ttl,
            store_set_cookie: config.store_set_cookie,
        },
        max_object_size: config.max_object_size,
    }));
    CacheStep {
        fill,
        stale,
        ..CacheStep::default()
    }
}

/// When the server could not answer (or answered 5xx): the stale stored answer the request may
/// still get instead, within its `stale-if-error` or the pool's `grace` and unless it forbids
/// serving stale (RFC 9111 §4.2.4, RFC 5861 §4), its head written into `out`.
pub fn stale_on_error(
    step: &mut CacheStep,
    config: &PoolCache,
    method: Method,
    framing: HitFraming,
    hsts: &[u8],
    out: &mut Vec<u8>,
) -> Option<Hit> {
    let entry = step.stale.take()?;
    step.fill = None;
    let Entry::Object(object) = &*entry else {
        return None;
    };
    let age = object.age(Moment::now());
    if !object
        .freshness
        .serves_on_error(age, config.grace.as_secs())
    {
        return None;
    }
    let stale_by = age.saturating_sub(object.freshness.lifetime) as i64;
    let cache_status = cache_status_line(config, -stale_by);
    out.clear();
    let length = Some(object.body.len() as u64);
    write_hit_head(&object.head, age, length, hsts, &cache_status, framing, out);
    Some(Hit {
        status: object.status,
        with_body: method == Method::Get,
        object: Arc::clone(&entry),
        stale: true,
    })
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
fn matches_condition(fields: &RequestFields<'_>, object: &Object) -> bool {
    if let Some(list) = fields.if_none_match {
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
    match (fields.if_modified_since, object.last_modified) {
        (Some(since), Some(modified)) => modified <= since,
        _ => false,
    }
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

/// The `Cache-Status` line of a hit (RFC 9211) when the pool sends one, else nothing: `ttl` is
/// how long it stays fresh, negative when it is already stale by so much.
fn cache_status_line(config: &PoolCache, ttl: i64) -> Vec<u8> {
    if !config.cache_status {
        return Vec::new();
    }
    format!("Cache-Status: herdsman; hit; ttl={ttl}\r\n").into_bytes()
}

impl FillPlan {
    /// Once the server's head is in `out` (as the client gets it): whether the answer may be
    /// stored, and if so what storing it starts with. `body` is its framing to the client.
    pub fn start(self, out: &[u8], body: Body) -> Option<Box<Filling>> {
        let length = match body {
            Body::Length(length) if length <= self.max_object_size => length,
            Body::None => 0,
            // A chunked or close-delimited body is not stored (its length is unknown until
            // its end; a later step of the cache decodes it).
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
            leader,
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
        let vary = variants.as_ref().map(|(_, names)| FlightVary {
            names: names[..].into(),
            variant: key[primary_len..].into(),
        });
        leader.head(FlightHead {
            head: head.clone(),
            status: fields.facts.status,
            length,
            vary,
        });
        Some(Box::new(Filling {
            store,
            leader,
            key,
            variants,
            head,
            taken: 0,
            length,
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
    /// Takes body bytes as they go to the client (into the flight, where followers read them);
    /// past the stated length nothing more is taken (the relay fails such a response anyway).
    pub fn take(&mut self, bytes: &[u8]) {
        let room = self.length.saturating_sub(self.taken) as usize;
        let bytes = &bytes[..bytes.len().min(room)];
        self.taken += bytes.len() as u64;
        self.leader.body(bytes);
    }

    /// The body is whole: stores the object (and, when it varies, the names it varies on under
    /// its primary key), and the flight's followers read the rest from it. Whether the store
    /// took it.
    pub fn finish(self: Box<Self>) -> bool {
        let filling = *self;
        if filling.taken != filling.length {
            return false;
        }
        let Filling {
            store,
            leader,
            key,
            variants,
            head,
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
        let mut stored = false;
        leader.land(|body| {
            let object = Arc::new(Entry::Object(Object {
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
            }));
            stored = store.put(Arc::clone(&object));
            Some(object)
        });
        stored
    }
}

/// A writer that copies what it writes into a fill, when there is one (a response the cache
/// stores); otherwise it only passes the writes on.
pub struct Tee<'a, W> {
    pub inner: &'a mut W,
    pub filling: Option<&'a mut Filling>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Tee<'_, W> {
    #[inline]
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut *this.inner).poll_write(cx, bytes);
        if let (Poll::Ready(Ok(n)), Some(filling)) = (&written, this.filling.as_deref_mut()) {
            filling.take(&bytes[..*n]);
        }
        written
    }

    #[inline]
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        slices: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut *this.inner).poll_write_vectored(cx, slices);
        if let (Poll::Ready(Ok(n)), Some(filling)) = (&written, this.filling.as_deref_mut()) {
            let mut left = *n;
            for slice in slices {
                let taken = left.min(slice.len());
                filling.take(&slice[..taken]);
                left -= taken;
                if left == 0 {
                    break;
                }
            }
        }
        written
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    #[inline]
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    #[inline]
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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
    let config = snapshot.pools[facts.choice.pool].cache.as_ref()?;
    let head = flight.wait_for(|state| match (&state.head, state.abandoned) {
        (Some(head), _) => Some(Some(Arc::clone(head))),
        (None, true) => Some(None),
        (None, false) => None,
    });
    let head = match timeout(config.lock_timeout, head).await {
        Ok(Some(head)) => head,
        Ok(None) => {
            flight.leave();
            return None;
        }
        Err(_) => {
            flight.leave();
            outcome.cache = Some(CacheOutcome::LockTimeout);
            return None;
        }
    };
    if let Some(vary) = &head.vary {
        // `out` still holds this request's head as it would be forwarded.
        if variant_of(&client.out, &vary.names).as_deref() != Some(&vary.variant[..]) {
            flight.leave();
            return None;
        }
    }
    outcome.pool = Some(facts.choice.pool);
    outcome.ending = Ending::Status(head.status);
    outcome.cache = Some(CacheOutcome::Collapsed);
    let framing = HitFraming {
        close: !facts.keep_alive || context.is_stopping(),
        http10_keep_alive: facts.minor_version == 0 && facts.keep_alive,
    };
    let cache_status: &[u8] = match config.cache_status {
        true => b"Cache-Status: herdsman; fwd=miss; collapsed\r\n",
        false => b"",
    };
    let with_body = facts.method == Method::Get;
    client.out.clear();
    let (hsts, out) = (&client.hsts, &mut client.out);
    write_hit_head(
        &head.head,
        0,
        Some(head.length),
        hsts,
        cache_status,
        framing,
        out,
    );
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
    while with_body && sent < head.length {
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
            Piece::Bytes => client.downstream.send(&chunk, deadline).await,
            Piece::Stored(entry) => {
                let Entry::Object(object) = &*entry else {
                    break;
                };
                let rest = object.body.get(sent as usize..).unwrap_or_default();
                let written = client.downstream.send(rest, deadline).await;
                if matches!(written, Some(Ok(()))) {
                    sent += rest.len() as u64;
                }
                outcome.body_bytes = sent;
                flight.leave();
                return Some(finished(written, sent == head.length, facts, context));
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
    let whole = !with_body || sent == head.length;
    Some(finished(Some(Ok(())), whole, facts, context))
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
