//! herdsman for `observability`: `compare`'s configuration (same workers, keep-alive to the
//! backend, timeouts) plus an `[admin]` listener on loopback, and for the conditions with one an
//! access log on the listener. A fresh herdsman per run, since the conditions differ in their
//! configuration; stopped gracefully at the end of its run (so that every buffered access log line
//! is written), and in any case when dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::condition::Condition;
use crate::kit::admin_api;
use crate::kit::process::Supervised;
use crate::kit::proxies::{self, Plan};
use crate::kit::stack::listener_and_admin_ports;

/// How long herdsman may take to stop after SIGTERM with no client connected: it closes its idle
/// connections and writes the access log's last buffers.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// The one listener's line that the access log keys follow (`proxies::herdsman_config`'s).
const LISTENER_HEAD: &str = "[[listener]]\nname = \"bench\"\n";

/// compare's herdsman configuration with an admin API on 127.0.0.1:`admin_port` and, when
/// `access_log` is given, that file in that format on the listener.
pub fn config(plan: Plan, admin_port: u16, access_log: Option<(&Path, &str)>) -> String {
    let mut text = proxies::herdsman_config(plan, None);
    if let Some((path, format)) = access_log {
        text = text.replacen(
            LISTENER_HEAD,
            &format!(
                "{LISTENER_HEAD}access_log = \"{}\"\naccess_log_format = \"{format}\"\n",
                path.display()
            ),
            1,
        );
    }
    // No token_env: without a token herdsman allows the admin API on loopback only, which is
    // where the scraper is.
    text.push_str(&format!("\n[admin]\nbind = \"127.0.0.1:{admin_port}\"\n"));
    text
}

/// One herdsman, started for one run.
pub struct Herdsman {
    /// Its listener's port on 127.0.0.1.
    pub port: u16,
    /// Its admin API's port on 127.0.0.1.
    pub admin_port: u16,
    /// Its configuration, as written.
    pub config: String,
    /// The access log file, for the conditions with one.
    pub access_log: Option<PathBuf>,
    process: Supervised,
}

impl Herdsman {
    /// Starts `program` with `workers` in front of the backend on `backend_port`, configured for
    /// `condition`, with its config, log and access log in `dir`; returns once both its listener
    /// and its admin API answer.
    pub fn start(
        program: &Path,
        workers: u32,
        backend_port: u16,
        condition: Condition,
        dir: &Path,
    ) -> anyhow::Result<Herdsman> {
        let (port, admin_port) = listener_and_admin_ports()?;
        let plan = Plan::herdsman_alone(workers, port, backend_port);
        let access_log = condition
            .access_log_format()
            .map(|format| (dir.join("access.log"), format));
        let config = config(
            plan,
            admin_port,
            access_log.as_ref().map(|(path, f)| (path.as_path(), *f)),
        );
        let mut process = proxies::start_herdsman(program, &config, port, dir)?;
        admin_api::wait_for_admin(&mut process, admin_port)?;
        Ok(Herdsman {
            port,
            admin_port,
            config,
            access_log: access_log.map(|(path, _)| path),
            process,
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Fails with the reason if herdsman has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.process.check_running()
    }

    /// SIGTERM, and waits until herdsman has exited with status 0: a graceful stop, after which
    /// every access log line it buffered is in the file.
    pub fn stop_gracefully(&mut self) -> anyhow::Result<()> {
        self.process.stop_gracefully(STOP_LIMIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: Plan = Plan::herdsman_alone(2, 4100, 4200);

    #[test]
    fn off_is_compare_s_configuration_with_an_admin_api() {
        let text = config(PLAN, 4300, None);
        let compare = proxies::herdsman_config(PLAN, None);
        assert_eq!(
            text,
            format!("{compare}\n[admin]\nbind = \"127.0.0.1:4300\"\n")
        );
        assert!(!text.contains("access_log"));
    }

    #[test]
    fn on_adds_the_access_log_to_the_listener_and_nothing_else() {
        let text = config(
            PLAN,
            4300,
            Some((Path::new("/tmp/x/access.log"), "combined")),
        );
        let listener = text.split(LISTENER_HEAD).nth(1).unwrap();
        let listener = listener.split("\n[").next().unwrap();
        assert!(
            listener
                .contains("access_log = \"/tmp/x/access.log\"\naccess_log_format = \"combined\"\n"),
            "{text}"
        );
        let without: String = text
            .lines()
            .filter(|l| !l.starts_with("access_log"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(without, config(PLAN, 4300, None));
    }
}
