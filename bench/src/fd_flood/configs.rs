//! The three proxies as a user first runs them: each one's shipped defaults (no connection limit
//! written, HAProxy's Debian `defaults` timeouts, nginx's Debian `worker_connections 768` and
//! `keepalive_timeout 65`), one worker, in front of the one backend, with the status page an
//! operator would look at during an attack on a port of its own (herdsman's admin API, HAProxy's
//! stats page, nginx's stub_status); and the proxy started with its open-files limit set.
//! Only what keeps a run tidy differs from the shipped files: no access log (HAProxy has none
//! without a `log` line, herdsman none by default; nginx's is turned off), nothing under /var.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::kit::process::{probe, Supervised};
use crate::kit::proxies::{ProxyKind, Target};

/// Where a flooded proxy listens and forwards.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub listener: u16,
    pub admin: u16,
    pub backend: u16,
}

/// The status page's path on the admin port.
pub fn admin_path(kind: ProxyKind) -> &'static str {
    match kind {
        ProxyKind::Herdsman => "/api/workers",
        ProxyKind::Haproxy | ProxyKind::Nginx => "/",
    }
}

/// The configuration file's name and text.
pub fn config(kind: ProxyKind, ports: Ports, dir: &Path) -> (&'static str, String) {
    let Ports {
        listener,
        admin,
        backend,
    } = ports;
    match kind {
        ProxyKind::Herdsman => (
            "herdsman.toml",
            format!(
                r#"workers = 1

[[listener]]
name = "web"
bind = "127.0.0.1:{listener}"
pool = "app"

[admin]
bind = "127.0.0.1:{admin}"

[[pool]]
name = "app"
servers = [{{ name = "app1", addr = "127.0.0.1:{backend}" }}]
"#
            ),
        ),
        ProxyKind::Haproxy => (
            "haproxy.cfg",
            format!(
                r#"global
    nbthread 1

defaults
    mode http
    timeout connect 5000
    timeout client  50000
    timeout server  50000

frontend web
    bind 127.0.0.1:{listener}
    default_backend app

backend app
    server app1 127.0.0.1:{backend}

listen stats
    bind 127.0.0.1:{admin}
    stats enable
    stats uri /
"#
            ),
        ),
        ProxyKind::Nginx => {
            let dir = dir.display();
            (
                "nginx.conf",
                format!(
                    r#"worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
    worker_connections 768;
}}
http {{
    access_log off;
    keepalive_timeout 65;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;

    server {{
        listen 127.0.0.1:{listener};
        location / {{
            proxy_pass http://127.0.0.1:{backend};
        }}
    }}
    server {{
        listen 127.0.0.1:{admin};
        location / {{
            stub_status;
        }}
    }}
}}
"#
                ),
            )
        }
    }
}

/// Writes `target`'s configuration into `dir`, starts it with at most `limit` open files (soft and
/// hard, as `ulimit -n` would set them), and waits until it serves on the listener.
pub fn start(
    target: &Target,
    ports: Ports,
    limit: u64,
    dir: &Path,
) -> anyhow::Result<(Supervised, String)> {
    let (file, text) = config(target.kind, ports, dir);
    let path = dir.join(file);
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    let mut command = target.command(&path, dir);
    // SAFETY: the closure runs between fork and exec and calls only setrlimit, which is
    // async-signal-safe, on a struct on its own stack.
    unsafe {
        command.pre_exec(move || {
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut process = Supervised::spawn(&target.label, command, &dir.join("output.log"))?;
    process.wait_until_answering(ports.listener, Duration::from_secs(15), probe)?;
    Ok((process, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_proxy_has_its_shipped_limits_and_a_status_page() {
        let ports = Ports {
            listener: 4100,
            admin: 4101,
            backend: 4200,
        };
        for kind in [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx] {
            let (_, text) = config(kind, ports, Path::new("/tmp/x"));
            for port in ["127.0.0.1:4100", "127.0.0.1:4101", "127.0.0.1:4200"] {
                assert!(text.contains(port), "{port} in {text}");
            }
            // No connection limit written: each derives or ships its own.
            assert!(!text.contains("maxconn") && !text.contains("max_client_connections"));
        }
        assert!(config(ProxyKind::Nginx, ports, Path::new("/tmp/x"))
            .1
            .contains("worker_connections 768;"));
    }
}
