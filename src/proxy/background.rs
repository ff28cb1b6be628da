//! Fetches no client waits for: a stale object served at once (`stale-while-revalidate`, a
//! pool's `grace`) is refreshed by a request of herdsman's own, run on the worker as a task of
//! its own through the same exchange as a client's — routed, balanced, retried, logged — with
//! a client side that sends the stored request head and takes the answer nowhere.

use std::future::pending;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::cached::Refresh;
use super::context::ProxyContext;
use super::downstream::{BodySource, Downstream};
use super::{serve_one, Client};
use crate::transport::{Buffer, Moment, TlsFacts};

/// Starts the background fetch `refresh` for the request of `client` on `listener` (its
/// address and TLS facts are the fetch's, for what the server is told of the client).
pub fn refresh<D: Downstream>(
    context: &ProxyContext,
    refresh: Refresh,
    client: &D,
    listener: usize,
) {
    let client = Background {
        received: Buffer::from(refresh.request_head),
        peer: client.peer(),
        tls: client.tls().cloned(),
    };
    let plan = refresh.plan;
    context.spawn(move |context| async move {
        let snapshot = context.snapshot();
        let mut client = Client::new(client);
        client.cache.refreshing = Some(plan);
        serve_one(&context, &mut client, &snapshot, listener).await;
    });
}

/// The client side of a background fetch: the request head, no body, and a sink for the
/// answer (which the cache has taken as it came).
struct Background {
    received: Buffer,
    peer: SocketAddr,
    tls: Option<TlsFacts>,
}

/// A request body that is empty, from a client that never goes away.
struct NoBody;

impl AsyncRead for NoBody {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl BodySource for NoBody {
    async fn closed(&mut self) {
        pending().await
    }
}

impl Downstream for Background {
    type Source<'a> = NoBody;
    type Sink<'a> = tokio::io::Sink;

    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn tls(&self) -> Option<&TlsFacts> {
        self.tls.as_ref()
    }

    fn received(&mut self) -> &mut Buffer {
        &mut self.received
    }

    async fn receive(&mut self, _most: usize) -> io::Result<usize> {
        Ok(0)
    }

    fn split(&mut self) -> (NoBody, &mut Buffer, tokio::io::Sink) {
        (NoBody, &mut self.received, tokio::io::sink())
    }

    async fn send(&mut self, _bytes: &[u8], _deadline: Moment) -> Option<io::Result<()>> {
        Some(Ok(()))
    }
}
