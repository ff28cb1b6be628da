//! Where a server listens: an IP address and port, or a UNIX socket's path (`unix:/run/app.sock`,
//! nginx's spelling) for an application on the same machine — gunicorn, uvicorn, PHP-FPM behind
//! a web front. The config file and the admin API read it with one parser, and write it back as
//! they read it.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// The prefix that names a UNIX socket's path.
pub const UNIX_PREFIX: &str = "unix:";

/// A socket path's longest: `sun_path` holds 108 bytes, its terminating NUL one of them.
pub const MAX_SOCKET_PATH: usize = 107;

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerAddr {
    Tcp(SocketAddr),
    /// A UNIX stream socket's absolute path.
    Unix(Arc<Path>),
}

impl ServerAddr {
    /// `text` as a server's address: `unix:` and an absolute path, or an IP address and a port
    /// other than 0. The reason when it is neither, to follow the quoted text; `None` for a
    /// text that is not a `unix:` one and not a socket address (the caller names its mistake).
    pub fn parse(text: &str) -> Option<Result<ServerAddr, String>> {
        if let Some(path) = text.strip_prefix(UNIX_PREFIX) {
            return Some(unix_path(path).map(|path| ServerAddr::Unix(Arc::from(Path::new(path)))));
        }
        match text.parse::<SocketAddr>() {
            Ok(addr) if addr.port() == 0 => Some(Err(
                r#"port 0 cannot be connected to; write the server's port, e.g. "127.0.0.1:9001""#
                    .into(),
            )),
            Ok(addr) => Some(Ok(ServerAddr::Tcp(addr))),
            Err(_) => None,
        }
    }

    /// The IP address and port of a TCP server.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            ServerAddr::Tcp(addr) => Some(*addr),
            ServerAddr::Unix(_) => None,
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, ServerAddr::Unix(_))
    }
}

impl std::str::FromStr for ServerAddr {
    type Err = String;

    fn from_str(text: &str) -> Result<ServerAddr, String> {
        ServerAddr::parse(text).unwrap_or_else(|| Err("not a socket address".into()))
    }
}

impl From<SocketAddr> for ServerAddr {
    fn from(addr: SocketAddr) -> ServerAddr {
        ServerAddr::Tcp(addr)
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerAddr::Tcp(addr) => addr.fmt(f),
            ServerAddr::Unix(path) => write!(f, "{UNIX_PREFIX}{}", path.display()),
        }
    }
}

/// The path after `unix:`, or why it cannot be a socket's: an absolute path (a relative one
/// would depend on the directory herdsman was started in), short enough for `sun_path`. Linux's
/// abstract sockets (a name starting with NUL, `@` in `ss`) are not taken.
fn unix_path(path: &str) -> Result<&str, String> {
    if path.is_empty() {
        return Err(r#"no path after "unix:"; write e.g. "unix:/run/app.sock""#.into());
    }
    if !path.starts_with('/') {
        return Err(format!(
            r#"a UNIX socket's path must be absolute; write e.g. "unix:/{}""#,
            path.trim_start_matches('@')
        ));
    }
    if path.len() > MAX_SOCKET_PATH {
        return Err(format!(
            "a UNIX socket's path is at most {MAX_SOCKET_PATH} bytes (this one is {})",
            path.len()
        ));
    }
    if path.contains('\0') {
        return Err("a UNIX socket's path cannot hold a NUL byte".into());
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_and_unix_addresses_read_and_write_back_as_written() {
        for text in ["127.0.0.1:9001", "[::1]:8080", "unix:/run/app.sock"] {
            let addr = ServerAddr::parse(text).unwrap().unwrap();
            assert_eq!(addr.to_string(), text);
        }
        let unix = ServerAddr::parse("unix:/run/app.sock").unwrap().unwrap();
        assert!(unix.is_unix());
        assert_eq!(unix.tcp(), None);
        assert_eq!(
            ServerAddr::parse("10.0.0.1:80").unwrap().unwrap().tcp(),
            Some("10.0.0.1:80".parse().unwrap())
        );
    }

    #[test]
    fn a_path_that_cannot_be_a_socket_s_says_why() {
        let why = |text: &str| ServerAddr::parse(text).unwrap().unwrap_err();
        assert!(why("unix:").contains("no path"), "{}", why("unix:"));
        assert_eq!(
            why("unix:run/app.sock"),
            r#"a UNIX socket's path must be absolute; write e.g. "unix:/run/app.sock""#
        );
        assert!(why("unix:@app").contains("absolute"));
        let long = format!("unix:/{}", "a".repeat(MAX_SOCKET_PATH));
        assert!(why(&long).contains("at most 107 bytes"), "{}", why(&long));
        assert!(why("127.0.0.1:0").contains("port 0"));
        assert!(ServerAddr::parse("localhost:80").is_none());
        assert!(ServerAddr::parse("/run/app.sock").is_none());
    }
}
