//! Client addresses as the config rules them: which clients may reach a listener or a route
//! (`[listener.access]`, `[route.access]`) and which peers are trusted to name the client they
//! speak for (`[real_ip]`), checked and compiled into address sets at load.

use std::net::IpAddr;

use super::cidr::AddressSet;

/// `[listener.access]` or `[route.access]`: an address in `deny` is refused; with `allow`, an
/// address outside it is refused too.
#[derive(Debug, Clone, PartialEq)]
pub struct Access {
    /// `None`: every address not denied is allowed.
    pub allow: Option<AddressSet>,
    pub deny: AddressSet,
    pub refuse: Refusal,
}

impl Access {
    /// Whether `client` may be served.
    #[inline]
    pub fn admits(&self, client: IpAddr) -> bool {
        !self.deny.contains(client)
            && self
                .allow
                .as_ref()
                .is_none_or(|allow| allow.contains(client))
    }
}

/// How a refused client is told: `refuse = "403"` (the default) or `"close"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A 403 Forbidden answer, after which the connection may stay open.
    Forbidden,
    /// The connection closes without an answer (nothing tells a scanner what is behind it).
    Close,
}

/// `[real_ip]`: a request whose TCP peer is in `trusted` (a load balancer or CDN in front) has
/// its client's address from `header`: the rightmost address there that is not trusted itself
/// (nginx's `real_ip_recursive on`), or the leftmost when every one is.
#[derive(Debug, Clone, PartialEq)]
pub struct RealIp {
    pub trusted: AddressSet,
    pub header: ClientHeader,
}

/// Which header names the client: `X-Forwarded-For` (the default) or RFC 7239's `Forwarded`
/// (its `for=` parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientHeader {
    XForwardedFor,
    Forwarded,
}
