//! Signals: SIGTERM and SIGINT begin a graceful stop; SIGHUP reloads the config file; SIGUSR2
//! upgrades the binary (see `upgrade`), and the old process then stops gracefully.

use std::io;

use super::registry::Registry;

/// Blocks the calling thread until SIGTERM or SIGINT arrives, or a SIGUSR2 for which `upgrade`
/// started a successor that serves; returns the signal's name. Meanwhile each SIGHUP reloads
/// `registry`'s config file. A reload or an upgrade that fails is logged with its reasons, and
/// this process goes on serving as it was.
pub fn wait_for_stop(registry: &Registry, upgrade: &dyn Fn() -> bool) -> io::Result<&'static str> {
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
            let mut user2 = signal(SignalKind::user_defined2())?;
            loop {
                tokio::select! {
                    _ = terminate.recv() => return Ok("SIGTERM"),
                    _ = interrupt.recv() => return Ok("SIGINT"),
                    _ = user2.recv() => {
                        tracing::info!("SIGUSR2: upgrading the binary");
                        if upgrade() {
                            return Ok("SIGUSR2");
                        }
                    }
                    _ = hangup.recv() => {
                        tracing::info!("SIGHUP: reloading the config");
                        if let Err(error) = registry.reload() {
                            tracing::error!("reload refused: {error}");
                        }
                    }
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (registry, upgrade);
            tokio::signal::ctrl_c().await?;
            Ok("Ctrl-C")
        }
    })
}
