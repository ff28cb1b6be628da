//! Linux calls on sockets that neither tokio nor socket2 offer, with honest fallbacks elsewhere:
//! SO_REUSEPORT, TCP_DEFER_ACCEPT, accept4 straight into non-blocking mode, EPOLLEXCLUSIVE,
//! TCP_INFO's byte counts, and `recv`/`send`/`sendmsg` as plain system calls.

use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use socket2::Socket;

use super::Detached;

/// One `recv` into `room` (which it need not be initialised: the kernel writes the bytes it
/// reports), made as a plain system call. glibc's `recv` and `send` are thread-cancellation
/// points, which costs each call about 30 instructions turning asynchronous cancellation on and
/// off around the system call; herdsman never cancels a thread, and a keep-alive request makes
/// four such calls (callgrind, bench/results/diet.md).
#[cfg(target_os = "linux")]
#[inline]
pub fn recv(socket: BorrowedFd<'_>, room: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    // SAFETY: `room` is valid for writes of its length; the address arguments are null, as
    // recv(2) passes them.
    let n = unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            socket.as_raw_fd(),
            room.as_mut_ptr(),
            room.len(),
            0,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One `send` of `bytes`, as a plain system call (see [`recv`]); MSG_NOSIGNAL, as std's: a
/// peer that is gone makes it fail with EPIPE rather than raise SIGPIPE.
#[cfg(target_os = "linux")]
#[inline]
pub fn send(socket: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: `bytes` is valid for reads of its length; no address, as send(2) passes none.
    let n = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            socket.as_raw_fd(),
            bytes.as_ptr(),
            bytes.len(),
            libc::MSG_NOSIGNAL,
            std::ptr::null::<libc::sockaddr>(),
            0 as libc::socklen_t,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One `sendmsg` of `first` and then `second` (a head and a body): both in one system call,
/// and on loopback in one segment, where two `send`s make two of each. A plain system call and
/// MSG_NOSIGNAL, as [`send`].
#[cfg(target_os = "linux")]
#[inline]
pub fn send_two(socket: BorrowedFd<'_>, first: &[u8], second: &[u8]) -> io::Result<usize> {
    let mut slices = [
        libc::iovec {
            iov_base: first.as_ptr().cast_mut().cast(),
            iov_len: first.len(),
        },
        libc::iovec {
            iov_base: second.as_ptr().cast_mut().cast(),
            iov_len: second.len(),
        },
    ];
    // SAFETY: an all-zero msghdr is a valid value of that plain C struct (no address, no
    // control data); its two iovecs point at slices valid for reads for the call, which only
    // reads them.
    let n = unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = slices.as_mut_ptr();
        message.msg_iovlen = slices.len();
        libc::syscall(
            libc::SYS_sendmsg,
            socket.as_raw_fd(),
            &message as *const libc::msghdr,
            libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(not(target_os = "linux"))]
pub fn recv(socket: BorrowedFd<'_>, room: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    socket2::SockRef::from(&socket).recv(room)
}

#[cfg(not(target_os = "linux"))]
pub fn send(socket: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<usize> {
    use std::io::Write;
    (&*socket2::SockRef::from(&socket)).write(bytes)
}

#[cfg(not(target_os = "linux"))]
pub fn send_two(socket: BorrowedFd<'_>, first: &[u8], second: &[u8]) -> io::Result<usize> {
    use std::io::{IoSlice, Write};
    (&*socket2::SockRef::from(&socket)).write_vectored(&[IoSlice::new(first), IoSlice::new(second)])
}

/// SO_REUSEPORT: several sockets on one address, connections spread over them by the kernel.
#[cfg(unix)]
pub fn set_reuse_port(socket: &Socket) -> io::Result<()> {
    socket.set_reuse_port(true)
}

#[cfg(not(unix))]
pub fn set_reuse_port(_socket: &Socket) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "intake = \"reuseport\" needs SO_REUSEPORT, which this platform lacks",
    ))
}

/// TCP_DEFER_ACCEPT: the kernel completes a connection's accept only once its first bytes have
/// come (or `seconds` have passed), so a worker is woken for a request, not for a handshake.
/// 0 turns it off.
#[cfg(target_os = "linux")]
pub fn set_defer_accept(socket: &Socket, seconds: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(seconds).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
pub fn set_defer_accept(_socket: &Socket, seconds: u32) -> io::Result<()> {
    match seconds {
        0 => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "defer_accept needs TCP_DEFER_ACCEPT, which only Linux has",
        )),
    }
}

/// Accepts one connection, already non-blocking and close-on-exec (one syscall, not three).
#[cfg(target_os = "linux")]
pub fn accept_nonblocking(listener: &Socket) -> io::Result<(Detached, SocketAddr)> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: an all-zero sockaddr_storage is a valid value of that plain C struct.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: storage and len describe a writable buffer of the size given; the fd returned is
    // new and owned by nobody else, so the connection may take it.
    let (fd, addr) = unsafe {
        let fd = libc::accept4(
            listener.as_raw_fd(),
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        (fd, socket2::SockAddr::new(storage, len))
    };
    // SAFETY: see above.
    let stream = unsafe { Detached::from_raw_fd(fd) };
    let peer = addr
        .as_socket()
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    Ok((stream, peer))
}

#[cfg(not(target_os = "linux"))]
pub fn accept_nonblocking(listener: &Socket) -> io::Result<(Detached, SocketAddr)> {
    let (socket, addr) = listener.accept()?;
    socket.set_nonblocking(true)?;
    let peer = addr
        .as_socket()
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    use std::os::fd::{FromRawFd, IntoRawFd};
    // SAFETY: the descriptor was just accepted and is given up by `socket`.
    Ok((unsafe { Detached::from_raw_fd(socket.into_raw_fd()) }, peer))
}

/// True when the kernel accepts EPOLLEXCLUSIVE (Linux 4.5 and later): tried on a real epoll
/// instance, not assumed from the version.
#[cfg(target_os = "linux")]
pub fn epoll_exclusive_supported() -> bool {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain syscalls on descriptors created here and closed by OwnedFd.
    unsafe {
        let epoll = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        let event = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
        if epoll < 0 || event < 0 {
            return false;
        }
        let (_epoll, _event) = (OwnedFd::from_raw_fd(epoll), OwnedFd::from_raw_fd(event));
        let mut interest = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
            u64: 0,
        };
        libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, event, &mut interest) == 0
    }
}

#[cfg(not(target_os = "linux"))]
pub fn epoll_exclusive_supported() -> bool {
    false
}

/// Makes the calling thread's tokio reactor wait on `fd` with EPOLLEXCLUSIVE, so that a new
/// connection wakes one waiting worker instead of all of them.
///
/// tokio registers sockets with its own epoll instance and has no way to ask for
/// EPOLLEXCLUSIVE, which may only be set when a descriptor is added. So, after tokio registered
/// `fd`, this finds that registration in /proc/self/fdinfo (the epoll instance that watches this
/// very file, matched by descriptor and inode), and removes and re-adds it with the same event
/// data — tokio's token — plus EPOLLEXCLUSIVE. tokio keeps working unchanged: it receives the
/// same token, only fewer times. The epoll instance must be the one the worker thread itself
/// blocks in: the kernel counts a waiter for EPOLLEXCLUSIVE only when a thread sleeps in
/// epoll_wait on that instance (nesting it inside another epoll would wake every instance).
#[cfg(target_os = "linux")]
pub fn make_epoll_exclusive(fd: std::os::fd::RawFd) -> io::Result<()> {
    let inode = {
        // SAFETY: fstat writes a stat struct for a valid descriptor.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut stat) } != 0 {
            return Err(io::Error::last_os_error());
        }
        stat.st_ino
    };
    let registration = find_epoll_registration(fd, inode)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "the listening socket is not registered with this thread's reactor",
        )
    })?;
    let mut exclusive = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLET | libc::EPOLLEXCLUSIVE) as u32,
        u64: registration.data,
    };
    // SAFETY: epoll and fd are open descriptors; the events are valid epoll_event values.
    unsafe {
        if libc::epoll_ctl(
            registration.epoll,
            libc::EPOLL_CTL_DEL,
            fd,
            std::ptr::null_mut(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if libc::epoll_ctl(registration.epoll, libc::EPOLL_CTL_ADD, fd, &mut exclusive) != 0 {
            let error = io::Error::last_os_error();
            // Put tokio's own registration back, so the socket is still served (woken like the
            // herd) rather than not at all.
            let mut original = libc::epoll_event {
                events: registration.events,
                u64: registration.data,
            };
            libc::epoll_ctl(registration.epoll, libc::EPOLL_CTL_ADD, fd, &mut original);
            return Err(error);
        }
    }
    Ok(())
}

/// Where and how a descriptor is registered in an epoll instance.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Registration {
    epoll: i32,
    events: u32,
    data: u64,
}

#[cfg(not(target_os = "linux"))]
pub fn make_epoll_exclusive(_fd: i32) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "EPOLLEXCLUSIVE needs Linux 4.5 or later",
    ))
}

/// The epoll descriptor of this process that watches descriptor `fd` (whose file has inode
/// `inode`), with the events and data it was registered with.
#[cfg(target_os = "linux")]
fn find_epoll_registration(fd: i32, inode: u64) -> io::Result<Option<Registration>> {
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target.as_os_str() != "anon_inode:[eventpoll]" {
            continue;
        }
        let Some(epoll) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{epoll}")) else {
            continue;
        };
        if let Some((events, data)) = registration_data(&info, fd, inode) {
            return Ok(Some(Registration {
                epoll,
                events,
                data,
            }));
        }
    }
    Ok(None)
}

/// In an epoll fdinfo text, the events and data of the line watching descriptor `fd` of inode
/// `inode`. Lines look like `tfd:  7 events:  19 data: 7f3a2c0015c0  pos:0 ino:1a2b sdev:8`
/// (numbers after events, data and ino are hexadecimal).
fn registration_data(info: &str, fd: i32, inode: u64) -> Option<(u32, u64)> {
    info.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let (mut tfd, mut events, mut data, mut ino) = (None, None, None, None);
        while let Some(word) = words.next() {
            match word {
                "tfd:" => tfd = words.next().and_then(|v| v.parse::<i32>().ok()),
                "events:" => events = words.next().and_then(|v| u32::from_str_radix(v, 16).ok()),
                "data:" => data = words.next().and_then(|v| u64::from_str_radix(v, 16).ok()),
                w if w.starts_with("ino:") => ino = u64::from_str_radix(&w[4..], 16).ok(),
                _ => {}
            }
        }
        if tfd == Some(fd) && ino == Some(inode) {
            Some((events?, data?))
        } else {
            None
        }
    })
}

/// Bytes sent once (retransmissions aside) and bytes acknowledged on the TCP socket `fd`, from
/// TCP_INFO.
#[cfg(target_os = "linux")]
pub fn tcp_bytes(fd: RawFd) -> Option<(u64, u64)> {
    /// The start of Linux's `struct tcp_info` up to `tcpi_bytes_retrans` (libc's copy of the
    /// struct ends before the byte counts).
    #[repr(C)]
    #[derive(Default)]
    struct TcpInfo {
        head: [u8; 8],
        words: [u32; 24],
        pacing_rate: u64,
        max_pacing_rate: u64,
        bytes_acked: u64,
        bytes_received: u64,
        segs: [u32; 6],
        delivery_rate: u64,
        busy_time: u64,
        rwnd_limited: u64,
        sndbuf_limited: u64,
        delivered: [u32; 2],
        bytes_sent: u64,
        bytes_retrans: u64,
    }
    let mut info = TcpInfo::default();
    let mut length = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: `info` is a plain struct of integers with room for `length` bytes, which the
    // kernel fills (at most that many) and reports back.
    let status = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            std::ptr::addr_of_mut!(info).cast(),
            &mut length,
        )
    };
    if status != 0 || (length as usize) < std::mem::size_of::<TcpInfo>() {
        return None;
    }
    let sent = info.bytes_sent.checked_sub(info.bytes_retrans)?;
    Some((sent, info.bytes_acked))
}

#[cfg(not(target_os = "linux"))]
pub fn tcp_bytes(_fd: RawFd) -> Option<(u64, u64)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_registration_of_one_descriptor() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
                    tfd:        9 events:       19 data:     55d0c0a1b2c0  pos:0 ino:2f41 sdev:8\n\
                    tfd:       10 events:  8000019 data:     55d0c0a1b3c0  pos:0 ino:2f42 sdev:8\n";
        assert_eq!(
            registration_data(info, 10, 0x2f42),
            Some((0x8000019, 0x55d0c0a1b3c0))
        );
        assert_eq!(
            registration_data(info, 10, 0x2f41),
            None,
            "same number, other file"
        );
        assert_eq!(registration_data(info, 11, 0x2f42), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_kernel_has_epoll_exclusive() {
        assert!(epoll_exclusive_supported());
    }
}
