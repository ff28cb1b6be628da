//! herdsman in front of the backend for `slowloris`, started together and stopped together (on
//! drop). herdsman's configuration is `compare`'s (the same keep-alive and idle settings as its
//! herdsman row), with one change: a `client_header` timeout longer than any slow head is held.

use std::path::Path;

use crate::kit::proxies::{self, Plan};
use crate::kit::stack::Stack;

/// A slow head is held for one run "with" (its wrk run plus a few seconds); herdsman's default
/// `client_header` of 10 s would answer it with 408 and close it in the middle of that run, and
/// the cost of holding it would go unmeasured. Also at least this long.
const CLIENT_HEADER_AT_LEAST_SECONDS: u32 = 300;

/// The `client_header` timeout for runs of `seconds`: longer than a slow head is ever held.
pub fn client_header_seconds(seconds: u32) -> u32 {
    CLIENT_HEADER_AT_LEAST_SECONDS.max(seconds + 120)
}

/// compare's herdsman configuration with `client_header` set.
pub fn config(plan: Plan, client_header_seconds: u32) -> String {
    let base = proxies::herdsman_config(plan, None);
    base.replacen(
        "[timeouts]\n",
        &format!(
            "[timeouts]\n\
             # Longer than a slow head is held (herdsman's default is 10s), so that herdsman\n\
             # holds it for the whole run instead of answering 408.\n\
             client_header = \"{client_header_seconds}s\"\n"
        ),
        1,
    )
}

/// Starts the backend and herdsman with `workers` and this configuration; the config and logs go
/// into `dir`.
pub fn start(
    herdsman: &Path,
    workers: u32,
    client_header_seconds: u32,
    dir: &Path,
) -> anyhow::Result<Stack> {
    Stack::start_with(herdsman, dir, |ports| {
        config(
            Plan::herdsman_alone(workers, ports.port, ports.backend_port),
            client_header_seconds,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: Plan = Plan::herdsman_alone(2, 4100, 4200);

    #[test]
    fn the_header_timeout_goes_into_compare_s_timeouts_table() {
        let text = config(PLAN, 300);
        assert_eq!(text.matches("[timeouts]").count(), 1, "{text}");
        assert_eq!(text.matches("client_header = ").count(), 1, "{text}");
        let table = text.split("[timeouts]\n").nth(1).unwrap();
        let table = table.split("\n[").next().unwrap();
        assert!(table.contains("client_header = \"300s\"\n"), "{text}");
        assert!(table.contains("client_idle = \"300s\""), "{text}");
        // Everything else is compare's configuration.
        let without: String = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("client_header"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(without, proxies::herdsman_config(PLAN, None));
    }

    #[test]
    fn the_header_timeout_outlasts_long_runs() {
        assert_eq!(client_header_seconds(10), 300);
        assert_eq!(client_header_seconds(600), 720);
    }
}
