//! Request ids (`[request_id]`): the id a request is known by to servers, the access log and,
//! when asked, its client — the one a trusted peer sent, else one made here. Made without a
//! system call, a lock or an allocation: a random 64-bit prefix drawn once per process, the
//! worker's index and the worker's own count, written as 32 hex digits.

use std::cell::Cell;
use std::net::IpAddr;
use std::sync::OnceLock;

use crate::config::headers::RequestIdSettings;
use crate::http1::Request;

/// The longest id kept from a trusted peer; a longer one is replaced (as is one with a byte
/// outside visible ASCII), so that an id always fits a request's fixed room for it.
pub const LONGEST_KEPT: usize = 64;

/// One request's id, in fixed room (no allocation); empty when the request has none.
#[derive(Clone, Copy)]
pub struct RequestId {
    bytes: [u8; LONGEST_KEPT],
    len: u8,
}

impl RequestId {
    /// No id.
    pub const fn none() -> RequestId {
        RequestId {
            bytes: [0; LONGEST_KEPT],
            len: 0,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets the id (a new request begins).
    pub fn forget(&mut self) {
        self.len = 0;
    }

    /// `text` as an id, when it may be one: 1 to [`LONGEST_KEPT`] bytes of visible ASCII.
    fn kept(text: &[u8]) -> Option<RequestId> {
        let fits = !text.is_empty() && text.len() <= LONGEST_KEPT;
        if !fits || !text.iter().all(|byte| byte.is_ascii_graphic()) {
            return None;
        }
        let mut id = RequestId::none();
        id.bytes[..text.len()].copy_from_slice(text);
        id.len = text.len() as u8;
        Some(id)
    }
}

/// A worker's maker of ids: each unique across workers (their index), processes and restarts
/// (the prefix, 64 random bits a process: two processes share one with odds of 2^-64).
pub struct RequestIds {
    /// The first 20 hex digits: the process's prefix, then the worker's index.
    start: [u8; 20],
    /// The worker's next count (48 bits of it are written: 2.8 × 10^14 ids before they wrap).
    next: Cell<u64>,
}

impl RequestIds {
    pub fn new(worker: usize) -> RequestIds {
        let mut start = [0u8; 20];
        write_hex(process_prefix(), &mut start[..16]);
        write_hex(worker as u64, &mut start[16..]);
        RequestIds {
            start,
            next: Cell::new(0),
        }
    }

    /// A new id: 32 hex digits.
    pub fn make(&self) -> RequestId {
        let count = self.next.get();
        self.next.set(count.wrapping_add(1));
        let mut id = RequestId::none();
        id.bytes[..20].copy_from_slice(&self.start);
        write_hex(count, &mut id.bytes[20..32]);
        id.len = 32;
        id
    }
}

/// The process's 64 random bits, drawn from the system at the first use.
fn process_prefix() -> u64 {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    *PREFIX.get_or_init(|| {
        use ring::rand::SecureRandom;
        let mut bytes = [0u8; 8];
        match ring::rand::SystemRandom::new().fill(&mut bytes) {
            Ok(()) => u64::from_le_bytes(bytes),
            // The system's randomness failed: fastrand's seed (the clock, the thread) instead.
            Err(_) => fastrand::u64(..),
        }
    })
}

/// `value`'s lowest `out.len()` hex digits (lower case) into `out`, most significant first.
fn write_hex(mut value: u64, out: &mut [u8]) {
    for byte in out.iter_mut().rev() {
        *byte = b"0123456789abcdef"[(value & 0xf) as usize];
        value >>= 4;
    }
}

/// The id of `request`, which came from the TCP peer `peer`: the one it carries when that peer
/// is trusted and the id may be kept, else a new one from `ids`. An untrusted client's id is
/// replaced, so it cannot choose what servers and the log see.
pub fn request_id_of(
    settings: &RequestIdSettings,
    peer: IpAddr,
    request: &Request<'_, '_>,
    ids: &RequestIds,
) -> RequestId {
    if settings.trusted.contains(peer) {
        if let Some(kept) = request.header(&settings.header).and_then(RequestId::kept) {
            return kept;
        }
    }
    ids.make()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cidr::AddressSet;
    use crate::http1::{header_slots, parse_request};

    #[test]
    fn ids_are_32_hex_digits_and_unique_per_worker_and_count() {
        let (one, two) = (RequestIds::new(1), RequestIds::new(2));
        let first = one.make();
        let text = std::str::from_utf8(first.as_bytes()).unwrap();
        assert_eq!(text.len(), 32);
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(first.as_bytes(), one.make().as_bytes());
        assert_ne!(first.as_bytes(), two.make().as_bytes());
        // The same process: the same prefix.
        assert_eq!(first.as_bytes()[..16], two.make().as_bytes()[..16]);
    }

    #[test]
    fn a_trusted_peer_s_id_is_kept_and_anyone_else_s_replaced() {
        let settings = RequestIdSettings {
            header: "X-Request-Id".into(),
            trusted: AddressSet::parse(["10.0.0.0/8"]).unwrap(),
            respond: false,
        };
        let ids = RequestIds::new(0);
        let id_of = |head: &str, peer: &str| {
            let mut slots = header_slots();
            let request = parse_request(head.as_bytes(), &mut slots, 8192)
                .unwrap()
                .unwrap();
            let id = request_id_of(&settings, peer.parse().unwrap(), &request, &ids);
            String::from_utf8(id.as_bytes().to_vec()).unwrap()
        };
        let sent = "GET / HTTP/1.1\r\nHost: a\r\nx-request-id: abc-123\r\n\r\n";
        assert_eq!(id_of(sent, "10.1.1.1"), "abc-123");
        assert_ne!(id_of(sent, "192.0.2.1"), "abc-123");
        let long = format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: {}\r\n\r\n",
            "a".repeat(65)
        );
        assert_eq!(id_of(&long, "10.1.1.1").len(), 32);
        assert_eq!(
            id_of("GET / HTTP/1.1\r\nHost: a\r\n\r\n", "10.1.1.1").len(),
            32
        );
    }
}
