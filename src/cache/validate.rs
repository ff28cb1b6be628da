//! Revalidation (RFC 9111 §4.3): the conditions that ask a server whether a stale object is
//! still current, and the object a 304 makes of it — its stored fields updated with the 304's
//! (§3.2, §4.3.4), its body kept.

use std::time::{Duration, UNIX_EPOCH};

use crate::http1::forward::is_hop_by_hop;
use crate::http1::Response;

use super::head::{is_named, remove_fields};
use super::object::Object;

/// The object can be revalidated: it has an `ETag` or a `Last-Modified`.
pub fn has_validators(object: &Object) -> bool {
    object.etag.is_some() || object.last_modified.is_some()
}

/// Rewrites the forwarded request head in `out` (ending with its blank line) to ask whether
/// `object` is still current: the client's own `If-None-Match` and `If-Modified-Since` out
/// (herdsman answers those itself, from what the server says), the object's validators in.
pub fn ask_if_changed(out: &mut Vec<u8>, object: &Object) {
    remove_fields(out, &["if-none-match", "if-modified-since"]);
    out.truncate(out.len().saturating_sub(2));
    if let Some(etag) = &object.etag {
        out.extend_from_slice(b"If-None-Match: ");
        out.extend_from_slice(etag);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(modified) = object.last_modified {
        let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(modified));
        out.extend_from_slice(b"If-Modified-Since: ");
        out.extend_from_slice(date.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Fields a 304 does not update in a stored head: those that frame or encode the stored body
/// (it is not the 304's), `Age` (a hit says its own), `Set-Cookie` (never stored).
const NOT_UPDATED: [&str; 6] = [
    "content-length",
    "transfer-encoding",
    "content-encoding",
    "content-range",
    "age",
    "set-cookie",
];

/// The stored head `stored` (a status line and field lines, without the blank line) updated
/// with the fields of `not_modified`: each field the 304 carries replaces the stored field of
/// that name, except those it may not update and its hop-by-hop fields.
pub fn updated_head(stored: &[u8], not_modified: &Response<'_, '_>) -> Vec<u8> {
    let updates = |name: &str| {
        !is_hop_by_hop(name, &not_modified.connection)
            && !NOT_UPDATED
                .iter()
                .any(|kept| name.eq_ignore_ascii_case(kept))
    };
    let mut head = Vec::with_capacity(stored.len() + not_modified.head_len);
    let mut lines = stored.split_inclusive(|&byte| byte == b'\n');
    head.extend_from_slice(lines.next().unwrap_or_default());
    for line in lines {
        let replaced = not_modified
            .headers
            .iter()
            .any(|field| updates(field.name) && is_named(line, &field.name.to_ascii_lowercase()));
        if !replaced {
            head.extend_from_slice(line);
        }
    }
    for field in not_modified.headers {
        if updates(field.name) {
            head.extend_from_slice(field.name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(field.value);
            head.extend_from_slice(b"\r\n");
        }
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::{header_slots, parse_response, Method};

    #[test]
    fn the_client_s_conditions_give_way_to_the_object_s_validators() {
        let mut object = Object::for_test(b"k", b"body".to_vec());
        object.etag = Some((*b"\"v1\"").into());
        object.last_modified = Some(784_111_777);
        let mut out = b"GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"mine\"\r\n\
            if-modified-since: Sun, 06 Nov 1994 08:49:37 GMT\r\nIf-None-Matcher: x\r\n\r\n"
            .to_vec();
        ask_if_changed(&mut out, &object);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET / HTTP/1.1\r\nHost: a\r\nIf-None-Matcher: x\r\nIf-None-Match: \"v1\"\r\n\
             If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n"
        );
    }

    #[test]
    fn a_304_updates_the_fields_it_carries_and_no_others() {
        let stored = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: max-age=1\r\n\
            ETag: \"v1\"\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Encoding: gzip\r\n";
        let not_modified = b"HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=60\r\n\
            Date: Mon, 07 Nov 1994 08:49:37 GMT\r\nContent-Encoding: br\r\nContent-Length: 0\r\n\
            Connection: keep-alive\r\nAge: 3\r\n\r\n";
        let mut slots = header_slots();
        let response = parse_response(not_modified, &mut slots, Method::Get, 8192)
            .unwrap()
            .unwrap();
        assert_eq!(
            String::from_utf8(updated_head(stored, &response)).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: \"v1\"\r\n\
             Content-Encoding: gzip\r\nCache-Control: max-age=60\r\n\
             Date: Mon, 07 Nov 1994 08:49:37 GMT\r\n"
        );
    }
}
