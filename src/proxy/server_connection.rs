//! The server connection an attempt goes out on: one of this worker's idle connections to the
//! server, a stream on one of its HTTP/2 connections with room (or on one being made), or a new
//! connection — TCP, then TLS when the pool speaks it, then HTTP/2's preface when it speaks
//! that — within the connect deadline, waiting for a free descriptor as for a slot.

use std::time::Duration;

use crate::transport::Moment;

use super::attempt::Sending;
use super::context::ProxyContext;
use super::failure::Failure;
use crate::config::tls::ALPN_H2;
use crate::http2::servers::ConnectionSettings;
use crate::transport::deadline::timeout_at;
use crate::transport::{ServerStream, Stream};
use crate::upstream::{Server, Snapshot};

/// How often a connect that found no free descriptor is tried again.
const DESCRIPTOR_RETRY: Duration = Duration::from_millis(10);

/// The process (EMFILE) or the system (ENFILE) has no descriptor to spare.
fn is_out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// An idle connection to `server` from this worker, or a new one; with whether it was idle,
/// and when it was ready (the attempt's start for an idle one, fresh from the clock after
/// connecting).
pub(super) async fn server_connection(
    context: &ProxyContext,
    snapshot: &Snapshot,
    server: &Server,
    fresh_only: bool,
    sending: &Sending,
) -> Result<(ServerStream, bool, Moment), Failure> {
    let now = sending.began;
    let max_idle = (!fresh_only).then_some(snapshot.timeouts.backend_idle);
    let (idle, in_use) = context.take_idle(server.id, max_idle, now);
    if let Some(stream) = idle {
        context.counters().count_backend_connection(true);
        return Ok((ServerStream::new(stream, in_use), true, now));
    }
    let (deadline, expired) =
        sending.bound(now + snapshot.timeouts.connect, Failure::ConnectTimeout);
    let http2 = server.protocol.is_http2();
    if http2 && !fresh_only {
        // A stream on a connection this worker has to the server (or is making) with room.
        let connections = context.http2_servers();
        let tls = server.tls.is_some();
        if let Some(stream) = connections.stream_or_wait(server.id, tls, deadline).await {
            context.counters().count_backend_connection(true);
            return Ok((ServerStream::new(stream, in_use), true, now));
        }
    }
    let _connecting = http2.then(|| context.http2_servers().begin_connecting(server.id));
    context.counters().count_backend_connection(false);
    let pool = &snapshot.pools[sending.facts.choice.pool];
    pool.traffic.record_connection_opened(context.index);
    server.traffic.record_connection_opened(context.index);
    // Out of descriptors (the budget was set above the open-file limit, or something else holds
    // them): the request waits for one as it would for a slot, then gets 503; the server is not
    // blamed, and nothing was sent.
    let wait_for_descriptor = now + pool.queue_timeout.min(snapshot.timeouts.connect);
    // The deadline covers a TLS handshake too.
    let connect = async {
        let stream = loop {
            match Stream::connect(&server.addr).await {
                Err(error) if is_out_of_descriptors(&error) => {
                    // Given up a retry early, so that the connect deadline does not fire first.
                    if Moment::now() + DESCRIPTOR_RETRY >= wait_for_descriptor {
                        return Err(Failure::NoDescriptor);
                    }
                    tokio::time::sleep(DESCRIPTOR_RETRY).await;
                }
                connected => break connected.map_err(|e| Failure::ConnectFailed(e.kind()))?,
            }
        };
        let stream = match &server.tls {
            None => stream,
            Some(tls) => stream
                .start_tls(tls)
                .await
                .map_err(|failure| Failure::server_tls(&failure))?,
        };
        if !http2 {
            return Ok(stream);
        }
        if server.tls.is_some() && !stream.agreed_alpn(ALPN_H2) {
            return Err(Failure::ServerTls(
                "the server did not agree to HTTP/2 (ALPN h2) for a pool with protocol = \"h2\"",
            ));
        }
        let settings = ConnectionSettings {
            stream_window: snapshot.http2.stream_window,
            connection_window: snapshot.http2.connection_window,
            idle: snapshot.timeouts.backend_idle,
        };
        Ok(context.http2_servers().connect(server.id, stream, settings))
    };
    match timeout_at(deadline, connect).await {
        Err(_) => Err(expired),
        Ok(Err(failure)) => Err(failure),
        Ok(Ok(stream)) => Ok((ServerStream::new(stream, in_use), false, Moment::now())),
    }
}
