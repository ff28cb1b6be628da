//! Silent connections, both ends: a connection that opens and never sends a byte, opened again
//! at once whenever the proxy closes it, as an attacker with nothing but idle connections keeps
//! its count (`tls-load`'s silent TLS connections, `fd-flood`'s descriptor flood). The hidden
//! `silent-holder` subcommand runs up to `slow_holders::MAX_PER_PROCESS` of them on one
//! current-thread process (`kit::slow_holders`), and `SilentClients` is the parent's handle on as
//! many holders as a count needs. Tally: `opened` connections (first and again), `ended` by the
//! proxy before the holder was told to finish, `held` open when it was (one closed just before is
//! opened again first, so the count is whole), `failed` connects (a connect the proxy's full
//! listen queue leaves unanswered for `slow_steps::CONNECT_LIMIT` among them).

use std::path::Path;
use std::time::Duration;

use tokio::time::{sleep, timeout};

use crate::kit::process::option_args;
use crate::kit::slow_holders::{self, HolderArgs, Shared, SlowHolders, SlowKind, Tally};
use crate::kit::slow_steps::{connect_counted, ended_by_peer};

/// The hidden subcommand's name.
pub const SUBCOMMAND: &str = "silent-holder";

/// How often a silent connection looks whether the holder was told to stop; the proxy's close is
/// seen as it comes, whatever this is. Also the pause after a connect that failed.
const STEP: Duration = Duration::from_secs(1);

/// The one kind a silent holder runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Silent;

impl SlowKind for Silent {
    fn label(self) -> &'static str {
        "silent"
    }
}

/// Options of the hidden `silent-holder` subcommand.
#[derive(Debug, clap::Args)]
pub struct SilentHolderArgs {
    #[command(flatten)]
    pub holder: HolderArgs,
    /// The kinds to run, as `SlowHolders` names them: only `silent`.
    #[arg(long, value_parser = ["silent"], default_value = "silent")]
    pub kinds: String,
    /// The first connects are spread evenly over this many milliseconds (and so are a timeout's
    /// closes after them).
    #[arg(long, default_value_t = 1000)]
    pub spread_ms: u64,
}

/// The `silent-holder` subcommand: connect, say `ready`, go on until told to finish; then the
/// tally line.
pub fn run(args: SilentHolderArgs) -> anyhow::Result<()> {
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

/// Silent connections run by holder processes; dropping it kills them.
pub struct SilentClients {
    holders: SlowHolders,
}

impl SilentClients {
    /// Starts holders for `count` silent connections to 127.0.0.1:`port`, their first connects
    /// spread over `spread`, and waits until every one has made its first connect. Each stops by
    /// itself after `hold`. Logs go into `dir`.
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

    /// The holders' process ids, for their CPU time.
    pub fn pids(&self) -> Vec<u32> {
        self.holders.pids()
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

    /// The holder's silent connections against `listener` for `how_long`.
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
}
