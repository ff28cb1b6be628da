//! The routes of one snapshot compiled for lookup: exact host names hashed, `*.example.com`
//! wildcards found by the request's own name label by label, case and port ignored, and each
//! host's path prefixes in a byte trie. A request costs a hash of its name (and of each suffix
//! after a dot, when any wildcard is configured) and a walk down its path, however many routes
//! there are; the answer is exactly the config-order scan's (the first route that matches wins),
//! which a property test checks against the scan.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::config::{strip_port, HostPattern, RouteConfig};

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
}

impl RouteIndex {
    pub fn new(routes: &[RouteConfig]) -> RouteIndex {
        let mut index = RouteIndex::default();
        for (position, route) in routes.iter().enumerate() {
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
            trie.insert(prefix.as_bytes(), position as u32);
        }
        index
    }

    /// The first route (in config order) whose host and path prefix match, if any.
    #[inline]
    pub fn find(&self, host: &[u8], path: &[u8]) -> Option<usize> {
        let name = strip_port(host);
        let mut best = self.any_host.first_match(path);
        if !self.exact.is_empty() {
            if let Some(trie) = self.exact.get(Caseless::of(name)) {
                best = best.min(trie.first_match(path));
            }
        }
        if !self.wildcard.is_empty() {
            // Every suffix that starts at a dot after the first byte: `a.b.c` → `.b.c`, `.c`.
            for (at, _) in name.iter().enumerate().skip(1).filter(|(_, b)| **b == b'.') {
                if let Some(trie) = self.wildcard.get(Caseless::of(&name[at..])) {
                    best = best.min(trie.first_match(path));
                }
            }
        }
        (best != NONE).then_some(best as usize)
    }
}

/// Path prefixes as a byte trie; each node keeps the first route whose prefix ends there.
#[derive(Debug)]
struct PathTrie {
    nodes: Vec<Node>,
}

#[derive(Debug)]
struct Node {
    route: u32,
    /// Children by their byte, sorted.
    children: Vec<(u8, u32)>,
}

impl Default for PathTrie {
    fn default() -> Self {
        PathTrie {
            nodes: vec![Node {
                route: NONE,
                children: Vec::new(),
            }],
        }
    }
}

impl PathTrie {
    fn insert(&mut self, prefix: &[u8], route: u32) {
        let mut at = 0;
        for &byte in prefix {
            at = match self.nodes[at].children.binary_search_by_key(&byte, |c| c.0) {
                Ok(found) => self.nodes[at].children[found].1 as usize,
                Err(slot) => {
                    let next = self.nodes.len();
                    self.nodes.push(Node {
                        route: NONE,
                        children: Vec::new(),
                    });
                    self.nodes[at].children.insert(slot, (byte, next as u32));
                    next
                }
            };
        }
        // Routes come in config order: the first to end here stays.
        let node = &mut self.nodes[at];
        node.route = node.route.min(route);
    }

    /// The first route whose prefix starts `path` (`NONE` if none).
    #[inline]
    fn first_match(&self, path: &[u8]) -> u32 {
        let mut node = &self.nodes[0];
        let mut best = node.route;
        for byte in path {
            match node.children.binary_search_by_key(byte, |c| c.0) {
                Ok(found) => node = &self.nodes[node.children[found].1 as usize],
                Err(_) => break,
            }
            best = best.min(node.route);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ExchangeTimeouts;
    use proptest::prelude::*;

    /// The rule as documented: the first route in config order whose host and prefix match.
    fn scan(routes: &[RouteConfig], host: &[u8], path: &[u8]) -> Option<usize> {
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

    fn route(host: Option<HostPattern>, prefix: Option<&str>) -> RouteConfig {
        RouteConfig {
            host,
            path_prefix: prefix.map(str::to_string),
            pool: 0,
            timeouts: ExchangeTimeouts {
                backend_response: std::time::Duration::from_secs(1),
                backend_read: std::time::Duration::from_secs(1),
                request: None,
            },
            buffering: Default::default(),
        }
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
    }
}
