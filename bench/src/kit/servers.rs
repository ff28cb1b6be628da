//! The servers the proxies forward to, each a process of its own on a port of its own: the bench's
//! own backend (`kit::backend`), and a real nginx (Debian's nginx-light) answering every request
//! with the same 19-byte body. Neither ever closes a keep-alive connection itself during a run (no
//! request limit, an idle timeout longer than any run), so every connection a server accepts
//! during a run was the proxy's choice; both answer `server_status::STATUS_PATH` with what they
//! have accepted and answered. For uploads, nginx also comes as a server that takes a body of any
//! size and answers only once it has all arrived (`Server::start_for_uploads`).

use std::fmt;
use std::path::Path;

use anyhow::Context;

use crate::kit::backend::{self, BACKLOG, BODY};
use crate::kit::process::{free_port, Supervised};
use crate::kit::proxies::{
    nginx_head, Plan, ProxyKind, Target, NGINX_ANY_BODY_SIZE, SPARE_DESCRIPTORS,
};
use crate::kit::server_status::STATUS_PATH;
use crate::kit::tools;

/// Which server the proxies forward to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ServerKind {
    /// herdsman-bench's own backend.
    Own,
    /// nginx answering with `return 200`.
    Nginx,
}

impl ServerKind {
    /// Its name as results files write it.
    pub fn written(self) -> &'static str {
        match self {
            ServerKind::Own => "own backend",
            ServerKind::Nginx => "nginx server",
        }
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerKind::Own => "own",
            ServerKind::Nginx => "nginx",
        })
    }
}

/// A running server. Its counts are read by its port (`server_status::read`).
pub struct Server {
    pub kind: ServerKind,
    /// On 127.0.0.1.
    pub port: u16,
    pub process: Supervised,
    /// Its configuration file (name, text), for the results; None for the own backend.
    pub config: Option<(&'static str, String)>,
}

impl Server {
    /// Starts a `kind` server on a free port, its files in `dir`/server-KIND, and waits until it
    /// answers. `descriptor_limit`: the open files a process may have (sizes nginx's connections).
    pub fn start(kind: ServerKind, dir: &Path, descriptor_limit: u64) -> anyhow::Result<Server> {
        let port = free_port()?;
        let dir = dir.join(format!("server-{kind}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        match kind {
            ServerKind::Own => Ok(Server {
                kind,
                port,
                process: backend::start(port, &dir)?,
                config: None,
            }),
            ServerKind::Nginx => {
                let text = nginx_server_config(port, &dir, descriptor_limit);
                start_nginx(text, port, &dir)
            }
        }
    }

    /// Starts nginx as an upload server (`nginx_upload_server_config`) on a free port, its files
    /// in `dir`/server-uploads, and waits until it answers.
    pub fn start_for_uploads(dir: &Path, descriptor_limit: u64) -> anyhow::Result<Server> {
        let port = free_port()?;
        let dir = dir.join("server-uploads");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let text = nginx_upload_server_config(port, &dir, descriptor_limit);
        start_nginx(text, port, &dir)
    }
}

const NGINX_FILE: &str = "nginx.conf";

/// nginx serving with the configuration `text` on `port`, its files in `dir`: started as the
/// nginx proxy is, only with a server's configuration.
fn start_nginx(text: String, port: u16, dir: &Path) -> anyhow::Result<Server> {
    let kind = ServerKind::Nginx;
    let program = tools::ensure_installed(&[&tools::NGINX])?.remove(0);
    let nginx = Target {
        label: kind.written().to_string(),
        kind: ProxyKind::Nginx,
        program,
        intake: None,
    };
    let process = nginx.start(NGINX_FILE, &text, port, dir)?;
    Ok(Server {
        kind,
        port,
        process,
        config: Some((NGINX_FILE, text)),
    })
}

/// nginx as a server: one worker, no access log, every keep-alive connection kept (the
/// `keepalive_requests` and `keepalive_timeout` of `nginx_head`), connections for as many files as
/// the process may open, the backend's listen queue, `BODY` to every request but the counts.
pub fn nginx_server_config(port: u16, dir: &Path, descriptor_limit: u64) -> String {
    format!(
        r#"{head}
    server {{
        listen 127.0.0.1:{port} backlog={BACKLOG};
        location / {{
            default_type text/plain;
            return 200 "{body}";
        }}
        location = {STATUS_PATH} {{
            stub_status;
        }}
    }}
}}
"#,
        head = nginx_server_head(port, dir, descriptor_limit),
        body = nginx_body()
    )
}

/// How much of an upload the upload server holds in memory while it reads it; the rest of a
/// larger one goes to a temporary file in its directory. 1 MiB bodies stay in memory.
const UPLOAD_SERVER_BODY_MEMORY: &str = "1m";

/// nginx as an upload server: `nginx_server_config`'s nginx, but it takes a body of any size
/// (`client_max_body_size 0`: its default answers 413 past 1 MiB) and answers `BODY` only once
/// the whole body has arrived, as an application that reads its input first does.
///
/// A bare `return 200` answers as soon as the head is in and discards the body behind the answer:
/// behind a proxy that streams, the client would get its answer while still sending, so the
/// latency would be the head's rather than the upload's, and wrk, which sends the rest of a
/// request after its answer and then waits for an answer that never comes, would stop using that
/// connection. So the mirror module reads each body whole first (`mirror_request_body on`, in
/// memory up to `UPLOAD_SERVER_BODY_MEMORY`, the rest in a temporary file in `dir`), its mirror
/// subrequest answered 204 within nginx; then the static module finds no file under a root that
/// holds none (a 404, not logged), which `error_page` turns into `@answer`'s 200.
pub fn nginx_upload_server_config(port: u16, dir: &Path, descriptor_limit: u64) -> String {
    let dir_text = dir.display();
    format!(
        r#"{head}{NGINX_ANY_BODY_SIZE}    client_body_buffer_size {UPLOAD_SERVER_BODY_MEMORY};

    server {{
        listen 127.0.0.1:{port} backlog={BACKLOG};
        location / {{
            mirror {READ_BODY_PATH};
            mirror_request_body on;
            root {dir_text}/no-files;
            log_not_found off;
            error_page 404 =200 @answer;
        }}
        location = {READ_BODY_PATH} {{
            internal;
            return 204;
        }}
        location @answer {{
            default_type text/plain;
            return 200 "{body}";
        }}
        location = {STATUS_PATH} {{
            stub_status;
        }}
    }}
}}
"#,
        head = nginx_server_head(port, dir, descriptor_limit),
        body = nginx_body()
    )
}

/// The upload server's mirror location: the subrequest that makes nginx read a body whole.
const READ_BODY_PATH: &str = "/__bench/read-body";

/// nginx's head as a server on `port`: one worker, connections for as many files as it may open.
fn nginx_server_head(port: u16, dir: &Path, descriptor_limit: u64) -> String {
    let plan = Plan {
        workers: 1,
        port,
        backend_port: 0,
        backend_idle: 0,
        client_connections: server_connections(descriptor_limit),
        descriptor_limit,
    };
    nginx_head(plan, dir)
}

/// `BODY` as an nginx string.
fn nginx_body() -> String {
    String::from_utf8_lossy(BODY).replace('\n', "\\n")
}

/// The connections the nginx server makes room for: as many as leave its `worker_connections`
/// (`nginx_head` adds the spare descriptors and a sixteenth) within the open-files limit. Several
/// proxies' idle connections may be open to it at once, each up to the largest client count.
fn server_connections(descriptor_limit: u64) -> u32 {
    let usable = descriptor_limit.saturating_sub(1) * 15 / 16;
    u32::try_from(usable.saturating_sub(u64::from(SPARE_DESCRIPTORS))).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::markdown::assert_contains_all;
    use crate::kit::proxies::nginx_worker_connections;

    #[test]
    fn the_nginx_server_keeps_its_connections_and_answers_the_body() {
        let text = nginx_server_config(4200, Path::new("/tmp/x"), 20_000);
        assert_contains_all(
            &text,
            &[
                "worker_processes 1;",
                "master_process off;",
                "worker_rlimit_nofile 20000;",
                "worker_connections 19999;",
                "access_log off;",
                "keepalive_requests 1000000;",
                "keepalive_timeout 300s;",
                "listen 127.0.0.1:4200 backlog=4096;",
                "return 200 \"hello from bench!!\\n\";",
                "location = /__bench/status {\n            stub_status;",
            ],
        );
        // Braces balance: every block nginx opens is closed.
        assert_eq!(text.matches('{').count(), text.matches('}').count());
    }

    #[test]
    fn the_upload_server_takes_any_body_whole_before_it_answers() {
        let text = nginx_upload_server_config(4200, Path::new("/tmp/x"), 20_000);
        assert_contains_all(
            &text,
            &[
                "worker_processes 1;",
                "worker_connections 19999;",
                "client_body_temp_path /tmp/x/client_body;",
                "    client_max_body_size 0;\n    client_body_buffer_size 1m;\n",
                "listen 127.0.0.1:4200 backlog=4096;",
                "mirror /__bench/read-body;\n            mirror_request_body on;",
                "root /tmp/x/no-files;\n            log_not_found off;\n            \
                 error_page 404 =200 @answer;",
                "location = /__bench/read-body {\n            internal;\n            return 204;",
                "location @answer {\n            default_type text/plain;\n            \
                 return 200 \"hello from bench!!\\n\";",
                "location = /__bench/status {\n            stub_status;",
            ],
        );
        // No `return` answers in `location /` itself: it would answer before the body is read.
        let root = &text[text.find("location / {").unwrap()..text.find(READ_BODY_PATH).unwrap()];
        assert!(!root.contains("return"), "{root}");
        assert_eq!(text.matches('{').count(), text.matches('}').count());
        // The plain server is as it was: any body discarded behind an answer at the head.
        let plain = nginx_server_config(4200, Path::new("/tmp/x"), 20_000);
        assert!(!plain.contains("client_max_body_size") && !plain.contains("mirror"));
    }

    #[test]
    fn its_connections_stay_within_the_open_files_limit() {
        for limit in [1024, 20_000, 1_048_576] {
            let plan = Plan {
                workers: 1,
                port: 0,
                backend_port: 0,
                backend_idle: 0,
                client_connections: server_connections(limit),
                descriptor_limit: limit,
            };
            let worker_connections = nginx_worker_connections(plan);
            assert!(worker_connections <= limit, "{limit}: {worker_connections}");
            assert!(
                worker_connections + 16 > limit,
                "{limit}: {worker_connections}"
            );
        }
        assert_eq!(ServerKind::Own.to_string(), "own");
        assert_eq!(ServerKind::Nginx.written(), "nginx server");
    }
}
