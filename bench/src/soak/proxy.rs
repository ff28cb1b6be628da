//! The proxy under test, herdsman or HAProxy, behind one set of verbs the chaos uses: set a
//! server's state, reload with the other balance algorithm, rotate the access log, upgrade the
//! binary, stop. What both configurations share (where they listen, the servers, the idle
//! timeouts) is `plan::Plan`; each writes its own configuration from it.

use std::path::PathBuf;

use super::haproxy::Haproxy;
use super::herdsman::Herdsman;
use super::plan::ServerState;

/// Which proxy a soak runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Herdsman,
    Haproxy,
}

impl Which {
    pub fn label(self) -> &'static str {
        match self {
            Which::Herdsman => "herdsman",
            Which::Haproxy => "haproxy",
        }
    }
}

/// The proxy under test.
pub enum Proxy {
    Herdsman(Herdsman),
    Haproxy(Haproxy),
}

impl Proxy {
    pub fn port(&self) -> u16 {
        match self {
            Proxy::Herdsman(p) => p.plan.port,
            Proxy::Haproxy(p) => p.plan.port,
        }
    }

    /// The process group every process of the proxy is in, whatever its parent: the one started
    /// (herdsman's first process, HAProxy's master) leads it.
    pub fn group(&self) -> u32 {
        match self {
            Proxy::Herdsman(p) => p.group(),
            Proxy::Haproxy(p) => p.group(),
        }
    }

    /// The configuration as first written, for the results file.
    pub fn config(&self) -> String {
        match self {
            Proxy::Herdsman(p) => p.first_config.clone(),
            Proxy::Haproxy(p) => p.first_config.clone(),
        }
    }

    /// herdsman's admin API port; HAProxy has none that this benchmark reads.
    pub fn admin_port(&self) -> Option<u16> {
        match self {
            Proxy::Herdsman(p) => Some(p.plan.admin_port),
            Proxy::Haproxy(_) => None,
        }
    }

    pub fn set_state(&mut self, server: &str, state: ServerState) -> anyhow::Result<String> {
        match self {
            Proxy::Herdsman(p) => p.set_state(server, state),
            Proxy::Haproxy(p) => p.set_state(server, state),
        }
    }

    pub fn reload_with_other_balance(&mut self) -> anyhow::Result<String> {
        match self {
            Proxy::Herdsman(p) => p.reload_with_other_balance(),
            Proxy::Haproxy(p) => p.reload_with_other_balance(),
        }
    }

    pub fn rotate_log(&mut self) -> anyhow::Result<String> {
        match self {
            Proxy::Herdsman(p) => p.rotate_log(),
            Proxy::Haproxy(_) => Ok(
                "skipped: HAProxy writes no log file here (it logs to syslog; rotating is \
                 syslog's job)"
                    .to_string(),
            ),
        }
    }

    pub fn upgrade(&mut self) -> anyhow::Result<String> {
        match self {
            Proxy::Herdsman(p) => p.upgrade(),
            Proxy::Haproxy(p) => p.reload("binary upgrade"),
        }
    }

    /// Fails with the reason if the proxy has no process left.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        match self {
            Proxy::Herdsman(p) => p.check_alive(),
            Proxy::Haproxy(p) => p.check_alive(),
        }
    }

    /// Stops the proxy gracefully (herdsman: SIGTERM, so that every access log line is written;
    /// HAProxy: SIGUSR1, its soft stop) and waits until no process of its group is left.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        match self {
            Proxy::Herdsman(p) => p.stop(),
            Proxy::Haproxy(p) => p.stop(),
        }
    }

    /// The proxy's own log (stdout and stderr), with the lines that say something went wrong.
    pub fn log_path(&self) -> PathBuf {
        match self {
            Proxy::Herdsman(p) => p.plan.dir.join("herdsman.log"),
            Proxy::Haproxy(p) => p.plan.dir.join("haproxy.log"),
        }
    }
}
