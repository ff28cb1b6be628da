//! The five cases `instructions` counts, named as bench/budget.toml names them, and herdsman's
//! configuration for each: one worker, one listener in front of the backend, the access log off,
//! herdsman's defaults for everything else (as bench/scripts/instructions-per-request.sh writes
//! it), plus TLS, the access log or issue 42's rules where the case has them, and the admin API,
//! which is only asked between counts (to check them) and so adds nothing to what is counted.

use std::fmt;
use std::path::Path;

use crate::kit::proxies::TlsCertificate;
use crate::rules::rows::{herdsman_limit, HERDSMAN_HEADER_RULES};

/// What wrk's connections do while herdsman's instructions are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Case {
    /// HTTP/1.1 keep-alive: each of wrk's connections sends request after request.
    KeepAlive,
    /// The same over TLS (an ECDSA P-256 certificate): the handshakes are made in the
    /// warm-up, so what is counted is the records' encryption beside the exchange.
    TlsKeepAlive,
    /// A new connection for every request: each says `Connection: close`, herdsman closes the
    /// connection after answering and wrk connects again (accept, the session's set-up and the
    /// close are counted; the kernel's TCP handshake is not, as no kernel work is).
    NewConnection,
    /// Keep-alive with the listener's access log on, written to a file (the combined format):
    /// reported, not budgeted.
    KeepAliveAccessLog,
    /// Keep-alive with `herdsman-bench rules`' configuration of issue 42: ten header rules (three
    /// request fields set from variables, one added, one removed; three answer fields set, two
    /// removed) and a route whose per-client rate limit is never reached.
    KeepAliveRules,
}

impl Case {
    pub const ALL: [Case; 5] = [
        Case::KeepAlive,
        Case::TlsKeepAlive,
        Case::NewConnection,
        Case::KeepAliveAccessLog,
        Case::KeepAliveRules,
    ];

    /// Its name in the tables, on the command line and in the budget file.
    pub fn name(self) -> &'static str {
        match self {
            Case::KeepAlive => "keep-alive",
            Case::TlsKeepAlive => "tls-keep-alive",
            Case::NewConnection => "new-connection",
            Case::KeepAliveAccessLog => "keep-alive-access-log",
            Case::KeepAliveRules => "keep-alive-rules",
        }
    }

    /// Whether the budget file holds it to a budget.
    pub fn budgeted(self) -> bool {
        self != Case::KeepAliveAccessLog
    }

    /// The budgeted cases.
    pub fn budgeted_cases() -> impl Iterator<Item = Case> {
        Case::ALL.into_iter().filter(|case| case.budgeted())
    }

    /// The case whose name is `name`.
    pub fn named(name: &str) -> Option<Case> {
        Case::ALL.into_iter().find(|case| case.name() == name)
    }

    pub fn tls(self) -> bool {
        self == Case::TlsKeepAlive
    }

    /// Whether every request comes on a connection of its own.
    pub fn reconnects(self) -> bool {
        self == Case::NewConnection
    }

    /// The headers wrk adds to every request.
    pub fn headers(self) -> &'static [&'static str] {
        if self.reconnects() {
            &["Connection: close"]
        } else {
            &[]
        }
    }

    /// The pause in milliseconds wrk makes after an answer before it sends the next request on
    /// that connection (its Lua `delay()`), if any. 1 ms on a keep-alive connection: far less
    /// than herdsman under valgrind takes to come round to a connection again (some 15 ms for 50
    /// of them), so every connection still has a request waiting whenever herdsman is free; and
    /// more than herdsman takes to try reading the connection again after answering, so that
    /// read always finds nothing and waits. Without it, whether the next request is already there
    /// is a race between wrk's speed and herdsman's (lost about a third of the time over TLS
    /// here), and the count moved by 3% with the machine's load. None with a new connection per
    /// request: wrk sends the request as soon as it has connected, well before herdsman under
    /// valgrind has accepted the connection and reads it, while a pause would race with how long
    /// herdsman takes to accept.
    pub fn think_time(self) -> Option<u32> {
        (!self.reconnects()).then_some(1)
    }

    /// The URL wrk asks for.
    pub fn url(self, port: u16) -> String {
        let scheme = if self.tls() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{port}/")
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a case's herdsman listens and forwards to, all on 127.0.0.1.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub listener: u16,
    pub admin: u16,
    pub backend: u16,
}

/// herdsman's configuration for `case`: the listener serves `certificate` when the case is over
/// TLS, and writes its access log to `dir`/access.log when the case has one.
pub fn herdsman_config(
    case: Case,
    ports: Ports,
    certificate: &TlsCertificate,
    dir: &Path,
) -> String {
    let Ports {
        listener,
        admin,
        backend,
    } = ports;
    let access_log = if case == Case::KeepAliveAccessLog {
        format!("access_log = \"{}\"\n", dir.join("access.log").display())
    } else {
        String::new()
    };
    let rules = if case == Case::KeepAliveRules {
        format!("{HERDSMAN_HEADER_RULES}{}", herdsman_limit(""))
    } else {
        String::new()
    };
    let tls = if case.tls() {
        format!(
            "[listener.tls]\ncertificates = [{{ chain = \"{}\", key = \"{}\" }}]\n",
            certificate.chain.display(),
            certificate.key.display()
        )
    } else {
        String::new()
    };
    format!(
        r#"workers = 1

[[listener]]
name = "bench"
bind = "127.0.0.1:{listener}"
pool = "backend"
{access_log}{tls}
[admin]
bind = "127.0.0.1:{admin}"

[[pool]]
name = "backend"
servers = [{{ name = "b1", addr = "127.0.0.1:{backend}" }}]
{rules}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn config(case: Case) -> String {
        let certificate = TlsCertificate {
            chain: PathBuf::from("/s/ecdsa.pem"),
            key: PathBuf::from("/s/ecdsa.key"),
            combined: PathBuf::from("/s/ecdsa.combined.pem"),
        };
        let ports = Ports {
            listener: 1001,
            admin: 1002,
            backend: 1003,
        };
        herdsman_config(case, ports, &certificate, Path::new("/s/case"))
    }

    #[test]
    fn every_case_has_one_worker_and_only_its_own_extras() {
        for case in Case::ALL {
            let text = config(case);
            assert!(text.starts_with("workers = 1\n"), "{text}");
            assert!(text.contains("bind = \"127.0.0.1:1001\""), "{text}");
            assert!(text.contains("bind = \"127.0.0.1:1002\""), "{text}");
            assert!(text.contains("addr = \"127.0.0.1:1003\""), "{text}");
            assert_eq!(text.contains("[listener.tls]"), case.tls(), "{text}");
            assert_eq!(
                text.contains("access_log = \"/s/case/access.log\""),
                case == Case::KeepAliveAccessLog,
                "{text}"
            );
            assert_eq!(
                text.contains("[headers.request]") && text.contains("[route.rate_limit]"),
                case == Case::KeepAliveRules,
                "{text}"
            );
        }
    }

    #[test]
    fn names_round_trip_and_only_the_access_log_case_is_unbudgeted() {
        for case in Case::ALL {
            assert_eq!(Case::named(case.name()), Some(case));
        }
        assert_eq!(Case::budgeted_cases().count(), 4);
        assert!(!Case::KeepAliveAccessLog.budgeted());
        assert_eq!(Case::NewConnection.headers(), ["Connection: close"]);
        assert_eq!(Case::NewConnection.think_time(), None);
        assert_eq!(Case::TlsKeepAlive.think_time(), Some(1));
        assert_eq!(Case::TlsKeepAlive.url(8443), "https://127.0.0.1:8443/");
    }
}
