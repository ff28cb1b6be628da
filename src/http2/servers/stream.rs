//! One request to an HTTP/2 server as the exchange sees it: a `transport::Multiplexed` stream
//! that takes the exchange's HTTP/1.1 request bytes (`request.rs` reads them into HEADERS, DATA
//! and trailers) and gives back the response in HTTP/1.1 bytes (`response.rs` writes its head;
//! DATA passes as it comes, chunked when its length is unknown, the trailers as the trailer
//! section). Flow control follows the other side: request bytes are taken only as the server's
//! window allows, and a DATA frame's window is given back once the exchange has read its bytes.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::{RecvStream, SendStream};
use tokio::io::ReadBuf;

use super::request::{RequestPiece, RequestReader};
use super::response::{write_response_head, write_trailers, ResponseFraming};
use super::Connection;
use crate::http2::body::BodyPiece;
use crate::transport::Multiplexed;

/// Request bytes asked of the server's window at a time.
const SEND_WINDOW_ASK: usize = 64 * 1024;

/// A request to an HTTP/2 server and its response.
#[derive(Debug)]
pub struct ServerStream {
    state: RefCell<State>,
}

#[derive(Debug)]
struct State {
    /// The connection it is one of the streams of, counted open until this is dropped.
    connection: Rc<Connection>,
    send_request: SendRequest<Bytes>,
    request: RequestReader,
    /// The head, read and waiting for the connection to take a new stream.
    pending_head: Option<(http::Request<()>, bool)>,
    send: Option<SendStream<Bytes>>,
    response: Response,
    /// A HEAD request's response has no body.
    head_request: bool,
    /// Framing and heads waiting to be read, from `at`.
    out: Vec<u8>,
    at: usize,
    /// The DATA frame being read, the bytes not yet read.
    chunk: Bytes,
    /// The stream failed: nothing more moves; what the exchange gets, as an I/O error.
    failed: Option<Failed>,
}

#[derive(Debug)]
enum Response {
    /// The request is not yet sent.
    Unsent,
    Awaited(ResponseFuture),
    Body(RecvStream, ResponseFraming),
    Done,
}

/// How a stream failed.
#[derive(Debug, Clone, Copy)]
struct Failed {
    /// The server certainly did not process the request (`Multiplexed::took_none`).
    unprocessed: bool,
    kind: io::ErrorKind,
}

impl ServerStream {
    pub(super) fn new(connection: Rc<Connection>, tls: bool) -> ServerStream {
        let send_request = connection.send_request.clone();
        connection.stream_opened();
        ServerStream {
            state: RefCell::new(State {
                connection,
                send_request,
                request: RequestReader::new(tls),
                pending_head: None,
                send: None,
                response: Response::Unsent,
                head_request: false,
                out: Vec::new(),
                at: 0,
                chunk: Bytes::new(),
                failed: None,
            }),
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.connection.stream_closed();
    }
}

impl State {
    fn fail(&mut self, error: &h2::Error, opening: bool) -> io::Error {
        // Refused (REFUSED_STREAM, §8.7), or cut by a GOAWAY naming an earlier stream as the last
        // the server processed, or never opened: the server did nothing with it.
        let unprocessed = opening
            || error.reason() == Some(h2::Reason::REFUSED_STREAM)
            || (error.is_go_away() && error.is_remote());
        if error.is_go_away() || error.is_io() {
            self.connection.going_away();
        }
        let kind = if error.is_io() {
            error
                .get_io()
                .map_or(io::ErrorKind::ConnectionReset, io::Error::kind)
        } else {
            io::ErrorKind::ConnectionReset
        };
        self.failed = Some(Failed { unprocessed, kind });
        self.failure()
    }

    fn failure(&self) -> io::Error {
        let kind = self
            .failed
            .map_or(io::ErrorKind::ConnectionReset, |f| f.kind);
        io::Error::new(kind, "the HTTP/2 server's stream failed")
    }

    /// Sends the head read earlier once the connection takes a new stream.
    fn open(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.failed.is_some() {
            return Poll::Ready(Err(self.failure()));
        }
        let Some((head, ends)) = self.pending_head.take() else {
            return Poll::Ready(Ok(()));
        };
        match self.send_request.poll_ready(cx) {
            Poll::Pending => {
                self.pending_head = Some((head, ends));
                return Poll::Pending;
            }
            Poll::Ready(Err(error)) => return Poll::Ready(Err(self.fail(&error, true))),
            Poll::Ready(Ok(())) => {}
        }
        match self.send_request.send_request(head, ends) {
            Ok((response, send)) => {
                self.response = Response::Awaited(response);
                self.send = (!ends).then_some(send);
                Poll::Ready(Ok(()))
            }
            Err(error) => Poll::Ready(Err(self.fail(&error, true))),
        }
    }

    fn write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let mut taken = 0;
        loop {
            match self.open(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending if taken > 0 => return Poll::Ready(Ok(taken)),
                Poll::Pending => return Poll::Pending,
            }
            if taken == bytes.len() && !self.request.in_body() {
                return Poll::Ready(Ok(taken));
            }
            // Body bytes go only as far as the server's window: ask for room first.
            let mut limit = bytes.len() - taken;
            if self.request.in_body() {
                let Some(send) = self.send.as_mut() else {
                    return Poll::Ready(Err(self.failure()));
                };
                if send.capacity() == 0 {
                    send.reserve_capacity(limit.clamp(1, SEND_WINDOW_ASK));
                    match send.poll_capacity(cx) {
                        Poll::Pending if taken > 0 => return Poll::Ready(Ok(taken)),
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(None) => return Poll::Ready(Err(self.failure())),
                        Poll::Ready(Some(Err(error))) => {
                            return Poll::Ready(Err(self.fail(&error, false)))
                        }
                        Poll::Ready(Some(Ok(_))) => {}
                    }
                }
                limit = limit.min(send.capacity());
                if limit == 0 && taken == bytes.len() {
                    return Poll::Ready(Ok(taken));
                }
            }
            let input = &bytes[taken..taken + limit];
            let (used, piece) = self
                .request
                .read(input)
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
            taken += used;
            let sent = match piece {
                None if used == 0 => return Poll::Ready(Ok(taken)),
                None => Ok(()),
                Some(RequestPiece::Head { head, ends }) => {
                    self.head_request = head.method() == http::Method::HEAD;
                    self.pending_head = Some((head, ends));
                    Ok(())
                }
                Some(RequestPiece::Body(piece)) => self.send_body(piece, &input[..used]),
            };
            if let Err(error) = sent {
                return Poll::Ready(Err(self.fail(&error, false)));
            }
        }
    }

    fn send_body(&mut self, piece: BodyPiece, input: &[u8]) -> Result<(), h2::Error> {
        let Some(send) = self.send.as_mut() else {
            return Ok(());
        };
        match piece {
            // A copy: the h2 crate keeps the frame's bytes until the window lets them go.
            BodyPiece::Data { len, last } => {
                send.send_data(Bytes::copy_from_slice(&input[..len]), last)
            }
            BodyPiece::Trailers(fields) => send.send_trailers(fields),
            BodyPiece::End => send.send_data(Bytes::new(), true),
        }
    }

    /// Moves the response on until bytes are ready to read, or its end, or a failure.
    fn fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.at < self.out.len() || !self.chunk.is_empty() {
                return Poll::Ready(Ok(()));
            }
            if let Poll::Ready(Err(error)) = self.open(cx) {
                return Poll::Ready(Err(error));
            }
            match &mut self.response {
                Response::Unsent => return Poll::Pending,
                Response::Done => return Poll::Ready(Ok(())),
                Response::Awaited(future) => {
                    let response = match std::pin::Pin::new(future).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(error)) => {
                            return Poll::Ready(Err(self.fail(&error, false)))
                        }
                        Poll::Ready(Ok(response)) => response,
                    };
                    let (head, body) = response.into_parts();
                    let ended = body.is_end_stream();
                    self.out.clear();
                    self.at = 0;
                    let framing =
                        write_response_head(&head, ended, self.head_request, &mut self.out);
                    self.response = match framing {
                        ResponseFraming::None => Response::Done,
                        framing => Response::Body(body, framing),
                    };
                }
                Response::Body(body, framing) => {
                    let framing = *framing;
                    match body.poll_data(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Some(Err(error))) => {
                            return Poll::Ready(Err(self.fail(&error, false)))
                        }
                        Poll::Ready(Some(Ok(data))) => {
                            if data.is_empty() {
                                continue;
                            }
                            self.out.clear();
                            self.at = 0;
                            if framing == ResponseFraming::Chunked {
                                self.out
                                    .extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                            }
                            self.chunk = data;
                        }
                        Poll::Ready(None) => {
                            let trailers = match body.poll_trailers(cx) {
                                Poll::Pending => return Poll::Pending,
                                Poll::Ready(Err(error)) => {
                                    return Poll::Ready(Err(self.fail(&error, false)))
                                }
                                Poll::Ready(Ok(trailers)) => trailers,
                            };
                            self.out.clear();
                            self.at = 0;
                            // Trailers after a body of known length have no place in HTTP/1.1;
                            // the body is whole without them.
                            if framing == ResponseFraming::Chunked {
                                write_trailers(trailers.as_ref(), &mut self.out);
                            }
                            self.response = Response::Done;
                        }
                    }
                }
            }
        }
    }

    fn read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.fill(cx))?;
        if self.at < self.out.len() {
            let take = (self.out.len() - self.at).min(buf.remaining());
            buf.put_slice(&self.out[self.at..self.at + take]);
            self.at += take;
            if self.at < self.out.len() {
                return Poll::Ready(Ok(()));
            }
            self.out.clear();
            self.at = 0;
        }
        // A chunk's size line and its bytes in one read, where they fit.
        if !self.chunk.is_empty() && buf.remaining() > 0 {
            let take = self.chunk.len().min(buf.remaining());
            buf.put_slice(&self.chunk[..take]);
            let _ = self.chunk.split_to(take);
            if let Response::Body(body, framing) = &mut self.response {
                // Read by the exchange: the server may send as much more.
                let _ = body.flow_control().release_capacity(take);
                if self.chunk.is_empty() && *framing == ResponseFraming::Chunked {
                    self.out.extend_from_slice(b"\r\n");
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl Multiplexed for ServerStream {
    fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.state.borrow_mut().read(cx, buf)
    }

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.state.borrow_mut().fill(cx)
    }

    fn poll_write(&self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        self.state.borrow_mut().write(cx, bytes)
    }

    fn abandon(&self) {
        let mut state = self.state.borrow_mut();
        if matches!(state.response, Response::Done) && state.request.is_done() {
            return;
        }
        if let Some(send) = state.send.as_mut() {
            send.send_reset(h2::Reason::CANCEL);
        }
        // A stream whose request ended: its response is dropped, which the h2 crate answers with
        // RST_STREAM CANCEL.
        state.response = Response::Done;
    }

    fn took_none(&self) -> bool {
        let state = self.state.borrow();
        match state.failed {
            Some(failed) => failed.unprocessed,
            None => matches!(state.response, Response::Unsent),
        }
    }
}
