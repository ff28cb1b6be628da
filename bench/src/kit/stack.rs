//! herdsman in front of the fast backend, started together and stopped together (when the stack is
//! dropped): with any configuration written for its ports, or in a given intake mode with its admin
//! listener; the two free ports a herdsman listens on; and running something once per intake mode.

use std::path::Path;

use super::backend;
use super::process::{free_port, Supervised};
use super::proxies::{self, IntakeMode};

/// Runs `each` once per mode, in order, each in its own directory under `scratch`. A mode that
/// fails is reported on stderr and returned with why, and the modes after it still run.
pub fn each_mode(
    modes: &[IntakeMode],
    scratch: &Path,
    mut each: impl FnMut(IntakeMode, &Path) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut failures = Vec::new();
    for &mode in modes {
        let dir = scratch.join(mode.label());
        std::fs::create_dir_all(&dir)?;
        if let Err(e) = each(mode, &dir) {
            eprintln!("{}: FAILED: {e:#}", mode.label());
            failures.push((mode.label().to_string(), format!("{e:#}")));
        }
    }
    Ok(failures)
}

/// The herdsman configuration for one run. `backlog` is 4096 (the machine's somaxconn), the
/// client idle timeout is long enough that no long-lived connection is closed by herdsman mid-run,
/// and idle server connections are kept as herdsman's default keeps them.
pub fn config(
    mode: IntakeMode,
    workers: u32,
    port: u16,
    admin_port: u16,
    backend_port: u16,
) -> String {
    format!(
        "workers = {workers}\n\
         intake = \"{mode}\"\n\
         \n\
         [[listener]]\n\
         name = \"bench\"\n\
         bind = \"127.0.0.1:{port}\"\n\
         backlog = 4096\n\
         pool = \"backend\"\n\
         \n\
         [timeouts]\n\
         client_idle = \"120s\"\n\
         \n\
         [admin]\n\
         bind = \"127.0.0.1:{admin_port}\"\n\
         \n\
         [[pool]]\n\
         name = \"backend\"\n\
         servers = [{{ name = \"b1\", addr = \"127.0.0.1:{backend_port}\" }}]\n",
        mode = mode.label()
    )
}

/// Two different free ports on 127.0.0.1: herdsman's listener's and its admin API's.
pub fn listener_and_admin_ports() -> anyhow::Result<(u16, u16)> {
    let port = free_port()?;
    let mut admin_port = free_port()?;
    while admin_port == port {
        admin_port = free_port()?;
    }
    Ok((port, admin_port))
}

/// A running backend and herdsman.
pub struct Stack {
    /// Where clients connect, on 127.0.0.1.
    pub port: u16,
    /// Where herdsman's admin API answers when its configuration has one (`/api/workers`).
    pub admin_port: u16,
    /// herdsman's configuration, as written.
    pub config: String,
    /// Declared before the backend so that herdsman stops first.
    pub herdsman: Supervised,
    pub backend: Supervised,
}

/// The ports a stack's configuration is written for, all on 127.0.0.1 and all different.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub port: u16,
    pub admin_port: u16,
    pub backend_port: u16,
}

impl Stack {
    /// Starts the backend (this program's `backend` subcommand) and herdsman in `mode`, with
    /// `config`'s configuration and an admin listener.
    pub fn start(
        program: &Path,
        mode: IntakeMode,
        workers: u32,
        dir: &Path,
    ) -> anyhow::Result<Stack> {
        Stack::start_with(program, dir, |p| {
            config(mode, workers, p.port, p.admin_port, p.backend_port)
        })
    }

    /// Starts the backend and `program` with the configuration `config` writes for the ports
    /// chosen, and waits until both answer; the config and logs go into `dir`.
    pub fn start_with(
        program: &Path,
        dir: &Path,
        config: impl FnOnce(Ports) -> String,
    ) -> anyhow::Result<Stack> {
        let backend_port = free_port()?;
        let backend = backend::start(backend_port, dir)?;
        let (port, admin_port) = listener_and_admin_ports()?;
        let config = config(Ports {
            port,
            admin_port,
            backend_port,
        });
        let herdsman = proxies::start_herdsman(program, &config, port, dir)?;
        eprintln!(
            "backend on 127.0.0.1:{backend_port} (pid {}), herdsman on 127.0.0.1:{port} (pid {})",
            backend.pid(),
            herdsman.pid()
        );
        Ok(Stack {
            port,
            admin_port,
            config,
            herdsman,
            backend,
        })
    }

    /// Fails with the reason if either process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.herdsman.check_running()?;
        self.backend.check_running()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_the_mode_and_every_port() {
        let text = config(IntakeMode::Exclusive, 8, 1001, 1002, 1003);
        assert!(text.contains("workers = 8\n"));
        assert!(text.contains("intake = \"exclusive\"\n"));
        assert!(text.contains("bind = \"127.0.0.1:1001\""));
        assert!(text.contains("bind = \"127.0.0.1:1002\""));
        assert!(text.contains("addr = \"127.0.0.1:1003\""));
    }
}
