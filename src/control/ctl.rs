//! `herdsman ctl`: the admin API for people. Each command is one request — a plain blocking
//! HTTP/1.1 exchange over a `TcpStream`, `Connection: close`, read to the end — and prints one
//! line of confirmation (or the table of servers), or says why the call failed: herdsman not
//! reachable, the token refused, or the API's own reason (no such server, a bad value, a config
//! file that does not validate, with its problems). `upgrade` is the exception: after its
//! request it asks `GET /api/workers` until the new process serves and the old one has gone.
//!
//! It reaches the API on TCP (`--admin ADDR`) or on its UNIX socket (`--socket PATH`); with
//! `--config FILE` it finds either in the file's `[admin]` (the socket when there is one).
//!
//! The commands are parsed here (clap), so that `main.rs` only hands them over and the mapping
//! from command to request is unit-tested. `herdsman top` reaches the API the same way: the
//! `--admin`, `--socket` and `--config` options ([`AdminAddress`]), the token
//! ([`token_from_env`]), [`get_json`], and the column layout of text tables ([`aligned_columns`])
//! are shared from here.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::is_valid_name;
use crate::stats::traffic::TrafficTotals;

/// Where `ctl` looks for the admin API unless `--admin` says otherwise: the demo's and the
/// documented default `[admin] bind`.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9900";
/// The environment variable `ctl` reads the admin token from.
pub const TOKEN_ENV: &str = "HERDSMAN_ADMIN_TOKEN";
/// How long to wait for the connection to be accepted.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long any one read or write may take; a reload reads and checks a file, still quick.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response read; `GET /api/pools` for thousands of servers is well under it.
const MAX_RESPONSE: u64 = 16 * 1024 * 1024;

/// `--admin ADDR`, `--socket PATH` or `--config FILE`: which herdsman's admin API a client
/// command talks to (`ctl`, `top`).
#[derive(Debug, Args)]
pub struct AdminAddress {
    /// The admin API's address (`[admin] bind` of the herdsman to talk to). The token, when the
    /// admin API needs one, is read from HERDSMAN_ADMIN_TOKEN.
    #[arg(long, global = true, value_name = "ADDR", default_value = DEFAULT_ADMIN)]
    pub admin: String,
    /// The admin API's UNIX socket (`[admin] socket`), instead of --admin.
    #[arg(long, global = true, value_name = "PATH", conflicts_with = "config")]
    pub socket: Option<PathBuf>,
    /// herdsman's config file: its `[admin] socket`, or else its `bind`, instead of --admin.
    #[arg(short, long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl AdminAddress {
    /// Where to reach the admin API: a `host:port`, or a socket's path (which starts with `/`,
    /// as every `[admin] socket` must).
    pub fn endpoint(&self) -> Result<String, CtlError> {
        if let Some(socket) = &self.socket {
            return Ok(socket.display().to_string());
        }
        let Some(file) = &self.config else {
            return Ok(self.admin.clone());
        };
        let config = crate::Config::load(file).map_err(|error| CtlError::BadAddress {
            admin: format!("--config {}", file.display()),
            why: error.to_string(),
        })?;
        let admin = config.admin.ok_or_else(|| CtlError::BadAddress {
            admin: format!("--config {}", file.display()),
            why: "the file has no [admin]: herdsman runs no admin API".to_string(),
        })?;
        match (admin.socket, admin.bind) {
            (Some(socket), _) => Ok(socket.path.display().to_string()),
            (None, Some(bind)) => Ok(bind.to_string()),
            (None, None) => unreachable!("a checked [admin] has a bind or a socket"),
        }
    }
}

/// Whether `admin` names a UNIX socket rather than a TCP address.
fn is_socket(admin: &str) -> bool {
    admin.starts_with('/')
}

/// The admin token from [`TOKEN_ENV`], if set and not empty.
pub fn token_from_env() -> Option<String> {
    std::env::var(TOKEN_ENV)
        .ok()
        .filter(|token| !token.is_empty())
}

/// `herdsman ctl [--admin ADDR] COMMAND`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    #[command(flatten)]
    pub target: AdminAddress,
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum CtlCommand {
    /// List every pool's servers: address, state, weight, requests in flight and served.
    Servers,
    /// Send a server no new sessions; sticky clients and requests in flight still reach it.
    Drain {
        #[arg(value_name = "POOL/SERVER", value_parser = parse_server_path)]
        server: ServerPath,
    },
    /// Send a server everything again.
    Ready {
        #[arg(value_name = "POOL/SERVER", value_parser = parse_server_path)]
        server: ServerPath,
    },
    /// Send a server nothing new (requests in flight finish).
    Maint {
        #[arg(value_name = "POOL/SERVER", value_parser = parse_server_path)]
        server: ServerPath,
    },
    /// Send a server only requests carrying its test token (see `test-token`).
    Test {
        #[arg(value_name = "POOL/SERVER", value_parser = parse_server_path)]
        server: ServerPath,
    },
    /// Set a server's weight (0 to 256; 0 takes no new requests).
    Weight {
        #[arg(value_name = "POOL/SERVER", value_parser = parse_server_path)]
        server: ServerPath,
        weight: u32,
    },
    /// Add a server to a pool while herdsman runs.
    Add {
        /// The pool to add it to.
        #[arg(value_parser = parse_name)]
        pool: String,
        /// The new server's name, unique in the pool.
        #[arg(value_parser = parse_name)]
        name: String,
        /// An IP address and port, e.g. 127.0.0.1:9003.
        addr: String,
        /// Default 1.
        #[arg(long)]
        weight: Option<u32>,
        /// ready, drain, maint or test. Default ready.
        #[arg(long)]
        state: Option<String>,
    },
    /// Remove a server from its pool; requests in flight to it finish.
    Remove {
        #[arg(value_name = "POOL/SERVER", value_parser = parse_server_path)]
        server: ServerPath,
    },
    /// Re-read the config file; run-time changes that still apply are kept.
    Reload,
    /// Start the binary again (the new one, if the file was replaced), handing it the listening
    /// sockets (as SIGUSR2 does); then wait until the new process serves and the old one, having
    /// finished its connections, has gone.
    Upgrade {
        /// Return once the upgrade is asked for, without waiting for either process.
        #[arg(long)]
        no_wait: bool,
        /// Wait at most this long for the old process to go; it goes on draining afterwards.
        #[arg(
            long,
            value_name = "SECONDS",
            default_value_t = 60,
            conflicts_with = "no_wait"
        )]
        wait: u64,
    },
    /// Print the token that reaches a server in the `test` state, and the header to send it in.
    TestToken {
        #[arg(value_name = "POOL/SERVER", value_parser = parse_server_path)]
        server: ServerPath,
    },
}

/// A server named as `POOL/SERVER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPath {
    pub pool: String,
    pub server: String,
}

impl std::fmt::Display for ServerPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.pool, self.server)
    }
}

fn parse_server_path(text: &str) -> Result<ServerPath, String> {
    let Some((pool, server)) = text.split_once('/') else {
        return Err("expected POOL/SERVER, e.g. app/b".to_string());
    };
    Ok(ServerPath {
        pool: parse_name(pool)?,
        server: parse_name(server)?,
    })
}

/// A pool or server name; checked here because it becomes part of the request's path.
fn parse_name(text: &str) -> Result<String, String> {
    if is_valid_name(text) {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{text:?} is not a valid name: use up to 255 letters, digits, '_', '.' and '-'"
        ))
    }
}

/// The request a command makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    pub path: String,
    /// JSON.
    pub body: Option<String>,
}

impl CtlCommand {
    pub fn call(&self) -> Call {
        let call = |method, path: String, body: Option<Value>| Call {
            method,
            path,
            body: body.map(|body| body.to_string()),
        };
        let server_path = |s: &ServerPath| format!("/api/pools/{}/servers/{}", s.pool, s.server);
        match self {
            CtlCommand::Servers => call("GET", "/api/pools".into(), None),
            CtlCommand::Drain { server }
            | CtlCommand::Ready { server }
            | CtlCommand::Maint { server }
            | CtlCommand::Test { server } => call(
                "PUT",
                format!("{}/state", server_path(server)),
                Some(json!({ "state": self.state_word() })),
            ),
            CtlCommand::Weight { server, weight } => call(
                "PUT",
                format!("{}/weight", server_path(server)),
                Some(json!({ "weight": weight })),
            ),
            CtlCommand::Add {
                pool,
                name,
                addr,
                weight,
                state,
            } => {
                let mut body = json!({ "name": name, "addr": addr });
                if let Some(weight) = weight {
                    body["weight"] = json!(weight);
                }
                if let Some(state) = state {
                    body["state"] = json!(state);
                }
                call("POST", format!("/api/pools/{pool}/servers"), Some(body))
            }
            CtlCommand::Remove { server } => call("DELETE", server_path(server), None),
            CtlCommand::Reload => call("POST", "/api/reload".into(), None),
            CtlCommand::Upgrade { .. } => call("POST", "/api/upgrade".into(), None),
            CtlCommand::TestToken { server } => {
                call("GET", format!("{}/test-token", server_path(server)), None)
            }
        }
    }

    /// The state a state command sets.
    fn state_word(&self) -> &'static str {
        match self {
            CtlCommand::Drain { .. } => "drain",
            CtlCommand::Ready { .. } => "ready",
            CtlCommand::Maint { .. } => "maint",
            _ => "test",
        }
    }

    /// What to print for the API's successful answer `body`.
    pub fn describe_success(&self, body: &[u8]) -> Result<String, CtlError> {
        let text = match self {
            CtlCommand::Servers => servers_table(&parse_json::<PoolsReply>(body)?),
            CtlCommand::Drain { server }
            | CtlCommand::Ready { server }
            | CtlCommand::Maint { server }
            | CtlCommand::Test { server } => {
                let reply: ServerReply = parse_json(body)?;
                format!("{server}: {}\n", reply.state)
            }
            CtlCommand::Weight { server, .. } => {
                let reply: ServerReply = parse_json(body)?;
                format!("{server}: weight {}\n", reply.weight)
            }
            CtlCommand::Add { pool, .. } => {
                let reply: ServerReply = parse_json(body)?;
                format!(
                    "{pool}/{}: added at {}, weight {}, {}\n",
                    reply.name, reply.addr, reply.weight, reply.state
                )
            }
            CtlCommand::Remove { server } => {
                let reply: ServerReply = parse_json(body)?;
                format!("{server}: removed (was at {})\n", reply.addr)
            }
            CtlCommand::Reload => {
                let reply: ReloadReply = parse_json(body)?;
                let mut text = format!("reloaded: generation {}\n", reply.generation);
                if !reply.restart_required.is_empty() {
                    let _ = writeln!(
                        text,
                        "changed in the file, taking effect on restart (or upgrade): {}",
                        reply.restart_required.join(", ")
                    );
                }
                text
            }
            CtlCommand::Upgrade { .. } => {
                "upgrading: the new process takes over once it serves (see the log)\n".to_string()
            }
            CtlCommand::TestToken { .. } => {
                let reply: TestTokenReply = parse_json(body)?;
                // The token alone first, for scripts; then how to use it.
                format!("{}\n{}: {}\n", reply.token, reply.header, reply.token)
            }
        };
        Ok(text)
    }
}

/// Why a `ctl` command failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("{admin}: {why}")]
    BadAddress { admin: String, why: String },
    #[error("cannot reach the admin API at {admin}: {why} — {}", where_to_look(.admin))]
    Unreachable { admin: String, why: String },
    #[error("the admin API at {admin} did not answer: {why}")]
    NoAnswer { admin: String, why: String },
    #[error(
        "the admin API wants a token: set {TOKEN_ENV} to the token herdsman was started with \
         (the variable its [admin] token_env names)"
    )]
    TokenMissing,
    #[error(
        "the admin API refused the token: set {TOKEN_ENV} to the token herdsman was started \
         with (the variable its [admin] token_env names)"
    )]
    TokenRefused,
    /// The API's own reason, and a refused reload's problems.
    #[error("{}", refusal_text(.message, .problems))]
    Refused {
        status: u16,
        message: String,
        problems: Vec<String>,
    },
    #[error("the admin API's answer is not understood: {0}")]
    Malformed(String),
    #[error(
        "pid {pid} still serves {waited} s after the upgrade was asked for: the new process \
         failed to start or is slow to; see the log of pid {pid}"
    )]
    NotUpgraded { pid: u32, waited: u64 },
}

/// The hint after "cannot reach": which `[admin]` key the address should match, and how to name
/// another.
fn where_to_look(admin: &str) -> String {
    let key = if is_socket(admin) { "socket" } else { "bind" };
    format!(
        "is herdsman running with [admin] {key} = \"{admin}\"? (another address: --admin ADDR; \
         a socket: --socket PATH; the one a config names: --config FILE)"
    )
}

fn refusal_text(message: &str, problems: &[String]) -> String {
    let mut text = message.to_string();
    for problem in problems {
        let _ = write!(text, "\n  {problem}");
    }
    text
}

/// Runs one command against the admin API at `args.target.admin`, sending `token` if there is
/// one; returns what to print. A command that waits (`upgrade`) writes its progress meanwhile,
/// a line at a time, to `progress`.
pub fn run(
    args: &CtlArgs,
    token: Option<&str>,
    progress: &mut dyn Write,
) -> Result<String, CtlError> {
    let admin = args.target.endpoint()?;
    if let CtlCommand::Upgrade {
        no_wait: false,
        wait,
    } = args.command
    {
        let limit = Duration::from_secs(wait);
        return upgrade_and_wait(&admin, token, limit, progress);
    }
    let body = call_api(&admin, token, &args.command.call())?;
    args.command.describe_success(&body)
}

/// How often `upgrade` asks how the upgrade is going.
const UPGRADE_POLL: Duration = Duration::from_millis(250);

/// `GET /api/workers`, as far as `upgrade` reads it.
#[derive(Debug, Deserialize)]
struct UpgradeWatch {
    pid: u32,
    /// Absent from a herdsman that does not report them.
    predecessors: Option<Vec<DrainingReply>>,
}

#[derive(Debug, Deserialize)]
struct DrainingReply {
    pid: u32,
    connections: Option<u64>,
}

/// `upgrade` without `--no-wait`: asks for the upgrade, waits (within `limit`) until another
/// process answers the admin API, then until it reports no older process still draining.
fn upgrade_and_wait(
    admin: &str,
    token: Option<&str>,
    limit: Duration,
    progress: &mut dyn Write,
) -> Result<String, CtlError> {
    let old = get_json::<UpgradeWatch>(admin, token, "/api/workers")?.pid;
    let asked = std::time::Instant::now();
    call_api(
        admin,
        token,
        &CtlCommand::Upgrade {
            no_wait: true,
            wait: 0,
        }
        .call(),
    )?;
    let out_of_time = || asked.elapsed() >= limit;
    // The admin API's socket is handed over too: the new process answers on it once it serves.
    let serving = loop {
        match get_json::<UpgradeWatch>(admin, token, "/api/workers") {
            Ok(watch) if watch.pid != old => break watch,
            Ok(_) => {}
            // Between the two processes, a call may go unanswered.
            Err(CtlError::Unreachable { .. } | CtlError::NoAnswer { .. }) => {}
            Err(error) => return Err(error),
        }
        if out_of_time() {
            return Err(CtlError::NotUpgraded {
                pid: old,
                waited: asked.elapsed().as_secs(),
            });
        }
        std::thread::sleep(UPGRADE_POLL);
    };
    let new = serving.pid;
    let mut old_pids = vec![old];
    let mut draining = match serving.predecessors {
        Some(draining) => draining,
        None => {
            return Ok(format!(
                "upgraded: pid {new} serves (it does not say when pid {old} has gone)\n"
            ))
        }
    };
    let mut said = String::new();
    while !draining.is_empty() {
        for entry in &draining {
            if !old_pids.contains(&entry.pid) {
                old_pids.push(entry.pid);
            }
        }
        let line = draining_line(&draining);
        if line != said {
            let _ = writeln!(progress, "{line}");
            said = line;
        }
        if out_of_time() {
            return Ok(format!(
                "upgraded: pid {new} serves; still draining after {} s: {said} (an old process \
                 exits once its connections close; GET /api/workers follows them)\n",
                limit.as_secs()
            ));
        }
        std::thread::sleep(UPGRADE_POLL);
        draining = get_json::<UpgradeWatch>(admin, token, "/api/workers")?
            .predecessors
            .unwrap_or_default();
    }
    let gone = match old_pids.as_slice() {
        [pid] => format!("the old process (pid {pid}) has gone"),
        pids => {
            let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
            format!("the old processes (pids {}) have gone", pids.join(", "))
        }
    };
    Ok(format!("upgraded: pid {new} serves; {gone}\n"))
}

/// `pid 4242: 3 connections still open; pid 4100: 1 connection still open`.
fn draining_line(draining: &[DrainingReply]) -> String {
    draining
        .iter()
        .map(|entry| match entry.connections {
            Some(1) => format!("pid {}: 1 connection still open", entry.pid),
            Some(count) => format!("pid {}: {count} connections still open", entry.pid),
            None => format!("pid {}: counting its connections", entry.pid),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `GET path` on the admin API at `admin`, its JSON answer read as a `T`.
pub fn get_json<T: DeserializeOwned>(
    admin: &str,
    token: Option<&str>,
    path: &str,
) -> Result<T, CtlError> {
    let call = Call {
        method: "GET",
        path: path.to_string(),
        body: None,
    };
    parse_json(&call_api(admin, token, &call)?)
}

/// Makes `call` and returns the body of a successful answer; any other answer is the error it
/// stands for.
fn call_api(admin: &str, token: Option<&str>, call: &Call) -> Result<Vec<u8>, CtlError> {
    let response = exchange(admin, token, call)?;
    match response.status {
        200..=299 => Ok(response.body),
        401 if token.is_some() => Err(CtlError::TokenRefused),
        401 => Err(CtlError::TokenMissing),
        status => Err(refusal(status, &response.body)),
    }
}

/// The API's `{"error": …, "problems": […]}`, or the raw body when it is not that.
fn refusal(status: u16, body: &[u8]) -> CtlError {
    match serde_json::from_slice::<ErrorReply>(body) {
        Ok(reply) => CtlError::Refused {
            status,
            message: reply.error,
            problems: reply.problems,
        },
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            CtlError::Refused {
                status,
                message: if text.is_empty() {
                    format!("the admin API answered {status}")
                } else {
                    format!("the admin API answered {status}: {text}")
                },
                problems: Vec::new(),
            }
        }
    }
}

/// A response as read: the status and the body.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Makes `call` on a new connection to `admin` and reads the whole response.
fn exchange(admin: &str, token: Option<&str>, call: &Call) -> Result<Reply, CtlError> {
    let mut stream = connect(admin)?;
    let no_answer = |error: io::Error| CtlError::NoAnswer {
        admin: admin.to_string(),
        why: describe_io(&error),
    };
    stream.set_timeouts(IO_TIMEOUT).map_err(no_answer)?;
    // On the socket there is no host: the API answers to `localhost`.
    let host = if is_socket(admin) { "localhost" } else { admin };
    stream
        .write_all(&request_bytes(host, token, call))
        .map_err(no_answer)?;
    let mut received = Vec::new();
    let read = (&mut stream).take(MAX_RESPONSE).read_to_end(&mut received);
    match (parse_reply(&received), read) {
        (Ok(reply), _) => Ok(reply),
        // A reset after the whole response does not matter; before it, it is the failure.
        (Err(_), Err(error)) => Err(no_answer(error)),
        (Err(why), Ok(_)) => Err(CtlError::Malformed(why)),
    }
}

/// A connection to the admin API, on TCP or on its UNIX socket.
enum Connection {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Connection {
    fn set_timeouts(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Connection::Tcp(stream) => {
                stream.set_read_timeout(Some(timeout))?;
                stream.set_write_timeout(Some(timeout))
            }
            Connection::Unix(stream) => {
                stream.set_read_timeout(Some(timeout))?;
                stream.set_write_timeout(Some(timeout))
            }
        }
    }
}

impl Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Connection::Tcp(stream) => stream.read(buf),
            Connection::Unix(stream) => stream.read(buf),
        }
    }
}

impl Write for Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Connection::Tcp(stream) => stream.write(buf),
            Connection::Unix(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Connection::Tcp(stream) => stream.flush(),
            Connection::Unix(stream) => stream.flush(),
        }
    }
}

fn connect(admin: &str) -> Result<Connection, CtlError> {
    if is_socket(admin) {
        return UnixStream::connect(admin)
            .map(Connection::Unix)
            .map_err(|error| CtlError::Unreachable {
                admin: admin.to_string(),
                why: describe_io(&error),
            });
    }
    let bad_address = |why: String| CtlError::BadAddress {
        admin: format!("--admin {admin}"),
        why,
    };
    let addrs: Vec<SocketAddr> = admin
        .to_socket_addrs()
        .map_err(|error| bad_address(format!("not an address and port ({error})")))?
        .collect();
    let mut last_error = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, CONNECT_TIMEOUT) {
            Ok(stream) => return Ok(Connection::Tcp(stream)),
            Err(error) => last_error = Some(error),
        }
    }
    Err(CtlError::Unreachable {
        admin: admin.to_string(),
        why: last_error.map_or_else(
            || "the name has no address".to_string(),
            |e| describe_io(&e),
        ),
    })
}

/// An io error in the words a person expects.
fn describe_io(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => "no answer in time".to_string(),
        io::ErrorKind::ConnectionReset => "the connection was reset".to_string(),
        io::ErrorKind::PermissionDenied => {
            "permission denied (the socket's file mode keeps this user out)".to_string()
        }
        io::ErrorKind::NotFound => "no such socket".to_string(),
        _ => error.to_string(),
    }
}

pub fn request_bytes(host: &str, token: Option<&str>, call: &Call) -> Vec<u8> {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: herdsman-ctl/{}\r\n\
         Accept: application/json\r\nConnection: close\r\n",
        call.method,
        call.path,
        env!("CARGO_PKG_VERSION"),
    );
    if let Some(token) = token {
        let _ = write!(head, "Authorization: Bearer {token}\r\n");
    }
    let body = call.body.as_deref().unwrap_or("");
    // Every change says JSON, body or not: the API refuses any other (a browser on another
    // origin could send a form, not JSON).
    if call.body.is_some() || !matches!(call.method, "GET" | "HEAD") {
        head.push_str("Content-Type: application/json\r\n");
    }
    if call.body.is_some() || call.method == "POST" {
        let _ = write!(head, "Content-Length: {}\r\n", body.len());
    }
    head.push_str("\r\n");
    head.push_str(body);
    head.into_bytes()
}

/// Parses a whole response: the status line, the head, and a body of Content-Length bytes (or
/// everything after the head when there is none: the server closes after it).
pub fn parse_reply(bytes: &[u8]) -> Result<Reply, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.is_empty() => {
            return Err("the connection closed without a response".to_string())
        }
        Ok(httparse::Status::Partial) => return Err("the response head is cut short".to_string()),
        Err(error) => return Err(format!("not an HTTP response ({error})")),
    };
    let status = response.code.unwrap_or(0);
    let rest = &bytes[head_len..];
    let length = response
        .headers
        .iter()
        .find(|header| header.name.eq_ignore_ascii_case("content-length"))
        .map(|header| {
            std::str::from_utf8(header.value)
                .ok()
                .and_then(|value| value.trim().parse::<usize>().ok())
                .ok_or("a Content-Length that is not a number")
        })
        .transpose()?;
    let body = match length {
        Some(length) if length > rest.len() => {
            return Err(format!(
                "the body is cut short ({} of {length} bytes)",
                rest.len()
            ))
        }
        Some(length) => &rest[..length],
        None => rest,
    };
    Ok(Reply {
        status,
        body: body.to_vec(),
    })
}

fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, CtlError> {
    serde_json::from_slice(body).map_err(|error| CtlError::Malformed(error.to_string()))
}

/// `GET /api/pools`, as far as `ctl` and `top` read it (unknown fields ignored, so that a newer
/// herdsman still answers an older `ctl`; missing ones default, so that an older one answers a
/// newer `ctl`).
#[derive(Debug, Deserialize)]
pub struct PoolsReply {
    /// The published snapshot's: one more with each change and reload (absent from herdsman
    /// before reloads: 0).
    #[serde(default)]
    pub generation: u64,
    pub pools: Vec<PoolReply>,
}

#[derive(Debug, Deserialize)]
pub struct PoolReply {
    pub name: String,
    pub servers: Vec<ServerReply>,
}

#[derive(Debug, Deserialize)]
pub struct ServerReply {
    pub name: String,
    pub addr: String,
    pub state: String,
    /// "up", "down" or "ejected" (absent from herdsman before health checks: up).
    #[serde(default = "up")]
    pub health: String,
    pub weight: u32,
    #[serde(default)]
    pub active: u64,
    #[serde(default)]
    pub requests: u64,
    /// Its requests since it joined, by ending and duration (absent from herdsman before
    /// traffic counters: none).
    #[serde(default)]
    pub traffic: TrafficTotals,
}

fn up() -> String {
    "up".to_string()
}

#[derive(Debug, Deserialize)]
struct ReloadReply {
    generation: u64,
    /// Absent from herdsman before it said: none.
    #[serde(default)]
    restart_required: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct TestTokenReply {
    header: String,
    token: String,
}

#[derive(Debug, Deserialize)]
struct ErrorReply {
    error: String,
    #[serde(default)]
    problems: Vec<String>,
}

/// The table `ctl servers` prints: one row per server, columns aligned, numbers to the right.
/// A pool without servers gets a row saying so.
pub fn servers_table(reply: &PoolsReply) -> String {
    const HEADINGS: [&str; 8] = [
        "POOL", "SERVER", "ADDR", "STATE", "HEALTH", "WEIGHT", "ACTIVE", "REQUESTS",
    ];
    /// The columns whose cells are numbers.
    const NUMERIC: [bool; 8] = [false, false, false, false, false, true, true, true];
    let mut rows: Vec<Vec<String>> = vec![HEADINGS.map(str::to_string).to_vec()];
    for pool in &reply.pools {
        if pool.servers.is_empty() {
            rows.push(vec![pool.name.clone(), "(no servers)".to_string()]);
        }
        for server in &pool.servers {
            rows.push(vec![
                pool.name.clone(),
                server.name.clone(),
                server.addr.clone(),
                server.state.clone(),
                server.health.clone(),
                server.weight.to_string(),
                server.active.to_string(),
                server.requests.to_string(),
            ]);
        }
    }
    aligned_columns(&rows, &NUMERIC)
}

/// How wide each column of `rows` is: its widest cell, in characters.
pub fn column_widths(rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths = Vec::new();
    for row in rows {
        widths.resize(widths.len().max(row.len()), 0);
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    widths
}

/// `rows` (the headings first) as lines of text: columns two spaces apart, each as wide as its
/// widest cell, the `numeric` ones right-aligned and the others left-aligned, no trailing blanks.
/// A row may be shorter than the others: its missing cells are blank.
pub fn aligned_columns(rows: &[Vec<String>], numeric: &[bool]) -> String {
    let widths = column_widths(rows);
    let mut table = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column > 0 {
                line.push_str("  ");
            }
            let width = widths[column];
            if numeric.get(column).copied().unwrap_or(false) {
                let _ = write!(line, "{cell:>width$}");
            } else {
                let _ = write!(line, "{cell:<width$}");
            }
        }
        table.push_str(line.trim_end());
        table.push('\n');
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `ctl`'s arguments as the binary wraps them.
    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        ctl: CtlArgs,
    }

    fn parse(args: &[&str]) -> Result<CtlArgs, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("ctl").chain(args.iter().copied()))
            .map(|wrapper| wrapper.ctl)
    }

    fn call_of(args: &[&str]) -> Call {
        parse(args)
            .unwrap_or_else(|error| panic!("{args:?}: {error}"))
            .command
            .call()
    }

    fn body_json(call: &Call) -> Value {
        serde_json::from_str(call.body.as_deref().expect("a body")).unwrap()
    }

    #[test]
    fn commands_become_requests() {
        let call = call_of(&["servers"]);
        assert_eq!((call.method, call.path.as_str()), ("GET", "/api/pools"));
        assert_eq!(call.body, None);

        for state in ["drain", "ready", "maint", "test"] {
            let call = call_of(&[state, "app/b"]);
            assert_eq!(call.method, "PUT");
            assert_eq!(call.path, "/api/pools/app/servers/b/state");
            assert_eq!(body_json(&call), json!({ "state": state }));
        }

        let call = call_of(&["weight", "app/b", "3"]);
        assert_eq!(
            (call.method, call.path.as_str()),
            ("PUT", "/api/pools/app/servers/b/weight")
        );
        assert_eq!(body_json(&call), json!({ "weight": 3 }));

        let call = call_of(&["add", "app", "c", "127.0.0.1:9003"]);
        assert_eq!(
            (call.method, call.path.as_str()),
            ("POST", "/api/pools/app/servers")
        );
        assert_eq!(
            body_json(&call),
            json!({ "name": "c", "addr": "127.0.0.1:9003" })
        );
        let call = call_of(&[
            "add",
            "app",
            "c",
            "127.0.0.1:9003",
            "--weight",
            "2",
            "--state",
            "test",
        ]);
        assert_eq!(
            body_json(&call),
            json!({ "name": "c", "addr": "127.0.0.1:9003", "weight": 2, "state": "test" })
        );

        let call = call_of(&["remove", "app/c"]);
        assert_eq!(
            (call.method, call.path.as_str()),
            ("DELETE", "/api/pools/app/servers/c")
        );
        let call = call_of(&["reload"]);
        assert_eq!((call.method, call.path.as_str()), ("POST", "/api/reload"));
        let call = call_of(&["test-token", "web.v2/b-1"]);
        assert_eq!(call.path, "/api/pools/web.v2/servers/b-1/test-token");
    }

    #[test]
    fn the_admin_address_is_an_option_anywhere() {
        assert_eq!(parse(&["servers"]).unwrap().target.admin, DEFAULT_ADMIN);
        let before = parse(&["--admin", "10.0.0.1:9999", "servers"]).unwrap();
        assert_eq!(before.target.admin, "10.0.0.1:9999");
        let after = parse(&["drain", "app/b", "--admin", "localhost:9901"]).unwrap();
        assert_eq!(after.target.admin, "localhost:9901");
    }

    #[test]
    fn bad_arguments_are_refused_before_any_request() {
        for args in [
            &["drain", "app"][..],
            &["drain", "app/b c"],
            &["drain", "/b"],
            &["drain", "app/b/c"],
            &["weight", "app/b", "heavy"],
            &["weight", "app/b", "-1"],
            &["add", "app", "c d", "127.0.0.1:1"],
            &["add", "app", "c"],
            &["frobnicate"],
            &[],
        ] {
            assert!(parse(args).is_err(), "{args:?} was accepted");
        }
        let message = parse(&["drain", "app"]).unwrap_err().to_string();
        assert!(message.contains("POOL/SERVER"), "{message}");
    }

    #[test]
    fn requests_are_complete_http() {
        let call = call_of(&["weight", "app/b", "3"]);
        let bytes = request_bytes("127.0.0.1:9900", Some("s3cret"), &call);
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.starts_with(
                "PUT /api/pools/app/servers/b/weight HTTP/1.1\r\nHost: 127.0.0.1:9900\r\n"
            ),
            "{text}"
        );
        assert!(text.contains("Authorization: Bearer s3cret\r\n"), "{text}");
        assert!(text.contains("Connection: close\r\n"), "{text}");
        assert!(
            text.ends_with("Content-Length: 12\r\n\r\n{\"weight\":3}"),
            "{text}"
        );

        let text = String::from_utf8(request_bytes("h:1", None, &call_of(&["reload"]))).unwrap();
        assert!(!text.contains("Authorization"), "{text}");
        assert!(text.ends_with("Content-Length: 0\r\n\r\n"), "{text}");
        let text = String::from_utf8(request_bytes("h:1", None, &call_of(&["servers"]))).unwrap();
        assert!(!text.contains("Content-Length"), "{text}");
    }

    #[test]
    fn replies_are_parsed_by_their_length() {
        let reply = parse_reply(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 2\r\n\r\n{}extra",
        )
        .unwrap();
        assert_eq!(
            reply,
            Reply {
                status: 200,
                body: b"{}".to_vec()
            }
        );
        let reply = parse_reply(b"HTTP/1.1 404 Not Found\r\n\r\nno length").unwrap();
        assert_eq!(
            (reply.status, reply.body.as_slice()),
            (404, &b"no length"[..])
        );
        assert!(parse_reply(b"").unwrap_err().contains("without a response"));
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\nContent-Le")
            .unwrap_err()
            .contains("cut short"));
        assert!(
            parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}")
                .unwrap_err()
                .contains("2 of 10")
        );
        assert!(parse_reply(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
    }

    #[test]
    fn refusals_carry_the_api_reason_and_problems() {
        let error = refusal(
            404,
            br#"{"error":"pool \"app\" has no server named \"zz\""}"#,
        );
        assert_eq!(error.to_string(), r#"pool "app" has no server named "zz""#);
        let error = refusal(
            400,
            br#"{"error":"the new config was refused; the running one stays","problems":["line 3: a","line 9: b"]}"#,
        );
        assert_eq!(
            error.to_string(),
            "the new config was refused; the running one stays\n  line 3: a\n  line 9: b"
        );
        let error = refusal(502, b"502 Bad Gateway\n");
        assert_eq!(
            error.to_string(),
            "the admin API answered 502: 502 Bad Gateway"
        );
    }

    #[test]
    fn upgrade_waits_unless_told_not_to() {
        let waits = |args: &[&str]| match parse(args).unwrap().command {
            CtlCommand::Upgrade { no_wait, wait } => (no_wait, wait),
            other => panic!("{other:?}"),
        };
        assert_eq!(waits(&["upgrade"]), (false, 60));
        assert_eq!(waits(&["upgrade", "--wait", "600"]), (false, 600));
        assert!(waits(&["upgrade", "--no-wait"]).0);
        assert!(parse(&["upgrade", "--no-wait", "--wait", "5"]).is_err());
        assert!(parse(&["upgrade", "--wait", "soon"]).is_err());
        let call = call_of(&["upgrade", "--no-wait"]);
        assert_eq!((call.method, call.path.as_str()), ("POST", "/api/upgrade"));
    }

    #[test]
    fn a_drain_reads_as_one_line_per_change() {
        let draining = [
            DrainingReply {
                pid: 4242,
                connections: Some(3),
            },
            DrainingReply {
                pid: 4100,
                connections: Some(1),
            },
            DrainingReply {
                pid: 4000,
                connections: None,
            },
        ];
        assert_eq!(
            draining_line(&draining),
            "pid 4242: 3 connections still open; pid 4100: 1 connection still open; \
             pid 4000: counting its connections"
        );
    }

    #[test]
    fn successes_print_one_line() {
        let server = br#"{"name":"b","addr":"127.0.0.1:9002","state":"drain","weight":3,
            "active":0,"requests":5,"added_at_run_time":false}"#;
        let describe = |args: &[&str], body: &[u8]| {
            parse(args).unwrap().command.describe_success(body).unwrap()
        };
        assert_eq!(describe(&["drain", "app/b"], server), "app/b: drain\n");
        assert_eq!(
            describe(&["weight", "app/b", "3"], server),
            "app/b: weight 3\n"
        );
        assert_eq!(
            describe(&["add", "app", "b", "127.0.0.1:9002"], server),
            "app/b: added at 127.0.0.1:9002, weight 3, drain\n"
        );
        assert_eq!(
            describe(&["remove", "app/b"], server),
            "app/b: removed (was at 127.0.0.1:9002)\n"
        );
        assert_eq!(
            describe(&["reload"], br#"{"generation":7}"#),
            "reloaded: generation 7\n"
        );
        assert_eq!(
            describe(
                &["reload"],
                br#"{"generation":8,"restart_required":["workers","[log] level"]}"#
            ),
            "reloaded: generation 8\n\
             changed in the file, taking effect on restart (or upgrade): workers, [log] level\n"
        );
        assert_eq!(
            describe(
                &["test-token", "app/b"],
                br#"{"header":"X-Herdsman-Test","token":"abc123"}"#
            ),
            "abc123\nX-Herdsman-Test: abc123\n"
        );
        let error = parse(&["drain", "app/b"])
            .unwrap()
            .command
            .describe_success(b"<html>")
            .unwrap_err();
        assert!(matches!(error, CtlError::Malformed(_)), "{error}");
    }

    #[test]
    fn the_servers_table_lines_up() {
        let reply: PoolsReply = serde_json::from_value(json!({
            "generation": 4,
            "pools": [
                { "name": "app", "balance": "round-robin", "servers": [
                    { "name": "a", "addr": "127.0.0.1:9001", "state": "ready", "weight": 1,
                      "active": 12, "requests": 1234567, "added_at_run_time": false },
                    { "name": "backend-2", "addr": "[::1]:9002", "state": "drain", "weight": 256,
                      "health": "ejected", "remaining_ms": 900,
                      "active": 0, "requests": 3, "added_at_run_time": true },
                ]},
                { "name": "empty", "balance": "p2c", "servers": [] },
            ],
        }))
        .unwrap();
        let expected = "\
POOL   SERVER        ADDR            STATE  HEALTH   WEIGHT  ACTIVE  REQUESTS
app    a             127.0.0.1:9001  ready  up            1      12   1234567
app    backend-2     [::1]:9002      drain  ejected     256       0         3
empty  (no servers)
";
        assert_eq!(servers_table(&reply), expected);
    }

    #[test]
    fn io_errors_read_as_sentences() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let error = CtlError::Unreachable {
            admin: "127.0.0.1:9900".into(),
            why: describe_io(&refused),
        };
        let message = error.to_string();
        assert!(
            message.starts_with("cannot reach the admin API at 127.0.0.1:9900: connection refused"),
            "{message}"
        );
        assert!(
            message.contains("[admin] bind = \"127.0.0.1:9900\""),
            "{message}"
        );
        assert!(CtlError::TokenRefused.to_string().contains(TOKEN_ENV));
        assert!(CtlError::TokenMissing.to_string().contains(TOKEN_ENV));
    }
}
