//! One request to an HTTP/2 server as the exchange sees it: a `transport::Multiplexed` stream
//! that takes the exchange's HTTP/1.1 request bytes (`request.rs` reads them into a HEADERS
//! block, DATA and trailers) and gives back the response in HTTP/1.1 bytes (`connection.rs`
//! writes them as the frames come). Flow control follows the other side: request bytes are taken
//! only as the server's windows allow, and a DATA frame's window is given back once the exchange
//! has read its bytes.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use tokio::io::ReadBuf;

use super::connection::{Failed, Phase, State};
use super::request::{RequestPiece, RequestReader};
use super::Connection;
use crate::http2::body::BodyPiece;
use crate::http2::hpack::encode_field;
use crate::transport::Multiplexed;

/// A request to an HTTP/2 server and its response.
#[derive(Debug)]
pub struct ServerStream {
    connection: Rc<Connection>,
    request: RefCell<Request>,
}

#[derive(Debug)]
struct Request {
    reader: RequestReader,
    /// The stream, once its head went.
    id: Option<u32>,
    /// Failed before it opened (or while it could not): what the exchange gets.
    failed: Option<Failed>,
}

impl ServerStream {
    pub(super) fn new(connection: Rc<Connection>, tls: bool) -> ServerStream {
        connection.state.borrow_mut().open += 1;
        ServerStream {
            connection,
            request: RefCell::new(Request {
                reader: RequestReader::new(tls),
                id: None,
                failed: None,
            }),
        }
    }
}

impl Drop for ServerStream {
    fn drop(&mut self) {
        let mut state = self.connection.state.borrow_mut();
        if let Some(id) = self.request.get_mut().id {
            state.close_stream(id);
        }
        state.open -= 1;
        if state.open == 0 {
            state.quiet_since = tokio::time::Instant::now();
            self.connection.wake.notify_waiters();
        }
    }
}

fn failure(failed: Failed) -> io::Error {
    io::Error::new(failed.kind, "the HTTP/2 server's stream failed")
}

/// Keeps the exchange's waker where the connection wakes it.
fn register(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl Request {
    fn write(
        &mut self,
        state: &mut State,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut taken = 0;
        loop {
            if let Some(failed) = self.failed {
                return Poll::Ready(Err(failure(failed)));
            }
            if let Some(id) = self.id {
                let stream = state.streams.get_mut(&id);
                if let Some(failed) = stream.as_ref().and_then(|s| s.failed) {
                    return Poll::Ready(Err(failure(failed)));
                }
                if stream.is_some_and(|s| s.sent_end) && self.reader.in_body() {
                    // The server took its whole response and wants no more of the request
                    // (RST_STREAM NO_ERROR, §8.1): the rest is taken and dropped.
                    return Poll::Ready(Ok(bytes.len()));
                }
            }
            if taken == bytes.len() && !self.reader.in_body() {
                return Poll::Ready(Ok(taken));
            }
            // Body bytes go only as far as the server's windows (and the room to write) allow.
            let mut limit = bytes.len() - taken;
            if let (Some(id), true) = (self.id, self.reader.in_body()) {
                let room = state.room(id);
                if room == 0 {
                    if taken > 0 {
                        return Poll::Ready(Ok(taken));
                    }
                    // Woken by a WINDOW_UPDATE on the stream, or by room on the connection.
                    if let Some(stream) = state.streams.get_mut(&id) {
                        register(&mut stream.waker, cx);
                    }
                    if !state.blocked.iter().any(|w| w.will_wake(cx.waker())) {
                        state.blocked.push(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                limit = limit.min(room);
            }
            let input = &bytes[taken..taken + limit];
            let (used, piece) = self
                .reader
                .read(input)
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
            taken += used;
            match piece {
                None if used == 0 => return Poll::Ready(Ok(taken)),
                None => {}
                Some(RequestPiece::Head {
                    block,
                    ends,
                    head_request,
                }) => match state.open_stream(&block, ends, head_request) {
                    Ok(id) => self.id = Some(id),
                    Err(failed) => self.failed = Some(failed),
                },
                Some(RequestPiece::Body(piece)) => {
                    let Some(id) = self.id else { continue };
                    match piece {
                        BodyPiece::Data { len, last } => state.send_data(id, &input[..len], last),
                        BodyPiece::Trailers(fields) => {
                            let mut block = Vec::new();
                            for (name, value) in &fields {
                                encode_field(
                                    &mut block,
                                    name.as_str().as_bytes(),
                                    value.as_bytes(),
                                );
                            }
                            state.send_trailers(id, &block);
                        }
                        BodyPiece::End => state.send_data(id, &[], true),
                    }
                }
            }
        }
    }

    /// Ready when a read would find bytes, the end or an error.
    fn poll_ready(&mut self, state: &mut State, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(failed) = self.failed {
            return Poll::Ready(Err(failure(failed)));
        }
        let Some(stream) = self.id.and_then(|id| state.streams.get_mut(&id)) else {
            // Nothing sent yet: no response to wait for until the exchange writes its head.
            return Poll::Pending;
        };
        if stream.at < stream.input.len() {
            return Poll::Ready(Ok(()));
        }
        if let Some(failed) = stream.failed {
            return Poll::Ready(Err(failure(failed)));
        }
        if stream.phase == Phase::Done {
            return Poll::Ready(Ok(()));
        }
        register(&mut stream.waker, cx);
        Poll::Pending
    }

    fn read(
        &mut self,
        state: &mut State,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_ready(state, cx))?;
        let Some(id) = self.id else {
            return Poll::Ready(Ok(()));
        };
        let Some(stream) = state.streams.get_mut(&id) else {
            return Poll::Ready(Ok(()));
        };
        let take = (stream.input.len() - stream.at).min(buf.remaining());
        buf.put_slice(&stream.input[stream.at..stream.at + take]);
        stream.at += take;
        state.consumed(id);
        Poll::Ready(Ok(()))
    }
}

impl Multiplexed for ServerStream {
    fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut state = self.connection.state.borrow_mut();
        self.request.borrow_mut().read(&mut state, cx, buf)
    }

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self.connection.state.borrow_mut();
        self.request.borrow_mut().poll_ready(&mut state, cx)
    }

    fn poll_write(&self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let mut state = self.connection.state.borrow_mut();
        self.request.borrow_mut().write(&mut state, cx, bytes)
    }

    fn abandon(&self) {
        let mut request = self.request.borrow_mut();
        if let Some(id) = request.id.take() {
            // Reset (CANCEL) unless it finished both ways; forgotten either way.
            self.connection.state.borrow_mut().close_stream(id);
        }
        request.failed.get_or_insert(Failed {
            unprocessed: false,
            kind: io::ErrorKind::ConnectionAborted,
        });
    }

    fn took_none(&self) -> bool {
        let request = self.request.borrow();
        if let Some(failed) = request.failed {
            return failed.unprocessed;
        }
        let Some(id) = request.id else {
            return true;
        };
        let state = self.connection.state.borrow();
        match state.streams.get(&id).and_then(|stream| stream.failed) {
            Some(failed) => failed.unprocessed,
            None => false,
        }
    }
}
