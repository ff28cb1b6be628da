//! A fill: the answer to a miss stored as it comes from the server — what storing it needs of
//! the request (`FillPlan`), its body gathered into the key's flight as it arrives (`Filling`),
//! and the writer that copies a streamed body into it (`Tee`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

use super::{variant_of, RequestFields, WorkerStore};
use crate::cache::fields::read_response;
use crate::cache::flight::{FlightHead, FlightVary, Leader};
use crate::cache::freshness::{initial_age, storable, unix_now_ms, FreshnessRules};
use crate::cache::gather::Gathering;
use crate::cache::head::stored_head;
use crate::cache::validate::ask_if_changed;
use crate::cache::{Entry, Freshness, Object, RequestControl};
use crate::config::PoolCache;
use crate::http1::{header_slots, parse_response, Body, Method};
use crate::stats::cache::CacheOutcome;
use crate::transport::Moment;

/// A miss that may be stored: what storing its answer needs of the request.
pub struct FillPlan {
    pub(super) store: WorkerStore,
    /// The fetch the other misses on this key wait for, once this request leads it (a request
    /// that followed another's and stopped waiting stores its answer without one).
    pub(super) leader: Option<Leader>,
    /// The primary key, and after it the variant's part when the lookup found the names the
    /// stored response varied on (`primary_len` says where the primary key ends).
    pub(super) key: Vec<u8>,
    pub(super) primary_len: usize,
    /// The request head as forwarded, for the values of the fields a `Vary` names.
    pub(super) forwarded_head: Vec<u8>,
    pub(super) control: RequestControl,
    pub(super) authorization: bool,
    /// When the request went, in milliseconds since the epoch.
    pub(super) requested: u64,
    pub(super) rules: FreshnessRules,
    pub(super) max_object_size: u64,
    /// The stale object this fetch asks the server about, with its validators (a 304 refreshes
    /// it).
    pub(super) validating: Option<Arc<Entry>>,
    /// Missed in memory, the entry may be on disk (`[cache.disk]`): read there first.
    pub(super) on_disk: bool,
}

/// An answer being stored as it streams to the client (its body gathered in the flight, where
/// the followers read it as it comes).
pub struct Filling {
    pub(super) store: WorkerStore,
    pub(super) leader: Option<Leader>,
    /// Its whole key (with the variant's part when it varies).
    pub(super) key: Vec<u8>,
    /// The primary key and the names it varies on, when it varies.
    pub(super) variants: Option<(Vec<u8>, Vec<u8>)>,
    pub(super) head: Box<[u8]>,
    /// The body's bytes as they come: counted, or out of their chunked framing.
    pub(super) gathering: Gathering,
    /// The body, when no flight gathers it.
    pub(super) body: Vec<u8>,
    pub(super) status: u16,
    pub(super) freshness: Freshness,
    pub(super) initial_age: u64,
    pub(super) etag: Option<Box<[u8]>>,
    pub(super) last_modified: Option<u64>,
    pub(super) tags: Vec<u8>,
}

impl FillPlan {
    pub(super) fn new(
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
    pub(super) fn ask(&self, out: &mut Vec<u8>) {
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
