//! The origin every cache is put in front of: an HTTP/1.1 keep-alive server on a thread of this
//! program, which says how long each answer may be kept and counts the requests for each path, so
//! that a run can tell how many reached it.
//!
//! - `/object/SIZE` answers SIZE bytes at once, `Cache-Control: max-age=86400, public`: the hits;
//!   `/object/SIZE/NAME` the same, an object of its own per NAME (`cache-disk`'s many objects).
//! - `/slow/fresh/TAG`, `/slow/expiring/TAG` and `/slow/swr/TAG` answer 1 KiB after
//!   `SLOW_ANSWER` (500 ms), `max-age=86400, public`, `max-age=1, public`, and `max-age=1,
//!   stale-while-revalidate=30`: the stampede's object, one TAG per expiry.
//! - Anything else (`/`, the proxies' start probe) answers 2 bytes, `Cache-Control: no-store`.
//!
//! No answer has a validator (`ETag`, `Last-Modified`) or a `Date`: a stale object is fetched
//! again whole by every proxy, and its age is counted from when each proxy received it (a `Date`
//! in whole seconds would make a `max-age=1` answer up to a second old on arrival).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::kit::thread_server::ThreadServer;

/// How long the origin takes to answer a `/slow/` path: a page that is expensive to make.
pub const SLOW_ANSWER: Duration = Duration::from_millis(500);

/// The body of a `/slow/` answer.
pub const SLOW_BODY_BYTES: usize = 1024;

/// Freshness of an object that stays fresh for the whole run.
///
/// Every `max-age` here has a directive after it: HAProxy 2.6 reads two bytes past a `max-age`
/// value that ends its field (a `max-age=1` object stayed fresh through the stampede in a trial
/// run, where `max-age=1, stale-while-revalidate=30` expired), and `public` changes nothing for
/// these answers in any of the caches.
const LONG_MAX_AGE: &str = "max-age=86400, public";

/// The largest `/object/SIZE` served.
const MOST_BYTES: usize = 16 << 20;

const READ_BUFFER: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;

/// What the stampede's object says of its freshness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Freshness {
    /// Fresh for the whole run: every client is answered from the cache (the reference).
    Fresh,
    /// `max-age=1, public`: stale a second after it was stored, and no stale answer allowed.
    Expiring,
    /// `max-age=1, stale-while-revalidate=30` (RFC 5861): stale after a second, and for 30 s
    /// more a cache may answer with it while it fetches a fresh one.
    StaleWhileRevalidate,
}

impl Freshness {
    /// The word in the object's path.
    pub fn path_word(self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Expiring => "expiring",
            Freshness::StaleWhileRevalidate => "swr",
        }
    }

    /// Its `Cache-Control`.
    pub fn cache_control(self) -> &'static str {
        match self {
            Freshness::Fresh => LONG_MAX_AGE,
            Freshness::Expiring => "max-age=1, public",
            Freshness::StaleWhileRevalidate => "max-age=1, stale-while-revalidate=30",
        }
    }

    /// Seconds it is fresh for.
    pub fn max_age(self) -> Option<u64> {
        match self {
            Freshness::Fresh => None,
            Freshness::Expiring | Freshness::StaleWhileRevalidate => Some(1),
        }
    }

    fn from_path_word(word: &str) -> Option<Freshness> {
        [
            Freshness::Fresh,
            Freshness::Expiring,
            Freshness::StaleWhileRevalidate,
        ]
        .into_iter()
        .find(|f| f.path_word() == word)
    }
}

/// The path of the object of `size` bytes.
pub fn object_path(size: usize) -> String {
    format!("/object/{size}")
}

/// The path of the stampede's object of `freshness`, one `tag` per expiry.
pub fn slow_path(freshness: Freshness, tag: &str) -> String {
    format!("/slow/{}/{tag}", freshness.path_word())
}

/// The origin at work on 127.0.0.1:`port`; dropping it stops it.
pub struct Origin {
    pub port: u16,
    counts: Arc<Mutex<HashMap<String, u64>>>,
    /// Serving on its thread until dropped.
    _server: ThreadServer,
}

impl Origin {
    /// Binds a free port on 127.0.0.1 and serves on a thread of its own. It listens with the
    /// kit's long queue: a cache that collapses nothing opens a connection per client at once.
    pub fn start() -> anyhow::Result<Origin> {
        let counts = Arc::new(Mutex::new(HashMap::new()));
        let served = Arc::clone(&counts);
        let server =
            ThreadServer::start("origin", move |stream| serve(stream, Arc::clone(&served)))?;
        Ok(Origin {
            port: server.port,
            counts,
            _server: server,
        })
    }

    /// Requests for every path that starts with `prefix`, answered or under way so far.
    pub fn requests_under(&self, prefix: &str) -> u64 {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts
            .iter()
            .filter(|(path, _)| path.starts_with(prefix))
            .map(|(_, count)| count)
            .sum()
    }

    /// Requests for `path` answered or under way so far.
    pub fn requests_for(&self, path: &str) -> u64 {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.get(path).copied().unwrap_or(0)
    }
}

/// One connection: each request counted when its head is in, answered in turn.
async fn serve(mut stream: TcpStream, counts: Arc<Mutex<HashMap<String, u64>>>) {
    let _ = stream.set_nodelay(true);
    let mut input = vec![0u8; READ_BUFFER];
    let mut filled = 0;
    loop {
        let n = match stream.read(&mut input[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        filled += n;
        let mut consumed = 0;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut request = httparse::Request::new(&mut headers);
            let head_len = match request.parse(&input[consumed..filled]) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) => break,
                Err(_) => return,
            };
            let path = request.path.unwrap_or("/").to_string();
            let head_only = request.method == Some("HEAD");
            consumed += head_len;
            {
                let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
                *counts.entry(path.clone()).or_default() += 1;
            }
            let answer = answer_for(&path);
            if let Some(delay) = answer.delay {
                tokio::time::sleep(delay).await;
            }
            let bytes = if head_only {
                &answer.bytes[..answer.head_len]
            } else {
                &answer.bytes[..]
            };
            if stream.write_all(bytes).await.is_err() {
                return;
            }
        }
        input.copy_within(consumed..filled, 0);
        filled -= consumed;
        if filled == input.len() {
            return;
        }
    }
}

/// A whole answer, how long its head is, and how long to wait before it.
struct Answer {
    bytes: Vec<u8>,
    head_len: usize,
    delay: Option<Duration>,
}

fn answer_for(path: &str) -> Answer {
    let mut parts = path.trim_start_matches('/').split('/');
    match (parts.next(), parts.next()) {
        (Some("object"), Some(size)) => match size.parse::<usize>() {
            Ok(size) if size <= MOST_BYTES => answer(size, LONG_MAX_AGE, None),
            _ => answer(2, "no-store", None),
        },
        (Some("slow"), Some(word)) => match Freshness::from_path_word(word) {
            Some(freshness) => answer(
                SLOW_BODY_BYTES,
                freshness.cache_control(),
                Some(SLOW_ANSWER),
            ),
            None => answer(2, "no-store", None),
        },
        _ => answer(2, "no-store", None),
    }
}

fn answer(body_len: usize, cache_control: &str, delay: Option<Duration>) -> Answer {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: \
         {body_len}\r\nCache-Control: {cache_control}\r\n\r\n"
    );
    let head_len = head.len();
    let mut bytes = head.into_bytes();
    bytes.resize(head_len + body_len, b'x');
    Answer {
        bytes,
        head_len,
        delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddr};

    fn text(answer: &Answer) -> String {
        String::from_utf8_lossy(&answer.bytes[..answer.head_len]).into_owned()
    }

    #[test]
    fn each_path_says_how_long_it_may_be_kept() {
        let named = answer_for("/object/2048/z-17");
        assert_eq!(named.bytes.len() - named.head_len, 2048);
        assert!(text(&named).contains("max-age=86400"));
        let hit = answer_for(&object_path(1024));
        assert_eq!(hit.bytes.len() - hit.head_len, 1024);
        assert!(text(&hit).contains("Cache-Control: max-age=86400, public\r\n"));
        assert!(hit.delay.is_none());

        let swr = answer_for(&slow_path(Freshness::StaleWhileRevalidate, "1-2"));
        assert!(text(&swr).contains("Cache-Control: max-age=1, stale-while-revalidate=30\r\n"));
        assert_eq!(swr.delay, Some(SLOW_ANSWER));
        assert_eq!(swr.bytes.len() - swr.head_len, SLOW_BODY_BYTES);
        let expiring = answer_for(&slow_path(Freshness::Expiring, "x"));
        assert!(text(&expiring).contains("Cache-Control: max-age=1, public\r\n"));

        for other in ["/", "/object/x", "/slow/never/1"] {
            assert!(text(&answer_for(other)).contains("no-store"), "{other}");
        }
    }

    #[test]
    fn it_counts_the_requests_for_each_path() {
        let origin = Origin::start().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let address = SocketAddr::from((Ipv4Addr::LOCALHOST, origin.port));
            let mut stream = TcpStream::connect(address).await.unwrap();
            for _ in 0..2 {
                crate::cache::stampede::get(&mut stream, "/object/10")
                    .await
                    .unwrap();
            }
        });
        assert_eq!(origin.requests_for("/object/10"), 2);
        assert_eq!(origin.requests_under("/object/"), 2);
        assert_eq!(origin.requests_for("/object/11"), 0);
    }
}
