//! The request target's form and the Host authority: what a request line's target forwards as,
//! and which hosts a target or a Host field may name.

use super::{HeadError, Method};

/// The request target's form (RFC 9112 §3.2): what is forwarded, and the host an absolute-form
/// target names.
///
/// An absolute-form target is forwarded in origin-form with its authority as Host, as RFC 9112
/// §3.2.2 requires of a proxy ("MUST ignore the received Host header field … and instead replace
/// it with the host information of the request-target"): routing, X-Forwarded-Host, the access
/// log and the server then all see the same host. Refusing a Host that differs (as HAProxy does)
/// would also be safe, but the RFC's way serves the clients that send absolute-form to proxies.
/// Only an authority that is itself invalid — empty, with userinfo (RFC 9110 §4.2.4), or with a
/// byte a host cannot have — is refused, as is a scheme other than http and https, which this
/// proxy cannot serve.
pub(super) fn read_target(
    method: Method,
    target: &str,
) -> Result<(&str, Option<&[u8]>), HeadError> {
    let bytes = target.as_bytes();
    match bytes.first() {
        Some(b'/') => return Ok((target, None)),
        Some(b'*') if bytes.len() == 1 => {
            return match method {
                Method::Options => Ok((target, None)),
                _ => Err(HeadError::Invalid("an asterisk target is for OPTIONS only")),
            }
        }
        // authority-form: CONNECT is answered 501 by the caller.
        _ if method == Method::Connect => return Ok((target, None)),
        _ => {}
    }
    let after_scheme = ["http://", "https://"].iter().find_map(|scheme| {
        let has_scheme = bytes.len() > scheme.len()
            && bytes[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes());
        has_scheme.then(|| &target[scheme.len()..])
    });
    let Some(rest) = after_scheme else {
        return Err(HeadError::Invalid("invalid request target"));
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    if authority.contains('@') {
        return Err(HeadError::Invalid("userinfo in the request target"));
    }
    if authority.is_empty() || !is_valid_host(authority.as_bytes()) {
        return Err(HeadError::Invalid("invalid host in the request target"));
    }
    // RFC 9112 §3.2.4: an absolute-form OPTIONS with no path is for the server as a whole.
    let forwarded = if after.is_empty() && method == Method::Options {
        "*"
    } else {
        after
    };
    Ok((forwarded, Some(authority.as_bytes())))
}

/// Whether `value` may be a Host (RFC 9110 §7.2: `uri-host [ ":" port ]`): a name or IPv4
/// address of unreserved, percent-encoded and sub-delimiter characters, or a bracketed IP
/// literal, then an optional port of digits. Empty is allowed (a target with no authority).
/// Userinfo (`user@`) and whatever would end an authority (`/`, `?`, `#`, spaces) are not: a
/// server or a log reading `a@evil` or `good/..` differently from herdsman's routes must never
/// see one.
pub(super) fn is_valid_host(value: &[u8]) -> bool {
    let is = |class: u8| move |b: &u8| HOST_BYTES[usize::from(*b)] & class != 0;
    let port = match value.first() {
        Some(b'[') => match value.iter().position(|&b| b == b']') {
            Some(close) if value[1..close].iter().all(is(NAME | COLON)) => &value[close + 1..],
            _ => return false,
        },
        // The name runs to the first byte that cannot be in one; only a port may follow.
        _ => {
            let name = value.iter().take_while(|b| is(NAME)(b)).count();
            &value[name..]
        }
    };
    match port {
        [] => true,
        [b':', digits @ ..] => digits.iter().all(is(DIGIT)),
        _ => false,
    }
}

/// A byte's classes in a Host, looked up rather than tested by comparisons: the check of a
/// `127.0.0.1:PORT` went from 268 instructions to 116 (callgrind, bench/results/diet.md).
const NAME: u8 = 1;
const DIGIT: u8 = 2;
const COLON: u8 = 4;
static HOST_BYTES: [u8; 256] = host_bytes();

const fn host_bytes() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        if byte.is_ascii_alphanumeric() {
            table[b] |= NAME;
        }
        if byte.is_ascii_digit() {
            table[b] |= DIGIT;
        }
        b += 1;
    }
    let others = b"-._~%!$&'()*+,;=";
    let mut i = 0;
    while i < others.len() {
        table[others[i] as usize] |= NAME;
        i += 1;
    }
    table[b':' as usize] |= COLON;
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check as RFC 9110's grammar reads, byte by byte: the table must agree with it.
    fn by_the_grammar(value: &[u8]) -> bool {
        let name_byte = |b: &u8| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(b);
        let (name_ok, port) = match value.first() {
            Some(b'[') => match value.iter().position(|&b| b == b']') {
                Some(close) => (
                    value[1..close].iter().all(|b| name_byte(b) || *b == b':'),
                    &value[close + 1..],
                ),
                None => return false,
            },
            _ => {
                let colon = value.iter().position(|&b| b == b':').unwrap_or(value.len());
                (value[..colon].iter().all(name_byte), &value[colon..])
            }
        };
        name_ok
            && match port {
                [] => true,
                [b':', digits @ ..] => digits.iter().all(u8::is_ascii_digit),
                _ => false,
            }
    }

    #[test]
    fn the_table_agrees_with_the_grammar_on_every_short_host() {
        // Every string of up to 4 bytes over bytes of each class, and a few whole hosts.
        let alphabet = b"a9-:[]@/ \x00\xff%";
        let mut strings = vec![Vec::new()];
        for _ in 0..4 {
            let longer: Vec<Vec<u8>> = strings
                .iter()
                .filter(|s| s.len() == strings.last().unwrap().len())
                .flat_map(|s| {
                    alphabet.iter().map(move |&b| {
                        let mut t = s.clone();
                        t.push(b);
                        t
                    })
                })
                .collect();
            strings.extend(longer);
        }
        for host in [
            &b"127.0.0.1:8080"[..],
            b"[::1]:443",
            b"app.example",
            b"a@b",
            b"x:8o",
        ] {
            strings.push(host.to_vec());
        }
        for value in &strings {
            assert_eq!(
                is_valid_host(value),
                by_the_grammar(value),
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
        for byte in 0..=255u8 {
            assert_eq!(is_valid_host(&[byte]), by_the_grammar(&[byte]), "{byte}");
        }
    }
}
