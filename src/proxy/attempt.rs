//! One attempt at a server: a connection taken (idle or new), the request written — whole from
//! `client.out` (and a temporary file), or with its body still arriving, streamed by splice,
//! through a buffer, or kept in memory as it goes — and the response head read. What an attempt
//! that failed tells the replay rules (`replay.rs`) is in its [`Failed`].

use std::cell::Cell;

use crate::transport::Moment;

use super::context::ProxyContext;
use super::downstream::{BodySource, Downstream};
use super::facts::RequestFacts;
use super::failure::Failure;
use super::request_body::{upload_failure, BufferedBody};
use super::respond::{self, Expected, ResponseStart};
use super::server_connection::server_connection;
use super::Client;
use crate::http1::forward::OwnFields;
use crate::http1::relay::{BodyRelay, RelayError};
use crate::stats::WorkerCounters;
use crate::transport::deadline::timeout_at;
use crate::transport::{
    can_splice, recycle, write_all_by, Buffer, Pipe, ReadHalf, ServerStream, WriteHalf,
};
use crate::upstream::{Pool, Server, Snapshot};

/// A request on its way to servers: what is known of it, and the clock it runs against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sending {
    pub(super) facts: RequestFacts,
    /// `[timeouts] request`'s deadline, if set: no attempt waits past it, and none starts after.
    pub(super) deadline: Option<Moment>,
    /// When the first attempt began (a clock reading that serves more than this).
    pub(super) began: Moment,
}

impl Sending {
    /// The earlier of an attempt's own deadline and the request's, with the failure its
    /// expiry means.
    pub(super) fn bound(&self, own: Moment, own_failure: Failure) -> (Moment, Failure) {
        match self.deadline {
            Some(request) if request <= own => (request, Failure::RequestTimeout),
            _ => (own, own_failure),
        }
    }
}

impl Sending {
    /// The request goes to server `next` of `pool` now, on a new attempt.
    pub(super) fn moved_to(&mut self, next: usize, pool: &Pool) {
        self.facts.choice.server = Some(next);
        // The client is now on this server: a sticky pool says so with its cookie.
        self.facts.choice.assign_cookie = pool.sticky_cookie.is_some();
        self.began = Moment::now();
    }
}

/// An attempt that failed: why, and what the replay rules need to know of it.
pub(super) struct Failed {
    pub(super) failure: Failure,
    /// It went out on a connection kept idle from an earlier request.
    pub(super) reused: bool,
    /// The connection it went out on, and how many of the request's bytes were written to it.
    pub(super) connection: Option<(ServerStream, usize)>,
}

impl From<Failure> for Failed {
    fn from(failure: Failure) -> Failed {
        Failed {
            failure,
            reused: false,
            connection: None,
        }
    }
}

/// A connection to `server` for one attempt (`fresh_only`: not an idle one), whether it was kept
/// idle, and one deadline for sending the request and receiving the response head, with the
/// failure its passing means.
async fn connection_for(
    context: &ProxyContext,
    snapshot: &Snapshot,
    server: &Server,
    fresh_only: bool,
    sending: &Sending,
) -> Result<(ServerStream, bool, (Moment, Failure)), Failure> {
    let (upstream, reused, ready) =
        server_connection(context, snapshot, server, fresh_only, sending).await?;
    let timeout = ready + sending.facts.timeouts.backend_response;
    Ok((
        upstream,
        reused,
        sending.bound(timeout, Failure::ResponseTimeout),
    ))
}

/// Sends a request whose head and body are all in `client.out`, and reads the response head.
/// `fresh_only`: not on an idle connection (a reused one just failed it). A failure says what
/// the replay rules need (`replay.rs`).
pub(super) async fn send_whole<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    server: &Server,
    sending: &Sending,
    fresh_only: bool,
    body: Option<&BufferedBody<'_>>,
) -> Result<(ServerStream, ResponseStart, bool), Failed> {
    let upload_done = Cell::new(true);
    let facts = sending.facts;
    let (mut upstream, reused, (deadline, expired)) =
        connection_for(context, snapshot, server, fresh_only, sending).await?;
    let mut written = 0;
    let mut sent = write_all_by(&mut upstream, &client.out, deadline, &mut written)
        .await
        .map(|sent| sent.map_err(|e| Failure::server_io(&e)));
    if let (Some(Ok(())), Some(body)) = (&sent, body) {
        // The part of the body that went to a temporary file.
        sent = body
            .send_spilled(&mut upstream, deadline, &mut written)
            .await;
    }
    let sent = match sent {
        None => Err(expired),
        Some(Err(failure)) => Err(failure),
        Some(Ok(())) => {
            let (mut server_read, _) = upstream.split();
            // The client's writing half, as with a streaming upload: one instance of the head
            // reader serves both (with two, its parse was no longer inlined: +60 instructions
            // a request, callgrind).
            let timer = client.timer();
            let (_, _, mut client_write) = client.downstream.split();
            let head = respond::read_response_head(
                &mut server_read,
                &mut client.server_buffer,
                &mut client_write,
                &mut client.out,
                expected(
                    snapshot,
                    server,
                    facts,
                    &client.hsts,
                    (&upload_done, context),
                ),
            );
            match timer.timeout_at(deadline, head).await {
                Err(_) => Err(expired),
                Ok(result) => result,
            }
        }
    };
    match sent {
        Ok(start) => Ok((upstream, start, true)),
        Err(failure) => Err(Failed {
            failure,
            reused,
            connection: Some((upstream, written)),
        }),
    }
}

/// The least of a streaming body's length still to come that goes by splice rather than
/// through a buffer (a pipe costs four system calls to make and close).
const SPLICE_FROM: u64 = 1 << 20;

/// A pipe for the rest of a streaming request body, when it can go by splice: of known length,
/// at least `SPLICE_FROM` of it to come and none of it at hand, plain TCP on both sides (a
/// client's HTTP/1 connection, a server's), and not a gRPC call (whose upload may go on beside
/// its response, with the relay that the pipe's bytes would be lost to).
/// Returns the client's read half with it.
fn spliceable<'s, S: BodySource>(
    upload: &BodyRelay,
    grpc: bool,
    received: &Buffer,
    source: &'s S,
    sink: &WriteHalf<'_>,
) -> Option<(&'s ReadHalf<'s>, Pipe)> {
    let worth = upload.length_left().is_some_and(|left| left >= SPLICE_FROM);
    if !worth || !received.is_empty() || grpc {
        return None;
    }
    let read = source.read_half().filter(|read| can_splice(read, sink))?;
    Some((read, Pipe::new().ok()?))
}

/// Sends a request whose body is still arriving: the body streams to the server while the
/// response head is awaited, so a server that answers early (or asks for the body with
/// 100 Continue) is heard. Returns whether the whole body was sent. With `kept`, the request
/// (head and body as far as it came) moves there from `client.out` once its first write went,
/// and the rest of the body is read behind it as it is sent ([`BodyRelay::relay_kept`]).
pub(super) async fn send_streaming<D: Downstream>(
    context: &ProxyContext,
    client: &mut Client<D>,
    snapshot: &Snapshot,
    server: &Server,
    sending: &Sending,
    upload: &mut BodyRelay,
    mut kept: Option<&mut Vec<u8>>,
) -> Result<(ServerStream, ResponseStart, bool), Failed> {
    let facts = sending.facts;
    let timeouts = snapshot.timeouts;
    // Set once the whole body went out: a response head that comes before then closes both
    // connections after the response.
    let upload_done = Cell::new(false);
    let (mut upstream, reused, (deadline, expired)) =
        connection_for(context, snapshot, server, false, sending).await?;
    let mut written = 0;
    let failed = |failure, upstream, written| Failed {
        failure,
        reused,
        connection: Some((upstream, written)),
    };
    match write_all_by(&mut upstream, &client.out, deadline, &mut written).await {
        None => return Err(failed(expired, upstream, written)),
        Some(Err(e)) => return Err(failed(Failure::server_io(&e), upstream, written)),
        Some(Ok(())) => {}
    }
    // Sent: unless kept, never sent again (only a whole request is retried), so a slow upload
    // need not hold it. The response head gets a block when it comes.
    match kept.as_deref_mut() {
        Some(kept) => std::mem::swap(kept, &mut client.out),
        None => recycle::give_back_bytes(std::mem::take(&mut client.out)),
    }
    let (head, upload_finished) = {
        let (mut client_read, received, mut client_write) = client.downstream.split();
        let (mut server_read, mut server_write) = upstream.split();
        let upload_future = async {
            let spliced = match kept {
                Some(_) => None,
                None => spliceable(upload, facts.grpc, received, &client_read, &server_write),
            };
            let sent = match (spliced, kept) {
                (_, Some(kept)) => {
                    upload
                        .relay_kept(
                            (&mut client_read, received),
                            kept,
                            &mut server_write,
                            &mut written,
                            (timeouts.client_idle, facts.timeouts.backend_read),
                        )
                        .await
                }
                (Some((source, mut pipe)), None) => {
                    WorkerCounters::bump(&context.counters().spliced_request_bodies);
                    let (read_wait, write_wait) =
                        (timeouts.client_idle, facts.timeouts.backend_read);
                    upload
                        .splice(source, &server_write, &mut pipe, read_wait, write_wait)
                        .await
                }
                (None, None) => {
                    upload
                        .relay(
                            &mut client_read,
                            received,
                            &mut server_write,
                            timeouts.client_idle,
                            facts.timeouts.backend_read,
                        )
                        .await
                }
            };
            upload_done.set(sent.is_ok());
            sent
        };
        let head_future = respond::read_response_head(
            &mut server_read,
            &mut client.server_buffer,
            &mut client_write,
            &mut client.out,
            expected(
                snapshot,
                server,
                facts,
                &client.hsts,
                (&upload_done, context),
            ),
        );
        tokio::pin!(upload_future, head_future);
        tokio::select! {
            head = &mut head_future => (head, upload_done.get()),
            sent = &mut upload_future => {
                match sent {
                    // The server stopped reading; it may still have answered (e.g. 413).
                    Err(RelayError::SinkIo(_) | RelayError::SinkTimeout) => {}
                    Err(error) => return Err(upload_failure(error).into()),
                    Ok(()) => {}
                }
                // From here the server owes a response within backend_response.
                let (deadline, expired) = sending.bound(
                    Moment::now() + facts.timeouts.backend_response,
                    Failure::ResponseTimeout,
                );
                let head = match timeout_at(deadline, &mut head_future).await {
                    Err(_) => Err(expired),
                    Ok(head) => head,
                };
                (head, sent.is_ok())
            }
        }
    };
    match head {
        Ok(head) => Ok((upstream, head, upload_finished)),
        Err(failure) => Err(failed(failure, upstream, written)),
    }
}

/// What decides the client's head for `server`'s response to the request `facts` describe.
fn expected<'a>(
    snapshot: &'a Snapshot,
    server: &'a Server,
    facts: RequestFacts,
    hsts: &'a [u8],
    (upload_done, context): (&'a Cell<bool>, &'a ProxyContext),
) -> Expected<'a> {
    Expected {
        facts,
        own: OwnFields {
            set_cookie: cookie_to_set(server, facts),
            hsts,
        },
        upload_done,
        context,
        compression: match facts.compress {
            Some(_) => snapshot.compression_for(facts.choice.route),
            None => None,
        },
    }
}

/// The `Set-Cookie` line the response carries: the server's sticky cookie when the request was
/// balanced in a sticky pool (`Secure` when it came over TLS), else nothing.
fn cookie_to_set(server: &Server, facts: RequestFacts) -> &[u8] {
    match &server.set_cookie {
        Some(lines) if facts.choice.assign_cookie => &lines[usize::from(facts.secure)],
        _ => b"",
    }
}
