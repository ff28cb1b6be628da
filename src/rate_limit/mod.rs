//! Rate limits (`[route.rate_limit]`, `[listener.rate_limit]`): how many requests a key — the
//! client's address, a field, a cookie, the route — may make, by GCRA, in a table of each
//! key's theoretical arrival time that every worker shares without a lock (`table.rs`).
//!
//! With `[rate_limit] redis` the counts are kept in Redis as well (`redis.rs`), shared by the
//! instances that use it, the local limit in front.
//!
//! A room beside the exchange: only `proxy/` calls it, and it imports only `http1` (the request
//! head), `transport` (the clock, the stream to Redis), `config` and `stats`. `RateLimits` is the process's set of
//! limits across reloads (a limit whose rule is unchanged keeps its counts); each worker takes
//! up its `ActiveLimits` with a new snapshot, and asks it once per request, after the route is
//! chosen. A request over a limit is answered here with a 429 (`answer.rs`) and never reaches a
//! server.

pub mod answer;
pub mod key;
pub mod limiter;
pub mod redis;
pub mod table;

use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};

use crate::config::rate_limit::{RateLimitRule, RedisSettings};
use crate::config::RouteConfig;
use crate::http1::Request;
use crate::stats::log_every::LogEvery;
use crate::transport::Moment;

pub use key::RequestKey;
pub use limiter::{LimitView, Limiter, Refusal};
pub use redis::RedisLink;

/// A failed Redis check is logged at most this often, process-wide (with how many since).
const REDIS_FAILURE_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
static REDIS_FAILURES: LogEvery = LogEvery::new();

/// What a request's refusal waits, when Redis failed and `on_redis_error = "deny"`.
const DENIED_WAIT_MICROS: u64 = 1_000_000;

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

/// What a check is about: a request, the listener slot it came on and the route it matched,
/// its client's address, when it came, and the worker asking.
pub struct Asked<'a> {
    pub listener: usize,
    pub route: Option<usize>,
    pub request: &'a Request<'a, 'a>,
    pub client: IpAddr,
    pub now: Moment,
    pub worker: usize,
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

    /// Counts the request `asked` about against its listener's limit, then its route's: the
    /// first it is over, if any.
    pub fn check<'l>(&'l self, asked: &Asked<'_>) -> Option<Refusal<'l>> {
        self.limiters_of(asked).find_map(|limiter| {
            let key = RequestKey::of(&limiter.rule.key, asked.request, asked.client);
            let retry_after_micros = limiter.check(key, asked.now, asked.worker)?;
            Some(Refusal {
                limiter,
                retry_after_micros,
            })
        })
    }

    /// The limits the request `asked` about is held to: its listener's, then its route's.
    fn limiters_of(&self, asked: &Asked<'_>) -> impl Iterator<Item = &Limiter> {
        let listener_limit = self
            .listeners
            .get(asked.listener)
            .and_then(Option::as_deref);
        let route_limit = asked
            .route
            .and_then(|route| self.routes.get(route))
            .and_then(Option::as_deref);
        [listener_limit, route_limit].into_iter().flatten()
    }
}

impl ActiveLimits {
    /// As [`ActiveLimits::check`], with the counts in Redis (`settings`) through this worker's
    /// `link`: each limit's local count first (a key over it here is over it everywhere), then
    /// the keys Redis refused lately, then Redis; when Redis cannot answer, the request goes on
    /// (`on_redis_error = "allow"`) or is refused, and the failure is counted and logged.
    pub async fn check_shared<'l>(
        &'l self,
        (link, settings): (&RedisLink, &RedisSettings),
        asked: &Asked<'_>,
    ) -> Option<Refusal<'l>> {
        let (now, worker) = (asked.now, asked.worker);
        for limiter in self.limiters_of(asked) {
            let key = RequestKey::of(&limiter.rule.key, asked.request, asked.client);
            let refused = |retry_after_micros| Refusal {
                limiter,
                retry_after_micros,
            };
            let hash = match limiter.before_redis(key, now, worker) {
                Ok(hash) => hash,
                Err(wait) => return Some(refused(wait)),
            };
            match link.check(settings, limiter, key).await {
                Ok(over) => {
                    limiter.redis_said(key, hash, over, now, worker);
                    if let Some(wait) = over {
                        return Some(refused(wait));
                    }
                }
                Err(failure) => {
                    limiter.redis_failed(key, now, worker, settings.fail_open);
                    if let Some(more) = REDIS_FAILURES.allow(REDIS_FAILURE_LOG_EVERY) {
                        let redis = settings.addr;
                        let fail_open = settings.fail_open;
                        tracing::warn!(%redis, limit = %limiter.rule.name, %failure, fail_open, more_since_last = more, "a rate limit's check in Redis failed; requests go on unless on_redis_error = \"deny\"");
                    }
                    if !settings.fail_open {
                        return Some(refused(DENIED_WAIT_MICROS));
                    }
                }
            }
        }
        None
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
