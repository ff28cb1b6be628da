//! The herd itself: M threads waiting for connections on 127.0.0.1 in one of four ways, what each
//! sees come back from the kernel, and a shutdown that wakes and joins every one of them in bounded
//! time. Plain libc on Linux: the point is to watch the kernel, not a runtime.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::tasks::{self, Tid};

/// How the threads wait for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Method {
    /// Every thread blocked in accept() on one shared socket.
    Accept,
    /// One epoll instance per thread, the shared socket registered in each without
    /// EPOLLEXCLUSIVE; epoll_wait, then a nonblocking accept4.
    Epoll,
    /// The same with EPOLLEXCLUSIVE.
    EpollExclusive,
    /// One SO_REUSEPORT socket per thread, each thread blocked in accept() on its own.
    Reuseport,
}

impl Method {
    #[cfg(test)]
    pub const ALL: [Method; 4] = [
        Method::Accept,
        Method::Epoll,
        Method::EpollExclusive,
        Method::Reuseport,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Method::Accept => "accept",
            Method::Epoll => "epoll",
            Method::EpollExclusive => "epoll-exclusive",
            Method::Reuseport => "reuseport",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Method::Accept => "every thread blocked in accept() on one shared socket",
            Method::Epoll => {
                "one epoll instance per thread, the shared socket registered in each without \
                 EPOLLEXCLUSIVE; epoll_wait, then accept4 on the nonblocking socket"
            }
            Method::EpollExclusive => "the same with EPOLLEXCLUSIVE",
            Method::Reuseport => {
                "one SO_REUSEPORT socket per thread, each thread blocked in accept() on its own"
            }
        }
    }

    /// File descriptors a herd of `threads` holds open, besides one stat file per thread.
    pub fn descriptors(self, threads: usize) -> usize {
        match self {
            Method::Accept => 1,
            Method::Epoll | Method::EpollExclusive => threads + 2,
            Method::Reuseport => threads,
        }
    }
}

/// What one waiter saw come back from the kernel. Written only by its thread; aligned so that
/// neighbours do not share a cache line.
#[derive(Default)]
#[repr(align(64))]
struct WaiterCounters {
    /// The thread's id, 0 until it has started.
    tid: AtomicI32,
    /// Every return from accept() or epoll_wait().
    wakeups: AtomicU64,
    /// Returns that brought no connection (accept4 said EAGAIN, or accept failed).
    spurious: AtomicU64,
    accepted: AtomicU64,
}

/// Returns from the kernel, summed over all waiters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Returns {
    pub wakeups: u64,
    pub spurious: u64,
    pub accepted: u64,
}

impl Returns {
    pub fn since(self, earlier: Returns) -> Returns {
        Returns {
            wakeups: self.wakeups - earlier.wakeups,
            spurious: self.spurious - earlier.spurious,
            accepted: self.accepted - earlier.accepted,
        }
    }
}

struct Shared {
    waiters: Vec<WaiterCounters>,
    /// Set before the wake-up that ends the run: a waiter that sees it returns.
    stop: AtomicBool,
    /// Waiters that have returned (or panicked): joining is bounded by watching this.
    exited: AtomicUsize,
}

/// Counts a waiter out however its thread ends.
struct ExitGuard(Arc<Shared>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.0.exited.fetch_add(1, Ordering::Release);
    }
}

/// The epoll data of the shared listening socket and of the eventfd that tells waiters to exit.
const LISTENER_TOKEN: u64 = 0;
const EXIT_TOKEN: u64 = 1;

/// Accept-queue length; connections arrive one at a time, so it never fills.
const BACKLOG: i32 = 1024;
/// Waiters run a short loop of syscalls: a small stack keeps a thousand of them light.
const WAITER_STACK: usize = 64 * 1024;
/// How long the waiters may take to start, or to exit once told to.
const THREAD_DEADLINE: Duration = Duration::from_secs(20);

/// M waiting threads and the sockets they wait on. Dropping it stops them.
pub struct Herd {
    method: Method,
    addr: SocketAddr,
    /// The shared socket, or one per thread with `reuseport`.
    listeners: Vec<OwnedFd>,
    /// One per thread with the epoll methods.
    epolls: Vec<OwnedFd>,
    /// Written once to wake every epoll waiter for exit.
    exit_event: Option<OwnedFd>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    stopped: bool,
}

impl Herd {
    /// Binds the socket(s) on 127.0.0.1 (a free port) and starts `count` waiting threads.
    pub fn start(method: Method, count: usize) -> anyhow::Result<Herd> {
        let shared = Arc::new(Shared {
            waiters: (0..count).map(|_| WaiterCounters::default()).collect(),
            stop: AtomicBool::new(false),
            exited: AtomicUsize::new(0),
        });
        let nonblocking = matches!(method, Method::Epoll | Method::EpollExclusive);
        let reuseport = method == Method::Reuseport;
        let first = listen_on(0, reuseport, nonblocking).context("binding 127.0.0.1:0")?;
        let port = local_port(&first)?;
        let mut listeners = vec![first];
        if reuseport {
            for _ in 1..count {
                listeners.push(
                    listen_on(port, true, false)
                        .with_context(|| format!("binding another socket to 127.0.0.1:{port}"))?,
                );
            }
        }
        let mut herd = Herd {
            method,
            addr: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)),
            listeners,
            epolls: Vec::new(),
            exit_event: None,
            shared,
            threads: Vec::with_capacity(count),
            stopped: false,
        };
        if nonblocking {
            let exit_event = new_fd(unsafe {
                // SAFETY: eventfd has no memory arguments.
                libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)
            })
            .context("eventfd")?;
            let exclusive = if method == Method::EpollExclusive {
                libc::EPOLLEXCLUSIVE as u32
            } else {
                0
            };
            for _ in 0..count {
                // SAFETY: epoll_create1 has no memory arguments.
                let epoll = new_fd(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })
                    .context("epoll_create1")?;
                let listener = herd.listeners[0].as_raw_fd();
                epoll_add(
                    &epoll,
                    listener,
                    libc::EPOLLIN as u32 | exclusive,
                    LISTENER_TOKEN,
                )?;
                // Never exclusive: the exit signal must reach every waiter.
                epoll_add(
                    &epoll,
                    exit_event.as_raw_fd(),
                    libc::EPOLLIN as u32,
                    EXIT_TOKEN,
                )?;
                herd.epolls.push(epoll);
            }
            herd.exit_event = Some(exit_event);
        }
        // A failure from here on drops `herd`, which stops the threads already started.
        for index in 0..count {
            herd.spawn_waiter(index)?;
        }
        Ok(herd)
    }

    fn spawn_waiter(&mut self, index: usize) -> anyhow::Result<()> {
        let shared = Arc::clone(&self.shared);
        let method = self.method;
        let listener = match method {
            Method::Reuseport => self.listeners[index].as_raw_fd(),
            _ => self.listeners[0].as_raw_fd(),
        };
        let epoll = self.epolls.get(index).map(|e| e.as_raw_fd());
        let thread = thread::Builder::new()
            .name(format!("herd-{index}"))
            .stack_size(WAITER_STACK)
            .spawn(move || {
                let guard = ExitGuard(shared);
                let counters = &guard.0.waiters[index];
                counters.tid.store(tasks::current_tid(), Ordering::Release);
                match epoll {
                    Some(epoll) => epoll_loop(epoll, listener, counters, &guard.0.stop),
                    None => accept_loop(listener, counters, &guard.0.stop),
                }
            })
            .with_context(|| format!("starting waiter thread {index}"))?;
        self.threads.push(thread);
        Ok(())
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every waiter's thread id, once all have started.
    pub fn tids(&self) -> anyhow::Result<Vec<Tid>> {
        let deadline = Instant::now() + THREAD_DEADLINE;
        loop {
            let tids: Vec<Tid> = self
                .shared
                .waiters
                .iter()
                .map(|w| w.tid.load(Ordering::Acquire))
                .collect();
            if tids.iter().all(|&tid| tid != 0) {
                return Ok(tids);
            }
            if Instant::now() >= deadline {
                let started = tids.iter().filter(|&&tid| tid != 0).count();
                bail!("only {started} of {} waiter threads started", tids.len());
            }
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// What the waiters have seen so far.
    pub fn returns(&self) -> Returns {
        self.shared
            .waiters
            .iter()
            .fold(Returns::default(), |sum, w| Returns {
                wakeups: sum.wakeups + w.wakeups.load(Ordering::Relaxed),
                spurious: sum.spurious + w.spurious.load(Ordering::Relaxed),
                accepted: sum.accepted + w.accepted.load(Ordering::Relaxed),
            })
    }

    /// Wakes every waiter for exit and joins them all, failing if one is still running after
    /// the deadline.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.stop_threads()
    }

    fn stop_threads(&mut self) -> anyhow::Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        self.shared.stop.store(true, Ordering::Release);
        match &self.exit_event {
            // Level-triggered and never read: every epoll_wait returns with it until exit.
            Some(event) => {
                let one = 1u64.to_ne_bytes();
                // SAFETY: writes 8 bytes from a live buffer to an fd this struct owns.
                let written = unsafe { libc::write(event.as_raw_fd(), one.as_ptr().cast(), 8) };
                if written != 8 {
                    self.abandon();
                    bail!("signalling exit: {}", io::Error::last_os_error());
                }
            }
            // Shutting a listening socket down moves it out of LISTEN and wakes every thread
            // blocked in accept(), which then fails with EINVAL.
            None => {
                for listener in &self.listeners {
                    // SAFETY: shutdown on an fd this struct owns.
                    unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) };
                }
            }
        }
        let deadline = Instant::now() + THREAD_DEADLINE;
        let started = self.threads.len();
        while self.shared.exited.load(Ordering::Acquire) < started {
            if Instant::now() >= deadline {
                let exited = self.shared.exited.load(Ordering::Acquire);
                self.abandon();
                bail!(
                    "{} of {started} waiter threads did not exit",
                    started - exited
                );
            }
            thread::sleep(Duration::from_millis(1));
        }
        for thread in self.threads.drain(..) {
            // Each has returned (its guard counted it out), so join only reaps it.
            let _ = thread.join();
        }
        Ok(())
    }

    /// Keeps the descriptors of threads that would not exit open for good: closing them could
    /// hand their numbers to new sockets under the threads' feet.
    fn abandon(&mut self) {
        mem::forget(mem::take(&mut self.listeners));
        mem::forget(mem::take(&mut self.epolls));
        mem::forget(self.exit_event.take());
        mem::forget(mem::take(&mut self.threads));
    }
}

impl Drop for Herd {
    fn drop(&mut self) {
        if let Err(e) = self.stop_threads() {
            eprintln!("herd: {e:#}");
        }
    }
}

/// A waiter blocked in accept(): on the shared socket, or on its own with `reuseport`.
fn accept_loop(listener: RawFd, counters: &WaiterCounters, stop: &AtomicBool) {
    loop {
        // SAFETY: accept4 with null address pointers is allowed; the fd outlives this thread.
        let fd = unsafe {
            libc::accept4(
                listener,
                ptr::null_mut(),
                ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if stop.load(Ordering::Acquire) {
            close_if_open(fd);
            return;
        }
        counters.wakeups.fetch_add(1, Ordering::Relaxed);
        count_and_answer(fd, counters);
    }
}

/// A waiter in epoll_wait on its own epoll instance, accepting once per return.
fn epoll_loop(epoll: RawFd, listener: RawFd, counters: &WaiterCounters, stop: &AtomicBool) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 2];
    loop {
        // SAFETY: the buffer holds 2 events and lives across the call; the fd outlives this thread.
        let ready = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), 2, -1) };
        let ready = usize::try_from(ready).unwrap_or(0);
        if stop.load(Ordering::Acquire) || events[..ready].iter().any(|e| e.u64 == EXIT_TOKEN) {
            return;
        }
        counters.wakeups.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as in accept_loop; the listener is nonblocking, so this never waits.
        let fd = unsafe {
            libc::accept4(
                listener,
                ptr::null_mut(),
                ptr::null_mut(),
                libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            )
        };
        // A failure is EAGAIN: another thread took the connection this one was woken for.
        count_and_answer(fd, counters);
    }
}

/// Counts what one accept4 returned: a connection (answered here) or nothing (spurious).
fn count_and_answer(fd: RawFd, counters: &WaiterCounters) {
    if fd >= 0 {
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        answer(fd);
    } else {
        counters.spurious.fetch_add(1, Ordering::Relaxed);
        back_off_on_hard_error();
    }
}

/// Tells the client its connection was accepted (one byte), then closes.
fn answer(fd: RawFd) {
    // SAFETY: sends one byte from a static buffer on an fd this thread just accepted and owns.
    unsafe {
        libc::send(fd, b"!".as_ptr().cast(), 1, libc::MSG_NOSIGNAL);
        libc::close(fd);
    }
}

fn close_if_open(fd: RawFd) {
    if fd >= 0 {
        // SAFETY: the fd was just accepted by this thread and is owned by nobody else.
        unsafe { libc::close(fd) };
    }
}

/// EAGAIN and ECONNABORTED are normal; anything else (EMFILE, ENOBUFS) would repeat at once, so
/// the waiter pauses instead of spinning.
fn back_off_on_hard_error() {
    let errno = io::Error::last_os_error().raw_os_error();
    if !matches!(
        errno,
        Some(libc::EAGAIN) | Some(libc::ECONNABORTED) | Some(libc::EINTR)
    ) {
        thread::sleep(Duration::from_millis(1));
    }
}

/// A listening TCP socket on 127.0.0.1:`port` (0: any free port).
fn listen_on(port: u16, reuseport: bool, nonblocking: bool) -> io::Result<OwnedFd> {
    let mut kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    if nonblocking {
        kind |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: socket has no memory arguments.
    let socket = new_fd(unsafe { libc::socket(libc::AF_INET, kind, 0) })?;
    if reuseport {
        let one: libc::c_int = 1;
        // SAFETY: passes a live c_int and its size.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_REUSEPORT,
                (&one as *const libc::c_int).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        check(rc)?;
    }
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: passes a live sockaddr_in and its size.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&addr as *const libc::sockaddr_in).cast(),
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    check(rc)?;
    // SAFETY: listen has no memory arguments.
    check(unsafe { libc::listen(socket.as_raw_fd(), BACKLOG) })?;
    Ok(socket)
}

fn local_port(socket: &OwnedFd) -> anyhow::Result<u16> {
    // SAFETY: all-zero is a valid sockaddr_in.
    let mut addr: libc::sockaddr_in = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: passes a live sockaddr_in and its size, which the kernel may shrink.
    let rc = unsafe {
        libc::getsockname(
            socket.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    check(rc).context("getsockname")?;
    Ok(u16::from_be(addr.sin_port))
}

fn epoll_add(epoll: &OwnedFd, fd: RawFd, events: u32, token: u64) -> anyhow::Result<()> {
    let mut event = libc::epoll_event { events, u64: token };
    // SAFETY: passes a live epoll_event; both fds are open.
    let rc = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
    check(rc).context("epoll_ctl(EPOLL_CTL_ADD)")
}

/// Takes ownership of a descriptor a syscall returned, or its error.
fn new_fd(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: a fresh descriptor from the kernel, owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpStream;

    /// Each method serves a connection and stops cleanly: the counters see exactly one accept.
    #[test]
    fn every_method_accepts_and_stops() {
        for method in Method::ALL {
            let herd = Herd::start(method, 4).unwrap();
            herd.tids().unwrap();
            let mut client = TcpStream::connect(herd.addr()).unwrap();
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut byte = [0u8; 1];
            client.read_exact(&mut byte).unwrap();
            assert_eq!(&byte, b"!");
            drop(client);
            let deadline = Instant::now() + Duration::from_secs(5);
            while herd.returns().accepted < 1 && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(herd.returns().accepted, 1, "{method:?}");
            herd.stop().unwrap();
        }
    }
}
