//! TLS on a connection: the handshake a TLS listener's connections start with, and the stream
//! that then carries their bytes, sealed and opened by rustls on the registered socket.
//!
//! Not tokio-rustls's `TlsStream`: the session needs what the plain stream gives it — two
//! halves read and written at once within one task (tokio-rustls's are split behind a lock),
//! readiness without a read (`poll_read_ready`, the wait between requests that holds no buffer),
//! a write that tries once before any timer is armed, and a connection that leaves the runtime
//! to wait in the worker's parking lot and comes back with its TLS state. So the state is here,
//! in a `RefCell` that only this task touches, each call borrowing it for that call alone.
//!
//! Writes are write-through: `poll_write` reports bytes written only once the records sealing
//! them are on the socket, so no caller has to flush (none of the plain stream's do) and a
//! response never waits in a buffer while the session waits for the client. A write that
//! sealed bytes into records but could not send them all reports them to the next call, which
//! is given the same bytes again (as every `AsyncWrite` caller does after `Pending`).
//!
//! rustls runs unbuffered (`state.rs`): herdsman keeps the records read and to send, and the
//! plaintext opened, in buffers of its own, so that a quiet connection gives them all back — a
//! parked TLS connection holds rustls's state and nothing else (rustls's buffered connection
//! keeps a 4 KiB read buffer for life: half of what an idle TLS connection cost).

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::{HandshakeKind, ServerConfig};
use tokio::io::{Interest, ReadBuf};
use tokio::net::TcpStream;

use super::tls_state::TlsState;
use crate::config::server_tls::ServerTls;
use crate::stats::tls::HandshakeFailed;

/// The first byte of a TLS record carrying a handshake message (a ClientHello's).
const HANDSHAKE_RECORD: u8 = 0x16;

/// A TLS connection on a socket registered with the worker's runtime.
pub struct TlsStream {
    socket: TcpStream,
    tls: RefCell<TlsState>,
    /// Plaintext the last write sealed into records not all sent yet: reported to the next
    /// write once they are (see the module's comment).
    unreported: Cell<usize>,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

/// Why a TLS listener's connection did not complete its handshake.
#[derive(Debug)]
pub enum HandshakeFailure {
    /// The client's first bytes were cleartext HTTP: the connection is given back, untouched,
    /// so that the session can answer it (a 400, as nginx does).
    PlainHttp(super::Detached),
    /// The first bytes were neither TLS nor HTTP.
    NotTls,
    /// The client closed the connection (or reset it) before the handshake ended.
    Closed,
    /// The handshake broke TLS's rules, offered nothing in common, or named a host the listener
    /// refuses (rustls's error; the client was sent its alert).
    Refused(rustls::Error),
    /// The socket failed.
    Io(io::Error),
}

impl HandshakeFailure {
    /// The reason, as the counters keep it.
    pub fn reason(&self) -> HandshakeFailed {
        match self {
            HandshakeFailure::PlainHttp(_) => HandshakeFailed::PlainHttp,
            HandshakeFailure::NotTls => HandshakeFailed::NotTls,
            HandshakeFailure::Closed => HandshakeFailed::Closed,
            HandshakeFailure::Refused(
                rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertificate(_),
            ) => HandshakeFailed::ClientCertificate,
            // The one general error a server handshake makes: its certificate resolver found
            // none for the name asked (rustls 0.23, server/hs.rs).
            HandshakeFailure::Refused(rustls::Error::General(_)) => HandshakeFailed::UnknownName,
            HandshakeFailure::Refused(rustls::Error::NoApplicationProtocol) => {
                HandshakeFailed::Alpn
            }
            HandshakeFailure::Refused(_) => HandshakeFailed::Protocol,
            HandshakeFailure::Io(error) if is_reset(error) => HandshakeFailed::Closed,
            HandshakeFailure::Io(_) => HandshakeFailed::Io,
        }
    }
}

impl std::fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeFailure::PlainHttp(_) => f.write_str("cleartext HTTP instead of TLS"),
            HandshakeFailure::NotTls => f.write_str("not TLS"),
            HandshakeFailure::Closed => f.write_str("closed during the handshake"),
            HandshakeFailure::Refused(error) => error.fmt(f),
            HandshakeFailure::Io(error) => error.fmt(f),
        }
    }
}

/// What a finished handshake agreed, for the access log and the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFacts {
    /// "TLSv1.3", "TLSv1.2" (nginx's `$ssl_protocol`).
    pub version: &'static str,
    /// The cipher suite's IANA name, e.g. "TLS13_AES_128_GCM_SHA256".
    pub cipher: &'static str,
    /// Whether the client resumed an earlier session (a ticket, or a TLS 1.2 session id).
    pub resumed: bool,
    /// The host name the client asked for (SNI), if it named one.
    pub server_name: Option<Box<str>>,
    /// The certificate the client presented and the listener verified (mTLS), if any.
    pub client_certificate: Option<Box<ClientCertificate>>,
}

/// A client's verified certificate, as servers and the access log are told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// Its subject, RFC 4514 style (`CN=alice,O=Example`), in visible ASCII.
    pub subject: Box<str>,
    /// The value of the `X-Forwarded-Client-Cert` field servers get (Envoy's format):
    /// `Hash=<SHA-256 of the DER, hex>;Subject="…"`, then `;URI=…` and `;DNS=…` per name.
    pub forwarded: Box<str>,
}

impl ClientCertificate {
    /// What `der` (a certificate the handshake verified) says of its holder.
    pub fn from_der(der: &[u8]) -> ClientCertificate {
        use sha2::Digest;
        use std::fmt::Write as _;
        let hash = sha2::Sha256::digest(der);
        let mut forwarded = String::from("Hash=");
        for byte in hash {
            let _ = write!(forwarded, "{byte:02x}");
        }
        let Ok((_, parsed)) = x509_parser::parse_x509_certificate(der) else {
            // rustls verified it, so it parses; should it not, the hash still names it.
            return ClientCertificate {
                subject: Box::from(""),
                forwarded: forwarded.into_boxed_str(),
            };
        };
        let subject = visible(&parsed.subject().to_string().replace(", ", ","));
        let _ = write!(forwarded, ";Subject=\"{}\"", subject.replace('"', "\\\""));
        if let Ok(Some(names)) = parsed.subject_alternative_name() {
            for name in &names.value.general_names {
                match name {
                    x509_parser::extensions::GeneralName::URI(uri) => {
                        let _ = write!(forwarded, ";URI={}", visible(uri));
                    }
                    x509_parser::extensions::GeneralName::DNSName(dns) => {
                        let _ = write!(forwarded, ";DNS={}", visible(dns));
                    }
                    _ => {}
                }
            }
        }
        ClientCertificate {
            subject: subject.into_boxed_str(),
            forwarded: forwarded.into_boxed_str(),
        }
    }
}

/// `text` with every character outside visible ASCII (and `;`, which separates XFCC's elements,
/// and `\`) written `\xHH`, byte by byte: safe in a header field and a log line.
fn visible(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b';' | b'\\' => {
                let _ = write!(out, "\\x{byte:02x}");
            }
            b' '..=b'~' => out.push(char::from(byte)),
            _ => {
                let _ = write!(out, "\\x{byte:02x}");
            }
        }
    }
    out
}

/// The peer reset the connection (or it broke): a close, not a fault of the socket.
fn is_reset(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

fn is_would_block(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::WouldBlock
}

/// Runs the server side of a TLS handshake on `socket` (accepted, not registered) with
/// `config`. Looks at the first bytes before anything else: cleartext HTTP is handed back to be
/// answered, anything else that is not a TLS handshake record is refused at once. The caller
/// bounds the time it takes.
pub async fn accept(
    socket: std::net::TcpStream,
    config: &Arc<ServerConfig>,
) -> Result<TlsStream, HandshakeFailure> {
    let socket = TcpStream::from_std(socket).map_err(HandshakeFailure::Io)?;
    // Handshake messages go out in flights that must not wait for each other's ACK.
    let _ = socket.set_nodelay(true);
    let mut first = [0u8; 1];
    let peeked = std::future::poll_fn(|cx| loop {
        ready!(socket.poll_read_ready(cx))?;
        match socket.try_io(Interest::READABLE, || {
            socket2::SockRef::from(&socket).peek(unsafe_uninit(&mut first))
        }) {
            Err(error) if is_would_block(&error) => continue,
            peeked => return Poll::Ready(peeked),
        }
    })
    .await;
    match peeked {
        Ok(0) => return Err(HandshakeFailure::Closed),
        Err(error) => return Err(HandshakeFailure::Io(error)),
        Ok(_) if first[0] == HANDSHAKE_RECORD => {}
        Ok(_) if first[0].is_ascii_uppercase() => {
            let socket = socket.into_std().map_err(HandshakeFailure::Io)?;
            return Err(HandshakeFailure::PlainHttp(super::Detached::plain(socket)));
        }
        Ok(_) => return Err(HandshakeFailure::NotTls),
    }
    let state = TlsState::server(Arc::clone(config)).map_err(HandshakeFailure::Refused)?;
    let stream = TlsStream::new(socket, state);
    std::future::poll_fn(|cx| stream.poll_handshake(cx)).await?;
    Ok(stream)
}

/// Runs the client side of a TLS handshake with a server on `socket` (connected, registered):
/// the name `tls` gives is sent in SNI and the server's certificate verified against it (unless
/// the pool said `verify = false`). The caller bounds the time it takes.
pub async fn connect(socket: TcpStream, tls: &ServerTls) -> Result<TlsStream, HandshakeFailure> {
    let state = TlsState::client(Arc::clone(&tls.client_config), tls.name.clone())
        .map_err(HandshakeFailure::Refused)?;
    let stream = TlsStream::new(socket, state);
    std::future::poll_fn(|cx| stream.poll_handshake(cx)).await?;
    Ok(stream)
}

/// A byte array as the uninitialised memory `recv`/`peek` write into.
fn unsafe_uninit(bytes: &mut [u8]) -> &mut [std::mem::MaybeUninit<u8>] {
    // SAFETY: initialised bytes are valid as possibly-uninitialised ones, and the callee only
    // writes to them.
    unsafe { &mut *(bytes as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) }
}

impl TlsStream {
    fn new(socket: TcpStream, state: TlsState) -> TlsStream {
        TlsStream {
            socket,
            tls: RefCell::new(state),
            unreported: Cell::new(0),
        }
    }

    /// A parked connection back in a runtime: registered again, its TLS state as it was.
    pub fn resume(socket: std::net::TcpStream, tls: Box<TlsState>) -> io::Result<TlsStream> {
        let socket = TcpStream::from_std(socket)?;
        Ok(TlsStream::new(socket, *tls))
    }

    /// Out of the runtime, to park: the socket and its TLS state, which gives back the memory
    /// of its empty buffers. Only a client's connection parks; a server connection has none to
    /// give.
    pub fn detach(self) -> io::Result<(std::net::TcpStream, Box<TlsState>)> {
        let mut tls = self.tls.into_inner();
        if !tls.is_server() {
            return Err(io::Error::other("a server connection cannot park"));
        }
        tls.shed_buffers();
        Ok((self.socket.into_std()?, Box::new(tls)))
    }

    /// What the handshake agreed; `None` before it ended.
    pub fn facts(&self) -> Option<TlsFacts> {
        let state = self.tls.borrow();
        let tls = state.common();
        let version = match tls.protocol_version()? {
            rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
            rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
            _ => "TLS",
        };
        let cipher = tls
            .negotiated_cipher_suite()?
            .suite()
            .as_str()
            .unwrap_or("?");
        let resumed = tls.handshake_kind() == Some(HandshakeKind::Resumed);
        let server_name = state.server_name().map(Box::from);
        let client_certificate = match state.is_server() {
            true => tls
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|leaf| Box::new(ClientCertificate::from_der(leaf))),
            false => None,
        };
        Some(TlsFacts {
            version,
            cipher,
            resumed,
            server_name,
            client_certificate,
        })
    }

    /// Whether the handshake agreed on the ALPN protocol `protocol`.
    pub fn agreed_alpn(&self, protocol: &[u8]) -> bool {
        self.tls.borrow().common().alpn_protocol() == Some(protocol)
    }

    /// Drives the handshake to its end: every flight written, every one awaited read.
    fn poll_handshake(&self, cx: &mut Context<'_>) -> Poll<Result<(), HandshakeFailure>> {
        loop {
            let processed = self.tls.borrow_mut().process();
            if let Err(error) = processed {
                // The alert, if the socket takes it now.
                let _ = self.send_now(&mut self.tls.borrow_mut());
                return Poll::Ready(Err(HandshakeFailure::Refused(error)));
            }
            ready!(self.poll_send(cx)).map_err(HandshakeFailure::Io)?;
            if !self.tls.borrow().is_handshaking() {
                return Poll::Ready(Ok(()));
            }
            match ready!(self.poll_receive(cx)) {
                Ok(true) => {}
                Ok(false) => return Poll::Ready(Err(HandshakeFailure::Closed)),
                Err(Received::Tls(error)) => {
                    return Poll::Ready(Err(HandshakeFailure::Refused(error)))
                }
                Err(Received::Io(error)) => return Poll::Ready(Err(HandshakeFailure::Io(error))),
            }
        }
    }

    /// Sends every record waiting, waiting for the socket as needed.
    fn poll_send(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut tls = self.tls.borrow_mut();
        while tls.wants_write() {
            let fd = self.socket.as_fd();
            match self.socket.try_io(Interest::WRITABLE, || tls.write_to(fd)) {
                Ok(_) => {}
                Err(error) if is_would_block(&error) => {
                    ready!(self.socket.poll_write_ready(cx))?;
                }
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Sends what the socket takes now; `WouldBlock` when records are left.
    fn send_now(&self, tls: &mut TlsState) -> io::Result<()> {
        while tls.wants_write() {
            let fd = self.socket.as_fd();
            self.socket
                .try_io(Interest::WRITABLE, || tls.write_to(fd))?;
        }
        Ok(())
    }

    /// Reads records from the socket once and processes them: true when bytes came, false at
    /// the end of the stream. Whatever rustls must answer (an alert, a key update) is sent as
    /// it can be.
    fn poll_receive(&self, cx: &mut Context<'_>) -> Poll<Result<bool, Received>> {
        loop {
            ready!(self.socket.poll_read_ready(cx)).map_err(Received::Io)?;
            let mut tls = self.tls.borrow_mut();
            let fd = self.socket.as_fd();
            let read = self.socket.try_io(Interest::READABLE, || tls.read_from(fd));
            match read {
                Ok(0) => return Poll::Ready(Ok(false)),
                Ok(_) => {
                    let processed = tls.process();
                    // An alert for a failure, or what a record asks in return.
                    let _ = self.send_now(&mut tls);
                    return Poll::Ready(processed.map(|_| true).map_err(Received::Tls));
                }
                Err(error) if is_would_block(&error) => {}
                Err(error) => return Poll::Ready(Err(Received::Io(error))),
            }
        }
    }

    /// Copies plaintext already opened into `buf`: `None` when there is none yet (more records
    /// are needed), `Some(Ok(()))` with bytes or at the end of the stream (a close_notify, or
    /// the TCP connection's end: HTTP's own framing tells a cut message, as every browser and
    /// server that skips close_notify relies on).
    fn read_opened(&self, buf: &mut ReadBuf<'_>) -> Option<io::Result<()>> {
        take_opened(&mut self.tls.borrow_mut(), buf)
    }

    pub fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if let Some(read) = self.read_opened(buf) {
                return Poll::Ready(read);
            }
            match ready!(self.poll_receive(cx)) {
                Ok(true) => {}
                // The TCP connection ended: so does the plaintext.
                Ok(false) => return Poll::Ready(Ok(())),
                Err(Received::Io(error)) => return Poll::Ready(Err(error)),
                Err(Received::Tls(error)) => {
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, error)))
                }
            }
        }
    }

    /// Seals `bytes` (as much as one write takes) and sends them; see the module's comment.
    pub fn poll_write(&self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        if self.unreported.get() == 0 {
            ready!(self.poll_send(cx))?;
            let taken = self.tls.borrow_mut().seal(bytes)?;
            self.unreported.set(taken);
        }
        ready!(self.poll_send(cx))?;
        Poll::Ready(Ok(self.unreported.replace(0)))
    }

    /// Seals and sends `bytes` if the socket takes every record now. `WouldBlock` when it does
    /// not: bytes sealed but not all sent are then reported by the next `poll_write` (given the
    /// same bytes), which finishes sending them.
    pub fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        if self.unreported.get() != 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut tls = self.tls.borrow_mut();
        self.send_now(&mut tls)?;
        let taken = tls.seal(bytes)?;
        match self.send_now(&mut tls) {
            Ok(()) => Ok(taken),
            Err(error) => {
                self.unreported.set(taken);
                Err(error)
            }
        }
    }

    /// Ready when a read would not wait: plaintext already opened, or the socket readable.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_opened() {
            return Poll::Ready(Ok(()));
        }
        self.socket.poll_read_ready(cx)
    }

    /// Whether a read is known not to wait, with no system call (see `Stream::is_read_ready`).
    pub fn is_read_ready(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.has_opened() || self.socket.poll_read_ready(&mut cx).is_ready()
    }

    /// Whether plaintext is opened and waiting to be read (or the peer's close_notify, which a
    /// read returns at once).
    fn has_opened(&self) -> bool {
        let tls = self.tls.borrow();
        tls.has_opened() || tls.at_end()
    }

    /// Completes when the peer closed or reset the connection; bytes it sends meanwhile (a
    /// record) end the watch as the plain stream's does.
    pub fn poll_closed(&self, cx: &mut Context<'_>, data_came: &mut bool) -> Poll<()> {
        if *data_came {
            return Poll::Pending;
        }
        {
            let tls = self.tls.borrow();
            if tls.at_end() {
                return Poll::Ready(());
            }
            if tls.has_opened() {
                *data_came = true;
                return Poll::Pending;
            }
        }
        loop {
            if ready!(self.socket.poll_read_ready(cx)).is_err() {
                return Poll::Ready(());
            }
            let mut probe = [0u8; 1];
            let peeked = self.socket.try_io(Interest::READABLE, || {
                socket2::SockRef::from(&self.socket).peek(unsafe_uninit(&mut probe))
            });
            match peeked {
                Err(error) if is_would_block(&error) => continue,
                Ok(0) | Err(_) => return Poll::Ready(()),
                Ok(_) => {
                    *data_came = true;
                    return Poll::Pending;
                }
            }
        }
    }

    /// Whether an idle connection is still usable: records that came meanwhile (a server's
    /// session tickets) are read and processed, and then no plaintext may be waiting, no close
    /// have come, and the socket must be open.
    pub fn still_open(&self) -> bool {
        let mut tls = self.tls.borrow_mut();
        loop {
            let fd = self.socket.as_fd();
            match self.socket.try_io(Interest::READABLE, || tls.read_from(fd)) {
                Ok(0) => return false,
                Ok(_) => {
                    if tls.process().is_err() {
                        return false;
                    }
                }
                Err(error) if is_would_block(&error) => break,
                Err(_) => return false,
            }
        }
        !tls.has_opened() && !tls.at_end()
    }

    /// Sends close_notify, then FIN.
    pub fn poll_shutdown(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Once: rustls makes a second close_notify nothing. It follows any records waiting.
        self.tls.borrow_mut().close_notify();
        ready!(self.poll_send(cx))?;
        Poll::Ready(socket2::SockRef::from(&self.socket).shutdown(std::net::Shutdown::Write))
    }

    /// Sends close_notify if the socket takes it now (a close that does not wait).
    pub fn close_notify_now(&self) {
        let mut tls = self.tls.borrow_mut();
        tls.close_notify();
        let _ = self.send_now(&mut tls);
    }

    pub fn socket(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
    }
}

/// Why receiving failed: the socket, or the records it brought.
enum Received {
    Io(io::Error),
    Tls(rustls::Error),
}

/// Moves plaintext `tls` has opened into `buf` (see `TlsStream::read_opened`, whose contract
/// this is): `None` when there is none yet, `Some(Ok(()))` with bytes or at the end of the stream.
fn take_opened(tls: &mut TlsState, buf: &mut ReadBuf<'_>) -> Option<io::Result<()>> {
    if tls.has_opened() {
        // SAFETY: `take_opened` initialises the bytes it reports, which are then marked so.
        let n = tls.take_opened(unsafe { buf.unfilled_mut() });
        // SAFETY: as just said.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        return Some(Ok(()));
    }
    tls.at_end().then_some(Ok(()))
}

/// A parked client connection's TLS state, read through without a runtime: what
/// `Detached::read_now` uses. Reads records once and opens them into `room`; 0 at the end of the
/// stream; `WouldBlock` when no plaintext can be had now.
pub fn read_now(
    socket: &std::net::TcpStream,
    tls: &mut TlsState,
    room: &mut [std::mem::MaybeUninit<u8>],
) -> io::Result<usize> {
    let copy = |tls: &mut TlsState, room: &mut [std::mem::MaybeUninit<u8>]| {
        let mut buf = ReadBuf::uninit(room);
        match take_opened(tls, &mut buf) {
            None => Err(io::ErrorKind::WouldBlock.into()),
            Some(taken) => taken.map(|()| buf.filled().len()),
        }
    };
    match copy(tls, room) {
        Err(error) if is_would_block(&error) => {}
        copied => return copied,
    }
    loop {
        match tls.read_from(socket.as_fd()) {
            Ok(0) => return Ok(0),
            Ok(_) => {
                let processed = tls.process();
                let _ = tls.send_now(socket.as_fd());
                processed.map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
                match copy(tls, room) {
                    Err(error) if is_would_block(&error) => continue,
                    copied => return copied,
                }
            }
            Err(error) => return Err(error),
        }
    }
}
