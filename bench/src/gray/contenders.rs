//! The rows of `gray`: herdsman once per balancing method asked for (its release build, its
//! defaults but for `balance`), HAProxy's `balance leastconn` and `balance roundrobin`, and
//! nginx's `least_conn` and `random two least_conn`, each configured as the kit configures every
//! proxy (the same worker count, keep-alive to the servers, no access log); and starting one in
//! front of a pool of servers.

use std::path::Path;

use anyhow::Context;

use crate::kit::markdown::worker_count;
use crate::kit::process::{free_port, Supervised};
use crate::kit::proxies::{self, Balancing, Plan, ProxyKind, Target};
use crate::kit::results::Configurations;

/// The peers' methods, each a row: (proxy, method in its words).
const PEER_METHODS: [(ProxyKind, &str); 4] = [
    (ProxyKind::Haproxy, "leastconn"),
    (ProxyKind::Haproxy, "roundrobin"),
    (ProxyKind::Nginx, "least_conn"),
    (ProxyKind::Nginx, "random two least_conn"),
];

/// A row: a proxy and its balancing method.
#[derive(Debug, Clone)]
pub struct Contender {
    /// Its label is the row's name: "herdsman peak-ewma", "HAProxy leastconn".
    pub target: Target,
    /// In the proxy's words.
    pub method: String,
}

impl Contender {
    pub fn name(&self) -> &str {
        &self.target.label
    }
}

/// herdsman (`herdsman`) once per method of `methods`, then the peers, installed if missing.
pub fn resolve(methods: &[String], herdsman: &Path) -> anyhow::Result<Vec<Contender>> {
    let peers = proxies::targets(&[ProxyKind::Haproxy, ProxyKind::Nginx], herdsman)?;
    Ok(rows(methods, herdsman, &peers))
}

/// herdsman once per method, then each of `peers` once per method of its own.
fn rows(methods: &[String], herdsman: &Path, peers: &[Target]) -> Vec<Contender> {
    let mut rows: Vec<Contender> = methods
        .iter()
        .map(|method| Contender {
            target: Target {
                label: format!("herdsman {method}"),
                kind: ProxyKind::Herdsman,
                program: herdsman.to_path_buf(),
                intake: None,
            },
            method: method.clone(),
        })
        .collect();
    for (kind, method) in PEER_METHODS {
        let Some(peer) = peers.iter().find(|t| t.kind == kind) else {
            continue;
        };
        rows.push(Contender {
            target: Target {
                label: format!("{} {method}", kind.written()),
                ..peer.clone()
            },
            method: method.to_string(),
        });
    }
    rows
}

/// A row's proxy at work in front of a pool.
pub struct Instance {
    pub port: u16,
    pub process: Supervised,
}

impl Contender {
    /// Starts this row's proxy with `workers` in front of `servers`, in `dir`, with `plan`'s
    /// sizes; its configuration recorded in `configs` under its row, worker count and `pool`
    /// ("three servers").
    pub fn start(
        &self,
        plan: impl Fn(u16) -> Plan,
        servers: &[u16],
        pool: &str,
        dir: &Path,
        configs: &mut Configurations,
        scratch: &Path,
    ) -> anyhow::Result<Instance> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = free_port()?;
        let plan = plan(port);
        let balancing = Balancing {
            servers,
            method: &self.method,
        };
        let (file, text) = self.target.balanced_config(plan, balancing, dir);
        let title = format!("{}, {}, {pool}", self.name(), worker_count(plan.workers));
        configs.record(&title, file, &text, scratch);
        let process = self
            .target
            .start(file, &text, port, dir)
            .with_context(|| format!("starting {title}"))?;
        Ok(Instance { port, process })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn every_method_is_a_row_named_after_its_proxy_and_method() {
        let methods = ["peak-ewma".to_string(), "round-robin".to_string()];
        let peers = [ProxyKind::Haproxy, ProxyKind::Nginx].map(|kind| Target {
            label: kind.to_string(),
            kind,
            program: PathBuf::from("/usr/sbin/peer"),
            intake: None,
        });
        let rows = rows(&methods, Path::new("/bin/true"), &peers);
        let names: Vec<&str> = rows.iter().map(Contender::name).collect();
        assert_eq!(
            names,
            [
                "herdsman peak-ewma",
                "herdsman round-robin",
                "HAProxy leastconn",
                "HAProxy roundrobin",
                "nginx least_conn",
                "nginx random two least_conn"
            ]
        );
        assert_eq!(
            (rows[1].method.as_str(), rows[2].method.as_str()),
            ("round-robin", "leastconn")
        );
        assert_eq!(rows[0].target.program, PathBuf::from("/bin/true"));
        assert_eq!(rows[5].target.program, PathBuf::from("/usr/sbin/peer"));
    }
}
