//! `herdsman ctl upgrade` without `--no-wait`: asks for the upgrade, then follows it through
//! `GET /api/workers` until the new process serves and the old ones have finished draining,
//! printing a line whenever the count of their open connections changes.

use std::io::Write;
use std::time::Duration;

use serde::Deserialize;

use super::client::{call_api, get_json, CtlError};
use super::commands::CtlCommand;

/// How often `upgrade` asks how the upgrade is going.
const UPGRADE_POLL: Duration = Duration::from_millis(250);

/// `GET /api/workers`, as far as `upgrade` reads it.
#[derive(Debug, Deserialize)]
struct UpgradeWatch {
    pid: u32,
    /// Absent from a herdsman that does not report them.
    predecessors: Option<Vec<DrainingReply>>,
}

#[derive(Debug, Deserialize)]
struct DrainingReply {
    pid: u32,
    connections: Option<u64>,
}

/// `upgrade` without `--no-wait`: asks for the upgrade, waits (within `limit`) until another
/// process answers the admin API, then until it reports no older process still draining.
pub fn upgrade_and_wait(
    admin: &str,
    token: Option<&str>,
    limit: Duration,
    progress: &mut dyn Write,
) -> Result<String, CtlError> {
    let old = get_json::<UpgradeWatch>(admin, token, "/api/workers")?.pid;
    let asked = std::time::Instant::now();
    call_api(
        admin,
        token,
        &CtlCommand::Upgrade {
            no_wait: true,
            wait: 0,
        }
        .call(),
    )?;
    let out_of_time = || asked.elapsed() >= limit;
    // The admin API's socket is handed over too: the new process answers on it once it serves.
    let serving = loop {
        match get_json::<UpgradeWatch>(admin, token, "/api/workers") {
            Ok(watch) if watch.pid != old => break watch,
            Ok(_) => {}
            // Between the two processes, a call may go unanswered.
            Err(CtlError::Unreachable { .. } | CtlError::NoAnswer { .. }) => {}
            Err(error) => return Err(error),
        }
        if out_of_time() {
            return Err(CtlError::NotUpgraded {
                pid: old,
                waited: asked.elapsed().as_secs(),
            });
        }
        std::thread::sleep(UPGRADE_POLL);
    };
    let new = serving.pid;
    let mut old_pids = vec![old];
    let mut draining = match serving.predecessors {
        Some(draining) => draining,
        None => {
            return Ok(format!(
                "upgraded: pid {new} serves (it does not say when pid {old} has gone)\n"
            ))
        }
    };
    let mut said = String::new();
    while !draining.is_empty() {
        for entry in &draining {
            if !old_pids.contains(&entry.pid) {
                old_pids.push(entry.pid);
            }
        }
        let line = draining_line(&draining);
        if line != said {
            let _ = writeln!(progress, "{line}");
            said = line;
        }
        if out_of_time() {
            return Ok(format!(
                "upgraded: pid {new} serves; still draining after {} s: {said} (an old process \
                 exits once its connections close; GET /api/workers follows them)\n",
                limit.as_secs()
            ));
        }
        std::thread::sleep(UPGRADE_POLL);
        draining = get_json::<UpgradeWatch>(admin, token, "/api/workers")?
            .predecessors
            .unwrap_or_default();
    }
    let gone = match old_pids.as_slice() {
        [pid] => format!("the old process (pid {pid}) has gone"),
        pids => {
            let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
            format!("the old processes (pids {}) have gone", pids.join(", "))
        }
    };
    Ok(format!("upgraded: pid {new} serves; {gone}\n"))
}

/// `pid 4242: 3 connections still open; pid 4100: 1 connection still open`.
fn draining_line(draining: &[DrainingReply]) -> String {
    draining
        .iter()
        .map(|entry| match entry.connections {
            Some(1) => format!("pid {}: 1 connection still open", entry.pid),
            Some(count) => format!("pid {}: {count} connections still open", entry.pid),
            None => format!("pid {}: counting its connections", entry.pid),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_reads_as_one_line_per_change() {
        let draining = [
            DrainingReply {
                pid: 4242,
                connections: Some(3),
            },
            DrainingReply {
                pid: 4100,
                connections: Some(1),
            },
            DrainingReply {
                pid: 4000,
                connections: None,
            },
        ];
        assert_eq!(
            draining_line(&draining),
            "pid 4242: 3 connections still open; pid 4100: 1 connection still open; \
             pid 4000: counting its connections"
        );
    }
}
