//! One herdsman in a given intake mode in front of the fast backend, with its admin listener: the
//! configuration, the start, and the stop (both processes are stopped when the stack is dropped).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;

use crate::kit::backend;
use crate::kit::process::{free_port, Supervised};

/// herdsman's `intake` modes, in the order the benchmarks run them by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Balanced,
    Reuseport,
    Exclusive,
    Shared,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Balanced => "balanced",
            Mode::Reuseport => "reuseport",
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// Runs `each` once per mode, in order, each in its own directory under `scratch`. A mode that
/// fails is reported on stderr and returned with why, and the modes after it still run.
pub fn each_mode(
    modes: &[Mode],
    scratch: &Path,
    mut each: impl FnMut(Mode, &Path) -> anyhow::Result<()>,
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

/// A running backend and herdsman.
pub struct Stack {
    /// Where clients connect.
    pub port: u16,
    /// Where `/api/workers` answers.
    pub admin_port: u16,
    /// Declared before the backend so that herdsman stops first.
    pub herdsman: Supervised,
    pub backend: Supervised,
}

/// The herdsman configuration for one run. `backlog` is 4096 (the machine's somaxconn), and the
/// client idle timeout is long enough that no long-lived connection is closed by herdsman mid-run.
pub fn config(mode: Mode, workers: u32, port: u16, admin_port: u16, backend_port: u16) -> String {
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
         [limits]\n\
         max_idle_per_server = 256\n\
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

impl Stack {
    /// Starts the backend (this program's `backend` subcommand) and `herdsman` in `mode`, and waits
    /// until both answer; logs and the config go into `dir`.
    pub fn start(herdsman: &Path, mode: Mode, workers: u32, dir: &Path) -> anyhow::Result<Stack> {
        let backend_port = free_port()?;
        let backend = backend::start(backend_port, dir)?;

        let port = free_port()?;
        let admin_port = free_port()?;
        let file = dir.join(format!("herdsman-{}.toml", mode.label()));
        std::fs::write(&file, config(mode, workers, port, admin_port, backend_port))
            .with_context(|| format!("writing {}", file.display()))?;
        let mut command = Command::new(herdsman);
        command.arg("run").arg("-c").arg(&file);
        let log = dir.join(format!("herdsman-{}.log", mode.label()));
        let mut process =
            Supervised::spawn(&format!("herdsman ({})", mode.label()), command, &log)?;
        process.wait_until_serving(port, Duration::from_secs(15))?;
        Ok(Stack {
            port,
            admin_port,
            herdsman: process,
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
        let text = config(Mode::Exclusive, 8, 1001, 1002, 1003);
        assert!(text.contains("workers = 8\n"));
        assert!(text.contains("intake = \"exclusive\"\n"));
        assert!(text.contains("bind = \"127.0.0.1:1001\""));
        assert!(text.contains("bind = \"127.0.0.1:1002\""));
        assert!(text.contains("addr = \"127.0.0.1:1003\""));
    }
}
