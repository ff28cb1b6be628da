//! What a connection's registration with epoll costs, and what leaving out its removal would save
//! (issue 25): `cargo bench --bench epoll_del` prints nanoseconds per connection for the ways a
//! connection can end, each over batches of real loopback TCP connections (accepted sockets, as
//! herdsman's are), in one epoll instance:
//!
//! - `close` alone: a connection never registered (what a speculative read that finds the client
//!   gone, or a lazy registration that never had to wait, leaves);
//! - `ADD, close`: registered, then closed while still in the set (the kernel removes it on the
//!   last close, as HAProxy relies on);
//! - `ADD, DEL, close`: what tokio does for every socket it drops.
//!
//! The difference between the last two is what the DEL costs; between the first two, the ADD and
//! the removal together. Each figure is the median of 21 batches of 2,000 connections, the three
//! endings taking turns in a rotating order; a batch is opened (outside the clock), then ended the
//! one way (inside it).

use std::hint::black_box;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{IntoRawFd, RawFd};
use std::time::Instant;

const BATCH: usize = 2_000;
const REPETITIONS: usize = 21;

/// One way to end a connection: (name, what is done inside the clock to `fd` in `epoll`).
type Ending = (&'static str, fn(RawFd, RawFd));

fn main() {
    let endings: [Ending; 3] = [
        ("close alone (never registered)", |_, fd| close(fd)),
        ("ADD, close", |epoll, fd| {
            add(epoll, fd);
            close(fd);
        }),
        ("ADD, DEL, close (tokio's way)", |epoll, fd| {
            add(epoll, fd);
            del(epoll, fd);
            close(fd);
        }),
    ];
    // SAFETY: epoll_create1 makes a new descriptor, closed at the end.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(
        epoll >= 0,
        "epoll_create1: {}",
        std::io::Error::last_os_error()
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    println!(
        "| ending | ns per connection (median of {REPETITIONS} batches of {BATCH}) | min | max |"
    );
    println!("|---|---:|---:|---:|");
    // The endings take turns within each repetition, in an order that rotates, so that the
    // machine's drift falls on all of them alike.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); endings.len()];
    for repetition in 0..REPETITIONS {
        for turn in 0..endings.len() {
            let index = (turn + repetition) % endings.len();
            times[index].push(batch(&listener, epoll, endings[index].1));
        }
    }
    for ((name, _), mut times) in endings.iter().zip(times) {
        times.sort_by(f64::total_cmp);
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} |",
            times[REPETITIONS / 2],
            times[0],
            times[REPETITIONS - 1]
        );
    }
    close(epoll);
}

/// Opens `BATCH` connections, then times ending their accepted sides with `ending`: ns each.
fn batch(listener: &TcpListener, epoll: RawFd, ending: fn(RawFd, RawFd)) -> f64 {
    let mut clients = Vec::with_capacity(BATCH);
    let mut accepted = Vec::with_capacity(BATCH);
    for _ in 0..BATCH {
        clients.push(TcpStream::connect(listener.local_addr().unwrap()).expect("connect"));
        let (stream, _) = listener.accept().expect("accept");
        stream.set_nonblocking(true).unwrap();
        accepted.push(stream.into_raw_fd());
    }
    let started = Instant::now();
    for &fd in &accepted {
        ending(epoll, black_box(fd));
    }
    let took = started.elapsed();
    drop(clients);
    took.as_nanos() as f64 / BATCH as f64
}

fn add(epoll: RawFd, fd: RawFd) {
    // As mio registers a socket: edge-triggered, readable, writable and the peer's close.
    let mut event = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
        u64: fd as u64,
    };
    // SAFETY: epoll_ctl reads the event; both descriptors are open.
    let added = unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) };
    assert_eq!(
        added,
        0,
        "EPOLL_CTL_ADD: {}",
        std::io::Error::last_os_error()
    );
}

fn del(epoll: RawFd, fd: RawFd) {
    // SAFETY: a null event is allowed for DEL since Linux 2.6.9.
    let deleted = unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    assert_eq!(
        deleted,
        0,
        "EPOLL_CTL_DEL: {}",
        std::io::Error::last_os_error()
    );
}

fn close(fd: RawFd) {
    // SAFETY: each descriptor is closed once, by its owner here.
    unsafe {
        libc::close(fd);
    }
}
