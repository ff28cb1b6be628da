//! A server's `Keep-Alive: timeout=N` hint (RFC 2068 §19.7.1, still sent by Apache, Node.js and
//! others): how long it keeps an idle connection open, so that herdsman retires the connection
//! first instead of sending a request into the server's close.

use std::time::Duration;

use super::tokens::{list_elements, trim_ows};

/// The idle time after which herdsman stops reusing a connection whose server said it closes
/// idle connections after `timeout=N` seconds: a quarter of N earlier for short hints, one
/// second earlier for long ones, so that a request is on the wire well before the server's
/// timer fires. `None` when the head has no usable hint.
pub fn idle_limit(headers: &[httparse::Header<'_>]) -> Option<Duration> {
    // A plain loop with the length first: this runs on every response that keeps its connection
    // (an iterator chain here cost about 80 instructions a response, callgrind).
    let mut seconds = None;
    for header in headers {
        if header.name.len() == KEEP_ALIVE.len() && header.name.eq_ignore_ascii_case(KEEP_ALIVE) {
            seconds = seconds.or_else(|| list_elements(header.value).find_map(timeout_parameter));
        }
    }
    let hinted = Duration::from_secs(seconds?);
    Some(hinted - (hinted / 4).min(Duration::from_secs(1)))
}

const KEEP_ALIVE: &str = "keep-alive";

/// `timeout=N` (name case ignored, N whole seconds, at most a day), else `None`.
fn timeout_parameter(element: &[u8]) -> Option<u64> {
    let equals = element.iter().position(|&b| b == b'=')?;
    let (name, value) = (
        trim_ows(&element[..equals]),
        trim_ows(&element[equals + 1..]),
    );
    if !name.eq_ignore_ascii_case(b"timeout") || value.is_empty() || value.len() > 6 {
        return None;
    }
    if !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let seconds = std::str::from_utf8(value).ok()?.parse::<u64>().ok()?;
    (seconds <= 86_400).then_some(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit_of(values: &[&str]) -> Option<Duration> {
        let headers: Vec<httparse::Header<'_>> = values
            .iter()
            .map(|value| httparse::Header {
                name: "Keep-Alive",
                value: value.as_bytes(),
            })
            .collect();
        idle_limit(&headers)
    }

    #[test]
    fn the_hint_is_retired_early_by_a_quarter_or_a_second() {
        assert_eq!(limit_of(&["timeout=1"]), Some(Duration::from_millis(750)));
        assert_eq!(
            limit_of(&["timeout=2, max=100"]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            limit_of(&["max=100, TIMEOUT = 5"]),
            Some(Duration::from_secs(4))
        );
        assert_eq!(limit_of(&["timeout=60"]), Some(Duration::from_secs(59)));
        assert_eq!(limit_of(&["timeout=0"]), Some(Duration::ZERO));
    }

    #[test]
    fn no_usable_hint_is_none() {
        assert_eq!(limit_of(&[]), None);
        assert_eq!(limit_of(&["max=100"]), None);
        assert_eq!(limit_of(&["timeout="]), None);
        assert_eq!(limit_of(&["timeout=1.5"]), None);
        assert_eq!(limit_of(&["timeout=-1"]), None);
        assert_eq!(limit_of(&["timeout=99999999999999"]), None);
        let other = [httparse::Header {
            name: "X-Keep-Alive",
            value: b"timeout=1",
        }];
        assert_eq!(idle_limit(&other), None);
    }
}
