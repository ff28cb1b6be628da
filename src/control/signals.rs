//! Signals: SIGTERM and SIGINT begin a graceful stop; SIGHUP reloads the config file; SIGUSR1
//! reopens the access logs (after a rotation); SIGUSR2 upgrades the binary (see `upgrade`), and
//! the old process then stops gracefully. systemd hears of stops and reloads (see `notify`), not
//! of the old process's stop after an upgrade.

use std::io;

use super::notify;
use super::registry::Registry;

/// Blocks the calling thread until SIGTERM or SIGINT arrives, or a SIGUSR2 for which `upgrade`
/// started a successor that serves; returns the signal's name. Meanwhile each SIGHUP reloads
/// `registry`'s config file, and each SIGUSR1 calls `reopen_logs`. A reload or an upgrade that
/// fails is logged with its reasons, and this process goes on serving as it was.
pub fn wait_for_stop(
    registry: &Registry,
    upgrade: &dyn Fn() -> bool,
    reopen_logs: &dyn Fn(),
) -> io::Result<&'static str> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut terminate = signal(SignalKind::terminate())?;
            let mut interrupt = signal(SignalKind::interrupt())?;
            let mut hangup = signal(SignalKind::hangup())?;
            let mut user1 = signal(SignalKind::user_defined1())?;
            let mut user2 = signal(SignalKind::user_defined2())?;
            loop {
                tokio::select! {
                    _ = terminate.recv() => {
                        notify::stopping();
                        return Ok("SIGTERM");
                    }
                    _ = interrupt.recv() => {
                        notify::stopping();
                        return Ok("SIGINT");
                    }
                    _ = user1.recv() => {
                        tracing::info!("SIGUSR1: reopening the access logs");
                        reopen_logs();
                    }
                    _ = user2.recv() => {
                        tracing::info!("SIGUSR2: upgrading the binary");
                        if upgrade() {
                            return Ok("SIGUSR2");
                        }
                    }
                    _ = hangup.recv() => {
                        tracing::info!("SIGHUP: reloading the config");
                        notify::reloading();
                        match registry.reload() {
                            Ok(_) => notify::ready("serving; config reloaded"),
                            Err(error) => {
                                tracing::error!("reload refused: {error}");
                                notify::ready(&format!("serving; reload refused: {error}"));
                            }
                        }
                    }
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (registry, upgrade, reopen_logs);
            tokio::signal::ctrl_c().await?;
            Ok("Ctrl-C")
        }
    })
}
