//! Streaming one message body from one socket to another, as framed or re-framed, with bounded
//! memory: at most one buffer of bytes is held, whatever the body's size.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::http1::chunked::{ChunkedDecoder, Step};
use crate::http1::Body;
use crate::transport::deadline::{timeout, Elapsed};
use crate::transport::{read_appending, Buffer, Pipe, ReadHalf, WriteHalf, BUFFER_INITIAL};

/// The most a body relay reads at once.
pub const BODY_READ_LIMIT: usize = 64 * 1024;

/// Why a body could not be relayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayError {
    /// The source ended before the body did.
    SourceEnded,
    SourceIo(io::ErrorKind),
    SourceTimeout,
    SinkIo(io::ErrorKind),
    SinkTimeout,
    /// The sink took the bytes waiting for it slower than the minimum rate.
    SinkTooSlow,
    /// The bytes on their way to the sink could not be kept (a temporary file failed).
    Spool,
    /// The sink's peer went away (seen while waiting for the source).
    SinkGone,
    /// The body's framing is malformed (a bad chunk).
    Framing(&'static str),
    /// More body data than the limit allows.
    TooLarge,
}

#[derive(Debug, Clone)]
enum Remaining {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    Done,
}

/// Where one body stands: what is left of it, and how it is passed on.
#[derive(Debug, Clone)]
pub struct BodyRelay {
    remaining: Remaining,
    /// Forward only the data of a chunked body (for clients that cannot read chunked).
    dechunk: bool,
    /// Body data bytes seen so far, and the most allowed (0: no limit).
    data_seen: u64,
    limit: u64,
    /// Bytes of the piece being relayed still to write, and the framing to drop after them:
    /// kept here rather than in the relay's future, so that a relay abandoned midway (a
    /// full-duplex call's upload, when the response head comes first) can be taken up again.
    unsent: usize,
    framing_after: usize,
}

/// A span at the front of the available bytes: `consumed` of them belong to the body, and the
/// first `forward` of those are to be written on. Nothing consumed from bytes at hand means they
/// start a trailer field line whose end has yet to come.
struct Piece {
    consumed: usize,
    forward: usize,
}

impl BodyRelay {
    pub fn new(body: Body, dechunk: bool, limit: u64) -> BodyRelay {
        let remaining = match body {
            Body::None | Body::Length(0) => Remaining::Done,
            Body::Length(n) => Remaining::Length(n),
            Body::Chunked => Remaining::Chunked(ChunkedDecoder::new()),
            Body::UntilClose => Remaining::UntilClose,
        };
        BodyRelay {
            remaining,
            dechunk,
            data_seen: 0,
            limit,
            unsent: 0,
            framing_after: 0,
        }
    }

    /// Body data bytes seen so far (without chunk framing).
    pub fn data_seen(&self) -> u64 {
        self.data_seen
    }

    pub fn is_done(&self) -> bool {
        matches!(self.remaining, Remaining::Done)
    }

    /// The body bytes yet to come when its length says (`Content-Length`): they may be read
    /// straight into where they go, with no framing to take out, and then told with
    /// [`BodyRelay::took_length`].
    pub fn length_left(&self) -> Option<u64> {
        match self.remaining {
            Remaining::Length(left) => Some(left),
            _ => None,
        }
    }

    /// `n` bytes of a body of known length (at most [`BodyRelay::length_left`]) were read
    /// straight into their place.
    pub fn took_length(&mut self, n: usize) -> Result<(), RelayError> {
        debug_assert!(self.length_left().is_some_and(|left| n as u64 <= left));
        let piece = self.advance_length(n);
        debug_assert_eq!(piece, n);
        self.count_data(piece)
    }

    /// Counts `n` bytes of a body of known length (at most what is left): the bytes it takes.
    fn advance_length(&mut self, n: usize) -> usize {
        let Remaining::Length(left) = &mut self.remaining else {
            return 0;
        };
        let n = (n as u64).min(*left) as usize;
        *left -= n as u64;
        if *left == 0 {
            self.remaining = Remaining::Done;
        }
        n
    }

    /// The source ended: the end of a body delimited by the connection's close, else a body cut
    /// short.
    pub fn end_of_source(&mut self) -> Result<(), RelayError> {
        match self.remaining {
            Remaining::UntilClose => {
                self.remaining = Remaining::Done;
                Ok(())
            }
            _ => Err(RelayError::SourceEnded),
        }
    }

    fn count_data(&mut self, n: usize) -> Result<(), RelayError> {
        self.data_seen += n as u64;
        if self.limit > 0 && self.data_seen > self.limit {
            return Err(RelayError::TooLarge);
        }
        Ok(())
    }

    /// Takes the body's bytes from the front of `available`.
    fn advance(&mut self, available: &[u8]) -> Result<Piece, RelayError> {
        match &mut self.remaining {
            Remaining::Done => Ok(Piece {
                consumed: 0,
                forward: 0,
            }),
            Remaining::UntilClose => {
                self.count_data(available.len())?;
                Ok(Piece {
                    consumed: available.len(),
                    forward: available.len(),
                })
            }
            Remaining::Length(_) => {
                let n = self.advance_length(available.len());
                // A length over the limit was refused up front, so this only counts.
                self.count_data(n)?;
                Ok(Piece {
                    consumed: n,
                    forward: n,
                })
            }
            Remaining::Chunked(decoder) => {
                if self.dechunk {
                    // One step at a time: only data is forwarded.
                    return match decoder
                        .step(available)
                        .map_err(|e| RelayError::Framing(chunk_error(e)))?
                    {
                        Step::Data(n) => {
                            self.count_data(n)?;
                            Ok(Piece {
                                consumed: n,
                                forward: n,
                            })
                        }
                        Step::Framing(n) | Step::Dropped(n) => Ok(Piece {
                            consumed: n,
                            forward: 0,
                        }),
                        Step::Done(n) => {
                            self.remaining = Remaining::Done;
                            Ok(Piece {
                                consumed: n,
                                forward: 0,
                            })
                        }
                    };
                }
                // As framed: check every byte, forward all that belong to the body in one write,
                // up to a trailer field that must not be passed on, which is then skipped.
                let mut at = 0;
                let mut data = 0;
                let mut done = false;
                let mut dropped = 0;
                while at < available.len() {
                    match decoder
                        .step(&available[at..])
                        .map_err(|e| RelayError::Framing(chunk_error(e)))?
                    {
                        Step::Framing(0) | Step::Data(0) => break,
                        Step::Framing(n) => at += n,
                        Step::Dropped(n) => {
                            dropped = n;
                            break;
                        }
                        Step::Data(n) => {
                            at += n;
                            data += n;
                        }
                        Step::Done(n) => {
                            at += n;
                            done = true;
                            break;
                        }
                    }
                }
                if done {
                    self.remaining = Remaining::Done;
                }
                self.count_data(data)?;
                Ok(Piece {
                    consumed: at + dropped,
                    forward: at,
                })
            }
        }
    }

    /// Takes what is already in `buffer` (bytes read with the head) into `out`, without I/O.
    pub fn take_buffered(
        &mut self,
        buffer: &mut Buffer,
        out: &mut Vec<u8>,
    ) -> Result<(), RelayError> {
        self.take_buffered_at_most(buffer, out, usize::MAX)
    }

    /// [`BodyRelay::take_buffered`], as far as `out` has room without growing: the rest stays in
    /// `buffer`, where [`BodyRelay::relay`] starts. A head and a small body still leave in one
    /// write, and `out` never moves into a larger block that a slow reader would then hold.
    pub fn take_buffered_into_room(
        &mut self,
        buffer: &mut Buffer,
        out: &mut Vec<u8>,
    ) -> Result<(), RelayError> {
        let room = out.capacity() - out.len();
        self.take_buffered_at_most(buffer, out, room)
    }

    /// Takes at most `most` bytes of `buffer` (framing included) into `out`.
    fn take_buffered_at_most(
        &mut self,
        buffer: &mut Buffer,
        out: &mut Vec<u8>,
        most: usize,
    ) -> Result<(), RelayError> {
        self.take_pieces(buffer, most, |bytes| {
            out.extend_from_slice(bytes);
            Ok(())
        })
    }

    /// Passes what is in `buffer` of the body to `each`, piece by piece, without I/O. An error
    /// from `each` ends the body there (its piece is taken, so the relay cannot go on).
    pub fn take_buffered_with(
        &mut self,
        buffer: &mut Buffer,
        each: impl FnMut(&[u8]) -> Result<(), RelayError>,
    ) -> Result<(), RelayError> {
        self.take_pieces(buffer, usize::MAX, each)
    }

    /// Takes at most `most` bytes of `buffer` (framing included), passing each piece to `each`.
    #[inline]
    fn take_pieces(
        &mut self,
        buffer: &mut Buffer,
        mut most: usize,
        mut each: impl FnMut(&[u8]) -> Result<(), RelayError>,
    ) -> Result<(), RelayError> {
        while !self.is_done() && !buffer.is_empty() {
            let available = &buffer.data()[..buffer.len().min(most)];
            let piece = self.advance(available)?;
            if piece.consumed == 0 {
                break;
            }
            each(&buffer.data()[..piece.forward])?;
            buffer.consume(piece.consumed);
            most -= piece.consumed;
        }
        Ok(())
    }

    /// Relays the rest of a body of known length from `source` to `sink` through `pipe`, by
    /// splice (its bytes never in user space): what the pipe holds first, then the rest. Each
    /// fill may wait `read_wait` and each drain `write_wait`. Abandoned midway, the pipe keeps
    /// what it took.
    pub async fn splice(
        &mut self,
        source: &ReadHalf<'_>,
        sink: &WriteHalf<'_>,
        pipe: &mut Pipe,
        read_wait: Duration,
        write_wait: Duration,
    ) -> Result<(), RelayError> {
        loop {
            let left = self.length_left().unwrap_or(0);
            if pipe.held() > 0 {
                match timeout(write_wait, pipe.drain_to(sink, left > 0)).await {
                    Err(_) => return Err(RelayError::SinkTimeout),
                    Ok(Err(e)) => return Err(RelayError::SinkIo(e.kind())),
                    Ok(Ok(_)) => continue,
                }
            }
            if left == 0 {
                return Ok(());
            }
            let n = source_read(timeout(read_wait, pipe.fill_from(source, left)).await)?;
            self.took_length(n)?;
        }
    }

    /// Reads more of a body of known length into `out` behind what it holds: what waits of it in
    /// `buffer` first, else one read from `source` straight into `out`'s spare room (reserved
    /// for all of it here, once), which may wait `read_wait`. Returns the bytes added.
    pub async fn read_kept<R: AsyncRead + Unpin>(
        &mut self,
        source: &mut R,
        buffer: &mut Buffer,
        out: &mut Vec<u8>,
        read_wait: Duration,
    ) -> Result<usize, RelayError> {
        let before = out.len();
        self.take_buffered(buffer, out)?;
        let Some(left) = self.length_left().filter(|_| out.len() == before) else {
            return Ok(out.len() - before);
        };
        let left = usize::try_from(left).unwrap_or(usize::MAX);
        out.reserve_exact(left);
        let n = source_read(timeout(read_wait, read_appending(source, out, left)).await)?;
        self.took_length(n).map(|()| n)
    }

    /// Relays the rest of a body of known length to `sink` while keeping all of it: each read
    /// goes behind what `kept` holds ([`BodyRelay::read_kept`]) and is written from there, so a
    /// byte is copied once in user space and the request can be sent again whole. `sent` is how
    /// much of `kept` went to `sink`, kept up to date as writes go. Each read may wait the first
    /// of `waits` and each write the second.
    pub async fn relay_kept(
        &mut self,
        (source, buffer): (&mut (impl AsyncRead + Unpin), &mut Buffer),
        kept: &mut Vec<u8>,
        sink: &mut (impl AsyncWrite + Unpin),
        sent: &mut usize,
        (read_wait, write_wait): (Duration, Duration),
    ) -> Result<(), RelayError> {
        loop {
            if *sent < kept.len() {
                match timeout(write_wait, sink.write(&kept[*sent..])).await {
                    Err(_) => return Err(RelayError::SinkTimeout),
                    Ok(Err(e)) => return Err(RelayError::SinkIo(e.kind())),
                    Ok(Ok(0)) => return Err(RelayError::SinkIo(io::ErrorKind::WriteZero)),
                    Ok(Ok(n)) => *sent += n,
                }
                continue;
            }
            if self.is_done() {
                return Ok(());
            }
            self.read_kept(source, buffer, kept, read_wait).await?;
        }
    }

    /// Relays the rest of the body: from `buffer` first, then from `source`, to `sink`. Each read
    /// may wait `read_wait` and each write `write_wait`.
    pub async fn relay<R, W>(
        &mut self,
        source: &mut R,
        buffer: &mut Buffer,
        sink: &mut W,
        read_wait: Duration,
        write_wait: Duration,
    ) -> Result<(), RelayError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let never = std::future::pending();
        self.relay_watching(source, buffer, sink, read_wait, write_wait, never)
            .await
    }

    /// [`BodyRelay::relay`], ending with [`RelayError::SinkGone`] as soon as `sink_gone`
    /// completes while the source keeps it waiting: a response body's client that went away
    /// must not hold its server connection until the server sends more.
    pub async fn relay_watching<R, W>(
        &mut self,
        source: &mut R,
        buffer: &mut Buffer,
        sink: &mut W,
        read_wait: Duration,
        write_wait: Duration,
        sink_gone: impl Future<Output = ()>,
    ) -> Result<(), RelayError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        tokio::pin!(sink_gone);
        // The buffer holds the start of a trailer field line, kept until the line is whole.
        let mut line_held = false;
        while !self.is_done() || self.unsent > 0 || self.framing_after > 0 {
            if self.unsent == 0 && self.framing_after == 0 {
                if buffer.is_empty() || line_held {
                    let read = timeout(
                        read_wait,
                        buffer.read_stream_from(source, BUFFER_INITIAL, BODY_READ_LIMIT),
                    );
                    let read = tokio::select! {
                        biased;
                        read = read => read,
                        () = &mut sink_gone => return Err(RelayError::SinkGone),
                    };
                    match read {
                        Err(_) => return Err(RelayError::SourceTimeout),
                        Ok(Err(e)) => return Err(RelayError::SourceIo(e.kind())),
                        Ok(Ok(0)) => return self.end_of_source(),
                        Ok(Ok(_)) => {}
                    }
                }
                let piece = self.advance(buffer.data())?;
                line_held = piece.consumed == 0;
                self.unsent = piece.forward;
                // What is left of the piece is framing (a dechunked body's).
                self.framing_after = piece.consumed - piece.forward;
            }
            if self.unsent > 0 {
                let write = buffer.write_counted(&mut self.unsent, sink);
                match timeout(write_wait, write).await {
                    Err(_) => return Err(RelayError::SinkTimeout),
                    Ok(Err(e)) => return Err(RelayError::SinkIo(e.kind())),
                    Ok(Ok(())) => {}
                }
            }
            buffer.consume(self.framing_after);
            self.framing_after = 0;
        }
        Ok(())
    }
}

/// What a bounded read of a body of known length brought: its bytes, or why there were none
/// (the wait passed, the source failed, or it ended before the body did).
fn source_read(read: Result<io::Result<usize>, Elapsed>) -> Result<usize, RelayError> {
    match read {
        Err(Elapsed) => Err(RelayError::SourceTimeout),
        Ok(Err(e)) => Err(RelayError::SourceIo(e.kind())),
        Ok(Ok(0)) => Err(RelayError::SourceEnded),
        Ok(Ok(n)) => Ok(n),
    }
}

fn chunk_error(error: crate::http1::chunked::ChunkedError) -> &'static str {
    use crate::http1::chunked::ChunkedError;
    match error {
        ChunkedError::Size => "invalid chunk size",
        ChunkedError::SizeOverflow => "chunk size too large",
        ChunkedError::Extension => "invalid chunk extension",
        ChunkedError::DataEnd => "chunk not followed by CRLF",
        ChunkedError::Trailer => "invalid trailer section",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn relay_all(
        body: Body,
        dechunk: bool,
        input: &[u8],
    ) -> (Result<(), RelayError>, Vec<u8>, usize) {
        let mut relay = BodyRelay::new(body, dechunk, 0);
        let mut source = input;
        let mut buffer = Buffer::new();
        let mut sink = Vec::new();
        let result = relay
            .relay(
                &mut source,
                &mut buffer,
                &mut sink,
                Duration::from_secs(1),
                Duration::from_secs(1),
            )
            .await;
        (result, sink, buffer.len() + source.len())
    }

    #[tokio::test]
    async fn length_body_stops_at_its_end() {
        let (result, out, left) = relay_all(Body::Length(5), false, b"helloGET /").await;
        assert_eq!(result, Ok(()));
        assert_eq!(out, b"hello");
        assert_eq!(left, 5);
        let (result, _, _) = relay_all(Body::Length(9), false, b"hello").await;
        assert_eq!(result, Err(RelayError::SourceEnded));
    }

    #[tokio::test]
    async fn chunked_as_framed_or_decoded() {
        let body = b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\nNEXT";
        let (result, out, left) = relay_all(Body::Chunked, false, body).await;
        assert_eq!(result, Ok(()));
        assert_eq!(out, &body[..body.len() - 4]);
        assert_eq!(left, 4);
        let (result, out, _) = relay_all(Body::Chunked, true, body).await;
        assert_eq!(result, Ok(()));
        assert_eq!(out, b"abcde");
        let (result, _, _) = relay_all(Body::Chunked, false, b"3\r\nabc\r\n0\r\n").await;
        assert_eq!(result, Err(RelayError::SourceEnded));
        let (result, _, _) = relay_all(Body::Chunked, false, b"zz\r\n").await;
        assert_eq!(result, Err(RelayError::Framing("invalid chunk size")));
    }

    #[tokio::test]
    async fn until_close_ends_with_the_source_and_limits_count_data() {
        let (result, out, _) = relay_all(Body::UntilClose, false, b"all of it").await;
        assert_eq!((result, out), (Ok(()), b"all of it".to_vec()));
        let mut relay = BodyRelay::new(Body::Chunked, false, 4);
        let mut buffer = Buffer::new();
        let mut source: &[u8] = b"5\r\nhello\r\n0\r\n\r\n";
        let result = relay
            .relay(
                &mut source,
                &mut buffer,
                &mut Vec::new(),
                Duration::from_secs(1),
                Duration::from_secs(1),
            )
            .await;
        assert_eq!(result, Err(RelayError::TooLarge));
    }

    #[tokio::test]
    async fn what_does_not_fit_beside_the_head_is_relayed_after_it() {
        let body = b"0123456789";
        let mut buffer = Buffer::new();
        let mut source: &[u8] = body;
        buffer.read_from(&mut source, 64, 64).await.unwrap();
        let mut out = Vec::with_capacity(8);
        out.extend_from_slice(b"HEAD");
        let (capacity, fits) = (out.capacity(), out.capacity() - 4);
        assert!(fits < body.len());
        let mut relay = BodyRelay::new(Body::Length(10), false, 0);
        relay
            .take_buffered_into_room(&mut buffer, &mut out)
            .unwrap();
        assert_eq!(out.capacity(), capacity, "out did not grow");
        assert_eq!(out, [&b"HEAD"[..], &body[..fits]].concat());
        assert_eq!(buffer.data(), &body[fits..]);
        let mut sink = Vec::new();
        let wait = Duration::from_secs(1);
        let result = relay
            .relay(&mut &b""[..], &mut buffer, &mut sink, wait, wait)
            .await;
        assert_eq!((result, sink.as_slice()), (Ok(()), &body[fits..]));
    }
}
