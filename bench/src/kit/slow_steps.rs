//! The steps slow client connections are made of, for the kinds of `slowloris` and `slow-clients`:
//! connecting (with the small receive window of a reader far away, if asked), sending pieces one
//! step apart, reading a few bytes a step, and seeing, without waiting, whether the proxy has
//! ended the connection. Each counts what it saw in a `Tally`; each ends at the first step after
//! the holder is told to stop.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{sleep, timeout};

use crate::kit::slow_holders::{Shared, Tally};

/// How long a connect may take before it counts as failed.
pub const CONNECT_LIMIT: Duration = Duration::from_secs(5);

/// A receive side as small as a slow reader's far away: its receive buffer (SO_RCVBUF; the kernel
/// doubles it) and the segment size its SYN announces (TCP_MAXSEG). On loopback the segment is
/// 64 KiB, and from it the proxy's kernel sizes its send buffer at up to 4 MiB: a whole answer of
/// a few MiB would then sit in the kernel and the proxy itself would feel nothing. With the
/// segment of an Ethernet path (1460 bytes), as a real slow reader has, the proxy's send buffer
/// stays near 100 KiB (measured here), so its own write waits.
#[derive(Debug, Clone, Copy)]
pub struct SmallWindow {
    pub receive_buffer: u32,
    pub segment: libc::c_int,
}

/// The small window every slow reader here has.
pub const SMALL_WINDOW: SmallWindow = SmallWindow {
    receive_buffer: 4096,
    segment: 1460,
};

/// How a trickle of pieces ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trickled {
    /// Told to stop while the connection was still open: counted as held.
    Held,
    /// The proxy ended it first: counted as ended.
    Ended,
    /// Every piece was sent; nothing is counted yet.
    Sent,
}

/// Connects to `addr`, with `window` set first when given.
pub async fn connect(addr: SocketAddr, window: Option<SmallWindow>) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(window) = window {
        socket.set_recv_buffer_size(window.receive_buffer)?;
        set_segment_size(&socket, window.segment)?;
    }
    timeout(CONNECT_LIMIT, socket.connect(addr))
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection within {CONNECT_LIMIT:?}"),
            ))
        })
}

/// Connects one slow connection, or its next one: the first attempt counts toward the holder's
/// `ready` (when `first`, which it then clears), and `tally` counts the connection opened or the
/// connect failed (and why, if it is the first to end or fail). None: it failed.
pub async fn connect_counted(
    shared: &Shared,
    window: Option<SmallWindow>,
    first: &mut bool,
    tally: &mut Tally,
) -> Option<TcpStream> {
    let opened = connect(shared.addr, window).await;
    if std::mem::take(first) {
        shared
            .attempted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    match opened {
        Ok(stream) => {
            tally.opened += 1;
            Some(stream)
        }
        Err(e) => {
            tally.failed += 1;
            tally.first_end.get_or_insert(format!("connect: {e}"));
            None
        }
    }
}

/// Sends one piece per `step` until the proxy ends the connection, the holder stops, or the
/// pieces run out. Nothing the proxy sends is expected before the last piece, since the request
/// is not complete: an answer counts as ending it.
pub async fn trickle(
    stream: &mut TcpStream,
    shared: &Shared,
    pieces: impl Iterator<Item = Vec<u8>>,
    step: Duration,
    tally: &mut Tally,
) -> Trickled {
    for piece in pieces {
        if let Some(how) = ended_by_peer(stream) {
            tally.end(how);
            return Trickled::Ended;
        }
        if shared.stopping() {
            tally.held += 1;
            return Trickled::Held;
        }
        // A write that waits past the step means the proxy is not reading yet: the next step
        // tries again.
        if let Ok(Err(e)) = timeout(step, stream.write_all(&piece)).await {
            tally.end(format!("write: {}", e.kind()));
            return Trickled::Ended;
        }
        sleep(step).await;
    }
    Trickled::Sent
}

/// Sends `request`, then reads at most `per_step` bytes of the answer per `step` until the proxy
/// ends the connection (or the answer does) or the holder stops.
pub async fn read_slowly(
    stream: &mut TcpStream,
    shared: &Shared,
    request: &[u8],
    per_step: usize,
    step: Duration,
    tally: &mut Tally,
) {
    if let Err(e) = stream.write_all(request).await {
        return tally.end(format!("write: {}", e.kind()));
    }
    let mut status_line = Vec::new();
    let mut buffer = vec![0u8; per_step.max(1)];
    loop {
        sleep(step).await;
        match stream.try_read(&mut buffer) {
            Ok(0) => return tally.end(format!("closed after {} bytes", tally.bytes_read)),
            Ok(n) => {
                tally.bytes_read += n as u64;
                if tally.started == 0 {
                    status_line.extend_from_slice(&buffer[..n]);
                    if status_line.windows(2).any(|w| w == b"\r\n") {
                        tally.started = 1;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return tally.end(format!("read: {}", e.kind())),
        }
        if shared.stopping() {
            tally.held += 1;
            return;
        }
    }
}

/// TCP_MAXSEG before connect: the segment size the SYN announces.
fn set_segment_size(socket: &TcpSocket, bytes: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live c_int; the descriptor is the
    // socket's own and open.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the proxy has ended the connection, without waiting: a close, a reset, or bytes it
/// sent (an answer such as 408 to a request that is not complete). The task's runtime keeps the
/// socket's readiness current between steps, so a non-blocking read sees what arrived.
pub fn ended_by_peer(stream: &TcpStream) -> Option<String> {
    let mut buffer = [0u8; 256];
    match stream.try_read(&mut buffer) {
        Ok(0) => Some("closed".to_string()),
        Ok(n) => Some(format!("answered: {}", first_line(&buffer[..n]))),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => Some(format!("read: {}", e.kind())),
    }
}

fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines().next().unwrap_or_default().trim().to_string()
}

/// A server for tests of slow connections: accepts one connection on 127.0.0.1 and hands it to
/// `serve` on a thread of its own; its address, and the thread to join for what `serve` returned.
#[cfg(test)]
pub fn serve_one_connection<T: Send + 'static>(
    serve: impl FnOnce(std::net::TcpStream) -> T + Send + 'static,
) -> (SocketAddr, std::thread::JoinHandle<T>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || serve(listener.accept().unwrap().0));
    (addr, server)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A trickle against a server that answers 408 after its first bytes: it sees the answer and
    /// counts the connection as ended, with the status line.
    #[test]
    fn a_trickle_sees_the_server_end_it() {
        let (addr, server) = serve_one_connection(|mut conn| {
            let mut byte = [0u8; 1];
            conn.read_exact(&mut byte).unwrap();
            conn.write_all(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n")
                .unwrap();
            byte
        });
        let shared = Shared::new(addr);
        let (ended, tally) = runtime().block_on(async {
            let mut tally = Tally::default();
            let mut first = true;
            let mut stream = connect_counted(&shared, None, &mut first, &mut tally)
                .await
                .unwrap();
            let pieces = b"GET".iter().map(|&b| vec![b]);
            let ended = trickle(
                &mut stream,
                &shared,
                pieces.cycle(),
                Duration::from_millis(100),
                &mut tally,
            )
            .await;
            (ended, tally)
        });
        assert_eq!(server.join().unwrap(), [b'G']);
        assert_eq!(ended, Trickled::Ended);
        assert_eq!((tally.opened, tally.ended, tally.held), (1, 1, 0));
        assert_eq!(
            tally.first_end.as_deref(),
            Some("answered: HTTP/1.1 408 Request Timeout")
        );
        assert_eq!(
            shared.attempted.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }

    /// A slow read of an answer the server writes whole and closes: the status line is seen, every
    /// byte is read a step at a time, and the close ends it.
    #[test]
    fn a_slow_read_reads_a_step_at_a_time_to_the_end() {
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
        let (addr, _server) = serve_one_connection(move |mut conn| {
            let mut request = [0u8; 4];
            conn.read_exact(&mut request).unwrap();
            conn.write_all(answer).unwrap();
        });
        let shared = Shared::new(addr);
        let tally = runtime().block_on(async {
            let mut tally = Tally::default();
            let mut stream = connect(addr, Some(SMALL_WINDOW)).await.unwrap();
            read_slowly(
                &mut stream,
                &shared,
                b"GET ",
                16,
                Duration::from_millis(10),
                &mut tally,
            )
            .await;
            tally
        });
        assert_eq!((tally.started, tally.bytes_read), (1, answer.len() as u64));
        assert_eq!(
            tally.first_end.as_deref(),
            Some(format!("closed after {} bytes", answer.len()).as_str())
        );
    }
}
