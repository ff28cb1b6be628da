//! One worker count's pass of the main comparison: every target started with that count in front of
//! each server, a warm-up, then round after round, each connection count and each server, the
//! server alone and then every target in turn. A target that fails is recorded and stopped so it
//! cannot disturb the others; a server that fails ends the comparison.

use std::path::Path;

use anyhow::Context;

use super::measure::{measure, record, Case};
use super::report::{section_name, Cell, Session, SERVER_ALONE_LABEL};
use super::settings::Settings;
use super::{dir_name, main_run_seconds, start_target};
use crate::kit::markdown::worker_count;
use crate::kit::paired::turn_order;
use crate::kit::process::Supervised;
use crate::kit::progress::Progress;
use crate::kit::proxies::{Plan, Target};
use crate::kit::scratch::ScratchDir;
use crate::kit::servers::{Server, ServerKind};
use crate::kit::wrk::{self, Load};

/// A target in front of one server during one worker pass: its process while it runs; None once
/// it failed (to start, or later), its remaining turns then being skipped.
pub struct Running {
    target: Target,
    server: ServerKind,
    process: Option<Supervised>,
    port: u16,
}

impl Running {
    /// "in front of the nginx server, with 2 workers": where, for the reasons it stopped.
    fn context(&self, workers: u32) -> String {
        format!(
            "in front of the {}, with {}",
            self.server.written(),
            worker_count(workers)
        )
    }
}

/// Starts every target in front of every server for one worker pass and records its
/// configuration; one that cannot start is recorded as not run (for this worker count and server)
/// and keeps its place in the turns. `plan(workers, port, server_port)`.
pub fn start_targets(
    targets: &[Target],
    servers: &[Server],
    workers: u32,
    plan: impl Fn(u32, u16, u16) -> Plan,
    scratch: &ScratchDir,
    session: &mut Session,
) -> Vec<Running> {
    let mut running = Vec::new();
    for server in servers {
        for target in targets {
            let dir = scratch.path().join(format!(
                "{}-{}-{workers}w",
                dir_name(&target.label),
                server.kind
            ));
            let mut entry = Running {
                target: target.clone(),
                server: server.kind,
                process: None,
                port: 0,
            };
            match start_target(target, |port| plan(workers, port, server.port), &dir) {
                Ok((process, port, (file, text))) => {
                    let label = format!("{}, {}", target.label, section_name(workers, server.kind));
                    session.configs.push((label, file.to_string(), text));
                    entry.process = Some(process);
                    entry.port = port;
                }
                Err(e) => {
                    let reason = format!("{}: {e:#}", entry.context(workers));
                    session.not_run.push((target.label.clone(), reason));
                }
            }
            running.push(entry);
        }
    }
    running
}

/// One worker count's turn: the servers and the targets started for it.
pub struct Pass<'a> {
    pub wrk: &'a Path,
    pub settings: &'a Settings,
    pub workers: u32,
    pub servers: &'a mut [Server],
}

impl Pass<'_> {
    /// Unrecorded load, so first-run effects (page faults, cold caches, pool growth) stay out of
    /// round 1.
    pub fn warm_up(&self, running: &mut [Running], session: &mut Session) {
        if self.settings.warmup == 0 {
            return;
        }
        let load = Load {
            connections: self.settings.connections[0],
            seconds: self.settings.warmup,
        };
        for target in running.iter_mut().filter(|t| t.process.is_some()) {
            if let Err(e) = wrk::run(self.wrk, target.port, load) {
                let reason = format!(
                    "{}: failed the warm-up: {e:#}",
                    target.context(self.workers)
                );
                session.not_run.push((target.target.label.clone(), reason));
                target.process = None;
            }
        }
    }

    /// Round after round, each connection count and each server: the server alone, then every
    /// target in front of it in turn (the order rotating by one each round, so no target always
    /// runs first or right after another).
    pub fn run_rounds(
        &mut self,
        running: &mut [Running],
        session: &mut Session,
        progress: &mut Progress,
    ) -> anyhow::Result<()> {
        let planned = main_run_seconds(self.settings);
        for round in 1..=self.settings.rounds {
            for &connections in &self.settings.connections {
                let load = Load {
                    connections,
                    seconds: self.settings.seconds,
                };
                for server in self.servers.iter_mut() {
                    let case = Case {
                        round,
                        cell: Cell {
                            server: server.kind,
                            workers: self.workers,
                            connections,
                        },
                    };
                    let alone = measure(
                        self.wrk,
                        &mut server.process,
                        server.port,
                        load,
                        server.port,
                    )
                    .with_context(|| format!("measuring the {} alone", server.kind.written()))?;
                    record(
                        session,
                        case,
                        SERVER_ALONE_LABEL,
                        alone,
                        &progress.step(planned),
                    );
                    let behind: Vec<usize> = (0..running.len())
                        .filter(|&i| running[i].server == server.kind)
                        .collect();
                    for turn in turn_order(behind.len(), round) {
                        let target = &mut running[behind[turn]];
                        let (wrk, settings) = (self.wrk, self.settings);
                        take_turn(
                            wrk,
                            settings,
                            target,
                            (case, server.port),
                            session,
                            progress,
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

/// One target's run of `case` in front of the server on `server_port`, or its skipped turn.
fn take_turn(
    wrk: &Path,
    settings: &Settings,
    target: &mut Running,
    (case, server_port): (Case, u16),
    session: &mut Session,
    progress: &mut Progress,
) {
    let planned = main_run_seconds(settings);
    let Some(process) = target.process.as_mut() else {
        progress.skip(planned);
        return;
    };
    let label = target.target.label.clone();
    let load = Load {
        connections: case.cell.connections,
        seconds: settings.seconds,
    };
    match measure(wrk, process, target.port, load, server_port) {
        Ok(m) => record(session, case, &label, m, &progress.step(planned)),
        Err(e) => {
            progress.skip(planned);
            let reason = format!(
                "stopped {}, round {}, c={}: {e:#}",
                target.context(case.cell.workers),
                case.round,
                case.cell.connections
            );
            eprintln!("{label}: {reason}");
            session.not_run.push((label, reason));
            target.process = None;
        }
    }
}
