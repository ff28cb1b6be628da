//! The proxies under test and their equivalent configurations: the same worker count, keep-alive
//! to the one backend, no access logs, X-Forwarded-For/-Proto/-Host added (herdsman always adds
//! them, so its peers do the same work), idle client connections kept for `CLIENT_IDLE_SECONDS`,
//! room for every client connection the run opens, the same listen queue, and the command line
//! that starts each in the foreground; and starting herdsman alone, for the benchmarks that
//! measure only herdsman. herdsman runs with the idle server connections a user gets by default;
//! HAProxy and nginx are told to keep every server connection the run opens. Each
//! configuration also comes with TLS on its listeners (`Target::tls_config`): the same certificate
//! files for all three, TLS 1.2 and 1.3, ALPN http/1.1 (and h2 before it on a listener that speaks
//! HTTP/2), session tickets and a TLS 1.2 session cache; with HTTP/2 with prior knowledge in
//! cleartext (h2c, `Target::h2c_config`); and for gRPC, h2c on both sides (`Target::grpc_config`:
//! herdsman's pool `protocol = "h2c"`, HAProxy's `server … proto h2`, nginx's `grpc_pass`); and
//! for uploads of any size (`Target::upload_config`: nginx's body size limit lifted); and in
//! front of several servers with a balancing method named in each proxy's words
//! (`Target::balanced_config`, `Balancing`).

use std::fmt;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;

use crate::kit::backend::BACKLOG;
use crate::kit::process::Supervised;
use crate::kit::tools;

/// Which program a benchmark target runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ProxyKind {
    Herdsman,
    Haproxy,
    Nginx,
}

impl ProxyKind {
    /// Its name as results files write it: "herdsman", "HAProxy", "nginx".
    pub fn written(self) -> &'static str {
        match self {
            ProxyKind::Herdsman => "herdsman",
            ProxyKind::Haproxy => "HAProxy",
            ProxyKind::Nginx => "nginx",
        }
    }
}

impl fmt::Display for ProxyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProxyKind::Herdsman => "herdsman",
            ProxyKind::Haproxy => "haproxy",
            ProxyKind::Nginx => "nginx",
        })
    }
}

/// herdsman's connection intake (its top-level `intake` config key); one row per mode measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum IntakeMode {
    Balanced,
    Reuseport,
    Exclusive,
    Shared,
}

impl IntakeMode {
    /// herdsman's name for it, as the `intake` key takes it.
    pub fn label(self) -> &'static str {
        match self {
            IntakeMode::Balanced => "balanced",
            IntakeMode::Reuseport => "reuseport",
            IntakeMode::Exclusive => "exclusive",
            IntakeMode::Shared => "shared",
        }
    }
}

impl fmt::Display for IntakeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A proxy to measure: one row of the results.
#[derive(Debug, Clone)]
pub struct Target {
    /// The row's name: "haproxy", "nginx", "herdsman", or a label given with --herdsman-bin,
    /// followed by " (MODE)" when an intake mode was asked for.
    pub label: String,
    pub kind: ProxyKind,
    pub program: PathBuf,
    /// herdsman only: the `intake` line to write; `None` leaves herdsman's default.
    pub intake: Option<IntakeMode>,
}

/// A row for each of `kinds`, in order, with the default intake: `herdsman` for herdsman, and each
/// peer's program installed first if missing (before the machine's load is looked at).
pub fn targets(kinds: &[ProxyKind], herdsman: &Path) -> anyhow::Result<Vec<Target>> {
    kinds
        .iter()
        .map(|&kind| {
            let program = match kind {
                ProxyKind::Herdsman => herdsman.to_path_buf(),
                ProxyKind::Haproxy => tools::ensure_installed(&[&tools::HAPROXY])?.remove(0),
                ProxyKind::Nginx => tools::ensure_installed(&[&tools::NGINX])?.remove(0),
            };
            Ok(Target {
                label: kind.to_string(),
                kind,
                program,
                intake: None,
            })
        })
        .collect()
}

/// The peers' versions (`-v`), as a results file's setup lines named as it writes them.
pub fn peer_version_lines(targets: &[Target]) -> Vec<(String, String)> {
    targets
        .iter()
        .filter(|target| target.kind != ProxyKind::Herdsman)
        .map(|target| {
            (
                target.kind.written().into(),
                tools::version_line(&target.program, &["-v"]),
            )
        })
        .collect()
}

/// How long every proxy lets a keep-alive client connection sit idle between requests: longer
/// than the idle sweep holds its idle clients, so no proxy closes them on a timer (herdsman's
/// `client_idle`, HAProxy's `timeout client` and `timeout http-keep-alive`, nginx's
/// `keepalive_timeout`).
pub const CLIENT_IDLE_SECONDS: u32 = 300;

/// Descriptors a proxy process needs beyond its client and backend connections (listeners, logs,
/// epoll, eventfds, pipes): a generous allowance.
pub const SPARE_DESCRIPTORS: u32 = 100;

/// Where a proxy listens, what it forwards to, and how many connections it must hold.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub workers: u32,
    pub port: u16,
    pub backend_port: u16,
    /// Idle backend connections nginx may keep per worker (its upstream `keepalive`): at least 64
    /// and at least the largest client connection count, so that, like HAProxy with `http-reuse
    /// always`, it never closes a backend connection only to open another. herdsman is not told:
    /// it keeps the idle server connections its own default keeps, as a user's herdsman does.
    pub backend_idle: u32,
    /// The most client connections open at once in the run: the largest idle count plus the
    /// largest active load. HAProxy's `maxconn` and nginx's `worker_connections` are sized from it.
    pub client_connections: u32,
    /// Open files each process may have (RLIMIT_NOFILE, inherited): nginx's
    /// `worker_rlimit_nofile`, HAProxy's `ulimit-n`. Must cover `descriptors_needed`.
    pub descriptor_limit: u64,
}

impl Plan {
    /// compare's plan for herdsman alone in front of the backend, as the benchmarks that measure
    /// only herdsman use it: no client connection or descriptor sizing (herdsman's configuration
    /// has no connection limit, and it keeps idle server connections by its own default).
    pub const fn herdsman_alone(workers: u32, port: u16, backend_port: u16) -> Plan {
        Plan {
            workers,
            port,
            backend_port,
            backend_idle: 64,
            client_connections: 0,
            descriptor_limit: 0,
        }
    }

    /// Descriptors one proxy process needs at the peak: every client connection, a backend
    /// connection per active client at most (`backend_idle` covers the largest active load), and
    /// the spare allowance.
    pub fn descriptors_needed(&self) -> u64 {
        u64::from(self.client_connections)
            + u64::from(self.backend_idle)
            + u64::from(SPARE_DESCRIPTORS)
    }
}

/// A certificate and its private key as PEM files, absolute paths: herdsman and nginx read the two
/// apart, HAProxy one file holding both.
#[derive(Debug, Clone)]
pub struct TlsCertificate {
    pub chain: PathBuf,
    pub key: PathBuf,
    /// The chain followed by the key, for HAProxy's `crt`.
    pub combined: PathBuf,
}

/// One TLS listener: where, the certificate it serves, and whether it speaks HTTP/2.
#[derive(Debug, Clone)]
pub struct TlsListener {
    /// On 127.0.0.1.
    pub port: u16,
    pub certificate: TlsCertificate,
    /// Offers ALPN h2 before http/1.1 (herdsman's default, HAProxy's `alpn h2,http/1.1`, nginx's
    /// `listen … ssl http2`); http/1.1 alone otherwise (but for herdsman, whose default this is
    /// not told from: every client of a listener without HTTP/2 offers http/1.1 alone, and agrees
    /// it with all three).
    pub http2: bool,
}

/// Each proxy's words for its listener's HTTP/2, in its configuration.
struct Http2Words {
    herdsman: &'static str,
    haproxy: &'static str,
    nginx: &'static str,
}

/// On a TLS listener: the ALPN list with h2 first, which a herdsman TLS listener offers by default
/// (its `http2` key, true unless written false).
const TLS_HTTP2: Http2Words = Http2Words {
    herdsman: "",
    haproxy: "alpn h2,http/1.1",
    nginx: " http2",
};

/// On a TLS listener without HTTP/2: ALPN http/1.1.
const TLS_HTTP1: Http2Words = Http2Words {
    herdsman: "",
    haproxy: "alpn http/1.1",
    nginx: "",
};

/// On a cleartext listener: HTTP/2 with prior knowledge. herdsman and HAProxy (`proto h2`) take
/// it beside HTTP/1.1 or alone; nginx 1.22's `listen … http2` without ssl speaks only h2c.
const H2C: Http2Words = Http2Words {
    herdsman: "h2c = true\n",
    haproxy: " proto h2",
    nginx: " http2",
};

/// On a cleartext listener without HTTP/2.
const CLEARTEXT_HTTP1: Http2Words = Http2Words {
    herdsman: "",
    haproxy: "",
    nginx: "",
};

/// Each proxy's words for what it speaks to its server: its pool's lines (herdsman), its `server`
/// line's options (HAProxy), its `location /` block's body (nginx).
struct ServerWords {
    herdsman: &'static str,
    haproxy: &'static str,
    nginx: &'static str,
}

/// HTTP/1.1 with keep-alive, the X-Forwarded fields added (herdsman and HAProxy add them by
/// default or by the frontend's lines).
const HTTP1_SERVER: ServerWords = ServerWords {
    herdsman: "",
    haproxy: "",
    nginx: r#"            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Host $host;
"#,
};

/// HTTP/2 with prior knowledge (h2c), as a gRPC server speaks it, the same X-Forwarded fields
/// added. nginx 1.22's `grpc_pass` puts each stream on a server connection of its own, kept by
/// the upstream's `keepalive`; herdsman and HAProxy put many streams on one.
const H2C_SERVER: ServerWords = ServerWords {
    herdsman: "protocol = \"h2c\"\n",
    haproxy: " proto h2",
    nginx: r#"            grpc_pass grpc://backend;
            grpc_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            grpc_set_header X-Forwarded-Proto $scheme;
            grpc_set_header X-Forwarded-Host $host;
"#,
};

impl TlsListener {
    fn http2_words(&self) -> &'static Http2Words {
        if self.http2 {
            &TLS_HTTP2
        } else {
            &TLS_HTTP1
        }
    }
}

/// Several servers behind a proxy, and how it spreads requests over them in the proxy's own
/// words: herdsman's `balance` value ("least-conn"), HAProxy's `balance` argument ("leastconn"),
/// nginx's upstream directive ("least_conn", "random two least_conn"). An empty method writes
/// none: each proxy's default (round-robin in all three).
#[derive(Debug, Clone, Copy)]
pub struct Balancing<'a> {
    /// Ports on 127.0.0.1, the servers named b1, b2, … in this order.
    pub servers: &'a [u16],
    pub method: &'a str,
}

impl Balancing<'_> {
    /// herdsman's pool lines: `balance`, and `servers` on one line.
    fn herdsman_lines(&self) -> String {
        let mut lines = String::new();
        if !self.method.is_empty() {
            let _ = writeln!(lines, "balance = \"{}\"", self.method);
        }
        let servers: Vec<String> = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, port)| format!("{{ name = \"b{}\", addr = \"127.0.0.1:{port}\" }}", i + 1))
            .collect();
        let _ = writeln!(lines, "servers = [{}]", servers.join(", "));
        lines
    }

    /// HAProxy's backend lines: `balance`, and a `server` line each with `server_options`.
    fn haproxy_lines(&self, server_options: &str) -> String {
        let mut lines = String::new();
        if !self.method.is_empty() {
            let _ = writeln!(lines, "    balance {}", self.method);
        }
        for (i, port) in self.servers.iter().enumerate() {
            let _ = writeln!(
                lines,
                "    server b{} 127.0.0.1:{port}{server_options}",
                i + 1
            );
        }
        lines
    }

    /// nginx's upstream lines before its `keepalive` (which must follow a balancing method): a
    /// `server` line each, and with a method, the method and a shared memory `zone`, so that with
    /// several workers each counts every worker's connections (as herdsman's and HAProxy's
    /// workers and threads do), not only its own.
    fn nginx_lines(&self) -> String {
        let mut lines = String::new();
        for port in self.servers {
            let _ = writeln!(lines, "        server 127.0.0.1:{port};");
        }
        if !self.method.is_empty() {
            let _ = writeln!(lines, "        zone backend 1m;\n        {};", self.method);
        }
        lines
    }
}

impl Target {
    /// The configuration file's name and text. `dir` is this target's private scratch directory.
    pub fn config(&self, plan: Plan, dir: &Path) -> (&'static str, String) {
        self.cleartext_config(plan, dir, &CLEARTEXT_HTTP1, &HTTP1_SERVER)
    }

    /// `config` in front of `balancing`'s servers (`plan.backend_port` is not used) with its
    /// method.
    pub fn balanced_config(
        &self,
        plan: Plan,
        balancing: Balancing,
        dir: &Path,
    ) -> (&'static str, String) {
        self.config_over(plan, dir, &CLEARTEXT_HTTP1, &HTTP1_SERVER, balancing)
    }

    /// `config` with HTTP/2 with prior knowledge (h2c) on its listener.
    pub fn h2c_config(&self, plan: Plan, dir: &Path) -> (&'static str, String) {
        self.cleartext_config(plan, dir, &H2C, &HTTP1_SERVER)
    }

    /// `config` for uploads of any size: nginx's is `nginx_upload_config` (its body size limit
    /// lifted); herdsman's and HAProxy's take any size as they are, and are `config`'s.
    pub fn upload_config(&self, plan: Plan, dir: &Path) -> (&'static str, String) {
        match self.kind {
            ProxyKind::Nginx => ("nginx.conf", nginx_upload_config(plan, dir)),
            ProxyKind::Herdsman | ProxyKind::Haproxy => self.config(plan, dir),
        }
    }

    /// `h2c_config` in front of a gRPC server: h2c to the server as well.
    pub fn grpc_config(&self, plan: Plan, dir: &Path) -> (&'static str, String) {
        self.cleartext_config(plan, dir, &H2C, &H2C_SERVER)
    }

    /// The cleartext configuration in front of the plan's one server.
    fn cleartext_config(
        &self,
        plan: Plan,
        dir: &Path,
        words: &Http2Words,
        server: &ServerWords,
    ) -> (&'static str, String) {
        let one = Balancing {
            servers: &[plan.backend_port],
            method: "",
        };
        self.config_over(plan, dir, words, server, one)
    }

    fn config_over(
        &self,
        plan: Plan,
        dir: &Path,
        words: &Http2Words,
        server: &ServerWords,
        balancing: Balancing,
    ) -> (&'static str, String) {
        match self.kind {
            ProxyKind::Herdsman => (
                "herdsman.toml",
                herdsman_listener_config(
                    plan,
                    self.intake,
                    words.herdsman,
                    &format!("{}{}", server.herdsman, balancing.herdsman_lines()),
                ),
            ),
            ProxyKind::Haproxy => (
                "haproxy.cfg",
                haproxy_bind_config(
                    plan,
                    words.haproxy,
                    &balancing.haproxy_lines(server.haproxy),
                ),
            ),
            ProxyKind::Nginx => (
                "nginx.conf",
                nginx_listen_config_with(
                    plan,
                    dir,
                    "",
                    words.nginx,
                    server.nginx,
                    &balancing.nginx_lines(),
                ),
            ),
        }
    }

    /// The configuration file's name and text with TLS on every one of `listeners` (`plan.port`
    /// is not listened on), and herdsman's admin API on `admin_port` when one is given (the other
    /// two have none). `dir` is this target's private scratch directory.
    pub fn tls_config(
        &self,
        plan: Plan,
        listeners: &[TlsListener],
        admin_port: Option<u16>,
        dir: &Path,
    ) -> (&'static str, String) {
        match self.kind {
            ProxyKind::Herdsman => (
                "herdsman.toml",
                herdsman_tls_config(plan, listeners, admin_port),
            ),
            ProxyKind::Haproxy => ("haproxy.cfg", haproxy_tls_config(plan, listeners)),
            ProxyKind::Nginx => ("nginx.conf", nginx_tls_config(plan, listeners, dir)),
        }
    }

    /// Writes `text` as its configuration file `file` in `dir`, starts the proxy in the foreground
    /// with it (its output in `dir`/output.log) and waits until it serves on `port`.
    pub fn start(
        &self,
        file: &str,
        text: &str,
        port: u16,
        dir: &Path,
    ) -> anyhow::Result<Supervised> {
        self.start_checked(file, text, port, dir, crate::kit::process::probe)
    }

    /// `start`, waiting until `probe(port)` succeeds rather than a cleartext `GET /`: for a proxy
    /// whose port speaks TLS.
    pub fn start_checked(
        &self,
        file: &str,
        text: &str,
        port: u16,
        dir: &Path,
        probe: impl Fn(u16) -> anyhow::Result<()>,
    ) -> anyhow::Result<Supervised> {
        let config = dir.join(file);
        std::fs::write(&config, text).with_context(|| format!("writing {}", config.display()))?;
        let command = self.command(&config, dir);
        let mut process = Supervised::spawn(&self.label, command, &dir.join("output.log"))?;
        process.wait_until_answering(port, Duration::from_secs(15), probe)?;
        Ok(process)
    }

    /// The command that runs the proxy in the foreground with `config`.
    pub fn command(&self, config: &Path, dir: &Path) -> Command {
        let mut command = Command::new(&self.program);
        match self.kind {
            ProxyKind::Herdsman => {
                command.arg("run").arg("-c").arg(config);
            }
            ProxyKind::Haproxy => {
                command.arg("-f").arg(config).arg("-db");
            }
            ProxyKind::Nginx => {
                // -p and -e keep nginx away from /var and /run even before it reads the config.
                command
                    .arg("-p")
                    .arg(dir)
                    .arg("-e")
                    .arg(dir.join("error.log"))
                    .arg("-c")
                    .arg(config);
            }
        }
        command.current_dir(dir);
        command
    }
}

/// Writes `config` to `dir`/herdsman.toml, starts `program` with it (logging to
/// `dir`/herdsman.log) and waits until it serves on `port`.
pub fn start_herdsman(
    program: &Path,
    config: &str,
    port: u16,
    dir: &Path,
) -> anyhow::Result<Supervised> {
    let file = dir.join("herdsman.toml");
    std::fs::write(&file, config).with_context(|| format!("writing {}", file.display()))?;
    let mut command = Command::new(program);
    command.arg("run").arg("-c").arg(&file).current_dir(dir);
    let mut process = Supervised::spawn("herdsman", command, &dir.join("herdsman.log"))?;
    process.wait_until_serving(port, Duration::from_secs(15))?;
    Ok(process)
}

/// herdsman's configuration; `intake` adds the top-level `intake = "MODE"` line.
pub fn herdsman_config(plan: Plan, intake: Option<IntakeMode>) -> String {
    let one = Balancing {
        servers: &[plan.backend_port],
        method: "",
    };
    herdsman_listener_config(plan, intake, "", &one.herdsman_lines())
}

/// herdsman's `[http2]` where a listener speaks HTTP/2: `max_requests_per_connection` (1,000 by
/// default, as nginx's `keepalive_requests`) raised, as nginx's is here, since h2load neither
/// reconnects after a GOAWAY nor retries the streams it names as unprocessed: at the default,
/// a busy run counted a few failed requests per connection.
const HERDSMAN_HTTP2_SECTION: &str = "\n[http2]\nmax_requests_per_connection = 1000000000\n";

/// herdsman's configuration with `listener_lines` in its listener and `pool_lines` in its pool
/// (each line ending in a newline; its servers among them).
fn herdsman_listener_config(
    plan: Plan,
    intake: Option<IntakeMode>,
    listener_lines: &str,
    pool_lines: &str,
) -> String {
    let Plan { workers, port, .. } = plan;
    let intake = intake.map_or(String::new(), |mode| format!("intake = \"{mode}\"\n"));
    let http2 = if listener_lines.is_empty() {
        ""
    } else {
        HERDSMAN_HTTP2_SECTION
    };
    format!(
        r#"workers = {workers}
{intake}{http2}
[timeouts]
client_idle = "{CLIENT_IDLE_SECONDS}s"

[[listener]]
name = "bench"
bind = "127.0.0.1:{port}"
pool = "backend"
{listener_lines}
[[pool]]
name = "backend"
{pool_lines}"#
    )
}

/// herdsman's configuration with TLS on every one of `listeners` (named "tls-PORT"), in front of
/// the one backend, and its admin API on `admin_port` when given. Its TLS defaults are the
/// equivalent settings: TLS 1.2 and 1.3, ALPN h2 and http/1.1, tickets and a TLS 1.2 session
/// cache; a listener that speaks HTTP/2 adds `[http2]`'s raised request count.
pub fn herdsman_tls_config(
    plan: Plan,
    listeners: &[TlsListener],
    admin_port: Option<u16>,
) -> String {
    let Plan {
        workers,
        backend_port,
        ..
    } = plan;
    let mut text =
        format!("workers = {workers}\n\n[timeouts]\nclient_idle = \"{CLIENT_IDLE_SECONDS}s\"\n");
    for listener in listeners {
        let TlsCertificate { chain, key, .. } = &listener.certificate;
        let _ = write!(
            text,
            r#"
[[listener]]
name = "tls-{port}"
bind = "127.0.0.1:{port}"
pool = "backend"
{http2}[listener.tls]
certificates = [{{ chain = "{chain}", key = "{key}" }}]
min_version = "1.2"
"#,
            port = listener.port,
            chain = chain.display(),
            key = key.display(),
            http2 = listener.http2_words().herdsman
        );
    }
    if listeners.iter().any(|listener| listener.http2) {
        text.push_str(HERDSMAN_HTTP2_SECTION);
    }
    if let Some(admin_port) = admin_port {
        let _ = write!(text, "\n[admin]\nbind = \"127.0.0.1:{admin_port}\"\n");
    }
    let _ = write!(
        text,
        r#"
[[pool]]
name = "backend"
servers = [{{ name = "b1", addr = "127.0.0.1:{backend_port}" }}]
"#
    );
    text
}

pub fn haproxy_config(plan: Plan) -> String {
    let one = Balancing {
        servers: &[plan.backend_port],
        method: "",
    };
    haproxy_bind_config(plan, "", &one.haproxy_lines(""))
}

/// `haproxy_config` with `frontend_lines` (each ending in a newline) added to its frontend, after
/// its own rules: for a benchmark that adds a feature (`rules`' header rules and stick table).
pub fn haproxy_config_adding(plan: Plan, frontend_lines: &str) -> String {
    haproxy_config(plan).replacen(
        "    default_backend backend\n",
        &format!("{frontend_lines}    default_backend backend\n"),
        1,
    )
}

/// HAProxy's configuration with `bind_options` on its bind line (each option after a blank) and
/// `backend_lines` in its backend (each ending in a newline; its servers among them).
fn haproxy_bind_config(plan: Plan, bind_options: &str, backend_lines: &str) -> String {
    let Plan { port, .. } = plan;
    format!(
        r#"{head}
frontend bench
    bind 127.0.0.1:{port}{bind_options}
    option forwardfor
    http-request set-header X-Forwarded-Proto http
    http-request set-header X-Forwarded-Host %[req.hdr(host)]
    default_backend backend

backend backend
{backend_lines}"#,
        head = haproxy_head(plan)
    )
}

/// HAProxy's configuration with TLS on every one of `listeners` (`bind … ssl crt` with the
/// certificate and key in one file, TLS 1.2 at least, ALPN http/1.1, or h2 and http/1.1 on a
/// listener that speaks HTTP/2), in front of the one
/// backend. HAProxy's defaults give the rest: tickets, and a TLS 1.2 session cache of 20,000.
pub fn haproxy_tls_config(plan: Plan, listeners: &[TlsListener]) -> String {
    let mut binds = String::new();
    for listener in listeners {
        let _ = writeln!(
            binds,
            "    bind 127.0.0.1:{} ssl crt {} ssl-min-ver TLSv1.2 {}",
            listener.port,
            listener.certificate.combined.display(),
            listener.http2_words().haproxy
        );
    }
    format!(
        r#"{head}
frontend bench
{binds}    option forwardfor
    http-request set-header X-Forwarded-Proto https
    http-request set-header X-Forwarded-Host %[req.hdr(host)]
    default_backend backend

backend backend
    server b1 127.0.0.1:{backend_port}
"#,
        head = haproxy_head(plan),
        backend_port = plan.backend_port
    )
}

/// HAProxy's `global` and `defaults` sections, as every benchmark's HAProxy has them.
fn haproxy_head(plan: Plan) -> String {
    let Plan {
        workers,
        client_connections,
        descriptor_limit,
        ..
    } = plan;
    let maxconn = client_connections + SPARE_DESCRIPTORS;
    // HAProxy 2.6 reserves two descriptors per `maxconn` (one client, one server side) and, with
    // strict limits, refuses to start when the process may not open that many (here at most
    // 20,000, which cannot be raised). An idle client connection holds no server connection, so
    // `no strict-limits` lets it start with an ALERT and hold every client the run opens, up to
    // `ulimit-n`.
    // Once a quarter of its descriptors (as it counts them, 2 × maxconn) are in use, HAProxy stops
    // keeping idle backend connections (tune.pool-high-fd-ratio 25, -low 20) and opens and closes
    // one per request: with 1,000 client connections it then served a quarter of its usual
    // requests/s. herdsman and nginx keep their backend connections whatever the count, so HAProxy
    // is told to as well.
    format!(
        r#"global
    nbthread {workers}
    maxconn {maxconn}
    ulimit-n {descriptor_limit}
    no strict-limits
    tune.pool-low-fd-ratio 90
    tune.pool-high-fd-ratio 95

defaults
    mode http
    maxconn {maxconn}
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client {CLIENT_IDLE_SECONDS}s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive {CLIENT_IDLE_SECONDS}s
"#
    )
}

pub fn nginx_config(plan: Plan, dir: &Path) -> String {
    nginx_listen_config(plan, dir, "", "", HTTP1_SERVER.nginx)
}

/// The `http` block's line that lets nginx take a request body of any size. Its default,
/// `client_max_body_size 1m`, answers 413 to a larger one; herdsman and HAProxy have no such limit
/// by default.
pub const NGINX_ANY_BODY_SIZE: &str = "    client_max_body_size 0;\n";

/// `nginx_config` for uploads of any size (`NGINX_ANY_BODY_SIZE`), and otherwise nginx's defaults:
/// it still reads each body whole before the server is involved (`proxy_request_buffering on`),
/// in memory up to `client_body_buffer_size` (16 KiB) and the rest in a temporary file in
/// `dir`/client_body.
pub fn nginx_upload_config(plan: Plan, dir: &Path) -> String {
    nginx_listen_config(plan, dir, NGINX_ANY_BODY_SIZE, "", HTTP1_SERVER.nginx)
}

/// `nginx_config` with `http_lines` (each ending in a newline) added to the `http` block and
/// `location_lines` to the `location /` block, after its lines that forward to the backend: for a
/// benchmark that adds a feature (the cache's `proxy_cache_path` and `proxy_cache`).
pub fn nginx_config_adding(
    plan: Plan,
    dir: &Path,
    http_lines: &str,
    location_lines: &str,
) -> String {
    let location = format!("{}{location_lines}", HTTP1_SERVER.nginx);
    nginx_listen_config(plan, dir, http_lines, "", &location)
}

/// nginx's configuration in front of the plan's one server, with `http_lines` (each ending in a
/// newline) after the head's lines of the `http` block, `listen_options` (each after a blank) on
/// its listen line and `location` as its `location /` block's body.
fn nginx_listen_config(
    plan: Plan,
    dir: &Path,
    http_lines: &str,
    listen_options: &str,
    location: &str,
) -> String {
    let one = Balancing {
        servers: &[plan.backend_port],
        method: "",
    };
    nginx_listen_config_with(
        plan,
        dir,
        http_lines,
        listen_options,
        location,
        &one.nginx_lines(),
    )
}

/// `nginx_listen_config` with `upstream_lines` (each ending in a newline; its servers among them)
/// in its upstream before its `keepalive`.
fn nginx_listen_config_with(
    plan: Plan,
    dir: &Path,
    http_lines: &str,
    listen_options: &str,
    location: &str,
    upstream_lines: &str,
) -> String {
    let Plan {
        port, backend_idle, ..
    } = plan;
    format!(
        r#"{head}{http_lines}
    upstream backend {{
{upstream_lines}        keepalive {backend_idle};
        keepalive_requests 1000000;
    }}

    server {{
        listen 127.0.0.1:{port}{listen_options} backlog={BACKLOG};
        location / {{
{location}        }}
    }}
}}
"#,
        head = nginx_head(plan, dir)
    )
}

/// nginx's configuration with TLS on every one of `listeners` (a `server` each, `listen … ssl`), in
/// front of the one backend: TLS 1.2 and 1.3, a shared session cache of 10 MB, tickets on. nginx
/// offers ALPN http/1.1 on an ssl listener without `http2`, h2 first with it.
pub fn nginx_tls_config(plan: Plan, listeners: &[TlsListener], dir: &Path) -> String {
    let Plan {
        backend_port,
        backend_idle,
        ..
    } = plan;
    let mut servers = String::new();
    for listener in listeners {
        let TlsCertificate { chain, key, .. } = &listener.certificate;
        let _ = write!(
            servers,
            r#"
    server {{
        listen 127.0.0.1:{port} ssl{http2} backlog={BACKLOG};
        ssl_certificate {chain};
        ssl_certificate_key {key};
        location / {{
{location}        }}
    }}
"#,
            port = listener.port,
            chain = chain.display(),
            key = key.display(),
            http2 = listener.http2_words().nginx,
            location = HTTP1_SERVER.nginx
        );
    }
    format!(
        r#"{head}    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    ssl_session_tickets on;

    upstream backend {{
        server 127.0.0.1:{backend_port};
        keepalive {backend_idle};
        keepalive_requests 1000000;
    }}
{servers}}}
"#,
        head = nginx_head(plan, dir)
    )
}

/// nginx's `worker_connections` for `plan`. It counts client and backend connections alike; nginx
/// allocates that many connection structures per worker up front. Once fewer than 1/16 of them
/// are free, nginx closes idle keep-alive clients to make room (ngx_drain_connections), so the
/// need is 16/15 of the connections the run opens, or it would drop the idle clients it should
/// hold.
pub fn nginx_worker_connections(plan: Plan) -> u64 {
    plan.descriptors_needed() * 16 / 15 + 1
}

/// nginx's configuration up to the open `http` block's first lines, as every benchmark's nginx
/// has it: workers and their connections and files, no access log, keep-alive clients kept, the
/// temporary files in `dir`. The caller adds its upstreams and servers and closes the block.
pub fn nginx_head(plan: Plan, dir: &Path) -> String {
    let Plan {
        workers,
        descriptor_limit,
        ..
    } = plan;
    let dir = dir.display();
    let worker_connections = nginx_worker_connections(plan);
    // One worker runs without a master, as one process like the others; more need the master.
    let master = if workers == 1 { "off" } else { "on" };
    // keepalive_requests defaults to 1000 on both sides; raised so that nginx, like the others,
    // never closes a busy keep-alive connection during a run.
    format!(
        r#"worker_processes {workers};
worker_rlimit_nofile {descriptor_limit};
master_process {master};
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections {worker_connections};
}}

http {{
    access_log off;
    keepalive_timeout {CLIENT_IDLE_SECONDS}s;
    keepalive_requests 1000000;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::markdown::assert_contains_all;

    const PLAN: Plan = Plan {
        workers: 2,
        port: 4100,
        backend_port: 4200,
        backend_idle: 64,
        client_connections: 15_050,
        descriptor_limit: 20_000,
    };

    #[test]
    fn every_config_listens_and_forwards_where_planned() {
        let dir = Path::new("/tmp/x");
        for text in [
            herdsman_config(PLAN, None),
            haproxy_config(PLAN),
            nginx_config(PLAN, dir),
        ] {
            assert!(text.contains("127.0.0.1:4100"), "{text}");
            assert!(text.contains("127.0.0.1:4200"), "{text}");
        }
    }

    #[test]
    fn nginx_keeps_a_backend_connection_per_client_and_herdsman_its_default() {
        let many = Plan {
            backend_idle: 200,
            ..PLAN
        };
        assert!(nginx_config(many, Path::new("/tmp/x")).contains("keepalive 200;"));
        // herdsman keeps what its own default keeps, as a user's does.
        assert!(!herdsman_config(many, None).contains("[limits]"));
        assert!(!herdsman_tls_config(many, &tls_listeners(), None).contains("[limits]"));
    }

    #[test]
    fn worker_counts_are_equal() {
        assert!(herdsman_config(PLAN, None).starts_with("workers = 2\n"));
        assert!(haproxy_config(PLAN).contains("nbthread 2\n"));
        let nginx = nginx_config(PLAN, Path::new("/tmp/x"));
        assert!(nginx.contains("worker_processes 2;") && nginx.contains("master_process on;"));
        let single = Plan { workers: 1, ..PLAN };
        assert!(nginx_config(single, Path::new("/tmp/x")).contains("master_process off;"));
    }

    #[test]
    fn herdsman_gets_the_intake_line_only_when_asked() {
        assert!(!herdsman_config(PLAN, None).contains("intake"));
        let text = herdsman_config(PLAN, Some(IntakeMode::Reuseport));
        assert!(
            text.starts_with("workers = 2\nintake = \"reuseport\"\n"),
            "{text}"
        );
        // Top-level: before the first table.
        assert!(text.find("intake").unwrap() < text.find('[').unwrap());
        let text = herdsman_config(PLAN, Some(IntakeMode::Balanced));
        assert!(text.find("intake = \"balanced\"").unwrap() < text.find("[timeouts]").unwrap());
    }

    #[test]
    fn every_proxy_keeps_idle_clients_and_has_room_for_them() {
        let herdsman = herdsman_config(PLAN, None);
        assert!(
            herdsman.contains("[timeouts]\nclient_idle = \"300s\"\n"),
            "{herdsman}"
        );
        let haproxy = haproxy_config(PLAN);
        for line in [
            "maxconn 15150\n",
            "ulimit-n 20000\n",
            "no strict-limits\n",
            "tune.pool-high-fd-ratio 95\n",
            "timeout client 300s\n",
            "timeout http-keep-alive 300s\n",
        ] {
            assert!(haproxy.contains(line), "{line} in {haproxy}");
        }
        let nginx = nginx_config(PLAN, Path::new("/tmp/x"));
        for line in [
            "worker_rlimit_nofile 20000;",
            "worker_connections 16229;",
            "keepalive_timeout 300s;",
            // herdsman's default listen queue, and HAProxy's (its maxconn, capped by somaxconn).
            "listen 127.0.0.1:4100 backlog=4096;",
        ] {
            assert!(nginx.contains(line), "{line} in {nginx}");
        }
        assert_eq!(PLAN.descriptors_needed(), 15_214);
    }

    fn tls_listeners() -> Vec<TlsListener> {
        [(4101, "ecdsa"), (4102, "rsa")]
            .into_iter()
            .map(|(port, name)| TlsListener {
                port,
                certificate: TlsCertificate {
                    chain: PathBuf::from(format!("/tmp/x/{name}.pem")),
                    key: PathBuf::from(format!("/tmp/x/{name}.key")),
                    combined: PathBuf::from(format!("/tmp/x/{name}.combined.pem")),
                },
                http2: false,
            })
            .collect()
    }

    #[test]
    fn the_cleartext_configs_are_unchanged_by_the_tls_ones() {
        let haproxy = haproxy_config(PLAN);
        assert!(haproxy.contains(
            "    timeout http-keep-alive 300s\n\nfrontend bench\n    bind 127.0.0.1:4100\n"
        ));
        assert!(haproxy.ends_with("backend backend\n    server b1 127.0.0.1:4200\n"));
        assert!(haproxy.contains("X-Forwarded-Proto http\n"));
    }

    #[test]
    fn every_tls_config_serves_each_certificate_on_its_port() {
        let listeners = tls_listeners();
        let dir = Path::new("/tmp/x");
        let herdsman = herdsman_tls_config(PLAN, &listeners, Some(4300));
        let haproxy = haproxy_tls_config(PLAN, &listeners);
        let nginx = nginx_tls_config(PLAN, &listeners, dir);
        for text in [&herdsman, &haproxy, &nginx] {
            assert!(text.contains("127.0.0.1:4200"), "{text}");
            assert!(!text.contains("127.0.0.1:4100"), "{text}");
        }
        assert!(herdsman.starts_with("workers = 2\n"));
        assert_contains_all(
            &herdsman,
            &[
                "bind = \"127.0.0.1:4101\"\npool = \"backend\"\n[listener.tls]\n\
                 certificates = [{ chain = \"/tmp/x/ecdsa.pem\", key = \"/tmp/x/ecdsa.key\" }]\n\
                 min_version = \"1.2\"\n",
                "bind = \"127.0.0.1:4102\"",
                "/tmp/x/rsa.key",
                "[admin]\nbind = \"127.0.0.1:4300\"\n",
                "client_idle = \"300s\"",
            ],
        );
        // The admin table ends before the pool, which is not part of it.
        assert!(herdsman.find("[admin]").unwrap() < herdsman.find("[[pool]]").unwrap());
        assert!(!herdsman_tls_config(PLAN, &listeners, None).contains("[admin]"));
        assert_contains_all(
            &haproxy,
            &[
                "nbthread 2\n",
                "    bind 127.0.0.1:4101 ssl crt /tmp/x/ecdsa.combined.pem ssl-min-ver TLSv1.2 \
                 alpn http/1.1\n",
                "    bind 127.0.0.1:4102 ssl crt /tmp/x/rsa.combined.pem",
                "X-Forwarded-Proto https\n",
                "maxconn 15150\n",
            ],
        );
        assert_contains_all(
            &nginx,
            &[
                "worker_processes 2;",
                "listen 127.0.0.1:4101 ssl backlog=4096;\n        \
                 ssl_certificate /tmp/x/ecdsa.pem;\n        ssl_certificate_key /tmp/x/ecdsa.key;\n",
                "listen 127.0.0.1:4102 ssl backlog=4096;",
                "ssl_protocols TLSv1.2 TLSv1.3;",
                "ssl_session_cache shared:SSL:10m;",
                "ssl_session_tickets on;",
            ],
        );
        // Braces balance: every block nginx opens is closed.
        assert_eq!(nginx.matches('{').count(), nginx.matches('}').count());
    }

    /// A target of `kind` whose program is never run (for its configs).
    fn target(kind: ProxyKind) -> Target {
        Target {
            label: kind.to_string(),
            kind,
            program: PathBuf::from("/bin/true"),
            intake: None,
        }
    }

    #[test]
    fn http2_is_spoken_where_asked_in_each_proxy_s_words() {
        let dir = Path::new("/tmp/x");
        let h2c = |kind| target(kind).h2c_config(PLAN, dir).1;
        assert_contains_all(
            &h2c(ProxyKind::Herdsman),
            &["bind = \"127.0.0.1:4100\"\npool = \"backend\"\nh2c = true\n\n[[pool]]"],
        );
        assert_contains_all(
            &h2c(ProxyKind::Haproxy),
            &["    bind 127.0.0.1:4100 proto h2\n"],
        );
        assert_contains_all(
            &h2c(ProxyKind::Nginx),
            &["listen 127.0.0.1:4100 http2 backlog=4096;"],
        );
        // The HTTP/1.1 configs are the same as before HTTP/2 was asked for anywhere.
        assert!(!herdsman_config(PLAN, None).contains("h2c"));
        assert!(haproxy_config(PLAN).contains("    bind 127.0.0.1:4100\n"));

        let listeners: Vec<TlsListener> = tls_listeners()
            .into_iter()
            .map(|listener| TlsListener {
                http2: true,
                ..listener
            })
            .collect();
        assert_contains_all(
            &herdsman_tls_config(PLAN, &listeners[..1], None),
            &[
                "pool = \"backend\"\n[listener.tls]\n",
                "max_requests_per_connection",
            ],
        );
        assert_contains_all(
            &haproxy_tls_config(PLAN, &listeners[..1]),
            &["ssl-min-ver TLSv1.2 alpn h2,http/1.1\n"],
        );
        assert_contains_all(
            &nginx_tls_config(PLAN, &listeners[..1], dir),
            &["listen 127.0.0.1:4101 ssl http2 backlog=4096;"],
        );
        assert!(!herdsman_tls_config(PLAN, &tls_listeners(), None).contains("http2"));
    }

    #[test]
    fn grpc_is_h2c_on_both_sides_in_each_proxy_s_words() {
        let dir = Path::new("/tmp/x");
        let grpc = |kind: ProxyKind| {
            Target {
                label: kind.to_string(),
                kind,
                program: PathBuf::from("/bin/true"),
                intake: None,
            }
            .grpc_config(PLAN, dir)
            .1
        };
        assert_contains_all(
            &grpc(ProxyKind::Herdsman),
            &[
                "pool = \"backend\"\nh2c = true\n",
                "[[pool]]\nname = \"backend\"\nprotocol = \"h2c\"\nservers = [{ name = \"b1\", \
                 addr = \"127.0.0.1:4200\" }]\n",
                "max_requests_per_connection",
            ],
        );
        assert_contains_all(
            &grpc(ProxyKind::Haproxy),
            &[
                "    bind 127.0.0.1:4100 proto h2\n",
                "    server b1 127.0.0.1:4200 proto h2\n",
            ],
        );
        let nginx = grpc(ProxyKind::Nginx);
        assert_contains_all(
            &nginx,
            &[
                "listen 127.0.0.1:4100 http2 backlog=4096;",
                "location / {\n            grpc_pass grpc://backend;\n",
                "keepalive 64;",
            ],
        );
        assert!(!nginx.contains("proxy_pass"));
        assert_eq!(nginx.matches('{').count(), nginx.matches('}').count());
        // The HTTP/1.1 servers' configs keep their words.
        assert!(!herdsman_config(PLAN, None).contains("protocol"));
        assert!(nginx_config(PLAN, dir).contains("proxy_pass http://backend;"));
    }

    #[test]
    fn a_balanced_config_names_every_server_and_the_method_in_each_proxy_s_words() {
        let dir = Path::new("/tmp/x");
        let servers = [4200, 4201, 4202];
        let config = |kind, method| {
            let balancing = Balancing {
                servers: &servers,
                method,
            };
            target(kind).balanced_config(PLAN, balancing, dir).1
        };
        let herdsman = config(ProxyKind::Herdsman, "least-conn");
        assert_contains_all(
            &herdsman,
            &["[[pool]]\nname = \"backend\"\nbalance = \"least-conn\"\nservers = [{ name = \"b1\", \
               addr = \"127.0.0.1:4200\" }, { name = \"b2\", addr = \"127.0.0.1:4201\" }, { name = \
               \"b3\", addr = \"127.0.0.1:4202\" }]\n"],
        );
        let parsed: toml::Table = herdsman.parse().unwrap();
        assert_eq!(parsed["pool"][0]["servers"].as_array().unwrap().len(), 3);
        assert_contains_all(
            &config(ProxyKind::Haproxy, "leastconn"),
            &[
                "backend backend\n    balance leastconn\n    server b1 127.0.0.1:4200\n    \
               server b2 127.0.0.1:4201\n    server b3 127.0.0.1:4202\n",
            ],
        );
        let nginx = config(ProxyKind::Nginx, "random two least_conn");
        assert_contains_all(
            &nginx,
            &[
                "upstream backend {\n        server 127.0.0.1:4200;\n        server \
               127.0.0.1:4201;\n        server 127.0.0.1:4202;\n        zone backend 1m;\n        \
               random two least_conn;\n        keepalive 64;\n",
            ],
        );
        assert_eq!(nginx.matches('{').count(), nginx.matches('}').count());
        // One server and no method: the plain config.
        for kind in [ProxyKind::Herdsman, ProxyKind::Haproxy, ProxyKind::Nginx] {
            let one = Balancing {
                servers: &[4200],
                method: "",
            };
            assert_eq!(
                target(kind).balanced_config(PLAN, one, dir),
                target(kind).config(PLAN, dir)
            );
        }
    }

    #[test]
    fn only_nginx_s_upload_config_differs_and_only_by_its_body_size_limit() {
        let dir = Path::new("/tmp/x");
        for kind in [ProxyKind::Herdsman, ProxyKind::Haproxy] {
            assert_eq!(
                target(kind).upload_config(PLAN, dir),
                target(kind).config(PLAN, dir)
            );
        }
        let (file, upload) = target(ProxyKind::Nginx).upload_config(PLAN, dir);
        assert_eq!(file, "nginx.conf");
        assert_eq!(
            upload.replacen(NGINX_ANY_BODY_SIZE, "", 1),
            nginx_config(PLAN, dir)
        );
        assert_contains_all(
            &upload,
            &["    scgi_temp_path /tmp/x/scgi;\n    client_max_body_size 0;\n"],
        );
        assert!(!nginx_config(PLAN, dir).contains("client_max_body_size"));
        assert!(!upload.contains("proxy_request_buffering"));
    }

    #[test]
    fn nginx_keeps_its_files_in_the_scratch_directory() {
        let nginx = nginx_config(PLAN, Path::new("/tmp/x"));
        for line in nginx
            .lines()
            .filter(|l| l.contains("_path") || l.contains("pid"))
        {
            assert!(line.contains("/tmp/x/"), "{line}");
        }
    }
}
