//! Rate limits (`[route.rate_limit]`, `[listener.rate_limit]`): how many requests a key — the
//! client's address, a field, a cookie, the route — may make, by GCRA, in a table of each
//! key's theoretical arrival time that every worker shares without a lock (`table.rs`).
//!
//! A room beside the exchange: only `proxy/` calls it, and it imports only `http1` (the request
//! head), `transport` (the clock), `config` and `stats`. `RateLimits` is the process's set of
//! limits across reloads (a limit whose rule is unchanged keeps its counts); each worker takes
//! up its `ActiveLimits` with a new snapshot, and asks it once per request, after the route is
//! chosen. A request over a limit is answered here with a 429 (`answer.rs`) and never reaches a
//! server.

pub mod answer;
pub mod key;
pub mod limiter;
pub mod table;

use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};

use crate::config::rate_limit::RateLimitRule;
use crate::config::RouteConfig;
use crate::http1::Request;
use crate::transport::Moment;

pub use key::RequestKey;
pub use limiter::{LimitView, Limiter, Refusal};

/// The process's limits, shared by the workers and the admin API.
#[derive(Debug)]
pub struct RateLimits {
    /// Worker threads: each limit keeps counts per worker.
    workers: usize,
    followed: Mutex<Followed>,
}

/// The limits made for the config last followed, and what they were made of.
#[derive(Debug, Default)]
struct Followed {
    routes: Weak<Vec<RouteConfig>>,
    listeners: Vec<Option<RateLimitRule>>,
    active: Option<Arc<ActiveLimits>>,
}

/// The limits of one config, by route and listener slot: what a worker asks per request.
#[derive(Debug)]
pub struct ActiveLimits {
    routes: Box<[Option<Arc<Limiter>>]>,
    listeners: Box<[Option<Arc<Limiter>>]>,
}

impl RateLimits {
    pub fn new(workers: usize) -> Arc<RateLimits> {
        Arc::new(RateLimits {
            workers,
            followed: Mutex::new(Followed::default()),
        })
    }

    /// The limits of a config with `routes` and, per listener slot, `listeners`' rules: `None`
    /// when none has a limit. Called by a worker when it takes up a new snapshot, never per
    /// request: the lock is held for a comparison, or to make the limits of a new config (a
    /// limit whose rule, name included, is one of the config before keeps its table).
    pub fn follow(
        &self,
        routes: &Arc<Vec<RouteConfig>>,
        listeners: &[Option<&RateLimitRule>],
    ) -> Option<Arc<ActiveLimits>> {
        let mut followed = self
            .followed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let same_routes = followed
            .routes
            .upgrade()
            .is_some_and(|known| Arc::ptr_eq(&known, routes));
        let same_listeners = followed.listeners.len() == listeners.len()
            && followed
                .listeners
                .iter()
                .zip(listeners)
                .all(|(known, new)| known.as_ref() == *new);
        if same_routes && same_listeners {
            return followed.active.clone();
        }
        let any = routes.iter().any(|route| route.rate_limit.is_some())
            || listeners.iter().any(Option::is_some);
        let active = any.then(|| {
            let before = followed.active.as_deref();
            let mut made = |rule: &RateLimitRule| {
                before
                    .and_then(|before| before.find(rule))
                    .unwrap_or_else(|| Arc::new(Limiter::new(rule.clone(), self.workers)))
            };
            Arc::new(ActiveLimits {
                routes: routes
                    .iter()
                    .map(|route| route.rate_limit.as_deref().map(&mut made))
                    .collect(),
                listeners: listeners.iter().map(|rule| rule.map(&mut made)).collect(),
            })
        });
        *followed = Followed {
            routes: Arc::downgrade(routes),
            listeners: listeners.iter().map(|rule| rule.cloned()).collect(),
            active: active.clone(),
        };
        active
    }

    /// The limits in force now, as the admin API and the metrics show them: listeners' first,
    /// then routes', in config order.
    pub fn views(&self) -> Vec<LimitView> {
        let followed = self
            .followed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(active) = followed.active.as_deref() else {
            return Vec::new();
        };
        let mut seen: Vec<&Arc<Limiter>> = Vec::new();
        for limiter in active
            .listeners
            .iter()
            .chain(active.routes.iter())
            .flatten()
        {
            if !seen.iter().any(|known| Arc::ptr_eq(known, limiter)) {
                seen.push(limiter);
            }
        }
        seen.iter().map(|limiter| limiter.view()).collect()
    }
}

impl ActiveLimits {
    /// The limiter already made for `rule`, if any.
    fn find(&self, rule: &RateLimitRule) -> Option<Arc<Limiter>> {
        self.listeners
            .iter()
            .chain(self.routes.iter())
            .flatten()
            .find(|limiter| limiter.rule == *rule)
            .cloned()
    }

    /// Counts `request` (from `client`, on listener slot `listener`, matched by `route`) against
    /// its listener's limit, then its route's, on worker `worker`: the first it is over, if any.
    pub fn check<'l>(
        &'l self,
        listener: usize,
        route: Option<usize>,
        request: &Request<'_, '_>,
        client: IpAddr,
        now: Moment,
        worker: usize,
    ) -> Option<Refusal<'l>> {
        let listener_limit = self.listeners.get(listener).and_then(Option::as_deref);
        let route_limit = route
            .and_then(|route| self.routes.get(route))
            .and_then(Option::as_deref);
        [listener_limit, route_limit]
            .into_iter()
            .flatten()
            .find_map(|limiter| {
                let key = RequestKey::of(&limiter.rule.key, request, client);
                let retry_after_micros = limiter.check(key, now, worker)?;
                Some(Refusal {
                    limiter,
                    retry_after_micros,
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::rate_limit::LimitKey;
    use std::time::Duration;

    fn rule(name: &str, count: u32) -> RateLimitRule {
        RateLimitRule {
            name: name.into(),
            count,
            period: Duration::from_secs(1),
            burst: count,
            key: LimitKey::Client,
            max_keys: 100,
        }
    }

    fn routes(limits: &[Option<RateLimitRule>]) -> Arc<Vec<RouteConfig>> {
        Arc::new(
            limits
                .iter()
                .map(|limit| RouteConfig {
                    rate_limit: limit.clone().map(Box::new),
                    ..RouteConfig::to_first_pool(None, None)
                })
                .collect(),
        )
    }

    #[test]
    fn a_limit_keeps_its_table_while_its_rule_stays() {
        let shared = RateLimits::new(2);
        let none = routes(&[None]);
        assert!(shared.follow(&none, &[None]).is_none());
        let first = routes(&[Some(rule("route[0]", 5)), None]);
        let active = shared.follow(&first, &[None]).unwrap();
        // The same config again (a snapshot for a health change): the same limits.
        assert!(Arc::ptr_eq(
            &active,
            &shared.follow(&first, &[None]).unwrap()
        ));
        // A reload that keeps route[0]'s rule and adds a listener's limit keeps route[0]'s.
        let listener_rule = rule("listener web", 10);
        let reloaded = routes(&[Some(rule("route[0]", 5)), None]);
        let after = shared.follow(&reloaded, &[Some(&listener_rule)]).unwrap();
        let kept = |a: &ActiveLimits, b: &ActiveLimits| {
            Arc::ptr_eq(a.routes[0].as_ref().unwrap(), b.routes[0].as_ref().unwrap())
        };
        assert!(kept(&active, &after));
        assert_eq!(shared.views().len(), 2);
        assert_eq!(shared.views()[0].name, "listener web");
        // A changed rule is a new limit, with a fresh table.
        let changed = routes(&[Some(rule("route[0]", 6))]);
        let fresh = shared.follow(&changed, &[None]).unwrap();
        assert!(!kept(&after, &fresh));
    }
}
