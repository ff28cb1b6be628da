//! The servers `health-checks` checks, all in one: a thread of this program listening on
//! 0.0.0.0:PORT, which every loopback address reaches, so that each of herdsman's 10,000 servers
//! is an address of its own (127.0.x.y, `kit::loopback`) without 10,000 sockets here. It answers each
//! request `200` (`503` from the addresses set failing), closes, and notes when each came and to
//! which address.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;

pub use crate::kit::loopback::address;
use crate::kit::loopback::index_of;

/// The accept queue: a moment's burst of checks waits here rather than being dropped (the
/// kernel caps it at net.core.somaxconn).
const BACKLOG: i32 = 4096;

/// How long one check may take to send its request.
const READ_LIMIT: Duration = Duration::from_secs(1);

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const FAILING: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// One request received: when (µs since the server started) and at which server's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub at_us: u64,
    pub server: u32,
}

/// The running server; stopped when dropped.
pub struct HealthServer {
    pub port: u16,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    started: Instant,
    stop: AtomicBool,
    /// By server index: answer 503.
    failing: Vec<AtomicBool>,
    /// Every request's arrival, in order (only the server's thread appends).
    arrivals: Mutex<Vec<Arrival>>,
}

impl HealthServer {
    /// Listens on a free port of 0.0.0.0 for `servers` addresses.
    pub fn start(servers: u32) -> anyhow::Result<HealthServer> {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).context("binding 0.0.0.0")?;
        // listen() again on a listening socket sets its backlog; std's is 128.
        // SAFETY: listen only reads its arguments; the descriptor is the listener's own.
        if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } != 0 {
            return Err(std::io::Error::last_os_error()).context("listen");
        }
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            started: Instant::now(),
            stop: AtomicBool::new(false),
            failing: (0..servers).map(|_| AtomicBool::new(false)).collect(),
            arrivals: Mutex::new(Vec::with_capacity(1 << 20)),
        });
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("health-server".into())
            .spawn(move || serve(&listener, &serving))
            .context("starting the server's thread")?;
        Ok(HealthServer {
            port,
            shared,
            thread: Some(thread),
        })
    }

    /// µs since the server started, the clock of [`Arrival::at_us`].
    pub fn now_us(&self) -> u64 {
        self.shared.started.elapsed().as_micros() as u64
    }

    /// Makes the servers in `failing` (indexes) answer 503, and every other one 200.
    pub fn set_failing(&self, failing: &[u32]) {
        for flag in &self.shared.failing {
            flag.store(false, Ordering::Relaxed);
        }
        for &index in failing {
            if let Some(flag) = self.shared.failing.get(index as usize) {
                flag.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The arrivals so far, from the `from`-th on.
    pub fn arrivals_from(&self, from: usize) -> Vec<Arrival> {
        let arrivals = self
            .shared
            .arrivals
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        arrivals.get(from..).unwrap_or_default().to_vec()
    }

    /// How many arrivals there have been.
    pub fn arrival_count(&self) -> usize {
        self.shared
            .arrivals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wakes the accept.
        let _ = TcpStream::connect_timeout(
            &SocketAddr::from((Ipv4Addr::LOCALHOST, self.port)),
            Duration::from_secs(1),
        );
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts and answers one request at a time until told to stop.
fn serve(listener: &TcpListener, shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        let at_us = shared.started.elapsed().as_micros() as u64;
        let server = match stream.local_addr() {
            Ok(SocketAddr::V4(local)) => index_of(*local.ip()),
            Ok(SocketAddr::V6(local)) => match local.ip().to_canonical() {
                IpAddr::V4(v4) => index_of(v4),
                IpAddr::V6(_) => None,
            },
            Err(_) => None,
        };
        let Some(server) = server else {
            continue;
        };
        shared
            .arrivals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arrival { at_us, server });
        let failing = shared
            .failing
            .get(server as usize)
            .is_some_and(|flag| flag.load(Ordering::Relaxed));
        let _ = answer(stream, if failing { FAILING } else { OK });
    }
}

/// Reads the request head, writes `response` and closes.
fn answer(mut stream: TcpStream, response: &[u8]) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_LIMIT))?;
    let mut head = [0u8; 1024];
    let mut read = 0;
    while !head[..read].windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut head[read..])? {
            0 => return Ok(()),
            n => read += n,
        }
        if read == head.len() {
            break;
        }
    }
    stream.write_all(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_is_answered_and_noted() {
        let server = HealthServer::start(300).unwrap();
        server.set_failing(&[7]);
        let ask = |index: u32| {
            let mut stream = TcpStream::connect((address(index), server.port)).unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            answer
        };
        assert!(ask(3).starts_with("HTTP/1.1 200"));
        assert!(ask(7).starts_with("HTTP/1.1 503"));
        let servers: Vec<u32> = server.arrivals_from(0).iter().map(|a| a.server).collect();
        assert_eq!(servers, [3, 7]);
        assert_eq!(server.arrival_count(), 2);
        assert_eq!(server.arrivals_from(1).len(), 1);
    }
}
