//! Fuzzes the route index against the rule as written: for any routes (exact hosts, `*.` wildcards,
//! path prefixes) and any request host and path, the index finds the first route in config order
//! whose host and prefix match — what a scan of the list finds — however the names are cased and
//! whatever port the Host carries; and a route the index says another covers never matches
//! before it.
#![no_main]

mod names;

use herdsman::config::route_index::scan;
use herdsman::config::{HostPattern, RouteConfig, RouteIndex};
use libfuzzer_sys::fuzz_target;

/// A few labels and bytes, so that fuzzed names collide often.
const LABELS: [&str; 6] = ["a", "b", "A", "x-1", "", "b.a"];
const PATHS: [&str; 6] = ["/", "/x", "/X", "/x/", "/xy", "/y"];

fn name(bytes: &[u8]) -> String {
    names::name(&LABELS, bytes)
}

fuzz_target!(|input: &[u8]| {
    // Routes of four bytes each (kind, two labels, path), up to 16; then requests of the same.
    let (routes_part, requests_part) = input.split_at(input.len().min(64));
    let mut routes = Vec::new();
    for piece in routes_part.chunks_exact(4) {
        let host_name = name(&piece[1..3]).to_ascii_lowercase();
        let host = match piece[0] % 3 {
            0 => None,
            1 if !host_name.is_empty() => Some(HostPattern::Exact(host_name)),
            2 if !host_name.is_empty() => Some(HostPattern::Subdomains(format!(".{host_name}"))),
            _ => None,
        };
        let prefix = match piece[3] % 7 {
            6 => None,
            n => Some(PATHS[usize::from(n) % PATHS.len()]),
        };
        routes.push(RouteConfig::to_first_pool(host, prefix));
    }
    let index = RouteIndex::new(&routes);
    for piece in requests_part.chunks_exact(4) {
        let mut host = name(&piece[0..3]);
        if piece[3] & 1 != 0 {
            host.push_str(":8080");
        }
        let path = format!("{}{}", PATHS[usize::from(piece[3] >> 1) % PATHS.len()], "z");
        let want = scan(&routes, host.as_bytes(), path.as_bytes());
        assert_eq!(
            index.find(host.as_bytes(), path.as_bytes()),
            want,
            "{host} {path} in {routes:?}"
        );
    }
    for (position, route) in routes.iter().enumerate() {
        if let Some(first) = index.first_covering(route) {
            assert!(
                first <= position,
                "route {position} covered by a later one, {first}"
            );
        }
    }
});
