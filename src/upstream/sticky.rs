//! Signed sticky-session cookies and `X-Herdsman-Test` tokens: a pool's [`StickyKey`], the cookie
//! value that names a server, reading a cookie out of a request's `Cookie` header, and writing the
//! `Set-Cookie` line.
//!
//! A cookie names its server by the server's stable name (never its position, which changes when
//! the pool does) and carries an HMAC-SHA256 of that name, so a client can neither forge a cookie
//! for another server nor keep one across a key change. Each signed message starts with its
//! purpose (`cookie\0`, `test\0`), so a cookie's signature is never a valid test token and the
//! reverse. Names hold no NUL byte (config allows `[A-Za-z0-9_.-]`), so `\0` separates parts
//! unambiguously.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// Longest server name a cookie may carry, in bytes (config refuses longer names).
pub const MAX_NAME_LEN: usize = 255;

/// Bytes in an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;

/// What a cookie's signature covers before the server name: keeps it apart from test tokens.
const COOKIE_PURPOSE: &[u8] = b"cookie\0";
/// What a test token's signature covers before the pool and server names.
const TEST_PURPOSE: &[u8] = b"test\0";

/// A pool's signing key for sticky cookies and test tokens.
///
/// Holds the HMAC already keyed (the key's inner and outer pads hashed once), so each signature
/// costs only the message's own hashing. `Debug` shows no key material.
#[derive(Clone)]
pub struct StickyKey {
    keyed: HmacSha256,
}

impl StickyKey {
    /// The key for a secret read from the environment variable `key_env` names: SHA-256 of its
    /// text, so a secret of any length gives a full 32-byte key. Refusing an empty secret is the
    /// caller's job.
    pub fn from_secret(secret: &str) -> StickyKey {
        StickyKey::from_bytes(&Sha256::digest(secret.as_bytes()).into())
    }

    /// A key of 32 random bytes from /dev/urandom, for a pool without `key_env` (or whose variable
    /// is not set). Cookies signed with it are refused after a restart.
    pub fn generate() -> io::Result<StickyKey> {
        let mut bytes = [0u8; 32];
        File::open("/dev/urandom")
            .and_then(|mut urandom| urandom.read_exact(&mut bytes))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "reading 32 random bytes from /dev/urandom for a sticky-cookie key: {e}"
                    ),
                )
            })?;
        Ok(StickyKey::from_bytes(&bytes))
    }

    fn from_bytes(bytes: &[u8; 32]) -> StickyKey {
        StickyKey {
            keyed: HmacSha256::new_from_slice(bytes).expect("HMAC takes a key of any length"),
        }
    }

    /// The signature of the message made of `parts`, one after another.
    fn sign(&self, parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        for part in parts {
            mac.update(part);
        }
        mac
    }

    /// The cookie value naming `server`: `base64url(name) "." base64url(HMAC(key, "cookie\0" name))`,
    /// unpadded, so it is a valid cookie value whatever the name holds. At most 384 bytes for a
    /// name of [`MAX_NAME_LEN`] bytes.
    pub fn cookie_value(&self, server: &str) -> String {
        let tag = self
            .sign(&[COOKIE_PURPOSE, server.as_bytes()])
            .finalize()
            .into_bytes();
        let mut value = String::with_capacity((server.len() + TAG_LEN) * 4 / 3 + 3);
        push_base64url(&mut value, server.as_bytes());
        value.push('.');
        push_base64url(&mut value, &tag);
        value
    }

    /// The server name a cookie value names, if its signature is valid under this key; `None`
    /// for a malformed, forged or tampered value, or one signed with another key. The name is
    /// decoded into `name_out` and returned borrowed from it, so that checking allocates nothing.
    pub fn verify_cookie_into<'n>(
        &self,
        value: &[u8],
        name_out: &'n mut [u8; MAX_NAME_LEN],
    ) -> Option<&'n str> {
        let dot = value.iter().position(|&b| b == b'.')?;
        let name_len = decode_base64url(&value[..dot], name_out)?;
        let mut tag = [0u8; TAG_LEN];
        if name_len == 0 || decode_base64url(&value[dot + 1..], &mut tag)? != TAG_LEN {
            return None;
        }
        let name = &name_out[..name_len];
        // verify_slice compares in constant time.
        self.sign(&[COOKIE_PURPOSE, name]).verify_slice(&tag).ok()?;
        std::str::from_utf8(name).ok()
    }

    /// The `X-Herdsman-Test` token that lets a request reach `server` of `pool` while the server
    /// is in the `test` state: `base64url(HMAC(key, "test\0" pool "\0" server))`, 43 bytes.
    pub fn test_token(&self, pool: &str, server: &str) -> String {
        let tag = self
            .sign(&[TEST_PURPOSE, pool.as_bytes(), b"\0", server.as_bytes()])
            .finalize()
            .into_bytes();
        let mut token = String::with_capacity(44);
        push_base64url(&mut token, &tag);
        token
    }

    /// Whether `presented` (a header value; surrounding blanks ignored) is the test token for
    /// `server` of `pool`. Compares in constant time.
    pub fn verify_test_token(&self, pool: &str, server: &str, presented: &[u8]) -> bool {
        let mut tag = [0u8; TAG_LEN];
        decode_base64url(presented.trim_ascii(), &mut tag) == Some(TAG_LEN)
            && self
                .sign(&[TEST_PURPOSE, pool.as_bytes(), b"\0", server.as_bytes()])
                .verify_slice(&tag)
                .is_ok()
    }
}

impl fmt::Debug for StickyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StickyKey").finish_non_exhaustive()
    }
}

/// Appends the `Set-Cookie` line, CRLF included, that gives the client cookie `name` = `value`:
/// `Set-Cookie: NAME=VALUE; Path=/; HttpOnly; SameSite=Lax`, then `; Secure` when `secure` and
/// `; Max-Age=N` when `max_age` (seconds) is given. Without `Max-Age` the cookie lasts until the
/// browser closes.
pub fn write_set_cookie(
    out: &mut Vec<u8>,
    name: &str,
    value: &str,
    secure: bool,
    max_age: Option<u64>,
) {
    out.extend_from_slice(b"Set-Cookie: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'=');
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"; Path=/; HttpOnly; SameSite=Lax");
    if secure {
        out.extend_from_slice(b"; Secure");
    }
    if let Some(seconds) = max_age {
        // Writing to a Vec cannot fail.
        let _ = write!(out, "; Max-Age={seconds}");
    }
    out.extend_from_slice(b"\r\n");
}

/// The base64url alphabet (RFC 4648 §5).
const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Appends `bytes` in base64url without padding.
fn push_base64url(out: &mut String, bytes: &[u8]) {
    let symbol = |bits: u32| char::from(BASE64URL[(bits & 63) as usize]);
    for chunk in bytes.chunks(3) {
        let group = chunk
            .iter()
            .enumerate()
            .fold(0u32, |group, (i, &b)| group | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(symbol(group >> (18 - 6 * i)));
        }
    }
}

/// Decodes unpadded base64url `text` into the front of `out`: the number of bytes written, or
/// `None` if `text` is not canonical base64url (a foreign symbol, padding, an impossible length,
/// or unused low bits set — so each byte string has exactly one accepted encoding) or does not
/// fit in `out`.
fn decode_base64url(text: &[u8], out: &mut [u8]) -> Option<usize> {
    let symbol_value = |symbol: u8| -> Option<u32> {
        Some(u32::from(match symbol {
            b'A'..=b'Z' => symbol - b'A',
            b'a'..=b'z' => symbol - b'a' + 26,
            b'0'..=b'9' => symbol - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        }))
    };
    // Each 4 symbols carry 3 bytes; a last group of 2 or 3 symbols carries 1 or 2.
    let decoded_len = text.len() / 4 * 3 + (text.len() % 4).saturating_sub(1);
    if text.len() % 4 == 1 || decoded_len > out.len() {
        return None;
    }
    let mut written = 0;
    for chunk in text.chunks(4) {
        let mut group = 0u32;
        for (i, &symbol) in chunk.iter().enumerate() {
            group |= symbol_value(symbol)? << (18 - 6 * i);
        }
        let bytes = chunk.len() - 1;
        // A short last chunk's unused bits must be zero.
        if group & (0xff_ffff >> (8 * bytes)) != 0 {
            return None;
        }
        for i in 0..bytes {
            out[written] = (group >> (16 - 8 * i)) as u8;
            written += 1;
        }
    }
    Some(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::head::find_cookie;

    impl StickyKey {
        /// `verify_cookie_into` with an owned result, for assertions.
        fn verify_cookie(&self, value: &str) -> Option<String> {
            let mut name = [0u8; MAX_NAME_LEN];
            self.verify_cookie_into(value.as_bytes(), &mut name)
                .map(str::to_owned)
        }
    }

    fn key() -> StickyKey {
        StickyKey::from_secret("correct horse battery staple")
    }

    #[test]
    fn a_cookie_names_the_server_it_was_made_for() {
        let key = key();
        for name in ["a", "app-1", "db.eu-west_2", &"x".repeat(MAX_NAME_LEN)] {
            let value = key.cookie_value(name);
            assert_eq!(key.verify_cookie(&value).as_deref(), Some(name));
            let mut buffer = [0u8; MAX_NAME_LEN];
            assert_eq!(
                key.verify_cookie_into(value.as_bytes(), &mut buffer),
                Some(name)
            );
        }
    }

    #[test]
    fn a_cookie_value_is_made_of_cookie_octets() {
        let value = key().cookie_value("app-1");
        assert_eq!(value.split_once('.').unwrap().1.len(), 43);
        assert!(value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')));
    }

    #[test]
    fn a_forged_or_damaged_cookie_names_no_server() {
        let key = key();
        let value = key.cookie_value("app-1");
        let (name, tag) = value.split_once('.').unwrap();
        let other_tag = key
            .cookie_value("app-2")
            .split_once('.')
            .unwrap()
            .1
            .to_owned();

        let mut flipped = tag.as_bytes().to_vec();
        flipped[5] = if flipped[5] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        let app2_name = value.replacen(name, "YXBwLTI", 1); // base64url("app-2")

        let refused = [
            format!("{name}.{flipped}"),         // signature tampered
            app2_name,                           // name swapped, signature kept
            format!("{name}.{other_tag}"),       // another server's signature
            value[..value.len() - 1].to_owned(), // truncated
            format!("{value}A"),                 // extended
            name.to_owned(),                     // no signature
            format!("{name}."),
            format!(".{tag}"),
            String::new(),
            ".".to_owned(),
            "not base64!.%%%".to_owned(),
            format!("{name}={tag}"),
            format!("{name}.{tag}=="), // padded
            StickyKey::from_secret("another secret").cookie_value("app-1"),
            StickyKey::generate().unwrap().cookie_value("app-1"),
        ];
        for value in refused {
            assert_eq!(key.verify_cookie(&value), None, "{value:?}");
        }
    }

    #[test]
    fn cookies_and_test_tokens_are_not_interchangeable() {
        let key = key();
        let token = key.test_token("app", "a");
        assert_eq!(token.len(), 43);
        assert!(key.verify_test_token("app", "a", token.as_bytes()));
        assert!(key.verify_test_token("app", "a", format!(" {token} ").as_bytes()));

        assert_eq!(key.verify_cookie(&token), None);
        let cookie = key.cookie_value("a");
        assert!(!key.verify_test_token("app", "a", cookie.as_bytes()));
        let cookie_tag = cookie.split_once('.').unwrap().1;
        assert!(!key.verify_test_token("app", "a", cookie_tag.as_bytes()));
    }

    #[test]
    fn a_test_token_opens_only_its_own_server() {
        let key = key();
        let token = key.test_token("app", "a");
        assert!(!key.verify_test_token("app", "b", token.as_bytes()));
        assert!(!key.verify_test_token("api", "a", token.as_bytes()));
        assert!(!key.verify_test_token("app", "a", &token.as_bytes()[1..]));
        assert!(!key.verify_test_token("app", "a", b""));
        let foreign = StickyKey::from_secret("another secret").test_token("app", "a");
        assert!(!key.verify_test_token("app", "a", foreign.as_bytes()));
    }

    #[test]
    fn a_secret_always_gives_the_same_key() {
        assert_eq!(key().cookie_value("a"), key().cookie_value("a"));
        assert_eq!(key().test_token("p", "a"), key().test_token("p", "a"));
        let other = StickyKey::from_secret("correct horse battery staplf");
        assert_ne!(key().cookie_value("a"), other.cookie_value("a"));
        let generated = [
            StickyKey::generate().unwrap(),
            StickyKey::generate().unwrap(),
        ];
        assert_ne!(
            generated[0].cookie_value("a"),
            generated[1].cookie_value("a")
        );
    }

    #[test]
    fn debug_shows_no_key_material() {
        assert_eq!(format!("{:?}", key()), "StickyKey { .. }");
        assert_eq!(format!("{:#?}", key()), "StickyKey { .. }");
    }

    #[test]
    fn find_cookie_reads_realistic_headers() {
        let cases: [(&[u8], Option<&[u8]>); 11] = [
            (b"a=1; HERDSMAN=xyz; b=2", Some(b"xyz")),
            (b"HERDSMAN=xyz", Some(b"xyz")),
            (b"a=1;HERDSMAN=xyz;b=2", Some(b"xyz")),
            (b"a=1;  HERDSMAN = xyz ;b=2", Some(b"xyz")),
            (b"a=1; HERDSMAN=\"xyz\"; b=2", Some(b"xyz")),
            (b"XHERDSMAN=1; HERDSMAN=2", Some(b"2")),
            (b"HERDSMANX=1; HERDSMAN=2", Some(b"2")),
            (b"HERDSMAN=first; HERDSMAN=second", Some(b"first")),
            (b"HERDSMAN=; a=1", Some(b"")),
            (b"a=1; herdsman=lowercase; b=HERDSMAN", None),
            (b"", None),
        ];
        for (header, expected) in cases {
            assert_eq!(
                find_cookie(header, "HERDSMAN"),
                expected,
                "{:?}",
                String::from_utf8_lossy(header)
            );
        }
        let value = key().cookie_value("app-1");
        let header = format!("_ga=GA1.2.3; HERDSMAN={value}; theme=dark");
        let found = find_cookie(header.as_bytes(), "HERDSMAN").unwrap();
        assert_eq!(
            key()
                .verify_cookie(std::str::from_utf8(found).unwrap())
                .as_deref(),
            Some("app-1")
        );
    }

    #[test]
    fn set_cookie_lines_are_exact() {
        let line = |secure, max_age| {
            let mut out = b"HTTP/1.1 200 OK\r\n".to_vec();
            write_set_cookie(&mut out, "HERDSMAN", "YQ.sig", secure, max_age);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            line(false, None),
            "HTTP/1.1 200 OK\r\nSet-Cookie: HERDSMAN=YQ.sig; Path=/; HttpOnly; SameSite=Lax\r\n"
        );
        assert_eq!(
            line(true, None),
            "HTTP/1.1 200 OK\r\nSet-Cookie: HERDSMAN=YQ.sig; Path=/; HttpOnly; SameSite=Lax; Secure\r\n"
        );
        assert_eq!(
            line(false, Some(3600)),
            "HTTP/1.1 200 OK\r\nSet-Cookie: HERDSMAN=YQ.sig; Path=/; HttpOnly; SameSite=Lax; Max-Age=3600\r\n"
        );
        assert_eq!(
            line(true, Some(0)),
            "HTTP/1.1 200 OK\r\nSet-Cookie: HERDSMAN=YQ.sig; Path=/; HttpOnly; SameSite=Lax; Secure; Max-Age=0\r\n"
        );
    }

    #[test]
    fn base64url_round_trips_and_refuses_non_canonical_text() {
        let mut out = [0u8; 8];
        for bytes in [
            &b""[..],
            b"f",
            b"fo",
            b"foo",
            b"foob",
            b"fooba",
            b"foobar",
            &[0xfb, 0xff],
        ] {
            let mut text = String::new();
            push_base64url(&mut text, bytes);
            assert_eq!(
                decode_base64url(text.as_bytes(), &mut out),
                Some(bytes.len())
            );
            assert_eq!(&out[..bytes.len()], bytes);
        }
        let mut text = String::new();
        push_base64url(&mut text, &[0xfb, 0xff]);
        assert_eq!(text, "-_8");
        assert_eq!(decode_base64url(b"Zm9vYg", &mut out), Some(4));
        assert_eq!(decode_base64url(b"Zm9vYh", &mut out), None); // unused bits set
        assert_eq!(decode_base64url(b"Zm9vY", &mut out), None); // impossible length
        assert_eq!(decode_base64url(b"Zm9v+g", &mut out), None); // standard alphabet
        assert_eq!(decode_base64url(b"Zm9vYmFyYmF6", &mut out), None); // 9 bytes into 8
    }
}
