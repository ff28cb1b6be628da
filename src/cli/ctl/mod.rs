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
//! This file holds the arguments and runs a command; `commands` parses each command and maps it
//! to its request and what to print, unit-tested here from the command line; `client` makes the
//! request (TCP or UNIX socket, the token, errors in a person's words); `upgrade` waits on an
//! upgrade; `print` reads `/api/pools` and lays out text tables. `herdsman top` reaches the API
//! the same way, with `client` and `print`.

pub mod client;
mod commands;
pub mod print;
mod upgrade;

use std::io::Write;
use std::time::Duration;

use clap::Args;

pub use client::token_from_env;
use client::{call_api, AdminAddress, CtlError};
use commands::CtlCommand;
use upgrade::upgrade_and_wait;

/// `herdsman ctl [--admin ADDR] COMMAND`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    #[command(flatten)]
    pub target: AdminAddress,
    #[command(subcommand)]
    pub command: CtlCommand,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::ctl::client::{request_bytes, Call, DEFAULT_ADMIN};
    use clap::Parser;
    use serde_json::{json, Value};

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

        let call = call_of(&["cache", "purge", "example.com/a?b=1"]);
        assert_eq!(
            (call.method, call.path.as_str()),
            ("POST", "/api/cache/purge")
        );
        assert_eq!(body_json(&call), json!({ "url": "example.com/a?b=1" }));
        let call = call_of(&["cache", "purge", "https://h/a", "--pool", "web"]);
        assert_eq!(
            body_json(&call),
            json!({ "url": "https://h/a", "pool": "web" })
        );
        let call = call_of(&["cache", "ban", "example.com", "/img/"]);
        assert_eq!(
            (call.method, call.path.as_str()),
            ("POST", "/api/cache/ban")
        );
        assert_eq!(
            body_json(&call),
            json!({ "host": "example.com", "path_prefix": "/img/" })
        );
        assert_eq!(
            body_json(&call_of(&["cache", "ban", "example.com"])),
            json!({ "host": "example.com" })
        );
        let call = call_of(&["cache", "purge-tag", "product-42"]);
        assert_eq!(call.path, "/api/cache/purge-tag");
        assert_eq!(body_json(&call), json!({ "tag": "product-42" }));
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
            &["cache"],
            &["cache", "purge"],
            &["cache", "purge", "h/a", "--pool", "a b"],
            &["cache", "purge-tag"],
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
        assert_eq!(
            describe(&["cache", "purge", "example.com/a"], br#"{"purged":3}"#),
            "example.com/a: 3 responses purged\n"
        );
        assert_eq!(
            describe(
                &["cache", "ban", "example.com", "/img/"],
                br#"{"purged":1}"#
            ),
            "example.com/img/*: 1 response purged\n"
        );
        assert_eq!(
            describe(&["cache", "purge-tag", "red"], br#"{"purged":0}"#),
            "tag red: 0 responses purged\n"
        );
        let error = parse(&["drain", "app/b"])
            .unwrap()
            .command
            .describe_success(b"<html>")
            .unwrap_err();
        assert!(matches!(error, CtlError::Malformed(_)), "{error}");
    }
}
