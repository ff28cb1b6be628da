//! The drain: a process that stops (SIGTERM, or a binary upgrade that handed over) finishes the
//! connections it has, says in its log how many remain, and — after an upgrade — tells its
//! successor, which shows them in `GET /api/workers` (`predecessors`) and which `herdsman ctl
//! upgrade` asks until they are gone.
//!
//! The report goes down a pipe the successor inherits: a line whenever it changes (at most every
//! [`REPORT_EVERY`]), of `pid=connections` entries separated by spaces — the writer's own
//! first, then those of the older processes it still hears from (after a second upgrade during
//! a drain), nearest first; `?` for a count not yet known. The reader takes the latest line as
//! the truth, and the end of the pipe (its writer exited) as "all gone": a process that reports
//! older ones waits for them before it exits, unless a stop signal hurries it.

use std::cell::Cell;
use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;

use super::upgrade::Successor;

/// How often the open connections are counted, and at most how often they are reported.
pub const REPORT_EVERY: Duration = Duration::from_millis(250);
/// How often the log says how many connections are still open.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// An older process still finishing its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Draining {
    pub pid: u32,
    /// Client connections it still has; `None` until it first says.
    pub connections: Option<u64>,
}

/// One report line, newline included.
fn format_line(entries: &[Draining]) -> String {
    let mut line = entries
        .iter()
        .map(|entry| match entry.connections {
            Some(count) => format!("{}={count}", entry.pid),
            None => format!("{}=?", entry.pid),
        })
        .collect::<Vec<_>>()
        .join(" ");
    line.push('\n');
    line
}

/// The entries of one report line; malformed ones are skipped.
fn parse_line(line: &str) -> Vec<Draining> {
    line.split_whitespace()
        .filter_map(|entry| {
            let (pid, count) = entry.split_once('=')?;
            Some(Draining {
                pid: pid.parse().ok()?,
                connections: count.parse().ok(),
            })
        })
        .collect()
}

/// The older processes still draining, as the process this one replaced reports them. Read by
/// the admin API and the drain; written by the thread that reads the pipe. The lock is the
/// control plane's: the request path never takes it.
#[derive(Debug)]
pub struct Predecessors {
    draining: Mutex<Vec<Draining>>,
    /// True from the first report or the end of the pipe: the process this one replaced has
    /// stopped accepting by then (it reports only once it drains).
    handed_over: watch::Sender<bool>,
}

impl Predecessors {
    /// Follows the report pipe of `pid`, the process this one replaced, on a thread of its own,
    /// until that process exits. Until its first line, it counts as draining, count unknown.
    pub fn follow(pid: u32, pipe: std::fs::File) -> Arc<Predecessors> {
        let predecessors = Arc::new(Predecessors {
            draining: Mutex::new(vec![Draining {
                pid,
                connections: None,
            }]),
            handed_over: watch::Sender::new(false),
        });
        let following = Arc::clone(&predecessors);
        let started = std::thread::Builder::new()
            .name("herdsman-predecessor".into())
            .spawn(move || following.read_reports(pid, pipe));
        if let Err(error) = started {
            // Unheard, it would look like it drains for ever: say nothing of it instead.
            tracing::warn!(pid, %error, "cannot follow the previous process's drain");
            predecessors.set(Vec::new());
        }
        predecessors
    }

    fn read_reports(&self, pid: u32, pipe: std::fs::File) {
        let mut lines = BufReader::new(pipe);
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => self.set(parse_line(&line)),
            }
        }
        self.set(Vec::new());
        tracing::info!(pid, "the previous process has exited");
    }

    fn set(&self, draining: Vec<Draining>) {
        *self.lock() = draining;
        self.handed_over.send_replace(true);
    }

    /// Returns once the process this one replaced has stopped accepting: at its first report,
    /// or when it has gone. The admin API waits for this before it answers, so that one process
    /// at a time answers it; its connections wait in the listen queue meanwhile.
    pub async fn handed_over(&self) {
        let mut handed_over = self.handed_over.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail.
        let _ = handed_over.wait_for(|done| *done).await;
    }

    /// The older processes still draining, nearest first; empty when all have gone.
    pub fn draining(&self) -> Vec<Draining> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Draining>> {
        // A panic while holding the lock cannot leave the list half-written: it is replaced whole.
        self.draining
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What a drain watches and whom it tells.
pub struct Drain<'a> {
    /// Client connections this process still has.
    pub open: &'a dyn Fn() -> u64,
    /// Whether every worker has exited (its connections closed, or cut at the deadline).
    pub finished: &'a dyn Fn() -> bool,
    /// The older processes this one still hears from, when an upgrade started it.
    pub predecessors: Option<&'a Predecessors>,
    /// The process this one handed over to, when an upgrade is why it stops.
    pub successor: Option<Successor>,
    /// Set when a stop signal arrives during the drain: this process then exits as soon as its
    /// own connections are done, without waiting for older ones.
    pub hurried: &'a Cell<bool>,
}

impl Drain<'_> {
    /// Counts the open connections every [`REPORT_EVERY`], reports them to the successor when
    /// they change, and logs them every [`LOG_EVERY`] and when the last one closes; returns when
    /// the workers have exited and — when there is a successor to tell — every older process
    /// has gone too.
    pub async fn run(mut self) {
        let mut ticks = tokio::time::interval(REPORT_EVERY);
        let mut reported = String::new();
        let mut logged = Instant::now();
        let mut had_connections = false;
        loop {
            ticks.tick().await;
            let open = (self.open)();
            let older = self
                .predecessors
                .map(Predecessors::draining)
                .unwrap_or_default();
            if let Some(successor) = &mut self.successor {
                let mut entries = vec![Draining {
                    pid: std::process::id(),
                    connections: Some(open),
                }];
                entries.extend(&older);
                let line = format_line(&entries);
                if line != reported {
                    successor.report(&line);
                    reported = line;
                }
            }
            let log_due = logged.elapsed() >= LOG_EVERY;
            if open > 0 {
                had_connections = true;
                if log_due {
                    tracing::info!(open, "draining: connections still open");
                    logged = Instant::now();
                }
            } else if had_connections {
                tracing::info!("draining: the last connection closed");
                had_connections = false;
            }
            if !(self.finished)() {
                continue;
            }
            let waits_for_older =
                self.successor.is_some() && !older.is_empty() && !self.hurried.get();
            if !waits_for_older {
                return;
            }
            if log_due {
                let pids: Vec<u32> = older.iter().map(|entry| entry.pid).collect();
                tracing::info!(
                    ?pids,
                    "drained; waiting for the older processes to exit, so that the new one hears when all have gone"
                );
                logged = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_line_reads_back_as_written() {
        let entries = [
            Draining {
                pid: 4242,
                connections: Some(17),
            },
            Draining {
                pid: 4100,
                connections: None,
            },
        ];
        let line = format_line(&entries);
        assert_eq!(line, "4242=17 4100=?\n");
        assert_eq!(parse_line(&line), entries);
        assert_eq!(parse_line("\n"), []);
        assert_eq!(
            parse_line("7=1 junk =3 8=x"),
            [
                Draining {
                    pid: 7,
                    connections: Some(1)
                },
                Draining {
                    pid: 8,
                    connections: None
                }
            ]
        );
    }

    #[test]
    fn predecessors_are_what_the_last_line_says_until_the_pipe_closes() {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) writes two new descriptors, owned from here on.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both were just created and belong to nobody else.
        let (read, write) = unsafe {
            use std::os::fd::FromRawFd;
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        };
        let predecessors = Predecessors::follow(99, read);
        let unknown = Draining {
            pid: 99,
            connections: None,
        };
        assert_eq!(predecessors.draining(), [unknown]);
        let mut write = write;
        std::io::Write::write_all(&mut write, b"99=3 98=1\n99=2 98=1\n").unwrap();
        let said = [
            Draining {
                pid: 99,
                connections: Some(2),
            },
            Draining {
                pid: 98,
                connections: Some(1),
            },
        ];
        let until = Instant::now() + Duration::from_secs(5);
        while predecessors.draining() != said && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(predecessors.draining(), said);
        drop(write);
        while !predecessors.draining().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(predecessors.draining(), []);
    }
}
