//! Holder processes: hidden subcommands of this program (`idle-clients`, `slowloris-holder`,
//! `slow-clients-holder`) that open client connections to a port on 127.0.0.1, hold them, and
//! report by lines on stdout. Both ends of how they speak live here:
//!
//! - the holder says `ready N` once its N connections are open (`say`);
//! - the parent closes the holder's stdin when it is time to finish, and a holder also finishes
//!   when the parent dies, which closes it too (`wait_until_told_to_finish`);
//! - the holder then says its last lines, which the parent reads from its log (`Supervised::said`).

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{ChildStdin, Command};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::kit::process::Supervised;

/// Running holder processes, each with the stdin the parent closes to tell it to finish. Dropping
/// it kills them.
#[derive(Default)]
pub struct Holders {
    holders: Vec<(Supervised, Option<ChildStdin>)>,
}

impl Holders {
    /// Starts one holder: this program's `subcommand` for `count` connections to
    /// 127.0.0.1:`port`, with `more_args` after those; its output goes to `log`.
    pub fn start(
        &mut self,
        subcommand: &str,
        port: u16,
        count: u32,
        more_args: &[String],
        log: &Path,
    ) -> anyhow::Result<()> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg(subcommand)
            .arg("--port")
            .arg(port.to_string())
            .arg("--count")
            .arg(count.to_string())
            .args(more_args);
        let (holder, stdin) = Supervised::spawn_with_stdin(subcommand, command, log)?;
        self.holders.push((holder, Some(stdin)));
        Ok(())
    }

    /// Waits until every holder has said `ready`. Fails if one ends before it has, with its own
    /// words, or if they are not all ready within `limit`; `what` names the connections (such as
    /// "1000 idle connections") in the error.
    pub fn wait_until_ready(&mut self, what: &str, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while !self.holders.iter().all(|(h, _)| h.said("ready").is_some()) {
            for (holder, _) in &mut self.holders {
                if holder.said("ready").is_none() {
                    if let Some(reason) = holder.exit_reason() {
                        bail!("could not open {what}: {reason}");
                    }
                }
            }
            if Instant::now() >= deadline {
                bail!("{what} were not all open within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The holders' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.holders.iter().map(|(h, _)| h.pid()).collect()
    }

    /// Tells every holder to finish and waits, at most `limit` for them all, until each has
    /// exited; returns them, so that their last lines can be read.
    pub fn finish(mut self, limit: Duration) -> anyhow::Result<Vec<Supervised>> {
        for (_, stdin) in &mut self.holders {
            drop(stdin.take());
        }
        let deadline = Instant::now() + limit;
        for (holder, _) in &mut self.holders {
            while holder.exit_reason().is_none() {
                if Instant::now() >= deadline {
                    bail!("{} did not finish within {limit:?}", holder.label);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(self.holders.into_iter().map(|(h, _)| h).collect())
    }
}

/// One line on stdout, flushed at once: the parent reads it from the log while the holder runs.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Blocks until the parent closes this process's stdin, or dies (which closes it too).
pub fn wait_until_told_to_finish() {
    let mut ignored = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut ignored);
}
