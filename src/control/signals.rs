//! Signals: SIGTERM and SIGINT begin a graceful stop; SIGHUP reloads the config file.

use std::io;

use super::registry::Registry;

/// Blocks the calling thread until SIGTERM or SIGINT arrives, reloading `registry`'s config file
/// at each SIGHUP meanwhile; returns the stopping signal's name. A reload that fails is logged
/// with its reasons, and the running config stays.
pub fn wait_for_stop(registry: &Registry) -> io::Result<&'static str> {
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
            loop {
                tokio::select! {
                    _ = terminate.recv() => return Ok("SIGTERM"),
                    _ = interrupt.recv() => return Ok("SIGINT"),
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
            let _ = registry;
            tokio::signal::ctrl_c().await?;
            Ok("Ctrl-C")
        }
    })
}
