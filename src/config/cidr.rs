//! Lists of client addresses (`10.0.0.0/8`, `::1`, `2001:db8::/32`) parsed once into a compact
//! matcher: each family's networks as sorted, merged ranges of numbers, so a lookup is a binary
//! search over a few words however many networks are listed. Conditions (`when = { client = … }`)
//! use it, and the client-address rules after them.

use std::net::IpAddr;

/// A set of IPv4 and IPv6 networks. IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) are matched
/// as the IPv4 address they carry, as a dual-stack listener reports IPv4 clients so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressSet {
    /// Inclusive ranges, sorted and merged (no two overlap or touch).
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl AddressSet {
    /// Parses each entry (an address, or an address and a prefix length after `/`); the first
    /// entry that is neither is the error, with why.
    pub fn parse<'t>(entries: impl IntoIterator<Item = &'t str>) -> Result<AddressSet, String> {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for entry in entries {
            match parse_network(entry)? {
                Network::V4(first, last) => v4.push((first, last)),
                Network::V6(first, last) => v6.push((first, last)),
            }
        }
        Ok(AddressSet {
            v4: merged(v4),
            v6: merged(v6),
        })
    }

    /// Whether `address` is in one of the networks.
    #[inline]
    pub fn contains(&self, address: IpAddr) -> bool {
        match address {
            IpAddr::V4(v4) => in_ranges(&self.v4, u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => in_ranges(&self.v4, u32::from(v4)),
                None => in_ranges(&self.v6, u128::from(v6)),
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

enum Network {
    V4(u32, u32),
    V6(u128, u128),
}

/// One entry as the first and last address of its network. Bits set below the prefix
/// (`10.0.0.1/8`) are refused: they usually mean a typing mistake.
fn parse_network(entry: &str) -> Result<Network, String> {
    let (address, prefix) = match entry.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (entry, None),
    };
    let address: IpAddr = address
        .parse()
        .map_err(|_| "not an IP address or network; write e.g. \"10.0.0.0/8\" or \"::1\"")?;
    let bits = if address.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => bits,
        Some(text) => match text.parse::<u32>() {
            Ok(length) if length <= bits => length,
            _ => {
                return Err(format!(
                    "the prefix length must be a number from 0 to {bits}"
                ))
            }
        },
    };
    let host_bits_set =
        || format!("bits set after the first {prefix}; the network is written with them clear");
    match address {
        IpAddr::V4(v4) => {
            let first = u32::from(v4);
            let host = u32::MAX.checked_shr(prefix).unwrap_or(0);
            if first & host != 0 {
                return Err(host_bits_set());
            }
            Ok(Network::V4(first, first | host))
        }
        IpAddr::V6(v6) => {
            let first = u128::from(v6);
            let host = u128::MAX.checked_shr(prefix).unwrap_or(0);
            if first & host != 0 {
                return Err(host_bits_set());
            }
            Ok(Network::V6(first, first | host))
        }
    }
}

/// Sorted, with overlapping and adjacent ranges joined.
fn merged<T: Copy + Ord + Into<u128>>(mut ranges: Vec<(T, T)>) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (first, last) in ranges {
        match out.last_mut() {
            Some(previous) if first.into() <= previous.1.into().saturating_add(1) => {
                previous.1 = previous.1.max(last);
            }
            _ => out.push((first, last)),
        }
    }
    out.shrink_to_fit();
    out
}

#[inline]
fn in_ranges<T: Copy + Ord>(ranges: &[(T, T)], value: T) -> bool {
    // The last range starting at or before `value` is the only one that can hold it.
    let after = ranges.partition_point(|range| range.0 <= value);
    after > 0 && value <= ranges[after - 1].1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(entries: &[&str]) -> AddressSet {
        AddressSet::parse(entries.iter().copied()).unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_and_single_addresses_of_both_families() {
        let office = set(&["10.0.0.0/8", "192.168.1.7", "2001:db8::/32", "::1"]);
        assert!(office.contains(ip("10.200.3.4")));
        assert!(!office.contains(ip("11.0.0.0")));
        assert!(office.contains(ip("192.168.1.7")));
        assert!(!office.contains(ip("192.168.1.8")));
        assert!(office.contains(ip("2001:db8:ffff::1")));
        assert!(!office.contains(ip("2001:db9::")));
        assert!(office.contains(ip("::1")));
        // A dual-stack listener's view of an IPv4 client.
        assert!(office.contains(ip("::ffff:10.1.2.3")));
        assert!(set(&["0.0.0.0/0"]).contains(ip("255.255.255.255")));
        assert!(set(&["::/0"]).contains(ip("ffff::")));
        assert!(!set(&[]).contains(ip("10.0.0.1")));
    }

    #[test]
    fn overlapping_and_adjacent_networks_merge() {
        let joined = set(&["10.0.1.0/24", "10.0.0.0/24", "10.0.0.128/25", "10.0.2.0/24"]);
        assert_eq!(joined.v4, [(0x0a00_0000, 0x0a00_02ff)]);
        assert!(joined.contains(ip("10.0.2.255")));
        assert!(!joined.contains(ip("10.0.3.0")));
    }

    #[test]
    fn bad_entries_say_why() {
        let refused = |entry: &str| AddressSet::parse([entry]).unwrap_err();
        assert!(refused("10.0.0.300").contains("not an IP address"));
        assert!(refused("office").contains("not an IP address"));
        assert!(refused("10.0.0.0/33").contains("from 0 to 32"));
        assert!(refused("::/129").contains("from 0 to 128"));
        assert!(refused("10.0.0.1/8").contains("bits set after the first 8"));
    }
}
