//! The response half of an exchange: read the server's head (relaying interim 1xx responses),
//! write the client's head, relay the body (streamed, or through a spool at the server's pace:
//! `spooled.rs`), then keep the server connection for reuse if the message ended cleanly — or
//! tunnel bytes both ways after a 101.

use std::cell::Cell;
use std::future::poll_fn;

use crate::transport::Moment;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::cached::Tee;
use super::client::scratch;
use super::compressed::respond_compressed;
use super::context::ProxyContext;
use super::downstream::{BodySource, Downstream};
use super::facts::RequestFacts;
use super::failure::Failure;
use super::outcome::Outcome;
use super::request_body::upload_failure;
use super::spooled::{relay_spooled, Pace, Taker};
use super::{Client, Exchanged, Next};
use crate::compress::{answer_compression, Compressing};
use crate::config::{Algorithm, CompressionRules};
use crate::http1::forward::{write_response_head, ClientFraming, OwnFields};
use crate::http1::relay::{BodyRelay, RelayError};
use crate::http1::{header_slots, keep_alive, parse_response, Body, Response};
use crate::stats::WorkerCounters;
use crate::transport::{
    recycle, Buffer, ReadHalf, ServerStream, Spool, SpoolLimits, BUFFER_INITIAL,
};
use crate::upstream::{Server, Snapshot};

/// Largest response head accepted from a server.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// The final response head, as far as the rest of the exchange needs it. Its client-side form
/// is already written into `client.out`, from the one parse of the server's head.
#[derive(Debug, Clone, Copy)]
pub struct ResponseStart {
    /// The final response's status.
    pub status: u16,
    /// When the head was at hand: the end of the server's time, and the start of the wait for
    /// the client to take the head (one clock read serves both).
    pub arrived: Moment,
    switching: bool,
    pub(super) body: Body,
    dechunk: bool,
    /// The client connection closes after this response.
    close: bool,
    /// … and may still be sending when it does: it asked to keep the connection (herdsman chose
    /// to close it: a stop, a body that ends with the connection) or its request had a body.
    linger: bool,
    server_keeps_alive: bool,
    /// How long the connection may stay idle, from the server's `Keep-Alive: timeout=N`.
    server_idle_limit: Option<std::time::Duration>,
    /// The longest the server may be silent inside the body: the request's `backend_read`.
    backend_read: std::time::Duration,
    /// The body (not all at hand with the head) may be read at the server's pace: its route
    /// allows it, and the server did not ask for a stream.
    spool: bool,
    /// herdsman compresses the body (`compress::`), and so streams it.
    compressing: Option<Compressing>,
    /// The client reads chunked bodies (HTTP/1.1, or an HTTP/2 stream).
    client_chunked: bool,
}

impl ResponseStart {
    /// The longest the server may be silent inside the body.
    pub(super) fn backend_read(&self) -> std::time::Duration {
        self.backend_read
    }

    /// Whether a body herdsman re-frames goes chunked (else until the close).
    pub(super) fn client_reads_chunked(&self) -> bool {
        self.client_chunked
    }

    /// What the client connection does once this response is relayed.
    #[inline(always)]
    pub(super) fn next(&self) -> Exchanged {
        match self.close {
            true => Next::Close {
                linger: self.linger,
            },
            false => Next::KeepAlive,
        }
        .into()
    }

    /// How the body reaches the client: its framing, unless it is de-chunked for an HTTP/1.0
    /// client (then until the close).
    pub fn body_to_client(&self) -> Body {
        match self.dechunk {
            true => Body::UntilClose,
            false => self.body,
        }
    }
}

/// What the bytes at the front of the server's buffer hold.
enum Examined {
    Incomplete,
    /// An interim (1xx) response, its client-side head in `interim` if the client gets it.
    Interim {
        head_len: usize,
        relay: bool,
    },
    Final {
        head_len: usize,
        start: ResponseStart,
    },
}

/// What decides the head the client gets for a response: the request's facts, the sticky
/// cookie to set, and whether the connection closes after it.
#[derive(Clone, Copy)]
pub struct Expected<'a> {
    pub facts: RequestFacts,
    /// herdsman's own fields: its sticky cookie, its `Strict-Transport-Security`.
    pub own: OwnFields<'a>,
    /// When the head arrives: whether the request body was all sent (if not, both connections
    /// close after the response).
    pub upload_done: &'a Cell<bool>,
    /// Whether a stop began (then the client connection closes after the response).
    pub context: &'a ProxyContext,
    /// The route's compression, when the client takes one of its algorithms
    /// (`facts.compress`).
    pub compression: Option<&'a CompressionRules>,
}

/// Reads until `buffer` starts with a complete final response head, relaying interim 1xx
/// responses to an HTTP/1.1 client (dropping them for HTTP/1.0). On success the head is consumed
/// from `buffer` and the head for the client, as `expected` makes it, is in `out`. No timeout
/// here: the caller bounds the wait.
pub async fn read_response_head<W>(
    server: &mut ReadHalf<'_>,
    buffer: &mut Buffer,
    client: &mut W,
    out: &mut Vec<u8>,
    expected: Expected<'_>,
) -> Result<ResponseStart, Failure>
where
    W: AsyncWrite + Unpin,
{
    // Interim heads get their own (rare) vector: `out` still holds the request, which a retry
    // on a fresh connection sends again.
    let mut interim = Vec::new();
    loop {
        if !buffer.is_empty() {
            let Expected {
                facts,
                own,
                upload_done,
                context,
                compression,
            } = expected;
            let closing = || !upload_done.get() || context.is_stopping();
            let compression = match (facts.compress, compression) {
                (Some(algorithm), Some(rules)) => Some((algorithm, rules, context)),
                _ => None,
            };
            let examined = examine_head(
                buffer.data(),
                (facts, compression),
                &own,
                closing,
                out,
                &mut interim,
            )?;
            match examined {
                Examined::Incomplete => {}
                Examined::Interim { head_len, relay } => {
                    if relay {
                        client
                            .write_all(&interim)
                            .await
                            .map_err(|_| Failure::ClientGone)?;
                    }
                    buffer.consume(head_len);
                    continue;
                }
                Examined::Final { head_len, start } => {
                    buffer.consume(head_len);
                    return Ok(start);
                }
            }
        }
        if buffer.is_empty() {
            // Readiness first: the buffer is taken once the server's bytes are there, so the
            // wait for a server (one still reading a slow upload, say) holds none and costs no
            // give-and-take of a block. poll_read_ready wakes as poll_read does (`readable`
            // queues a waiter, measurably dearer per request).
            poll_fn(|cx| server.poll_read_ready(cx))
                .await
                .map_err(|e| Failure::server_io(&e))?;
        }
        match buffer
            .read_from(server, BUFFER_INITIAL, MAX_RESPONSE_HEAD)
            .await
        {
            Ok(0) if buffer.is_empty() => return Err(Failure::ServerClosed),
            Ok(0) => return Err(Failure::BadResponse("incomplete response head")),
            Ok(_) => {}
            Err(e) => return Err(Failure::server_io(&e)),
        }
    }
}

/// Parses the head at the front of `bytes` once and, when it is complete, writes the head the
/// client gets into `out`. Synchronous, so the array of header slots never lives in a future
/// across an await (it is 4 KiB, and every future holding it is copied when it moves).
#[inline]
fn examine_head(
    bytes: &[u8],
    (facts, compression): (RequestFacts, Option<Compression<'_>>),
    own: &OwnFields<'_>,
    closing: impl Fn() -> bool,
    out: &mut Vec<u8>,
    interim: &mut Vec<u8>,
) -> Result<Examined, Failure> {
    let mut headers = header_slots();
    let parsed = parse_response(bytes, &mut headers, facts.method, MAX_RESPONSE_HEAD)
        .map_err(Failure::from_response_head)?;
    let Some(response) = parsed else {
        return Ok(Examined::Incomplete);
    };
    let head_len = response.head_len;
    if response.is_interim() {
        // Not a second `100 Continue` to a client herdsman sent one (it read the body itself).
        let relay = facts.minor_version == 1 && !(response.code == 100 && facts.continue_sent);
        if relay {
            let framing = ClientFraming {
                close: false,
                http10_keep_alive: false,
                dechunk: false,
                content_coding: None,
            };
            interim.clear();
            write_response_head(
                &response,
                framing,
                &OwnFields::default(),
                MAX_RESPONSE_HEAD,
                interim,
            )
            .map_err(Failure::from_response_head)?;
        }
        return Ok(Examined::Interim { head_len, relay });
    }
    let switching = response.code == 101;
    if switching && !facts.upgrade {
        return Err(Failure::BadResponse("101 to a request without Upgrade"));
    }
    let compressing = match compression {
        Some(compression) => compression_of(&response, compression),
        None => None,
    };
    // An HTTP/1.0 client cannot read chunked: send the data and end it by closing. So too a
    // body herdsman compresses for it.
    let http10 = facts.minor_version == 0;
    let dechunk = response.body == Body::Chunked && http10;
    let close_delimited = dechunk || compressing.is_some() && http10;
    let close =
        !facts.keep_alive || response.body == Body::UntilClose || close_delimited || closing();
    let framing = ClientFraming {
        close,
        http10_keep_alive: http10 && !close,
        dechunk: close_delimited,
        content_coding: compressing.map(|c| c.algorithm.token()),
    };
    write_response_head(&response, framing, own, MAX_RESPONSE_HEAD, scratch(out))
        .map_err(Failure::from_response_head)?;
    let start = ResponseStart {
        status: response.code,
        arrived: Moment::now(),
        switching,
        body: response.body,
        dechunk,
        close,
        linger: facts.keep_alive || !matches!(facts.body, Body::None | Body::Length(0)),
        server_keeps_alive: response.keep_alive,
        server_idle_limit: match response.keep_alive {
            true => keep_alive::idle_limit(response.headers),
            false => None,
        },
        backend_read: facts.timeouts.backend_read,
        spool: facts.buffering.response
            && !body_at_hand(response.body, bytes.len() - head_len)
            && !response.asks_to_stream(),
        compressing,
        client_chunked: !http10,
    };
    Ok(Examined::Final { head_len, start })
}

/// The algorithm a client takes, the route's compression, and the worker whose counters count
/// the answers left as they were.
type Compression<'a> = (Algorithm, &'a CompressionRules, &'a ProxyContext);

/// How an answer is compressed (never a 101's), or `None`, counted by reason.
#[cold]
#[inline(never)]
fn compression_of(
    response: &Response<'_, '_>,
    compression: Compression<'_>,
) -> Option<Compressing> {
    let (algorithm, rules, context) = compression;
    if response.code == 101 {
        return None;
    }
    match answer_compression(rules, algorithm, response) {
        Ok(compressing) => Some(compressing),
        Err(why) => {
            context.counters().compression.skipped(why);
            None
        }
    }
}

/// Whether a body of this framing is whole in the `after_head` bytes read with its head.
#[inline]
fn body_at_hand(body: Body, after_head: usize) -> bool {
    match body {
        Body::None => true,
        Body::Length(length) => after_head as u64 >= length,
        Body::Chunked | Body::UntilClose => false,
    }
}

/// A server's answer whose head arrived: who answered, the head, the connection it came on, and
/// whether the request body was all sent (if not, both connections close after the response,
/// unless the call is full duplex and the rest of the upload goes on beside the response).
pub struct Answer<'s> {
    pub server: &'s Server,
    pub start: ResponseStart,
    pub upstream: ServerStream,
    pub upload_finished: bool,
    /// The upload still under way of a full-duplex call (gRPC), relayed beside the response.
    pub duplex_upload: Option<&'s mut BodyRelay>,
}

/// Writes the response whose client-side head is in `client.out` to the client and streams its
/// body.
pub async fn respond<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    answer: Answer<'_>,
    outcome: &mut Outcome,
) -> Result<Exchanged, Failure> {
    if let Some(compressing) = answer.start.compressing {
        // Boxed: its relay and encoder's state would otherwise grow every exchange's future,
        // which each request moves; an answer that compresses allocates its encoder anyway.
        let compressed =
            respond_compressed(context, client, snapshot, answer, compressing, outcome);
        return Box::pin(compressed).await;
    }
    let Answer {
        server,
        start,
        mut upstream,
        upload_finished,
        duplex_upload,
    } = answer;
    let timeouts = snapshot.timeouts;
    let mut download = BodyRelay::new(start.body, start.dechunk, 0);
    let head_len = client.out.len();
    download
        .take_buffered_into_room(&mut client.server_buffer, &mut client.out)
        .map_err(download_failure)?;
    let server_done_with_head = download.is_done();
    if let Some(filling) = client.cache.filling.as_mut() {
        filling.take(&client.out[head_len..]);
        if server_done_with_head {
            // Whole already: stored before the client has it, so that its next request finds
            // it stored rather than still in flight.
            if let Some(filling) = client.cache.filling.take() {
                filling.finish();
            }
        }
    }
    let deadline = start.arrived + timeouts.client_idle;
    head_sent(client.downstream.send(&client.out, deadline).await)?;
    let_go_after_head(client, outcome);

    if start.switching {
        return Ok(Exchanged::Switched(upstream.into_finished()));
    }
    let mut keep = Keep {
        context,
        server,
        start: &start,
        upload_finished,
    };
    if let Some(upload) = duplex_upload {
        let relayed = relay_duplex(client, snapshot, &mut download, upload, &mut upstream).await;
        outcome.body_bytes = download.data_seen();
        keep.upload_finished = relayed?;
        keep.release(upstream, &client.server_buffer, Moment::now());
    } else if !download.is_done() && start.spool && snapshot.buffering.response_memory > 0 {
        let relayed = relay_through_spool(
            context,
            client,
            snapshot,
            &mut download,
            upstream,
            keep,
            outcome,
        )
        .await;
        if relayed.is_err() {
            // A body read to its end though its client left is stored all the same.
            if let Some(filling) = client.cache.filling.take() {
                filling.finish();
            }
        }
        relayed?;
    } else if client.cache.filling.is_some() {
        let relayed = relay_filling(client, snapshot, &mut download, upstream, keep, outcome).await;
        if relayed.is_err() {
            if let Some(filling) = client.cache.filling.take() {
                filling.finish();
            }
        }
        relayed?;
    } else {
        let (mut client_read, _, mut client_write) = client.downstream.split();
        let relayed = download
            .relay_watching(
                &mut *upstream,
                &mut client.server_buffer,
                &mut client_write,
                start.backend_read,
                timeouts.client_idle,
                client_read.closed(),
            )
            .await;
        outcome.body_bytes = download.data_seen();
        relayed.map_err(download_failure)?;
        // The server's part ended when its last byte came: with the head, for a whole response
        // (its idle time, which its keep-alive counts, began then); else just now.
        let since = match server_done_with_head {
            true => start.arrived,
            false => Moment::now(),
        };
        keep.release(upstream, &client.server_buffer, since);
    }
    if let Some(filling) = client.cache.filling.take() {
        filling.finish();
    }
    Ok(start.next())
}

/// What the client's send of a response head came to.
#[inline(always)]
pub(super) fn head_sent(sent: Option<std::io::Result<()>>) -> Result<(), Failure> {
    match sent {
        None => Err(Failure::ClientStalled),
        Some(Err(_)) => Err(Failure::ClientGone),
        Some(Ok(())) => Ok(()),
    }
}

/// Once the head is sent: the response has started, and nothing of the client's is read while
/// the body goes out (a pipelined request not yet read waits in the socket), so a slow reader
/// holds only the response bytes on their way to it.
#[inline(always)]
pub(super) fn let_go_after_head<D: Downstream>(client: &mut Client<D>, outcome: &mut Outcome) {
    outcome.response_started = true;
    client.downstream.received().release_if_empty();
    recycle::give_back_bytes(std::mem::take(&mut client.out));
}

/// The rest of a response body the cache stores, relayed as any other with each write copied
/// into its fill. Apart from `respond`'s own relay, which would otherwise go through the copying
/// writer too, and kept out of line: sharing one relay with it cost a keep-alive request about
/// 100 instructions (callgrind: `respond` no longer inlined into `forward`).
#[cold]
#[inline(never)]
async fn relay_filling<D: Downstream>(
    client: &mut Client<D>,
    snapshot: &Snapshot,
    download: &mut BodyRelay,
    mut upstream: ServerStream,
    keep: Keep<'_>,
    outcome: &mut Outcome,
) -> Result<(), Failure> {
    let (_, _, mut client_write) = client.downstream.split();
    let Some(filling) = client.cache.filling.as_deref_mut() else {
        return Ok(());
    };
    let mut sink = Tee {
        inner: &mut client_write,
        filling,
        client_failed: None,
    };
    // Not watched for the client's going: the body is read to its end for the fill, and the
    // client's failure, if any, said after (`Tee`).
    let relayed = download
        .relay_watching(
            &mut *upstream,
            &mut client.server_buffer,
            &mut sink,
            keep.start.backend_read,
            snapshot.timeouts.client_idle,
            std::future::pending(),
        )
        .await;
    outcome.body_bytes = download.data_seen();
    let client_failed = sink.client_failed;
    relayed.map_err(download_failure)?;
    keep.release(upstream, &client.server_buffer, Moment::now());
    match client_failed {
        Some(_) => Err(Failure::ClientGone),
        None => Ok(()),
    }
}

/// A full-duplex call's response body and the rest of its request body at once, each at its own
/// pace (a bidirectional gRPC call's messages go both ways while it lasts). Returns whether the
/// request body ended too: a response that ends first leaves the rest of the upload unsent, and
/// the server connection is not kept.
#[cold]
async fn relay_duplex<D: Downstream>(
    client: &mut Client<D>,
    snapshot: &Snapshot,
    download: &mut BodyRelay,
    upload: &mut BodyRelay,
    upstream: &mut ServerStream,
) -> Result<bool, Failure> {
    let client_idle = snapshot.timeouts.client_idle;
    let backend_read = snapshot.timeouts.backend_read;
    let (mut client_read, received, mut client_write) = client.downstream.split();
    let (mut server_read, mut server_write) = upstream.split();
    let up = upload.relay(
        &mut client_read,
        received,
        &mut server_write,
        client_idle,
        backend_read,
    );
    let down = download.relay(
        &mut server_read,
        &mut client.server_buffer,
        &mut client_write,
        backend_read,
        client_idle,
    );
    tokio::pin!(up, down);
    let mut upload_ended = false;
    loop {
        tokio::select! {
            relayed = &mut down => {
                relayed.map_err(download_failure)?;
                return Ok(upload_ended);
            }
            sent = &mut up, if !upload_ended => {
                sent.map_err(upload_failure)?;
                upload_ended = true;
            }
        }
    }
}

/// The rest of a response body through a spool: read at the server's pace, the server's
/// connection released as soon as the body is complete, the client fed at its own.
#[cold]
async fn relay_through_spool<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    download: &mut BodyRelay,
    upstream: ServerStream,
    keep: Keep<'_>,
    outcome: &mut Outcome,
) -> Result<(), Failure> {
    let counters = context.counters();
    WorkerCounters::bump(&counters.buffered_responses);
    outcome.buffered.response = true;
    let buffering = &snapshot.buffering;
    let mut spool = Spool::new(SpoolLimits {
        memory: buffering.response_memory,
        file: buffering.response_max,
        memory_total: buffering.memory_total,
        disk_total: buffering.disk_total,
        dir: &buffering.temp_dir,
        usage: context.buffer_use(),
    });
    let pace = Pace {
        backend_read: keep.start.backend_read,
        client_idle: snapshot.timeouts.client_idle,
        buffering,
    };
    let (mut client_read, _, mut client_write) = client.downstream.split();
    let release = |upstream, rest: &Buffer| keep.release(upstream, rest, Moment::now());
    // A response the cache stores is taken into its fill as it comes from the server, at the
    // server's pace (its followers are not held to this client's), and read to its end if this
    // client goes away: the fetch is the followers' too.
    let mut filling = client.cache.filling.as_deref_mut();
    let taker = Taker {
        outlives_client: filling.is_some(),
        take: |piece: &[u8]| {
            if let Some(filling) = filling.as_deref_mut() {
                filling.take(piece);
            }
        },
    };
    let relayed = relay_spooled(
        download,
        upstream,
        &mut client.server_buffer,
        &mut client_write,
        client_read.closed(),
        &mut spool,
        pace,
        release,
        taker,
    )
    .await;
    outcome.body_bytes = download.data_seen();
    if spool.spilled {
        WorkerCounters::bump(&counters.spilled_bodies);
        outcome.buffered.response_on_disk = true;
    }
    if spool.was_full {
        WorkerCounters::bump(&counters.buffering_full);
    }
    if relayed == Err(RelayError::SinkTooSlow) {
        WorkerCounters::bump(&counters.slow_response_readers);
    }
    relayed.map_err(download_failure)
}

/// A response without a body that does not go to the client as it came (a 304 that refreshed a
/// stored object): its server connection is kept for reuse as after any other.
pub fn release_bodiless(context: &ProxyContext, answer: Answer<'_>, rest: &Buffer) {
    let keep = Keep {
        context,
        server: answer.server,
        start: &answer.start,
        upload_finished: answer.upload_finished,
    };
    keep.release(answer.upstream, rest, answer.start.arrived);
}

/// What decides whether a server connection is kept once its response is read.
pub(super) struct Keep<'a> {
    pub(super) context: &'a ProxyContext,
    pub(super) server: &'a Server,
    pub(super) start: &'a ResponseStart,
    pub(super) upload_finished: bool,
}

impl Keep<'_> {
    /// Keeps the connection for reuse only if its last message ended exactly where the server
    /// said it would (`rest`, what came after it, is empty) and the server keeps it alive, idle
    /// from `since`. One that did but is not kept is closed normally; one that did not (the
    /// request body not all sent, or bytes after the response) is dropped as it is, and so reset.
    #[inline]
    pub(super) fn release(&self, upstream: ServerStream, rest: &Buffer, since: Moment) {
        if !(self.upload_finished && rest.is_empty()) {
            return;
        }
        let upstream = upstream.into_finished();
        // A multiplexed stream is done with its response; its connection stays with the room
        // that made it.
        if self.start.server_keeps_alive && !upstream.is_multiplexed() {
            let (caps, limit) = (self.server.idle_caps, self.start.server_idle_limit);
            self.context
                .keep_idle(self.server.id, upstream, caps, since, limit);
        }
    }
}

/// A response body that could not be relayed, as the server's or the client's failure.
pub(super) fn download_failure(error: RelayError) -> Failure {
    match error {
        RelayError::SourceEnded => Failure::ServerTruncated,
        RelayError::SourceIo(kind) => Failure::ServerIo(kind),
        RelayError::SourceTimeout => Failure::ResponseTimeout,
        RelayError::SinkIo(_) | RelayError::SinkGone => Failure::ClientGone,
        RelayError::SinkTimeout => Failure::ClientStalled,
        RelayError::SinkTooSlow => Failure::ReaderTooSlow,
        RelayError::Spool => Failure::SpoolFailed,
        RelayError::Framing(why) => Failure::BadResponse(why),
        RelayError::TooLarge => Failure::BadResponse("response body too large"),
    }
}
