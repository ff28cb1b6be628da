//! The storm of `tls-load` that runs as a holder process of `kit::slow_holders`, both ends: the
//! hidden `tls-load-holder` subcommand, one current-thread process running up to
//! `MAX_PER_PROCESS` handshaking clients, and the handle `tls-load` starts it through. (The
//! silent connections are `kit::silent`'s, shared with `fd-flood`.)
//!
//! - **handshakes** (`Storm`): connects, makes a full TLS 1.3 handshake (rustls, resumption off,
//!   the certificate pinned but its signature not checked: `tls_client::storm_config`), shuts
//!   its side down and waits for herdsman to close, then connects again at once: a storm of new
//!   handshakes that costs the client little beyond its key exchange. Tally: `opened`,
//!   `completed` handshakes, `ended` (a handshake herdsman failed or closed, and how), `failed`
//!   connects.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout};

use crate::kit::process::option_args;
use crate::kit::slow_holders::{self, HolderArgs, Shared, SlowHolders, SlowKind, Tally};
use crate::kit::slow_steps::connect_counted;
use crate::kit::tls_client::{self, SERVER_NAME};

/// The hidden subcommand's name.
const SUBCOMMAND: &str = "tls-load-holder";

/// The pause after a connect that failed.
const STEP: Duration = Duration::from_secs(1);

/// How long one storm handshake, and the wait for herdsman's close after it, may take.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// The one kind a storm holder runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handshakes;

impl SlowKind for Handshakes {
    fn label(self) -> &'static str {
        "handshakes"
    }
}

/// Options of the hidden `tls-load-holder` subcommand.
#[derive(Debug, clap::Args)]
pub struct TlsLoadHolderArgs {
    #[command(flatten)]
    pub holder: HolderArgs,
    /// The kinds to run, as `SlowHolders` names them: only `handshakes`.
    #[arg(long, value_parser = ["handshakes"], default_value = "handshakes")]
    pub kinds: String,
    /// The first connects are spread evenly over this many milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub spread_ms: u64,
    /// The PEM certificate herdsman presents (pinned).
    #[arg(long)]
    pub certificate: PathBuf,
}

/// The `tls-load-holder` subcommand: connect, say `ready`, go on until told to finish; then the
/// tally line.
pub fn run(args: TlsLoadHolderArgs) -> anyhow::Result<()> {
    let config = tls_client::storm_config(tls_client::read_certificates(&[&args.certificate])?)?;
    slow_holders::serve(
        &args.holder,
        &[Handshakes],
        Duration::from_millis(args.spread_ms),
        move |_, shared, phase| {
            let config = Arc::clone(&config);
            async move { handshakes(&shared, &config, phase).await }
        },
    )
}

/// New full handshakes one after another, started after `phase`, until the holder stops.
async fn handshakes(shared: &Shared, config: &Arc<ClientConfig>, phase: Duration) -> Tally {
    sleep(phase).await;
    let mut tally = Tally::default();
    let mut first = true;
    while !shared.stopping() {
        let Some(mut stream) = connect_counted(shared, None, &mut first, &mut tally).await else {
            sleep(STEP).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        match timeout(HANDSHAKE_LIMIT, handshake_and_close(config, &mut stream)).await {
            Ok(Ok(())) => tally.completed += 1,
            Ok(Err(how)) => tally.end(how),
            Err(_) => tally.end(format!("no handshake within {HANDSHAKE_LIMIT:?}")),
        }
    }
    tally
}

/// A full handshake on `stream`, then its write side shut and what herdsman sends after (its
/// session tickets) read until it closes: so that the close is orderly and herdsman has counted
/// the handshake complete. Err: how it failed.
async fn handshake_and_close(
    config: &Arc<ClientConfig>,
    stream: &mut TcpStream,
) -> Result<(), String> {
    let name = ServerName::try_from(SERVER_NAME).map_err(|e| e.to_string())?;
    let mut tls = ClientConnection::new(Arc::clone(config), name).map_err(|e| e.to_string())?;
    let mut incoming = vec![0u8; 16 * 1024];
    let mut outgoing = Vec::new();
    loop {
        while tls.wants_write() {
            tls.write_tls(&mut outgoing)
                .map_err(|e| format!("tls write: {e}"))?;
        }
        if !outgoing.is_empty() {
            stream
                .write_all(&outgoing)
                .await
                .map_err(|e| format!("write: {}", e.kind()))?;
            outgoing.clear();
        }
        if !tls.is_handshaking() {
            break;
        }
        let read = stream
            .read(&mut incoming)
            .await
            .map_err(|e| format!("read: {}", e.kind()))?;
        if read == 0 {
            return Err("closed mid-handshake".into());
        }
        let mut received = &incoming[..read];
        while !received.is_empty() {
            tls.read_tls(&mut received)
                .map_err(|e| format!("tls read: {e}"))?;
            tls.process_new_packets().map_err(|e| format!("tls: {e}"))?;
        }
    }
    stream
        .shutdown()
        .await
        .map_err(|e| format!("shutdown: {}", e.kind()))?;
    loop {
        match stream.read(&mut incoming).await {
            Ok(0) => return Ok(()),
            Ok(_) => continue,
            Err(e) => return Err(format!("read after the handshake: {}", e.kind())),
        }
    }
}

/// A storm of new handshakes run by a holder process; dropping it kills it.
pub struct Storm {
    holders: SlowHolders,
    started: Instant,
}

impl Storm {
    /// Starts `clients` connections making handshakes one after another against
    /// 127.0.0.1:`port`, which presents `certificate`, and waits until each has connected once.
    /// It stops by itself after `hold`. Logs go into `dir`.
    pub fn start(
        port: u16,
        clients: u32,
        certificate: &Path,
        hold: Duration,
        dir: &Path,
    ) -> anyhow::Result<Storm> {
        let args = option_args([
            ("--certificate", certificate.display().to_string()),
            ("--spread-ms", "100".to_string()),
        ]);
        let holders = SlowHolders::open(SUBCOMMAND, port, clients, &[Handshakes], &args, hold, dir)
            .context("starting the handshake storm")?;
        Ok(Storm {
            holders,
            started: Instant::now(),
        })
    }

    /// The holder's process ids, for its CPU time.
    pub fn pids(&self) -> Vec<u32> {
        self.holders.pids()
    }

    /// Tells the holder to finish; what its connections saw, and the seconds since the start.
    pub fn stop(self) -> anyhow::Result<(Tally, f64)> {
        let seconds = self.started.elapsed().as_secs_f64();
        let mut tallies = self.holders.close()?;
        Ok((tallies.pop().unwrap_or_default(), seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::slow_holders::{hold, run_until_stopped};
    use std::net::TcpListener;

    /// Against a server that is no TLS server at all, every handshake is ended, and the client
    /// goes on with the next.
    #[test]
    fn a_storm_handshake_the_server_refuses_is_ended_and_the_next_made() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for connection in listener.incoming().flatten() {
                drop(connection);
            }
        });
        let config = tls_client::storm_config(Vec::new()).unwrap();
        let mut tallies = run_until_stopped(addr, Duration::from_millis(300), |shared| {
            hold(
                shared,
                1,
                &[Handshakes],
                Duration::from_secs(60),
                Duration::ZERO,
                move |_, shared, phase| {
                    let config = Arc::clone(&config);
                    async move { handshakes(&shared, &config, phase).await }
                },
            )
        });
        let tally = tallies.pop().unwrap();
        assert!(
            tally.opened >= 2 && tally.ended == tally.opened,
            "{tally:?}"
        );
        assert_eq!(tally.completed, 0);
    }
}
