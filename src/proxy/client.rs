//! One client as its exchanges see it: the session's side of the connection behind the
//! [`Downstream`] contract, the peer's address as X-Forwarded-For writes it and the client's the
//! request is served as, and what the
//! exchanges reuse from one request to the next (the heads herdsman writes, the server's bytes not
//! yet relayed, what the access log keeps of the current request).

use std::net::{IpAddr, SocketAddr};

use super::cached::CacheStep;
use super::downstream::Downstream;
use crate::access_log::CapturedRequest;
use crate::http1::forward::{client_ip, AddressText};
use crate::rules::headers::RequestText;
use crate::rules::request_id::RequestId;
use crate::transport::deadline::{Timer, TimerWaits};
use crate::transport::{recycle, Buffer, BUFFER_INITIAL};

/// One client and the buffers its exchanges use.
pub struct Client<D> {
    /// The session's side: the request, its body, the response's way back.
    pub(super) downstream: D,
    /// The peer's address as X-Forwarded-For writes it.
    pub(super) forwarded_for: AddressText,
    /// The client's address the current request is served as (`rules::client_address`): the
    /// peer's, or the one a trusted proxy named (`[real_ip]`). What routing, hashing,
    /// conditions, access rules and the access log see.
    pub(super) address: IpAddr,
    /// `address` as the access log writes it, formatted again only when `address` changes.
    pub(super) address_text: AddressText,
    /// Bytes from the server of the current exchange not yet relayed.
    pub(super) server_buffer: Buffer,
    /// Scratch space for the heads herdsman writes.
    pub(super) out: Vec<u8>,
    /// What the access log shows of the current request's head; captured only on a listener
    /// with an access log, so that the others pay nothing for it.
    pub(super) request_log: CapturedRequest,
    /// The `Strict-Transport-Security` line its responses get (its listener's `hsts`, over TLS
    /// only); empty on a cleartext connection.
    pub(super) hsts: Vec<u8>,
    /// The `X-Forwarded-Client-Cert` value its requests carry: the client certificate its TLS
    /// handshake verified, for the whole connection; empty without one.
    pub(super) client_certificate: Box<[u8]>,
    /// The connection's entry in the worker's timer wheel, for the waits that come one after
    /// another on every request: the next request's first bytes, a server's response head.
    timer: Timer,
    /// What the cache does for the current request (nothing, for a pool that does not cache).
    pub(super) cache: CacheStep,
    /// The current request's id (`[request_id]`); empty without one.
    pub(super) request_id: RequestId,
    /// The current request's host, target and method, where header rules render them after
    /// its head is consumed (`proxy::header_rules`).
    pub(super) request_text: RequestText,
}

impl<D: Downstream> Client<D> {
    pub fn new(downstream: D) -> Client<D> {
        let peer = client_ip(downstream.peer());
        let forwarded_for = AddressText::new(peer);
        let client_certificate = downstream
            .tls()
            .and_then(|tls| tls.client_certificate.as_ref())
            .map_or_else(Box::default, |cert| Box::from(cert.forwarded.as_bytes()));
        Client {
            downstream,
            forwarded_for,
            address: peer,
            address_text: forwarded_for,
            server_buffer: Buffer::new(),
            out: Vec::new(),
            request_log: CapturedRequest::default(),
            hsts: Vec::new(),
            client_certificate,
            timer: Timer::new(),
            cache: CacheStep::default(),
            request_id: RequestId::none(),
            request_text: RequestText::default(),
        }
    }

    /// The waits made through the connection's own timer entry (one at a time).
    pub fn timer(&self) -> TimerWaits {
        self.timer.waits()
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.downstream.peer()
    }

    /// The session's side, for what it does between exchanges.
    pub fn downstream(&mut self) -> &mut D {
        &mut self.downstream
    }

    /// The session's side, the exchanges over; with the bytes the server sent that were not
    /// relayed (after a 101: the first bytes of the new protocol).
    pub fn into_parts(self) -> (D, Buffer) {
        (self.downstream, self.server_buffer)
    }

    /// Gives the exchanges' memory back to the worker's free list between requests, so an idle
    /// connection costs only its socket and its task.
    pub fn release_idle_memory(&mut self) {
        self.server_buffer.release_if_empty();
        // Scratch space: nothing in it outlives the exchange that wrote it.
        recycle::give_back_bytes(std::mem::take(&mut self.out));
        recycle::give_back_bytes(self.request_log.take_storage());
    }
}

/// `Client::out`, emptied, with room for a usual head (from the free list after an idle spell).
pub fn scratch(out: &mut Vec<u8>) -> &mut Vec<u8> {
    if out.capacity() == 0 {
        *out = recycle::take_bytes(BUFFER_INITIAL);
    }
    out.clear();
    out
}
