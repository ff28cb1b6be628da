//! Signals that stop herdsman: SIGTERM and SIGINT begin a graceful stop.

use std::io;

/// Blocks the calling thread until SIGTERM or SIGINT arrives; returns the signal's name.
pub fn wait_for_stop() -> io::Result<&'static str> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut terminate = signal(SignalKind::terminate())?;
            let mut interrupt = signal(SignalKind::interrupt())?;
            Ok(tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            })
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await?;
            Ok("Ctrl-C")
        }
    })
}
