//! The three servers behind the proxy: each its own single-process nginx (`master_process off;
//! daemon off;`), so that `kill -9` kills it whole and SIGQUIT is its graceful stop, answering a
//! small fixed body with keep-alive, and started again on the same port after a stop or a kill.
//!
//! In single-process mode nginx handles QUIT at the end of its current pass over its events: it
//! finishes what it has read, then exits, closing its keep-alive connections (a worker under a
//! master would also wait for requests it is in the middle of; with a body this small, none is).
//! nginx's own keep-alive defaults are kept (75 s, 1000 requests a connection): a server that closes
//! a busy connection every thousand requests is part of an ordinary day.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::process::{free_port, Supervised};

/// How long nginx may take to serve once started.
const START_LIMIT: Duration = Duration::from_secs(10);
/// How long it may take to exit after QUIT or SIGKILL.
const EXIT_LIMIT: Duration = Duration::from_secs(10);

/// The servers' names, also their names in the proxies' pools.
pub const NAMES: [&str; 3] = ["s1", "s2", "s3"];

/// One nginx server and where it keeps its files.
struct Server {
    name: String,
    port: u16,
    dir: PathBuf,
    /// None while it is stopped.
    process: Option<Supervised>,
    /// Starts so far, so that each start logs to a file of its own.
    starts: u32,
}

/// The running servers. Dropping it stops them.
pub struct Servers {
    nginx: PathBuf,
    servers: Vec<Server>,
}

impl Servers {
    /// Starts one nginx per name in `NAMES` on free ports, each with its files in `dir`/NAME,
    /// and waits until each answers.
    pub fn start(nginx: &Path, dir: &Path) -> anyhow::Result<Servers> {
        let mut servers = Servers {
            nginx: nginx.to_path_buf(),
            servers: Vec::new(),
        };
        for name in NAMES {
            let dir = dir.join(name);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let port = free_port()?;
            std::fs::write(dir.join("nginx.conf"), config(name, port, &dir))
                .with_context(|| format!("writing {name}'s nginx.conf"))?;
            servers.servers.push(Server {
                name: name.to_string(),
                port,
                dir,
                process: None,
                starts: 0,
            });
            let index = servers.servers.len() - 1;
            servers.start_again(index)?;
        }
        Ok(servers)
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn names(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.name.clone()).collect()
    }

    /// (name, port) of each server.
    pub fn addresses(&self) -> Vec<(String, u16)> {
        self.servers
            .iter()
            .map(|s| (s.name.clone(), s.port))
            .collect()
    }

    /// One server's nginx.conf, for the results file.
    pub fn config_of_first(&self) -> String {
        self.servers.first().map_or(String::new(), |s| {
            std::fs::read_to_string(s.dir.join("nginx.conf")).unwrap_or_default()
        })
    }

    /// Starts server `index` (again) on its port and waits until it answers; says how long that
    /// took.
    pub fn start_again(&mut self, index: usize) -> anyhow::Result<String> {
        let nginx = self.nginx.clone();
        let server = &mut self.servers[index];
        if server.process.is_some() {
            bail!("{} is already running", server.name);
        }
        server.starts += 1;
        let mut command = Command::new(&nginx);
        // -p and -e keep nginx away from /var and /run even before it reads the config.
        command
            .arg("-p")
            .arg(&server.dir)
            .arg("-e")
            .arg(server.dir.join("error.log"))
            .arg("-c")
            .arg(server.dir.join("nginx.conf"))
            .current_dir(&server.dir);
        let started = Instant::now();
        let log = server.dir.join(format!("nginx-{}.log", server.starts));
        let mut process = Supervised::spawn(&server.name, command, &log)?;
        process.wait_until_serving(server.port, START_LIMIT)?;
        let note = format!(
            "pid {}, serving after {} ms",
            process.pid(),
            millis(started)
        );
        server.process = Some(process);
        Ok(note)
    }

    /// SIGQUIT to server `index`, nginx's graceful stop, and waits until it has exited.
    pub fn stop_gracefully(&mut self, index: usize) -> anyhow::Result<String> {
        self.end(index, libc::SIGQUIT)
    }

    /// SIGKILL to server `index`, and waits until it has exited.
    pub fn kill(&mut self, index: usize) -> anyhow::Result<String> {
        self.end(index, libc::SIGKILL)
    }

    fn end(&mut self, index: usize, signal: libc::c_int) -> anyhow::Result<String> {
        let server = &mut self.servers[index];
        let Some(mut process) = server.process.take() else {
            bail!("{} is not running", server.name);
        };
        let started = Instant::now();
        process.signal(signal)?;
        let how = process.wait_for_exit(EXIT_LIMIT)?;
        Ok(format!("{how} after {} ms", millis(started)))
    }

    /// Fails if a server that should be running has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        for server in &mut self.servers {
            if let Some(process) = &mut server.process {
                process.check_running()?;
            }
        }
        Ok(())
    }
}

fn millis(since: Instant) -> u128 {
    since.elapsed().as_millis()
}

/// One server's nginx.conf: a single process on 127.0.0.1:`port` answering `GET /` (and the
/// proxies' health checks) with a 200 and a small fixed body, no access log, its files in `dir`.
pub fn config(name: &str, port: u16, dir: &Path) -> String {
    let dir = dir.display();
    format!(
        r#"# {name}: one process, so that kill -9 kills it whole and QUIT stops it.
master_process off;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;

    server {{
        listen 127.0.0.1:{port};
        location / {{
            default_type text/plain;
            return 200 "hello from {name}\n";
        }}
    }}
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_one_process_on_its_port_with_its_files_in_its_directory() {
        let text = config("s2", 4242, Path::new("/tmp/x/s2"));
        for line in [
            "master_process off;",
            "daemon off;",
            "listen 127.0.0.1:4242;",
            "return 200 \"hello from s2\\n\";",
            "access_log off;",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        for line in text
            .lines()
            .filter(|l| l.contains("_path") || l.contains("pid") || l.contains("error_log"))
        {
            assert!(line.contains("/tmp/x/s2/"), "{line}");
        }
    }
}
