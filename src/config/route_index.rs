//! The routes of one config compiled for lookup: exact host names hashed, `*.example.com`
//! wildcards found by the request's own name label by label, case and port ignored, and each
//! host's path prefixes in a byte trie. A request costs a hash of its name (and of each suffix
//! after a dot, when any wildcard is configured) and a walk down its path, however many routes
//! there are; the answer is exactly the config-order scan's (the first route that matches wins),
//! which a property test checks against the scan.
//!
//! A route with a condition (`when`) that a request does not meet passes it on: [`RouteIndex::find_from`]
//! gives the next route its host and path match, through a chain of the routes that end at the
//! same trie node (routes repeating a host and prefix with different conditions), so a request
//! skips only the routes it could have taken, never scans the rest.
//!
//! The same lookup, asked of a route's own host and prefix, finds the first route that takes every
//! request it would ([`RouteIndex::first_covering`]): the config check warns of routes that can
//! never match with it, in time that grows with the routes, not their square. The request path
//! (`upstream::snapshot`) compiles it with each snapshot.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use super::{strip_port, HostPattern, RouteConfig};

/// No route: the index of a trie node with no route ending there.
const NONE: u32 = u32::MAX;

/// The compiled routes. The hash is foldhash's, seeded per process: a request chooses only which
/// configured name it looks up, but a fixed seed would let one plan lookups that collide.
#[derive(Debug, Default)]
pub struct RouteIndex {
    /// Routes for an exact host name, by that name.
    exact: HashMap<Box<Caseless>, PathTrie, foldhash::fast::RandomState>,
    /// Routes for a wildcard, by its suffix with the leading dot (`.example.com`).
    wildcard: HashMap<Box<Caseless>, PathTrie, foldhash::fast::RandomState>,
    /// Routes without a host.
    any_host: PathTrie,
    /// By route: the next route (in config order) that ends at the same trie node, `NONE` for
    /// the last. Empty when every route ends at a node of its own.
    same_node_next: Vec<u32>,
}

impl RouteIndex {
    pub fn new(routes: &[RouteConfig]) -> RouteIndex {
        RouteIndex::of(routes, |_| true)
    }

    /// The index of the routes without a condition only (the others keep their positions): a
    /// route with `when` takes only some of the requests it matches, so it covers no later route.
    pub fn without_conditions(routes: &[RouteConfig]) -> RouteIndex {
        RouteIndex::of(routes, |route| route.when.is_none())
    }

    fn of(routes: &[RouteConfig], included: impl Fn(&RouteConfig) -> bool) -> RouteIndex {
        let mut index = RouteIndex::default();
        for (position, route) in routes.iter().enumerate() {
            if !included(route) {
                continue;
            }
            let trie = match &route.host {
                None => &mut index.any_host,
                Some(HostPattern::Exact(name)) => {
                    index.exact.entry(Caseless::boxed(name)).or_default()
                }
                Some(HostPattern::Subdomains(suffix)) => {
                    index.wildcard.entry(Caseless::boxed(suffix)).or_default()
                }
            };
            let prefix = route.path_prefix.as_deref().unwrap_or_default();
            // Routes come in config order: the one before at this node is its chain's end. The
            // chain is made at the first route that shares a node: most configs have none.
            if let Some(last) = trie.insert(prefix.as_bytes(), position as u32) {
                if index.same_node_next.is_empty() {
                    index.same_node_next = vec![NONE; routes.len()];
                }
                index.same_node_next[last as usize] = position as u32;
            }
        }
        index
    }

    /// The first route (in config order) whose host and path prefix match, if any.
    #[inline]
    pub fn find(&self, host: &[u8], path: &[u8]) -> Option<usize> {
        let first = self.first_for_name(strip_port(host), path, |route| route);
        (first != NONE).then_some(first as usize)
    }

    /// The first route at or after position `from` whose host and path prefix match: the next
    /// candidate once the routes before `from` were passed over (their conditions not met).
    pub fn find_from(&self, host: &[u8], path: &[u8], from: usize) -> Option<usize> {
        let from = from as u32;
        let at_or_after = |mut route: u32| {
            while route < from {
                // Empty when no two routes share a node: then none follows.
                route = self
                    .same_node_next
                    .get(route as usize)
                    .copied()
                    .unwrap_or(NONE);
            }
            route
        };
        let first = self.first_for_name(strip_port(host), path, at_or_after);
        (first != NONE).then_some(first as usize)
    }

    /// The first route (in config order) that matches every request `route` matches, which may be
    /// `route` itself: `route` can never match when this comes before it.
    ///
    /// A route takes all of another's requests when its path prefix (none: "") starts the other's
    /// and its host takes every name the other's does: no host takes all; `*.a.com` takes
    /// `x.a.com`, `*.x.a.com` and `*.a.com`; an exact name only itself. Several routes together
    /// never take more than one of them would: each of `*.a.com`'s names, and each path starting
    /// with its prefix, includes one no other pattern or longer prefix takes (the path that is
    /// the prefix itself), so this pairwise rule is exactly "can never match".
    pub fn first_covering(&self, route: &RouteConfig) -> Option<usize> {
        let path = route.path_prefix.as_deref().unwrap_or_default().as_bytes();
        let first = match &route.host {
            None => self.any_host.first_match(path, |route| route),
            // As a request for that name: the same name, a wildcard above it, or any host.
            Some(HostPattern::Exact(name)) => {
                self.first_for_name(name.as_bytes(), path, |route| route)
            }
            // Every name under `.a.com`: a wildcard of that suffix or one above it, or any host.
            // An exact name, or a wildcard below it (`*.x.a.com`), takes only some of them.
            Some(HostPattern::Subdomains(suffix)) => self
                .any_host
                .first_match(path, |route| route)
                .min(self.first_wildcard(suffix.as_bytes(), 0, path, |route| route)),
        };
        (first != NONE).then_some(first as usize)
    }

    /// The first route for a request naming `name` (without a port) and `path`; `NONE` if none.
    /// `pick` gives, of the first route ending at a trie node, the one to take there (itself, or
    /// a later one at the same node for [`RouteIndex::find_from`]).
    #[inline]
    fn first_for_name(&self, name: &[u8], path: &[u8], pick: impl Fn(u32) -> u32 + Copy) -> u32 {
        let mut best = self.any_host.first_match(path, pick);
        if !self.exact.is_empty() {
            if let Some(trie) = self.exact.get(Caseless::of(name)) {
                best = best.min(trie.first_match(path, pick));
            }
        }
        // `*.S` matches a name longer than `.S`: suffixes at a dot after the first byte.
        best.min(self.first_wildcard(name, 1, path, pick))
    }

    /// The first route of the wildcards whose suffix is a suffix of `name` starting at a dot at
    /// or after `from` (`a.b.c` from 1: `.b.c`, `.c`); `NONE` if none.
    #[inline]
    fn first_wildcard(
        &self,
        name: &[u8],
        from: usize,
        path: &[u8],
        pick: impl Fn(u32) -> u32 + Copy,
    ) -> u32 {
        if self.wildcard.is_empty() {
            return NONE;
        }
        let mut best = NONE;
        for (at, _) in name
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(_, b)| **b == b'.')
        {
            if let Some(trie) = self.wildcard.get(Caseless::of(&name[at..])) {
                best = best.min(trie.first_match(path, pick));
            }
        }
        best
    }
}

/// Path prefixes as a byte trie; each node keeps the first route whose prefix ends there.
#[derive(Debug)]
struct PathTrie {
    nodes: Vec<Node>,
}

#[derive(Debug)]
struct Node {
    /// The first route ending here (`NONE`: none).
    route: u32,
    /// The last route ending here so far, while the index is built (`NONE`: none).
    last: u32,
    /// Children by their byte, sorted.
    children: Vec<(u8, u32)>,
}

impl Default for PathTrie {
    fn default() -> Self {
        PathTrie {
            nodes: vec![Node {
                route: NONE,
                last: NONE,
                children: Vec::new(),
            }],
        }
    }
}

impl PathTrie {
    /// Adds `route` (routes come in config order) at the node of `prefix`; the last route added
    /// there before it, if any.
    fn insert(&mut self, prefix: &[u8], route: u32) -> Option<u32> {
        let mut at = 0;
        for &byte in prefix {
            at = match self.nodes[at].children.binary_search_by_key(&byte, |c| c.0) {
                Ok(found) => self.nodes[at].children[found].1 as usize,
                Err(slot) => {
                    let next = self.nodes.len();
                    self.nodes.push(Node {
                        route: NONE,
                        last: NONE,
                        children: Vec::new(),
                    });
                    self.nodes[at].children.insert(slot, (byte, next as u32));
                    next
                }
            };
        }
        // Routes come in config order: the first to end here stays, the last is remembered for
        // the chain of those after it.
        let node = &mut self.nodes[at];
        let before = (node.last != NONE).then_some(node.last);
        node.route = node.route.min(route);
        node.last = route;
        before
    }

    /// The first route whose prefix starts `path` (`NONE` if none), each node's route taken
    /// through `pick`.
    #[inline]
    fn first_match(&self, path: &[u8], pick: impl Fn(u32) -> u32) -> u32 {
        let mut node = &self.nodes[0];
        let mut best = pick(node.route);
        for byte in path {
            match node.children.binary_search_by_key(byte, |c| c.0) {
                Ok(found) => node = &self.nodes[node.children[found].1 as usize],
                Err(_) => break,
            }
            best = best.min(pick(node.route));
        }
        best
    }
}

/// A host name compared and hashed without regard to ASCII case, so that a request's name is
/// looked up as it came, without a lowercased copy.
#[derive(Debug)]
#[repr(transparent)]
struct Caseless([u8]);

impl Caseless {
    fn of(bytes: &[u8]) -> &Caseless {
        // SAFETY: `Caseless` is a transparent wrapper of `[u8]`, so the two references have the
        // same layout and lifetime.
        unsafe { &*(bytes as *const [u8] as *const Caseless) }
    }

    fn boxed(text: &str) -> Box<Caseless> {
        let bytes: Box<[u8]> = text.as_bytes().into();
        // SAFETY: as in `of`, for the owned box.
        unsafe { Box::from_raw(Box::into_raw(bytes) as *mut Caseless) }
    }
}

impl PartialEq for Caseless {
    fn eq(&self, other: &Caseless) -> bool {
        self.0.eq_ignore_ascii_case(&other.0)
    }
}

impl Eq for Caseless {}

impl Hash for Caseless {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.0.len());
        for chunk in self.0.chunks(8) {
            let mut word = [0u8; 8];
            for (to, from) in word.iter_mut().zip(chunk) {
                *to = from.to_ascii_lowercase();
            }
            state.write_u64(u64::from_le_bytes(word));
        }
    }
}

/// The rule as documented, by a scan: the first route in config order whose host and prefix
/// match. What the index must answer; the property tests and the `routes` fuzz target hold it to
/// this.
pub fn scan(routes: &[RouteConfig], host: &[u8], path: &[u8]) -> Option<usize> {
    routes.iter().position(|route| {
        route
            .host
            .as_ref()
            .is_none_or(|pattern| pattern.matches(host))
            && route
                .path_prefix
                .as_ref()
                .is_none_or(|prefix| path.starts_with(prefix.as_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::condition::Condition;
    use proptest::prelude::*;

    fn route(host: Option<HostPattern>, prefix: Option<&str>) -> RouteConfig {
        RouteConfig::to_first_pool(host, prefix)
    }

    #[test]
    fn names_wildcards_case_ports_and_prefixes() {
        let routes = [
            route(
                Some(HostPattern::Exact("api.example.com".into())),
                Some("/v2/"),
            ),
            route(
                Some(HostPattern::Subdomains(".example.com".into())),
                Some("/v2/"),
            ),
            route(Some(HostPattern::Exact("api.example.com".into())), None),
            route(None, Some("/static/")),
            route(Some(HostPattern::Subdomains(".example.com".into())), None),
            route(None, None),
        ];
        let index = RouteIndex::new(&routes);
        let cases: [(&[u8], &[u8], Option<usize>); 8] = [
            (b"api.example.com", b"/v2/x", Some(0)),
            (b"API.Example.COM:8080", b"/v2/x", Some(0)),
            (b"www.example.com", b"/v2/x", Some(1)),
            (b"api.example.com", b"/static/a", Some(2)),
            (b"www.example.com", b"/static/a", Some(3)),
            (b"a.b.example.com", b"/", Some(4)),
            (b"example.com", b"/", Some(5)),
            (b"", b"/", Some(5)),
        ];
        for (host, path, expected) in cases {
            assert_eq!(index.find(host, path), expected, "{host:?} {path:?}");
            assert_eq!(scan(&routes, host, path), expected, "{host:?} {path:?}");
        }
        assert_eq!(RouteIndex::new(&[]).find(b"x", b"/"), None);
    }

    fn exact(name: &str) -> Option<HostPattern> {
        Some(HostPattern::Exact(name.into()))
    }

    fn under(suffix: &str) -> Option<HostPattern> {
        Some(HostPattern::Subdomains(suffix.into()))
    }

    /// Each route's first earlier route that takes all its requests, if any.
    fn shadowing(routes: &[RouteConfig]) -> Vec<Option<usize>> {
        let index = RouteIndex::new(routes);
        routes
            .iter()
            .enumerate()
            .map(|(at, route)| index.first_covering(route).filter(|&first| first < at))
            .collect()
    }

    #[test]
    fn a_route_is_shadowed_by_the_first_earlier_route_that_takes_all_its_requests() {
        let routes = [
            route(under(".a.com"), Some("/api/")),
            route(exact("x.a.com"), Some("/api/v2/")),
            route(under(".x.a.com"), Some("/api/")),
            route(under(".A.com"), Some("/api/")),
            route(exact("a.com"), Some("/api/")),
            route(exact("x.a.com"), None),
            route(under(".b.com"), Some("/")),
            route(None, Some("/")),
            route(under(".b.com"), Some("/x")),
            route(exact("y.b.com"), None),
            route(None, None),
            route(exact("q.c.com"), Some("/z")),
            route(None, None),
        ];
        assert_eq!(
            shadowing(&routes),
            [
                None,
                Some(0),
                Some(0),
                Some(0),
                // The bare name is not under its wildcard.
                None,
                // `OPTIONS *` has no `/`: a route without a prefix takes it, one with `/` does not.
                None,
                None,
                None,
                Some(6),
                None,
                None,
                Some(7),
                Some(10),
            ]
        );
    }

    #[test]
    fn a_wildcard_only_partly_taken_by_earlier_routes_is_not_shadowed() {
        // x.a.com and *.x.a.com take some of *.a.com's names, never all (q.a.com reaches it).
        let routes = [
            route(exact("x.a.com"), None),
            route(under(".x.a.com"), None),
            route(under(".a.com"), None),
            // An exact name is taken by a wildcard above it at any depth, and by its own name.
            route(exact("p.x.a.com"), None),
            route(exact("x.a.com"), Some("/v1")),
        ];
        assert_eq!(shadowing(&routes), [None, None, None, Some(1), Some(0)]);
    }

    #[test]
    fn a_hundred_thousand_routes_are_checked_in_one_pass() {
        // Every second route repeats the one before with a longer prefix: 50,000 shadowed, each
        // by the one before it. A quadratic check would not finish.
        let routes: Vec<RouteConfig> = (0..100_000)
            .map(|i| {
                let name = format!("h{}.example.com", i / 2);
                let prefix = if i % 2 == 0 { "/api/" } else { "/api/v1/" };
                route(exact(&name), Some(prefix))
            })
            .collect();
        let found = shadowing(&routes);
        assert!(found
            .iter()
            .enumerate()
            .all(|(at, first)| *first == (at % 2 == 1).then(|| at - 1)));
    }

    fn host_pattern() -> impl Strategy<Value = Option<HostPattern>> {
        let name = "(a|b|c)(\\.(a|b|c)){0,2}";
        prop_oneof![
            Just(None),
            name.prop_map(|n| Some(HostPattern::Exact(n))),
            name.prop_map(|n| Some(HostPattern::Subdomains(format!(".{n}")))),
        ]
    }

    proptest! {
        /// On random route sets and requests, the index gives the scan's answer.
        #[test]
        fn the_index_answers_as_the_scan_does(
            patterns in proptest::collection::vec(
                (host_pattern(), proptest::option::of("/(x|y){0,3}")),
                0..12,
            ),
            requests in proptest::collection::vec(
                ("(A|a|b|c)(\\.(a|B|c)){0,3}(:80)?", "/(x|y|z){0,4}"),
                1..20,
            ),
        ) {
            let routes: Vec<RouteConfig> = patterns
                .iter()
                .map(|(host, prefix)| route(host.clone(), prefix.as_deref()))
                .collect();
            let index = RouteIndex::new(&routes);
            for (host, path) in &requests {
                prop_assert_eq!(
                    index.find(host.as_bytes(), path.as_bytes()),
                    scan(&routes, host.as_bytes(), path.as_bytes()),
                    "host {} path {}", host, path
                );
            }
        }

        /// On random route sets, some with conditions, the next candidate from any position is the
        /// scan's over the routes from there.
        #[test]
        fn the_next_candidate_is_the_scans_from_there(
            patterns in proptest::collection::vec(
                (host_pattern(), proptest::option::of("/(x|y){0,2}"), any::<bool>()),
                1..12,
            ),
            requests in proptest::collection::vec(
                ("(a|b|c)(\\.(a|b|c)){0,3}", "/(x|y|z){0,3}", 0..12usize),
                1..20,
            ),
        ) {
            let routes: Vec<RouteConfig> = patterns
                .iter()
                .map(|(host, prefix, conditional)| {
                    let mut route = route(host.clone(), prefix.as_deref());
                    if *conditional {
                        route.when = Some(Box::new(Condition::Method(["GET".into()].into())));
                    }
                    route
                })
                .collect();
            let index = RouteIndex::new(&routes);
            for (host, path, from) in &requests {
                let from = (*from).min(routes.len());
                let scanned = scan(&routes[from..], host.as_bytes(), path.as_bytes())
                    .map(|found| found + from);
                prop_assert_eq!(
                    index.find_from(host.as_bytes(), path.as_bytes(), from),
                    scanned,
                    "host {} path {} from {}", host, path, from
                );
            }
        }

        /// On random route sets, a route's first earlier cover is the one the rule finds
        /// comparing it with every earlier route; and a route is shadowed exactly when a request
        /// made to reach it (its own name, a new name under its wildcard, its own prefix) goes to
        /// an earlier route by the scan.
        #[test]
        fn shadowing_is_the_pairwise_rule_and_what_requests_see(
            patterns in proptest::collection::vec(
                (host_pattern(), proptest::option::of("/(x|y){0,3}")),
                0..12,
            ),
        ) {
            let routes: Vec<RouteConfig> = patterns
                .iter()
                .map(|(host, prefix)| route(host.clone(), prefix.as_deref()))
                .collect();
            let found = shadowing(&routes);
            for (at, later) in routes.iter().enumerate() {
                let pairwise = (0..at).find(|&earlier| covers(&routes[earlier], later));
                prop_assert_eq!(found[at], pairwise, "route {}", at);
                let (host, path) = reaching(later);
                let taken_by = scan(&routes, host.as_bytes(), path.as_bytes());
                prop_assert_eq!(taken_by != Some(at), pairwise.is_some(), "route {}", at);
            }
        }
    }

    /// Whether `earlier` takes every request `later` matches, by the rule as documented.
    fn covers(earlier: &RouteConfig, later: &RouteConfig) -> bool {
        let host = match (&earlier.host, &later.host) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(HostPattern::Exact(a)), Some(HostPattern::Exact(b))) => a.eq_ignore_ascii_case(b),
            (Some(HostPattern::Exact(_)), Some(HostPattern::Subdomains(_))) => false,
            (Some(wildcard), Some(HostPattern::Exact(name))) => wildcard.matches(name.as_bytes()),
            (Some(HostPattern::Subdomains(above)), Some(HostPattern::Subdomains(below))) => below
                .to_ascii_lowercase()
                .ends_with(&above.to_ascii_lowercase()),
        };
        let prefix = |route: &RouteConfig| route.path_prefix.clone().unwrap_or_default();
        host && prefix(later).starts_with(&prefix(earlier))
    }

    /// A request `route` matches that as few other routes match as can be: its own name, or a
    /// name under its wildcard that no route lists (`zz` is no label the strategies make), and
    /// its own prefix (without one, `*`, the target of `OPTIONS *`).
    fn reaching(route: &RouteConfig) -> (String, String) {
        let host = match &route.host {
            None => "zz".to_string(),
            Some(HostPattern::Exact(name)) => name.clone(),
            Some(HostPattern::Subdomains(suffix)) => format!("zz{suffix}"),
        };
        let path = route.path_prefix.clone().unwrap_or_else(|| "*".to_string());
        (host, path)
    }
}
