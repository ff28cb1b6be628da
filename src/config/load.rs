//! Where a configuration comes in — TOML text or a file — and the toml crate's errors turned
//! into [`ConfigProblem`]s with a key and line.
//!
//! Two passes. The toml crate reads the text into the structs of `raw.rs`, refusing bad syntax,
//! wrong types and unknown keys; it stops at the first. Then `check/` holds every value to its
//! rule and keeps going, so one `herdsman check` shows everything there is to fix.

use std::path::Path;

use super::check::check;
use super::problem::{line_of, ConfigError, ConfigProblem};
use super::raw::{self, RawConfig};
use super::Config;

/// Parses and validates `text`; `origin` names it in the error.
pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let refuse = |problems| ConfigError {
        origin: origin.to_string(),
        problems,
    };
    let raw: RawConfig =
        toml::from_str(text).map_err(|error| refuse(vec![problem_from_toml(text, &error)]))?;
    check(text, &raw).map_err(|mut problems| {
        // A stable sort: problems on one line keep the order they were found in.
        problems.sort_by_key(|problem| problem.line.unwrap_or(usize::MAX));
        refuse(problems)
    })
}

/// Reads and validates a config file. A file that cannot be read is one problem with no key.
///
/// Reading a config takes far more memory than the config it gives (the toml crate's document of
/// a file of 100,000 routes peaks at about 2.3 KB per route, the config keeps a few hundred
/// bytes), and the allocator keeps what was freed for the next allocation: once the text and its
/// document are gone, that memory goes back to the system. With 100,000 routes, herdsman's
/// resident memory after a start was 241 MB before this and 73 MB after; 42 MB once the snapshot
/// shared the config's routes too (bench/results/scale.md: 285 bytes a route, HAProxy's map 337).
pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let loaded = from_toml(&text, &origin);
            drop(text);
            release_freed_memory();
            loaded
        }
        Err(error) => Err(ConfigError {
            origin,
            problems: vec![ConfigProblem {
                key: String::new(),
                line: None,
                message: format!("cannot read the file: {error}"),
            }],
        }),
    }
}

/// Gives the memory this thread has freed back to the system (mimalloc keeps freed pages for a
/// while otherwise). It walks the thread's heap: a few milliseconds, so only after the large
/// passing allocations of reading a config and compiling its routes, never on the request path.
pub fn release_freed_memory() {
    #[cfg(feature = "alloc-mimalloc")]
    // SAFETY: mi_collect only frees memory mimalloc holds and no one uses; any thread may call it.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

/// The toml crate's error as one problem: its message kept (for an unknown key it already lists
/// the accepted ones), its span turned into a line and, where the text parses, a key path.
fn problem_from_toml(text: &str, error: &toml::de::Error) -> ConfigProblem {
    let span = error.span();
    let key = span
        .clone()
        .and_then(|span| raw::key_path_at(text, span))
        .unwrap_or_default();
    // Syntax messages run over several lines ("invalid table header\nexpected `.`, `]]`").
    let what = error
        .message()
        .trim()
        .lines()
        .collect::<Vec<_>>()
        .join("; ");
    let message = if key.is_empty() {
        what
    } else {
        format!("{key}: {what}")
    };
    ConfigProblem {
        key,
        line: span.map(|span| line_of(text, span.start)),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{only_problem, problems, valid_with, VALID};

    #[test]
    fn every_problem_is_reported_at_once_in_line_order() {
        let text = valid_with("127.0.0.1:9002", "127.0.0.1")
            .replace(r#"name = "api""#, r#"name = "app""#)
            .replace(r#"connect = "1s""#, r#"connect = "1""#)
            .replace("workers = 3", "workers = 0");
        let found = problems(&text);
        let summary: Vec<_> = found
            .iter()
            .map(|problem| (problem.key.as_str(), problem.line))
            .collect();
        assert_eq!(
            summary,
            [
                ("workers", Some(2)),
                ("listener[1].pool", Some(15)),
                ("timeouts.connect", Some(18)),
                ("pool[0].servers[1].addr", Some(34)),
                ("pool[1].name", Some(38)),
                ("route[0].pool", Some(58)),
            ]
        );
        assert_eq!(
            found[0].message,
            r#"workers = 0: out of range; accepted: "auto" or a number from 1 to 1024"#
        );
        assert_eq!(
            found[1].message,
            r#"listener[1].pool = "api": no such pool; defined pools: app, app, shop"#
        );
        assert_eq!(
            found[2].message,
            r#"timeouts.connect = "1": no unit; write a number and a unit, e.g. "2s" or "150ms""#
        );
    }

    #[test]
    fn an_unknown_key_is_named_with_its_table_and_line() {
        let text = valid_with(r#"connect = "1s""#, r#"conect = "1s""#);
        let found = only_problem(&text);
        assert_eq!(found.key, "timeouts.conect");
        assert_eq!(found.line, Some(18));
        assert!(
            found
                .message
                .starts_with("timeouts.conect: unknown field `conect`, expected one of `connect`"),
            "{}",
            found.message
        );
    }

    #[test]
    fn unknown_tables_and_keys_are_refused_where_they_are() {
        let text = format!("{VALID}\n[logging]\npool = \"app\"\n");
        let found = only_problem(&text);
        assert_eq!(found.line, Some(67));
        assert!(found.message.contains("unknown field"), "{}", found.message);
        let log = only_problem(&format!("{VALID}\n[log]\npool = \"app\"\n"));
        assert_eq!((log.key.as_str(), log.line), ("log.pool", Some(68)));
        assert!(
            log.message
                .contains("unknown field `pool`, expected `level`"),
            "{}",
            log.message
        );
        let admin = only_problem(&format!("{VALID}\n[admin]\npool = \"app\"\n"));
        assert_eq!((admin.key.as_str(), admin.line), ("admin.pool", Some(68)));
        assert!(
            admin
                .message
                .contains("unknown field `pool`, expected one of `bind`, `socket`"),
            "{}",
            admin.message
        );
    }

    #[test]
    fn an_unknown_key_in_a_server_is_indexed() {
        let found = only_problem(&valid_with("weight = 2", "wieght = 2"));
        assert_eq!(found.key, "pool[0].servers[1].wieght");
        assert_eq!(found.line, Some(34));
        assert!(
            found
                .message
                .contains("unknown field `wieght`, expected one of `name`, `addr`, `weight`"),
            "{}",
            found.message
        );
    }

    #[test]
    fn a_wrong_type_is_named_with_its_key() {
        let found = only_problem(&valid_with(r#"bind = "127.0.0.1:8080""#, "bind = 8080"));
        assert_eq!(found.key, "listener[0].bind");
        assert_eq!(found.line, Some(8));
        assert_eq!(
            found.message,
            "listener[0].bind: invalid type: integer `8080`, expected a string"
        );
    }

    #[test]
    fn a_syntax_error_has_a_line_and_no_key() {
        let found = only_problem(&valid_with(
            "[[listener]]\nname = \"internal\"",
            "[[listener]\nname = \"internal\"",
        ));
        assert_eq!(found.key, "");
        assert_eq!(found.line, Some(12));
        assert!(!found.message.contains('\n'), "{}", found.message);
        assert!(
            found.message.starts_with("unclosed array table"),
            "{}",
            found.message
        );
    }

    #[test]
    fn the_error_names_its_origin_and_lists_each_problem_indented() {
        let text = valid_with("127.0.0.1:9002", "127.0.0.1").replace("workers = 3", "workers = 0");
        let error = from_toml(&text, "/etc/herdsman.toml").unwrap_err();
        assert_eq!(
            error.to_string(),
            "/etc/herdsman.toml: 2 problems\n  \
             line 2: workers = 0: out of range; accepted: \"auto\" or a number from 1 to 1024\n  \
             line 34: pool[0].servers[1].addr = \"127.0.0.1\": not a socket address; write host:port, e.g. \"127.0.0.1:9001\" (or \"unix:/run/app.sock\" for a UNIX socket)"
        );
        let one = from_toml("", "<demo>").unwrap_err();
        assert!(one
            .to_string()
            .starts_with("<demo>: 2 problems\n  listener: none defined"));
    }

    #[test]
    fn a_missing_file_is_one_problem_with_the_os_error() {
        let path = Path::new("/nonexistent/herdsman.toml");
        let error = from_file(path).unwrap_err();
        assert_eq!(error.origin, "/nonexistent/herdsman.toml");
        assert_eq!(error.problems.len(), 1);
        assert_eq!(error.problems[0].key, "");
        assert_eq!(error.problems[0].line, None);
        assert!(error.problems[0]
            .message
            .starts_with("cannot read the file: No such file or directory"));
        assert!(error
            .to_string()
            .starts_with("/nonexistent/herdsman.toml: 1 problem\n  cannot read the file:"));
    }

    #[test]
    fn a_file_on_disk_is_read_and_validated() {
        let path =
            std::env::temp_dir().join(format!("herdsman-config-{}.toml", std::process::id()));
        std::fs::write(&path, VALID).unwrap();
        let loaded = from_file(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(loaded.unwrap(), from_toml(VALID, "t").unwrap());
    }

    #[test]
    fn the_example_file_is_valid_and_uses_every_key() {
        let example = include_str!("../../examples/herdsman.toml");
        let config = from_toml(example, "examples/herdsman.toml").unwrap();
        assert_eq!(config.listeners.len(), 2);
        assert!(config.routes[1].rate_limit.is_some());
        assert_eq!(config.pools.len(), 3);
        for key in [
            "workers",
            "intake",
            "shutdown_grace",
            "hard_stop_after",
            "[[listener]]",
            "name",
            "bind",
            "backlog",
            "defer_accept",
            "pool",
            "[timeouts]",
            "connect",
            "client_header",
            "client_idle",
            "backend_response",
            "backend_idle",
            "tunnel_idle",
            "[limits]",
            "max_header_bytes",
            "max_body_bytes",
            "max_idle_per_server",
            "max_client_connections",
            "max_connections_per_client",
            "[[pool]]",
            "balance",
            "servers",
            "addr",
            "weight",
            "state",
            "hash_key",
            "[pool.sticky]",
            "cookie",
            "key_env",
            "max_age",
            "[[route]]",
            "host",
            "path_prefix",
            "[route.rate_limit]",
            "rate",
            "burst",
            "max_keys",
            "[admin]",
            "token_env",
            "slow_start",
            "[pool.health]",
            "check",
            "method",
            "path",
            "expect",
            "interval",
            "timeout",
            "rise",
            "fall",
            "[pool.passive]",
            "consecutive_failures",
            "count_5xx",
            "ejection",
            "max_ejection",
            "max_ejected_percent",
            "retries",
            "retry_budget_percent",
            "max_connections",
            "queue_timeout",
            "latency_window",
            "protocol",
            "service",
        ] {
            let written = example
                .lines()
                .filter(|line| !line.trim_start().starts_with('#'))
                .any(|line| line.contains(key));
            assert!(written, "the example does not use {key}");
        }
    }
}
