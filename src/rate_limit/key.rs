//! What a limit counts a request under: the client's address, a field's or a cookie's value,
//! or the route itself; a request without the field or cookie is counted under one shared key,
//! "absent" (so leaving the field out is no way around the limit).

use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::net::IpAddr;

use crate::config::rate_limit::LimitKey;
use crate::http1::Request;

/// The longest key text kept for the admin API's top keys; a longer value is cut there (its
/// hash, which the limit counts by, is of all of it).
pub const KEY_TEXT_MAX: usize = 48;

/// One request's key for one limit, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub enum RequestKey<'r> {
    Address(IpAddr),
    Value(&'r [u8]),
    /// The field or cookie the limit is keyed by is not in the request.
    Absent,
    Route,
}

impl<'r> RequestKey<'r> {
    /// The key `key` names in `request`, whose client is `client`.
    pub fn of(key: &LimitKey, request: &Request<'_, 'r>, client: IpAddr) -> RequestKey<'r> {
        let value = match key {
            LimitKey::Client => return RequestKey::Address(client),
            LimitKey::Route => return RequestKey::Route,
            LimitKey::Header(name) => request.header(name),
            LimitKey::Cookie(name) => request.cookie(name),
        };
        value.map_or(RequestKey::Absent, RequestKey::Value)
    }

    /// Its hash under a limit's `seed`; each kind of key apart from the others.
    pub fn hash(&self, seed: &impl BuildHasher) -> u64 {
        let mut hasher = seed.build_hasher();
        match self {
            RequestKey::Address(IpAddr::V4(v4)) => {
                hasher.write_u8(0);
                hasher.write(&v4.octets());
            }
            RequestKey::Address(IpAddr::V6(v6)) => {
                hasher.write_u8(1);
                hasher.write(&v6.octets());
            }
            RequestKey::Value(value) => {
                hasher.write_u8(2);
                hasher.write(value);
            }
            RequestKey::Absent => hasher.write_u8(3),
            RequestKey::Route => hasher.write_u8(4),
        }
        hasher.finish()
    }

    /// All of it, as Redis keys it, appended to `out`.
    pub fn write_full(&self, out: &mut Vec<u8>) {
        match self {
            RequestKey::Address(address) => {
                let _ = write!(out, "{address}");
            }
            RequestKey::Value(value) => out.extend_from_slice(value),
            RequestKey::Absent => out.extend_from_slice(b"(absent)"),
            RequestKey::Route => out.extend_from_slice(b"(route)"),
        }
    }

    /// Its text for the admin API, written into `out`; returns the length (at most
    /// [`KEY_TEXT_MAX`]). Written on a refusal only, without allocating.
    pub fn write_text(&self, out: &mut [u8; KEY_TEXT_MAX]) -> usize {
        let mut cursor = std::io::Cursor::new(&mut out[..]);
        let _ = match self {
            RequestKey::Address(address) => write!(cursor, "{address}"),
            RequestKey::Value(value) => cursor.write_all(value),
            RequestKey::Absent => cursor.write_all(b"(absent)"),
            RequestKey::Route => cursor.write_all(b"(route)"),
        };
        cursor.position() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::{header_slots, parse_request};

    #[test]
    fn keys_come_from_the_address_a_field_or_a_cookie() {
        let text = b"GET / HTTP/1.1\r\nHost: a\r\nX-Key: alice\r\nCookie: s=1; who=bob\r\n\r\n";
        let mut headers = header_slots();
        let request = parse_request(text, &mut headers, 8192).unwrap().unwrap();
        let client: IpAddr = "192.0.2.7".parse().unwrap();
        let text_of = |key: &LimitKey| {
            let mut out = [0; KEY_TEXT_MAX];
            let len = RequestKey::of(key, &request, client).write_text(&mut out);
            String::from_utf8_lossy(&out[..len]).into_owned()
        };
        assert_eq!(text_of(&LimitKey::Client), "192.0.2.7");
        assert_eq!(text_of(&LimitKey::Header("x-key".into())), "alice");
        assert_eq!(text_of(&LimitKey::Cookie("who".into())), "bob");
        assert_eq!(text_of(&LimitKey::Header("x-other".into())), "(absent)");
        assert_eq!(text_of(&LimitKey::Cookie("none".into())), "(absent)");
        assert_eq!(text_of(&LimitKey::Route), "(route)");
        // A field's value and the same bytes as an absent marker or another kind hash apart.
        let seed = foldhash::fast::FixedState::with_seed(1);
        let alice = RequestKey::Value(b"alice").hash(&seed);
        assert_eq!(alice, RequestKey::Value(b"alice").hash(&seed));
        assert_ne!(alice, RequestKey::Value(b"bob").hash(&seed));
        assert_ne!(
            RequestKey::Absent.hash(&seed),
            RequestKey::Route.hash(&seed)
        );
        // A long value's text is cut; all of it counts in the hash.
        let long = [b'x'; 100];
        let mut out = [0; KEY_TEXT_MAX];
        assert_eq!(RequestKey::Value(&long).write_text(&mut out), KEY_TEXT_MAX);
    }
}
