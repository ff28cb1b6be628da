//! Header rules on a head herdsman has written (`[headers]`, `[route.headers]`, and the field
//! of `[request_id]`): the fields a rule drops are taken out, those it sets or adds are written
//! at the end, their variables rendered straight into the head. One pass over a written head,
//! made only when rules apply: a config without them pays one test per side, not a test per
//! field. The same edit serves a request to a server of either protocol and an answer to a
//! client of either (both are HTTP/1.1 bytes at this point: `http2::` maps them), proxied or
//! from the cache.

use std::mem::MaybeUninit;

use super::template::Values;
use crate::config::headers::FieldRules;
use crate::http1::{HeadError, MAX_HEADERS};

/// A request's host, target and method, copied while its head is at hand for the rules that
/// render them once it is gone (its answer's, and its own, written after the head is consumed).
/// The vector keeps its room from one request to the next: an HTTP/1.1 connection allocates it
/// once, an HTTP/2 stream (a client of its own) once; only where a config's rules use them.
#[derive(Debug, Default)]
pub struct RequestText {
    bytes: Vec<u8>,
    host_end: usize,
    target_end: usize,
}

impl RequestText {
    /// Keeps `host`, `target` and `method` in place of what was kept.
    pub fn keep(&mut self, host: &[u8], target: &[u8], method: &[u8]) {
        self.bytes.clear();
        self.bytes.extend_from_slice(host);
        self.host_end = self.bytes.len();
        self.bytes.extend_from_slice(target);
        self.target_end = self.bytes.len();
        self.bytes.extend_from_slice(method);
    }

    /// Forgets what was kept (a request whose rules use none of it).
    pub fn forget(&mut self) {
        self.bytes.clear();
        (self.host_end, self.target_end) = (0, 0);
    }

    pub fn host(&self) -> &[u8] {
        &self.bytes[..self.host_end]
    }

    /// The target as received: its path and query.
    pub fn target(&self) -> &[u8] {
        &self.bytes[self.host_end..self.target_end]
    }

    pub fn method(&self) -> &[u8] {
        &self.bytes[self.target_end..]
    }
}

/// A field herdsman writes beside the rules, whose name it owns: a request's id.
#[derive(Clone, Copy)]
pub struct OwnField<'a> {
    pub name: &'a str,
    pub value: &'a [u8],
}

/// Edits the head written at `out[start..]` (all of `out` from there, its blank line last):
/// drops the fields `rules` drop and any named as `own`, then writes `rules`' fields, rendered
/// with `values`, and `own`. `TooLarge` when the head as edited has more than [`MAX_HEADERS`]
/// fields or more than `max_head` bytes: the next hop, with the same limits, would refuse it.
///
/// One scan for the line ends, a name compared only against a dropped one of its length, a kept
/// line moved only once one before it was dropped, and each written line's start made at load:
/// with issue 42's ten rules, 12,949 -> 12,020 instructions a request in all (callgrind,
/// `herdsman-bench instructions`' keep-alive-rules).
#[cold]
#[inline(never)]
pub fn edit_head(
    out: &mut Vec<u8>,
    start: usize,
    rules: Option<&FieldRules>,
    own: Option<OwnField<'_>>,
    values: &Values<'_>,
    max_head: usize,
) -> Result<(), HeadError> {
    // The start line stays; the blank line is written again at the end.
    let Some(start_line) = memchr::memchr(b'\n', &out[start..]) else {
        return Ok(());
    };
    let dropped = rules.map_or(&[][..], |rules| &rules.dropped[..]);
    let own_name = own.map_or(&b""[..], |own| own.name.as_bytes());
    let fields_end = out.len() - 2;
    let first = start + start_line + 1;
    // Each field line's end (after its LF), found in one pass; a head has at most MAX_HEADERS
    // field lines (the parse and the writers hold it to that), and one past them is refused.
    // Not zeroed first (100 instructions a head): only those written are read.
    let mut ends = [const { MaybeUninit::<u32>::uninit() }; MAX_HEADERS + 1];
    let mut lines = 0;
    for at in memchr::memchr_iter(b'\n', &out[first..fields_end]) {
        if lines == ends.len() {
            return Err(HeadError::TooLarge);
        }
        ends[lines].write((first + at + 1) as u32);
        lines += 1;
    }
    let mut read = first;
    let mut kept_to = first;
    let mut fields = 0;
    for line_end in &ends[..lines] {
        // SAFETY: the loop above wrote each of the first `lines`.
        let line_end = unsafe { line_end.assume_init() } as usize;
        let line = &out[read..line_end];
        let names = |name: &[u8]| {
            !name.is_empty()
                && line.get(name.len()) == Some(&b':')
                && line[..name.len()].eq_ignore_ascii_case(name)
        };
        let drop = dropped.iter().any(|name| names(name.as_bytes())) || names(own_name);
        if !drop {
            if kept_to != read {
                out.copy_within(read..line_end, kept_to);
            }
            kept_to += line_end - read;
            fields += 1;
        }
        read = line_end;
    }
    out.truncate(kept_to);
    for line in rules.map_or(&[][..], |rules| &rules.written) {
        let (line_start, whole) = line.start();
        out.extend_from_slice(line_start);
        if !whole {
            values.render(&line.value, out);
            out.extend_from_slice(b"\r\n");
        }
        fields += 1;
    }
    if let Some(own) = own {
        out.extend_from_slice(own.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(own.value);
        out.extend_from_slice(b"\r\n");
        fields += 1;
    }
    out.extend_from_slice(b"\r\n");
    match fields <= MAX_HEADERS && out.len() - start <= max_head {
        true => Ok(()),
        false => Err(HeadError::TooLarge),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::headers::{field_may_name, FieldLine};
    use crate::config::template::Template;

    fn rules(dropped: &[&str], written: &[(&str, &str)]) -> FieldRules {
        FieldRules {
            dropped: dropped.iter().map(|name| Box::from(*name)).collect(),
            written: written
                .iter()
                .map(|(name, value)| {
                    let value = Template::parse(value, |variable| field_may_name(variable, true));
                    FieldLine::new(name, value.unwrap())
                })
                .collect(),
            reads_request_head: false,
        }
    }

    fn values() -> Values<'static> {
        Values {
            client: b"192.0.2.7",
            client_port: 40312,
            request_id: b"",
            host: b"shop.example",
            target: b"/cart?x=1",
            path: b"/cart",
            query: b"x=1",
            path_rest: b"",
            method: b"GET",
            secure: false,
            route: Some(3),
            server: b"",
            tls_version: "",
            tls_cipher: "",
            sni: "",
        }
    }

    fn edited(head: &str, rules: &FieldRules, own: Option<OwnField<'_>>) -> String {
        let mut out = b"leading bytes".to_vec();
        out.extend_from_slice(head.as_bytes());
        edit_head(&mut out, 13, Some(rules), own, &values(), 8192).unwrap();
        String::from_utf8(out[13..].to_vec()).unwrap()
    }

    #[test]
    fn dropped_fields_go_and_written_ones_come_last_with_their_variables() {
        let rules = rules(
            &["server", "x-powered-by", "x-client"],
            &[
                ("X-Client", "{client}:{client_port}"),
                (
                    "X-Seen",
                    "{method} {scheme}://{host}{target} {route} [{server}] {{}}",
                ),
            ],
        );
        // Server-Timing starts with a dropped name but is another field.
        let head = "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 2\r\nx-powered-by: php\r\nServer-Timing: db;dur=5\r\nX-Client: forged\r\n\r\n";
        assert_eq!(
            edited(head, &rules, None),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer-Timing: db;dur=5\r\nX-Client: 192.0.2.7:40312\r\n\
             X-Seen: GET http://shop.example/cart?x=1 route[3] [] {}\r\n\r\n"
        );
    }

    #[test]
    fn the_own_field_replaces_any_of_its_name() {
        let own = OwnField {
            name: "X-Request-Id",
            value: b"0123",
        };
        let head = "GET / HTTP/1.1\r\nHost: a\r\nx-request-id: forged\r\nAccept: */*\r\n\r\n";
        assert_eq!(
            edited(head, &rules(&[], &[]), Some(own)),
            "GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\nX-Request-Id: 0123\r\n\r\n"
        );
    }

    #[test]
    fn a_head_edited_past_the_limits_is_too_large() {
        let lines: String = (0..MAX_HEADERS).map(|n| format!("X-{n}: v\r\n")).collect();
        let head = format!("HTTP/1.1 200 OK\r\n{lines}\r\n");
        let mut out = head.clone().into_bytes();
        let one_more = rules(&[], &[("X-More", "1")]);
        let edit = edit_head(&mut out, 0, Some(&one_more), None, &values(), 65536);
        assert_eq!(edit, Err(HeadError::TooLarge));
        let mut out = head.into_bytes();
        let swapped = rules(&["x-0"], &[("X-More", "1")]);
        assert_eq!(
            edit_head(&mut out, 0, Some(&swapped), None, &values(), 65536),
            Ok(())
        );
    }
}
