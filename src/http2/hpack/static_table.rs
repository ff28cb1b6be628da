//! HPACK's static table (RFC 7541 Appendix A), and the index of a name in it for the encoder,
//! found by the name's length first (at most six names share one) rather than a scan of all 61.

/// The static table, index 1 first. Dynamic indexes start after it, at `STATIC_TABLE.len() + 1`.
pub(super) static STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),                   // 1
    (b":method", b"GET"),                   // 2
    (b":method", b"POST"),                  // 3
    (b":path", b"/"),                       // 4
    (b":path", b"/index.html"),             // 5
    (b":scheme", b"http"),                  // 6
    (b":scheme", b"https"),                 // 7
    (b":status", b"200"),                   // 8
    (b":status", b"204"),                   // 9
    (b":status", b"206"),                   // 10
    (b":status", b"304"),                   // 11
    (b":status", b"400"),                   // 12
    (b":status", b"404"),                   // 13
    (b":status", b"500"),                   // 14
    (b"accept-charset", b""),               // 15
    (b"accept-encoding", b"gzip, deflate"), // 16
    (b"accept-language", b""),              // 17
    (b"accept-ranges", b""),                // 18
    (b"accept", b""),                       // 19
    (b"access-control-allow-origin", b""),  // 20
    (b"age", b""),                          // 21
    (b"allow", b""),                        // 22
    (b"authorization", b""),                // 23
    (b"cache-control", b""),                // 24
    (b"content-disposition", b""),          // 25
    (b"content-encoding", b""),             // 26
    (b"content-language", b""),             // 27
    (b"content-length", b""),               // 28
    (b"content-location", b""),             // 29
    (b"content-range", b""),                // 30
    (b"content-type", b""),                 // 31
    (b"cookie", b""),                       // 32
    (b"date", b""),                         // 33
    (b"etag", b""),                         // 34
    (b"expect", b""),                       // 35
    (b"expires", b""),                      // 36
    (b"from", b""),                         // 37
    (b"host", b""),                         // 38
    (b"if-match", b""),                     // 39
    (b"if-modified-since", b""),            // 40
    (b"if-none-match", b""),                // 41
    (b"if-range", b""),                     // 42
    (b"if-unmodified-since", b""),          // 43
    (b"last-modified", b""),                // 44
    (b"link", b""),                         // 45
    (b"location", b""),                     // 46
    (b"max-forwards", b""),                 // 47
    (b"proxy-authenticate", b""),           // 48
    (b"proxy-authorization", b""),          // 49
    (b"range", b""),                        // 50
    (b"referer", b""),                      // 51
    (b"refresh", b""),                      // 52
    (b"retry-after", b""),                  // 53
    (b"server", b""),                       // 54
    (b"set-cookie", b""),                   // 55
    (b"strict-transport-security", b""),    // 56
    (b"transfer-encoding", b""),            // 57
    (b"user-agent", b""),                   // 58
    (b"vary", b""),                         // 59
    (b"via", b""),                          // 60
    (b"www-authenticate", b""),             // 61
];

/// The longest name in the table (`access-control-allow-origin`).
const LONGEST_NAME: usize = 27;

/// The most distinct names of one length (4 bytes: date, etag, from, host, link, vary; and 13).
const MOST_OF_ONE_LENGTH: usize = 6;

/// Per name length, the static indexes of the distinct names that long (a name's first index,
/// the one an encoder refers to), `0` past the last.
static NAMES_BY_LENGTH: [[u8; MOST_OF_ONE_LENGTH]; LONGEST_NAME + 1] = names_by_length();

const fn names_by_length() -> [[u8; MOST_OF_ONE_LENGTH]; LONGEST_NAME + 1] {
    let mut by_length = [[0u8; MOST_OF_ONE_LENGTH]; LONGEST_NAME + 1];
    let mut taken = [0usize; LONGEST_NAME + 1];
    let mut i = 0;
    while i < STATIC_TABLE.len() {
        let name = STATIC_TABLE[i].0;
        // A name's entries are adjacent (:method, :path, :scheme, :status): the first is kept.
        // A length or count beyond the constants above fails the build here.
        if i == 0 || !same_bytes(STATIC_TABLE[i - 1].0, name) {
            by_length[name.len()][taken[name.len()]] = (i + 1) as u8;
            taken[name.len()] += 1;
        }
        i += 1;
    }
    by_length
}

const fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The static index of `name` (its first entry), if the table has it. Names are compared
/// exactly: HTTP/2 field names are lowercase, and so is the table.
pub(super) fn static_name_index(name: &[u8]) -> Option<u8> {
    let candidates = NAMES_BY_LENGTH.get(name.len())?;
    candidates
        .iter()
        .copied()
        .take_while(|&index| index != 0)
        .find(|&index| STATIC_TABLE[usize::from(index) - 1].0 == name)
}

/// The entry at a static `index` (1 to 61).
pub(super) fn static_entry(index: usize) -> Option<(&'static [u8], &'static [u8])> {
    STATIC_TABLE.get(index.wrapping_sub(1)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_found_at_its_first_index_and_others_are_not() {
        for (i, (name, _)) in STATIC_TABLE.iter().enumerate() {
            let first = STATIC_TABLE.iter().position(|(n, _)| n == name).unwrap() + 1;
            assert_eq!(
                static_name_index(name),
                Some(first as u8),
                "entry {}",
                i + 1
            );
        }
        for name in [
            &b""[..],
            b"x-request-id",
            b"Content-Type",
            b"dates",
            b"content-typ",
        ] {
            assert_eq!(static_name_index(name), None);
        }
        let long = [b'a'; 100];
        assert_eq!(static_name_index(&long), None);
        assert_eq!(static_entry(0), None);
        assert_eq!(static_entry(61), Some((&b"www-authenticate"[..], &b""[..])));
        assert_eq!(static_entry(62), None);
    }
}
