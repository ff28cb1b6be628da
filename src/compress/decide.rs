//! Whether an answer is compressed, read from its head once the client's algorithm is known:
//! never a status without a body (1xx, 204, 304) or a 206, an answer the server encoded
//! already, one marked `no-transform`, a type not listed, or one whose `Content-Length` is below
//! `min_length`. What changes in the head it gets is written by `http1::forward` (its
//! `ClientFraming::content_coding`).

use crate::config::{Algorithm, CompressionRules};
use crate::http1::{Body, Response};
use crate::stats::compression::Skipped;

/// How an answer is compressed: its algorithm and level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compressing {
    pub algorithm: Algorithm,
    /// 1–19, 0–11 or 1–9 (`config::CompressionRules`): a byte, so that every response's start
    /// stays as small as it was.
    pub level: i8,
}

/// How `response` is compressed on a route of `rules` whose client takes `algorithm`, or why it
/// goes as it is.
pub fn answer_compression(
    rules: &CompressionRules,
    algorithm: Algorithm,
    response: &Response<'_, '_>,
) -> Result<Compressing, Skipped> {
    match response.code {
        206 => return Err(Skipped::Range),
        100..=199 | 204 | 304 => return Err(Skipped::Status),
        _ => {}
    }
    let (mut encoded, mut no_transform, mut listed, mut ranged) = (false, false, false, false);
    for field in response.headers {
        let (name, value) = (field.name, field.value.trim_ascii());
        if name.eq_ignore_ascii_case("content-encoding") {
            encoded |= !value.is_empty() && !value.eq_ignore_ascii_case(b"identity");
        } else if name.eq_ignore_ascii_case("cache-control") {
            no_transform |= value
                .split(|&b| b == b',')
                .any(|directive| directive.trim_ascii().eq_ignore_ascii_case(b"no-transform"));
        } else if name.eq_ignore_ascii_case("content-type") {
            listed = rules.compresses_type(value);
        } else if name.eq_ignore_ascii_case("content-range") {
            ranged = true;
        }
    }
    let too_small = match response.body {
        Body::None => true,
        Body::Length(length) => length < rules.min_length.max(1),
        Body::Chunked | Body::UntilClose => false,
    };
    let skipped = [
        (ranged, Skipped::Range),
        (encoded, Skipped::Encoded),
        (no_transform, Skipped::NoTransform),
        (!listed, Skipped::Type),
        (too_small, Skipped::TooSmall),
    ];
    if let Some(&(_, why)) = skipped.iter().find(|(applies, _)| *applies) {
        return Err(why);
    }
    let level = match algorithm {
        Algorithm::Zstd => rules.zstd_level,
        Algorithm::Brotli => rules.brotli_level as i32,
        Algorithm::Gzip => rules.gzip_level as i32,
    } as i8;
    Ok(Compressing { algorithm, level })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::{header_slots, parse_response, Method};

    fn decided(head: &str) -> Result<Compressing, Skipped> {
        let mut slots = header_slots();
        let response = parse_response(head.as_bytes(), &mut slots, Method::Get, 65536)
            .unwrap()
            .unwrap();
        answer_compression(&CompressionRules::default(), Algorithm::Gzip, &response)
    }

    #[test]
    fn listed_text_above_the_minimum_is_compressed_at_its_level() {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5000\r\n\r\n";
        assert_eq!(
            decided(head),
            Ok(Compressing {
                algorithm: Algorithm::Gzip,
                level: 5
            })
        );
        let chunked = "HTTP/1.1 404 Nope\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(decided(chunked).is_ok());
    }

    #[test]
    fn each_reason_to_leave_an_answer_as_it_is() {
        let cases = [
            ("HTTP/1.1 304 Not Modified\r\nContent-Type: text/html\r\n\r\n", Skipped::Status),
            ("HTTP/1.1 204 No Content\r\n\r\n", Skipped::Status),
            ("HTTP/1.1 206 Partial\r\nContent-Type: text/html\r\nContent-Length: 5000\r\n\r\n", Skipped::Range),
            ("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\nContent-Length: 5000\r\n\r\n", Skipped::Encoded),
            ("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: public, No-Transform\r\nContent-Length: 5000\r\n\r\n", Skipped::NoTransform),
            ("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 5000\r\n\r\n", Skipped::Type),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", Skipped::Type),
            ("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1023\r\n\r\n", Skipped::TooSmall),
        ];
        for (head, why) in cases {
            assert_eq!(decided(head), Err(why), "{head}");
        }
    }
}
