//! What an access log line shows of a request head, copied while the head is at hand: it is
//! consumed from the connection's read buffer before the response comes back.

use crate::http1::Request;

/// The parts kept, in the order they sit in `CapturedRequest::text`.
const METHOD: usize = 0;
const TARGET: usize = 1;
const HOST: usize = 2;
const REFERER: usize = 3;
const USER_AGENT: usize = 4;
const PARTS: usize = 5;

/// A request's method, target, version, Host, Referer and User-Agent, copied into one vector
/// that is reused from request to request (the connection lends its memory back to the worker's
/// free list between requests, see `proxy::Client`).
#[derive(Debug, Default)]
pub struct CapturedRequest {
    /// The parts, one after another.
    text: Vec<u8>,
    /// Where each part ends in `text`; a part starts where the one before it ends. A head is at
    /// most `max_header_bytes` (1 MiB), so an offset fits.
    ends: [u32; PARTS],
    /// Which parts the head had: a missing field is logged as `-` (or null).
    present: [bool; PARTS],
    minor_version: u8,
    /// The HTTP/2 stream the request came on; 0 for HTTP/1.
    stream: u32,
    /// A head was captured for the current request (not for one that did not parse).
    captured: bool,
}

impl CapturedRequest {
    /// A new request begins: nothing is known of it until [`CapturedRequest::capture`].
    pub fn forget(&mut self) {
        self.captured = false;
    }

    /// Copies what the log shows of `request`, into `storage()` when this has no memory (the
    /// first request, or the first after an idle spell gave it back).
    pub fn capture(&mut self, request: &Request<'_, '_>, storage: impl FnOnce() -> Vec<u8>) {
        if self.text.capacity() == 0 {
            self.text = storage();
        }
        self.text.clear();
        let (mut referer, mut user_agent) = (None, None);
        for header in request.headers {
            // The first of each, as nginx's $http_referer and $http_user_agent.
            if referer.is_none() && header.name.eq_ignore_ascii_case("referer") {
                referer = Some(header.value);
            } else if user_agent.is_none() && header.name.eq_ignore_ascii_case("user-agent") {
                user_agent = Some(header.value);
            }
        }
        let parts = [
            Some(request.method_text.as_bytes()),
            Some(request.target.as_bytes()),
            request.host,
            referer,
            user_agent,
        ];
        for (index, part) in parts.into_iter().enumerate() {
            self.present[index] = part.is_some();
            self.text.extend_from_slice(part.unwrap_or_default());
            self.ends[index] = u32::try_from(self.text.len()).unwrap_or(u32::MAX);
        }
        self.minor_version = request.minor_version;
        self.stream = 0;
        self.captured = true;
    }

    /// The request came on HTTP/2 stream `stream` (its head in HTTP/1.1 form was captured).
    pub fn came_on_stream(&mut self, stream: u32) {
        self.stream = stream;
    }

    /// The HTTP/2 stream the request came on, if it did.
    pub fn stream(&self) -> Option<u32> {
        (self.captured && self.stream != 0).then_some(self.stream)
    }

    /// Whether the current request's head was captured.
    pub fn is_captured(&self) -> bool {
        self.captured
    }

    /// Gives up the vector's memory (to return it to a free list while the connection is idle);
    /// what was captured is forgotten.
    pub fn take_storage(&mut self) -> Vec<u8> {
        self.captured = false;
        std::mem::take(&mut self.text)
    }

    fn part(&self, index: usize) -> Option<&[u8]> {
        if !self.captured || !self.present[index] {
            return None;
        }
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        self.text.get(start as usize..self.ends[index] as usize)
    }

    pub fn method(&self) -> Option<&[u8]> {
        self.part(METHOD)
    }

    pub fn target(&self) -> Option<&[u8]> {
        self.part(TARGET)
    }

    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2.0`.
    pub fn version(&self) -> Option<&'static str> {
        let version = if self.stream != 0 {
            "HTTP/2.0"
        } else if self.minor_version == 0 {
            "HTTP/1.0"
        } else {
            "HTTP/1.1"
        };
        self.captured.then_some(version)
    }

    pub fn host(&self) -> Option<&[u8]> {
        self.part(HOST)
    }

    pub fn referer(&self) -> Option<&[u8]> {
        self.part(REFERER)
    }

    pub fn user_agent(&self) -> Option<&[u8]> {
        self.part(USER_AGENT)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::http1::{header_slots, parse_request};

    /// `head` parsed and captured.
    pub(in crate::access_log) fn captured(head: &[u8]) -> CapturedRequest {
        let mut slots = header_slots();
        let request = parse_request(head, &mut slots, 65536)
            .expect("a valid head")
            .expect("a whole head");
        let mut captured = CapturedRequest::default();
        captured.capture(&request, || Vec::with_capacity(64));
        captured
    }

    #[test]
    fn the_logged_parts_are_copied_and_missing_fields_are_none() {
        let request = captured(
            b"POST /form?a=1 HTTP/1.0\r\nHost: shop.example\r\nuser-agent: curl/8\r\n\
              User-Agent: second\r\nContent-Length: 0\r\n\r\n",
        );
        assert_eq!(request.method(), Some(&b"POST"[..]));
        assert_eq!(request.target(), Some(&b"/form?a=1"[..]));
        assert_eq!(request.version(), Some("HTTP/1.0"));
        assert_eq!(request.host(), Some(&b"shop.example"[..]));
        assert_eq!(request.referer(), None);
        assert_eq!(request.user_agent(), Some(&b"curl/8"[..]));
    }

    #[test]
    fn a_forgotten_or_given_back_capture_shows_nothing() {
        let mut request = captured(b"GET / HTTP/1.1\r\nHost: a\r\nReferer: \r\n\r\n");
        assert_eq!(request.referer(), Some(&b""[..]));
        request.forget();
        assert_eq!((request.method(), request.version()), (None, None));
        let mut request = captured(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(request.take_storage().capacity() > 0);
        assert!(!request.is_captured());
        assert_eq!(request.host(), None);
    }
}
