//! Which pool and server a request goes to: the first matching route, then a test token, a valid
//! sticky cookie, or the pool's balancer — in that order.

use std::net::IpAddr;

use super::hash_ring::key_hash;
use super::sticky::MAX_NAME_LEN;
use super::{Pool, Snapshot};
use crate::config::condition::Condition;
use crate::config::{HashKey, ServerState};
use crate::http1::Request;
use crate::transport::Moment;

/// The header whose value, a server's test token, lets a request reach it in the `test` state.
pub const TEST_HEADER: &str = "x-herdsman-test";

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// Index into `Snapshot::pools`.
    pub pool: usize,
    /// Index into `Snapshot::routes` of the route that matched, if one did.
    pub route: Option<usize>,
    /// Index into the pool's servers; `None` when no server may take the request (503).
    pub server: Option<usize>,
    /// The response assigns the client to the server with the pool's sticky cookie.
    pub assign_cookie: bool,
    /// The request names its server (a sticky cookie, a test token): it waits for that server
    /// rather than go to another when the server is at its `max_connections`.
    pub pinned: bool,
}

/// Chooses for `request`, which arrived on listener `listener` from `client` and began at
/// `started` (the clock reading a balancer weighing latency uses: no reading of its own).
/// `meets` says whether the request meets a route's condition (`rules::condition`, which the
/// exchange passes in: the rules sit beside this room, not below it).
pub fn choose(
    snapshot: &Snapshot,
    listener: usize,
    request: &Request<'_, '_>,
    client: IpAddr,
    started: Moment,
    rng: &mut fastrand::Rng,
    meets: impl Fn(&Condition) -> bool,
) -> Choice {
    let (pool_index, route) = route(snapshot, listener, request, meets);
    let Some(pool_index) = pool_index else {
        // A route that answers itself (`[route.redirect]`, `[route.respond]`): no pool, no
        // server; the exchange writes its answer.
        return Choice {
            pool: snapshot.listener_pools[listener],
            route,
            server: None,
            assign_cookie: false,
            pinned: false,
        };
    };
    let pool = &snapshot.pools[pool_index];
    let chosen = |server, assign_cookie, pinned| Choice {
        pool: pool_index,
        route,
        server,
        assign_cookie,
        pinned,
    };
    if pool.has_test_servers {
        if let Some(server) = tested_server(pool, request) {
            return chosen(Some(server), false, true);
        }
    }
    if let Some(cookie) = &pool.sticky_cookie {
        if let Some(server) = sticky_server(pool, request, cookie) {
            return chosen(Some(server), false, true);
        }
    }
    let server = pool.balancer.pick(&pool.servers, rng, started, || {
        hash_of_key(pool, request, client)
    });
    chosen(
        server,
        server.is_some() && pool.sticky_cookie.is_some(),
        false,
    )
}

/// The pool of the first route whose host and path prefix match and whose condition, if it has
/// one, the request meets (`None` when that route answers itself), with that route's index; or
/// else the listener's pool. A route whose
/// condition fails passes the request to the next route its host and path match (the index
/// finds it directly: no scan of the routes between).
fn route(
    snapshot: &Snapshot,
    listener: usize,
    request: &Request<'_, '_>,
    meets: impl Fn(&Condition) -> bool,
) -> (Option<usize>, Option<usize>) {
    let by_listener = (Some(snapshot.listener_pools[listener]), None);
    if snapshot.routes.is_empty() {
        return by_listener;
    }
    let (host, path) = host_and_path(request);
    let mut found = snapshot.route_index.find(host, path);
    while let Some(index) = found {
        let route = &snapshot.routes[index];
        match &route.when {
            Some(condition) if !meets(condition) => {
                found = snapshot.route_index.find_from(host, path, index + 1);
            }
            _ => return (route.pool, Some(index)),
        }
    }
    by_listener
}

/// The host and path a request is for. An absolute-form target (`http://host/path`) names both
/// itself, and its host wins over the Host field (RFC 9112 §3.2.2; `parse_request` decides
/// `request.host` so): otherwise a client could reach any path route's pool, or miss it, by
/// choosing the form.
fn host_and_path<'r>(request: &'r Request<'_, '_>) -> (&'r [u8], &'r [u8]) {
    (request.host.unwrap_or_default(), request.path())
}

/// The server in `test` state whose token the request carries.
fn tested_server(pool: &Pool, request: &Request<'_, '_>) -> Option<usize> {
    let token = request.header(TEST_HEADER)?;
    pool.servers.iter().position(|server| {
        server.state == ServerState::Test
            && server.available
            && pool.key.verify_test_token(&pool.name, &server.name, token)
    })
}

/// The server a valid cookie names, if it may still take the client's requests (`ready` or
/// `drain`, and neither down nor ejected). A forged, foreign or stale cookie counts as none: the request is balanced and the
/// response sets a fresh one.
fn sticky_server(pool: &Pool, request: &Request<'_, '_>, cookie: &str) -> Option<usize> {
    let value = request.cookie(cookie)?;
    let mut name = [0; MAX_NAME_LEN];
    let name = pool.key.verify_cookie_into(value, &mut name)?;
    let index = pool.position(name)?;
    let server = &pool.servers[index];
    let may_serve = matches!(server.state, ServerState::Ready | ServerState::Drain);
    (may_serve && server.available).then_some(index)
}

/// The hash of the part of the request `balance = "hash"` keys on; the client's address when the
/// header or cookie named is absent.
fn hash_of_key(pool: &Pool, request: &Request<'_, '_>, client: IpAddr) -> u64 {
    let value = match &pool.hash_key {
        HashKey::SourceIp => None,
        HashKey::Header(name) => request.header(name),
        HashKey::Cookie(name) => request.cookie(name),
    };
    match (value, client) {
        (Some(value), _) => key_hash(value),
        (None, IpAddr::V4(v4)) => key_hash(&v4.octets()),
        (None, IpAddr::V6(v6)) => key_hash(&v6.octets()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::{header_slots, parse_request};

    fn host_and_path_of(text: &str) -> (String, String) {
        let mut headers = header_slots();
        let request = parse_request(text.as_bytes(), &mut headers, 8192)
            .unwrap()
            .unwrap();
        let (host, path) = host_and_path(&request);
        (
            String::from_utf8_lossy(host).into_owned(),
            String::from_utf8_lossy(path).into_owned(),
        )
    }

    #[test]
    fn an_absolute_form_target_names_the_host_and_path() {
        let pair = |h: &str, p: &str| (h.to_string(), p.to_string());
        assert_eq!(
            host_and_path_of("GET /a/b HTTP/1.1\r\nHost: x.org\r\n\r\n"),
            pair("x.org", "/a/b")
        );
        assert_eq!(
            host_and_path_of(
                "GET http://API.example.com:8080/v1?q HTTP/1.1\r\nHost: x.org\r\n\r\n"
            ),
            pair("API.example.com:8080", "/v1?q")
        );
        assert_eq!(
            host_and_path_of("GET HTTP://a.org HTTP/1.1\r\nHost: x.org\r\n\r\n"),
            pair("a.org", "/")
        );
        assert_eq!(
            host_and_path_of("GET http://a.org?q HTTP/1.1\r\nHost: x.org\r\n\r\n"),
            pair("a.org", "/")
        );
    }
}
