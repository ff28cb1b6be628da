//! `[buffering]` and a route's `[route.buffering]` as checked: what herdsman reads whole or
//! spools so that a slow client holds its memory and disk rather than a server's worker.

use std::time::Duration;

/// `[buffering]`: a slow client holds herdsman's memory and disk rather than a server's worker
/// (gunicorn's sync workers, Unicorn, PHP-FPM: one request at a time each). Request bodies are
/// read whole before a server is involved; responses are read from the server as fast as it sends
/// them and fed to the client at its pace. Applied by reload (in the snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffering {
    /// A request body is read whole before a server is picked a slot on and sent it: up to this
    /// many bytes of it in memory behind its head (read straight there), the rest in a temporary
    /// file; all of a body of known length goes to the file when `memory_total` is taken. 0
    /// turns request buffering off. Default 1 MiB.
    pub request_memory: usize,
    /// The largest request body read whole (memory and file); a larger one streams as it arrives.
    /// At most `request_memory` means memory only. Default 1 GiB.
    pub request_max: u64,
    /// The slowest a request body may arrive, in bytes per second, once `request_min_rate_grace`
    /// has passed: slower, the client gets 408 (Apache's `mod_reqtimeout` MinRate). 0: no
    /// minimum. Default 500.
    pub request_min_rate: u64,
    /// A request body that comes at least this fast, in bytes per second (judged by the time its
    /// client kept herdsman waiting, 50 ms at least), goes on to the server as it comes: a fast
    /// client holds no server for long, and its body costs no disk (as HAProxy streams). One that
    /// fits memory goes as soon as its pace shows, kept as it goes; a larger one once its memory
    /// part is full, rather than into a temporary file. A slower one is read whole first. 0:
    /// never. Default 10 MiB/s.
    pub request_stream_rate: u64,
    /// How long a request body may take before its rate is held to `request_min_rate`. Default
    /// 10 s.
    pub request_min_rate_grace: Duration,
    /// A response body is read from the server as fast as it comes: this many bytes in memory
    /// per response, the rest in a temporary file. 0 turns response buffering off. Default 65536.
    pub response_memory: usize,
    /// The most of one response held in its temporary file; beyond it the response streams at
    /// the client's pace. Default 1 GiB.
    pub response_max: u64,
    /// The slowest a client may take a response's bytes while they wait for it, in bytes per
    /// second, once `response_min_rate_window` of waiting has passed: slower, its answer ends.
    /// 0: no minimum. Default 500.
    pub response_min_rate: u64,
    /// How long a client may keep response bytes waiting before its rate is held to
    /// `response_min_rate`. Default 10 s.
    pub response_min_rate_window: Duration,
    /// The most memory all buffered bodies of the process hold together; when it is taken, bodies
    /// stream instead (counted). Default 256 MiB.
    pub memory_total: u64,
    /// The most temporary-file space all buffered bodies of the process hold together; when it
    /// is taken, bodies stream instead (counted). Default 10 GiB.
    pub disk_total: u64,
    /// Where temporary files are made (unlinked at once; leftovers of a crash removed at start).
    /// Default `/var/tmp`.
    pub temp_dir: std::path::PathBuf,
}

impl Default for Buffering {
    fn default() -> Self {
        Buffering {
            request_memory: 1 << 20,
            request_max: 1 << 30,
            request_min_rate: 500,
            request_stream_rate: 10 << 20,
            request_min_rate_grace: Duration::from_secs(10),
            response_memory: 65536,
            response_max: 1 << 30,
            response_min_rate: 500,
            response_min_rate_window: Duration::from_secs(10),
            memory_total: 256 << 20,
            disk_total: 10 << 30,
            temp_dir: std::path::PathBuf::from("/var/tmp"),
        }
    }
}

/// The shortest time [`Buffering::streams`] judges a body's pace over.
const STREAM_WINDOW: Duration = Duration::from_millis(50);

impl Buffering {
    /// When a body whose reading began at `started` and has brought `received` bytes so far
    /// falls below the minimum rate (`None`: no minimum).
    pub fn rate_deadline(
        &self,
        started: std::time::Instant,
        received: u64,
    ) -> Option<std::time::Instant> {
        let rate = self.request_min_rate;
        let earned = (rate > 0).then(|| Duration::from_secs_f64(received as f64 / rate as f64));
        earned.map(|earned| started + self.request_min_rate_grace + earned)
    }

    /// Whether a request body that brought `arrived` bytes while its client kept herdsman waiting
    /// `waited` in all comes fast enough to stream the rest (`request_stream_rate`): the
    /// client's pace, not the worker's, which may have been busy while the bytes waited in the
    /// socket. Judged over `STREAM_WINDOW` at least, so that a burst (one read's bytes, then a
    /// pause) does not decide it.
    pub fn streams(&self, waited: Duration, arrived: u64) -> bool {
        let rate = self.request_stream_rate;
        let seconds = waited.max(STREAM_WINDOW).as_secs_f64();
        rate > 0 && arrived as f64 >= rate as f64 * seconds
    }

    /// The window a client's pace on a buffered response is measured over, and the bytes it
    /// must take in each (`None`: no minimum).
    pub fn response_window(&self) -> Option<(Duration, u64)> {
        let window = self.response_min_rate_window;
        let owed = (self.response_min_rate as f64 * window.as_secs_f64()) as u64;
        (self.response_min_rate > 0 && !window.is_zero()).then_some((window, owed))
    }
}

/// A route's `[route.buffering]`: which of request and response buffering apply to its
/// requests (both, unless turned off for it; `[buffering]`'s memory sizes still decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteBuffering {
    pub request: bool,
    pub response: bool,
}

impl Default for RouteBuffering {
    fn default() -> Self {
        RouteBuffering {
            request: true,
            response: true,
        }
    }
}
