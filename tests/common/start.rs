//! herdsman started in this process: a one-listener, one-pool config built by [`Setup`], or any
//! config text (from a file, so that a reload has one to read), run by [`Proxy`].

use std::fmt::Display;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use herdsman::upstream::registry::{ChangeError, Registry};

use super::binary::{run_binary_with, wait_listening, write_temp, ChildGuard};
use super::heads::Response;
use super::mock::free_port;
use super::raw::{get_request, get_request_to, Conn};

/// Builds a one-listener ("web"), one-pool ("app") config and starts herdsman with it.
pub struct Setup {
    workers: usize,
    grace: String,
    balance: String,
    servers: Vec<(String, SocketAddr, Option<u32>)>,
    timeouts: Vec<(String, String)>,
    limits: Vec<(String, String)>,
    buffering: Vec<(String, String)>,
    intake: Option<String>,
    admin: Option<String>,
    /// Lines added to the listener (each ending in a newline), its subtables (`[listener.tls]`)
    /// last.
    listener_lines: String,
}

impl Default for Setup {
    fn default() -> Self {
        Setup::new()
    }
}

impl Setup {
    pub fn new() -> Setup {
        Setup {
            workers: 2,
            grace: "5s".into(),
            balance: "round-robin".into(),
            servers: Vec::new(),
            timeouts: Vec::new(),
            limits: Vec::new(),
            buffering: Vec::new(),
            intake: None,
            admin: None,
            listener_lines: String::new(),
        }
    }

    /// Sets `intake = "mode"` (otherwise the default, balanced).
    pub fn intake(mut self, mode: &str) -> Setup {
        self.intake = Some(mode.into());
        self
    }

    /// Adds `h2c = true` to the listener: HTTP/2 with prior knowledge beside HTTP/1.1.
    pub fn h2c(self) -> Setup {
        self.listener("h2c = true\n")
    }

    /// Adds `lines` to the listener (after any added before): keys, then subtables such as
    /// `[listener.tls]`.
    pub fn listener(mut self, lines: &str) -> Setup {
        self.listener_lines.push_str(lines);
        if !lines.ends_with('\n') {
            self.listener_lines.push('\n');
        }
        self
    }

    /// Adds `[admin] bind = "127.0.0.1:0"`.
    pub fn admin(mut self) -> Setup {
        self.admin = Some("127.0.0.1:0".into());
        self
    }

    /// Adds `[admin] bind = "addr"`: for the binary, which cannot report where a port-0 bind
    /// went (see [`free_port`]).
    pub fn admin_at(mut self, addr: SocketAddr) -> Setup {
        self.admin = Some(addr.to_string());
        self
    }

    /// Adds a server without a weight (the default, 1).
    pub fn server(mut self, name: &str, addr: SocketAddr) -> Setup {
        self.servers.push((name.into(), addr, None));
        self
    }

    pub fn weighted(mut self, name: &str, addr: SocketAddr, weight: u32) -> Setup {
        self.servers.push((name.into(), addr, Some(weight)));
        self
    }

    pub fn balance(mut self, balance: &str) -> Setup {
        self.balance = balance.into();
        self
    }

    /// Sets `[timeouts] key = "value"`.
    pub fn timeout(mut self, key: &str, value: &str) -> Setup {
        self.timeouts.push((key.into(), format!("{value:?}")));
        self
    }

    /// Sets `[limits] key = value`.
    pub fn limit(mut self, key: &str, value: impl Display) -> Setup {
        self.limits.push((key.into(), value.to_string()));
        self
    }

    /// Sets `[buffering] key = value`.
    pub fn buffering(mut self, key: &str, value: impl Display) -> Setup {
        self.buffering.push((key.into(), value.to_string()));
        self
    }

    pub fn grace(mut self, value: &str) -> Setup {
        self.grace = value.into();
        self
    }

    pub fn workers(mut self, workers: usize) -> Setup {
        self.workers = workers;
        self
    }

    /// The config text, with the listener bound to `bind`.
    pub fn toml(&self, bind: &str) -> String {
        let mut text = format!(
            "workers = {}\nshutdown_grace = {:?}\n\n[[listener]]\nname = \"web\"\nbind = {bind:?}\npool = \"app\"\n\n",
            self.workers, self.grace
        );
        text.insert_str(text.len() - 1, &self.listener_lines);
        if let Some(intake) = &self.intake {
            text.insert_str(0, &format!("intake = {intake:?}\n"));
        }
        if let Some(admin) = &self.admin {
            text.push_str(&format!("[admin]\nbind = {admin:?}\n\n"));
        }
        for (section, pairs) in [
            ("timeouts", &self.timeouts),
            ("limits", &self.limits),
            ("buffering", &self.buffering),
        ] {
            if !pairs.is_empty() {
                text.push_str(&format!("[{section}]\n"));
                for (key, value) in pairs {
                    text.push_str(&format!("{key} = {value}\n"));
                }
                text.push('\n');
            }
        }
        text.push_str(&format!(
            "[[pool]]\nname = \"app\"\nbalance = {:?}\nservers = [\n",
            self.balance
        ));
        for (name, addr, weight) in &self.servers {
            let weight = weight
                .map(|w| format!(", weight = {w}"))
                .unwrap_or_default();
            text.push_str(&format!(
                "  {{ name = {name:?}, addr = \"{addr}\"{weight} }},\n"
            ));
        }
        text.push_str("]\n");
        text
    }

    /// Starts herdsman in-process on 127.0.0.1:0.
    pub fn start(self) -> Proxy {
        Proxy::start(&self.toml("127.0.0.1:0"))
    }

    /// Starts the binary (`herdsman run`, output discarded) on a free port; returns the process
    /// and the address it accepts connections on, once it does.
    pub fn start_binary(self) -> (ChildGuard, SocketAddr) {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let path = write_temp("run.toml", &self.toml(&addr.to_string()));
        let child = run_binary_with(&path);
        assert!(
            wait_listening(addr, Duration::from_secs(10)),
            "herdsman run is not listening on {addr}"
        );
        (child, addr)
    }
}

/// herdsman running in this process. Dropping it stops it (bounded wait).
pub struct Proxy {
    server: Option<herdsman::Server>,
    /// Where the "web" listener accepts connections.
    pub addr: SocketAddr,
    /// The config file, when started from one ([`Proxy::start_from_file`]): rewrite it, then
    /// reload.
    path: Option<PathBuf>,
}

impl Proxy {
    pub fn start(toml: &str) -> Proxy {
        let config = herdsman::Config::from_toml(toml, "test")
            .unwrap_or_else(|e| panic!("config rejected: {e:?}\n{toml}"));
        let server = herdsman::Server::start(config).expect("herdsman starts");
        Proxy::serving(server, None)
    }

    /// Starts herdsman from `toml` written to a file, so that a reload has a file to read.
    pub fn start_from_file(toml: &str) -> Proxy {
        let path = write_temp("herdsman.toml", toml);
        let config = herdsman::Config::load(&path)
            .unwrap_or_else(|e| panic!("config rejected: {e}\n{toml}"));
        let server =
            herdsman::Server::start_with_file(config, Some(path.clone())).expect("herdsman starts");
        Proxy::serving(server, Some(path))
    }

    fn serving(server: herdsman::Server, path: Option<PathBuf>) -> Proxy {
        let addr = server
            .listener_addr("web")
            .expect("listener \"web\" has an address");
        assert_ne!(addr.port(), 0, "listener_addr must give the real port");
        Proxy {
            server: Some(server),
            addr,
            path,
        }
    }

    pub fn connect(&self) -> Conn {
        Conn::connect(self.addr)
    }

    /// The running server, to read its counters or its admin address.
    /// Connections waiting in the workers' parking lots, all workers together.
    pub fn parked(&self) -> u32 {
        self.server()
            .stats()
            .report()
            .iter()
            .map(|w| w.parked)
            .sum()
    }

    pub fn server(&self) -> &herdsman::Server {
        self.server.as_ref().expect("running")
    }

    /// The client connections open on the workers, parked ones included.
    pub fn active_connections(&self) -> u32 {
        self.server()
            .stats()
            .report()
            .iter()
            .map(|w| w.active)
            .sum()
    }

    /// The pools' registry, to change servers at run time or reload.
    pub fn registry(&self) -> Arc<Registry> {
        self.server().registry()
    }

    /// Writes `toml` to the config file ([`Proxy::start_from_file`]) and reloads it; the new
    /// generation.
    pub fn reload_with(&self, toml: &str) -> Result<u64, ChangeError> {
        let path = self.path.as_ref().expect("started from a file");
        std::fs::write(path, toml).unwrap();
        self.registry().reload().map(|reloaded| reloaded.generation)
    }

    /// GET `path` on a new connection that asks to be closed after the response.
    pub fn get(&self, path: &str) -> Response {
        let mut conn = self.connect();
        conn.roundtrip(&get_request(path, "Connection: close\r\n"))
    }

    /// GET `path` with `Host: host` and the `extra` header lines, on a new connection that asks
    /// to be closed after the response.
    pub fn get_from_host(&self, host: &str, path: &str, extra: &str) -> Response {
        self.connect().roundtrip(&get_request_to(
            host,
            path,
            &format!("{extra}Connection: close\r\n"),
        ))
    }

    /// Begins a graceful stop.
    pub fn stop(&self) {
        self.server.as_ref().expect("running").stop();
    }

    /// Calls `Server::wait` on another thread; true if it returned within `timeout`.
    pub fn wait_stopped(mut self, timeout: Duration) -> bool {
        let server = self.server.take().expect("running");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            server.wait();
            let _ = tx.send(());
        });
        rx.recv_timeout(timeout).is_ok()
    }

    /// Stops herdsman gracefully and asserts that it stopped within 15 s.
    pub fn stop_and_wait(mut self) {
        let server = self.server.take().expect("running");
        assert!(
            stopped_within_15s(server),
            "herdsman did not stop within 15 s of Server::stop"
        );
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        if !stopped_within_15s(server) && !thread::panicking() {
            panic!("herdsman did not stop within 15 s of Server::stop");
        }
    }
}

/// Stops `server` and waits for it on another thread, so that a panic or hang in stop or wait
/// cannot abort or block the test (a panic while unwinding would abort the whole test binary);
/// whether it stopped within 15 s.
fn stopped_within_15s(server: herdsman::Server) -> bool {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        server.stop();
        server.wait();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(15)).is_ok()
}
