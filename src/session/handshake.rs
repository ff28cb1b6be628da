//! A TLS listener's connection before its first request: the handshake, bounded by
//! `[timeouts] tls_handshake` from the connection's arrival and counted by how it ended.
//! Cleartext HTTP sent to the TLS port is answered with a plain 400 that says so (as nginx
//! does), then closed; anything else that is not TLS is closed at once. A TLS-ALPN-01
//! validator's connection (ALPN `acme-tls/1`) is closed once its handshake ends.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::transport::Moment;

use super::connection::Connection;
use crate::config::acme::ALPN_ACME_TLS;
use crate::config::tls::ListenerTls;
use crate::proxy::{Downstream, ProxyContext};
use crate::stats::log_every::LogEvery;
use crate::stats::tls::HandshakeFailed;
use crate::transport::deadline::timeout_at;
use crate::transport::{Buffer, Detached, HandshakeFailure, Stream};

/// Handshakes refused for want of an ALPN protocol in common are logged at most this often,
/// process-wide, each line saying how many more there were since the last.
const ALPN_REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);
static ALPN_REFUSALS: LogEvery = LogEvery::new();

/// What a client that spoke cleartext HTTP to a TLS port is told.
const PLAIN_HTTP_TO_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
Content-Type: text/plain; charset=utf-8\r\n\
Content-Length: 69\r\n\
Connection: close\r\n\
\r\n\
This port speaks HTTPS; the request came in plain HTTP. Use https://\n";

/// The handshake of a new connection on a TLS listener: its stream once it is done, `None` when
/// it failed (the connection is closed, the failure counted).
pub async fn handshake(
    context: &ProxyContext,
    stream: Detached,
    tls: &ListenerTls,
    peer: SocketAddr,
    deadline: Moment,
) -> Option<Stream> {
    let counters = &context.counters().tls;
    let started = Moment::now();
    let handshaking = &context.load().handshaking;
    handshaking.fetch_add(1, Ordering::Relaxed);
    let done = timeout_at(deadline, stream.accept_tls(&tls.server_config)).await;
    handshaking.fetch_sub(1, Ordering::Relaxed);
    let failure = match done {
        Ok(Ok(stream)) => {
            let resumed = stream.tls_facts().is_some_and(|facts| facts.resumed);
            counters.finished(resumed, started.elapsed());
            if stream.agreed_alpn(ALPN_ACME_TLS) {
                // A TLS-ALPN-01 validator: the handshake was its answer, and no HTTP follows
                // (RFC 8737 §3).
                tracing::debug!(client = %peer, "TLS-ALPN-01 validation answered; closing");
                stream.close_notify_now();
                return None;
            }
            return Some(stream);
        }
        Ok(Err(failure)) => failure,
        Err(_elapsed) => {
            counters.failed(HandshakeFailed::Timeout);
            tracing::debug!(client = %peer, "TLS handshake timed out");
            return None;
        }
    };
    let reason = failure.reason();
    counters.failed(reason);
    if reason == HandshakeFailed::Alpn {
        // Said, unlike other failures, as clients that fail so fail alike and never get in
        // (a gRPC client offers only h2): rate-limited, since they may be thousands.
        if let Some(held_back) = ALPN_REFUSALS.allow(ALPN_REFUSAL_LOG_EVERY) {
            // Still the handshake's step: the ClientHello noted is this connection's.
            let offered = crate::config::certificates::offered_alpn();
            let speaks = tls.alpn_spoken();
            tracing::warn!(client = %peer, offered, speaks, more_since_last = held_back, "TLS handshake refused: the client offered only ALPN protocols this listener does not speak");
        }
    } else {
        tracing::debug!(client = %peer, reason = reason.name(), ?failure, "TLS handshake failed");
    }
    if let HandshakeFailure::PlainHttp(stream) = failure {
        answer_plain_http(stream, peer, deadline).await;
    }
    None
}

/// Tells a cleartext client it reached a TLS port, then closes lingering (its request is unread,
/// and a close with unread bytes would reset the answer away).
async fn answer_plain_http(stream: Detached, peer: SocketAddr, deadline: Moment) {
    let Ok(stream) = stream.into_stream() else {
        return;
    };
    let mut connection = Connection::with_received(stream, Buffer::new(), peer);
    if let Some(Ok(())) = connection.send(PLAIN_HTTP_TO_TLS, deadline).await {
        connection.close_gracefully().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_to_plain_http_is_framed_by_its_length() {
        let text = std::str::from_utf8(PLAIN_HTTP_TO_TLS).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }
}
