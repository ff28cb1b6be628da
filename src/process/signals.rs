//! Signals: SIGTERM and SIGINT begin a graceful stop; SIGHUP reloads the config file; SIGUSR1
//! reopens the access logs (after a rotation); SIGUSR2 upgrades the binary (see `upgrade`), and
//! the old process then drains (see `drain`), when a SIGTERM or SIGINT makes it hurry. systemd
//! hears of stops and reloads (see `notify`), not of the old process's drain after an upgrade.

use std::io;

use super::notify;
use super::upgrade::Successor;
use crate::upstream::registry::Registry;

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
    /// `upgrade` started a successor that serves. Meanwhile each SIGHUP reloads `registry`'s
    /// config file, and each SIGUSR1 calls `reopen_logs`. A reload or an upgrade that fails is
    /// logged with its reasons, and this process goes on serving as it was.
    pub fn wait_for_stop(
        &mut self,
        registry: &Registry,
        upgrade: &dyn Fn() -> Option<Successor>,
        reopen_logs: &dyn Fn(),
    ) -> io::Result<Ending> {
        #[cfg(unix)]
        let Signals {
            runtime,
            streams: signal,
        } = self;
        #[cfg(not(unix))]
        let Signals { runtime } = self;
        runtime.block_on(async {
            #[cfg(unix)]
            loop {
                tokio::select! {
                    _ = signal.terminate.recv() => {
                        notify::stopping();
                        return Ok(Ending::Stop("SIGTERM"));
                    }
                    _ = signal.interrupt.recv() => {
                        notify::stopping();
                        return Ok(Ending::Stop("SIGINT"));
                    }
                    _ = signal.user1.recv() => {
                        tracing::info!("SIGUSR1: reopening the access logs");
                        reopen_logs();
                    }
                    _ = signal.user2.recv() => {
                        tracing::info!("SIGUSR2: upgrading the binary");
                        if let Some(successor) = upgrade() {
                            return Ok(Ending::HandedOver(successor));
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
                Ok(Ending::Stop("Ctrl-C"))
            }
        })
    }

    /// Runs `drain` to its end (see `drain::Drain::run`), serving the signals that still mean
    /// something to a process that stops: SIGTERM and SIGINT call `hurry` (a stop after an
    /// upgrade then ends within `shutdown_grace`), SIGUSR1 reopens the access logs (the
    /// connections finishing still log their requests). SIGHUP and SIGUSR2 are only logged: a
    /// stopping process has nothing to reload or upgrade. systemd is told nothing: after an
    /// upgrade this is not the service's main process, and a stop has said STOPPING=1 already.
    pub fn serve_while_draining(
        &mut self,
        drain: impl std::future::Future<Output = ()>,
        hurry: &dyn Fn(&'static str),
        reopen_logs: &dyn Fn(),
    ) {
        #[cfg(unix)]
        let Signals {
            runtime,
            streams: signal,
        } = self;
        #[cfg(not(unix))]
        let Signals { runtime } = self;
        runtime.block_on(async {
            tokio::pin!(drain);
            #[cfg(unix)]
            loop {
                tokio::select! {
                    () = &mut drain => return,
                    _ = signal.terminate.recv() => hurry("SIGTERM"),
                    _ = signal.interrupt.recv() => hurry("SIGINT"),
                    _ = signal.user1.recv() => {
                        tracing::info!("SIGUSR1: reopening the access logs");
                        reopen_logs();
                    }
                    _ = signal.user2.recv() => {
                        tracing::warn!("SIGUSR2 ignored: this process is stopping");
                    }
                    _ = signal.hangup.recv() => {
                        tracing::warn!("SIGHUP ignored: this process is stopping");
                    }
                }
            }
            #[cfg(not(unix))]
            {
                let _ = (hurry, reopen_logs);
                drain.await;
            }
        })
    }
}

/// Why [`Signals::wait_for_stop`] returned.
#[derive(Debug)]
pub enum Ending {
    /// A graceful stop, by this signal.
    Stop(&'static str),
    /// A binary upgrade: this successor serves now, and this process drains.
    HandedOver(Successor),
}
