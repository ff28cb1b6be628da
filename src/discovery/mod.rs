//! Pools that follow the fleet (issue 40): servers found by DNS (A, AAAA, SRV) and Consul rather
//! than written in the file. Control plane, beside the health checks: it asks the sources and
//! publishes what they say through the registry, as the admin API's changes are published.
//! Built so far: `membership`, what one source's answers add up to; `dns`, the DNS source (A,
//! AAAA, SRV through hickory's resolver); `consul`, the Consul source (the health API's blocking
//! queries). The thread that runs them and the config that names them are still to come; nothing
//! here is reachable from the config yet.

pub mod consul;
pub mod dns;
pub mod membership;
