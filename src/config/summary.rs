//! The summary `herdsman check` prints for a valid config.

use super::check::{BALANCES, INTAKE_MODES};
use super::Config;

/// What `herdsman check` prints for a valid config: workers, then each listener and pool, and
/// each pool's servers, one line each.
pub(super) fn summary(config: &Config) -> String {
    let intake = INTAKE_MODES.word_for(config.intake);
    let mut lines = vec![format!("workers: {} (intake {intake})", config.workers)];
    for listener in &config.listeners {
        let pool = config
            .pools
            .get(listener.pool)
            .map_or("?", |pool| pool.name.as_str());
        lines.push(format!(
            "listener {}  {}  backlog {}  → pool {pool}",
            listener.name, listener.bind, listener.backlog
        ));
    }
    for pool in &config.pools {
        let balance = BALANCES.word_for(pool.balance);
        let count = pool.servers.len();
        let plural = if count == 1 { "" } else { "s" };
        lines.push(format!(
            "pool {}  {balance}  {count} server{plural}",
            pool.name
        ));
        for server in &pool.servers {
            lines.push(format!(
                "  server {}  {}  weight {}",
                server.name, server.addr, server.weight
            ));
        }
    }
    if let Some(admin) = &config.admin {
        let token = match &admin.token_env {
            Some(name) => format!("token from ${name}"),
            None => "no token (loopback only)".to_string(),
        };
        lines.push(format!("admin {}  {token}", admin.bind));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::valid_with;
    use crate::config::load::from_toml;

    #[test]
    fn the_summary_has_one_line_per_listener_pool_and_server() {
        let config = from_toml(&valid_with("balance = \"least-conn\"\n", ""), "t").unwrap();
        assert_eq!(
            summary(&config),
            "workers: 3 (intake reuseport)\n\
             listener web  127.0.0.1:8080  backlog 1024  → pool app\n\
             listener internal  [::1]:0  backlog 4096  → pool api\n\
             pool app  round-robin  2 servers\n  \
             server a  127.0.0.1:9001  weight 1\n  \
             server b  127.0.0.1:9002  weight 2\n\
             pool api  p2c  1 server\n  \
             server x  10.0.0.7:80  weight 0"
        );
    }
}
