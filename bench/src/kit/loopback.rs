//! Many servers on one machine: server `index`'s own loopback address (127.0.x.y), which a
//! listener on 0.0.0.0 reaches without a socket per server, and back from an address to its index.

use std::net::Ipv4Addr;

/// Addresses per third octet: 127.0.x.1 to 127.0.x.250.
const PER_OCTET: u32 = 250;

/// The address of server `index`: 127.0.1.1, 127.0.1.2, … 127.0.1.250, 127.0.2.1, …
pub fn address(index: u32) -> Ipv4Addr {
    let (third, fourth) = (1 + index / PER_OCTET, 1 + index % PER_OCTET);
    Ipv4Addr::new(127, 0, third as u8, fourth as u8)
}

/// The server index of an address made by [`address`].
pub fn index_of(address: Ipv4Addr) -> Option<u32> {
    match address.octets() {
        [127, 0, third @ 1..=255, fourth @ 1..=250] => {
            Some((u32::from(third) - 1) * PER_OCTET + u32::from(fourth) - 1)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_indexes_go_both_ways() {
        assert_eq!(address(0), Ipv4Addr::new(127, 0, 1, 1));
        assert_eq!(address(249), Ipv4Addr::new(127, 0, 1, 250));
        assert_eq!(address(250), Ipv4Addr::new(127, 0, 2, 1));
        for index in [0, 1, 249, 250, 9_999, 59_999] {
            assert_eq!(index_of(address(index)), Some(index));
        }
        assert_eq!(index_of(Ipv4Addr::new(127, 0, 0, 1)), None);
    }
}
