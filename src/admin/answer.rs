//! A response of the admin API before it is written: status, content type, extra header lines
//! and body; JSON by default, errors as `{"error": …}`. Every part of the admin listener that
//! answers (the routes, the guard, the pool routes) makes one.

use std::io::Write;

use serde::Serialize;
use serde_json::json;

use crate::http1::{error_response, Request};

/// A response before it is written: status, body and what kind of body it is.
#[derive(Debug)]
pub(super) struct Answer {
    status: u16,
    content_type: &'static str,
    /// Extra header lines, each ending in CRLF.
    extra_headers: &'static str,
    pub(super) body: Vec<u8>,
}

impl Answer {
    pub(super) fn text(status: u16, body: &str) -> Answer {
        Answer::typed(
            status,
            "text/plain; charset=utf-8",
            body.as_bytes().to_vec(),
        )
    }

    pub(super) fn typed(status: u16, content_type: &'static str, body: Vec<u8>) -> Answer {
        Answer {
            status,
            content_type,
            extra_headers: "",
            body,
        }
    }

    /// `value` as JSON, or a 500 in the unlikely case it cannot be serialised.
    pub(super) fn json(status: u16, value: &impl Serialize) -> Answer {
        match serde_json::to_vec(value) {
            Ok(mut body) => {
                body.push(b'\n');
                Answer {
                    status,
                    content_type: "application/json",
                    extra_headers: "",
                    body,
                }
            }
            Err(error) => {
                tracing::error!(%error, "admin API: cannot serialise a response");
                Answer::error(500, "cannot serialise the response; see herdsman's log")
            }
        }
    }

    /// `{"error": message}`.
    pub(super) fn error(status: u16, message: &str) -> Answer {
        Answer::json(status, &json!({ "error": message }))
    }

    /// The status it answers with.
    pub(super) fn status(&self) -> u16 {
        self.status
    }

    pub(super) fn with_headers(mut self, extra_headers: &'static str) -> Answer {
        self.extra_headers = extra_headers;
        self
    }

    pub(super) fn write(
        &self,
        out: &mut Vec<u8>,
        head_only: bool,
        keep_open: bool,
        request: &Request,
    ) {
        let status = self.status;
        let reason = reason(status);
        let connection = match (keep_open, request.minor_version) {
            (false, _) => "Connection: close\r\n",
            // An HTTP/1.0 client assumes close unless told otherwise.
            (true, 0) => "Connection: keep-alive\r\n",
            (true, _) => "",
        };
        let _ = write!(
            out,
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\n{}{connection}\r\n",
            self.content_type,
            self.body.len(),
            self.extra_headers,
        );
        if !head_only {
            out.extend_from_slice(&self.body);
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        other => error_response::reason(other),
    }
}
