//! A response body read from its server as fast as the server sends it and fed to the client at
//! the client's pace (`[buffering] response_*`): what the client has not taken waits in a spool
//! (memory, then a temporary file), and the server's connection is free — kept for reuse, or
//! closed — as soon as the body is complete, however slowly the client reads. A client that takes
//! less than `response_min_rate` over a window in which bytes wait for it loses its answer.

use std::future::{pending, poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use crate::transport::Moment;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::config::Buffering;
use crate::http1::relay::{BodyRelay, RelayError, BODY_READ_LIMIT};
use crate::transport::deadline::{sleep_until, timeout, Elapsed};
use crate::transport::{Buffer, ServerStream, Spool, BUFFER_INITIAL};

/// How long each side may keep the relay waiting.
#[derive(Clone, Copy)]
pub struct Pace<'a> {
    /// The longest the server may be silent inside the body.
    pub backend_read: Duration,
    /// The longest the client may take no byte at all.
    pub client_idle: Duration,
    /// The client's minimum rate while bytes wait for it.
    pub buffering: &'a Buffering,
}

/// What woke the relay.
enum Event {
    Wrote(io::Result<usize>),
    Read(Result<io::Result<usize>, Elapsed>),
    ClientGone,
    /// The client's deadline passed: the end of a window of its pace (true), or `client_idle`.
    Late(bool),
}

/// What else the body's bytes are for, as they come from the server.
pub struct Taker<F> {
    /// Sees every piece of the body as the server sends it (the cache's copy).
    pub take: F,
    /// When the client fails or goes away, the body is still read to its end (for `take`),
    /// and the client's failure returned then.
    pub outlives_client: bool,
}

/// Relays the rest of `download`'s body from `upstream` (its first bytes in `server_buffer`) to
/// `sink` through `spool`. Once the body is complete, `release` gets the server's connection and
/// whatever the server sent beyond the body (empty for a connection that may be reused); the
/// rest of the spool then drains to the client. `sink_gone` completes when the client goes away.
#[allow(clippy::too_many_arguments)]
pub async fn relay_spooled<W: AsyncWrite + Unpin>(
    download: &mut BodyRelay,
    upstream: ServerStream,
    server_buffer: &mut Buffer,
    sink: &mut W,
    sink_gone: impl Future<Output = ()>,
    spool: &mut Spool<'_>,
    pace: Pace<'_>,
    release: impl FnOnce(ServerStream, &Buffer),
    mut taker: Taker<impl FnMut(&[u8])>,
) -> Result<(), RelayError> {
    tokio::pin!(sink_gone);
    // The client's failure, when the body goes on without it (`Taker::outlives_client`).
    let mut client_failed: Option<RelayError> = None;
    let outlives_client = taker.outlives_client;
    let fail = move |error: RelayError, spool: &mut Spool<'_>, failed: &mut Option<RelayError>| {
        if !outlives_client {
            return Err(error);
        }
        spool.clear();
        failed.get_or_insert(error);
        Ok(())
    };
    let mut server = Some(upstream);
    let mut release = Some(release);
    let mut sent = 0u64;
    // While bytes wait for the client: when the current window of its pace began, and what it
    // had taken by then.
    let mut window: Option<(Moment, u64)> = None;
    // A deadline for the disabled timer branch, which is built whether or not it is polled.
    let relay_began = Moment::now();
    loop {
        if server.is_some() {
            // The body's pieces at hand go straight to the client while nothing waits before
            // them (a fast client costs no copy), and what it does not take to the spool.
            poll_fn(|cx| {
                Poll::Ready(download.take_buffered_with(server_buffer, |piece| {
                    (taker.take)(piece);
                    if client_failed.is_some() {
                        return Ok(());
                    }
                    let mut rest = piece;
                    if spool.is_empty() && !rest.is_empty() {
                        match Pin::new(&mut *sink).poll_write(cx, rest) {
                            Poll::Ready(Ok(n)) => {
                                rest = &rest[n..];
                                sent += n as u64;
                            }
                            Poll::Ready(Err(e)) => {
                                return fail(
                                    RelayError::SinkIo(e.kind()),
                                    spool,
                                    &mut client_failed,
                                )
                            }
                            Poll::Pending => {}
                        }
                    }
                    spool.push(rest).map_err(|_| RelayError::Spool)
                }))
            })
            .await?;
            if download.is_done() {
                if let (Some(upstream), Some(release)) = (server.take(), release.take()) {
                    release(upstream, server_buffer);
                }
            }
        }
        let client_waits = !spool.is_empty();
        if server.is_none() && !client_waits {
            return client_failed.map_or(Ok(()), Err);
        }
        let reading = server.is_some() && spool.has_room();
        // The client's deadline, while bytes wait for it: `client_idle` from now, or the end of
        // the current window of its pace, when it must have taken `response_min_rate`'s due
        // (true). No clock is read while nothing waits, as for a client that keeps up.
        let mut late = None;
        if client_waits {
            let now = Moment::now();
            let idle = now + pace.client_idle;
            late = Some(match pace.buffering.response_window() {
                Some((length, owed)) => {
                    let (began, taken_before) = *window.get_or_insert((now, sent));
                    if now >= began + length {
                        if sent - taken_before < owed {
                            fail(RelayError::SinkTooSlow, spool, &mut client_failed)?;
                            continue;
                        }
                        window = Some((now, sent));
                    }
                    let end = window.map_or(idle, |(began, _)| began + length);
                    (end.min(idle), end < idle)
                }
                None => (idle, false),
            });
        } else {
            window = None;
        }
        let front = match client_waits {
            true => spool.front().map_err(|_| RelayError::Spool)?,
            false => &[][..],
        };
        let read = async {
            match server.as_mut() {
                Some(upstream) if reading => {
                    let read = server_buffer.read_stream_from(
                        &mut **upstream,
                        BUFFER_INITIAL,
                        BODY_READ_LIMIT,
                    );
                    timeout(pace.backend_read, read).await
                }
                _ => pending().await,
            }
        };
        let event = tokio::select! {
            biased;
            written = sink.write(front), if client_waits => Event::Wrote(written),
            read = read => Event::Read(read),
            () = &mut sink_gone, if !client_waits && client_failed.is_none() => Event::ClientGone,
            () = sleep_until(late.map_or(relay_began, |(at, _)| at)), if late.is_some() => {
                Event::Late(late.is_some_and(|(_, for_rate)| for_rate))
            }
        };
        let failed = &mut client_failed;
        match event {
            Event::Wrote(Ok(0)) => {
                fail(RelayError::SinkIo(io::ErrorKind::WriteZero), spool, failed)?
            }
            Event::Wrote(Ok(n)) => {
                sent += n as u64;
                spool.consume(n);
            }
            Event::Wrote(Err(e)) => fail(RelayError::SinkIo(e.kind()), spool, failed)?,
            Event::Read(Err(_)) => return Err(RelayError::SourceTimeout),
            Event::Read(Ok(Err(e))) => return Err(RelayError::SourceIo(e.kind())),
            Event::Read(Ok(Ok(0))) => download.end_of_source()?,
            Event::Read(Ok(Ok(_))) => {}
            Event::ClientGone => fail(RelayError::SinkGone, spool, failed)?,
            // The window ended: its due is checked at the top of the loop.
            Event::Late(true) => {}
            Event::Late(false) => fail(RelayError::SinkTimeout, spool, failed)?,
        }
    }
}
