//! A connection's TLS state: rustls's unbuffered connection (server or client side) and the
//! buffers herdsman keeps beside it — records read and not yet processed, plaintext opened and
//! not yet taken, records sealed and not yet sent — with the socket calls that fill and empty
//! them. `TlsStream` (in `tls.rs`) drives it within a runtime; a parked connection keeps it
//! boxed, its buffers given back (`shed_buffers`), and reads through it without one.
//!
//! rustls's buffered connection keeps a 4 KiB read buffer as long as the connection lives;
//! here every buffer is empty, and holds no memory, whenever it has nothing in it to keep.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use rustls::client::UnbufferedClientConnection;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, UnbufferedStatus,
};

/// What one read from the socket asks room for (rustls's own buffered reads are this size).
const READ_SIZE: usize = 4096;

/// Plaintext sealed by one write at most: four full records, so that a large write goes out
/// in pieces the socket can take while the records stay few.
const SEAL_AT_MOST: usize = 4 * 16 * 1024;

/// rustls's unbuffered connection, as a server (a client's connection to herdsman) or as a
/// client (herdsman's connection to a server).
enum Side {
    Server(UnbufferedServerConnection),
    Client(UnbufferedClientConnection),
}

/// A TLS connection's state and buffers.
pub struct TlsState {
    side: Side,
    /// Records read from the socket and not yet processed: a partial record at most, between
    /// calls.
    incoming: Vec<u8>,
    /// Plaintext opened from records; `opened[taken..]` is not yet read.
    opened: Vec<u8>,
    taken: usize,
    /// Records to send: `outgoing.bytes[sent..filled]`.
    outgoing: Outgoing,
    /// The peer's close_notify came: no more plaintext follows what is opened.
    peer_closed: bool,
    /// The host name a server-side handshake's client asked for (SNI).
    server_name: Option<Box<str>>,
}

/// Records to send. `bytes` is initialised up to its length (rustls writes into `&mut [u8]`),
/// reused from one write to the next, and given back when the connection goes quiet.
#[derive(Default)]
struct Outgoing {
    bytes: Vec<u8>,
    filled: usize,
    sent: usize,
}

impl Outgoing {
    /// At least `need` bytes to write records into, after those waiting.
    fn room(&mut self, need: usize) -> &mut [u8] {
        if self.sent == self.filled {
            self.sent = 0;
            self.filled = 0;
        }
        if self.bytes.len() - self.filled < need {
            self.bytes.resize(self.filled + need, 0);
        }
        &mut self.bytes[self.filled..]
    }

    fn is_empty(&self) -> bool {
        self.sent == self.filled
    }

    /// Lets `write` put records into room after those waiting, `need` bytes of it at first and
    /// as much as it then says it needs (`Err(Some(_))`); whether it wrote (`Err(None)`: it
    /// could not, for another reason).
    fn write(
        &mut self,
        mut need: usize,
        mut write: impl FnMut(&mut [u8]) -> Result<usize, Option<InsufficientSizeError>>,
    ) -> bool {
        loop {
            match write(self.room(need)) {
                Ok(n) => {
                    self.filled += n;
                    return true;
                }
                Err(Some(InsufficientSizeError { required_size })) => need = required_size,
                Err(None) => return false,
            }
        }
    }
}

/// An encryption's outcome as `Outgoing::write` takes it.
fn encrypted(outcome: Result<usize, EncryptError>) -> Result<usize, Option<InsufficientSizeError>> {
    match outcome {
        Ok(n) => Ok(n),
        Err(EncryptError::InsufficientSize(short)) => Err(Some(short)),
        Err(_) => Err(None),
    }
}

/// What a call to rustls's state machine came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The handshake needs more records from the peer.
    NeedsInput,
    /// Traffic may flow (and `sealed` bytes of the plaintext handed over were sealed).
    Traffic { sealed: usize },
    /// Both sides said close_notify.
    Closed,
}

/// What the caller asks of a call, besides processing what came.
enum Want<'a> {
    Nothing,
    Seal(&'a [u8]),
    CloseNotify,
}

impl std::fmt::Debug for TlsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsState")
            .field("server", &self.is_server())
            .field("incoming", &self.incoming.len())
            .field("opened", &(self.opened.len() - self.taken))
            .field("outgoing", &(self.outgoing.filled - self.outgoing.sent))
            .finish_non_exhaustive()
    }
}

impl TlsState {
    /// A server-side connection (a client's handshake with herdsman).
    pub fn server(config: Arc<rustls::ServerConfig>) -> Result<TlsState, rustls::Error> {
        Ok(TlsState::new(Side::Server(
            UnbufferedServerConnection::new(config)?,
        )))
    }

    /// A client-side connection to a server named `name`.
    pub fn client(
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> Result<TlsState, rustls::Error> {
        Ok(TlsState::new(Side::Client(
            UnbufferedClientConnection::new(config, name)?,
        )))
    }

    fn new(side: Side) -> TlsState {
        TlsState {
            side,
            incoming: Vec::new(),
            opened: Vec::new(),
            taken: 0,
            outgoing: Outgoing::default(),
            peer_closed: false,
            server_name: None,
        }
    }

    /// What both sides agreed, and the peer's certificates (rustls's `CommonState`).
    pub fn common(&self) -> &rustls::CommonState {
        match &self.side {
            Side::Server(server) => server,
            Side::Client(client) => client,
        }
    }

    pub fn is_server(&self) -> bool {
        matches!(self.side, Side::Server(_))
    }

    pub fn is_handshaking(&self) -> bool {
        self.common().is_handshaking()
    }

    /// The host name the client asked for, on the server side.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Plaintext is opened and waiting to be read.
    pub fn has_opened(&self) -> bool {
        self.taken < self.opened.len()
    }

    /// No more plaintext comes: the peer said close_notify and all it sent was read.
    pub fn at_end(&self) -> bool {
        self.peer_closed && !self.has_opened()
    }

    /// Records are waiting to be sent.
    pub fn wants_write(&self) -> bool {
        !self.outgoing.is_empty()
    }

    /// Copies opened plaintext into `room`; the count (0 when none is opened).
    pub fn take_opened(&mut self, room: &mut [std::mem::MaybeUninit<u8>]) -> usize {
        let waiting = &self.opened[self.taken..];
        let n = waiting.len().min(room.len());
        for (slot, byte) in room.iter_mut().zip(&waiting[..n]) {
            slot.write(*byte);
        }
        self.taken += n;
        if self.taken == self.opened.len() {
            self.opened.clear();
            self.taken = 0;
        }
        n
    }

    /// Gives back the memory of every buffer that holds nothing (a connection going quiet).
    pub fn shed_buffers(&mut self) {
        if self.incoming.is_empty() {
            self.incoming = Vec::new();
        } else {
            self.incoming.shrink_to_fit();
        }
        if !self.has_opened() {
            self.opened = Vec::new();
            self.taken = 0;
        }
        if self.outgoing.is_empty() {
            self.outgoing = Outgoing::default();
        }
    }

    /// One non-blocking `recv` from `socket` into the records to process: the bytes read, 0 at
    /// the end of the stream.
    pub fn read_from(&mut self, socket: BorrowedFd<'_>) -> io::Result<usize> {
        self.incoming.reserve(READ_SIZE);
        let room = self.incoming.spare_capacity_mut();
        let n = loop {
            match super::sys::recv(socket, room) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                read => break read?,
            }
        };
        // SAFETY: recv initialised the first `n` bytes of the spare capacity.
        unsafe { self.incoming.set_len(self.incoming.len() + n) };
        Ok(n)
    }

    /// One non-blocking `send` of the records waiting; `WouldBlock` when the socket took none.
    pub fn write_to(&mut self, socket: BorrowedFd<'_>) -> io::Result<usize> {
        let waiting = &self.outgoing.bytes[self.outgoing.sent..self.outgoing.filled];
        let n = super::sys::send(socket, waiting)?;
        self.outgoing.sent += n;
        Ok(n)
    }

    /// Sends what the socket takes now of the records waiting; `WouldBlock` when some are left.
    pub fn send_now(&mut self, socket: BorrowedFd<'_>) -> io::Result<()> {
        while self.wants_write() {
            match self.write_to(socket) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                written => {
                    written?;
                }
            }
        }
        Ok(())
    }

    /// Processes the records read: handshake messages answered (their answers wait to be
    /// sent), plaintext opened. On a failure, the alert rustls owes the peer is made ready to
    /// send first.
    pub fn process(&mut self) -> Result<Step, rustls::Error> {
        self.run(Want::Nothing)
    }

    /// Seals as much of `plaintext` as one write takes into records to send: the count.
    pub fn seal(&mut self, plaintext: &[u8]) -> io::Result<usize> {
        let plaintext = &plaintext[..plaintext.len().min(SEAL_AT_MOST)];
        match self.run(Want::Seal(plaintext)) {
            Ok(Step::Traffic { sealed }) => Ok(sealed),
            Ok(Step::NeedsInput) => Err(io::Error::other("TLS handshake not finished")),
            Ok(Step::Closed) => Err(io::ErrorKind::BrokenPipe.into()),
            Err(error) => Err(io::Error::new(io::ErrorKind::InvalidData, error)),
        }
    }

    /// Makes a close_notify ready to send.
    pub fn close_notify(&mut self) {
        let _ = self.run(Want::CloseNotify);
    }

    /// Runs rustls until it needs something only the socket can give, doing what `want` asks
    /// once traffic may flow.
    fn run(&mut self, mut want: Want<'_>) -> Result<Step, rustls::Error> {
        let outcome = self.steps(&mut want);
        if outcome.is_err() {
            // Whatever rustls queued (the alert) comes out on the next call, which then fails
            // again at once.
            let _ = self.steps(&mut Want::Nothing);
        }
        outcome
    }

    fn steps(&mut self, want: &mut Want<'_>) -> Result<Step, rustls::Error> {
        loop {
            let buffers = Buffers {
                opened: &mut self.opened,
                outgoing: &mut self.outgoing,
                peer_closed: &mut self.peer_closed,
            };
            let (discard, step) = match &mut self.side {
                Side::Server(server) => {
                    let handshaking = server.is_handshaking();
                    let status = server.process_tls_records(&mut self.incoming);
                    let outcome = step(status, buffers, want);
                    if handshaking {
                        // The certificate resolver saw the ClientHello during this call, on
                        // this thread (rustls's unbuffered server does not say the name).
                        let asked = crate::config::certificates::take_server_name();
                        if self.server_name.is_none() {
                            self.server_name = asked;
                        }
                    }
                    outcome
                }
                Side::Client(client) => step(
                    client.process_tls_records(&mut self.incoming),
                    buffers,
                    want,
                ),
            };
            self.incoming.drain(..discard);
            match step? {
                None => continue,
                Some(step) => return Ok(step),
            }
        }
    }
}

/// The buffers a step fills, borrowed apart from the connection that is processing.
struct Buffers<'a> {
    opened: &'a mut Vec<u8>,
    outgoing: &'a mut Outgoing,
    peer_closed: &'a mut bool,
}

/// Handles one state rustls reached: what to discard from the records read, and `None` to go
/// on or the step the caller gets.
fn step<Data>(
    status: UnbufferedStatus<'_, '_, Data>,
    buffers: Buffers<'_>,
    want: &mut Want<'_>,
) -> (usize, Result<Option<Step>, rustls::Error>) {
    let UnbufferedStatus { mut discard, state } = status;
    let state = match state {
        Ok(state) => state,
        Err(error) => return (discard, Err(error)),
    };
    let next = match state {
        ConnectionState::ReadTraffic(mut traffic) => {
            while let Some(record) = traffic.next_record() {
                match record {
                    Ok(record) => {
                        discard += record.discard;
                        buffers.opened.extend_from_slice(record.payload);
                    }
                    Err(error) => return (discard, Err(error)),
                }
            }
            None
        }
        ConnectionState::EncodeTlsData(mut encode) => {
            buffers
                .outgoing
                .write(1024, |room| match encode.encode(room) {
                    Ok(n) => Ok(n),
                    Err(EncodeError::InsufficientSize(short)) => Err(Some(short)),
                    Err(_) => Err(None),
                });
            None
        }
        // The records wait in `outgoing`, ahead of anything sealed later: they are sent in
        // order by whoever sends next.
        ConnectionState::TransmitTlsData(transmit) => {
            transmit.done();
            None
        }
        ConnectionState::BlockedHandshake => Some(Step::NeedsInput),
        ConnectionState::PeerClosed => {
            *buffers.peer_closed = true;
            None
        }
        ConnectionState::Closed => {
            *buffers.peer_closed = true;
            Some(Step::Closed)
        }
        ConnectionState::WriteTraffic(mut traffic) => {
            let mut sealed = 0;
            match std::mem::replace(want, Want::Nothing) {
                Want::Nothing => {}
                Want::Seal(plaintext) => {
                    // Records add 22 bytes each (header, content type, tag) to TLS 1.3's
                    // plaintext, TLS 1.2's 29.
                    let need = plaintext.len() + plaintext.len() / 16_384 * 32 + 64;
                    let written = buffers
                        .outgoing
                        .write(need, |room| encrypted(traffic.encrypt(plaintext, room)));
                    if written {
                        sealed = plaintext.len();
                    }
                }
                Want::CloseNotify => {
                    buffers
                        .outgoing
                        .write(1024, |room| encrypted(traffic.queue_close_notify(room)));
                }
            }
            Some(Step::Traffic { sealed })
        }
        // 0-RTT is off (`max_early_data_size = 0`): rustls accepts none, so none is read.
        _ => Some(Step::NeedsInput),
    };
    (discard, Ok(next))
}
