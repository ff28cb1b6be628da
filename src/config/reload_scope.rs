//! What a reload does with each key of the file: applies it, or holds it back until a restart
//! and says so. This is the one place a key is classified.
//!
//! A reload applies:
//! - `shutdown_grace` and `hard_stop_after`: read when a stop or a binary upgrade's hand-over
//!   begins (`Server::stop`, `Server::hand_over`).
//! - `[timeouts]`, `[limits]`, `[buffering]`, `[headers]`, `[request_id]`, `[[route]]` and
//!   `[[pool]]` with everything in them: the workers
//!   read them from the snapshot, which every reload builds anew from the file
//!   (`upstream::snapshot`), and the health checker follows the snapshot's `[pool.health]`. A
//!   route's `[route.redirect]`, `[route.respond]` (its `body_file` read again by the check) and
//!   `[route.rewrite]` are in the route; their answer counts are kept while a rule stays at its
//!   place (`stats::rules`).
//! - `[[listener]]`s added and removed, and a listener's `bind` (closed and opened anew), `pool`,
//!   `access_log`, `access_log_format` and `upgrade` (the snapshot's, per listener) and
//!   `max_connections` (its shared load's limit): see `upstream::registry`.
//! - a TLS listener's certificates and `acme`, and `[tls] acme_state_dir`: new handshakes take
//!   the new certificates; the ACME thread (`acme::`) follows the config each reload publishes
//!   (a moved state directory gets the accounts and certificates in use copied into it).
//!
//! A running process cannot change the rest; a restart, or a binary upgrade (which reads the
//! file anew), takes them up: `workers`, `intake`, `[admin]` (`bind`, `socket` and its mode and
//! ownership, `allowed_hosts`, `token_env`), `[log] level`
//! and the `backlog` of a listener whose `bind` stays. [`hold_back_restart_only`] names them.
//!
//! A new key: one the workers read from the snapshot applies by construction (say so in its
//! doc). Any other must be classified here — held back below, or listed above with what applies
//! it. `Config`, `ListenerConfig`, `AdminSettings` and `LogSettings` are taken apart field by
//! field below, so that a new field in one of them does not compile until it is.

use super::{AdminSettings, Config, ListenerConfig, LogSettings};

/// The keys a reload to `fresh` (the file as now written) would change from `running` but cannot,
/// named as the file writes them, with `running`'s values put back into `fresh`: the running
/// config then says what is in force, and each later reload names them again until a restart.
pub fn hold_back_restart_only(running: &Config, fresh: &mut Config) -> Vec<String> {
    let Config {
        workers,
        intake,
        // Read when a stop or a hand-over begins.
        shutdown_grace: _,
        hard_stop_after: _,
        listeners,
        // In the snapshot.
        timeouts: _,
        limits: _,
        http2: _,
        buffering: _,
        // In the snapshot; the workers take up a new, empty store when it (or any pool's
        // `[pool.cache]`) changes (`cache::shared`).
        cache: _,
        // In the snapshot (and each route's in its route).
        compression: _,
        routes: _,
        pools: _,
        admin,
        log,
        // Installed by the reload itself.
        ticket_keys: _,
        // Read by the ACME thread at each pass, as the listeners' `acme` settings are.
        acme_state_dir: _,
        // The file's own, logged by whoever read it.
        warnings: _,
        // In the snapshot: the workers connect to the new server at their next check.
        rate_limit_redis: _,
        // In the snapshot.
        real_ip: _,
        // In the snapshot (and each route's in its route): new requests take the new rules.
        headers: _,
        request_id: _,
    } = running;
    let mut held_back = Vec::new();
    let mut hold = |changed: bool, key: String| {
        if changed {
            held_back.push(key);
        }
    };
    hold(fresh.workers != *workers, "workers".to_string());
    hold(fresh.intake != *intake, "intake".to_string());
    match (admin, &fresh.admin) {
        (
            Some(AdminSettings {
                bind,
                socket,
                allowed_hosts,
                token_env,
            }),
            Some(new),
        ) => {
            hold(new.bind != *bind, "[admin] bind".to_string());
            hold(new.socket != *socket, "[admin] socket".to_string());
            hold(
                new.allowed_hosts != *allowed_hosts,
                "[admin] allowed_hosts".to_string(),
            );
            hold(new.token_env != *token_env, "[admin] token_env".to_string());
        }
        (None, None) => {}
        _ => hold(true, "[admin]".to_string()),
    }
    let LogSettings { level, format } = log;
    hold(fresh.log.level != *level, "[log] level".to_string());
    hold(fresh.log.format != *format, "[log] format".to_string());
    for old in listeners {
        let ListenerConfig {
            // With `bind`, which listener it is: one whose bind changes is opened anew.
            name,
            bind,
            backlog,
            defer_accept,
            // In the snapshot, per listener.
            pool: _,
            access_log: _,
            upgrade: _,
            // Certificates swap in on reload: new handshakes take the new ones. Its `acme`
            // settings too: the ACME thread follows the config the reload publishes.
            tls: _,
            redirect_https: _,
            access: _,
            h2c: _,
            rate_limit: _,
            // The listener's shared load, which a reload sets.
            max_connections: _,
        } = old;
        let same_socket = fresh
            .listeners
            .iter_mut()
            .find(|new| new.name == *name && new.bind == *bind);
        if let Some(new) = same_socket {
            hold(
                new.backlog != *backlog,
                format!("backlog of listener {name:?}"),
            );
            new.backlog = *backlog;
            hold(
                new.defer_accept != *defer_accept,
                format!("defer_accept of listener {name:?}"),
            );
            new.defer_accept = *defer_accept;
        }
    }
    fresh.workers = *workers;
    fresh.intake = *intake;
    fresh.admin.clone_from(admin);
    fresh.log = *log;
    held_back
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::VALID;
    use crate::config::load::from_toml;

    #[test]
    fn restart_only_changes_are_named_and_held_back_and_the_rest_goes_through() {
        let running = from_toml(VALID, "running").unwrap();
        let changed = VALID
            .replace("workers = 3", "workers = 4")
            .replace("intake = \"reuseport\"", "intake = \"balanced\"")
            .replace("backlog = 1024", "backlog = 512")
            .replace("shutdown_grace = \"15s\"", "shutdown_grace = \"2s\"")
            .replace("connect = \"1s\"", "connect = \"3s\"")
            + "\n[log]\nlevel = \"debug\"\n[admin]\nbind = \"127.0.0.1:9900\"\n";
        let mut fresh = from_toml(&changed, "fresh").unwrap();
        let held_back = hold_back_restart_only(&running, &mut fresh);
        assert_eq!(
            held_back,
            [
                "workers",
                "intake",
                "[admin]",
                "[log] level",
                "backlog of listener \"web\""
            ]
        );
        assert_eq!(
            (fresh.workers, fresh.intake, fresh.listeners[0].backlog),
            (
                running.workers,
                running.intake,
                running.listeners[0].backlog
            )
        );
        assert_eq!((&fresh.admin, fresh.log), (&running.admin, running.log));
        // What a reload applies stays as the file says.
        assert_eq!(fresh.shutdown_grace, std::time::Duration::from_secs(2));
        assert_eq!(fresh.timeouts.connect, std::time::Duration::from_secs(3));
        // Nothing to hold back: nothing named.
        let mut same = from_toml(VALID, "same").unwrap();
        assert!(hold_back_restart_only(&running, &mut same).is_empty());
    }

    #[test]
    fn a_listener_that_moves_takes_its_new_backlog() {
        let running = from_toml(VALID, "running").unwrap();
        let moved = VALID
            .replace("127.0.0.1:8080", "127.0.0.1:8081")
            .replace("backlog = 1024", "backlog = 512");
        let mut fresh = from_toml(&moved, "fresh").unwrap();
        assert!(hold_back_restart_only(&running, &mut fresh).is_empty());
        assert_eq!(fresh.listeners[0].backlog, 512);
    }
}
