//! The hidden `fairness-client` subcommand: one client process of the fairness benchmark. Several
//! run at once so that no process comes near the 20,000-file limit. It prints `ready …` when its
//! long-lived connections are all open and `done ok=… failed=…` at the end; the parent reads these
//! lines from its log.
//!
//! Every exchange ends with a request carrying `Connection: close`, read to EOF, so herdsman closes
//! first and the TIME_WAIT sockets sit on its port rather than using up the client's ephemeral ports.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::bail;
use tokio::net::TcpStream;

use crate::kit::exchange::{closing_exchange, keep_alive_exchange};

/// How one client connection behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mix {
    /// Connect, one request, close.
    Short,
    /// Keep-alive: open, one request, stay open until every connection is open, then more requests
    /// spread over `--hold-ms`, the last one closing.
    Long,
}

/// Options of the hidden `fairness-client` subcommand.
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    #[arg(long)]
    pub port: u16,
    #[arg(long, value_enum)]
    pub mix: Mix,
    /// Connections this process opens.
    #[arg(long)]
    pub connections: usize,
    /// Connections being opened (short: being served) at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Long-lived: requests per connection, the first on opening.
    #[arg(long, default_value_t = 3)]
    pub requests: u32,
    /// Long-lived: how long the connections stay open after all are open.
    #[arg(long, default_value_t = 2000)]
    pub hold_ms: u64,
}

/// A single exchange, keep-alive or not, may take this long before it counts as failed.
const EXCHANGE_LIMIT: Duration = Duration::from_secs(15);

/// Tallies shared by the tasks of this process.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Tally {
    fn record(&self, result: anyhow::Result<()>) {
        match result {
            Ok(()) => self.ok.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| format!("{e:#}"));
                self.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }

    fn line(&self, word: &str) -> String {
        let first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        format!(
            "{word} ok={} failed={}{}",
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            first
                .as_ref()
                .map_or(String::new(), |e| format!(" first-error: {e}"))
        )
    }
}

pub fn run(args: ClientArgs) -> anyhow::Result<()> {
    if args.connections > 15_000 {
        bail!(
            "{} connections would take this process near its 20,000-file limit",
            args.connections
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let tally = Arc::new(Tally::default());
    runtime.block_on(async {
        match args.mix {
            Mix::Short => short(addr, &args, &tally).await,
            Mix::Long => long(addr, &args, &tally).await,
        }
    });
    say(&tally.line("done"));
    Ok(())
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// `concurrency` tasks take connection numbers from a shared counter until all are done.
async fn short(addr: SocketAddr, args: &ClientArgs, tally: &Arc<Tally>) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (next, tally, total) = (Arc::clone(&next), Arc::clone(tally), args.connections);
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let result = tokio::time::timeout(EXCHANGE_LIMIT, async {
                    let mut stream = TcpStream::connect(addr).await?;
                    closing_exchange(&mut stream).await
                })
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {EXCHANGE_LIMIT:?}")));
                tally.record(result);
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

async fn long(addr: SocketAddr, args: &ClientArgs, tally: &Arc<Tally>) {
    // Open every connection with one keep-alive request answered, so herdsman has surely taken it.
    let opened = Arc::new(Mutex::new(Vec::with_capacity(args.connections)));
    let next = Arc::new(AtomicUsize::new(0));
    let opening = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (next, opened, opening) =
            (Arc::clone(&next), Arc::clone(&opened), Arc::clone(&opening));
        let total = args.connections;
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let result = tokio::time::timeout(EXCHANGE_LIMIT, async {
                    let mut stream = TcpStream::connect(addr).await?;
                    keep_alive_exchange(&mut stream).await?;
                    Ok::<_, anyhow::Error>(stream)
                })
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {EXCHANGE_LIMIT:?}")));
                match result {
                    Ok(stream) => {
                        opened
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(stream);
                        opening.record(Ok(()));
                    }
                    Err(e) => opening.record(Err(e)),
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    say(&opening.line("ready"));

    // The remaining requests, spread evenly over the hold time (each connection at its own phase),
    // the last one closing.
    let streams = std::mem::take(&mut *opened.lock().unwrap_or_else(|p| p.into_inner()));
    let count = streams.len().max(1);
    let later = args.requests.saturating_sub(1).max(1);
    let slot = Duration::from_millis(args.hold_ms) / later;
    let mut tasks = Vec::new();
    for (index, mut stream) in streams.into_iter().enumerate() {
        let tally = Arc::clone(tally);
        let phase = slot.mul_f64(index as f64 / count as f64);
        tasks.push(tokio::spawn(async move {
            let result = async {
                for request in 1..=later {
                    tokio::time::sleep(if request == 1 { phase } else { slot }).await;
                    tokio::time::timeout(EXCHANGE_LIMIT, async {
                        if request == later {
                            closing_exchange(&mut stream).await
                        } else {
                            keep_alive_exchange(&mut stream).await
                        }
                    })
                    .await
                    .unwrap_or_else(|_| {
                        Err(anyhow::anyhow!("no answer within {EXCHANGE_LIMIT:?}"))
                    })?;
                }
                Ok(())
            }
            .await;
            tally.record(result);
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// The `ok=` and `failed=` figures of a `ready`/`done` line.
pub fn parse_tally(line: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
    };
    Some((field("ok=")?, field("failed=")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_lines_round_trip() {
        assert_eq!(parse_tally("done ok=2500 failed=0"), Some((2500, 0)));
        assert_eq!(
            parse_tally("ready ok=7 failed=3 first-error: x y"),
            Some((7, 3))
        );
        assert_eq!(parse_tally("ready"), None);
    }
}
