//! A body moved from one plain socket (TCP, or a server's UNIX socket) to another through a pipe
//! with splice(2), so that its bytes never come up to user space: the kernel moves the socket's
//! pages into the pipe and on to the other socket by reference. Measured with 64 MiB uploads through one worker to nginx
//! (bench/results/uploads.md), it halves herdsman's CPU per upload against reading into and
//! writing from a buffer.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

use super::stream::{ReadHalf, Registered, WriteHalf};

/// The pipe's size asked for (Linux's `pipe-max-size` default): fewer splices a body.
const PIPE_SIZE: usize = 1 << 20;

/// The smallest pipe worth splicing through (the default size): past `pipe-user-pages-soft`
/// (64 MiB of pipes per user, by default), an unprivileged process gets pipes of two pages and
/// may not enlarge them, and splicing 8 KiB at a time costs more than a buffer's copy.
const PIPE_WORTH: usize = 64 * 1024;

/// A pipe between two sockets, and the bytes it holds: taken from the source, not yet given to
/// the sink. Closed when dropped, with whatever it still holds.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
    held: usize,
}

impl Pipe {
    /// A new pipe, as large as the system lets it be up to 1 MiB; an error when it cannot be
    /// made at least `PIPE_WORTH` large.
    pub fn new() -> io::Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both are open descriptors owned from here on.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_SETPIPE_SZ and F_GETPIPE_SZ on a pipe this process owns; a refusal of the
        // first leaves the size the pipe was made with, which the second tells.
        let size = unsafe {
            match libc::fcntl(
                write.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                PIPE_SIZE as libc::c_int,
            ) {
                refused if refused < 0 => libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ),
                size => size,
            }
        };
        match usize::try_from(size) {
            Ok(size) if size >= PIPE_WORTH => Ok(Pipe {
                read,
                write,
                size,
                held: 0,
            }),
            _ => Err(io::Error::other("the pipe is too small to splice through")),
        }
    }

    /// Bytes taken from the source and not yet given to the sink.
    #[inline]
    pub fn held(&self) -> usize {
        self.held
    }

    /// Takes what `from` has, at most `most` bytes (and what the empty pipe holds), waiting for
    /// some if none are there. 0: `from` ended.
    pub async fn fill_from(&mut self, from: &ReadHalf<'_>, most: u64) -> io::Result<usize> {
        debug_assert_eq!(self.held, 0, "a pipe is filled once it is empty");
        let most = most.min(self.size as u64) as usize;
        let into = self.write.as_raw_fd();
        // The pipe is empty and the splice asks no more than it holds: EAGAIN is the socket's.
        let splice_in = |socket: RawFd| splice(socket, into, most, false);
        let n = match from.plain().ok_or_else(not_plain)?? {
            Plain::Tcp(socket) => when_ready(socket, Interest::READABLE, splice_in).await?,
            Plain::Unix(socket) => when_ready(socket, Interest::READABLE, splice_in).await?,
        };
        self.held = n;
        Ok(n)
    }

    /// Gives `to` what it takes of the pipe's bytes, waiting for room if it takes none now;
    /// `more`: the body goes on after them (the kernel may hold a partial segment back).
    pub async fn drain_to(&mut self, to: &WriteHalf<'_>, more: bool) -> io::Result<usize> {
        let (out, held) = (self.read.as_raw_fd(), self.held);
        // The pipe holds bytes: EAGAIN is the socket's.
        let splice_out = |socket: RawFd| splice(out, socket, held, more);
        let n = match to.plain().ok_or_else(not_plain)?? {
            Plain::Tcp(socket) => when_ready(socket, Interest::WRITABLE, splice_out).await?,
            Plain::Unix(socket) => when_ready(socket, Interest::WRITABLE, splice_out).await?,
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.held -= n;
        Ok(n)
    }
}

/// One splice on `socket` for `interest`: tried at once (a registered socket's bytes may be
/// there before its readiness is known), then after each readiness it brings; one unit of the
/// task's cooperative budget, as a buffered relay's write costs.
async fn when_ready(
    socket: &impl Registered,
    interest: Interest,
    splice: impl Fn(RawFd) -> io::Result<usize>,
) -> io::Result<usize> {
    tokio::task::coop::consume_budget().await;
    let fd = socket.as_fd().as_raw_fd();
    loop {
        match socket.try_io(interest, || splice(fd)) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                socket.ready(interest).await?;
            }
            done => return done,
        }
    }
}

/// The registered socket under a half that can be spliced: TCP, or a server's UNIX socket.
enum Plain<'a> {
    Tcp(&'a TcpStream),
    Unix(&'a UnixStream),
}

/// Whether a body can go from `from` to `to` through a [`Pipe`]: both plain sockets, TCP or
/// UNIX (not TLS, not multiplexed), on Linux.
pub fn can_splice(from: &ReadHalf<'_>, to: &WriteHalf<'_>) -> bool {
    cfg!(target_os = "linux")
        && matches!(
            from,
            ReadHalf::Tcp(_) | ReadHalf::Client(_) | ReadHalf::Unix(_)
        )
        && matches!(
            to,
            WriteHalf::Tcp(_) | WriteHalf::Client(_) | WriteHalf::Unix(_)
        )
}

#[cfg(target_os = "linux")]
fn splice(from: RawFd, to: RawFd, most: usize, more: bool) -> io::Result<usize> {
    let more = if more { libc::SPLICE_F_MORE } else { 0 };
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK | more;
    // SAFETY: both descriptors are open for the call (borrowed from live owners); null offsets
    // are what pipes and sockets take.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            most,
            flags,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(not(target_os = "linux"))]
fn splice(_from: RawFd, _to: RawFd, _most: usize, _more: bool) -> io::Result<usize> {
    Err(not_plain())
}

impl ReadHalf<'_> {
    /// The registered socket under this half, if it is a plain one.
    fn plain(&self) -> Option<io::Result<Plain<'_>>> {
        match self {
            ReadHalf::Tcp(read) => Some(Ok(Plain::Tcp(read.as_ref()))),
            ReadHalf::Client(client) => Some(client.registration().map(Plain::Tcp)),
            ReadHalf::Unix(read) => Some(Ok(Plain::Unix(read.as_ref()))),
            _ => None,
        }
    }
}

impl WriteHalf<'_> {
    /// As [`ReadHalf::plain`].
    fn plain(&self) -> Option<io::Result<Plain<'_>>> {
        match self {
            WriteHalf::Tcp(write) => Some(Ok(Plain::Tcp(write.as_ref()))),
            WriteHalf::Client(client) => Some(client.registration().map(Plain::Tcp)),
            WriteHalf::Unix(write) => Some(Ok(Plain::Unix(write.as_ref()))),
            _ => None,
        }
    }
}

fn not_plain() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "a splice needs plain sockets on both sides, on Linux",
    )
}
