//! An HTTP/2 server's response head written as the HTTP/1.1 head the exchange reads, with the
//! framing its body will come in: its `content-length` when it has one, the chunked coding when
//! its length is unknown (so that trailers, gRPC's status among them, have a place: the trailer
//! section), none when the HEADERS frame ended the stream (a `content-length: 0` added where a
//! body could have been, as in gRPC's trailers-only responses).

use http::response::Parts;

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

/// Writes `head` as an HTTP/1.1 response head into `out` (emptied first). `ended`: the HEADERS
/// frame ended the stream; `bodiless`: the request was a HEAD, whose response has no body
/// whatever its fields say.
pub fn write_response_head(
    head: &Parts,
    ended: bool,
    bodiless: bool,
    out: &mut Vec<u8>,
) -> ResponseFraming {
    out.clear();
    let status = head.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut has_length = false;
    for (name, value) in &head.headers {
        has_length |= name == http::header::CONTENT_LENGTH;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let may_have_body = !bodiless && status.as_u16() != 204 && status.as_u16() != 304;
    let framing = match (may_have_body, ended, has_length) {
        (false, _, _) => ResponseFraming::None,
        (true, true, true) => ResponseFraming::None,
        (true, true, false) => {
            out.extend_from_slice(b"content-length: 0\r\n");
            ResponseFraming::None
        }
        (true, false, true) => ResponseFraming::Length,
        (true, false, false) => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            ResponseFraming::Chunked
        }
    };
    out.extend_from_slice(b"\r\n");
    framing
}

/// Writes trailer fields as the chunked coding's end: the last chunk and the trailer section.
pub fn write_trailers(trailers: Option<&http::HeaderMap>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, fields: &[(&str, &str)]) -> Parts {
        let mut response = http::Response::builder().status(status);
        for (name, value) in fields {
            response = response.header(*name, *value);
        }
        response.body(()).unwrap().into_parts().0
    }

    fn written(head: &Parts, ended: bool, bodiless: bool) -> (String, ResponseFraming) {
        let mut out = Vec::new();
        let framing = write_response_head(head, ended, bodiless, &mut out);
        (String::from_utf8(out).unwrap(), framing)
    }

    #[test]
    fn a_body_of_unknown_length_is_chunked_and_one_of_known_length_is_not() {
        let grpc = head(200, &[("content-type", "application/grpc")]);
        assert_eq!(
            written(&grpc, false, false),
            (
                "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\n\
                 transfer-encoding: chunked\r\n\r\n"
                    .to_string(),
                ResponseFraming::Chunked
            )
        );
        let sized = head(200, &[("content-length", "5")]);
        assert_eq!(
            written(&sized, false, false),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n".to_string(),
                ResponseFraming::Length
            )
        );
    }

    #[test]
    fn a_trailers_only_response_gets_a_length_of_zero_and_a_head_response_nothing() {
        let trailers_only = head(200, &[("grpc-status", "14")]);
        assert_eq!(
            written(&trailers_only, true, false),
            (
                "HTTP/1.1 200 OK\r\ngrpc-status: 14\r\ncontent-length: 0\r\n\r\n".to_string(),
                ResponseFraming::None
            )
        );
        let to_head = head(200, &[("content-length", "900")]);
        assert_eq!(
            written(&to_head, true, true),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 900\r\n\r\n".to_string(),
                ResponseFraming::None
            )
        );
    }

    #[test]
    fn trailers_become_the_trailer_section() {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        let mut out = Vec::new();
        write_trailers(Some(&trailers), &mut out);
        assert_eq!(out, b"0\r\ngrpc-status: 0\r\n\r\n");
        out.clear();
        write_trailers(None, &mut out);
        assert_eq!(out, b"0\r\n\r\n");
    }
}
