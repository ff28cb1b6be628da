//! How `ctl` and `top` reach the admin API: where (`--admin`, `--socket`, `--config`), with
//! which token, one request per connection (TCP or the UNIX socket, `Connection: close`, read to
//! the end), and the errors in words a person can act on.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::de::DeserializeOwned;
use serde::Deserialize;

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
        let config = herdsman::Config::load(file).map_err(|error| CtlError::BadAddress {
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

/// The request a command makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    pub path: String,
    /// JSON.
    pub body: Option<String>,
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
pub fn call_api(admin: &str, token: Option<&str>, call: &Call) -> Result<Vec<u8>, CtlError> {
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

pub fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, CtlError> {
    serde_json::from_slice(body).map_err(|error| CtlError::Malformed(error.to_string()))
}

#[derive(Debug, Deserialize)]
struct ErrorReply {
    error: String,
    #[serde(default)]
    problems: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

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
