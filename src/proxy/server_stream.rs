//! A connection to a server while one exchange uses it: closed normally once the exchange ended
//! at a message boundary, reset if it is dropped anywhere else.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use tokio::net::TcpStream;

/// A server connection in the middle of an exchange. Dropped before the exchange ends cleanly
/// (the client went away mid-upload or mid-response, a timeout, a broken message) it is reset
/// (SO_LINGER 0) rather than closed with a FIN: the server learns at once that the request is
/// void instead of reading a truncated one as the end of the stream, and herdsman's port does not
/// wait out TIME_WAIT. A client that starts uploads and resets them in a loop would otherwise
/// leave one port in TIME_WAIT for 60 s per cycle (`herdsman-bench slowloris`, reset-upload).
/// HAProxy closes an aborted server connection the same way.
pub struct ServerStream {
    /// `None` only once `into_finished` or `drop` took it.
    stream: Option<TcpStream>,
}

const HELD: &str = "a ServerStream holds its stream until it is finished or dropped";

impl ServerStream {
    pub fn new(stream: TcpStream) -> ServerStream {
        ServerStream {
            stream: Some(stream),
        }
    }

    /// The exchange ended where the messages did: the plain stream, to keep idle or to close
    /// normally.
    pub fn into_finished(mut self) -> TcpStream {
        self.stream.take().expect(HELD)
    }
}

impl Deref for ServerStream {
    type Target = TcpStream;

    fn deref(&self) -> &TcpStream {
        self.stream.as_ref().expect(HELD)
    }
}

impl DerefMut for ServerStream {
    fn deref_mut(&mut self) -> &mut TcpStream {
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
fn reset(stream: TcpStream) {
    // Best effort: should the option not take, the close is an ordinary one.
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
}
