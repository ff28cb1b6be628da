//! One HTTP/2 stream as the exchange sees it: a `Downstream` whose request head is the stream's
//! head in HTTP/1.1 form (`request_head`), whose body source reads the stream's DATA frames (in
//! the chunked coding when the length is unknown, the trailers as its trailer section), and whose
//! response sink reads back what the exchange writes (`response`) into HEADERS, DATA and trailers.
//! Flow control follows the other side: a DATA frame's window is given back only once the
//! exchange has taken its bytes (so a slow server slows the client), and the response's bytes
//! are taken from the exchange only as the client's window lets them go (so a slow client slows
//! the server): memory per stream stays bounded either way.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::http2::request_head::BodyFraming;
use crate::http2::response::{Piece, ResponseError, ResponseReader};
use crate::proxy::{BodySource, Downstream};
use crate::transport::{Buffer, TlsFacts, BUFFER_INITIAL};

/// The request body as the exchange reads it.
pub struct RequestBody {
    recv: RecvStream,
    framing: BodyFraming,
    /// The DATA frame being read, and where in it (chunked: with its size line first).
    frame: Bytes,
    /// Bytes of framing to give before or after `frame` (chunked sizes, line ends, the last
    /// chunk and the trailer section).
    framing_bytes: Vec<u8>,
    framing_at: usize,
    /// The stream's end (and trailers) has been read.
    ended: bool,
}

impl RequestBody {
    pub fn new(recv: RecvStream, framing: BodyFraming) -> RequestBody {
        RequestBody {
            recv,
            framing,
            frame: Bytes::new(),
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
            if !this.frame.is_empty() {
                let take = this.frame.len().min(out.remaining());
                out.put_slice(&this.frame[..take]);
                let _ = this.frame.split_to(take);
                // The window goes back as the exchange takes the bytes.
                let _ = this.recv.flow_control().release_capacity(take);
                if this.frame.is_empty() && this.framing == BodyFraming::Chunked {
                    this.set_framing(b"\r\n");
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(frame)) if frame.is_empty() => continue,
                Some(Ok(frame)) => {
                    if this.framing == BodyFraming::Chunked {
                        let size = format!("{:x}\r\n", frame.len());
                        this.set_framing(size.as_bytes());
                    }
                    this.frame = frame;
                }
                Some(Err(error)) => return Poll::Ready(Err(stream_error(error))),
                None => {
                    this.ended = true;
                    if this.framing == BodyFraming::Chunked {
                        let trailers = ready!(this.recv.poll_trailers(cx)).map_err(stream_error)?;
                        let mut end = b"0\r\n".to_vec();
                        for (name, value) in trailers.iter().flat_map(|t| t.iter()) {
                            end.extend_from_slice(name.as_str().as_bytes());
                            end.extend_from_slice(b": ");
                            end.extend_from_slice(value.as_bytes());
                            end.extend_from_slice(b"\r\n");
                        }
                        end.extend_from_slice(b"\r\n");
                        this.set_framing(&end);
                    }
                }
            }
        }
    }
}

/// An h2 error as the exchange's I/O error: a reset by the client reads as the connection reset.
fn stream_error(error: h2::Error) -> io::Error {
    match error.reason() {
        Some(_) if error.is_remote() => io::Error::new(io::ErrorKind::ConnectionReset, error),
        _ => io::Error::other(error),
    }
}

/// Where the response goes: before its head, the stream's `SendResponse`; after it, its
/// `SendStream`; and what reads the exchange's bytes back into HTTP/2 pieces.
pub struct ResponseSide {
    respond: SendResponse<Bytes>,
    send: Option<SendStream<Bytes>>,
    reader: ResponseReader,
}

impl ResponseSide {
    pub fn new(respond: SendResponse<Bytes>, reader: ResponseReader) -> ResponseSide {
        ResponseSide {
            respond,
            send: None,
            reader,
        }
    }

    /// The exchange is over: ends a body that ended with it; a response never started, or cut
    /// short, is reset (`reason`), so the client does not wait for more. The reset, if one was
    /// sent.
    pub fn finish(&mut self, reason: h2::Reason) -> Option<h2::Reason> {
        if let Some(Piece::End) = self.reader.finish() {
            if let Some(send) = &mut self.send {
                let _ = send.send_data(Bytes::new(), true);
            }
            return None;
        }
        if self.reader.is_done() {
            return None;
        }
        match &mut self.send {
            Some(send) => send.send_reset(reason),
            None => self.respond.send_reset(reason),
        }
        Some(reason)
    }

    /// The client's reset of the stream, if one came.
    pub fn reset_by_client(&mut self) -> Option<h2::Reason> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let reset = match &mut self.send {
            Some(send) => send.poll_reset(&mut cx),
            None => self.respond.poll_reset(&mut cx),
        };
        match reset {
            Poll::Ready(Ok(reason)) => Some(reason),
            _ => None,
        }
    }

    /// Completes when the client reset the stream before the response's head went; never once
    /// it went (the exchange watches from then on, `BodySource::closed`).
    pub fn poll_reset_before_head(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.send {
            None => self.respond.poll_reset(cx).map(|_| ()),
            Some(_) => Poll::Pending,
        }
    }

    /// Completes when the client reset the stream.
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let reset = match &mut self.send {
            Some(send) => send.poll_reset(cx),
            None => self.respond.poll_reset(cx),
        };
        reset.map(|_| ())
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
                // Only a wait for the window returns Pending, and none is made here.
                Poll::Pending => return Err(io::ErrorKind::WouldBlock.into()),
            }
        }
        Ok(())
    }

    /// Takes what it can of `buf`: heads at once, body bytes as the client's window lets them go
    /// when `within_window` (never more than it allows: the rest stays with the exchange), else
    /// all of them (the h2 crate queues what the window does not let go yet).
    fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
        within_window: bool,
    ) -> Poll<io::Result<usize>> {
        let mut taken = 0;
        while taken < buf.len() {
            let mut input = &buf[taken..];
            if let (Some(send), true, true) = (&mut self.send, self.reader.in_body(), within_window)
            {
                let room = loop {
                    let room = send.capacity();
                    if room > 0 {
                        break room;
                    }
                    send.reserve_capacity(input.len());
                    match send.poll_capacity(cx) {
                        Poll::Ready(Some(Ok(_))) => continue,
                        Poll::Ready(Some(Err(error))) => {
                            return Poll::Ready(Err(stream_error(error)))
                        }
                        Poll::Ready(None) => {
                            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))
                        }
                        Poll::Pending if taken == 0 => return Poll::Pending,
                        Poll::Pending => return Poll::Ready(Ok(taken)),
                    }
                };
                input = &input[..room.min(input.len())];
            }
            let (used, piece) = self.reader.read(input).map_err(response_error)?;
            taken += used;
            match piece {
                None if used == 0 => break,
                None => {}
                Some(Piece::Head {
                    head,
                    interim: true,
                    ..
                }) => {
                    self.respond
                        .send_informational(head)
                        .map_err(io::Error::other)?;
                }
                Some(Piece::Head { head, ends, .. }) => {
                    let send = self
                        .respond
                        .send_response(head, ends)
                        .map_err(io::Error::other)?;
                    self.send = Some(send);
                }
                Some(Piece::Data { len, last }) => {
                    let send = self
                        .send
                        .as_mut()
                        .ok_or_else(|| io::Error::other("data before a head"))?;
                    send.send_data(Bytes::copy_from_slice(&input[..len]), last)
                        .map_err(io::Error::other)?;
                }
                Some(Piece::Trailers(trailers)) => {
                    if let Some(send) = &mut self.send {
                        send.send_trailers(trailers).map_err(io::Error::other)?;
                    }
                }
                Some(Piece::End) => {
                    if let Some(send) = &mut self.send {
                        send.send_data(Bytes::new(), true)
                            .map_err(io::Error::other)?;
                    }
                }
            }
        }
        if taken == 0 && !buf.is_empty() {
            return Poll::Ready(Err(response_error(ResponseError::AfterEnd)));
        }
        // A body of known length that these bytes completed ends the stream now, not at the
        // exchange's next write (there is none).
        if let Ok((0, Some(Piece::End))) = self.reader.read(&[]) {
            if let Some(send) = &mut self.send {
                send.send_data(Bytes::new(), true)
                    .map_err(io::Error::other)?;
            }
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
        let _ = self.0.borrow_mut().finish(h2::Reason::NO_ERROR);
        Poll::Ready(Ok(()))
    }
}

/// The request body source the exchange reads from.
pub struct RequestSource<'a> {
    body: &'a mut RequestBody,
    response: &'a RefCell<ResponseSide>,
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
        let response = self.response;
        poll_fn(move |cx| response.borrow_mut().poll_reset(cx))
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
        let stream_id = response.borrow().respond.stream_id().into();
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
            response: &self.response,
        };
        (source, &mut self.received, ResponseSink(&self.response))
    }

    fn send(
        &mut self,
        bytes: &[u8],
        deadline: Instant,
    ) -> impl Future<Output = Option<io::Result<()>>> {
        // No wait, so no deadline: `take_all` queues the bytes at once.
        let _ = deadline;
        let taken = self.response.borrow_mut().take_all(bytes);
        std::future::ready(Some(taken))
    }
}
