//! The slow connections, both ends: the hidden `slowloris-holder` subcommand (one holder process of
//! `kit::slow_holders` running up to `MAX_PER_PROCESS` of them, an equal share of each kind asked
//! for) and `SlowClients`, the handle `slowloris` starts enough holders through. Every kind has
//! its tally in the results, zeros for one not run.

use std::path::Path;
use std::time::Duration;

use super::kinds::{self, Kind, TRICKLE};
use super::settings::parse_kind;
use crate::kit::slow_holders::{self, HolderArgs, SlowHolders, Tally};

/// The hidden subcommand's name.
const SUBCOMMAND: &str = "slowloris-holder";

/// Options of the hidden `slowloris-holder` subcommand.
#[derive(Debug, clap::Args)]
pub struct SlowlorisHolderArgs {
    #[command(flatten)]
    pub holder: HolderArgs,
    /// The kinds to run, comma-separated. Default: all four.
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    pub kinds: Vec<Kind>,
}

/// The `slowloris-holder` subcommand: open, say `ready`, trickle until told to finish, report.
pub fn run(args: SlowlorisHolderArgs) -> anyhow::Result<()> {
    let kinds = if args.kinds.is_empty() {
        Kind::ALL.to_vec()
    } else {
        args.kinds
    };
    slow_holders::serve(
        &args.holder,
        &kinds,
        TRICKLE,
        |kind, shared, phase| async move { kinds::run(kind, &shared, phase).await },
    )
}

/// Slow connections run by holder processes; dropping it kills them.
pub struct SlowClients {
    holders: SlowHolders,
    kinds: Vec<Kind>,
}

impl SlowClients {
    /// Starts holders for `count` slow connections of `kinds` to 127.0.0.1:`port` and waits until
    /// every one has said `ready`. Each stops by itself after `hold`. Logs go into `dir`.
    pub fn open(
        port: u16,
        count: u32,
        kinds: &[Kind],
        hold: Duration,
        dir: &Path,
    ) -> anyhow::Result<SlowClients> {
        let holders = SlowHolders::open(SUBCOMMAND, port, count, kinds, &[], hold, dir)?;
        Ok(SlowClients {
            holders,
            kinds: kinds.to_vec(),
        })
    }

    /// The holders' process ids, for their CPU time.
    pub fn pids(&self) -> Vec<u32> {
        self.holders.pids()
    }

    /// Tells every holder to finish and returns what each kind saw, summed over holders, in
    /// `Kind::ALL` order (zeros for a kind not run).
    pub fn close(self) -> anyhow::Result<Vec<(Kind, Tally)>> {
        let tallies = self.holders.close()?;
        Ok(Kind::ALL
            .iter()
            .map(|&kind| {
                let ran = self.kinds.iter().position(|&k| k == kind);
                (
                    kind,
                    ran.map_or_else(Tally::default, |i| tallies[i].clone()),
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::slow_holders::{hold, run_until_stopped};

    /// Runs the holder's connections of `kinds` against `listener` for 1.5 s.
    fn hold_against(listener: &std::net::TcpListener, count: u32, kinds: &[Kind]) -> Vec<Tally> {
        // The kernel completes the connects; nothing is accepted, so nothing is answered.
        let addr = listener.local_addr().unwrap();
        run_until_stopped(addr, Duration::from_millis(1500), |shared| {
            let limit = Duration::from_secs(60);
            hold(
                shared,
                count,
                kinds,
                limit,
                TRICKLE,
                |kind, shared, phase| async move { kinds::run(kind, &shared, phase).await },
            )
        })
    }

    /// A whole holder against a listener that accepts and never answers: every connection is
    /// opened and still held when the holder is told to stop.
    #[test]
    fn a_holder_holds_every_kind_against_a_silent_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tallies = hold_against(&listener, 8, &Kind::ALL);
        for (kind, tally) in Kind::ALL.iter().zip(&tallies) {
            assert_eq!(
                (tally.opened, tally.held, tally.ended, tally.failed),
                (2, 2, 0, 0),
                "{kind:?}: {tally:?}"
            );
        }
    }

    /// Only the kinds asked for are run.
    #[test]
    fn a_holder_runs_only_the_kinds_asked_for() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tallies = hold_against(&listener, 3, &[Kind::SlowBody]);
        let opened: Vec<u32> = tallies.iter().map(|t| t.opened).collect();
        assert_eq!(opened, vec![3]);
    }
}
