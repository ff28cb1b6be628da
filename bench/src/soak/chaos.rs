//! The chaos: what an operator does to a proxy and its servers in a day, compressed. The kinds of
//! event, the schedule that puts them in turn every `every` seconds (each one that touches a
//! server touching the next server of three), and running the schedule's steps against the
//! servers and the proxy, recording when each ran, how long it took and what it saw.

use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use super::plan::ServerState;
use super::proxy::Proxy;
use super::servers::Servers;

/// One kind of chaos event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A server stopped gracefully (nginx QUIT, as a deploy does) and started again 3 s later.
    GracefulRestart,
    /// `drain` on a server, `ready` 3 s later.
    Drain,
    /// A configuration reload that changes the balance algorithm.
    Reload,
    /// The access log renamed and the proxy told to reopen it (SIGUSR1).
    RotateLog,
    /// A server killed (`kill -9`) and started again 4 s later.
    Kill,
    /// A binary upgrade (herdsman: `ctl upgrade`; HAProxy: its own reload, SIGUSR2 to the master).
    Upgrade,
    /// `maint` on a server, `ready` 3 s later.
    Maint,
    /// Every server killed, all started again 4 s later (not in the soak: a failover scenario).
    KillAll,
}

/// How long a server stays stopped, drained or in maintenance before it comes back.
const RESTORE_AFTER: Duration = Duration::from_secs(3);
/// How long a killed server stays dead (the 4 s).
const DEAD_FOR: Duration = Duration::from_secs(4);

impl Kind {
    /// The soak's events in the order they take turns: the five, then the upgrade and
    /// maintenance it added.
    pub const SOAK: [Kind; 7] = [
        Kind::GracefulRestart,
        Kind::Drain,
        Kind::Reload,
        Kind::RotateLog,
        Kind::Kill,
        Kind::Upgrade,
        Kind::Maint,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Kind::GracefulRestart => "graceful-restart",
            Kind::Drain => "drain",
            Kind::Reload => "reload",
            Kind::RotateLog => "rotate-log",
            Kind::Kill => "kill",
            Kind::Upgrade => "upgrade",
            Kind::Maint => "maint",
            Kind::KillAll => "kill-all",
        }
    }

    /// Every kind: the soak's, then those only a scenario asks for.
    pub fn all() -> impl Iterator<Item = Kind> {
        Kind::SOAK.into_iter().chain([Kind::KillAll])
    }

    pub fn from_label(label: &str) -> Option<Kind> {
        Kind::all().find(|k| k.label() == label)
    }

    /// What the event does, for the results file.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::GracefulRestart => {
                "a server stopped gracefully (nginx QUIT, as a deploy does), started again 3 s later"
            }
            Kind::Drain => "`drain` on a server, `ready` 3 s later",
            Kind::Reload => {
                "a configuration reload that changes the balance algorithm (round-robin ↔ least-conn)"
            }
            Kind::RotateLog => "the access log renamed, then SIGUSR1 (reopen)",
            Kind::Kill => "a server killed with `kill -9`, started again 4 s later",
            Kind::Upgrade => "a binary upgrade (SIGUSR2)",
            Kind::Maint => "`maint` on a server, `ready` 3 s later",
            Kind::KillAll => "all three servers killed with `kill -9`, started again 4 s later",
        }
    }

    /// Whether the event acts on one server (the next one in turn).
    fn takes_a_server(self) -> bool {
        matches!(
            self,
            Kind::GracefulRestart | Kind::Drain | Kind::Kill | Kind::Maint
        )
    }

    /// The steps of one event on `server`, as (delay after the event's start, action).
    fn steps(self, server: usize) -> Vec<(Duration, Action)> {
        match self {
            Kind::GracefulRestart => vec![
                (Duration::ZERO, Action::StopGracefully(server)),
                (RESTORE_AFTER, Action::Start(server)),
            ],
            Kind::Drain => vec![
                (Duration::ZERO, Action::SetState(server, ServerState::Drain)),
                (RESTORE_AFTER, Action::SetState(server, ServerState::Ready)),
            ],
            Kind::Maint => vec![
                (Duration::ZERO, Action::SetState(server, ServerState::Maint)),
                (RESTORE_AFTER, Action::SetState(server, ServerState::Ready)),
            ],
            Kind::Kill => vec![
                (Duration::ZERO, Action::Kill(server)),
                (DEAD_FOR, Action::Start(server)),
            ],
            Kind::KillAll => vec![
                (Duration::ZERO, Action::KillAll),
                (DEAD_FOR, Action::StartAll),
            ],
            Kind::Reload => vec![(Duration::ZERO, Action::Reload)],
            Kind::RotateLog => vec![(Duration::ZERO, Action::RotateLog)],
            Kind::Upgrade => vec![(Duration::ZERO, Action::Upgrade)],
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One thing done to the servers or the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    StopGracefully(usize),
    Kill(usize),
    Start(usize),
    KillAll,
    StartAll,
    SetState(usize, ServerState),
    Reload,
    RotateLog,
    Upgrade,
}

impl Action {
    /// What was done, with the server's name: "s2: kill -9".
    pub fn describe(self, servers: &[String]) -> String {
        let name = |i: usize| servers.get(i).map_or("?", String::as_str).to_string();
        match self {
            Action::StopGracefully(i) => format!("{}: nginx QUIT (graceful stop)", name(i)),
            Action::Kill(i) => format!("{}: kill -9", name(i)),
            Action::Start(i) => format!("{}: started again", name(i)),
            Action::KillAll => "every server: kill -9".to_string(),
            Action::StartAll => "every server: started again".to_string(),
            Action::SetState(i, state) => format!("{}: {state}", name(i)),
            Action::Reload => "reload, balance changed".to_string(),
            Action::RotateLog => "access log rotated (rename, USR1)".to_string(),
            Action::Upgrade => "binary upgrade (USR2)".to_string(),
        }
    }
}

/// A step of the schedule: an action at a time after the load began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    /// The event this step belongs to (its first step starts it).
    pub kind: Kind,
    pub action: Action,
}

/// The steps of a run of `seconds` with an event every `every` seconds from `every` on, `kinds`
/// in turn, each event that acts on a server taking the next of `servers`. An event starts only
/// before the end and when its last step still falls within the run, so that the run ends with
/// every server back.
/// Sorted by time; steps at the same time keep the order they were made in.
pub fn schedule(kinds: &[Kind], seconds: u32, every: u32, servers: usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let end = Duration::from_secs(u64::from(seconds));
    let every = Duration::from_secs(u64::from(every.max(1)));
    let mut next_server = 0;
    let mut at = every;
    for kind in kinds.iter().cycle() {
        let event = kind.steps(next_server % servers.max(1));
        let last = event
            .iter()
            .map(|(delay, _)| *delay)
            .max()
            .unwrap_or_default();
        if at >= end || at + last > end {
            break;
        }
        if kind.takes_a_server() {
            next_server += 1;
        }
        steps.extend(event.into_iter().map(|(delay, action)| Step {
            at: at + delay,
            kind: *kind,
            action,
        }));
        at += every;
    }
    // A stable sort: an event's follow-up that falls at the same time as the next event runs first.
    steps.sort_by_key(|s| s.at);
    steps
}

/// What one step did.
#[derive(Debug, Clone)]
pub struct Done {
    pub step: Step,
    /// When it started, after the load began (later than planned if an earlier step ran long).
    pub started: Duration,
    pub took: Duration,
    pub what: String,
    /// What it saw ("pid 4100 → 4187", "exited (exit code 0)"), or why it failed.
    pub note: String,
    pub failed: bool,
}

/// Runs `steps` at their times after `began`, each against `servers` and `proxy`, and returns
/// what each did. A step that fails is recorded and the run goes on: the failure is a finding.
pub fn run(
    steps: &[Step],
    began: Instant,
    servers: &mut Servers,
    proxy: &mut Proxy,
    mut progress: impl FnMut(&Done),
) -> Vec<Done> {
    let names = servers.names();
    let mut done = Vec::with_capacity(steps.len());
    for step in steps {
        let due = began + step.at;
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
        let started = Instant::now();
        let outcome = act(step.action, servers, proxy);
        let (note, failed) = match outcome {
            Ok(note) => (note, false),
            Err(e) => (format!("{e:#}"), true),
        };
        let record = Done {
            step: *step,
            started: started - began,
            took: started.elapsed(),
            what: step.action.describe(&names),
            note,
            failed,
        };
        progress(&record);
        done.push(record);
    }
    done
}

fn act(action: Action, servers: &mut Servers, proxy: &mut Proxy) -> anyhow::Result<String> {
    match action {
        Action::StopGracefully(i) => servers.stop_gracefully(i),
        Action::Kill(i) => servers.kill(i),
        Action::Start(i) => servers.start_again(i),
        Action::KillAll => {
            let notes: anyhow::Result<Vec<String>> =
                (0..servers.len()).map(|i| servers.kill(i)).collect();
            Ok(notes?.join("; "))
        }
        Action::StartAll => {
            let notes: anyhow::Result<Vec<String>> =
                (0..servers.len()).map(|i| servers.start_again(i)).collect();
            Ok(notes?.join("; "))
        }
        Action::SetState(i, state) => proxy.set_state(&servers.names()[i], state),
        Action::Reload => proxy.reload_with_other_balance(),
        Action::RotateLog => proxy.rotate_log(),
        Action::Upgrade => proxy.upgrade(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip() {
        for kind in Kind::all() {
            assert_eq!(Kind::from_label(kind.label()), Some(kind));
        }
        assert_eq!(Kind::all().count(), 8);
        assert_eq!(Kind::from_label("meteor"), None);
    }

    #[test]
    fn the_short_soak_has_every_kind_and_ends_with_every_server_back() {
        let steps = schedule(&Kind::SOAK, 27, 3, 3);
        for kind in Kind::SOAK {
            assert!(steps.iter().any(|s| s.kind == kind), "{kind} missing");
        }
        assert!(steps.iter().all(|s| s.at <= Duration::from_secs(27)));
        // Nothing starts at the very end: 24 s is the last event, s2's graceful restart.
        assert_eq!(steps.last().unwrap().at, Duration::from_secs(27));
        assert_eq!(steps.last().unwrap().action, Action::Start(1));
        // Every stop has its start, every drain or maint its ready.
        let stops = steps
            .iter()
            .filter(|s| matches!(s.action, Action::StopGracefully(_) | Action::Kill(_)))
            .count();
        let starts = steps
            .iter()
            .filter(|s| matches!(s.action, Action::Start(_)))
            .count();
        assert_eq!(stops, starts);
        // The first events, and the servers they take in turn.
        let firsts: Vec<(u64, Action)> = steps
            .iter()
            .map(|s| (s.at.as_secs(), s.action))
            .take(4)
            .collect();
        assert_eq!(
            firsts,
            vec![
                (3, Action::StopGracefully(0)),
                (6, Action::Start(0)),
                (6, Action::SetState(1, ServerState::Drain)),
                (9, Action::SetState(1, ServerState::Ready)),
            ]
        );
        let kill = steps.iter().find(|s| s.kind == Kind::Kill).unwrap();
        assert_eq!((kill.at.as_secs(), kill.action), (15, Action::Kill(2)));
    }

    #[test]
    fn the_full_soak_has_each_kind_four_or_five_times() {
        let steps = schedule(&Kind::SOAK, 240, 7, 3);
        for kind in Kind::SOAK {
            let events = steps
                .iter()
                .filter(|s| s.kind == kind && s.at.as_secs() % 7 == 0)
                .count();
            assert!((4..=5).contains(&events), "{kind}: {events}");
        }
    }

    #[test]
    fn an_event_whose_restore_would_fall_after_the_end_is_not_started() {
        let steps = schedule(&[Kind::Kill], 10, 4, 3);
        // 4 s: kill, 8 s: start; 8 s: a kill whose start (12 s) falls after 10 s is left out.
        assert_eq!(steps.len(), 2);
        // 5 s: every server killed, 9 s: all started; the next (10 s) would end after 12 s.
        let steps = schedule(&[Kind::KillAll], 12, 5, 3);
        assert_eq!(
            steps.iter().map(|s| s.action).collect::<Vec<_>>(),
            vec![Action::KillAll, Action::StartAll]
        );
    }
}
