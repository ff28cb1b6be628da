//! Cache keys: what a request is stored and found under. The primary key is the pool, the
//! scheme, the host and the target as herdsman forwards them (what the server answers is what
//! it was asked), with any request fields the pool adds; a response with `Vary` is stored under
//! the primary key and the request's values of the fields it names, `Accept-Encoding` reduced
//! to the codings that matter so that the clients' many spellings share a few variants.

/// Appends the primary key: each part followed by a NUL, which no part can contain (a host, a
/// target and a field value are checked for it before they get here). Fields the pool keys on
/// follow with [`write_field`].
///
/// A primary key is a prefix of every key written from it (its key fields', its variants'), and
/// nothing else's: a purge of one URL removes the keys that begin with it.
pub fn write_primary(out: &mut Vec<u8>, pool: &str, secure: bool, host: &[u8], target: &[u8]) {
    write_path_prefix(out, pool, secure, host, target);
    out.push(0);
}

/// Appends the beginning that every key of `host`'s targets starting with `path_prefix` shares
/// (for `pool` and the scheme): [`write_primary`] without the end of its target.
pub fn write_path_prefix(
    out: &mut Vec<u8>,
    pool: &str,
    secure: bool,
    host: &[u8],
    path_prefix: &[u8],
) {
    out.extend_from_slice(pool.as_bytes());
    out.push(0);
    out.extend_from_slice(if secure { b"https" } else { b"http" });
    out.push(0);
    out.extend(host.iter().map(u8::to_ascii_lowercase));
    out.push(0);
    out.extend_from_slice(path_prefix);
}

/// The pool a key was written for: its first part.
pub fn pool_of(key: &[u8]) -> &[u8] {
    key.split(|&byte| byte == 0).next().unwrap_or_default()
}

/// A URL as an operator names one to purge: `http://host/target`, `https://host/target`, or
/// without a scheme (`host/target`, `//host/target`) for both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeUrl<'u> {
    /// `Some(true)` for https only, `Some(false)` for http only, `None` for both.
    pub secure: Option<bool>,
    /// As a request's Host field carries it (a port included when the clients send one).
    pub host: &'u str,
    /// As herdsman forwards it: the path and query.
    pub target: &'u str,
}

/// Why a URL, host or path cannot name cached responses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAKeyPart {
    #[error("has no host; write e.g. http://example.com/path")]
    NoHost,
    #[error("has no path; write e.g. http://example.com/path (the path starts with /)")]
    NoPath,
    #[error("has a scheme other than http or https")]
    Scheme,
    #[error("has a fragment (#...), which no request carries")]
    Fragment,
    #[error("holds a space, a control character or a byte above 127, which no request's host or target carries")]
    Byte,
}

impl<'u> PurgeUrl<'u> {
    pub fn parse(text: &'u str) -> Result<PurgeUrl<'u>, NotAKeyPart> {
        let (secure, rest) = if let Some(rest) = text.strip_prefix("http://") {
            (Some(false), rest)
        } else if let Some(rest) = text.strip_prefix("https://") {
            (Some(true), rest)
        } else if text.contains("://") {
            return Err(NotAKeyPart::Scheme);
        } else {
            (None, text.strip_prefix("//").unwrap_or(text))
        };
        let (host, target) = match rest.find(['/', '?']) {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        check_host(host)?;
        check_path(target)?;
        if target.contains('#') {
            return Err(NotAKeyPart::Fragment);
        }
        Ok(PurgeUrl {
            secure,
            host,
            target,
        })
    }

    /// The schemes it names, as `secure` flags.
    pub fn schemes(&self) -> &'static [bool] {
        match self.secure {
            Some(true) => &[true],
            Some(false) => &[false],
            None => &[false, true],
        }
    }
}

/// A host as a key holds one: not empty, no `/`, and only the visible ASCII a Host field may
/// carry.
pub fn check_host(host: &str) -> Result<(), NotAKeyPart> {
    if host.is_empty() {
        return Err(NotAKeyPart::NoHost);
    }
    if !host
        .bytes()
        .all(|byte| byte.is_ascii_graphic() && byte != b'/')
    {
        return Err(NotAKeyPart::Byte);
    }
    Ok(())
}

/// A target or the beginning of one as a key holds it: starting with `/`, visible ASCII.
pub fn check_path(path: &str) -> Result<(), NotAKeyPart> {
    if !path.starts_with('/') {
        return Err(NotAKeyPart::NoPath);
    }
    if !path.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(NotAKeyPart::Byte);
    }
    Ok(())
}

/// Appends one field's part of a key: its name (lower case) and the request's values of it,
/// each trimmed, joined by commas — `Accept-Encoding` normalised
/// ([`write_accepted_codings`]).
pub fn write_field(out: &mut Vec<u8>, name: &[u8], values: &[&[u8]]) {
    out.extend(name.iter().map(u8::to_ascii_lowercase));
    out.push(b'=');
    if name.eq_ignore_ascii_case(b"accept-encoding") {
        write_accepted_codings(out, values);
    } else {
        for (n, value) in values.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(value.trim_ascii());
        }
    }
    out.push(0);
}

/// Appends the variant part of a key: for each name of `vary` (lower case, comma-separated),
/// the request's values of that field, as `values` gives them.
pub fn write_variant<'v>(out: &mut Vec<u8>, vary: &[u8], values: impl Fn(&[u8]) -> Vec<&'v [u8]>) {
    out.extend_from_slice(b"vary\0");
    for name in vary.split(|&byte| byte == b',') {
        write_field(out, name, &values(name));
    }
}

/// The content codings a cache's variants are told apart by, in the order written.
const CODINGS: [&[u8]; 3] = [b"br", b"gzip", b"zstd"];

/// `Accept-Encoding` reduced to which of [`CODINGS`] it accepts (a q-value of 0 refuses one;
/// `*` accepts those not named), comma-separated in a fixed order: `gzip, deflate`,
/// `deflate, gzip;q=1.0` and `GZIP` are one variant.
pub fn write_accepted_codings(out: &mut Vec<u8>, values: &[&[u8]]) {
    // Per coding: None (not named), Some(accepted).
    let mut named = [None::<bool>; CODINGS.len()];
    let mut star = None::<bool>;
    for value in values {
        for element in value.split(|&byte| byte == b',') {
            let mut parts = element.split(|&byte| byte == b';');
            let coding = parts.next().unwrap_or_default().trim_ascii();
            let accepted = parts.all(|parameter| {
                let parameter = parameter.trim_ascii();
                let zero = parameter.len() >= 2
                    && parameter[..2].eq_ignore_ascii_case(b"q=")
                    && parameter[2..]
                        .iter()
                        .all(|&byte| byte == b'0' || byte == b'.');
                !zero
            });
            if coding == b"*" {
                star = Some(accepted);
            } else if let Some(at) = CODINGS
                .iter()
                .position(|known| coding.eq_ignore_ascii_case(known))
            {
                named[at] = Some(accepted);
            }
        }
    }
    let mut first = true;
    for (at, coding) in CODINGS.iter().enumerate() {
        if named[at].or(star).unwrap_or(false) {
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(coding);
            first = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_its_host_target_and_schemes() {
        let url = PurgeUrl::parse("https://Example.com:8443/a/b?c=1").unwrap();
        assert_eq!(
            (url.host, url.target, url.schemes()),
            ("Example.com:8443", "/a/b?c=1", &[true][..])
        );
        let url = PurgeUrl::parse("http://example.com/").unwrap();
        assert_eq!(url.schemes(), [false]);
        for both in ["example.com/a", "//example.com/a"] {
            let url = PurgeUrl::parse(both).unwrap();
            assert_eq!((url.host, url.target), ("example.com", "/a"));
            assert_eq!(url.schemes(), [false, true]);
        }
        assert_eq!(
            PurgeUrl::parse("http://example.com"),
            Err(NotAKeyPart::NoPath)
        );
        assert_eq!(PurgeUrl::parse("http:///a"), Err(NotAKeyPart::NoHost));
        assert_eq!(PurgeUrl::parse("/a"), Err(NotAKeyPart::NoHost));
        assert_eq!(PurgeUrl::parse("ftp://h/a"), Err(NotAKeyPart::Scheme));
        assert_eq!(PurgeUrl::parse("http://h/a#b"), Err(NotAKeyPart::Fragment));
        assert_eq!(PurgeUrl::parse("http://h/a b"), Err(NotAKeyPart::Byte));
        assert_eq!(PurgeUrl::parse("http://h\0/a"), Err(NotAKeyPart::Byte));
    }

    #[test]
    fn a_url_s_key_begins_every_key_of_it_and_no_other() {
        let mut url = Vec::new();
        write_primary(&mut url, "web", false, b"Example.com", b"/a");
        let mut variant = url.clone();
        write_field(&mut variant, b"x-tenant", &[b"t"]);
        write_variant(&mut variant, b"accept-encoding", |_| vec![&b"gzip"[..]]);
        assert!(variant.starts_with(&url));
        let mut longer = Vec::new();
        write_primary(&mut longer, "web", false, b"example.com", b"/ab");
        assert!(!longer.starts_with(&url), "/ab is another URL than /a");
        let mut prefix = Vec::new();
        write_path_prefix(&mut prefix, "web", false, b"example.com", b"/a");
        assert!(longer.starts_with(&prefix) && variant.starts_with(&prefix));
        assert_eq!(pool_of(&variant), b"web");
    }

    fn codings(values: &[&str]) -> String {
        let values: Vec<&[u8]> = values.iter().map(|value| value.as_bytes()).collect();
        let mut out = Vec::new();
        write_accepted_codings(&mut out, &values);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn accept_encoding_reduces_to_the_codings_that_matter() {
        assert_eq!(codings(&["gzip, deflate"]), "gzip");
        assert_eq!(codings(&["deflate, GZIP;q=1.0"]), "gzip");
        assert_eq!(codings(&["gzip, deflate, br, zstd"]), "br,gzip,zstd");
        assert_eq!(codings(&["br;q=0, gzip"]), "gzip");
        assert_eq!(codings(&["gzip;q=0.000"]), "");
        assert_eq!(codings(&["*"]), "br,gzip,zstd");
        assert_eq!(codings(&["*, br;q=0"]), "gzip,zstd");
        assert_eq!(codings(&["identity"]), "");
        assert_eq!(codings(&[]), "");
        assert_eq!(codings(&["gzip", "br"]), "br,gzip");
    }

    #[test]
    fn keys_differ_by_every_part_and_not_by_host_case() {
        let key = |pool: &str, secure, host: &[u8], target: &[u8]| {
            let mut out = Vec::new();
            write_primary(&mut out, pool, secure, host, target);
            out
        };
        let base = key("web", false, b"Example.COM", b"/a?b=1");
        assert_eq!(base, key("web", false, b"example.com", b"/a?b=1"));
        assert_ne!(base, key("api", false, b"example.com", b"/a?b=1"));
        assert_ne!(base, key("web", true, b"example.com", b"/a?b=1"));
        assert_ne!(base, key("web", false, b"example.org", b"/a?b=1"));
        assert_ne!(base, key("web", false, b"example.com", b"/a?b=2"));
    }

    #[test]
    fn a_variant_holds_the_request_s_values_of_the_vary_fields() {
        let variant = |encoding: &'static [u8], tenant: &'static [u8]| {
            let mut out = Vec::new();
            write_variant(
                &mut out,
                b"accept-encoding,x-tenant",
                |name: &[u8]| match name {
                    b"accept-encoding" => vec![encoding],
                    b"x-tenant" if !tenant.is_empty() => vec![tenant],
                    _ => vec![],
                },
            );
            out
        };
        assert_eq!(
            variant(b"gzip, deflate", b"a"),
            variant(b"deflate,gzip", b" a ")
        );
        assert_ne!(variant(b"gzip", b"a"), variant(b"gzip", b"b"));
        assert_ne!(variant(b"gzip", b"a"), variant(b"br", b"a"));
        assert_ne!(variant(b"gzip", b""), variant(b"gzip", b"a"));
        assert_eq!(
            variant(b"gzip", b"a"),
            b"vary\0accept-encoding=gzip\0x-tenant=a\0"
        );
    }
}

/// The key `key` would be for another target of the same origin (same pool, scheme, host and
/// keyed fields), as a response's `Location` or `Content-Location` names it (RFC 9111 §4.4): an
/// absolute path, or an absolute URI whose scheme and host are the key's. `None` for another
/// origin, or a reference relative to the request's own path.
pub fn with_target(key: &[u8], location: &[u8]) -> Option<Vec<u8>> {
    let mut parts = key.splitn(5, |&byte| byte == 0);
    let (pool, scheme, host, _target) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let rest = parts.next()?;
    let location = location.trim_ascii();
    let target = if location.starts_with(b"/") && !location.starts_with(b"//") {
        location
    } else {
        let after_scheme = location
            .get(scheme.len()..)
            .filter(|_| location[..scheme.len()].eq_ignore_ascii_case(scheme))?
            .strip_prefix(b"://")?;
        let path_at = after_scheme
            .iter()
            .position(|&byte| byte == b'/')
            .unwrap_or(after_scheme.len());
        if !after_scheme[..path_at].eq_ignore_ascii_case(host) {
            return None;
        }
        match &after_scheme[path_at..] {
            b"" => b"/",
            path => path,
        }
    };
    if target.contains(&0) || target.iter().any(u8::is_ascii_whitespace) {
        return None;
    }
    let mut other = Vec::with_capacity(key.len() + target.len());
    for part in [pool, scheme, host, target] {
        other.extend_from_slice(part);
        other.push(0);
    }
    other.extend_from_slice(rest);
    Some(other)
}

#[cfg(test)]
mod location_tests {
    use super::*;

    #[test]
    fn a_location_of_the_same_origin_names_another_key() {
        let mut key = Vec::new();
        write_primary(&mut key, "app", true, b"Example.com", b"/items");
        write_field(&mut key, b"x-tenant", &[b"a"]);
        let mut expected = Vec::new();
        write_primary(&mut expected, "app", true, b"example.com", b"/items/7?x");
        write_field(&mut expected, b"x-tenant", &[b"a"]);
        for same in [&b"/items/7?x"[..], b"https://EXAMPLE.com/items/7?x"] {
            assert_eq!(with_target(&key, same), Some(expected.clone()));
        }
        for other in [
            &b"http://example.com/items/7"[..],
            b"https://evil.example/items/7",
            b"//example.com/items/7",
            b"items/7",
        ] {
            assert_eq!(
                with_target(&key, other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }
}
