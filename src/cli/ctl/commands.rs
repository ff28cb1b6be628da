//! The commands of `herdsman ctl`: how each is parsed (names checked, since they become part of
//! the request's path), the request it makes, and the line it prints for a successful answer.

use std::fmt::Write as _;

use clap::Subcommand;
use serde::Deserialize;
use serde_json::{json, Value};

use herdsman::config::is_valid_name;

use super::client::{parse_json, Call, CtlError};
use super::print::{
    certificates_table, limits_table, servers_table, CertificatesReply, LimitsReply, PoolsReply,
    ServerReply,
};

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
    /// List the TLS listeners' certificates: names, issuer, expiry, whether ACME manages them and
    /// when it renews them.
    Certs,
    /// List the rate limits: rate, burst, key, the requests each allowed and limited, and the
    /// keys it refused most in the last minute.
    Limits,
    /// Print the token that reaches a server in the `test` state, and the header to send it in.
    TestToken {
        #[arg(value_name = "POOL/SERVER", value_parser = parse_server_path)]
        server: ServerPath,
    },
    /// Take responses out of the cache: one URL, a host's paths, or a tag's.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
}

/// `herdsman ctl cache …`: each says how many responses went.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum CacheCommand {
    /// Purge one URL with all its variants: http://host/path?query for that scheme, or
    /// host/path?query for both.
    Purge {
        url: String,
        /// Only in this pool (default: every pool that caches).
        #[arg(long, value_parser = parse_name)]
        pool: Option<String>,
    },
    /// Purge every response for HOST whose path starts with PATH_PREFIX (default /: all of
    /// them).
    Ban {
        host: String,
        path_prefix: Option<String>,
        /// Only in this pool (default: every pool that caches).
        #[arg(long, value_parser = parse_name)]
        pool: Option<String>,
    },
    /// Purge every response whose Surrogate-Key or Cache-Tag carried TAG.
    PurgeTag { tag: String },
}

impl CacheCommand {
    fn call(&self) -> Call {
        let (path, mut body) = match self {
            CacheCommand::Purge { url, .. } => ("/api/cache/purge", json!({ "url": url })),
            CacheCommand::Ban {
                host, path_prefix, ..
            } => {
                let mut body = json!({ "host": host });
                if let Some(prefix) = path_prefix {
                    body["path_prefix"] = json!(prefix);
                }
                ("/api/cache/ban", body)
            }
            CacheCommand::PurgeTag { tag } => ("/api/cache/purge-tag", json!({ "tag": tag })),
        };
        if let CacheCommand::Purge {
            pool: Some(pool), ..
        }
        | CacheCommand::Ban {
            pool: Some(pool), ..
        } = self
        {
            body["pool"] = json!(pool);
        }
        Call {
            method: "POST",
            path: path.to_string(),
            body: Some(body.to_string()),
        }
    }

    /// `what: N responses purged`.
    fn describe_success(&self, body: &[u8]) -> Result<String, CtlError> {
        let reply: PurgeReply = parse_json(body)?;
        let what = match self {
            CacheCommand::Purge { url, .. } => url.clone(),
            CacheCommand::Ban {
                host, path_prefix, ..
            } => format!("{host}{}*", path_prefix.as_deref().unwrap_or("/")),
            CacheCommand::PurgeTag { tag } => format!("tag {tag}"),
        };
        let responses = if reply.purged == 1 {
            "response"
        } else {
            "responses"
        };
        Ok(format!("{what}: {} {responses} purged\n", reply.purged))
    }
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
            CtlCommand::Certs => call("GET", "/api/certificates".into(), None),
            CtlCommand::Limits => call("GET", "/api/rate_limits".into(), None),
            CtlCommand::Upgrade { .. } => call("POST", "/api/upgrade".into(), None),
            CtlCommand::TestToken { server } => {
                call("GET", format!("{}/test-token", server_path(server)), None)
            }
            CtlCommand::Cache { command } => command.call(),
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
            CtlCommand::Certs => certificates_table(&parse_json::<CertificatesReply>(body)?),
            CtlCommand::Limits => limits_table(&parse_json::<LimitsReply>(body)?),
            CtlCommand::Upgrade { .. } => {
                "upgrading: the new process takes over once it serves (see the log)\n".to_string()
            }
            CtlCommand::TestToken { .. } => {
                let reply: TestTokenReply = parse_json(body)?;
                // The token alone first, for scripts; then how to use it.
                format!("{}\n{}: {}\n", reply.token, reply.header, reply.token)
            }
            CtlCommand::Cache { command } => command.describe_success(body)?,
        };
        Ok(text)
    }
}

#[derive(Debug, Deserialize)]
struct ReloadReply {
    generation: u64,
    /// Absent from herdsman before it said: none.
    #[serde(default)]
    restart_required: Vec<String>,
}

/// What `/api/cache/…` answers, as far as `ctl` reads it.
#[derive(Debug, Deserialize)]
struct PurgeReply {
    purged: u64,
}

#[derive(Debug, Deserialize)]
struct TestTokenReply {
    header: String,
    token: String,
}
