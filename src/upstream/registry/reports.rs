//! What health checks and the request path report of a server, by its id: down or up again
//! (active checks), a refused connection and its end, an ejection after consecutive failures
//! (passive checks, within the pool's `max_ejected_percent`), and the tick that ends ejections
//! and steps slow-start ramps. None waits on its caller.
//!
//! What a check finds (down, up, listening again, well again after an ejection) waits for
//! [`Registry::publish_health`], so that the checker publishes many at once: a snapshot of 10,000
//! servers takes milliseconds to build, and checks finding a hundred of them changed within a
//! second would otherwise build a hundred. What the request path reports (a refusal, an
//! ejection) is published at once: requests must stop going there now.

use std::collections::{HashMap, HashSet};

use super::Registry;
use crate::config::ServerAddr;
use crate::upstream::health::Health;

impl Registry {
    /// Active checks: marks the server with this id down, with the reason, or (`None`) up again,
    /// for the next [`Registry::publish_health`]. Returns whether that changed anything.
    pub fn set_down(&self, id: u64, reason: Option<String>) -> bool {
        let mut state = self.lock();
        let Some(health) = state.lineage.health_mut(id) else {
            return false;
        };
        if health.down == reason {
            return false;
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
        state.health_waiting = true;
        true
    }

    /// Publishes the changes checks found since the last snapshot, if any; returns whether it did.
    pub fn publish_health(&self) -> bool {
        let mut state = self.lock();
        state.health_waiting && self.publish_logged(&mut state).is_ok()
    }

    /// The server with this id refused a connection: it takes no new requests until a connection
    /// to it opens again ([`Registry::listening`]). No cap applies (unlike ejection): a refusal
    /// is certain, and a pool whose every server refuses has nothing to offer anyway. Returns
    /// the server's address when this took it out of rotation, for the caller to probe.
    pub fn refused(&self, id: u64) -> Option<ServerAddr> {
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

    /// A connection to the server with this id opened (a probe, or an active check): back in
    /// rotation if a refusal took it out, at the next [`Registry::publish_health`]. Returns
    /// whether that changed anything.
    pub fn listening(&self, id: u64) -> bool {
        let mut state = self.lock();
        let Some(health) = state.lineage.health_mut(id) else {
            return false;
        };
        if !health.refused {
            return false;
        }
        health.refused = false;
        health.back_since = Some(std::time::Instant::now());
        tracing::info!(server = %self.name_of(id), "server listens again");
        state.health_waiting = true;
        true
    }

    /// Active checks of the server with this id passed `rise` times in a row since it was
    /// ejected: the ejection ends, at the next [`Registry::publish_health`]. Passive and active
    /// checks agree on a server that is well again, and a recovered server no longer holds one of
    /// its pool's ejection slots. Returns whether that changed anything.
    pub fn checks_pass(&self, id: u64) -> bool {
        let now = std::time::Instant::now();
        let mut state = self.lock();
        let Some(health) = state.lineage.health_mut(id) else {
            return false;
        };
        if !health.is_ejected(now) {
            return false;
        }
        health.ejected_until = Some(now);
        health.end_ejection(now);
        tracing::info!(server = %self.name_of(id), "ejection over: active checks pass");
        state.health_waiting = true;
        true
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

    /// Active checks of the servers with these ids stopped (the servers are gone, or their pool's
    /// checks changed): each that checks held down is up again as far as checks go. One look at
    /// every server and one snapshot for them all, however many stopped (a reload may stop
    /// 10,000 at once).
    pub fn checks_stopped(&self, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        let stopped: HashSet<u64> = ids.iter().copied().collect();
        let mut state = self.lock();
        // Found first, changed after: a server's health is found by id only by looking through
        // every server (`Lineage::health_mut`), so only those held down are looked up again.
        let held_down: Vec<u64> = state
            .lineage
            .healths()
            .filter(|(_, id, health)| stopped.contains(id) && health.down.is_some())
            .map(|(_, id, _)| id)
            .collect();
        for &id in &held_down {
            if let Some(health) = state.lineage.health_mut(id) {
                health.down = None;
                health.back_since = Some(std::time::Instant::now());
            }
            tracing::info!(server = %self.name_of(id), "server up again: its checks stopped");
        }
        if !held_down.is_empty() {
            let _ = self.publish_logged(&mut state);
        }
    }

    /// Ends ejections whose time is up and steps slow-start ramps, publishing when anything
    /// changed. Returns when it next needs calling (`None`: nothing pending). Looks at each
    /// server once: the checker calls it after every snapshot.
    pub fn tick(&self) -> Option<std::time::Instant> {
        let now = std::time::Instant::now();
        let snapshot = self.snapshot.load_full();
        let mut state = self.lock();
        // Ejections that end now, found with one look at every server, then ended one by one
        // (`health_mut` looks through every server for each).
        let ending: Vec<u64> = state
            .lineage
            .healths()
            .filter(|(_, _, health)| health.ejected_until.is_some_and(|until| until <= now))
            .map(|(_, id, _)| id)
            .collect();
        for &id in &ending {
            if let Some(health) = state.lineage.health_mut(id) {
                health.end_ejection(now);
            }
            tracing::info!(server = %self.name_of(id), "ejection over");
        }
        let healths: HashMap<u64, &Health> = state
            .lineage
            .healths()
            .map(|(_, id, health)| (id, health))
            .collect();
        let mut changed = !ending.is_empty();
        let mut due: Option<std::time::Instant> = None;
        let mut next = |at: std::time::Instant| due = Some(due.map_or(at, |d| d.min(at)));
        for pool in &snapshot.pools {
            for server in &pool.servers {
                let Some(health) = healths.get(&server.id) else {
                    continue;
                };
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
    fn addr_of(&self, id: u64) -> Option<ServerAddr> {
        let snapshot = self.snapshot.load();
        snapshot
            .pools
            .iter()
            .flat_map(|pool| &pool.servers)
            .find(|server| server.id == id)
            .map(|server| server.addr.clone())
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
