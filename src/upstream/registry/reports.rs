//! What health checks and the request path report of a server, by its id: down or up again
//! (active checks), a refused connection and its end, an ejection after consecutive failures
//! (passive checks, within the pool's `max_ejected_percent`), and the tick that ends ejections
//! and steps slow-start ramps. Each change is published; none waits on its caller.

use std::collections::HashSet;

use super::Registry;

impl Registry {
    /// Active checks: marks the server with this id down, with the reason, or (`None`) up again.
    /// Changes nothing, and publishes nothing, when it already was.
    pub fn set_down(&self, id: u64, reason: Option<String>) {
        let mut state = self.lock();
        let Some(health) = state.lineage.health_mut(id) else {
            return;
        };
        if health.down == reason {
            return;
        }
        let name = self.name_of(id);
        match &reason {
            Some(why) => tracing::warn!(server = %name, reason = %why, "server down"),
            None => {
                tracing::info!(server = %name, "server up again");
                health.back_since = Some(std::time::Instant::now());
            }
        }
        health.down = reason;
        let _ = self.publish_logged(&mut state);
    }

    /// The server with this id refused a connection: it takes no new requests until a connection
    /// to it opens again ([`Registry::listening`]). No cap applies (unlike ejection): a refusal
    /// is certain, and a pool whose every server refuses has nothing to offer anyway. Returns
    /// the server's address when this took it out of rotation, for the caller to probe.
    pub fn refused(&self, id: u64) -> Option<std::net::SocketAddr> {
        let addr = self.addr_of(id)?;
        let mut state = self.lock();
        let health = state.lineage.health_mut(id)?;
        if health.refused {
            return None;
        }
        health.refused = true;
        tracing::warn!(server = %self.name_of(id), "server refused a connection: out of rotation until it listens again");
        let _ = self.publish_logged(&mut state);
        Some(addr)
    }

    /// Whether the server with this id is out of rotation for a refusal (false for a server that
    /// is gone).
    pub fn is_refused(&self, id: u64) -> bool {
        let mut state = self.lock();
        state
            .lineage
            .health_mut(id)
            .is_some_and(|health| health.refused)
    }

    /// A connection to the server with this id opened (a probe, or an active check): back in
    /// rotation if a refusal took it out.
    pub fn listening(&self, id: u64) {
        let mut state = self.lock();
        let Some(health) = state.lineage.health_mut(id) else {
            return;
        };
        if !health.refused {
            return;
        }
        health.refused = false;
        health.back_since = Some(std::time::Instant::now());
        tracing::info!(server = %self.name_of(id), "server listens again");
        let _ = self.publish_logged(&mut state);
    }

    /// Active checks of the server with this id passed `rise` times in a row since it was
    /// ejected: the ejection ends now. Passive and active checks agree on a server that is well
    /// again, and a recovered server no longer holds one of its pool's ejection slots.
    pub fn checks_pass(&self, id: u64) {
        let now = std::time::Instant::now();
        let mut state = self.lock();
        let Some(health) = state.lineage.health_mut(id) else {
            return;
        };
        if !health.is_ejected(now) {
            return;
        }
        health.ejected_until = Some(now);
        health.end_ejection(now);
        tracing::info!(server = %self.name_of(id), "ejection over: active checks pass");
        let _ = self.publish_logged(&mut state);
    }

    /// Passive checks: ejects the server with this id for its back-off, unless that would eject
    /// more than its pool's `max_ejected_percent`. Returns how long, if it was ejected.
    pub fn eject(&self, id: u64) -> Option<std::time::Duration> {
        let now = std::time::Instant::now();
        let snapshot = self.snapshot.load_full();
        let pool = snapshot
            .pools
            .iter()
            .find(|pool| pool.servers.iter().any(|s| s.id == id))?;
        let ids: HashSet<u64> = pool.servers.iter().map(|s| s.id).collect();
        let mut state = self.lock();
        let ejected = state
            .lineage
            .healths()
            .filter(|(_, other, health)| ids.contains(other) && health.is_ejected(now))
            .count();
        let allowed = pool.servers.len() * pool.passive.max_ejected_percent as usize / 100;
        let name = self.name_of(id);
        if ejected + 1 > allowed {
            tracing::warn!(
                server = %name,
                ejected,
                allowed,
                "server failing, but not ejected: the pool's max_ejected_percent is reached"
            );
            return None;
        }
        let health = state.lineage.health_mut(id)?;
        if health.is_ejected(now) {
            return None;
        }
        let length = health.eject(now, &pool.passive);
        tracing::warn!(server = %name, seconds = length.as_secs_f64(), "server ejected after consecutive failures");
        let _ = self.publish_logged(&mut state);
        Some(length)
    }

    /// Ends ejections whose time is up and steps slow-start ramps, publishing when anything
    /// changed. Returns when it next needs calling (`None`: nothing pending).
    pub fn tick(&self) -> Option<std::time::Instant> {
        let now = std::time::Instant::now();
        let snapshot = self.snapshot.load_full();
        let mut state = self.lock();
        let mut changed = false;
        let mut due: Option<std::time::Instant> = None;
        let mut next = |at: std::time::Instant| due = Some(due.map_or(at, |d| d.min(at)));
        for pool in &snapshot.pools {
            for server in &pool.servers {
                let Some(health) = state.lineage.health_mut(server.id) else {
                    continue;
                };
                if health.end_ejection(now) {
                    tracing::info!(pool = %pool.name, server = %server.name, "ejection over");
                    changed = true;
                }
                if let Some(until) = health.ejected_until {
                    next(until);
                }
                let ramping = health.ramp(now, pool.slow_start) < 1.0;
                if ramping || server.effective_weight != server.weight && health.is_available(now) {
                    // Each second of a ramp, a new weight.
                    changed = true;
                    if ramping {
                        next(now + std::time::Duration::from_secs(1));
                    }
                }
            }
        }
        if changed {
            let _ = self.publish_logged(&mut state);
        }
        due
    }

    /// The address of the server with this id.
    fn addr_of(&self, id: u64) -> Option<std::net::SocketAddr> {
        let snapshot = self.snapshot.load();
        snapshot
            .pools
            .iter()
            .flat_map(|pool| &pool.servers)
            .find(|server| server.id == id)
            .map(|server| server.addr)
    }

    /// "pool/server" for the server with this id, for logs.
    fn name_of(&self, id: u64) -> String {
        let snapshot = self.snapshot.load();
        snapshot
            .pools
            .iter()
            .find_map(|pool| {
                let server = pool.servers.iter().find(|s| s.id == id)?;
                Some(format!("{}/{}", pool.name, server.name))
            })
            .unwrap_or_else(|| format!("#{id}"))
    }
}
