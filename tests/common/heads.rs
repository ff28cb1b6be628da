//! Heads as a test reads them: a lenient parse of a request or response head, a whole response,
//! and the check that a herdsman error response has its fixed shape.

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body at all.
    None,
    Length(u64),
    Chunked,
    /// Response body runs until the connection closes.
    Close,
}

/// A request or response head as received: the raw bytes and a lenient parse of them.
#[derive(Debug, Clone)]
pub struct Head {
    /// The head exactly as received, including the final empty line.
    pub raw: Vec<u8>,
    pub first_line: String,
    /// Header fields in the order received; values with surrounding whitespace trimmed.
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn parse(raw: Vec<u8>) -> Head {
        let text = String::from_utf8_lossy(&raw).into_owned();
        let mut lines = text.split("\r\n");
        let first_line = lines.next().unwrap_or("").to_string();
        let headers = lines
            .filter(|line| !line.is_empty())
            .map(|line| match line.split_once(':') {
                Some((name, value)) => (name.to_string(), value.trim().to_string()),
                None => (line.to_string(), String::new()),
            })
            .collect();
        Head {
            raw,
            first_line,
            headers,
        }
    }

    /// The first value of a header field (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a header field, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    /// Whether a comma-separated header field lists `token` (case-insensitive), in any line.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.header_all(name)
            .iter()
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    fn part(&self, index: usize) -> &str {
        self.first_line.splitn(3, ' ').nth(index).unwrap_or("")
    }

    /// Request method.
    pub fn method(&self) -> &str {
        self.part(0)
    }

    /// Request target.
    pub fn target(&self) -> &str {
        self.part(1)
    }

    /// Response version ("HTTP/1.1").
    pub fn version(&self) -> &str {
        self.part(0)
    }

    /// Response status code (0 when unparsable).
    pub fn status(&self) -> u16 {
        self.part(1).parse().unwrap_or(0)
    }

    /// Response reason phrase.
    pub fn reason(&self) -> &str {
        self.part(2)
    }

    /// Body framing of a request (RFC 9112 §6.3, for well-formed requests).
    pub fn request_framing(&self) -> Framing {
        if self.has("transfer-encoding") {
            Framing::Chunked
        } else if let Some(len) = self.header("content-length") {
            Framing::Length(len.parse().expect("numeric content-length"))
        } else {
            Framing::None
        }
    }

    /// Body framing of a response to a request that was (or not) a HEAD.
    pub fn response_framing(&self, head_request: bool) -> Framing {
        let status = self.status();
        if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
            Framing::None
        } else if self.has("transfer-encoding") {
            if self.has_token("transfer-encoding", "chunked") {
                Framing::Chunked
            } else {
                Framing::Close
            }
        } else if let Some(len) = self.header("content-length") {
            Framing::Length(len.parse().expect("numeric content-length"))
        } else {
            Framing::Close
        }
    }
}

/// A complete response as read by a client.
#[derive(Debug, Clone)]
pub struct Response {
    pub head: Head,
    pub framing: Framing,
    pub body: Vec<u8>,
}

impl Response {
    pub fn status(&self) -> u16 {
        self.head.status()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Whether the response announces that the connection closes after it.
    pub fn says_close(&self) -> bool {
        self.head.has_token("connection", "close")
    }
}

/// Asserts a herdsman error response: the status, a short `text/plain` body starting with
/// `"<code> "`, and a Content-Length that matches the body.
pub fn assert_error_response(response: &Response, code: u16) {
    assert_eq!(
        response.status(),
        code,
        "expected a {code} response, got: {}",
        response.head.first_line
    );
    assert!(
        response
            .head
            .first_line
            .starts_with(&format!("HTTP/1.1 {code} ")),
        "status line: {:?}",
        response.head.first_line
    );
    let content_type = response.header("content-type").unwrap_or("");
    assert!(
        content_type.starts_with("text/plain"),
        "{code} response Content-Type is {content_type:?}, expected text/plain"
    );
    let length = response
        .header("content-length")
        .unwrap_or_else(|| panic!("{code} response has no Content-Length"));
    assert_eq!(length, response.body.len().to_string(), "Content-Length");
    assert!(
        response.body_text().starts_with(&format!("{code} ")),
        "{code} response body should start with \"{code} \", got {:?}",
        response.body_text()
    );
    assert!(
        response.body.len() < 1024,
        "error body should be short, got {} bytes",
        response.body.len()
    );
}
