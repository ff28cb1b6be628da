//! A connection to a server while one exchange uses it: closed normally once the exchange ended
//! at a message boundary, reset if it is dropped anywhere else; counted in its server's
//! connections in use on the worker for as long as it is one.

use super::Stream;
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::rc::Rc;

/// How many connections to one server a worker has handed to exchanges and not had back: the
/// figure its idle connections are sized by (`upstream::idle`). Worker-local (an `Rc`, no
/// atomics): counted up when a connection is handed out ([`ConnectionsInUse::hand_out`]) and down
/// when the exchange is done with it, however it ends.
#[derive(Debug, Default, Clone)]
pub struct ConnectionsInUse(Rc<Cell<u32>>);

impl ConnectionsInUse {
    /// Connections in use now.
    pub fn get(&self) -> u32 {
        self.0.get()
    }

    /// Counts one more connection in use until the returned share is dropped; the count after.
    pub fn hand_out(&self) -> (InUse, u32) {
        let now = self.0.get() + 1;
        self.0.set(now);
        (InUse(Rc::clone(&self.0)), now)
    }
}

/// One connection's part of its server's [`ConnectionsInUse`], given back when dropped.
#[derive(Debug)]
pub struct InUse(Rc<Cell<u32>>);

impl Drop for InUse {
    fn drop(&mut self) {
        // Counted up when this share was made: never below 1 here.
        self.0.set(self.0.get() - 1);
    }
}

/// A server connection in the middle of an exchange. Dropped before the exchange ends cleanly
/// (the client went away mid-upload or mid-response, a timeout, a broken message) it is reset
/// (SO_LINGER 0) rather than closed with a FIN: the server learns at once that the request is
/// void instead of reading a truncated one as the end of the stream, and herdsman's port does not
/// wait out TIME_WAIT. A client that starts uploads and resets them in a loop would otherwise
/// leave one port in TIME_WAIT for 60 s per cycle (`herdsman-bench slowloris`, reset-upload).
/// HAProxy closes an aborted server connection the same way.
pub struct ServerStream {
    /// `None` only once `into_finished` or `drop` took it.
    stream: Option<Stream>,
    /// Counts the connection in its server's connections in use until the exchange is done with
    /// it (finished or dropped).
    _in_use: InUse,
}

const HELD: &str = "a ServerStream holds its stream until it is finished or dropped";

impl ServerStream {
    pub fn new(stream: Stream, in_use: InUse) -> ServerStream {
        ServerStream {
            stream: Some(stream),
            _in_use: in_use,
        }
    }

    /// Whether the server's TCP acknowledged none of the last `written` bytes sent on this
    /// connection, the earlier ones all acknowledged (they carried requests that were
    /// answered). A server that closed the connection before those bytes came never saw them:
    /// its kernel answers data for a closed socket with a reset, not an acknowledgement, so a
    /// request that met such a close may go again whatever its method. Bytes the server's
    /// kernel took but its process never read may still count as acknowledged: then the answer
    /// is no, the safe side. Linux only (TCP_INFO's byte counts, 4.19 and later); elsewhere no.
    /// Over TLS, no: the request went out as records larger than its bytes, and an
    /// acknowledged record may have carried the head.
    /// A multiplexed stream knows for itself (`Multiplexed::took_none`).
    pub fn took_none_of(&self, written: usize) -> bool {
        match &**self {
            Stream::Tls(_) => return false,
            Stream::Multiplexed(stream) => return stream.took_none(),
            _ => {}
        }
        self.tcp_bytes().is_some_and(|(sent, acknowledged)| {
            // The SYN counts one acknowledged byte and no sent one.
            acknowledged + written as u64 <= sent + 1
        })
    }

    /// The exchange ended where the messages did: the plain stream, to keep idle or to close
    /// normally. It is no longer counted in use.
    pub fn into_finished(mut self) -> Stream {
        self.stream.take().expect(HELD)
    }
}

impl Deref for ServerStream {
    type Target = Stream;

    fn deref(&self) -> &Stream {
        self.stream.as_ref().expect(HELD)
    }
}

impl DerefMut for ServerStream {
    fn deref_mut(&mut self) -> &mut Stream {
        self.stream.as_mut().expect(HELD)
    }
}

impl Drop for ServerStream {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take() {
            reset(stream);
        }
    }
}

/// Out of line: the exchange's future carries only the call, and the common path (finished)
/// none of it.
#[cold]
#[inline(never)]
fn reset(stream: Stream) {
    stream.reset_on_close();
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A connection that carried one answered request, as a pooled one has: the server side,
    /// and herdsman's side.
    async fn used_connection() -> (TcpStream, ServerStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut ours = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut theirs, _) = listener.accept().await.unwrap();
        ours.write_all(&[b'a'; 100]).await.unwrap();
        let mut request = [0; 100];
        theirs.read_exact(&mut request).await.unwrap();
        theirs.write_all(b"answer").await.unwrap();
        let mut answer = [0; 6];
        ours.read_exact(&mut answer).await.unwrap();
        let (in_use, _) = ConnectionsInUse::default().hand_out();
        (theirs, ServerStream::new(Stream::Tcp(ours), in_use))
    }

    #[test]
    fn a_connection_counts_in_use_until_it_is_finished_or_dropped() {
        let count = ConnectionsInUse::default();
        let (first, one) = count.hand_out();
        let (second, two) = count.hand_out();
        assert_eq!((one, two, count.get()), (1, 2, 2));
        drop(first);
        assert_eq!(count.get(), 1);
        drop(second);
        assert_eq!(count.get(), 0);
    }

    #[tokio::test]
    async fn a_request_sent_after_the_server_closed_was_taken_by_nobody() {
        let (theirs, mut ours) = used_connection().await;
        drop(theirs);
        tokio::time::sleep(Duration::from_millis(20)).await;
        ours.write_all(&[b'b'; 50]).await.unwrap();
        let mut rest = [0; 8];
        // The server's kernel answers the request with a reset: EOF (its FIN) or the reset.
        let _ = ours.read(&mut rest).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(ours.took_none_of(50));
        let _ = ours.into_finished();
    }

    #[tokio::test]
    async fn a_request_the_server_read_before_closing_was_taken() {
        let (mut theirs, mut ours) = used_connection().await;
        ours.write_all(&[b'b'; 50]).await.unwrap();
        let mut request = [0; 50];
        theirs.read_exact(&mut request).await.unwrap();
        drop(theirs);
        let mut rest = [0; 8];
        assert_eq!(ours.read(&mut rest).await.unwrap(), 0);
        assert!(!ours.took_none_of(50));
        let _ = ours.into_finished();
    }
}
