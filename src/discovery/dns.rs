//! DNS as a discovery source: a name's A and AAAA records with a configured port, or its SRV
//! records (`_http._tcp.app.internal`, a Kubernetes headless service's
//! `_port._proto.svc.ns.svc.cluster.local`: port and weight from each record, priorities below
//! the best one as backups), made into one [`Answer`] with the least TTL of what was read. A
//! negative answer (NXDOMAIN, or no record of the type) is `Empty`; a timeout, SERVFAIL,
//! REFUSED or a network error is `Failed`, and so is an answer of which one part failed (A
//! found, AAAA timed out): a partial answer must not remove the servers the failed part named.
//! One resolver (hickory's) per process, on the discovery thread's runtime, its cache off: the
//! membership asks once per TTL itself, and a cached answer would hide the TTL's true age.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;

use super::membership::{Answer, Found};
use crate::upstream::registry::MAX_WEIGHT;

/// Asks DNS for a pool's servers.
pub struct Dns {
    resolver: TokioResolver,
}

impl Dns {
    /// A resolver that asks `servers` (each an address and port, over UDP and then TCP), or
    /// those of `/etc/resolv.conf` when there are none; each question given up after `timeout`
    /// and `attempts` tries. Made on the runtime that will run its lookups.
    pub fn new(servers: &[SocketAddr], timeout: Duration, attempts: usize) -> Result<Dns, String> {
        let mut builder = match servers.is_empty() {
            true => TokioResolver::builder_tokio()
                .map_err(|error| format!("/etc/resolv.conf cannot be read: {error}"))?,
            false => {
                let name_servers = servers.iter().map(|server| {
                    let mut udp = ConnectionConfig::udp();
                    udp.port = server.port();
                    let mut tcp = ConnectionConfig::tcp();
                    tcp.port = server.port();
                    NameServerConfig::new(server.ip(), true, vec![udp, tcp])
                });
                let config = ResolverConfig::from_parts(None, Vec::new(), name_servers.collect());
                TokioResolver::builder_with_config(config, Default::default())
            }
        };
        let options: &mut ResolverOpts = builder.options_mut();
        options.timeout = timeout;
        options.attempts = attempts;
        options.cache_size = 0;
        options.ndots = 0;
        builder
            .build()
            .map(|resolver| Dns { resolver })
            .map_err(|error| format!("the resolver cannot start: {error}"))
    }

    /// The A and AAAA records of `name`, each address a server on `port`.
    pub async fn addresses(&self, name: &str, port: u16) -> Answer {
        let name = absolute(name);
        let (v4, v6) = tokio::join!(
            self.records(&name, RecordType::A),
            self.records(&name, RecordType::AAAA)
        );
        let mut parts = Parts::default();
        for records in [v4, v6] {
            parts.take(records, |data| {
                let ip = match data {
                    RData::A(a) => IpAddr::V4(a.0),
                    RData::AAAA(aaaa) => IpAddr::V6(aaaa.0),
                    _ => return None,
                };
                let addr = SocketAddr::new(ip, port);
                Some(Found {
                    identity: addr.to_string(),
                    addr,
                    weight: 1,
                    backup: false,
                })
            });
        }
        parts.answer()
    }

    /// The SRV records of `name`: each target's addresses, on the record's port, weighted by
    /// the record's weight within its priority; the targets of priorities below the best as
    /// backups. A target's identity is its name and port (with the address after an `@` when the
    /// target has more than one).
    pub async fn services(&self, name: &str) -> Answer {
        let services = match self.records(&absolute(name), RecordType::SRV).await {
            Lookup::Records(records) => records,
            Lookup::Empty(ttl) => return Answer::Empty { ttl },
            Lookup::Failed(reason) => return Answer::Failed { reason },
        };
        let best = services
            .iter()
            .filter_map(|(data, _)| match data {
                RData::SRV(srv) => Some(srv.priority),
                _ => None,
            })
            .min();
        let heaviest = services
            .iter()
            .filter_map(|(data, _)| match data {
                RData::SRV(srv) => Some(u32::from(srv.weight)),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let mut parts = Parts {
            ttl: services.iter().map(|(_, ttl)| *ttl).min(),
            ..Parts::default()
        };
        for (data, _) in &services {
            let RData::SRV(srv) = data else { continue };
            let target = srv.target.to_ascii();
            let target = target.trim_end_matches('.');
            let found = self.addresses(target, srv.port).await;
            let servers = match found {
                Answer::Servers { servers, ttl } => {
                    parts.ttl = Some(parts.ttl.map_or(ttl, |least| least.min(ttl)));
                    servers
                }
                // A target without addresses names no server; one whose lookup failed makes the
                // whole answer a failure.
                Answer::Empty { .. } => continue,
                Answer::Failed { reason } => {
                    parts.failed.get_or_insert(reason);
                    continue;
                }
            };
            let several = servers.len() > 1;
            for server in servers {
                let identity = match several {
                    true => format!("{target}:{}@{}", srv.port, server.addr.ip()),
                    false => format!("{target}:{}", srv.port),
                };
                parts.servers.push(Found {
                    identity,
                    addr: server.addr,
                    weight: srv_weight(srv.weight, heaviest),
                    backup: Some(srv.priority) != best,
                });
            }
        }
        parts.answer()
    }

    /// One lookup of `name`'s records of `kind`: the data of each with its TTL.
    async fn records(&self, name: &str, kind: RecordType) -> Lookup {
        match self.resolver.lookup(name, kind).await {
            Ok(lookup) => {
                let records: Vec<(RData, Duration)> = lookup
                    .answers()
                    .iter()
                    .filter(|record| record.record_type() == kind)
                    .map(|record| (record.data.clone(), secs(record.ttl)))
                    .collect();
                match records.is_empty() {
                    true => Lookup::Empty(None),
                    false => Lookup::Records(records),
                }
            }
            Err(NetError::Dns(DnsError::NoRecordsFound(none)))
                if matches!(
                    none.response_code,
                    ResponseCode::NoError | ResponseCode::NXDomain
                ) =>
            {
                Lookup::Empty(none.negative_ttl.map(secs))
            }
            Err(error) => Lookup::Failed(format!("{name} {kind}: {error}")),
        }
    }
}

/// What one lookup found.
enum Lookup {
    Records(Vec<(RData, Duration)>),
    Empty(Option<Duration>),
    Failed(String),
}

/// An answer gathered from several lookups.
#[derive(Default)]
struct Parts {
    servers: Vec<Found>,
    ttl: Option<Duration>,
    /// The least negative TTL of the lookups that found nothing.
    empty_ttl: Option<Duration>,
    failed: Option<String>,
}

impl Parts {
    /// Takes one lookup, each record made into a server by `server`.
    fn take(&mut self, lookup: Lookup, server: impl Fn(&RData) -> Option<Found>) {
        match lookup {
            Lookup::Records(records) => {
                for (data, ttl) in &records {
                    if let Some(found) = server(data) {
                        self.servers.push(found);
                        self.ttl = Some(self.ttl.map_or(*ttl, |least| least.min(*ttl)));
                    }
                }
            }
            Lookup::Empty(ttl) => {
                if let Some(ttl) = ttl {
                    self.empty_ttl = Some(self.empty_ttl.map_or(ttl, |least| least.min(ttl)));
                }
            }
            Lookup::Failed(reason) => {
                self.failed.get_or_insert(reason);
            }
        }
    }

    fn answer(self) -> Answer {
        if let Some(reason) = self.failed {
            return Answer::Failed { reason };
        }
        match (self.servers.is_empty(), self.ttl) {
            (false, Some(ttl)) => Answer::Servers {
                servers: self.servers,
                ttl,
            },
            _ => Answer::Empty {
                ttl: self.empty_ttl,
            },
        }
    }
}

/// An SRV record's weight (0–65535, relative within its priority) as a server's (1–256): in
/// proportion to the heaviest record's, none below 1 (RFC 2782's weight 0, "a very small
/// chance", is the smallest weight a pool has).
fn srv_weight(weight: u16, heaviest: u32) -> u32 {
    if heaviest <= MAX_WEIGHT {
        return u32::from(weight).max(1);
    }
    (u32::from(weight) * MAX_WEIGHT / heaviest).max(1)
}

/// `name` as an absolute name (a final dot): no search domain is tried.
fn absolute(name: &str) -> String {
    match name.ends_with('.') {
        true => name.to_string(),
        false => format!("{name}."),
    }
}

fn secs(ttl: u32) -> Duration {
    Duration::from_secs(u64::from(ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srv_weights_keep_their_proportions_within_a_pool_s_range() {
        assert_eq!(srv_weight(10, 90), 10);
        assert_eq!(srv_weight(0, 90), 1);
        assert_eq!(srv_weight(1000, 5000), 51);
        assert_eq!(srv_weight(5000, 5000), 256);
        assert_eq!(srv_weight(1, 65535), 1);
    }

    #[test]
    fn a_name_is_asked_as_an_absolute_one() {
        assert_eq!(absolute("app.internal"), "app.internal.");
        assert_eq!(absolute("app.internal."), "app.internal.");
    }
}
