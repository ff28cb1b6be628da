//! The summary `herdsman check` prints for a valid config.

use super::answers::RouteAnswer;
use super::check::{ACCESS_LOG_FORMATS, BALANCES, INTAKE_MODES, LOG_LEVELS};
use super::duration::format_duration;
use super::{Config, HashKey, ServerState};

/// What `herdsman check` prints for a valid config: workers and the log level, then each
/// listener (with its access log and upgrades, and under a TLS one what its TLS speaks and
/// serves), route and pool, and each pool's servers, one line each.
pub(super) fn summary(config: &Config) -> String {
    let intake = INTAKE_MODES.word_for(config.intake);
    let level = LOG_LEVELS.word_for(config.log.level);
    let mut lines = vec![format!(
        "workers: {} (intake {intake})  log level {level}",
        config.workers
    )];
    for listener in &config.listeners {
        let pool = config
            .pools
            .get(listener.pool)
            .map_or("?", |pool| pool.name.as_str());
        let access_log = listener.access_log.as_ref().map_or(String::new(), |log| {
            let format = ACCESS_LOG_FORMATS.word_for(log.format);
            format!("  access log {} ({format})", log.path.display())
        });
        // Said only when not the default (websocket), which most listeners keep.
        let upgrades: Vec<&str> = listener.upgrade.names().collect();
        let upgrade = match upgrades.as_slice() {
            ["websocket"] => String::new(),
            [] => "  upgrade none".to_string(),
            names => format!("  upgrade {}", names.join(", ")),
        };
        let defer = match listener.defer_accept.is_zero() {
            true => String::new(),
            false => format!("  defer_accept {}", format_duration(listener.defer_accept)),
        };
        let tls = listener
            .tls_description()
            .map_or(String::new(), |tls| format!("\n  {tls}"));
        lines.push(format!(
            "listener {}  {}  backlog {}{defer}  → pool {pool}{access_log}{upgrade}{tls}",
            listener.name, listener.bind, listener.backlog
        ));
    }
    for route in config.routes.iter() {
        let host = route.host_words();
        let path = route.path_prefix.as_deref().unwrap_or("/");
        let target = match (&route.answer, route.pool) {
            (Some(answer), _) => answer_words(answer),
            (None, pool) => {
                let pool = pool.and_then(|index| config.pools.get(index));
                format!("pool {}", pool.map_or("?", |pool| pool.name.as_str()))
            }
        };
        let when = if route.when.is_some() {
            "  when …"
        } else {
            ""
        };
        let rewrite = if route.rewrite.is_some() {
            "  (target rewritten)"
        } else {
            ""
        };
        lines.push(format!(
            "route {host}  path {path}*{when}  → {target}{rewrite}"
        ));
    }
    for pool in &config.pools {
        let mut balance = BALANCES.word_for(pool.balance).to_string();
        if pool.balance == crate::config::Balance::PeakEwma {
            balance.push_str(&format!(" over {}", format_duration(pool.latency_window)));
        }
        match &pool.hash_key {
            _ if pool.balance != crate::config::Balance::Hash => {}
            HashKey::SourceIp => balance.push_str(" of source-ip"),
            HashKey::Header(name) => balance.push_str(&format!(" of header:{name}")),
            HashKey::Cookie(name) => balance.push_str(&format!(" of cookie:{name}")),
        }
        let count = pool.servers.len();
        let plural = if count == 1 { "" } else { "s" };
        let sticky = pool.sticky.as_ref().map_or(String::new(), |sticky| {
            format!("  sticky cookie {}", sticky.cookie)
        });
        let health = match &pool.health {
            None => String::new(),
            Some(check) => match &check.kind {
                super::HealthKind::Tcp => format!("  tcp check every {:?}", check.interval),
                super::HealthKind::Http { method, path, .. } => {
                    format!("  {method} {path} check every {:?}", check.interval)
                }
                super::HealthKind::Grpc { service } => {
                    format!("  gRPC check of {service:?} every {:?}", check.interval)
                }
            },
        };
        let protocol = match pool.protocol {
            super::ServerProtocol::Http1 => "",
            super::ServerProtocol::H2 => "  HTTP/2",
            super::ServerProtocol::H2c => "  HTTP/2 (h2c)",
        };
        let tls = pool.tls.as_ref().map_or(String::new(), |tls| {
            let roots = match &tls.roots {
                super::server_tls::Roots::File(path) => format!("CA {}", path.display()),
                super::server_tls::Roots::System => "system CAs".to_string(),
            };
            let checked = if tls.verify {
                roots
            } else {
                "NOT VERIFIED".to_string()
            };
            let name = tls
                .sni
                .as_ref()
                .map_or(String::new(), |sni| format!(" as {sni}"));
            let presents = tls
                .client_certificate
                .as_ref()
                .map_or(String::new(), |_| ", client certificate".to_string());
            format!("  TLS{name} ({checked}{presents})")
        });
        lines.push(format!(
            "pool {}  {balance}  {count} server{plural}{protocol}{sticky}{health}{tls}",
            pool.name
        ));
        for server in &pool.servers {
            let state = match server.state {
                ServerState::Ready => String::new(),
                other => format!("  {}", other.word()),
            };
            let sni = server
                .sni
                .as_ref()
                .map_or(String::new(), |sni| format!("  TLS as {sni}"));
            lines.push(format!(
                "  server {}  {}  weight {}{state}{sni}",
                server.name, server.addr, server.weight
            ));
        }
    }
    if let Some(admin) = &config.admin {
        let token = match &admin.token_env {
            Some(name) => format!("token from ${name}"),
            None => "no token (loopback only)".to_string(),
        };
        let mut places: Vec<String> = admin.bind.iter().map(ToString::to_string).collect();
        if let Some(socket) = &admin.socket {
            places.push(format!(
                "socket {} (mode {:04o})",
                socket.path.display(),
                socket.mode
            ));
        }
        lines.push(format!("admin {}  {token}", places.join(" and ")));
    }
    lines.join("\n")
}

/// What a route that answers itself answers, as the summary says it: `redirect 301 to
/// https://{host}/new/{path_rest}`, `respond 503 (18 bytes)`.
fn answer_words(answer: &RouteAnswer) -> String {
    match answer {
        RouteAnswer::Redirect(redirect) => {
            format!("redirect {} to {}", redirect.status, redirect.to)
        }
        RouteAnswer::Respond(fixed) => {
            format!("respond {} ({} bytes)", fixed.status, fixed.body.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::valid_with;
    use crate::config::load::from_toml;

    #[test]
    fn the_summary_has_one_line_per_listener_pool_and_server() {
        let text = valid_with("balance = \"least-conn\"\n", "balance = \"round-robin\"\n").replace(
            "balance = \"p2c\"",
            "balance = \"peak-ewma\"\nlatency_window = \"5s\"",
        );
        let config = from_toml(&text, "t").unwrap();
        assert_eq!(
            summary(&config),
            "workers: 3 (intake reuseport)  log level info\n\
             listener web  127.0.0.1:8080  backlog 1024  → pool app\n\
             listener internal  [::1]:0  backlog 4096  → pool api\n\
             route host *.example.com  path /api/*  → pool api\n\
             route host shop.example.com  path /*  → pool shop\n\
             pool app  round-robin  2 servers\n  \
             server a  127.0.0.1:9001  weight 1\n  \
             server b  127.0.0.1:9002  weight 2\n\
             pool api  peak-ewma over 5s  1 server\n  \
             server x  10.0.0.7:80  weight 0\n\
             pool shop  hash of header:x-user  2 servers  sticky cookie SHOP\n  \
             server s1  127.0.0.1:9101  weight 1\n  \
             server s2  127.0.0.1:9102  weight 1  drain"
        );
    }

    #[test]
    fn the_summary_shows_each_listeners_access_log_upgrades_and_the_log_level() {
        let text = valid_with(
            "backlog = 1024\n",
            "backlog = 1024\ndefer_accept = \"1s\"\naccess_log = \"/var/log/herdsman/web.log\"\naccess_log_format = \"json\"\nupgrade = []\n",
        )
        .replace("shutdown_grace = \"15s\"\n", "shutdown_grace = \"15s\"\n[log]\nlevel = \"warn\"\n");
        let summary = summary(&from_toml(&text, "t").unwrap());
        let lines: Vec<&str> = summary.lines().take(3).collect();
        assert_eq!(
            lines,
            [
                "workers: 3 (intake reuseport)  log level warn",
                "listener web  127.0.0.1:8080  backlog 1024  defer_accept 1s  → pool app  access log /var/log/herdsman/web.log (json)  upgrade none",
                "listener internal  [::1]:0  backlog 4096  → pool api",
            ]
        );
    }
}
