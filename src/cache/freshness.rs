//! RFC 9111's arithmetic for a shared cache: whether a response may be stored (§3), how long it
//! stays fresh (§4.2.1, §4.2.2), its age (§4.2.3), and what a stored response may be used for
//! when a request comes (§4.2, §4.2.4, RFC 5861's stale extensions, the operator's grace).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::control::{RequestControl, ResponseControl};

/// What a response's head says that storing it depends on, as read from its fields.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResponseFacts {
    pub status: u16,
    pub control: ResponseControl,
    /// `Date`, in seconds since the Unix epoch; `None` when absent or unreadable.
    pub date: Option<u64>,
    /// `Expires`: `Some(None)` when present but not a date (such as `0`), which means already
    /// expired (RFC 9111 §5.3).
    pub expires: Option<Option<u64>>,
    pub last_modified: Option<u64>,
    /// `Age`, in seconds, when present and readable.
    pub age: Option<u64>,
    /// An `ETag` or a `Last-Modified`: the response can be validated.
    pub validator: bool,
    pub set_cookie: bool,
    /// `Vary: *`: no request can be matched to it (RFC 9111 §4.1).
    pub vary_star: bool,
}

/// The operator's rules for one pool's (or route's) cache, as far as freshness goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreshnessRules {
    /// Heuristic freshness (RFC 9111 §4.2.2), given only to responses without explicit
    /// freshness whose status allows it; with a `Last-Modified`, 10% of the time since it,
    /// but never longer than this. `None`: no heuristic freshness.
    pub default_ttl: Option<Duration>,
    /// Freshness for a 404 or 410 without explicit freshness. `None`: not stored.
    pub negative_ttl: Option<Duration>,
    /// Store responses that set a cookie (they are usually personal).
    pub store_set_cookie: bool,
}

/// Why a response was not stored, for the counters and `Cache-Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    /// Not a GET, or the request asked `no-store`.
    Request,
    /// A status the cache does not store (interim, partial content, or none it understands).
    Status,
    /// `no-store`.
    NoStore,
    /// `private`.
    Private,
    /// The request carried `Authorization` and the response did not say a shared cache may
    /// keep it (RFC 9111 §3.5).
    Authorization,
    /// It sets a cookie and the pool does not store those.
    SetCookie,
    /// `Vary: *`.
    VaryStar,
    /// Nothing says it may be reused: no freshness, explicit or heuristic, and no validator to
    /// revalidate it with.
    NoFreshness,
}

/// Status codes this cache understands and stores when the response allows it; those marked
/// heuristically cacheable by RFC 9110 §15.1 may also get heuristic freshness.
fn status_understood(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 302 | 303 | 307 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

fn heuristically_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// How long the response is fresh, in seconds, when it may be stored: RFC 9111 §3's conditions
/// for a shared cache and §4.2.1's lifetime. `authorization`: the request carried one.
pub fn storable(
    request: &RequestControl,
    authorization: bool,
    response: &ResponseFacts,
    rules: &FreshnessRules,
) -> Result<u64, NotStored> {
    let control = &response.control;
    if request.no_store {
        return Err(NotStored::Request);
    }
    if !status_understood(response.status) {
        return Err(NotStored::Status);
    }
    // must-understand: with a status understood (checked above), no-store is ignored.
    if control.no_store && !control.must_understand {
        return Err(NotStored::NoStore);
    }
    if control.private {
        return Err(NotStored::Private);
    }
    if authorization && !(control.must_revalidate || control.public || control.s_maxage.is_some()) {
        return Err(NotStored::Authorization);
    }
    if response.set_cookie && !rules.store_set_cookie {
        return Err(NotStored::SetCookie);
    }
    if response.vary_star {
        return Err(NotStored::VaryStar);
    }
    let explicit = explicit_lifetime(response);
    let lifetime = match explicit {
        Some(lifetime) => lifetime,
        None => heuristic_lifetime(response, rules).unwrap_or(0),
    };
    // A response kept only to be revalidated is worth its memory when the server said how it
    // is to be reused (explicit freshness, or no-cache) and gave a validator.
    let for_revalidation = response.validator && (explicit.is_some() || control.no_cache);
    if lifetime == 0 && !for_revalidation {
        return Err(NotStored::NoFreshness);
    }
    Ok(lifetime)
}

/// `s-maxage`, then `max-age`, then `Expires` less `Date` (RFC 9111 §4.2.1).
fn explicit_lifetime(response: &ResponseFacts) -> Option<u64> {
    let control = &response.control;
    if let Some(seconds) = control.s_maxage.or(control.max_age) {
        return Some(u64::from(seconds));
    }
    let expires = response.expires?;
    let Some(expires) = expires else {
        return Some(0);
    };
    let date = response.date.unwrap_or_else(unix_now);
    Some(expires.saturating_sub(date))
}

/// Heuristic freshness (RFC 9111 §4.2.2) where the status (or `public`) allows it and the rules
/// give it: `negative_ttl` for 404 and 410, `default_ttl` otherwise, capped by 10% of the time
/// since `Last-Modified` when there is one.
fn heuristic_lifetime(response: &ResponseFacts, rules: &FreshnessRules) -> Option<u64> {
    if !heuristically_cacheable(response.status) && !response.control.public {
        return None;
    }
    let ttl = match response.status {
        404 | 410 => rules.negative_ttl?,
        _ => rules.default_ttl?,
    }
    .as_secs();
    Some(match response.last_modified {
        Some(modified) => {
            let date = response.date.unwrap_or_else(unix_now);
            (date.saturating_sub(modified) / 10).min(ttl)
        }
        None => ttl,
    })
}

/// The age a response had when it arrived, RFC 9111 §4.2.3's `corrected_initial_age`, in whole
/// seconds: `request_ms` and `response_ms` are when the request went and the response came, in
/// milliseconds since the epoch. Each difference is rounded down: a request answered in 20 ms
/// that happened to span a second's end, or a `Date` of the second the response came in, adds no
/// second of age (which would make a `max-age=1` response stale on arrival).
pub fn initial_age(response: &ResponseFacts, request_ms: u64, response_ms: u64) -> u64 {
    let apparent_age = response
        .date
        .map_or(0, |date| response_ms.saturating_sub(date * 1000) / 1000);
    let response_delay = response_ms.saturating_sub(request_ms) / 1000;
    let corrected_age_value = response.age.unwrap_or(0).saturating_add(response_delay);
    apparent_age.max(corrected_age_value)
}

/// What a stored response keeps of its freshness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    /// Seconds it is fresh for, from its initial age.
    pub lifetime: u64,
    pub control: ResponseControl,
}

/// What a stored response may be used for, given its current age and the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it.
    Fresh,
    /// Serve it now, stale, and refresh it in the background (`stale-while-revalidate`, grace,
    /// or a request's `max-stale`, which needs no refresh).
    StaleServe { refresh: bool },
    /// Ask the server first (with the stored validators); the stored response may still be
    /// served if the server fails and `stale_if_error` says so.
    Validate,
}

impl Freshness {
    /// RFC 9111 §4.2 with the request's own limits (§5.2.1) and the stale extensions: `age` is
    /// the response's current age, `grace` the operator's (served stale while refreshing, as
    /// `stale-while-revalidate` is, for at most so long past the lifetime).
    pub fn judge(&self, age: u64, request: &RequestControl, grace: u64) -> Verdict {
        let control = &self.control;
        if request.no_cache || control.no_cache {
            return Verdict::Validate;
        }
        if request
            .max_age
            .is_some_and(|max_age| age > u64::from(max_age))
        {
            return Verdict::Validate;
        }
        let fresh_for = self.lifetime.saturating_sub(age);
        if self.lifetime > age {
            let wanted = request.min_fresh.map_or(0, u64::from);
            if fresh_for >= wanted {
                return Verdict::Fresh;
            }
            return Verdict::Validate;
        }
        if control.forbids_stale() {
            return Verdict::Validate;
        }
        let staleness = age - self.lifetime;
        if request
            .max_stale
            .is_some_and(|max_stale| staleness <= u64::from(max_stale))
        {
            return Verdict::StaleServe { refresh: false };
        }
        let window = control
            .stale_while_revalidate
            .map_or(0, u64::from)
            .max(grace);
        if staleness < window {
            return Verdict::StaleServe { refresh: true };
        }
        Verdict::Validate
    }

    /// After a failed refresh (the server unreachable, or a 5xx): whether the stale response
    /// may answer instead, within `stale-if-error` or the operator's grace (RFC 5861 §4).
    pub fn serves_on_error(&self, age: u64, grace: u64) -> bool {
        if self.control.forbids_stale() {
            return false;
        }
        let staleness = age.saturating_sub(self.lifetime);
        let window = self.control.stale_if_error.map_or(0, u64::from).max(grace);
        staleness < window
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    unix_seconds(SystemTime::now())
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// An HTTP date (RFC 9110 §5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms) in
/// seconds since the epoch.
pub fn http_date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    httpdate::parse_http_date(text).ok().map(unix_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn control(line: &str) -> ResponseControl {
        let mut control = ResponseControl::default();
        control.read(line.as_bytes());
        control
    }

    fn ok_200(line: &str) -> ResponseFacts {
        ResponseFacts {
            status: 200,
            control: control(line),
            date: Some(NOW),
            ..ResponseFacts::default()
        }
    }

    const NO_HEURISTIC: FreshnessRules = FreshnessRules {
        default_ttl: None,
        negative_ttl: None,
        store_set_cookie: false,
    };

    fn stored(response: &ResponseFacts) -> Result<u64, NotStored> {
        storable(&RequestControl::default(), false, response, &NO_HEURISTIC)
    }

    #[test]
    fn s_maxage_wins_over_max_age_which_wins_over_expires() {
        let mut response = ok_200("max-age=60, s-maxage=30");
        response.expires = Some(Some(NOW + 500));
        assert_eq!(stored(&response), Ok(30));
        response.control = control("max-age=60");
        assert_eq!(stored(&response), Ok(60));
        response.control = ResponseControl::default();
        assert_eq!(stored(&response), Ok(500));
    }

    #[test]
    fn an_invalid_expires_is_already_expired() {
        let mut response = ok_200("");
        response.expires = Some(None);
        assert_eq!(stored(&response), Err(NotStored::NoFreshness));
        response.validator = true;
        assert_eq!(stored(&response), Ok(0), "kept for revalidation");
    }

    #[test]
    fn no_store_private_and_set_cookie_are_not_stored() {
        assert_eq!(
            stored(&ok_200("no-store, max-age=60")),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            stored(&ok_200("private, max-age=60")),
            Err(NotStored::Private)
        );
        let mut cookie = ok_200("max-age=60");
        cookie.set_cookie = true;
        assert_eq!(stored(&cookie), Err(NotStored::SetCookie));
        let rules = FreshnessRules {
            store_set_cookie: true,
            ..NO_HEURISTIC
        };
        assert_eq!(
            storable(&RequestControl::default(), false, &cookie, &rules),
            Ok(60)
        );
    }

    #[test]
    fn must_understand_overrides_no_store_for_a_status_understood() {
        assert_eq!(
            stored(&ok_200("no-store, must-understand, max-age=9")),
            Ok(9)
        );
        let mut partial = ok_200("no-store, must-understand, max-age=9");
        partial.status = 206;
        assert_eq!(stored(&partial), Err(NotStored::Status));
    }

    #[test]
    fn a_request_with_authorization_is_stored_only_when_the_response_allows_it() {
        let none = RequestControl::default();
        let plain = ok_200("max-age=60");
        assert_eq!(
            storable(&none, true, &plain, &NO_HEURISTIC),
            Err(NotStored::Authorization)
        );
        for allowing in [
            "public, max-age=60",
            "s-maxage=60",
            "must-revalidate, max-age=60",
        ] {
            assert!(
                storable(&none, true, &ok_200(allowing), &NO_HEURISTIC).is_ok(),
                "{allowing}"
            );
        }
    }

    #[test]
    fn heuristic_freshness_only_where_the_rules_and_the_status_allow() {
        let rules = FreshnessRules {
            default_ttl: Some(Duration::from_secs(120)),
            negative_ttl: None,
            store_set_cookie: false,
        };
        let none = RequestControl::default();
        let bare = ok_200("");
        assert_eq!(stored(&bare), Err(NotStored::NoFreshness));
        assert_eq!(storable(&none, false, &bare, &rules), Ok(120));
        // 10% of the time since Last-Modified, capped by default_ttl.
        let mut modified = ok_200("");
        modified.last_modified = Some(NOW - 300);
        assert_eq!(storable(&none, false, &modified, &rules), Ok(30));
        // A 302 is not heuristically cacheable; a 404 needs negative_ttl.
        let mut found = ok_200("");
        found.status = 302;
        assert_eq!(
            storable(&none, false, &found, &rules),
            Err(NotStored::NoFreshness)
        );
        let mut missing = ok_200("");
        missing.status = 404;
        assert_eq!(
            storable(&none, false, &missing, &rules),
            Err(NotStored::NoFreshness)
        );
        let negative = FreshnessRules {
            negative_ttl: Some(Duration::from_secs(10)),
            ..rules
        };
        assert_eq!(storable(&none, false, &missing, &negative), Ok(10));
        // Explicit freshness needs no rule.
        found.control = control("max-age=5");
        assert_eq!(stored(&found), Ok(5));
    }

    #[test]
    fn age_follows_rfc_9111_4_2_3() {
        let mut response = ok_200("");
        let ms = |seconds: u64| seconds * 1000;
        // Date 10 s before it arrived: apparent age 10.
        response.date = Some(NOW - 10);
        assert_eq!(initial_age(&response, ms(NOW - 1), ms(NOW)), 10);
        // An Age of 30 plus the 1 s the request took is larger.
        response.age = Some(30);
        assert_eq!(initial_age(&response, ms(NOW - 1), ms(NOW)), 31);
        // A Date in the future gives no negative age.
        response.date = Some(NOW + 100);
        response.age = None;
        assert_eq!(initial_age(&response, ms(NOW), ms(NOW)), 0);
        // 20 ms across a second's end, and a Date of the second it came in: no age.
        response.date = Some(NOW);
        assert_eq!(initial_age(&response, ms(NOW) - 10, ms(NOW) + 10), 0);
        assert_eq!(initial_age(&response, ms(NOW) + 990, ms(NOW) + 1010), 1);
    }

    fn freshness(line: &str, lifetime: u64) -> Freshness {
        Freshness {
            lifetime,
            control: control(line),
        }
    }

    #[test]
    fn fresh_stale_and_what_may_be_served() {
        let any = RequestControl::default();
        let plain = freshness("max-age=60", 60);
        assert_eq!(plain.judge(59, &any, 0), Verdict::Fresh);
        assert_eq!(plain.judge(60, &any, 0), Verdict::Validate);
        assert_eq!(
            plain.judge(70, &any, 30),
            Verdict::StaleServe { refresh: true },
            "within grace"
        );
        let swr = freshness("max-age=60, stale-while-revalidate=20", 60);
        assert_eq!(
            swr.judge(79, &any, 0),
            Verdict::StaleServe { refresh: true }
        );
        assert_eq!(swr.judge(80, &any, 0), Verdict::Validate);
        for strict in [
            "max-age=60, must-revalidate",
            "s-maxage=60",
            "max-age=60, proxy-revalidate",
        ] {
            let strict = freshness(strict, 60);
            assert_eq!(strict.judge(61, &any, 3600), Verdict::Validate);
            assert!(!strict.serves_on_error(61, 3600));
        }
        let no_cache = freshness("no-cache, max-age=60", 60);
        assert_eq!(no_cache.judge(0, &any, 0), Verdict::Validate);
    }

    #[test]
    fn the_request_s_own_limits() {
        let object = freshness("max-age=60", 60);
        let mut request = RequestControl {
            max_age: Some(10),
            ..RequestControl::default()
        };
        assert_eq!(object.judge(11, &request, 0), Verdict::Validate);
        assert_eq!(object.judge(10, &request, 0), Verdict::Fresh);
        request = RequestControl {
            min_fresh: Some(20),
            ..RequestControl::default()
        };
        assert_eq!(object.judge(45, &request, 0), Verdict::Validate);
        assert_eq!(object.judge(40, &request, 0), Verdict::Fresh);
        request = RequestControl {
            max_stale: Some(30),
            ..RequestControl::default()
        };
        assert_eq!(
            object.judge(85, &request, 0),
            Verdict::StaleServe { refresh: false }
        );
        assert_eq!(object.judge(95, &request, 0), Verdict::Validate);
        request = RequestControl {
            no_cache: true,
            ..RequestControl::default()
        };
        assert_eq!(object.judge(1, &request, 0), Verdict::Validate);
    }

    #[test]
    fn stale_if_error_and_grace_bound_serving_on_error() {
        let object = freshness("max-age=60, stale-if-error=100", 60);
        assert!(object.serves_on_error(159, 0));
        assert!(!object.serves_on_error(160, 0));
        assert!(freshness("max-age=60", 60).serves_on_error(100, 50));
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        let expected = Some(784_111_777);
        assert_eq!(http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), expected);
        assert_eq!(http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), expected);
        assert_eq!(http_date(b"Sun Nov  6 08:49:37 1994"), expected);
        assert_eq!(http_date(b"0"), None);
    }
}
