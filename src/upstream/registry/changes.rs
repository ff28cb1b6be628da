//! Changes made while running, through the admin API: servers added and removed, their state
//! and weight set, and the test token that reaches a server in the `test` state. Each is checked,
//! made to the running config, remembered (so that a reload keeps it) and published.

use crate::config::{is_valid_name, Config, ServerConfig, ServerState};

use super::{find, key, ChangeError, NewServer, Registry, ServerView, MAX_WEIGHT};

impl Registry {
    pub fn add_server(&self, pool: &str, server: NewServer) -> Result<ServerView, ChangeError> {
        if !is_valid_name(&server.name) {
            return Err(ChangeError::Invalid(format!(
                "server name {:?} is not valid: use up to 255 letters, digits, '_', '.' and '-'",
                server.name
            )));
        }
        check_weight(server.weight)?;
        if server.addr.tcp().is_some_and(|addr| addr.port() == 0) {
            return Err(ChangeError::Invalid(format!(
                "address {} has port 0, which cannot be connected to",
                server.addr
            )));
        }
        let mut state = self.lock();
        let pool_config = pool_mut(&mut state.config, pool)?;
        if server.addr.is_unix() && pool_config.tls.is_some() {
            return Err(ChangeError::Invalid(format!(
                "pool {pool:?} speaks TLS to its servers ([pool.tls]); a server on a UNIX socket is \
                 spoken to in cleartext"
            )));
        }
        let servers = &mut pool_config.servers;
        if servers.iter().any(|s| s.name == server.name) {
            return Err(ChangeError::Exists {
                pool: pool.to_string(),
                server: server.name,
            });
        }
        let added = ServerConfig {
            name: server.name.clone(),
            addr: server.addr.clone(),
            weight: server.weight,
            state: server.state,
            max_connections: server.max_connections,
            // A server added at run time is asked for its pool's name, or its address.
            sni: None,
        };
        servers.push(added.clone());
        state.added.insert(key(pool, &server.name), added);
        self.publish(&mut state)?;
        tracing::info!(pool, server = %server.name, addr = %server.addr, "server added");
        self.view(pool, &server.name)
    }

    /// Removes a server: it gets no new requests; those in flight finish.
    pub fn remove_server(&self, pool: &str, name: &str) -> Result<ServerView, ChangeError> {
        let removed = self.view(pool, name)?;
        let mut state = self.lock();
        let servers = &mut pool_mut(&mut state.config, pool)?.servers;
        let index = position(servers, pool, name)?;
        servers.remove(index);
        let server_key = key(pool, name);
        state.added.remove(&server_key);
        state.states.remove(&server_key);
        state.weights.remove(&server_key);
        self.publish(&mut state)?;
        tracing::info!(pool, server = name, "server removed");
        Ok(removed)
    }

    pub fn set_state(
        &self,
        pool: &str,
        name: &str,
        new_state: ServerState,
    ) -> Result<ServerView, ChangeError> {
        let mut state = self.lock();
        let servers = &mut pool_mut(&mut state.config, pool)?.servers;
        let index = position(servers, pool, name)?;
        servers[index].state = new_state;
        state.states.insert(key(pool, name), new_state);
        self.publish(&mut state)?;
        tracing::info!(
            pool,
            server = name,
            state = new_state.word(),
            "server state set"
        );
        drop(state);
        self.view(pool, name)
    }

    pub fn set_weight(
        &self,
        pool: &str,
        name: &str,
        weight: u32,
    ) -> Result<ServerView, ChangeError> {
        check_weight(weight)?;
        let mut state = self.lock();
        let servers = &mut pool_mut(&mut state.config, pool)?.servers;
        let index = position(servers, pool, name)?;
        servers[index].weight = weight;
        state.weights.insert(key(pool, name), weight);
        self.publish(&mut state)?;
        tracing::info!(pool, server = name, weight, "server weight set");
        drop(state);
        self.view(pool, name)
    }

    /// The `X-Herdsman-Test` value that reaches `name` while it is in the `test` state.
    pub fn test_token(&self, pool: &str, name: &str) -> Result<String, ChangeError> {
        let snapshot = self.snapshot.load();
        let (pool, index) = find(&snapshot, pool, name)?;
        Ok(pool.key.test_token(&pool.name, &pool.servers[index].name))
    }
}

fn check_weight(weight: u32) -> Result<(), ChangeError> {
    if weight > MAX_WEIGHT {
        return Err(ChangeError::Invalid(format!(
            "weight {weight} is out of range: 0 to {MAX_WEIGHT} (0 takes no new requests)"
        )));
    }
    Ok(())
}

fn pool_mut<'c>(
    config: &'c mut Config,
    pool: &str,
) -> Result<&'c mut crate::config::PoolConfig, ChangeError> {
    config
        .pools
        .iter_mut()
        .find(|p| p.name == pool)
        .ok_or_else(|| ChangeError::NoPool(pool.to_string()))
}

fn position(servers: &[ServerConfig], pool: &str, name: &str) -> Result<usize, ChangeError> {
    servers
        .iter()
        .position(|s| s.name == name)
        .ok_or_else(|| ChangeError::NoServer {
            pool: pool.to_string(),
            server: name.to_string(),
        })
}
