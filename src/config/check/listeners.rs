//! `[[listener]]`s: address, backlog, deferred accept, default pool, connection limit, access
//! log and the protocols a request may upgrade to, and that listeners sharing an access log share
//! its format.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use super::primitives::{quoted, Zero};
use super::words::ACCESS_LOG_FORMATS;
use super::{Checker, Table};
use crate::config::raw::{RawListener, RawPool};
use crate::config::upgrade;
use crate::config::{AccessLogConfig, ListenerConfig, UpgradeProtocols, STANDARD_OUTPUT};

/// Whether a TLS listener offers HTTP/2 by ALPN: `http2`, on unless written false (every
/// browser offers `h2` first, and an idle HTTP/2 connection parks as an HTTP/1.1 one does).
fn http2(listener: &RawListener) -> bool {
    listener.http2.as_ref().is_none_or(|on| *on.get_ref())
}

/// `backlog` when not written (see `ListenerConfig::backlog`).
const DEFAULT_BACKLOG: u32 = 4096;
/// The longest `defer_accept`.
const MOST_DEFER_ACCEPT: Duration = Duration::from_secs(3600);
/// A listener's `upgrade` when not written: WebSocket, the upgrade browsers make, and the one
/// herdsman was built to tunnel (see `ListenerConfig::upgrade`).
const DEFAULT_UPGRADE: [&str; 1] = ["websocket"];

impl Checker {
    pub(super) fn listener(
        &mut self,
        table: &Table,
        listener: &RawListener,
        pools: &[Spanned<RawPool>],
    ) -> ListenerConfig {
        ListenerConfig {
            name: self.name(table, &listener.name, "web"),
            bind: self.socket_addr(table, "bind", &listener.bind, "127.0.0.1:8080"),
            backlog: self.integer(
                &table.key("backlog"),
                &listener.backlog,
                1..=65535,
                "1 to 65535 (default 4096)",
                DEFAULT_BACKLOG,
            ),
            defer_accept: self.defer_accept(table, &listener.defer_accept),
            pool: self.pool_index(
                table,
                &listener.pool,
                pools,
                r#"write the name of a [[pool]], e.g. pool = "app""#,
            ),
            max_connections: self.integer(
                &table.key("max_connections"),
                &listener.max_connections,
                0..=10_000_000,
                "0 (no limit, the default) to 10000000",
                0,
            ),
            access_log: self.access_log(table, listener),
            upgrade: self.upgrade_protocols(table, &listener.upgrade),
            tls: listener
                .tls
                .as_ref()
                .and_then(|raw| self.listener_tls(table, raw, http2(listener))),
            redirect_https: self.redirect_https(table, listener),
            access: listener.access.as_ref().map(|raw| self.access(table, raw)),
            h2c: self.h2c(table, listener),
            rate_limit: self.rate_limit(
                table,
                &listener.rate_limit,
                &format!(
                    "listener {}",
                    listener.name.as_ref().map_or("", |n| n.get_ref().as_str())
                ),
            ),
        }
    }

    /// `h2c` (cleartext listeners only: a TLS one offers HTTP/2 by ALPN), and `http2` (TLS
    /// listeners only: whether ALPN offers `h2`; a cleartext one takes HTTP/2 with `h2c`).
    fn h2c(&mut self, table: &Table, listener: &RawListener) -> bool {
        if let (Some(http2), None) = (&listener.http2, &listener.tls) {
            let why = "`http2` says whether a TLS listener offers h2 by ALPN; a cleartext listener takes HTTP/2 with prior knowledge with `h2c = true`";
            self.reject(
                &table.key("http2"),
                http2.span(),
                &http2.get_ref().to_string(),
                why,
            );
        }
        let Some(raw) = &listener.h2c else {
            return false;
        };
        let on = *raw.get_ref();
        if on && listener.tls.is_some() {
            let why =
                "a TLS listener offers HTTP/2 by ALPN (`http2`); `h2c` is HTTP/2 in cleartext";
            self.reject(&table.key("h2c"), raw.span(), "true", why);
            return false;
        }
        on
    }

    /// `redirect_https` and `redirect_https_port`: on a cleartext listener only (a TLS one
    /// serves HTTPS itself).
    fn redirect_https(&mut self, table: &Table, listener: &RawListener) -> Option<u16> {
        let port = self.integer(
            &table.key("redirect_https_port"),
            &listener.redirect_https_port,
            1..=65535,
            "1 to 65535 (default 443)",
            443,
        );
        let raw = listener.redirect_https.as_ref()?;
        if !*raw.get_ref() {
            return None;
        }
        if listener.tls.is_some() {
            let why = "a TLS listener serves HTTPS itself; set redirect_https on a cleartext listener, to send its clients here";
            self.reject(&table.key("redirect_https"), raw.span(), "true", why);
            return None;
        }
        Some(port)
    }

    /// A listener's `defer_accept`: a duration of at most an hour; zero (the default) is off.
    /// Only Linux has TCP_DEFER_ACCEPT, so elsewhere anything but zero is refused.
    fn defer_accept(&mut self, table: &Table, raw: &Option<Spanned<String>>) -> Duration {
        let key = table.key("defer_accept");
        let defer = self.duration(&key, raw, Duration::ZERO, Zero::Allowed);
        let Some(raw) = raw else {
            return defer;
        };
        if defer > MOST_DEFER_ACCEPT {
            let why = r#"at most "1h"; a client's first bytes come within a second or two"#;
            self.reject(&key, raw.span(), &quoted(raw.get_ref()), why.to_string());
            return Duration::ZERO;
        }
        if !defer.is_zero() && !cfg!(target_os = "linux") {
            let why = "needs TCP_DEFER_ACCEPT, which only Linux has; leave it out";
            self.reject(&key, raw.span(), &quoted(raw.get_ref()), why.to_string());
        }
        defer
    }

    /// A listener's `upgrade`: protocol names, each a token without a version, never HTTP/2;
    /// [`DEFAULT_UPGRADE`] when absent.
    fn upgrade_protocols(
        &mut self,
        table: &Table,
        raw: &Option<Spanned<Vec<Spanned<String>>>>,
    ) -> UpgradeProtocols {
        let Some(raw) = raw else {
            return UpgradeProtocols::new(DEFAULT_UPGRADE);
        };
        for name in raw.get_ref() {
            if let Some(why) = upgrade::refusal(name.get_ref()) {
                self.reject(
                    &table.key("upgrade"),
                    name.span(),
                    &quoted(name.get_ref()),
                    why,
                );
            }
        }
        UpgradeProtocols::new(raw.get_ref().iter().map(|name| name.get_ref().as_str()))
    }

    /// A listener's `access_log` and `access_log_format`: a log when the path is written (the
    /// format alone is ignored, so that commenting out the path turns the log off).
    fn access_log(&mut self, table: &Table, listener: &RawListener) -> Option<AccessLogConfig> {
        let format = self.word(
            &table.key("access_log_format"),
            &listener.access_log_format,
            &ACCESS_LOG_FORMATS,
        );
        let raw = listener.access_log.as_ref()?;
        let text = raw.get_ref();
        let why = if text.is_empty() {
            r#"empty; write an absolute path, e.g. "/var/log/herdsman/access.log", "-" for standard output, or remove the key for no access log"#
        } else if text == STANDARD_OUTPUT {
            return Some(AccessLogConfig {
                path: Arc::from(Path::new(text)),
                format,
            });
        } else if text.contains('\0') {
            "a path cannot contain a NUL character"
        } else if !Path::new(text).is_absolute() {
            // A relative path would depend on the working directory of whoever started herdsman
            // (systemd's is /), and a reload or a SIGUSR1 could reopen another file.
            r#"not an absolute path; write e.g. "/var/log/herdsman/access.log", or "-" for standard output"#
        } else if text.ends_with('/') {
            r#"names a directory; write a file's path, e.g. "/var/log/herdsman/access.log""#
        } else {
            return Some(AccessLogConfig {
                path: Arc::from(Path::new(text)),
                format,
            });
        };
        self.reject(&table.key("access_log"), raw.span(), &quoted(text), why);
        None
    }

    /// Listeners may share an access log file only in one format: a file of mixed lines would
    /// defeat whatever reads it.
    pub(super) fn one_format_per_access_log(
        &mut self,
        raw: &[Spanned<RawListener>],
        listeners: &[ListenerConfig],
    ) {
        for (index, listener) in listeners.iter().enumerate() {
            let Some(log) = &listener.access_log else {
                continue;
            };
            let first = listeners[..index].iter().find(|other| {
                other
                    .access_log
                    .as_ref()
                    .is_some_and(|o| o.path == log.path)
            });
            let Some(first) = first else {
                continue;
            };
            let first_format = first.access_log.as_ref().map_or(log.format, |o| o.format);
            if first_format == log.format {
                continue;
            }
            let Some(path) = raw[index].get_ref().access_log.as_ref() else {
                continue;
            };
            self.reject(
                &format!("listener[{index}].access_log"),
                path.span(),
                &quoted(path.get_ref()),
                format!(
                    "also the access log of listener {}, in format {}; listeners sharing a file \
                     must share its access_log_format, or write to files of their own",
                    first.name,
                    ACCESS_LOG_FORMATS.word_for(first_format),
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{only_problem, problem, MINIMAL};
    use crate::config::load::from_toml;
    use crate::config::AccessLogFormat;

    /// `MINIMAL` with `keys` added to its listener (at line 6 onwards).
    fn minimal_listener_with(keys: &str) -> String {
        let end_of_listener = "pool = \"app\"\n\n[[pool]]";
        assert_eq!(MINIMAL.matches(end_of_listener).count(), 1);
        MINIMAL.replace(
            end_of_listener,
            &format!("pool = \"app\"\n{keys}\n[[pool]]"),
        )
    }

    #[test]
    fn an_access_log_is_read_with_its_format_defaulting_to_combined() {
        let config = from_toml(MINIMAL, "t").unwrap();
        assert_eq!(config.listeners[0].access_log, None);
        let log = |keys: &str| {
            from_toml(&minimal_listener_with(keys), "t")
                .unwrap()
                .listeners[0]
                .access_log
                .clone()
        };
        let path: Arc<Path> = Arc::from(Path::new("/var/log/herdsman/web.log"));
        assert_eq!(
            log("access_log = \"/var/log/herdsman/web.log\"\n"),
            Some(AccessLogConfig {
                path: Arc::clone(&path),
                format: AccessLogFormat::Combined,
            })
        );
        assert_eq!(
            log("access_log = \"/var/log/herdsman/web.log\"\naccess_log_format = \"json\"\n"),
            Some(AccessLogConfig {
                path,
                format: AccessLogFormat::Json,
            })
        );
        // The format alone: commenting out the path turns the log off.
        assert_eq!(log("access_log_format = \"json\"\n"), None);
    }

    #[test]
    fn access_log_keys_are_held_to_their_rules() {
        let cases = [
            (
                "access_log = \"/tmp/a.log\"\naccess_log_format = \"apache\"\n",
                "listener[0].access_log_format",
                7,
                r#"listener[0].access_log_format = "apache": unknown; accepted: combined, json"#,
            ),
            (
                "access_log = \"logs/web.log\"\n",
                "listener[0].access_log",
                6,
                r#"listener[0].access_log = "logs/web.log": not an absolute path; write e.g. "/var/log/herdsman/access.log", or "-" for standard output"#,
            ),
            (
                "access_log = \"\"\n",
                "listener[0].access_log",
                6,
                r#"listener[0].access_log = "": empty; write an absolute path, e.g. "/var/log/herdsman/access.log", "-" for standard output, or remove the key for no access log"#,
            ),
            (
                "access_log = \"/var/log/herdsman/\"\n",
                "listener[0].access_log",
                6,
                r#"listener[0].access_log = "/var/log/herdsman/": names a directory; write a file's path, e.g. "/var/log/herdsman/access.log""#,
            ),
        ];
        for (keys, key, line, message) in cases {
            assert_eq!(
                only_problem(&minimal_listener_with(keys)),
                problem(key, line, message),
                "{keys}"
            );
        }
    }

    #[test]
    fn upgrade_defaults_to_websocket_and_an_empty_list_allows_none() {
        let upgrade = |keys: &str| {
            from_toml(&minimal_listener_with(keys), "t")
                .unwrap()
                .listeners[0]
                .upgrade
                .clone()
        };
        assert_eq!(upgrade(""), UpgradeProtocols::new(["websocket"]));
        assert_eq!(upgrade("upgrade = []\n"), UpgradeProtocols::none());
        assert_eq!(
            upgrade("upgrade = [\"WebSocket\", \"my-proto\"]\n"),
            UpgradeProtocols::new(["websocket", "my-proto"])
        );
    }

    #[test]
    fn upgrade_never_lists_http2_or_a_version() {
        let cases = [
            (
                "upgrade = [\"websocket\", \"h2c\"]\n",
                r#"listener[0].upgrade = "h2c": HTTP/2 is never tunnelled: requests inside it would bypass routing, access logs, X-Forwarded-For and limits (h2c smuggling); remove it"#,
            ),
            (
                "upgrade = [\"websocket/13\"]\n",
                r#"listener[0].upgrade = "websocket/13": write the protocol name without a version, e.g. "websocket""#,
            ),
        ];
        for (keys, message) in cases {
            assert_eq!(
                only_problem(&minimal_listener_with(keys)),
                problem("listener[0].upgrade", 6, message),
                "{keys}"
            );
        }
    }

    #[test]
    fn listeners_may_share_an_access_log_only_in_one_format() {
        let second = |format: &str| {
            format!(
                "access_log = \"/var/log/h.log\"\n\n[[listener]]\nname = \"api\"\n\
                 bind = \"127.0.0.1:8081\"\npool = \"app\"\naccess_log = \"/var/log/h.log\"\n\
                 access_log_format = \"{format}\"\n"
            )
        };
        let shared = from_toml(&minimal_listener_with(&second("combined")), "t").unwrap();
        assert_eq!(
            shared.listeners[0].access_log,
            shared.listeners[1].access_log
        );
        assert_eq!(
            only_problem(&minimal_listener_with(&second("json"))),
            problem(
                "listener[1].access_log",
                12,
                r#"listener[1].access_log = "/var/log/h.log": also the access log of listener web, in format combined; listeners sharing a file must share its access_log_format, or write to files of their own"#
            )
        );
    }
}
