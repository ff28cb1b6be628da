//! The answer to a request over a limit: 429 Too Many Requests (RFC 6585 §4) with `Retry-After`
//! and the `RateLimit-Policy` and `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers
//! (the quota and window of the limit; nothing remaining, and when the next request goes).

use std::io::Write;

use super::Refusal;

/// Appends the 429 for `refusal`: `head_only` for a HEAD request (no body); `close` when the
/// connection closes after it (the request asked to, or has a body herdsman will not read).
pub fn write_too_many_requests(
    refusal: &Refusal<'_>,
    head_only: bool,
    close: bool,
    out: &mut Vec<u8>,
) {
    let rule = &refusal.limiter.rule;
    // Whole seconds, rounded up: a client that waits that long is let through.
    let retry_after = refusal.retry_after_micros.div_ceil(1_000_000).max(1);
    let window = rule.period.as_secs();
    let connection = if close { "Connection: close\r\n" } else { "" };
    let detail_len = "429 Too Many Requests: over the rate limit \n".len() + rule.name.len();
    // Limit names are config names (letters, digits, `_.-`) with `route[N]` or `listener `
    // before them: nothing a structured-field string would need escaped.
    let _ = write!(
        out,
        "HTTP/1.1 429 Too Many Requests\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {detail_len}\r\n\
         Retry-After: {retry_after}\r\n\
         RateLimit-Policy: \"{name}\";q={quota};w={window}\r\n\
         RateLimit: \"{name}\";r=0;t={retry_after}\r\n\
         {connection}\r\n",
        name = rule.name,
        quota = rule.count,
    );
    if !head_only {
        let _ = writeln!(
            out,
            "429 Too Many Requests: over the rate limit {}",
            rule.name
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::rate_limit::{LimitKey, RateLimitRule};
    use crate::rate_limit::Limiter;
    use std::time::Duration;

    #[test]
    fn the_answer_says_when_to_come_back_and_the_policy() {
        let limiter = Limiter::new(
            RateLimitRule {
                name: "route[3]".into(),
                count: 6000,
                period: Duration::from_secs(60),
                burst: 10,
                key: LimitKey::Client,
                max_keys: 10,
            },
            1,
        );
        let refusal = Refusal {
            limiter: &limiter,
            retry_after_micros: 1_200_000,
        };
        let mut out = Vec::new();
        write_too_many_requests(&refusal, false, false, &mut out);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(
            head,
            "HTTP/1.1 429 Too Many Requests\r\n\
             Content-Type: text/plain; charset=utf-8\r\n\
             Content-Length: 52\r\n\
             Retry-After: 2\r\n\
             RateLimit-Policy: \"route[3]\";q=6000;w=60\r\n\
             RateLimit: \"route[3]\";r=0;t=2"
        );
        assert_eq!(
            body,
            "429 Too Many Requests: over the rate limit route[3]\n"
        );
        assert_eq!(body.len(), 52);
        let mut head_only = Vec::new();
        write_too_many_requests(&refusal, true, true, &mut head_only);
        assert!(String::from_utf8(head_only)
            .unwrap()
            .ends_with("Connection: close\r\n\r\n"));
    }
}
