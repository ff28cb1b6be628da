//! The three servers of `gray`: the kit's backend, each on a thread of this program
//! (`kit::thread_server`), each counting the requests it gets as their heads come in; the last
//! can be made sick (late, or failing fast) while it serves.

use std::sync::Arc;

use crate::kit::backend::{self, Answering, Conduct};
use crate::kit::server_status::Counters;
use crate::kit::thread_server::ThreadServer;

/// Servers in the pool; the sick one is the last.
pub const SERVERS: usize = 3;

/// The sick server's index.
pub const SICK: usize = SERVERS - 1;

/// Requests each server has got so far, in pool order.
pub type Counts = [u64; SERVERS];

/// The servers at work; dropping them stops them.
pub struct Servers {
    /// Serving until dropped.
    _servers: Vec<ThreadServer>,
    ports: Vec<u16>,
    reader: CountReader,
    sick: Arc<Conduct>,
}

/// Reads the servers' counts, from any thread.
#[derive(Clone)]
pub struct CountReader(Vec<Arc<Counters>>);

impl CountReader {
    pub fn counts(&self) -> Counts {
        std::array::from_fn(|i| self.0[i].requests())
    }
}

impl Servers {
    pub fn start() -> anyhow::Result<Servers> {
        let mut servers = Vec::new();
        let mut counters = Vec::new();
        let sick = Arc::new(Conduct::default());
        for index in 0..SERVERS {
            let counted = Arc::new(Counters::default());
            let conduct = match index {
                SICK => Arc::clone(&sick),
                _ => Arc::new(Conduct::default()),
            };
            let served = Arc::clone(&counted);
            let server = ThreadServer::start(&format!("server-{}", index + 1), move |stream| {
                backend::serve(stream, served.accepted(), Arc::clone(&conduct))
            })?;
            servers.push(server);
            counters.push(counted);
        }
        Ok(Servers {
            ports: servers.iter().map(|s| s.port).collect(),
            _servers: servers,
            reader: CountReader(counters),
            sick,
        })
    }

    /// Every server's port, in pool order.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The healthy servers' ports: the pool with the sick server removed.
    pub fn healthy_ports(&self) -> &[u16] {
        &self.ports[..SICK]
    }

    pub fn set_sick(&self, answering: Answering) {
        self.sick.set(answering);
    }

    /// The sick server's conduct, for a thread that changes it during a run.
    pub fn sick_conduct(&self) -> Arc<Conduct> {
        Arc::clone(&self.sick)
    }

    pub fn reader(&self) -> CountReader {
        self.reader.clone()
    }

    pub fn counts(&self) -> Counts {
        self.reader.counts()
    }
}

/// What the servers got during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Served(pub Counts);

impl Served {
    pub fn between(before: Counts, after: Counts) -> Served {
        Served(std::array::from_fn(|i| after[i].saturating_sub(before[i])))
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The sick server's share of the requests; None without a request.
    pub fn sick_share(&self) -> Option<f64> {
        let total = self.total();
        (total > 0).then(|| self.0[SICK] as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    /// One keep-alive GET to `port`; the answer's status line and how long it took.
    fn get(port: u16) -> (String, Duration) {
        let started = Instant::now();
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = vec![0u8; 256];
        let mut read = 0;
        while !answer[..read].ends_with(backend::BODY) {
            read += stream.read(&mut answer[read..]).unwrap();
        }
        let text = String::from_utf8_lossy(&answer[..read]).into_owned();
        (text.lines().next().unwrap().to_string(), started.elapsed())
    }

    #[test]
    fn the_sick_server_answers_as_told_and_every_server_counts() {
        let servers = Servers::start().unwrap();
        let before = servers.counts();
        for &port in servers.ports() {
            assert_eq!(get(port).0, "HTTP/1.1 200 OK");
        }
        let sick = servers.ports()[SICK];
        servers.set_sick(Answering::Failing);
        assert_eq!(get(sick).0, "HTTP/1.1 500 Internal Server Error");
        servers.set_sick(Answering::Late(Duration::from_millis(100)));
        let (status, took) = get(sick);
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(took >= Duration::from_millis(100), "{took:?}");
        let served = Served::between(before, servers.counts());
        assert_eq!(served.0, [1, 1, 3]);
        assert_eq!(served.sick_share(), Some(0.6));
        assert_eq!(servers.healthy_ports().len(), 2);
        assert_eq!(Served::default().sick_share(), None);
    }
}
