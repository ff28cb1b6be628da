//! The scraper: a thread of this program that GETs herdsman's `/metrics` once a second, as
//! Prometheus would, for as long as a run lasts, and counts what it got. Each scrape is a fresh
//! connection with `Connection: close` (Prometheus keeps its connection; a new one per scrape
//! costs herdsman a little more, so the cost is not understated).

use std::time::{Duration, Instant};

use crate::kit::admin_api;
use crate::kit::periodic::Periodic;

/// How often `/metrics` is scraped: the "every second".
pub const SCRAPE_EVERY: Duration = Duration::from_secs(1);

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

/// A scraper at work. `finish` stops it and returns the tally; dropping it stops it too.
pub struct Scraper(Periodic<ScrapeTally>);

impl Scraper {
    /// Scrapes `http://127.0.0.1:{admin_port}/metrics` now and every `SCRAPE_EVERY` after.
    pub fn start(admin_port: u16) -> anyhow::Result<Scraper> {
        Periodic::start(
            "metrics-scraper",
            SCRAPE_EVERY,
            ScrapeTally::default(),
            move |tally| {
                let started = Instant::now();
                let outcome = admin_api::get(admin_port, "/metrics");
                tally.count(outcome, started.elapsed());
            },
        )
        .map(Scraper)
    }

    /// Stops scraping and returns what the scrapes got.
    pub fn finish(self) -> anyhow::Result<ScrapeTally> {
        self.0.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::thread;

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
