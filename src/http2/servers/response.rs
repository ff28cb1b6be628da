//! An HTTP/2 server's response head, decoded field by field straight into the HTTP/1.1 head the
//! exchange reads, with the framing its body will come in: its `content-length` when it has one,
//! the chunked coding when its length is unknown (so that trailers, gRPC's status among them,
//! have a place: the trailer section), none when the HEADERS frame ended the stream (a
//! `content-length: 0` added where a body could have been, as in gRPC's trailers-only
//! responses). A field HTTP/1.1 could not carry, or RFC 9113 §8.3.2 forbids, makes the response
//! malformed (a stream error): nothing the server sends can end up as a line of its own.

use crate::http1::MAX_HEADERS;
use crate::http2::request_head::{check_field, parse_length};

/// How the response's body follows its head in the HTTP/1.1 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body bytes follow.
    None,
    /// The DATA frames' bytes as they come, their length given by `content-length`.
    Length,
    /// The DATA frames' bytes in the chunked coding; the trailers as its trailer section.
    Chunked,
}

/// Why a response's head or trailers are malformed (RFC 9113 §8.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("no :status, or one that is not three digits")]
    Status,
    #[error("a pseudo-field other than one :status before the fields")]
    Pseudo,
    #[error("a field HTTP/2 forbids or HTTP/1.1 cannot carry")]
    Field,
    #[error("content-length is not one number")]
    Length,
    #[error("more fields than an HTTP/1.1 head may have here (128, as from an HTTP/1.1 server)")]
    TooManyFields,
}

/// A response head being written into `out` as its fields are decoded.
#[derive(Debug)]
pub struct HeadWriter<'a> {
    out: &'a mut Vec<u8>,
    /// Where the head starts in `out` (an interim head is taken back out).
    start: usize,
    status: Option<u16>,
    length: Option<u64>,
    /// Fields written (the status line aside).
    fields: usize,
}

impl<'a> HeadWriter<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> HeadWriter<'a> {
        let start = out.len();
        HeadWriter {
            out,
            start,
            status: None,
            length: None,
            fields: 0,
        }
    }

    /// One field, in the block's order.
    pub fn field(&mut self, name: &[u8], value: &[u8]) -> Result<(), Malformed> {
        if let Some(pseudo) = name.strip_prefix(b":") {
            if pseudo != b"status" || self.status.is_some() {
                return Err(Malformed::Pseudo);
            }
            let status = match value {
                [a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9'] => {
                    u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
                }
                _ => return Err(Malformed::Status),
            };
            self.status = Some(status);
            self.out.extend_from_slice(b"HTTP/1.1 ");
            self.out.extend_from_slice(value);
            self.out.push(b' ');
            let reason = http::StatusCode::from_u16(status)
                .ok()
                .and_then(|status| status.canonical_reason());
            self.out.extend_from_slice(reason.unwrap_or("").as_bytes());
            self.out.extend_from_slice(b"\r\n");
            return Ok(());
        }
        if self.status.is_none() {
            return Err(Malformed::Status);
        }
        check_value(name, value)?;
        // One place is kept for the framing field `finish` may add: the exchange reads the head
        // with the limits it reads an HTTP/1.1 server's by.
        if self.fields + 1 >= MAX_HEADERS {
            return Err(Malformed::TooManyFields);
        }
        self.fields += 1;
        if name == b"content-length" {
            let length = parse_length(value).ok_or(Malformed::Length)?;
            if self.length.is_some_and(|seen| seen != length) {
                return Err(Malformed::Length);
            }
            self.length = Some(length);
        }
        put_line(self.out, name, value);
        Ok(())
    }

    /// The head is whole: its status (an interim 1xx head is taken back out of `out`, for the
    /// final one after it), its framing, and the body's length when it has one. `ended`: the
    /// HEADERS frame ended the stream; `bodiless`: the request was a HEAD, whose response has no
    /// body whatever its fields say.
    pub fn finish(self, ended: bool, bodiless: bool) -> Result<Head, Malformed> {
        let status = self.status.ok_or(Malformed::Status)?;
        if (100..200).contains(&status) {
            self.out.truncate(self.start);
            // An interim response ending the stream is malformed (§8.1).
            return if ended {
                Err(Malformed::Status)
            } else {
                Ok(Head {
                    status,
                    framing: ResponseFraming::None,
                    length: None,
                })
            };
        }
        let may_have_body = !bodiless && status != 204 && status != 304;
        let framing = match (may_have_body, ended, self.length.is_some()) {
            (false, _, _) => ResponseFraming::None,
            (true, true, true) => ResponseFraming::None,
            (true, true, false) => {
                self.out.extend_from_slice(b"content-length: 0\r\n");
                ResponseFraming::None
            }
            (true, false, true) => ResponseFraming::Length,
            (true, false, false) => {
                self.out
                    .extend_from_slice(b"transfer-encoding: chunked\r\n");
                ResponseFraming::Chunked
            }
        };
        self.out.extend_from_slice(b"\r\n");
        let length = (framing == ResponseFraming::Length)
            .then_some(self.length)
            .flatten();
        Ok(Head {
            status,
            framing,
            length,
        })
    }
}

/// What a whole response head said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub framing: ResponseFraming,
    /// The body's length, with `ResponseFraming::Length`.
    pub length: Option<u64>,
}

impl Head {
    /// An interim (1xx) head: the final one is still to come.
    pub fn is_interim(&self) -> bool {
        self.status < 200
    }
}

/// One trailer field written as a line of the chunked coding's trailer section (the caller
/// writes the last chunk before and the blank line after); pseudo-fields are malformed here.
pub fn trailer_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> Result<(), Malformed> {
    if name.starts_with(b":") {
        return Err(Malformed::Pseudo);
    }
    check_value(name, value)?;
    put_line(out, name, value);
    Ok(())
}

/// RFC 9113 §8.2's rules for a field, and HTTP/1.1's stricter ones for its value (RFC 9110
/// §5.5: visible characters, spaces, tabs and obs-text — HTTP/2 lets other control characters
/// through, which no HTTP/1.1 parser would take; found by the fuzz target h2_server_frames).
fn check_value(name: &[u8], value: &[u8]) -> Result<(), Malformed> {
    check_field(name, value).map_err(|_| Malformed::Field)?;
    if !value
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
    {
        return Err(Malformed::Field);
    }
    Ok(())
}

fn put_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(
        fields: &[(&str, &str)],
        ended: bool,
        bodiless: bool,
    ) -> Result<(String, ResponseFraming), Malformed> {
        let mut out = Vec::new();
        let mut head = HeadWriter::new(&mut out);
        for (name, value) in fields {
            head.field(name.as_bytes(), value.as_bytes())?;
        }
        let framing = head.finish(ended, bodiless)?.framing;
        Ok((String::from_utf8(out).unwrap(), framing))
    }

    #[test]
    fn a_body_of_unknown_length_is_chunked_and_one_of_known_length_is_not() {
        let grpc = [(":status", "200"), ("content-type", "application/grpc")];
        assert_eq!(
            written(&grpc, false, false),
            Ok((
                "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\n\
                 transfer-encoding: chunked\r\n\r\n"
                    .to_string(),
                ResponseFraming::Chunked
            ))
        );
        let sized = [(":status", "200"), ("content-length", "5")];
        assert_eq!(
            written(&sized, false, false),
            Ok((
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n".to_string(),
                ResponseFraming::Length
            ))
        );
    }

    #[test]
    fn a_trailers_only_response_gets_a_length_of_zero_and_a_head_response_nothing() {
        let trailers_only = [(":status", "200"), ("grpc-status", "14")];
        assert_eq!(
            written(&trailers_only, true, false),
            Ok((
                "HTTP/1.1 200 OK\r\ngrpc-status: 14\r\ncontent-length: 0\r\n\r\n".to_string(),
                ResponseFraming::None
            ))
        );
        let to_head = [(":status", "200"), ("content-length", "900")];
        assert_eq!(
            written(&to_head, true, true),
            Ok((
                "HTTP/1.1 200 OK\r\ncontent-length: 900\r\n\r\n".to_string(),
                ResponseFraming::None
            ))
        );
    }

    #[test]
    fn an_interim_head_leaves_nothing_behind_and_may_not_end_the_stream() {
        let mut out = b"kept".to_vec();
        let mut head = HeadWriter::new(&mut out);
        head.field(b":status", b"103").unwrap();
        head.field(b"link", b"</a.css>; rel=preload").unwrap();
        assert!(head.finish(false, false).unwrap().is_interim());
        assert_eq!(out, b"kept");
        assert_eq!(
            written(&[(":status", "100")], true, false),
            Err(Malformed::Status)
        );
    }

    #[test]
    fn what_http_1_1_cannot_carry_or_http_2_forbids_is_malformed() {
        for fields in [
            &[("content-type", "text/plain")][..],
            &[(":status", "20")],
            &[(":status", "200"), (":status", "200")],
            &[(":status", "200"), (":path", "/")],
            &[(":status", "200"), ("x-a", "1\r\nset-cookie: stolen=1")],
            &[(":status", "200"), ("x-a", "a\u{1}b")],
            &[(":status", "200"), ("x-a", "a\u{7f}")],
            &[(":status", "200"), ("x a", "1")],
            &[(":status", "200"), ("X-Upper", "1")],
            &[(":status", "200"), ("connection", "close")],
            &[(":status", "200"), ("transfer-encoding", "chunked")],
            &[
                (":status", "200"),
                ("content-length", "5"),
                ("content-length", "6"),
            ],
            &[(":status", "200"), ("content-length", "five")],
        ] {
            assert!(written(fields, false, false).is_err(), "{fields:?}");
        }
    }

    #[test]
    fn trailers_become_lines_of_the_trailer_section() {
        let mut out = Vec::new();
        trailer_field(&mut out, b"grpc-status", b"0").unwrap();
        assert_eq!(out, b"grpc-status: 0\r\n");
        assert_eq!(
            trailer_field(&mut out, b":status", b"200"),
            Err(Malformed::Pseudo)
        );
        assert_eq!(
            trailer_field(&mut out, b"x", b"a\nb"),
            Err(Malformed::Field)
        );
    }

    #[test]
    fn a_head_has_no_more_fields_than_the_exchange_reads_from_an_http_1_1_server() {
        use crate::http1::{header_slots, parse_response, Method};
        let many: Vec<(String, String)> = (0..MAX_HEADERS - 1)
            .map(|i| (format!("x-{i}"), "v".to_owned()))
            .collect();
        let fields: Vec<(&str, &str)> = std::iter::once((":status", "200"))
            .chain(many.iter().map(|(n, v)| (n.as_str(), v.as_str())))
            .collect();
        // The most, with the framing field added: the head reads back whole.
        let (head, _) = written(&fields, false, false).unwrap();
        let mut slots = header_slots();
        let response = parse_response(head.as_bytes(), &mut slots, Method::Get, 1 << 20)
            .unwrap()
            .unwrap();
        assert_eq!(response.headers.len(), MAX_HEADERS);
        // One more is malformed (a 502 for the client), not a head the exchange refuses.
        let mut more = fields.clone();
        more.push(("x-one-more", "v"));
        assert_eq!(written(&more, false, false), Err(Malformed::TooManyFields));
    }
}
