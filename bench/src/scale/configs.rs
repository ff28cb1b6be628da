//! The configurations `scale` runs, each proxy as an operator with many sites would write it: N
//! host routes to the one backend, an unknown host to the same backend by default. herdsman: a
//! `[[route]]` per host (and its admin API, for the reloads); HAProxy: one map file looked up
//! with `use_backend %[req.hdr(host),lower,map(…)]`; nginx: a `server` block per `server_name`
//! and a `default_server`. The rest is `kit::proxies`' equivalent setup (one worker, keep-alive
//! to the backend, X-Forwarded-* added, no access log). And herdsman in front of one large pool
//! of servers, each at a loopback address of its own.

use std::fmt::Write as _;
use std::path::Path;

use super::settings::{renamed_route_host, route_host, Balance};
use crate::kit::loopback::address;
use crate::kit::proxies::{self, Plan, ProxyKind, CLIENT_IDLE_SECONDS};

/// The pool (herdsman), backend (HAProxy) or upstream (nginx) every route leads to.
const BACKEND: &str = "backend";

/// Which names the routes have: the ones measured, or the other set a reload alternates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    Measured,
    Renamed,
}

impl Names {
    fn host(self, index: u32) -> String {
        match self {
            Names::Measured => route_host(index),
            Names::Renamed => renamed_route_host(index),
        }
    }
}

/// A proxy's files for one route count: the config (name, text), and for HAProxy its map.
pub struct Files {
    pub config: (&'static str, String),
    pub extra: Option<(&'static str, String)>,
}

/// The files of `kind` with `routes` host routes, for `plan`'s ports, kept in `dir`; herdsman's
/// admin API on `admin_port`.
pub fn route_files(kind: ProxyKind, plan: Plan, routes: u32, admin_port: u16, dir: &Path) -> Files {
    match kind {
        ProxyKind::Herdsman => Files {
            config: (
                "herdsman.toml",
                herdsman_routes(plan, routes, admin_port, Names::Measured),
            ),
            extra: None,
        },
        ProxyKind::Haproxy => Files {
            config: ("haproxy.cfg", haproxy_routes(plan, dir)),
            extra: Some(("hosts.map", haproxy_map(routes))),
        },
        ProxyKind::Nginx => Files {
            config: ("nginx.conf", nginx_routes(plan, routes, dir)),
            extra: None,
        },
    }
}

/// herdsman: the listener's pool is the backend (so an unknown host reaches it), then a route per
/// host to the same pool, in order.
pub fn herdsman_routes(plan: Plan, routes: u32, admin_port: u16, names: Names) -> String {
    let mut text = proxies::herdsman_config(plan, None);
    let _ = write!(text, "\n[admin]\nbind = \"127.0.0.1:{admin_port}\"\n");
    text.reserve(routes as usize * 64);
    for index in 0..routes {
        let _ = write!(
            text,
            "\n[[route]]\nhost = \"{}\"\npool = \"{BACKEND}\"\n",
            names.host(index)
        );
    }
    text
}

/// HAProxy: compare's frontend, which picks its backend by the lower-cased Host in the map, the
/// backend itself when the map has no such host.
fn haproxy_routes(plan: Plan, dir: &Path) -> String {
    let text = proxies::haproxy_config(plan);
    let by_map = format!(
        "    use_backend %[req.hdr(host),lower,map({}/hosts.map,{BACKEND})]\n    default_backend",
        dir.display()
    );
    text.replacen("    default_backend", &by_map, 1)
}

/// The map file: `host backend` per route.
fn haproxy_map(routes: u32) -> String {
    let mut text = String::with_capacity(routes as usize * 40);
    for index in 0..routes {
        let _ = writeln!(text, "{} {BACKEND}", route_host(index));
    }
    text
}

/// nginx: what every server block proxies with set once at the `http` level, a `server` per
/// host, and the `default_server` that answers the rest.
fn nginx_routes(plan: Plan, routes: u32, dir: &Path) -> String {
    let Plan {
        port,
        backend_port,
        backend_idle,
        ..
    } = plan;
    // The hash of server names must hold them all (nginx refuses to start when it cannot build
    // it in this size); long names need the larger bucket.
    let hash_size = (routes * 2).max(512);
    let mut text = format!(
        r#"{head}    server_names_hash_max_size {hash_size};
    server_names_hash_bucket_size 128;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_set_header X-Forwarded-Host $host;

    upstream {BACKEND} {{
        server 127.0.0.1:{backend_port};
        keepalive {backend_idle};
        keepalive_requests 1000000;
    }}

    server {{
        listen 127.0.0.1:{port} default_server;
        location / {{ proxy_pass http://{BACKEND}; }}
    }}
"#,
        head = proxies::nginx_head(plan, dir)
    );
    text.reserve(routes as usize * 120);
    for index in 0..routes {
        let _ = write!(
            text,
            "    server {{\n        listen 127.0.0.1:{port};\n        server_name {};\n        \
             location / {{ proxy_pass http://{BACKEND}; }}\n    }}\n",
            route_host(index)
        );
    }
    text.push_str("}\n");
    text
}

/// herdsman with one pool of `servers` servers balanced by `balance`, server i at loopback
/// address i on `backend_port`; its admin API on `admin_port`.
pub fn herdsman_pool(
    balance: Balance,
    servers: u32,
    port: u16,
    admin_port: u16,
    backend_port: u16,
) -> String {
    // Idle server connections are kept for as long as a client's: with the default 4 s, those
    // of the instance warmed first could expire while the other warmed (5 s), and its first round
    // reconnect to every server (a round at 4 times the median CPU per request, before).
    let mut text = format!(
        "workers = 1\n\n[timeouts]\nclient_idle = \"{CLIENT_IDLE_SECONDS}s\"\n\
         backend_idle = \"{CLIENT_IDLE_SECONDS}s\"\n\n\
         [[listener]]\nname = \"bench\"\nbind = \"127.0.0.1:{port}\"\npool = \"large\"\n\n\
         [admin]\nbind = \"127.0.0.1:{admin_port}\"\n\n\
         [[pool]]\nname = \"large\"\nbalance = \"{balance}\"\nservers = [\n"
    );
    text.reserve(servers as usize * 48);
    for index in 0..servers {
        let _ = writeln!(
            text,
            "  {{ name = \"s{index}\", addr = \"{}:{backend_port}\" }},",
            address(index)
        );
    }
    text.push_str("]\n");
    text
}

/// What the results file shows of `kind`'s files with `routes` routes: the same files with their
/// first two routes, and how many there are in all.
pub fn shown(kind: ProxyKind, plan: Plan, routes: u32, dir: &Path) -> String {
    let files = route_files(kind, plan, routes.min(2), 0, dir);
    let mut text = format!("# {}\n{}", files.config.0, files.config.1);
    if let Some((name, extra)) = files.extra {
        let _ = write!(text, "\n# {name}\n{extra}");
    }
    let _ = writeln!(text, "# … {routes} routes in all");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: Plan = Plan {
        workers: 1,
        port: 4100,
        backend_port: 4200,
        backend_idle: 64,
        client_connections: 50,
        descriptor_limit: 20_000,
    };

    #[test]
    fn herdsman_routes_every_host_in_order_to_the_backend() {
        let text = herdsman_routes(PLAN, 3, 4300, Names::Measured);
        assert!(text.contains("bind = \"127.0.0.1:4300\""), "{text}");
        assert!(text.contains("pool = \"backend\"\n"), "{text}");
        let first = text.find("site0.customers.example").unwrap();
        let last = text.find("site2.customers.example").unwrap();
        assert!(first < last);
        assert_eq!(text.matches("[[route]]").count(), 3);
        let renamed = herdsman_routes(PLAN, 3, 4300, Names::Renamed);
        assert!(renamed.contains("site2.tenants.example") && !renamed.contains("customers"));
    }

    #[test]
    fn haproxy_looks_the_host_up_in_its_map() {
        let files = route_files(ProxyKind::Haproxy, PLAN, 2, 0, Path::new("/tmp/x"));
        let text = &files.config.1;
        assert!(
            text.contains("use_backend %[req.hdr(host),lower,map(/tmp/x/hosts.map,backend)]\n"),
            "{text}"
        );
        assert!(text.contains("default_backend backend"), "{text}");
        let (name, map) = files.extra.unwrap();
        assert_eq!(name, "hosts.map");
        assert_eq!(
            map,
            "site0.customers.example backend\nsite1.customers.example backend\n"
        );
    }

    #[test]
    fn nginx_has_a_server_per_name_and_a_default() {
        let text = nginx_routes(PLAN, 3, Path::new("/tmp/x"));
        assert_eq!(text.matches("server_name site").count(), 3);
        assert!(text.contains("listen 127.0.0.1:4100 default_server;"));
        assert!(text.contains("server 127.0.0.1:4200;"));
        assert!(text.contains("server_names_hash_max_size 512;"));
        assert_eq!(text.matches('{').count(), text.matches('}').count());
        let many = nginx_routes(PLAN, 100_000, Path::new("/tmp/x"));
        assert!(many.contains("server_names_hash_max_size 200000;"));
    }

    #[test]
    fn the_pool_lists_every_server_at_its_own_address() {
        let text = herdsman_pool(Balance::LeastConn, 3, 4100, 4300, 4200);
        assert!(text.contains("balance = \"least-conn\""));
        assert!(text.contains("  { name = \"s0\", addr = \"127.0.1.1:4200\" },\n"));
        assert!(text.contains("  { name = \"s2\", addr = \"127.0.1.3:4200\" },\n]"));
    }

    #[test]
    fn shown_configs_keep_their_first_routes() {
        let dir = Path::new("/tmp/x");
        let short = shown(ProxyKind::Herdsman, PLAN, 100, dir);
        assert!(short.contains("site1.customers") && !short.contains("site2.customers"));
        assert!(short.ends_with("# … 100 routes in all\n"), "{short}");
        let haproxy = shown(ProxyKind::Haproxy, PLAN, 100, dir);
        assert!(haproxy.contains("# hosts.map\nsite0.customers.example backend\n"));
    }
}
