//! The algorithm a request's answer may be compressed with: the client's `Accept-Encoding`
//! (RFC 9110 §12.5.3: q-values, `q=0` refusing, `identity`, `*`) against the route's
//! `algorithms`, whose order breaks ties; and the requests whose answers are never compressed
//! (HEAD, a `Range`, a gRPC call, an upgrade). Read once per request on routes that compress,
//! in one pass over its fields and no allocation.

use crate::config::{Algorithm, CompressionRules};
use crate::http1::{Method, Request};
use crate::stats::compression::Skipped;

/// What a request's client accepts of the codings, as q-values in thousandths (`None`: not
/// named).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Offered {
    /// By `Algorithm::ALL`'s order.
    algorithms: [Option<u16>; 3],
    identity: Option<u16>,
    any: Option<u16>,
    /// At least one `Accept-Encoding` field came.
    sent: bool,
}

impl Offered {
    /// Reads one `Accept-Encoding` field value into what is offered.
    pub fn read(&mut self, value: &[u8]) {
        self.sent = true;
        for element in value.split(|&b| b == b',') {
            let mut parts = element.split(|&b| b == b';');
            let coding = parts.next().unwrap_or_default().trim_ascii();
            if coding.is_empty() {
                continue;
            }
            let mut q = Some(1000);
            for parameter in parts {
                let parameter = parameter.trim_ascii();
                if parameter.len() >= 2 && parameter[..2].eq_ignore_ascii_case(b"q=") {
                    q = q_value(&parameter[2..]);
                }
            }
            // A q-value that does not parse takes the coding out, as a refusal would.
            let q = q.unwrap_or(0);
            let slot = if coding.eq_ignore_ascii_case(b"identity") {
                &mut self.identity
            } else if coding == b"*" {
                &mut self.any
            } else if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip")
            {
                &mut self.algorithms[Algorithm::Gzip.index()]
            } else if coding.eq_ignore_ascii_case(b"br") {
                &mut self.algorithms[Algorithm::Brotli.index()]
            } else if coding.eq_ignore_ascii_case(b"zstd") {
                &mut self.algorithms[Algorithm::Zstd.index()]
            } else {
                continue;
            };
            *slot = Some(q);
        }
    }

    /// The algorithm of `order` the client likes best (the earliest of equals), or none: no
    /// field, every one refused or unnamed (without `*`), or `identity` named and liked better.
    pub fn choose(&self, order: &[Algorithm]) -> Option<Algorithm> {
        if !self.sent {
            return None;
        }
        let mut best: Option<(Algorithm, u16)> = None;
        for &algorithm in order {
            let q = self.algorithms[algorithm.index()].or(self.any).unwrap_or(0);
            if q > 0 && best.is_none_or(|(_, best_q)| q > best_q) {
                best = Some((algorithm, q));
            }
        }
        let (algorithm, q) = best?;
        match self.identity {
            Some(identity) if identity > q => None,
            _ => Some(algorithm),
        }
    }
}

/// A q-value (`0`, `0.5`, `1`, `1.000`) in thousandths; `None` when it is none.
fn q_value(text: &[u8]) -> Option<u16> {
    let (whole, fraction) = match text.iter().position(|&b| b == b'.') {
        Some(dot) => (&text[..dot], &text[dot + 1..]),
        None => (text, &b""[..]),
    };
    if fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        let digit = fraction.get(i).map_or(0, |d| d - b'0');
        thousandths = thousandths * 10 + u16::from(digit);
    }
    match whole {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The algorithm the answer to `request` may be compressed with on a route of `rules`, or why
/// it will not be. `grpc` and `upgrade`: what the exchange found of the request.
pub fn negotiate(
    rules: &CompressionRules,
    request: &Request<'_, '_>,
    grpc: bool,
    upgrade: bool,
) -> Result<Algorithm, Skipped> {
    if request.method == Method::Head {
        return Err(Skipped::Head);
    }
    if grpc || upgrade {
        return Err(Skipped::Stream);
    }
    let mut offered = Offered::default();
    for field in request.headers {
        if field.name.eq_ignore_ascii_case("accept-encoding") {
            offered.read(field.value);
        } else if field.name.eq_ignore_ascii_case("range") {
            return Err(Skipped::Range);
        }
    }
    offered
        .choose(&rules.algorithms)
        .ok_or(Skipped::NotAccepted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Algorithm::{Brotli, Gzip, Zstd};

    fn chosen(values: &[&str], order: &[Algorithm]) -> Option<Algorithm> {
        let mut offered = Offered::default();
        for value in values {
            offered.read(value.as_bytes());
        }
        offered.choose(order)
    }

    #[test]
    fn the_server_order_breaks_ties_and_q_values_win_over_it() {
        let all = [Zstd, Brotli, Gzip];
        assert_eq!(chosen(&["gzip, deflate, br, zstd"], &all), Some(Zstd));
        assert_eq!(chosen(&["gzip, br"], &all), Some(Brotli));
        assert_eq!(chosen(&["gzip;q=1.0, br;q=0.8"], &all), Some(Gzip));
        assert_eq!(chosen(&["gzip, br"], &[Gzip, Brotli]), Some(Gzip));
        assert_eq!(chosen(&["deflate"], &all), None);
        assert_eq!(chosen(&[], &all), None);
        // Two fields are one list.
        assert_eq!(chosen(&["deflate", "GZIP"], &all), Some(Gzip));
    }

    #[test]
    fn zero_refuses_and_star_stands_for_the_unnamed() {
        let all = [Zstd, Brotli, Gzip];
        assert_eq!(chosen(&["zstd;q=0, gzip"], &all), Some(Gzip));
        assert_eq!(chosen(&["*"], &all), Some(Zstd));
        assert_eq!(chosen(&["*;q=0.5, zstd;q=0, br;q=0.4"], &all), Some(Gzip));
        assert_eq!(chosen(&["*;q=0"], &all), None);
        assert_eq!(chosen(&["gzip;q=0.000"], &all), None);
        // A q-value that is none refuses.
        assert_eq!(chosen(&["gzip;q=2, br;q=x"], &all), None);
    }

    #[test]
    fn identity_preferred_keeps_the_answer_as_it_is() {
        let all = [Zstd, Brotli, Gzip];
        assert_eq!(chosen(&["identity;q=1, gzip;q=0.5"], &all), None);
        assert_eq!(chosen(&["identity;q=0, gzip"], &all), Some(Gzip));
        assert_eq!(chosen(&["identity, gzip"], &all), Some(Gzip));
    }

    #[test]
    fn q_values_read_as_rfc_9110_writes_them() {
        assert_eq!(q_value(b"0"), Some(0));
        assert_eq!(q_value(b"0.5"), Some(500));
        assert_eq!(q_value(b"0.125"), Some(125));
        assert_eq!(q_value(b"1"), Some(1000));
        assert_eq!(q_value(b"1.000"), Some(1000));
        assert_eq!(q_value(b"1.5"), None);
        assert_eq!(q_value(b"0.1234"), None);
        assert_eq!(q_value(b""), None);
    }
}
