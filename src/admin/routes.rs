//! What the admin API answers to one whole request: the guard first, then the route (the
//! paths and the methods each answers), then what the route does: the workers' report, the pools
//! (through `pools`), the certificates, `/metrics`, the stats page, an upgrade, the cache's
//! purges (through `cache`).

use std::sync::Arc;

use serde::Serialize;

use super::answer::Answer;
use super::cache;
use super::certificates;
use super::guard::Guard;
use super::metrics;
use super::metrics::Descriptors;
use super::pools::{self, ApiError};
use crate::cache::shared::SharedStore;
use crate::config::is_valid_name;
use crate::http1::{Method, Request};
use crate::process::drain::{Draining, Predecessors};
use crate::rate_limit::RateLimits;
use crate::stats::procfs::{self, ListenQueueDrops, ThreadCpu};
use crate::stats::{Stats, WorkerReport};
use crate::upstream::registry::Registry;

/// What every connection needs; immutable once the listener starts.
pub(super) struct Shared {
    pub(super) guard: Guard,
    pub(super) intake: &'static str,
    pub(super) stats: Arc<Stats>,
    /// The pools; the pool routes read and change them.
    pub(super) registry: Arc<Registry>,
    pub(super) predecessors: Option<Arc<Predecessors>>,
    /// The process's cache store, as the workers share it; the cache routes purge it.
    pub(super) cache: Arc<SharedStore>,
    /// The process's rate limits, as the workers share them: `/api/rate_limits` shows them.
    pub(super) rate_limits: Arc<RateLimits>,
}

/// The live stats page: HTML, CSS and the script that polls `/api/pools` and `/api/workers`,
/// all in one file so that it needs nothing from elsewhere.
pub(super) const STATS_PAGE: &str = include_str!("stats_page.html");

/// What a browser may do with the stats page: run its own inline script and style, call this
/// listener and nothing else (no other host, no plugin, no framing, whose clicks on the page's
/// buttons could be hijacked).
const STATS_PAGE_HEADERS: &str = "Content-Security-Policy: default-src 'none'; \
    script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; \
    img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n";

/// The paths. Names in them are config names (`[A-Za-z0-9_.-]`), so no percent-decoding: a
/// segment with any other byte matches no route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'t> {
    Health,
    /// `/stats`, the live stats page for a browser.
    StatsPage,
    /// `/metrics`, for Prometheus.
    Metrics,
    Workers,
    /// `/api/pools`
    Pools,
    /// `/api/certificates`
    Certificates,
    /// `/api/rate_limits`
    RateLimitList,
    /// `/api/reload`
    Reload,
    /// `/api/upgrade`
    Upgrade,
    /// `/api/cache/purge`: one URL.
    CachePurge,
    /// `/api/cache/ban`: a host's paths under a prefix.
    CacheBan,
    /// `/api/cache/purge-tag`: a surrogate key's responses.
    CachePurgeTag,
    /// `/api/pools/{pool}/servers`
    Servers {
        pool: &'t str,
    },
    /// `/api/pools/{pool}/servers/{server}` and the paths under it.
    Server {
        pool: &'t str,
        server: &'t str,
        part: ServerPart,
    },
}

/// Which path under `/api/pools/{pool}/servers/{server}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerPart {
    /// The server itself (DELETE removes it).
    Whole,
    State,
    Weight,
    TestToken,
}

/// The methods a route answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Allowed {
    /// GET and HEAD.
    Read,
    Post,
    Put,
    Delete,
}

impl Allowed {
    fn permits(self, method: Method) -> bool {
        match self {
            Allowed::Read => matches!(method, Method::Get | Method::Head),
            Allowed::Post => method == Method::Post,
            Allowed::Put => method == Method::Put,
            Allowed::Delete => method == Method::Delete,
        }
    }

    /// The `Allow` field of a 405 (RFC 9110 §15.5.6), and the same list for its message.
    fn field(self) -> (&'static str, &'static str) {
        match self {
            Allowed::Read => ("Allow: GET, HEAD\r\n", "GET and HEAD"),
            Allowed::Post => ("Allow: POST\r\n", "POST"),
            Allowed::Put => ("Allow: PUT\r\n", "PUT"),
            Allowed::Delete => ("Allow: DELETE\r\n", "DELETE"),
        }
    }
}

impl<'t> Route<'t> {
    fn find(target: &'t str) -> Option<Route<'t>> {
        // A query string changes nothing on these routes.
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        match path {
            "/healthz" => return Some(Route::Health),
            "/stats" => return Some(Route::StatsPage),
            "/metrics" => return Some(Route::Metrics),
            "/api/workers" => return Some(Route::Workers),
            "/api/pools" => return Some(Route::Pools),
            "/api/certificates" => return Some(Route::Certificates),
            "/api/rate_limits" => return Some(Route::RateLimitList),
            "/api/reload" => return Some(Route::Reload),
            "/api/upgrade" => return Some(Route::Upgrade),
            "/api/cache/purge" => return Some(Route::CachePurge),
            "/api/cache/ban" => return Some(Route::CacheBan),
            "/api/cache/purge-tag" => return Some(Route::CachePurgeTag),
            _ => {}
        }
        let mut segments = path.strip_prefix("/api/pools/")?.split('/');
        let (pool, servers) = (segments.next()?, segments.next()?);
        let server = segments.next();
        let part = match (segments.next(), segments.next()) {
            (None, _) => ServerPart::Whole,
            (Some("state"), None) => ServerPart::State,
            (Some("weight"), None) => ServerPart::Weight,
            (Some("test-token"), None) => ServerPart::TestToken,
            _ => return None,
        };
        if servers != "servers" || !is_valid_name(pool) {
            return None;
        }
        match server {
            None => Some(Route::Servers { pool }),
            Some(server) if is_valid_name(server) => Some(Route::Server { pool, server, part }),
            Some(_) => None,
        }
    }

    fn allowed(self) -> Allowed {
        match self {
            Route::Health
            | Route::StatsPage
            | Route::Metrics
            | Route::Workers
            | Route::Pools
            | Route::Certificates
            | Route::RateLimitList => Allowed::Read,
            Route::Reload
            | Route::Upgrade
            | Route::Servers { .. }
            | Route::CachePurge
            | Route::CacheBan
            | Route::CachePurgeTag => Allowed::Post,
            Route::Server { part, .. } => match part {
                ServerPart::Whole => Allowed::Delete,
                ServerPart::State | ServerPart::Weight => Allowed::Put,
                ServerPart::TestToken => Allowed::Read,
            },
        }
    }
}

/// The body of `GET /api/workers`.
#[derive(Serialize)]
struct WorkersBody<'a> {
    /// This process: it changes with a binary upgrade.
    pid: u32,
    intake: &'a str,
    workers: Vec<WorkerReport>,
    /// The kernel's counters for the whole network namespace; `null` when /proc is unreadable.
    listen_queue: Option<ListenQueueDrops>,
    /// The health checker thread's CPU (user, system) and run-queue wait, as each worker's;
    /// `null` when /proc is unreadable.
    health_checker: Option<ThreadCpu>,
    /// The older processes still finishing their connections after binary upgrades (nearest
    /// first: the one this process replaced, then any it had replaced and still heard from);
    /// empty when all have exited.
    predecessors: Vec<Draining>,
    /// The process's descriptors against its budget.
    descriptors: Descriptors,
}

/// Decides the response to one request: the guard first (so a refused client learns nothing,
/// not even which paths exist, and changes nothing; the stats page needs no token, and only it),
/// then the route, then the method, then what the route does with the body.
pub(super) fn answer(request: &Request, body: &[u8], shared: &Shared) -> Answer {
    if let Some(refusal) = shared.guard.check(request, is_stats_page(request)) {
        return refusal;
    }
    let Some(route) = Route::find(request.target) else {
        return Answer::error(404, "no such path; the API's paths start with /api/");
    };
    let allowed = route.allowed();
    if !allowed.permits(request.method) {
        let (field, methods) = allowed.field();
        let message = format!("this path answers {methods}, not {}", request.method_text);
        return Answer::error(405, &message).with_headers(field);
    }
    let registry = &shared.registry;
    let result: Result<Answer, ApiError> = match route {
        Route::Health => Ok(Answer::text(200, "ok\n")),
        Route::StatsPage => Ok(Answer::typed(
            200,
            "text/html; charset=utf-8",
            STATS_PAGE.as_bytes().to_vec(),
        )
        .with_headers(STATS_PAGE_HEADERS)),
        Route::Metrics => Ok(Answer::typed(
            200,
            metrics::CONTENT_TYPE,
            metrics::render(&shared.stats, registry, &shared.cache, &shared.rate_limits)
                .into_bytes(),
        )),
        Route::Workers => Ok(Answer::json(
            200,
            &WorkersBody {
                pid: std::process::id(),
                intake: shared.intake,
                workers: shared.stats.report(),
                listen_queue: procfs::listen_queue_drops(),
                health_checker: shared.stats.health_checker_cpu(),
                predecessors: shared
                    .predecessors
                    .as_deref()
                    .map(Predecessors::draining)
                    .unwrap_or_default(),
                descriptors: Descriptors::now(&shared.stats),
            },
        )),
        Route::Pools => Ok(Answer::json(
            200,
            &cache::pools_with_cache(registry, &shared.cache),
        )),
        Route::Certificates => Ok(Answer::json(200, &certificates::certificates(registry))),
        Route::RateLimitList => Ok(Answer::json(
            200,
            &serde_json::json!({ "limits": shared.rate_limits.views() }),
        )),
        Route::Reload => pools::reload(registry),
        // The upgrade is the signal's: the main thread starts the new binary, and this process
        // stops once that one serves. 202: asked, not done.
        Route::Upgrade => {
            // SAFETY: kill with this process's own id and a signal it handles.
            let sent = unsafe { libc::kill(libc::getpid(), libc::SIGUSR2) } == 0;
            Ok(if sent {
                Answer::json(202, &serde_json::json!({ "upgrading": true }))
            } else {
                Answer::error(500, "cannot signal this process")
            })
        }
        Route::CachePurge => cache::purge(&shared.cache, registry, body),
        Route::CacheBan => cache::ban(&shared.cache, registry, body),
        Route::CachePurgeTag => cache::purge_tag(&shared.cache, body),
        Route::Servers { pool } => pools::add_server(registry, pool, body),
        Route::Server { pool, server, part } => match part {
            ServerPart::Whole => pools::remove_server(registry, pool, server),
            ServerPart::State => pools::set_state(registry, pool, server, body),
            ServerPart::Weight => pools::set_weight(registry, pool, server, body),
            ServerPart::TestToken => pools::test_token(registry, pool, server),
        },
    };
    result.unwrap_or_else(ApiError::into_answer)
}

/// The one request served without the token: `GET` (or `HEAD`) `/stats`. The page is the same
/// for everyone and holds no data: its script fetches every figure from the API with the token,
/// which it asks the user for. And it must be so, since a browser cannot attach
/// `Authorization: Bearer` to a page it navigates to. Any other method on `/stats` is still
/// refused with 401, like every other path.
pub(super) fn is_stats_page(request: &Request) -> bool {
    Route::find(request.target) == Some(Route::StatsPage) && Allowed::Read.permits(request.method)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_take_names_and_nothing_else() {
        use Route::*;
        let server = |part| Server {
            pool: "app",
            server: "b-1.x_y",
            part,
        };
        for (target, route) in [
            ("/healthz", Some(Health)),
            ("/stats", Some(StatsPage)),
            ("/stats?token=x", Some(StatsPage)),
            ("/stats/", None),
            ("/api/workers?x", Some(Workers)),
            ("/api/pools", Some(Pools)),
            ("/api/rate_limits", Some(RateLimitList)),
            ("/api/reload", Some(Reload)),
            ("/api/cache/purge", Some(CachePurge)),
            ("/api/cache/ban", Some(CacheBan)),
            ("/api/cache/purge-tag", Some(CachePurgeTag)),
            ("/api/cache", None),
            ("/api/cache/purge/x", None),
            ("/api/pools/app/servers", Some(Servers { pool: "app" })),
            (
                "/api/pools/app/servers/b-1.x_y",
                Some(server(ServerPart::Whole)),
            ),
            (
                "/api/pools/app/servers/b-1.x_y/state",
                Some(server(ServerPart::State)),
            ),
            (
                "/api/pools/app/servers/b-1.x_y/weight?",
                Some(server(ServerPart::Weight)),
            ),
            (
                "/api/pools/app/servers/b-1.x_y/test-token",
                Some(server(ServerPart::TestToken)),
            ),
            ("/api/pools/", None),
            ("/api/pools/app", None),
            ("/api/pools/app/", None),
            ("/api/pools/app/servers/", None),
            ("/api/pools/app/server/b", None),
            ("/api/pools/app/servers/b/", None),
            ("/api/pools/app/servers/b/colour", None),
            ("/api/pools/app/servers/b/state/x", None),
            ("/api/pools/a%70p/servers/b", None),
            ("/api/pools/app/servers/b%20c", None),
            ("/api/pools//servers/b", None),
            ("/api/pools/app/servers/b:80", None),
        ] {
            assert_eq!(Route::find(target), route, "{target}");
        }
    }

    #[test]
    fn the_stats_page_is_self_contained() {
        // Nothing from another host: no absolute URL at all, so no script, style, font or image
        // is fetched from elsewhere (the CSP would block it, and the page would break).
        for scheme in ["http://", "https://", "//cdn", "ws://", "wss://"] {
            assert!(!STATS_PAGE.contains(scheme), "the page refers to {scheme}");
        }
        // Nor from this listener: everything is inline, and the only URLs are the API's.
        let lower = STATS_PAGE.to_ascii_lowercase();
        for reference in [" src=", "@import", "url(", "rel=\"stylesheet\""] {
            assert!(!lower.contains(reference), "the page has {reference}");
        }
        for endpoint in ["\"/api/pools\"", "\"/api/workers\"", "/state\""] {
            assert!(
                STATS_PAGE.contains(endpoint),
                "the page never calls {endpoint}"
            );
        }
    }
}
