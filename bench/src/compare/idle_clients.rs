//! Idle keep-alive client connections for the idle sweep, both ends of it: the hidden
//! `idle-clients` subcommand (one process holding up to `MAX_PER_PROCESS` connections) and
//! `IdleClients`, the handle `compare` starts enough of them through. The two speak by lines on the
//! holder's stdout and by its stdin:
//!
//! - `ready N`: all N connections are open, and each has served one keep-alive request, read to
//!   the end, so the proxy has surely accepted it and is holding it as an idle keep-alive client.
//! - stdin closes (or the holder is killed): time to finish.
//! - `closed K of N`: on finishing, K of the N connections had been closed (or written to) by the
//!   proxy while held; a proxy that drops idle clients is caught here, not silently counted.
//!
//! A connection that is refused, reset or closed while opening ends the holder with an error.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use tokio::net::TcpStream;

use crate::kit::exchange::keep_alive_exchange;
use crate::kit::holders::{say, wait_until_told_to_finish, Holders};
use crate::kit::process::split_evenly;

/// Connections one holder process opens at most: each is one descriptor, so a holder stays far
/// under the 20,000 files a process may open here.
pub const MAX_PER_PROCESS: u32 = 8000;

/// How long opening one connection and its request may take before the holder gives up.
const EXCHANGE_LIMIT: Duration = Duration::from_secs(15);

/// How long all holders together may take to say `ready`, and to finish once told to.
const READY_LIMIT: Duration = Duration::from_secs(120);
const FINISH_LIMIT: Duration = Duration::from_secs(30);

/// Options of the hidden `idle-clients` subcommand.
#[derive(Debug, clap::Args)]
pub struct IdleClientsArgs {
    /// The proxy's port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// Connections to open and hold (at most MAX_PER_PROCESS).
    #[arg(long)]
    pub count: u32,
    /// Connections being opened at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
}

/// The `idle-clients` subcommand: open, say `ready`, hold until stdin closes, say `closed`.
pub fn run(args: IdleClientsArgs) -> anyhow::Result<()> {
    if args.count > MAX_PER_PROCESS {
        bail!(
            "{} connections are more than one process holds (at most {MAX_PER_PROCESS})",
            args.count
        );
    }
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let streams = runtime.block_on(async {
        let opened = open_all(addr, args.count, args.concurrency).await?;
        // Held from here on without the runtime: nothing reads them until the final check.
        opened
            .into_iter()
            .map(|s| s.into_std().map_err(anyhow::Error::from))
            .collect::<anyhow::Result<Vec<std::net::TcpStream>>>()
    })?;
    say(&format!("ready {}", streams.len()));

    wait_until_told_to_finish();

    let closed = streams.iter().filter(|s| !still_open(s)).count();
    say(&format!("closed {closed} of {}", streams.len()));
    Ok(())
}

/// Opens `count` connections, `concurrency` at a time, each serving one keep-alive request. The
/// first failure ends it (the other tasks are dropped with the JoinSet).
async fn open_all(
    addr: SocketAddr,
    count: u32,
    concurrency: u32,
) -> anyhow::Result<Vec<TcpStream>> {
    let next = Arc::new(AtomicU32::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency.clamp(1, count.max(1)) {
        let next = Arc::clone(&next);
        tasks.spawn(async move {
            let mut opened = Vec::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= count {
                    return Ok::<_, anyhow::Error>(opened);
                }
                let stream = tokio::time::timeout(EXCHANGE_LIMIT, open_one(addr))
                    .await
                    .unwrap_or_else(|_| Err(anyhow!("no answer within {EXCHANGE_LIMIT:?}")))
                    .with_context(|| {
                        format!("idle connection {} of {count} to {addr}", index + 1)
                    })?;
                opened.push(stream);
            }
        });
    }
    let mut all = Vec::with_capacity(count as usize);
    while let Some(joined) = tasks.join_next().await {
        all.extend(joined.context("an opening task panicked")??);
    }
    Ok(all)
}

async fn open_one(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    keep_alive_exchange(&mut stream).await?;
    Ok(stream)
}

/// A held connection is still open when a non-blocking peek finds nothing to read: no FIN, no
/// reset, and no unasked-for bytes (such as a timeout response) from the proxy.
fn still_open(stream: &std::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Holder processes for `count` connections: as few as `MAX_PER_PROCESS` allows.
pub fn holders_for(count: u32) -> u32 {
    count.div_ceil(MAX_PER_PROCESS)
}

/// The K and N of a `closed K of N` line.
pub fn parse_closed(line: &str) -> Option<(u32, u32)> {
    let (closed, total) = line.strip_prefix("closed ")?.split_once(" of ")?;
    Some((closed.trim().parse().ok()?, total.trim().parse().ok()?))
}

/// Idle clients held open by holder processes; dropping it kills them.
pub struct IdleClients {
    holders: Holders,
}

impl IdleClients {
    /// Starts holders for `count` connections to 127.0.0.1:`port` and waits until every one has
    /// said `ready`. At most `concurrency` connections are being opened at once over all holders.
    /// Fails with the holder's own words if one cannot open its connections.
    pub fn open(
        port: u16,
        count: u32,
        concurrency: u32,
        dir: &Path,
    ) -> anyhow::Result<IdleClients> {
        let processes = holders_for(count);
        let per_holder = (concurrency / processes.max(1)).max(1);
        let mut holders = Holders::default();
        for (index, share) in split_evenly(count, processes).into_iter().enumerate() {
            holders.start(
                "idle-clients",
                port,
                share,
                &["--concurrency".to_string(), per_holder.to_string()],
                &dir.join(format!("idle-clients-{count}-{index}.log")),
            )?;
        }
        holders.wait_until_ready(&format!("{count} idle connections"), READY_LIMIT)?;
        Ok(IdleClients { holders })
    }

    /// Tells every holder to finish, and returns how many of its connections the proxy had
    /// closed while they were held.
    pub fn close(self) -> anyhow::Result<u32> {
        let mut closed = 0;
        for holder in self.holders.finish(FINISH_LIMIT)? {
            let (k, _) = holder
                .said("closed")
                .as_deref()
                .and_then(parse_closed)
                .with_context(|| {
                    format!(
                        "an idle-clients process ended without its count: {}",
                        holder.log_tail(3)
                    )
                })?;
            closed += k;
        }
        Ok(closed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn large_counts_are_spread_over_several_holders() {
        assert_eq!(holders_for(0), 0);
        assert_eq!(holders_for(1000), 1);
        assert_eq!(holders_for(MAX_PER_PROCESS), 1);
        assert_eq!(holders_for(15_000), 2);
        assert_eq!(holders_for(100_000), 13);
        let shares = split_evenly(15_000, holders_for(15_000));
        assert_eq!(shares, vec![7500, 7500]);
        assert!(split_evenly(100_000, holders_for(100_000))
            .iter()
            .all(|&share| share <= MAX_PER_PROCESS));
    }

    #[test]
    fn closed_lines_are_read() {
        assert_eq!(parse_closed("closed 0 of 7500"), Some((0, 7500)));
        assert_eq!(parse_closed("closed 12 of 1000"), Some((12, 1000)));
        assert_eq!(parse_closed("ready 1000"), None);
    }

    /// A listener that answers one keep-alive request per connection and then either keeps the
    /// connection or closes it: the holder's check tells the two apart.
    #[test]
    fn a_connection_closed_by_the_peer_is_not_still_open() {
        use std::net::{TcpListener, TcpStream as StdStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let kept_client = StdStream::connect(("127.0.0.1", port)).unwrap();
        let (_kept_server, _) = listener.accept().unwrap();
        let dropped_client = StdStream::connect(("127.0.0.1", port)).unwrap();
        drop(listener.accept().unwrap());
        kept_client.set_nonblocking(true).unwrap();
        dropped_client.set_nonblocking(true).unwrap();
        // The FIN may take a moment to arrive on loopback.
        let deadline = Instant::now() + Duration::from_secs(2);
        while still_open(&dropped_client) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(still_open(&kept_client));
        assert!(!still_open(&dropped_client));
    }
}
