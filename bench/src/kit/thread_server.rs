//! A server on a thread of this program: its own current-thread runtime, a listener on a free
//! port of 127.0.0.1 with the kit's long queue, and the accept loop that hands each connection to
//! the server's function; stopped when dropped. `cache`'s origin and `gray`'s three servers are
//! such servers; the `backend` subcommand runs the same accept loop in a process of its own.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::kit::backend;

/// A server at work on 127.0.0.1:`port`; dropping it stops it.
pub struct ThreadServer {
    pub port: u16,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ThreadServer {
    /// Binds a free port on 127.0.0.1 (with `backend::BACKLOG`: a proxy may open hundreds of
    /// connections at once) and serves every connection with `serve` on thread `name`.
    pub fn start<S, F>(name: &str, serve: S) -> anyhow::Result<ThreadServer>
    where
        S: Fn(TcpStream) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        let (bound, port) = mpsc::channel();
        let thread = thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                let runtime = match runtime {
                    Ok(runtime) => runtime,
                    Err(e) => return drop(bound.send(Err(e))),
                };
                runtime.block_on(async move {
                    let listener = match backend::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))) {
                        Ok(listener) => listener,
                        Err(e) => return drop(bound.send(Err(e))),
                    };
                    let _ = bound.send(listener.local_addr().map(|a| a.port()));
                    tokio::select! {
                        () = accept_loop(listener, serve) => {}
                        _ = stopped => {}
                    }
                });
            })
            .with_context(|| format!("starting the {name} thread"))?;
        let port = port
            .recv()
            .with_context(|| format!("the {name} thread ended"))?
            .with_context(|| format!("binding the {name} port"))?;
        Ok(ThreadServer {
            port,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for ThreadServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts connections on `listener` for ever, each served by a task of its own running
/// `serve`.
pub async fn accept_loop<S, F>(listener: TcpListener, serve: S)
where
    S: Fn(TcpStream) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(stream));
            }
            // Out of file descriptors or a connection reset before accept: not fatal; pause so
            // a full descriptor table does not turn into a busy loop.
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
