//! The client's address a request is served as: the TCP peer's, or, when the peer is trusted
//! (`[real_ip]`), the one its X-Forwarded-For or Forwarded field gives; and whether a listener's
//! or route's `access` admits it. One value per request, which routing, hashing, conditions,
//! limits and the access log all read.

use std::net::{IpAddr, SocketAddr};

use crate::config::access::{ClientHeader, RealIp};
use crate::http1::Request;

/// The client `request`, received from `peer`, is for: `peer` itself unless `real_ip` trusts it;
/// then the rightmost address in the header that is not trusted (each trusted one is a proxy
/// that added the address before it), or the leftmost when all are trusted. An element that is
/// not an address (`unknown`, an obfuscated `_name`, garbage) ends the walk: the address after
/// it, trusted, is the client, since nothing before it can be believed.
pub fn client_of(real_ip: Option<&RealIp>, peer: IpAddr, request: &Request<'_, '_>) -> IpAddr {
    let Some(real_ip) = real_ip.filter(|real_ip| real_ip.trusted.contains(peer)) else {
        return peer;
    };
    let name = match real_ip.header {
        ClientHeader::XForwardedFor => "x-forwarded-for",
        ClientHeader::Forwarded => "forwarded",
    };
    let mut client = peer;
    let fields = request
        .headers
        .iter()
        .rev()
        .filter(|field| field.name.eq_ignore_ascii_case(name));
    for field in fields {
        for element in field.value.rsplit(|&b| b == b',') {
            let address = match real_ip.header {
                ClientHeader::XForwardedFor => address_in(element),
                ClientHeader::Forwarded => forwarded_for(element),
            };
            let Some(address) = address else {
                return client;
            };
            client = address;
            if !real_ip.trusted.contains(address) {
                return client;
            }
        }
    }
    client
}

/// The `for=` parameter's address in one element of a Forwarded field
/// (`for=192.0.2.60;proto=http`, `for="[2001:db8::17]:4711"`).
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    element.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let eq = pair.iter().position(|&b| b == b'=')?;
        if !pair[..eq].trim_ascii().eq_ignore_ascii_case(b"for") {
            return None;
        }
        let value = pair[eq + 1..].trim_ascii();
        let value = match value {
            [b'"', quoted @ .., b'"'] => quoted,
            _ => value,
        };
        address_in(value)
    })
}

/// An address as a forwarding header writes it: bare (`192.0.2.1`, `2001:db8::1`), with a port
/// (`192.0.2.1:443`, `[2001:db8::1]:443`) or bracketed (`[2001:db8::1]`).
fn address_in(text: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(text.trim_ascii()).ok()?;
    if let Ok(address) = text.parse::<IpAddr>() {
        return Some(address);
    }
    if let Ok(with_port) = text.parse::<SocketAddr>() {
        return Some(with_port.ip());
    }
    text.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cidr::AddressSet;
    use crate::http1::{header_slots, parse_request};

    fn client(header: ClientHeader, peer: &str, fields: &str) -> String {
        let real_ip = RealIp {
            trusted: AddressSet::parse(["127.0.0.1", "10.0.0.0/8"]).unwrap(),
            header,
        };
        let text = format!("GET / HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
        let mut headers = header_slots();
        let request = parse_request(text.as_bytes(), &mut headers, 8192)
            .unwrap()
            .unwrap();
        client_of(Some(&real_ip), peer.parse().unwrap(), &request).to_string()
    }

    #[test]
    fn the_rightmost_untrusted_address_of_a_trusted_peer_is_the_client() {
        let xff = ClientHeader::XForwardedFor;
        // A client's own claim stays to the left of what the trusted proxies saw.
        let chain = "X-Forwarded-For: 1.1.1.1, 203.0.113.9\r\nX-Forwarded-For: 10.0.0.2\r\n";
        assert_eq!(client(xff, "127.0.0.1", chain), "203.0.113.9");
        // An untrusted peer's header is not read.
        assert_eq!(client(xff, "192.0.2.1", chain), "192.0.2.1");
        // Every address trusted: the leftmost.
        assert_eq!(
            client(xff, "127.0.0.1", "X-Forwarded-For: 10.0.0.3, 10.0.0.2\r\n"),
            "10.0.0.3"
        );
        // No header: the peer.
        assert_eq!(client(xff, "127.0.0.1", ""), "127.0.0.1");
        // Something not an address stops the walk at the last trusted one.
        assert_eq!(
            client(
                xff,
                "127.0.0.1",
                "X-Forwarded-For: 203.0.113.9, junk, 10.0.0.2\r\n"
            ),
            "10.0.0.2"
        );
        assert_eq!(
            client(xff, "127.0.0.1", "X-Forwarded-For: [2001:db8::1]:80\r\n"),
            "2001:db8::1"
        );
    }

    #[test]
    fn forwarded_gives_its_for_parameters() {
        let forwarded = ClientHeader::Forwarded;
        let field = "Forwarded: for=198.51.100.1;proto=https, For=\"[2001:db8::17]:4711\";by=10.0.0.1, for=10.0.0.5\r\n";
        assert_eq!(client(forwarded, "127.0.0.1", field), "2001:db8::17");
        assert_eq!(
            client(
                forwarded,
                "127.0.0.1",
                "Forwarded: for=unknown, for=10.0.0.5\r\n"
            ),
            "10.0.0.5"
        );
        // X-Forwarded-For is not read when Forwarded is the header.
        assert_eq!(
            client(forwarded, "127.0.0.1", "X-Forwarded-For: 203.0.113.9\r\n"),
            "127.0.0.1"
        );
    }
}
