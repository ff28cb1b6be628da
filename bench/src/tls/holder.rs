//! Idle TLS client connections for the memory figure, both ends of it: the hidden `tls-holder`
//! subcommand (one process completing up to `MAX_IDLE` full handshakes, one keep-alive request on
//! each, and holding the connections), and `hold`, which starts it and reads what it says. They
//! speak by lines on the holder's stdout and by its stdin (`kit::holders`):
//!
//! - `ready N (T TLS 1.3, F full)`: all N connections are open, each had a full handshake (the
//!   client offers no session to resume) and its request answered 2xx, so the proxy holds it as
//!   an idle keep-alive TLS client; T of them spoke TLS 1.3.
//! - stdin closes (or the holder is killed): time to finish.
//! - `closed K of N`: K of the N connections had been closed (or written to) by the proxy while
//!   held; a proxy that drops idle clients is caught here, not silently counted.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rustls::{HandshakeKind, ProtocolVersion};

use super::settings::MAX_IDLE;
use crate::kit::holders::{say, wait_until_told_to_finish, Holders};
use crate::kit::process::option_args;
use crate::kit::tls_client::{self, KEEP_ALIVE_GET};

/// How long the holder may take to open all its connections (10,000 full handshakes take a few
/// seconds with ECDSA), and to finish once told to.
const READY_LIMIT: Duration = Duration::from_secs(180);
const FINISH_LIMIT: Duration = Duration::from_secs(30);

/// Options of the hidden `tls-holder` subcommand.
#[derive(Debug, clap::Args)]
pub struct TlsHolderArgs {
    /// The proxy's TLS port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// Connections to open and hold (at most MAX_IDLE).
    #[arg(long)]
    pub count: u32,
    /// A PEM certificate the proxy may present (pinned: no other is accepted); repeatable.
    #[arg(long, required = true)]
    pub certificate: Vec<PathBuf>,
    /// Connections being opened at once, each on its own thread.
    #[arg(long, default_value_t = 8)]
    pub threads: u32,
}

/// The `tls-holder` subcommand: open, say `ready`, hold until stdin closes, say `closed`.
pub fn run(args: TlsHolderArgs) -> anyhow::Result<()> {
    if args.count > MAX_IDLE {
        bail!(
            "{} connections are more than one process holds (at most {MAX_IDLE})",
            args.count
        );
    }
    let pinned = tls_client::read_certificates(&args.certificate)?;
    let config = tls_client::client_config(pinned, false)?;
    let next = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..args.threads.clamp(1, args.count.max(1)))
        .map(|_| {
            let (config, next, port, count) = (
                Arc::clone(&config),
                Arc::clone(&next),
                args.port,
                args.count,
            );
            std::thread::spawn(move || -> anyhow::Result<Vec<Opened>> {
                let mut opened = Vec::new();
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= count {
                        return Ok(opened);
                    }
                    let (socket, exchanged) =
                        tls_client::exchange(&config, port, KEEP_ALIVE_GET)
                            .with_context(|| format!("TLS connection {} of {count}", index + 1))?;
                    if !(200..300).contains(&exchanged.status) {
                        bail!(
                            "TLS connection {} of {count}: answered {}",
                            index + 1,
                            exchanged.status
                        );
                    }
                    opened.push(Opened {
                        socket,
                        tls13: exchanged.version == Some(ProtocolVersion::TLSv1_3),
                        full: matches!(
                            exchanged.kind,
                            Some(HandshakeKind::Full | HandshakeKind::FullWithHelloRetryRequest)
                        ),
                    });
                }
            })
        })
        .collect();
    let mut held = Vec::with_capacity(args.count as usize);
    for thread in threads {
        let opened = thread
            .join()
            .map_err(|_| anyhow::anyhow!("an opening thread panicked"))??;
        held.extend(opened);
    }
    let tls13 = held.iter().filter(|o| o.tls13).count();
    let full = held.iter().filter(|o| o.full).count();
    say(&format!(
        "ready {} ({tls13} TLS 1.3, {full} full)",
        held.len()
    ));

    wait_until_told_to_finish();

    let closed = held.iter().filter(|o| !still_open(&o.socket)).count();
    say(&format!("closed {closed} of {}", held.len()));
    Ok(())
}

/// One connection held: its socket (its TLS state dropped, as nothing more is said on it) and how
/// its handshake went.
struct Opened {
    socket: TcpStream,
    tls13: bool,
    full: bool,
}

/// Whether the proxy has neither closed the connection nor sent anything since its answer.
fn still_open(socket: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    socket.set_nonblocking(true).is_ok()
        && matches!(socket.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// What a holder said about its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldReport {
    pub count: u32,
    pub tls13: u32,
    pub full: u32,
}

/// Idle TLS connections held by a holder process; dropping it kills the holder.
pub struct Held {
    holders: Holders,
    pub report: HeldReport,
}

/// Starts a holder of `count` TLS connections to 127.0.0.1:`port`, which accepts only
/// `certificates`, its output in `log`, and waits until it says `ready`.
pub fn hold(port: u16, count: u32, certificates: &[&Path], log: &Path) -> anyhow::Result<Held> {
    let mut holders = Holders::default();
    let args = option_args(
        certificates
            .iter()
            .map(|c| ("--certificate", c.display().to_string())),
    );
    holders.start("tls-holder", port, count, &args, log)?;
    let what = format!("{count} idle TLS connections");
    holders.wait_until_ready(&what, READY_LIMIT)?;
    let line = std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("ready"))
        .map(str::to_string)
        .unwrap_or_default();
    let report = parse_ready(&line).with_context(|| format!("the holder said {line:?}"))?;
    if report.count != count {
        bail!("the holder opened {} of {count} connections", report.count);
    }
    Ok(Held { holders, report })
}

impl Held {
    /// Tells the holder to finish and returns how many of its connections the proxy had closed.
    pub fn finish(self) -> anyhow::Result<u32> {
        let finished = self.holders.finish(FINISH_LIMIT)?;
        let line = finished
            .iter()
            .find_map(|h| h.said("closed"))
            .context("the holder did not say how many connections were closed")?;
        parse_closed(&line)
            .map(|(closed, _)| closed)
            .with_context(|| format!("the holder said {line:?}"))
    }
}

/// `ready N (T TLS 1.3, F full)`.
fn parse_ready(line: &str) -> Option<HeldReport> {
    let (count, rest) = line.strip_prefix("ready ")?.split_once(" (")?;
    let (tls13, rest) = rest.split_once(" TLS 1.3, ")?;
    let full = rest.strip_suffix(" full)")?;
    Some(HeldReport {
        count: count.trim().parse().ok()?,
        tls13: tls13.trim().parse().ok()?,
        full: full.trim().parse().ok()?,
    })
}

/// The K and N of `closed K of N`.
fn parse_closed(line: &str) -> Option<(u32, u32)> {
    let (closed, total) = line.strip_prefix("closed ")?.split_once(" of ")?;
    Some((closed.trim().parse().ok()?, total.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_s_lines_are_read_back() {
        assert_eq!(
            parse_ready("ready 10000 (10000 TLS 1.3, 9999 full)"),
            Some(HeldReport {
                count: 10_000,
                tls13: 10_000,
                full: 9_999
            })
        );
        assert_eq!(parse_ready("ready 10"), None);
        assert_eq!(parse_closed("closed 3 of 10000"), Some((3, 10_000)));
        assert_eq!(parse_closed("opened 3"), None);
    }

    #[test]
    fn a_connection_the_peer_closed_is_not_open() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(still_open(&client));
        drop(accepted);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!still_open(&client));
    }
}
