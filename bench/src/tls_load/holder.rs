//! The clients of `tls-load` that run as holder processes of `kit::slow_holders`, both ends: the
//! hidden `tls-load-holder` subcommand, one current-thread process running up to
//! `MAX_PER_PROCESS` connections of one kind, and the handles `tls-load` starts them through.
//!
//! - **silent** (`SilentClients`): connects to the TLS port and never sends a byte, so no
//!   ClientHello ever comes; herdsman closes it once `[timeouts] tls_handshake` passes, and the
//!   holder connects again at once: the attacker keeps its count open for as long as it likes.
//!   Tally: `opened` connections (first and again), `ended` by herdsman (each a timeout, as the
//!   holder saw it) before the holder was told to finish, `held` open when it was (one closed
//!   just before is opened again first, so the count is whole), `failed` connects.
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
use crate::kit::slow_steps::{connect_counted, ended_by_peer};
use crate::kit::tls_client::{self, SERVER_NAME};

/// The hidden subcommand's name.
const SUBCOMMAND: &str = "tls-load-holder";

/// How often a silent connection looks whether the holder was told to stop; herdsman's close is
/// seen as it comes, whatever this is. Also the pause after a connect that failed.
const STEP: Duration = Duration::from_secs(1);

/// How long one storm handshake, and the wait for herdsman's close after it, may take.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// The kinds of connection a holder runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Silent,
    Handshakes,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::Silent, Kind::Handshakes];
}

impl SlowKind for Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Silent => "silent",
            Kind::Handshakes => "handshakes",
        }
    }
}

fn parse_kind(label: &str) -> Result<Kind, String> {
    Kind::ALL
        .into_iter()
        .find(|k| k.label() == label)
        .ok_or_else(|| format!("no kind {label:?}; the kinds are silent and handshakes"))
}

/// Options of the hidden `tls-load-holder` subcommand.
#[derive(Debug, clap::Args)]
pub struct TlsLoadHolderArgs {
    #[command(flatten)]
    pub holder: HolderArgs,
    /// The kind to run: silent or handshakes.
    #[arg(long, value_delimiter = ',', value_parser = parse_kind, required = true)]
    pub kinds: Vec<Kind>,
    /// The first connects are spread evenly over this many milliseconds (and so, for silent
    /// connections, are herdsman's timeouts after them).
    #[arg(long, default_value_t = 1000)]
    pub spread_ms: u64,
    /// The PEM certificate herdsman presents (pinned), for the handshakes.
    #[arg(long)]
    pub certificate: Option<PathBuf>,
}

/// The `tls-load-holder` subcommand: connect, say `ready`, go on until told to finish; then the
/// tally line.
pub fn run(args: TlsLoadHolderArgs) -> anyhow::Result<()> {
    let config = match &args.certificate {
        Some(path) => Some(tls_client::storm_config(tls_client::read_certificates(
            &[path],
        )?)?),
        None if args.kinds.contains(&Kind::Handshakes) => {
            anyhow::bail!("the handshakes need --certificate")
        }
        None => None,
    };
    slow_holders::serve(
        &args.holder,
        &args.kinds,
        Duration::from_millis(args.spread_ms),
        move |kind, shared, phase| {
            let config = config.clone();
            async move {
                match (kind, config) {
                    (Kind::Handshakes, Some(config)) => handshakes(&shared, &config, phase).await,
                    _ => silent(&shared, phase).await,
                }
            }
        },
    )
}

/// One silent connection, started after `phase`, and each one after it when the server closed
/// the last, until the holder stops.
async fn silent(shared: &Shared, phase: Duration) -> Tally {
    sleep(phase).await;
    let mut tally = Tally::default();
    let mut first = true;
    // A connection herdsman closed before the stop was seen is opened again even if the stop
    // comes in between (the attacker keeps its count): without this, a close seen just before
    // the stop left the count one short at the end, as a loaded CI machine once showed.
    let mut replacing = false;
    while std::mem::take(&mut replacing) || !shared.stopping() {
        let Some(stream) = connect_counted(shared, None, &mut first, &mut tally).await else {
            sleep(STEP).await;
            continue;
        };
        loop {
            // Readable: the server closed it (or, against all expectation, said something); a
            // readiness that finds nothing to read is looked at again.
            if let Ok(Ok(())) = timeout(STEP, stream.readable()).await {
                if let Some(how) = ended_by_peer(&stream) {
                    if shared.stopping() {
                        // Closed after the holder was told to finish (the close wakes this task
                        // at once, the stop only at its next step): it was open at the end.
                        tally.held += 1;
                        return tally;
                    }
                    tally.end(how);
                    replacing = true;
                    break;
                }
            }
            if shared.stopping() {
                tally.held += 1;
                shared.close_or_keep(stream);
                return tally;
            }
        }
    }
    tally
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

/// Holder processes of `kind`; dropping it kills them.
struct Clients {
    holders: SlowHolders,
}

impl Clients {
    fn open(
        kind: Kind,
        port: u16,
        count: u32,
        more_args: &[String],
        hold: Duration,
        dir: &Path,
    ) -> anyhow::Result<Clients> {
        let holders = SlowHolders::open(SUBCOMMAND, port, count, &[kind], more_args, hold, dir)?;
        Ok(Clients { holders })
    }

    fn close(self) -> anyhow::Result<Tally> {
        let mut tallies = self.holders.close()?;
        Ok(tallies.pop().unwrap_or_default())
    }
}

/// Silent connections run by holder processes; dropping it kills them.
pub struct SilentClients(Clients);

impl SilentClients {
    /// Starts holders for `count` silent connections to 127.0.0.1:`port`, their first connects
    /// spread over `spread`, and waits until every one has connected once. Each stops by itself
    /// after `hold`. Logs go into `dir`.
    pub fn open(
        port: u16,
        count: u32,
        spread: Duration,
        hold: Duration,
        dir: &Path,
    ) -> anyhow::Result<SilentClients> {
        let spread_ms = option_args([("--spread-ms", spread.as_millis().to_string())]);
        let clients = Clients::open(Kind::Silent, port, count, &spread_ms, hold, dir)?;
        Ok(SilentClients(clients))
    }

    /// The holders' process ids, for their CPU time.
    pub fn pids(&self) -> Vec<u32> {
        self.0.holders.pids()
    }

    /// Tells every holder to finish and returns what the silent connections saw, summed.
    pub fn close(self) -> anyhow::Result<Tally> {
        self.0.close()
    }
}

/// A storm of new handshakes run by a holder process; dropping it kills it.
pub struct Storm {
    clients: Clients,
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
        let clients = Clients::open(Kind::Handshakes, port, clients, &args, hold, dir)
            .context("starting the handshake storm")?;
        Ok(Storm {
            clients,
            started: Instant::now(),
        })
    }

    /// The holder's process ids, for its CPU time.
    pub fn pids(&self) -> Vec<u32> {
        self.clients.holders.pids()
    }

    /// Tells the holder to finish; what its connections saw, and the seconds since the start.
    pub fn stop(self) -> anyhow::Result<(Tally, f64)> {
        let seconds = self.started.elapsed().as_secs_f64();
        Ok((self.clients.close()?, seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::slow_holders::{hold, run_until_stopped};
    use std::net::TcpListener;

    /// The holder's silent connections against `listener` for `how_long`.
    fn hold_against(listener: &TcpListener, count: u32, how_long: Duration) -> Tally {
        let addr = listener.local_addr().unwrap();
        let mut tallies = run_until_stopped(addr, how_long, |shared| {
            hold(
                shared,
                count,
                &[Kind::Silent],
                Duration::from_secs(60),
                Duration::from_millis(100),
                |_, shared, phase| async move { silent(&shared, phase).await },
            )
        });
        tallies.pop().unwrap()
    }

    /// Against a listener that never accepts (the kernel completes the connects), every
    /// connection is held and none ended.
    #[test]
    fn silent_connections_a_server_keeps_are_held() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tally = hold_against(&listener, 5, Duration::from_millis(800));
        assert_eq!(
            (tally.opened, tally.held, tally.ended, tally.failed),
            (5, 5, 0, 0)
        );
    }

    /// Against a server that closes each connection as it accepts it (a timeout, early), each is
    /// counted ended and opened again at once.
    #[test]
    fn a_silent_connection_the_server_closes_is_opened_again() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.try_clone().unwrap();
        std::thread::spawn(move || {
            for (served, connection) in server.incoming().enumerate() {
                // The first three are closed; the rest are kept, as a server keeps a connection
                // whose handshake timeout has not passed yet.
                if served >= 3 {
                    std::mem::forget(connection);
                }
            }
        });
        let tally = hold_against(&listener, 1, Duration::from_millis(800));
        assert_eq!(
            (tally.opened, tally.ended, tally.held, tally.failed),
            (4, 3, 1, 0),
            "{tally:?}"
        );
        assert_eq!(tally.first_end.as_deref(), Some("closed"));
    }

    /// Against a server that closes every connection as it accepts it, so that closes keep
    /// coming as the holder is told to finish, every connection is still counted held at the
    /// end: one closed just before the stop is opened again, as the attacker would. (Before, a
    /// close seen just ahead of the stop ended that connection's task, and CI once read 999 held
    /// of 1,000.)
    #[test]
    fn a_close_as_the_holder_stops_still_leaves_every_connection_held() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.try_clone().unwrap();
        std::thread::spawn(move || for _closed_at_once in server.incoming() {});
        for attempt in 0..30 {
            let tally = hold_against(&listener, 20, Duration::from_millis(150));
            assert_eq!(tally.held, 20, "attempt {attempt}: {tally:?}");
            assert!(tally.ended > 0, "attempt {attempt}: {tally:?}");
        }
    }

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
                &[Kind::Handshakes],
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

    #[test]
    fn kinds_are_named() {
        assert_eq!(parse_kind("silent"), Ok(Kind::Silent));
        assert_eq!(parse_kind("handshakes"), Ok(Kind::Handshakes));
        assert!(parse_kind("slow-head").is_err());
    }
}
