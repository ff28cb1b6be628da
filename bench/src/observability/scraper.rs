//! The scraper: a thread of this program that GETs herdsman's `/metrics` once a second, as
//! Prometheus would, for as long as a run lasts, and counts what it got. Each scrape is a fresh
//! connection with `Connection: close` (Prometheus keeps its connection; a new one per scrape
//! costs herdsman a little more, so the cost is not understated). Also the one-off GET that finds
//! the admin API ready.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// How often `/metrics` is scraped: the "every second".
pub const SCRAPE_EVERY: Duration = Duration::from_secs(1);

/// How long one GET may take, connect to last byte, before it counts as failed.
const GET_LIMIT: Duration = Duration::from_secs(2);

/// What the scrapes of one run got.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScrapeTally {
    /// Scrapes answered 200 with a non-empty body of the announced length.
    pub ok: u32,
    /// Scrapes that failed in any way: no connection, a timeout, another status, an empty or
    /// short body.
    pub failed: u32,
    /// Why the first failed scrape failed.
    pub first_failure: Option<String>,
    /// The body of the last good scrape, in bytes.
    pub body_bytes: usize,
    /// The longest a scrape took, connect to last byte, in µs.
    pub slowest_us: f64,
}

impl ScrapeTally {
    pub fn attempts(&self) -> u32 {
        self.ok + self.failed
    }

    fn count(&mut self, outcome: anyhow::Result<Vec<u8>>, took: Duration) {
        self.slowest_us = self.slowest_us.max(took.as_secs_f64() * 1e6);
        match outcome {
            Ok(body) => {
                self.ok += 1;
                self.body_bytes = body.len();
            }
            Err(e) => {
                self.failed += 1;
                self.first_failure.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
}

/// A scraper at work. `finish` stops it and returns the tally; dropping it stops it too (the
/// thread ends after the scrape in progress, if any).
pub struct Scraper {
    /// Dropped to tell the thread to stop: it waits between scrapes on the other end.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<ScrapeTally>>,
}

impl Scraper {
    /// Scrapes `http://127.0.0.1:{admin_port}/metrics` now and every `SCRAPE_EVERY` after.
    pub fn start(admin_port: u16) -> anyhow::Result<Scraper> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("metrics-scraper".into())
            .spawn(move || {
                let mut tally = ScrapeTally::default();
                let mut next = Instant::now();
                loop {
                    let started = Instant::now();
                    let outcome = get(admin_port, "/metrics");
                    tally.count(outcome, started.elapsed());
                    // A scrape slower than the interval skips the ticks it missed, as Prometheus
                    // does, rather than catching up with a burst.
                    let now = Instant::now();
                    while next <= now {
                        next += SCRAPE_EVERY;
                    }
                    match stopped.recv_timeout(next - now) {
                        Err(RecvTimeoutError::Timeout) => continue,
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return tally,
                    }
                }
            })
            .context("starting the scraper thread")?;
        Ok(Scraper {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops scraping and returns what the scrapes got.
    pub fn finish(mut self) -> anyhow::Result<ScrapeTally> {
        self.stop.take();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(tally)) => Ok(tally),
            _ => bail!("the scraper thread panicked"),
        }
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.stop.take();
    }
}

/// `GET path` on a fresh connection to 127.0.0.1:`port`; the body when the answer is 200 with a
/// non-empty body of its Content-Length.
pub fn get(port: u16, path: &str) -> anyhow::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), GET_LIMIT)
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    stream.set_read_timeout(Some(GET_LIMIT))?;
    stream.set_write_timeout(Some(GET_LIMIT))?;
    // One write: `write!` on the stream would send the head piece by piece.
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    // Connection: close, so the answer ends where the connection does.
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .with_context(|| format!("reading the answer to GET {path}"))?;
    body_of_ok(&answer).with_context(|| format!("GET {path}"))
}

/// The body of a complete `200` answer whose body is as long as its Content-Length and not empty.
fn body_of_ok(answer: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_length = match response
        .parse(answer)
        .context("parsing the answer's head")?
    {
        httparse::Status::Complete(length) => length,
        httparse::Status::Partial => bail!("the answer ended within its head"),
    };
    if response.code != Some(200) {
        bail!(
            "answered {} {}",
            response.code.unwrap_or(0),
            response.reason.unwrap_or("")
        );
    }
    let announced = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        })
        .context("no Content-Length")?;
    let body = &answer[head_length..];
    if body.len() != announced {
        bail!(
            "the body has {} bytes of the {announced} announced",
            body.len()
        );
    }
    if body.is_empty() {
        bail!("the body is empty");
    }
    Ok(body.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn only_a_whole_non_empty_200_counts() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
        assert_eq!(body_of_ok(ok).unwrap(), b"abc");
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc";
        assert!(format!("{:#}", body_of_ok(short).unwrap_err()).contains("3 bytes of the 5"));
        let empty = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert!(body_of_ok(empty).is_err());
        let refused = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno";
        assert!(format!("{:#}", body_of_ok(refused).unwrap_err()).contains("401"));
        assert!(body_of_ok(b"HTTP/1.1 200 OK\r\nContent-").is_err());
    }

    /// A server that answers every connection with `answer` and closes it.
    fn serve(answer: &'static [u8]) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                // The whole head, so that closing with unread bytes does not reset the answer.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let _ = stream.write_all(answer);
            }
        });
        port
    }

    #[test]
    fn the_scraper_scrapes_at_once_and_counts_every_answer() {
        let port = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nup 1");
        let scraper = Scraper::start(port).unwrap();
        thread::sleep(Duration::from_millis(200));
        let tally = scraper.finish().unwrap();
        assert_eq!(
            (tally.ok, tally.failed, tally.body_bytes),
            (1, 0, 4),
            "{tally:?}"
        );

        let port = serve(b"HTTP/1.1 500 Oops\r\nContent-Length: 1\r\n\r\nx");
        let tally = Scraper::start(port).unwrap().finish().unwrap();
        assert_eq!((tally.ok, tally.failed), (0, 1));
        assert!(tally.first_failure.unwrap().contains("500"));
    }
}
