//! The two kinds of slow client of `slow-clients`, as tasks of a holder process
//! (`kit::slow_holders`; the hidden `slow-clients-holder` subcommand), and the handle the
//! benchmark opens them through:
//!
//! - **slow-upload**: `POST /upload` with a body of a few KiB (the lengths spread evenly over
//!   `--upload-bytes`), sent `--upload-rate` bytes a second. One the proxy cuts (408, or a close)
//!   starts again at once with a new connection, so that the pressure stays.
//! - **slow-reader**: `GET /big`, the server's large answer read `--read-rate` bytes a second
//!   through the small window of a reader far away (`kit::slow_steps::SMALL_WINDOW`).
//!
//! Every task steps once a second, spread over the first second.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::sleep;

use crate::kit::process::option_args;
use crate::kit::slow_holders::{self, HolderArgs, Shared, SlowHolders, SlowKind, Tally};
use crate::kit::slow_steps::{
    connect_counted, ended_by_peer, read_slowly, trickle, Trickled, SMALL_WINDOW,
};

/// The hidden subcommand's name.
const SUBCOMMAND: &str = "slow-clients-holder";

/// The pause between two steps of every slow client.
const STEP: Duration = Duration::from_secs(1);

/// What a slow reader asks for: the server's large answer.
const READER_REQUEST: &[u8] = b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SlowUpload,
    SlowReader,
}

impl SlowKind for Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::SlowUpload => "slow-upload",
            Kind::SlowReader => "slow-reader",
        }
    }
}

fn parse_kind(label: &str) -> Result<Kind, String> {
    [Kind::SlowUpload, Kind::SlowReader]
        .into_iter()
        .find(|k| k.label() == label)
        .ok_or_else(|| format!("no kind {label:?}; the kinds are slow-upload, slow-reader"))
}

/// The lengths of the slow uploads' bodies: from `min` to `max` bytes, spread evenly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lengths {
    pub min: u32,
    pub max: u32,
}

impl Lengths {
    /// The body of upload `index` of `count`: `min` for the first, `max` for the last.
    pub fn nth(self, index: u32, count: u32) -> u32 {
        let span = u64::from(self.max - self.min);
        let last = u64::from(count.saturating_sub(1).max(1));
        self.min + (span * u64::from(index.min(count)) / last) as u32
    }
}

impl FromStr for Lengths {
    type Err = String;

    /// "1000-10000", or "4096" for one length.
    fn from_str(text: &str) -> Result<Lengths, String> {
        let (min, max) = text.split_once('-').unwrap_or((text, text));
        let number = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("{text:?} is not LENGTH or MIN-MAX in bytes"))
        };
        let (min, max) = (number(min)?, number(max)?);
        if min == 0 || min > max {
            return Err(format!("{text:?}: need 1 ≤ MIN ≤ MAX"));
        }
        Ok(Lengths { min, max })
    }
}

impl fmt::Display for Lengths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

/// How the slow clients behave: what both ends agree on.
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct Pace {
    /// The slow uploads' body lengths in bytes, MIN-MAX (spread evenly) or one length.
    #[arg(long, default_value = "1000-10000")]
    pub upload_bytes: Lengths,
    /// Bytes of body each slow upload sends a second.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub upload_rate: u32,
    /// Bytes of the answer each slow reader reads a second.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub read_rate: u32,
}

impl Pace {
    fn to_args(self) -> Vec<String> {
        option_args([
            ("--upload-bytes", self.upload_bytes.to_string()),
            ("--upload-rate", self.upload_rate.to_string()),
            ("--read-rate", self.read_rate.to_string()),
        ])
    }
}

/// Options of the hidden `slow-clients-holder` subcommand.
#[derive(Debug, clap::Args)]
pub struct SlowClientsHolderArgs {
    #[command(flatten)]
    pub holder: HolderArgs,
    /// The kinds to run, comma-separated, sharing --count equally.
    #[arg(long, value_delimiter = ',', value_parser = parse_kind, required = true)]
    pub kinds: Vec<Kind>,
    #[command(flatten)]
    pub pace: Pace,
}

/// The `slow-clients-holder` subcommand: open, say `ready`, trickle until told to finish, report.
pub fn run(args: SlowClientsHolderArgs) -> anyhow::Result<()> {
    let pace = args.pace;
    let uploads = args.holder.count;
    let next_upload = AtomicU32::new(0);
    slow_holders::serve(&args.holder, &args.kinds, STEP, |kind, shared, phase| {
        let body = match kind {
            Kind::SlowUpload => {
                let index = next_upload.fetch_add(1, Ordering::Relaxed);
                pace.upload_bytes.nth(index, uploads)
            }
            Kind::SlowReader => 0,
        };
        connection(kind, shared, phase, pace, body)
    })
}

/// One slow client of `kind`, started after `phase`; an upload sends `body` bytes.
async fn connection(
    kind: Kind,
    shared: Arc<Shared>,
    phase: Duration,
    pace: Pace,
    body: u32,
) -> Tally {
    sleep(phase).await;
    let mut tally = Tally::default();
    match kind {
        Kind::SlowUpload => {
            upload_again_and_again(&shared, body, pace.upload_rate, &mut tally).await
        }
        Kind::SlowReader => {
            let window = Some(SMALL_WINDOW);
            if let Some(mut stream) = connect_counted(&shared, window, &mut true, &mut tally).await
            {
                let rate = pace.read_rate as usize;
                read_slowly(&mut stream, &shared, READER_REQUEST, rate, STEP, &mut tally).await;
                shared.close_or_keep(stream);
            }
        }
    }
    tally
}

/// Uploads `body` bytes, `rate` a step, on a new connection each time the last one ended, until
/// told to stop.
async fn upload_again_and_again(shared: &Shared, body: u32, rate: u32, tally: &mut Tally) {
    let head =
        format!("POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {body}\r\n\r\n");
    let mut first = true;
    while !shared.stopping() {
        let Some(mut stream) = connect_counted(shared, None, &mut first, tally).await else {
            sleep(STEP).await;
            continue;
        };
        let pieces = std::iter::once(head.clone().into_bytes()).chain(
            (0..body)
                .step_by(rate as usize)
                .map(|sent| vec![b'u'; rate.min(body - sent) as usize]),
        );
        match trickle(&mut stream, shared, pieces, STEP, tally).await {
            Trickled::Held => return shared.close_or_keep(stream),
            Trickled::Ended => continue,
            Trickled::Sent => {}
        }
        // The whole body is sent: wait for the answer.
        loop {
            if let Some(how) = ended_by_peer(&stream) {
                if how.starts_with("answered: HTTP/1.1 2") {
                    tally.completed += 1;
                } else {
                    tally.end(how);
                }
                break;
            }
            if shared.stopping() {
                tally.held += 1;
                return shared.close_or_keep(stream);
            }
            sleep(STEP).await;
        }
    }
}

/// What the slow clients of one run saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tallies {
    pub uploads: Tally,
    pub readers: Tally,
}

/// The slow clients of one run: the uploads and the readers each in holder processes of their
/// own; dropping it kills them.
pub struct SlowClients {
    uploads: Option<SlowHolders>,
    readers: Option<SlowHolders>,
}

impl SlowClients {
    /// Starts `uploads` slow uploads and `readers` slow readers to 127.0.0.1:`port`, and waits
    /// until each has made its first connect. They stop by themselves after `hold`. Logs go into
    /// `dir`.
    pub fn open(
        port: u16,
        uploads: u32,
        readers: u32,
        pace: Pace,
        hold: Duration,
        dir: &Path,
    ) -> anyhow::Result<SlowClients> {
        let args = pace.to_args();
        let open = |count: u32, kind: Kind| {
            (count > 0)
                .then(|| SlowHolders::open(SUBCOMMAND, port, count, &[kind], &args, hold, dir))
                .transpose()
        };
        Ok(SlowClients {
            uploads: open(uploads, Kind::SlowUpload)?,
            readers: open(readers, Kind::SlowReader)?,
        })
    }

    /// The holders' process ids, for their CPU time.
    pub fn pids(&self) -> Vec<u32> {
        [&self.uploads, &self.readers]
            .into_iter()
            .flatten()
            .flat_map(SlowHolders::pids)
            .collect()
    }

    /// Tells every holder to finish and returns what the uploads and the readers saw.
    pub fn close(self) -> anyhow::Result<Tallies> {
        let sum = |holders: Option<SlowHolders>| -> anyhow::Result<Tally> {
            Ok(match holders {
                Some(holders) => holders.close()?.remove(0),
                None => Tally::default(),
            })
        };
        Ok(Tallies {
            uploads: sum(self.uploads)?,
            readers: sum(self.readers)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::slow_holders::run_until_stopped;
    use crate::kit::slow_steps::serve_one_connection;
    use std::io::{Read, Write};

    #[test]
    fn upload_lengths_spread_from_min_to_max() {
        let lengths: Lengths = "1000-10000".parse().unwrap();
        assert_eq!(lengths.nth(0, 10), 1000);
        assert_eq!(lengths.nth(9, 10), 10_000);
        assert_eq!(lengths.nth(3, 10), 4000);
        assert_eq!(lengths.nth(0, 1), 1000);
        let one: Lengths = "4096".parse().unwrap();
        assert_eq!((one.nth(0, 5), one.nth(4, 5)), (4096, 4096));
        assert_eq!(one.to_string(), "4096");
        assert_eq!(lengths.to_string(), "1000-10000");
        assert!("10-1".parse::<Lengths>().is_err());
        assert!("0-5".parse::<Lengths>().is_err());
        assert!("x".parse::<Lengths>().is_err());
    }

    /// An upload the server answers 408 to starts again on a new connection; one it answers 200
    /// once the body is whole is counted as completed.
    #[test]
    fn a_cut_upload_starts_again_and_a_whole_one_completes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            // First connection: 408 after the head. Second: read the whole 4-byte body, 200.
            let (mut first, _) = listener.accept().unwrap();
            let mut byte = [0u8; 1];
            first.read_exact(&mut byte).unwrap();
            first
                .write_all(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n")
                .unwrap();
            let (mut second, _) = listener.accept().unwrap();
            let head = b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n\r\n";
            let mut request = vec![0u8; head.len() + 4];
            second.read_exact(&mut request).unwrap();
            second
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
            // Third: held open until the client stops.
            let (mut third, _) = listener.accept().unwrap();
            let _ = third.read_to_end(&mut Vec::new());
        });
        let tally = run_until_stopped(addr, Duration::from_millis(6500), |shared| async move {
            let mut tally = Tally::default();
            upload_again_and_again(&shared, 4, 2, &mut tally).await;
            tally
        });
        assert_eq!(
            (tally.opened, tally.ended, tally.completed, tally.held),
            (3, 1, 1, 1),
            "{tally:?}"
        );
        assert_eq!(
            tally.first_end.as_deref(),
            Some("answered: HTTP/1.1 408 Request Timeout")
        );
    }

    /// A reader reads the answer a step at a time.
    #[test]
    fn a_reader_reads_its_answer_slowly() {
        let (addr, _server) = serve_one_connection(|mut conn| {
            let mut request = vec![0u8; READER_REQUEST.len()];
            conn.read_exact(&mut request).unwrap();
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")
                .unwrap();
            std::thread::sleep(Duration::from_secs(3));
        });
        let pace = Pace {
            upload_bytes: "1000".parse().unwrap(),
            upload_rate: 1,
            read_rate: 4096,
        };
        let tally = run_until_stopped(addr, Duration::from_millis(1500), |shared| {
            connection(Kind::SlowReader, shared, Duration::ZERO, pace, 0)
        });
        assert_eq!((tally.opened, tally.started, tally.held), (1, 1, 1));
        assert_eq!(tally.bytes_read, 41);
    }
}
