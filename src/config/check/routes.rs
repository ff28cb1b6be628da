//! `[[route]]`s — the host and path prefix a request must match and the exchange timeouts it may
//! set apart from `[timeouts]`, the buffering it turns off — and the pool a listener or a route
//! names (what else a route may do with its requests is in `answers.rs`).

use std::sync::Arc;

use toml::Spanned;

use super::primitives::{quoted, Zero};
use super::{Checker, Table};
use crate::config::headers::{HeaderRules, RequestIdSettings};
use crate::config::raw::{RawPool, RawRoute};
use crate::config::{
    CompressionRules, ConfigProblem, ExchangeTimeouts, HostPattern, RouteBuffering, RouteCache,
    RouteConfig, RouteIndex, Timeouts,
};

impl Checker {
    pub(super) fn route(
        &mut self,
        table: &Table,
        route: &RawRoute,
        pools: &[Spanned<RawPool>],
        timeouts: &Timeouts,
        (top_compression, enabled_compression): (&CompressionRules, &Option<Arc<CompressionRules>>),
        (top_headers, request_id): (&Option<Arc<HeaderRules>>, Option<&RequestIdSettings>),
    ) -> RouteConfig {
        let host = route.host.as_ref().map(|raw| {
            let text = raw.get_ref().to_ascii_lowercase();
            let (pattern, name) = match text.strip_prefix("*.") {
                Some(rest) => (HostPattern::Subdomains(format!(".{rest}")), rest),
                None => (HostPattern::Exact(text.clone()), text.as_str()),
            };
            let is_host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.');
            let why = if name.is_empty() {
                Some("empty; write e.g. host = \"api.example.com\" or \"*.example.com\"")
            } else if name.contains(':') {
                Some("a host name without a port (a request's port is ignored when matching)")
            } else if !name.chars().all(is_host_char) {
                Some("not a host name; write e.g. \"api.example.com\", or \"*.example.com\" for every name under it")
            } else {
                None
            };
            if let Some(why) = why {
                self.reject(&table.key("host"), raw.span(), &quoted(raw.get_ref()), why);
            }
            pattern
        });
        let path_prefix = route.path_prefix.as_ref().map(|raw| {
            let text = raw.get_ref();
            if !text.starts_with('/') {
                self.reject(
                    &table.key("path_prefix"),
                    raw.span(),
                    &quoted(text),
                    "must start with '/', e.g. path_prefix = \"/api/\"",
                );
            }
            text.clone()
        });
        let global = timeouts.exchange();
        let timeouts = match &route.timeouts {
            Some(raw) => {
                let path = table.key("timeouts");
                let raw = raw.get_ref();
                let key = |field: &str| format!("{path}.{field}");
                ExchangeTimeouts {
                    backend_response: self.duration(
                        &key("backend_response"),
                        &raw.backend_response,
                        global.backend_response,
                        Zero::Refused,
                    ),
                    backend_read: self.duration(
                        &key("backend_read"),
                        &raw.backend_read,
                        global.backend_read,
                        Zero::Refused,
                    ),
                    request: self
                        .optional_duration(&key("request"), &raw.request, "30s", "[timeouts]' own")
                        .or(global.request),
                }
            }
            None => global,
        };
        let on = |raw: &Option<Spanned<bool>>| raw.as_ref().is_none_or(|b| *b.get_ref());
        let buffering = route
            .buffering
            .as_ref()
            .map_or_else(RouteBuffering::default, |raw| RouteBuffering {
                request: on(&raw.get_ref().request),
                response: on(&raw.get_ref().response),
            });
        let cache = match &route.cache {
            None => RouteCache::Pool,
            Some(raw) => {
                let cache_table = Table {
                    path: table.key("cache"),
                    line: self.lines.line_of(raw.span().start),
                };
                match self.pool_cache(&cache_table, raw.get_ref()) {
                    Some(rules) => RouteCache::On(Box::new(rules)),
                    None => RouteCache::Off,
                }
            }
        };
        let when = route.when.as_ref().and_then(|raw| {
            let condition = self.condition(&table.key("when"), raw)?;
            Some(Box::new(condition))
        });
        let compression = match &route.compression {
            None => enabled_compression.clone(),
            Some(raw) => {
                let compression_table = Table {
                    path: table.key("compression"),
                    line: self.lines.line_of(raw.span().start),
                };
                let rules = self.compression(&compression_table, raw.get_ref(), top_compression);
                rules.enabled.then(|| Arc::new(rules))
            }
        };
        let headers = match &route.headers {
            None => top_headers.clone(),
            Some(raw) => {
                let path = table.key("headers");
                let top = top_headers.as_deref();
                self.header_rules(&path, raw.get_ref(), top, request_id)
            }
        };
        let (pool, answer) = self.route_target(table, route, pools);
        let rewrite = match (&route.rewrite, &answer) {
            (Some(raw), None) => self.rewrite(table, raw, path_prefix.as_deref()),
            _ => None,
        };
        RouteConfig {
            host,
            path_prefix,
            pool,
            answer,
            rewrite,
            timeouts,
            buffering,
            cache,
            rate_limit: self.rate_limit(table, &route.rate_limit, &table.path),
            when,
            access: route
                .access
                .as_ref()
                .map(|raw| Box::new(self.access(table, raw))),
            compression,
            headers,
        }
    }

    /// A listener's or route's `pool`: the index in `pools` of the first pool of that name (0,
    /// a stand-in, when missing or unknown); `how` says how to write one that is missing.
    pub(super) fn pool_index(
        &mut self,
        table: &Table,
        raw: &Option<Spanned<String>>,
        pools: &[Spanned<RawPool>],
        how: &str,
    ) -> usize {
        let Some(reference) = self.required(table, "pool", raw, how) else {
            return 0;
        };
        let named = |pool: &Spanned<RawPool>| pool.get_ref().name.clone().map(Spanned::into_inner);
        // A position in `pools`, not among the named ones: a pool missing its name must not
        // shift the indexes.
        let found = pools
            .iter()
            .position(|pool| named(pool).as_ref() == Some(reference.get_ref()));
        if let Some(index) = found {
            return index;
        }
        let defined = pools
            .iter()
            .filter_map(named)
            .collect::<Vec<_>>()
            .join(", ");
        let defined = if defined.is_empty() { "none" } else { &defined };
        self.reject(
            &table.key("pool"),
            reference.span(),
            &quoted(reference.get_ref()),
            format!("no such pool; defined pools: {defined}"),
        );
        0
    }
}

/// A warning for each route that can never match, because an earlier route without a condition
/// takes every request it would (`RouteIndex::first_covering` has the rule; a route with `when`
/// passes on the requests that do not meet it, so it covers none), naming both routes by key and
/// line:
/// `route[3] (host x.a.com, path /api/v2/*) can never match: route[1] on line 30 (host *.a.com,
/// path /api/*) comes first and takes all its requests`. One index of the routes and a lookup
/// of each route's own host and prefix, so 100,000 routes cost no more than serving them.
pub(super) fn shadowed_routes(routes: &[RouteConfig], tables: &[Table]) -> Vec<ConfigProblem> {
    let index = RouteIndex::without_conditions(routes);
    let describe = |route: &RouteConfig| {
        let path = match &route.path_prefix {
            Some(prefix) => format!("path {prefix}*"),
            None => "any path".to_string(),
        };
        format!("{}, {path}", route.host_words())
    };
    routes
        .iter()
        .zip(tables)
        .enumerate()
        .filter_map(|(at, (route, table))| {
            let first = index.first_covering(route).filter(|&first| first < at)?;
            let (earlier, earlier_table) = (&routes[first], &tables[first]);
            Some(ConfigProblem {
                key: table.path.clone(),
                line: Some(table.line),
                message: format!(
                    "{} ({}) can never match: {} on line {} ({}) comes first and takes all its \
                     requests",
                    table.path,
                    describe(route),
                    earlier_table.path,
                    earlier_table.line,
                    describe(earlier)
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::fixtures::{only_problem, problem, valid_with, VALID};
    use crate::config::load::from_toml;

    #[test]
    fn a_listener_naming_a_missing_pool_lists_the_defined_ones() {
        assert_eq!(
            only_problem(&valid_with(r#"pool = "app""#, r#"pool = "nope""#)),
            problem(
                "listener[0].pool",
                10,
                r#"listener[0].pool = "nope": no such pool; defined pools: app, api, shop"#
            )
        );
    }

    #[test]
    fn exchange_timeouts_are_global_or_a_routes_own() {
        let text = valid_with(
            r#"backend_idle = "3500ms""#,
            "backend_idle = \"3500ms\"\nbackend_read = \"90s\"\nrequest = \"2m\"",
        );
        let config = from_toml(&text, "t").unwrap();
        assert_eq!(config.timeouts.backend_read, Duration::from_secs(90));
        assert_eq!(config.timeouts.request, Some(Duration::from_secs(120)));
        // The first route sets none of its own; the second its response and read timeouts only.
        assert_eq!(config.routes[0].timeouts, config.timeouts.exchange());
        let own = config.routes[1].timeouts;
        assert_eq!(own.backend_response, Duration::from_secs(120));
        assert_eq!(own.backend_read, Duration::from_secs(600));
        assert_eq!(own.request, Some(Duration::from_secs(120)));
        let unset = from_toml(VALID, "t").unwrap();
        assert_eq!(unset.timeouts.request, None);
        let zero = only_problem(&valid_with(
            r#"backend_read = "10m""#,
            r#"backend_read = "0s""#,
        ));
        assert_eq!(zero.key, "route[1].timeouts.backend_read");
        assert_eq!(zero.line, Some(65));
        let unknown = only_problem(&valid_with(r#"backend_read = "10m""#, r#"connect = "1s""#));
        assert!(
            unknown.message.contains("unknown field `connect`"),
            "{}",
            unknown.message
        );
    }

    #[test]
    fn a_route_an_earlier_one_takes_every_request_of_is_a_warning_naming_both() {
        let text = format!(
            "{VALID}[[route]]\nhost = \"www.example.com\"\npath_prefix = \"/api/v2/\"\npool = \"app\"\n\n\
             [[route]]\nhost = \"example.com\"\npath_prefix = \"/api/\"\npool = \"app\"\n\n\
             [[route]]\nhost = \"shop.example.com\"\npath_prefix = \"/cart\"\npool = \"app\"\n"
        );
        // A warning is no problem: the config loads, its routes as written.
        let config = from_toml(&text, "t").unwrap();
        assert_eq!(config.routes.len(), 5);
        assert_eq!(
            config.warnings,
            [
                problem(
                    "route[2]",
                    66,
                    "route[2] (host www.example.com, path /api/v2/*) can never match: route[0] on \
                     line 55 (host *.example.com, path /api/*) comes first and takes all its requests"
                ),
                // The bare example.com is not under *.example.com: no warning for route[3].
                problem(
                    "route[4]",
                    76,
                    "route[4] (host shop.example.com, path /cart*) can never match: route[1] on \
                     line 60 (host shop.example.com, any path) comes first and takes all its requests"
                ),
            ]
        );
        assert!(config.warnings[0]
            .to_string()
            .starts_with("line 66: route[2] ("));
        assert!(from_toml(VALID, "t").unwrap().warnings.is_empty());
    }

    #[test]
    fn a_route_with_a_condition_covers_no_later_route_but_may_be_covered() {
        let text = format!(
            "{VALID}[[route]]\npath_prefix = \"/beta/\"\npool = \"app\"\nwhen = {{ header = \"X-Beta\", present = true }}\n\n\
             [[route]]\npath_prefix = \"/beta/\"\npool = \"api\"\n\n\
             [[route]]\npath_prefix = \"/beta/x\"\npool = \"shop\"\nwhen = {{ method = [\"GET\"] }}\n"
        );
        let config = from_toml(&text, "t").unwrap();
        assert_eq!(config.routes.len(), 5);
        // route[3] takes the rest of route[2]'s requests; route[4], with a condition or not,
        // comes after route[3], which takes all of them.
        assert_eq!(config.warnings.len(), 1, "{:#?}", config.warnings);
        let warning = &config.warnings[0];
        assert_eq!(warning.key, "route[4]");
        assert!(
            warning.message.contains("route[3] on line 71"),
            "{}",
            warning.message
        );
    }

    #[test]
    fn host_patterns_ignore_case_and_port() {
        let exact = HostPattern::Exact("api.example.com".into());
        assert!(exact.matches(b"API.Example.com"));
        assert!(exact.matches(b"api.example.com:8080"));
        assert!(!exact.matches(b"api.example.com.evil"));
        assert!(!exact.matches(b"x.api.example.com"));
        let any = HostPattern::Subdomains(".example.com".into());
        assert!(any.matches(b"a.example.com"));
        assert!(any.matches(b"A.B.EXAMPLE.COM:443"));
        assert!(!any.matches(b"example.com"));
        assert!(!any.matches(b"badexample.com"));
        let v6 = HostPattern::Exact("[::1]".into());
        assert!(v6.matches(b"[::1]:8080"));
        assert!(v6.matches(b"[::1]"));
    }
}
