//! Whether an answer is compressed (`compression`, decided with the request), and the response
//! half of an exchange whose answer herdsman compresses (`compress::`): its head,
//! already rewritten, goes alone; the body is read from the server with its framing taken off,
//! each piece compressed, flushed and written to the client as a chunk before the next read (an
//! event stream's events leave as they come); then the compressed stream's end. Streamed, never
//! spooled: the encoder's state (`bench/results/compression-levels.md`) and one piece are all an
//! answer holds.

use std::time::Duration;

use super::client::Client;
use super::context::ProxyContext;
use super::downstream::{BodySource, Downstream};
use super::failure::Failure;
use super::outcome::Outcome;
use super::respond::{download_failure, head_sent, let_go_after_head, Answer, Keep};
use super::Exchanged;
use crate::compress::{self, Compressing, CompressingSink, Encoder};
use crate::config::{Algorithm, CompressionRules};
use crate::http1::relay::BodyRelay;
use crate::http1::Request;
use crate::stats::compression::Skipped;
use crate::transport::deadline::timeout;
use crate::transport::Moment;
use crate::upstream::choice::Choice;
use crate::upstream::Snapshot;

/// Writes the head in `client.out` and the body compressed as `compressing` says.
#[cold]
#[inline(never)]
pub(super) async fn respond_compressed<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    answer: Answer<'_>,
    compressing: Compressing,
    outcome: &mut Outcome,
) -> Result<Exchanged, Failure> {
    let Answer {
        server,
        start,
        mut upstream,
        upload_finished,
        duplex_upload: _,
    } = answer;
    let client_idle = snapshot.timeouts.client_idle;
    // Its state is allocated per answer (zstd's context, brotli's and deflate's tables, 0.4 to
    // 2 MiB) and freed at its end: an answer that compresses pays it beside the compressing
    // itself, 2.6 to 9.2 ms of CPU a MiB (bench/results/compression-levels.md); keeping
    // encoders for reuse would hold that memory while no answer needs it. Only out of memory
    // fails it.
    let encoder = Encoder::new(compressing).map_err(|_| Failure::SpoolFailed)?;
    let deadline = start.arrived + client_idle;
    head_sent(client.downstream.send(&client.out, deadline).await)?;
    let_go_after_head(client, outcome);

    // Only the data goes to the encoder: a chunked body's framing (and trailers) stay behind.
    let mut download = BodyRelay::new(start.body, true, 0);
    let (mut client_read, _, mut client_write) = client.downstream.split();
    let mut sink = CompressingSink::new(&mut client_write, encoder, start.client_reads_chunked());
    let relayed = download
        .relay_watching(
            &mut *upstream,
            &mut client.server_buffer,
            &mut sink,
            start.backend_read(),
            client_idle,
            client_read.closed(),
        )
        .await;
    let ended = match relayed {
        Ok(()) => finish(&mut sink, client_idle).await,
        Err(error) => Err(download_failure(error)),
    };
    outcome.body_bytes = download.data_seen();
    context.counters().compression.compressed(
        compressing.algorithm.index(),
        sink.bytes_in,
        sink.bytes_out,
    );
    ended?;
    let keep = Keep {
        context,
        server,
        start: &start,
        upload_finished,
    };
    keep.release(upstream, &client.server_buffer, Moment::now());
    Ok(start.next())
}

/// The compressed stream's end, within `wait`.
async fn finish<W>(sink: &mut CompressingSink<'_, W>, wait: Duration) -> Result<(), Failure>
where
    W: tokio::io::AsyncWrite + Unpin,
{
    match timeout(wait, sink.finish()).await {
        Err(_) => Err(Failure::ClientStalled),
        Ok(Err(_)) => Err(Failure::ClientGone),
        Ok(Ok(())) => Ok(()),
    }
}

/// The algorithm the answer to `request` may be compressed with on a route of `rules`, or
/// `None`, counted by reason. `(grpc, upgrade)`: what else the exchange found of it. A route
/// that caches is left alone: its answers are stored and served as the server sent them.
#[cold]
#[inline(never)]
pub(super) fn compression(
    context: &ProxyContext,
    snapshot: &Snapshot,
    rules: &CompressionRules,
    request: &Request<'_, '_>,
    choice: &Choice,
    (grpc, upgrade): (bool, bool),
) -> Option<Algorithm> {
    let negotiated = match snapshot.cache_for(choice.route, choice.pool) {
        Some(_) => Err(Skipped::Cached),
        None => compress::negotiate(rules, request, grpc, upgrade),
    };
    match negotiated {
        Ok(algorithm) => Some(algorithm),
        Err(why) => {
            context.counters().compression.skipped(why);
            None
        }
    }
}
