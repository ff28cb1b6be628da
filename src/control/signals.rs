//! Signals: SIGTERM and SIGINT begin a graceful stop; SIGHUP reloads the config file; SIGUSR1
//! reopens the access logs (after a rotation); SIGUSR2 upgrades the binary (see `upgrade`), and
//! the old process then stops gracefully. systemd hears of stops and reloads (see `notify`), not
//! of the old process's stop after an upgrade.

use std::io;

use super::notify;
use super::registry::Registry;

/// The process's signal handlers, installed and waiting to be served by [`Signals::wait_for_stop`].
/// Until they are installed, SIGHUP, SIGUSR1 and SIGUSR2 would end the process (their default
/// action): install them before telling anyone (systemd, an old process handing over) that this
/// one serves. A signal that arrives between the two is kept and served once the wait begins.
pub struct Signals {
    runtime: tokio::runtime::Runtime,
    #[cfg(unix)]
    streams: UnixSignals,
}

#[cfg(unix)]
struct UnixSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    user1: tokio::signal::unix::Signal,
    user2: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> io::Result<Signals> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        #[cfg(unix)]
        let streams = {
            use tokio::signal::unix::{signal, SignalKind};
            let _inside = runtime.enter();
            UnixSignals {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
                hangup: signal(SignalKind::hangup())?,
                user1: signal(SignalKind::user_defined1())?,
                user2: signal(SignalKind::user_defined2())?,
            }
        };
        Ok(Signals {
            runtime,
            #[cfg(unix)]
            streams,
        })
    }

    /// Blocks the calling thread until SIGTERM or SIGINT arrives, or a SIGUSR2 for which
    /// `upgrade` started a successor that serves; returns the signal's name. Meanwhile each
    /// SIGHUP reloads `registry`'s config file, and each SIGUSR1 calls `reopen_logs`. A reload or
    /// an upgrade that fails is logged with its reasons, and this process goes on serving as it
    /// was.
    pub fn wait_for_stop(
        self,
        registry: &Registry,
        upgrade: &dyn Fn() -> bool,
        reopen_logs: &dyn Fn(),
    ) -> io::Result<&'static str> {
        #[cfg(unix)]
        let Signals {
            runtime,
            streams: mut signal,
        } = self;
        #[cfg(not(unix))]
        let Signals { runtime } = self;
        runtime.block_on(async {
            #[cfg(unix)]
            loop {
                tokio::select! {
                    _ = signal.terminate.recv() => {
                        notify::stopping();
                        return Ok("SIGTERM");
                    }
                    _ = signal.interrupt.recv() => {
                        notify::stopping();
                        return Ok("SIGINT");
                    }
                    _ = signal.user1.recv() => {
                        tracing::info!("SIGUSR1: reopening the access logs");
                        reopen_logs();
                    }
                    _ = signal.user2.recv() => {
                        tracing::info!("SIGUSR2: upgrading the binary");
                        if upgrade() {
                            return Ok("SIGUSR2");
                        }
                    }
                    _ = signal.hangup.recv() => {
                        tracing::info!("SIGHUP: reloading the config");
                        if let Err(error) = notify::announce_reload(|| registry.reload()) {
                            tracing::error!("reload refused: {error}");
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
}
