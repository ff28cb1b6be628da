//! The silent TLS connections, both ends: the hidden `tls-load-holder` subcommand (one holder
//! process of `kit::slow_holders` running up to `MAX_PER_PROCESS` of them) and `SilentClients`,
//! the handle `tls-load` opens them through. A silent connection connects to the TLS port and
//! never sends a byte, so no ClientHello ever comes; herdsman closes it once `[timeouts]
//! tls_handshake` passes, and the holder connects again at once: the attacker keeps its count
//! open for as long as it likes. Its tally: `opened` connections (first and again), `ended` by
//! herdsman (each a timeout, as the holder saw it) before the holder was told to finish, `held`
//! open when it was, `failed` connects.

use std::path::Path;
use std::time::Duration;

use tokio::time::{sleep, timeout};

use crate::kit::process::option_args;
use crate::kit::slow_holders::{self, HolderArgs, Shared, SlowHolders, SlowKind, Tally};
use crate::kit::slow_steps::{connect_counted, ended_by_peer};

/// The hidden subcommand's name.
const SUBCOMMAND: &str = "tls-load-holder";

/// How often a silent connection looks whether the holder was told to stop; herdsman's close is
/// seen as it comes, whatever this is.
const STEP: Duration = Duration::from_secs(1);

/// The one kind of connection the holder runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Silent;

impl SlowKind for Silent {
    fn label(self) -> &'static str {
        "silent"
    }
}

/// `silent`, the only kind (every holder is told its kinds by name).
fn parse_kind(label: &str) -> Result<Silent, String> {
    (label == Silent.label())
        .then_some(Silent)
        .ok_or_else(|| format!("no kind {label:?}; the only kind is silent"))
}

/// Options of the hidden `tls-load-holder` subcommand.
#[derive(Debug, clap::Args)]
pub struct TlsLoadHolderArgs {
    #[command(flatten)]
    pub holder: HolderArgs,
    /// The kinds to run: `silent`.
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    pub kinds: Vec<Silent>,
    /// The first connects are spread evenly over this many milliseconds, and so are herdsman's
    /// timeouts after them.
    #[arg(long, default_value_t = 1000)]
    pub spread_ms: u64,
}

/// The `tls-load-holder` subcommand: connect, say `ready`, connect again whenever herdsman closes,
/// until told to finish; then the tally line.
pub fn run(args: TlsLoadHolderArgs) -> anyhow::Result<()> {
    slow_holders::serve(
        &args.holder,
        &[Silent],
        Duration::from_millis(args.spread_ms),
        |_, shared, phase| async move { silent(&shared, phase).await },
    )
}

/// One silent connection, started after `phase`, and each one after it when the server closed
/// the last, until the holder stops.
async fn silent(shared: &Shared, phase: Duration) -> Tally {
    sleep(phase).await;
    let mut tally = Tally::default();
    let mut first = true;
    while !shared.stopping() {
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

/// Silent connections run by holder processes; dropping it kills them.
pub struct SilentClients {
    holders: SlowHolders,
}

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
        let holders = SlowHolders::open(SUBCOMMAND, port, count, &[Silent], &spread_ms, hold, dir)?;
        Ok(SilentClients { holders })
    }

    /// Tells every holder to finish and returns what the silent connections saw, summed.
    pub fn close(self) -> anyhow::Result<Tally> {
        let mut tallies = self.holders.close()?;
        Ok(tallies.pop().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::slow_holders::{hold, run_until_stopped};
    use std::net::TcpListener;

    /// The holder's connections against `listener` for `how_long`.
    fn hold_against(listener: &TcpListener, count: u32, how_long: Duration) -> Tally {
        let addr = listener.local_addr().unwrap();
        let mut tallies = run_until_stopped(addr, how_long, |shared| {
            hold(
                shared,
                count,
                &[Silent],
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

    #[test]
    fn the_only_kind_is_silent() {
        assert_eq!(parse_kind("silent"), Ok(Silent));
        assert!(parse_kind("slow-head").is_err());
    }
}
