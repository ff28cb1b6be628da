//! One HTTP/2 stream as the exchange sees it: a `Downstream` whose request head is the stream's
//! head in HTTP/1.1 form (`request_head`), whose body source reads the stream's DATA (in the
//! chunked coding when the length is unknown, the trailers as its trailer section), and whose
//! response sink reads back what the exchange writes (`response`) into HEADERS, DATA and
//! trailers. Flow control follows the other side: a DATA frame's window is given back only once
//! the exchange has taken its bytes (so a slow server slows the client), and the response's
//! bytes are taken from the exchange only as the client's window lets them go (so a slow client
//! slows the server): memory per stream stays bounded either way.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::transport::Moment;

use super::connection::{BodyEvent, Connection};
use crate::http1::chunked::put_size_line;
use crate::http2::hpack;
use crate::http2::request_head::BodyFraming;
use crate::http2::response::{Piece, ResponseError, ResponseReader};
use crate::proxy::{BodySource, Downstream};
use crate::transport::{Buffer, TlsFacts, BUFFER_INITIAL};

/// A stream's place in its connection: the shared state and its slot there.
#[derive(Clone)]
pub struct StreamRef {
    pub connection: Rc<RefCell<Connection>>,
    pub slot: usize,
}

/// The request body as the exchange reads it.
pub struct RequestBody {
    stream: StreamRef,
    framing: BodyFraming,
    /// Bytes of the current piece still to give (chunked: the chunk announced by its size line).
    piece_left: usize,
    /// Bytes of framing to give before or after a piece (chunked sizes, line ends, the last
    /// chunk and the trailer section).
    framing_bytes: Vec<u8>,
    framing_at: usize,
    /// The stream's end (and trailers) has been read.
    ended: bool,
}

impl RequestBody {
    pub fn new(stream: StreamRef, framing: BodyFraming) -> RequestBody {
        RequestBody {
            stream,
            framing,
            piece_left: 0,
            framing_bytes: Vec::new(),
            framing_at: 0,
            ended: framing == BodyFraming::None,
        }
    }

    /// Copies pending framing bytes into `out`; true if any were.
    fn give_framing(&mut self, out: &mut ReadBuf<'_>) -> bool {
        if self.framing_at >= self.framing_bytes.len() {
            return false;
        }
        let take = (self.framing_bytes.len() - self.framing_at).min(out.remaining());
        out.put_slice(&self.framing_bytes[self.framing_at..self.framing_at + take]);
        self.framing_at += take;
        if self.framing_at == self.framing_bytes.len() {
            self.framing_bytes.clear();
            self.framing_at = 0;
        }
        true
    }

    fn set_framing(&mut self, bytes: &[u8]) {
        self.framing_bytes.clear();
        self.framing_bytes.extend_from_slice(bytes);
        self.framing_at = 0;
    }
}

impl AsyncRead for RequestBody {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.give_framing(out) {
                return Poll::Ready(Ok(()));
            }
            if this.piece_left > 0 {
                let mut connection = this.stream.connection.borrow_mut();
                let room = out.remaining().min(this.piece_left);
                let n = connection.read_body(this.stream.slot, out.initialize_unfilled_to(room));
                drop(connection);
                out.advance(n);
                this.piece_left -= n;
                if this.piece_left == 0 && this.framing == BodyFraming::Chunked {
                    this.set_framing(b"\r\n");
                }
                if n == 0 {
                    // The stream went meanwhile.
                    return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            let event = this
                .stream
                .connection
                .borrow_mut()
                .poll_body(this.stream.slot, cx);
            match event {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(BodyEvent::Bytes(n)) => {
                    this.piece_left = n;
                    if this.framing == BodyFraming::Chunked {
                        this.framing_bytes.clear();
                        this.framing_at = 0;
                        put_size_line(&mut this.framing_bytes, n);
                    }
                }
                Poll::Ready(BodyEvent::Ended) => {
                    this.ended = true;
                    let ending = this
                        .stream
                        .connection
                        .borrow_mut()
                        .take_ending(this.stream.slot);
                    if let (BodyFraming::Chunked, Some(ending)) = (this.framing, ending) {
                        this.set_framing(&ending);
                    }
                }
                Poll::Ready(BodyEvent::Reset) => {
                    return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))
                }
            }
        }
    }
}

/// Where the response goes: what reads the exchange's bytes back into HTTP/2 pieces, sent on
/// the stream.
pub struct ResponseSide {
    stream: StreamRef,
    reader: ResponseReader,
}

impl ResponseSide {
    pub fn new(stream: StreamRef, reader: ResponseReader) -> ResponseSide {
        ResponseSide { stream, reader }
    }

    /// The exchange is over: ends a body that ended with it. False when the response was never
    /// whole (never started, or cut short): the stream is then reset when its task ends.
    pub fn finish(&mut self) -> bool {
        if let Some(Piece::End) = self.reader.finish() {
            let mut connection = self.stream.connection.borrow_mut();
            return connection.send_data(self.stream.slot, &[], true).is_ok();
        }
        self.reader.is_done()
    }

    /// Completes when the stream was reset before the response's head went; never once it
    /// went (the exchange watches from then on, `BodySource::closed`).
    pub fn poll_reset_before_head(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut connection = self.stream.connection.borrow_mut();
        if connection.head_sent(self.stream.slot) {
            return Poll::Pending;
        }
        connection.poll_reset(self.stream.slot, cx)
    }

    /// Takes all of `bytes` at once, body bytes queued whatever the client's window: for the
    /// exchange's `send` (a head, the body bytes that came with it within the head's buffer, an
    /// error answer), which is few bytes. Waiting there for a window the client never opens would
    /// hold the exchange, and its server, until `client_idle`; the body relay after the head
    /// applies the slow-reader rule instead, and frees the server as soon as it is done.
    fn take_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut taken = 0;
        while taken < bytes.len() {
            match self.poll_take(&mut cx, &bytes[taken..], false) {
                Poll::Ready(Ok(n)) => taken += n,
                Poll::Ready(Err(error)) => return Err(error),
                Poll::Pending => return Err(io::ErrorKind::WouldBlock.into()),
            }
        }
        Ok(())
    }

    /// Takes what it can of `buf`: heads at once, body bytes as the client's windows let them
    /// go when `within_window` (never more than they allow: the rest stays with the exchange),
    /// else all of them (queued beyond the windows: few bytes, see `take_all`).
    fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
        within_window: bool,
    ) -> Poll<io::Result<usize>> {
        let slot = self.stream.slot;
        let mut taken = 0;
        while taken < buf.len() {
            let mut input = &buf[taken..];
            if self.reader.in_body() && within_window {
                let room = self.stream.connection.borrow_mut().poll_send_room(slot, cx);
                match room {
                    Poll::Ready(Ok(room)) => input = &input[..room.min(input.len())],
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                    Poll::Pending if taken == 0 => return Poll::Pending,
                    Poll::Pending => return Poll::Ready(Ok(taken)),
                }
            }
            let (used, piece) = self.reader.read(input).map_err(response_error)?;
            taken += used;
            let mut connection = self.stream.connection.borrow_mut();
            match piece {
                None if used == 0 => break,
                None => {}
                Some(Piece::Head { interim, ends, .. }) => {
                    let block = &self.reader.block;
                    connection
                        .send_head(slot, interim, ends, |out| out.extend_from_slice(block))?;
                }
                Some(Piece::Data { len, last }) => {
                    connection.send_data(slot, &input[..len], last)?;
                }
                Some(Piece::Trailers(trailers)) => connection.send_trailers(slot, |out| {
                    for (name, value) in &trailers {
                        hpack::encode_field(out, name.as_str().as_bytes(), value.as_bytes());
                    }
                })?,
                Some(Piece::End) => connection.send_data(slot, &[], true)?,
            }
        }
        if taken == 0 && !buf.is_empty() {
            return Poll::Ready(Err(response_error(ResponseError::AfterEnd)));
        }
        // A body of known length that these bytes completed ends the stream now, not at the
        // exchange's next write (there is none).
        if let Ok((0, Some(Piece::End))) = self.reader.read(&[]) {
            let mut connection = self.stream.connection.borrow_mut();
            connection.send_data(slot, &[], true)?;
        }
        Poll::Ready(Ok(taken))
    }
}

fn response_error(error: ResponseError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// The response sink the exchange writes into.
pub struct ResponseSink<'a>(&'a RefCell<ResponseSide>);

impl AsyncWrite for ResponseSink<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.borrow_mut().poll_take(cx, buf, true)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Frames go out as the connection's task writes them.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let _ = self.0.borrow_mut().finish();
        Poll::Ready(Ok(()))
    }
}

/// The request body source the exchange reads from.
pub struct RequestSource<'a> {
    body: &'a mut RequestBody,
}

impl AsyncRead for RequestSource<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.body).poll_read(cx, out)
    }
}

impl BodySource for RequestSource<'_> {
    fn closed(&mut self) -> impl Future<Output = ()> {
        let stream = self.body.stream.clone();
        poll_fn(move |cx| stream.connection.borrow_mut().poll_reset(stream.slot, cx))
    }
}

/// One stream: the `Downstream` the exchange is given.
pub struct H2Stream {
    peer: SocketAddr,
    tls: Option<Rc<TlsFacts>>,
    /// The request head (HTTP/1.1 form), then body bytes `receive` read.
    received: Buffer,
    body: RequestBody,
    /// Shared with the stream's task, which watches for a reset before the answer.
    pub response: Rc<RefCell<ResponseSide>>,
    stream_id: u32,
}

impl H2Stream {
    pub fn new(
        peer: SocketAddr,
        tls: Option<Rc<TlsFacts>>,
        head: &[u8],
        stream_id: u32,
        body: RequestBody,
        response: Rc<RefCell<ResponseSide>>,
    ) -> H2Stream {
        let mut received = Buffer::new();
        let _ = received.read_now(head.len().max(BUFFER_INITIAL), head.len(), |room| {
            for (slot, byte) in room.iter_mut().zip(head) {
                slot.write(*byte);
            }
            Ok(head.len())
        });
        H2Stream {
            peer,
            tls,
            received,
            body,
            response,
            stream_id,
        }
    }
}

impl Downstream for H2Stream {
    type Source<'a> = RequestSource<'a>;
    type Sink<'a> = ResponseSink<'a>;

    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn tls(&self) -> Option<&TlsFacts> {
        self.tls.as_deref()
    }

    fn stream_id(&self) -> u32 {
        self.stream_id
    }

    fn received(&mut self) -> &mut Buffer {
        &mut self.received
    }

    fn receive(&mut self, most: usize) -> impl Future<Output = io::Result<usize>> {
        self.received
            .read_from(&mut self.body, BUFFER_INITIAL, most)
    }

    fn split(&mut self) -> (RequestSource<'_>, &mut Buffer, ResponseSink<'_>) {
        let source = RequestSource {
            body: &mut self.body,
        };
        (source, &mut self.received, ResponseSink(&self.response))
    }

    fn send(
        &mut self,
        bytes: &[u8],
        deadline: Moment,
    ) -> impl Future<Output = Option<io::Result<()>>> {
        // No wait, so no deadline: `take_all` queues the bytes at once.
        let _ = deadline;
        let taken = self.response.borrow_mut().take_all(bytes);
        std::future::ready(Some(taken))
    }
}
