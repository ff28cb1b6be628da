//! What `Cache-Control` (and a request's `Pragma`) say to a shared cache (RFC 9111 §5.2,
//! RFC 5861): the directives of a request and of a response, read from every field line that
//! carries them.
//!
//! Where a directive is malformed or given twice with different values, the reading errs on the
//! side that serves less from the cache (RFC 9111 §4.2.1: "consider responses that have invalid
//! freshness information … to be stale"): a bad or conflicting `max-age` reads as 0.

/// Seconds as `delta-seconds` carries them: a value past 2³¹ reads as 2³¹ (RFC 9111 §1.2.2).
pub type Seconds = u32;

/// The largest `delta-seconds` a recipient keeps.
const MAX_DELTA: Seconds = 1 << 31;

/// What a request's `Cache-Control` asks of a cache (RFC 9111 §5.2.1).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestControl {
    /// `no-store`: neither this request nor its response may be stored.
    pub no_store: bool,
    /// `no-cache` (or `Pragma: no-cache` without `Cache-Control`): a stored response is used only
    /// once the server has validated it.
    pub no_cache: bool,
    /// `max-age`: the client takes no response older than this.
    pub max_age: Option<Seconds>,
    /// `max-stale`: the client takes a response stale by up to this much (`MAX_DELTA` without a
    /// value: any).
    pub max_stale: Option<Seconds>,
    /// `min-fresh`: the client wants a response still fresh this much longer.
    pub min_fresh: Option<Seconds>,
    /// `only-if-cached`: answer from the cache or with 504, never from the server.
    pub only_if_cached: bool,
}

/// What a response's `Cache-Control` says (RFC 9111 §5.2.2, RFC 5861).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResponseControl {
    pub no_store: bool,
    /// `no-cache`, with or without field names: a shared cache may keep the response but must
    /// validate it before each use. The qualified form is read as the unqualified one (RFC 9111
    /// §5.2.2.4 allows it), which never serves the named fields unvalidated.
    pub no_cache: bool,
    /// `private`, with or without field names: a shared cache does not store it at all (the
    /// qualified form would let it store the rest; not storing is the safe reading).
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    /// `must-understand`: store only if the status is one this cache understands; `no-store`
    /// is then ignored (RFC 9111 §5.2.2.3).
    pub must_understand: bool,
    pub max_age: Option<Seconds>,
    pub s_maxage: Option<Seconds>,
    /// RFC 5861: the response may be served stale for this long while it is revalidated.
    pub stale_while_revalidate: Option<Seconds>,
    /// RFC 5861: the response may be served stale for this long when revalidating it fails.
    pub stale_if_error: Option<Seconds>,
    /// Seen at least one `Cache-Control` field.
    pub present: bool,
}

impl ResponseControl {
    /// The response may not be served stale without validation, whatever grace or extension
    /// allows (RFC 9111 §4.2.4: `no-cache`, `must-revalidate`, and for a shared cache
    /// `proxy-revalidate` and `s-maxage`).
    pub fn forbids_stale(&self) -> bool {
        self.no_cache || self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some()
    }
}

impl RequestControl {
    /// Reads one `Cache-Control` field line of a request.
    pub fn read(&mut self, value: &[u8]) {
        for (name, argument) in directives(value) {
            match_directive(name, |known| match known {
                Directive::NoStore => self.no_store = true,
                Directive::NoCache => self.no_cache = true,
                Directive::MaxAge => merge_seconds(&mut self.max_age, argument),
                Directive::MaxStale => {
                    let value = match argument {
                        None => Some(MAX_DELTA),
                        Some(text) => Some(delta_seconds(text).unwrap_or(0)),
                    };
                    self.max_stale = match (self.max_stale, value) {
                        (Some(old), Some(new)) => Some(old.min(new)),
                        (old, new) => old.or(new),
                    };
                }
                Directive::MinFresh => {
                    // A larger min-fresh asks for more: the most demanding one wins.
                    let value = argument.and_then(delta_seconds).unwrap_or(MAX_DELTA);
                    self.min_fresh = Some(self.min_fresh.map_or(value, |old| old.max(value)));
                }
                Directive::OnlyIfCached => self.only_if_cached = true,
                _ => {}
            });
        }
    }

    /// Reads one `Pragma` field line: only `no-cache` means anything, and only when the request
    /// has no `Cache-Control` at all (RFC 9111 §5.4), which [`RequestControl::finish`] settles.
    pub fn read_pragma(value: &[u8], pragma: &mut bool) {
        for (name, _) in directives(value) {
            if name.eq_ignore_ascii_case(b"no-cache") {
                *pragma = true;
            }
        }
    }

    /// Once every field is read: `Pragma: no-cache` stands for `no-cache` when the request had
    /// no `Cache-Control`.
    pub fn finish(&mut self, had_cache_control: bool, pragma: bool) {
        if pragma && !had_cache_control {
            self.no_cache = true;
        }
    }
}

impl ResponseControl {
    /// Reads one `Cache-Control` field line of a response.
    pub fn read(&mut self, value: &[u8]) {
        self.present = true;
        for (name, argument) in directives(value) {
            match_directive(name, |known| match known {
                Directive::NoStore => self.no_store = true,
                Directive::NoCache => self.no_cache = true,
                Directive::Private => self.private = true,
                Directive::Public => self.public = true,
                Directive::MustRevalidate => self.must_revalidate = true,
                Directive::ProxyRevalidate => self.proxy_revalidate = true,
                Directive::MustUnderstand => self.must_understand = true,
                Directive::MaxAge => merge_seconds(&mut self.max_age, argument),
                Directive::SMaxAge => merge_seconds(&mut self.s_maxage, argument),
                Directive::StaleWhileRevalidate => {
                    merge_seconds(&mut self.stale_while_revalidate, argument)
                }
                Directive::StaleIfError => merge_seconds(&mut self.stale_if_error, argument),
                _ => {}
            });
        }
    }
}

/// The directives herdsman acts on.
#[derive(Clone, Copy)]
enum Directive {
    NoStore,
    NoCache,
    Private,
    Public,
    MustRevalidate,
    ProxyRevalidate,
    MustUnderstand,
    MaxAge,
    SMaxAge,
    MaxStale,
    MinFresh,
    OnlyIfCached,
    StaleWhileRevalidate,
    StaleIfError,
}

const DIRECTIVES: [(&[u8], Directive); 14] = [
    (b"no-store", Directive::NoStore),
    (b"no-cache", Directive::NoCache),
    (b"private", Directive::Private),
    (b"public", Directive::Public),
    (b"must-revalidate", Directive::MustRevalidate),
    (b"proxy-revalidate", Directive::ProxyRevalidate),
    (b"must-understand", Directive::MustUnderstand),
    (b"max-age", Directive::MaxAge),
    (b"s-maxage", Directive::SMaxAge),
    (b"max-stale", Directive::MaxStale),
    (b"min-fresh", Directive::MinFresh),
    (b"only-if-cached", Directive::OnlyIfCached),
    (b"stale-while-revalidate", Directive::StaleWhileRevalidate),
    (b"stale-if-error", Directive::StaleIfError),
];

/// Calls `act` with the directive `name` names (case-insensitively); unknown ones are ignored
/// (RFC 9111 §5.2.3).
fn match_directive(name: &[u8], act: impl FnOnce(Directive)) {
    if let Some((_, known)) = DIRECTIVES
        .iter()
        .find(|(known, _)| name.eq_ignore_ascii_case(known))
    {
        act(*known);
    }
}

/// A seconds directive seen again: a missing or malformed value, or a second value that differs
/// from the first, reads as 0 (the response is stale; RFC 9111 §4.2.1).
fn merge_seconds(slot: &mut Option<Seconds>, argument: Option<&[u8]>) {
    let value = argument.and_then(delta_seconds).unwrap_or(0);
    *slot = match *slot {
        Some(old) if old != value => Some(0),
        _ => Some(value),
    };
}

/// `delta-seconds` (RFC 9111 §1.2.2): digits only, capped at 2³¹. The quoted form, which
/// senders must not use, is accepted when what it quotes is digits.
pub fn delta_seconds(text: &[u8]) -> Option<Seconds> {
    let digits = match text {
        [b'"', inner @ .., b'"'] => inner,
        _ => text,
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value: u64 = 0;
    for digit in digits {
        value = (value * 10 + u64::from(digit - b'0')).min(u64::from(MAX_DELTA));
    }
    Some(value as Seconds)
}

/// The directives of one field value: `name` or `name=argument` (a token or a quoted string,
/// given with its quotes), separated by commas, with optional whitespace around each. Empty
/// list elements are skipped (RFC 9110 §5.6.1).
fn directives(value: &[u8]) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
    let mut rest = value;
    std::iter::from_fn(move || loop {
        rest = trim_start(rest);
        if rest.is_empty() {
            return None;
        }
        // A directive ends at a comma outside quotes.
        let mut quoted = false;
        let mut escaped = false;
        let mut end = rest.len();
        for (at, &byte) in rest.iter().enumerate() {
            if quoted {
                match byte {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => quoted = false,
                    _ => {}
                }
            } else if byte == b'"' {
                quoted = true;
            } else if byte == b',' {
                end = at;
                break;
            }
        }
        let item = trim_end(&rest[..end]);
        rest = rest.get(end + 1..).unwrap_or(&[]);
        if item.is_empty() {
            continue;
        }
        return Some(match item.iter().position(|&byte| byte == b'=') {
            Some(equals) => (
                trim_end(&item[..equals]),
                Some(trim_start(&item[equals + 1..])),
            ),
            None => (item, None),
        });
    })
}

fn trim_start(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|&byte| byte != b' ' && byte != b'\t')
        .unwrap_or(bytes.len());
    &bytes[start..]
}

fn trim_end(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|&byte| byte != b' ' && byte != b'\t')
        .map_or(0, |at| at + 1);
    &bytes[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(lines: &[&str]) -> ResponseControl {
        let mut control = ResponseControl::default();
        for line in lines {
            control.read(line.as_bytes());
        }
        control
    }

    fn request(cache_control: &[&str], pragma_lines: &[&str]) -> RequestControl {
        let mut control = RequestControl::default();
        let mut pragma = false;
        for line in cache_control {
            control.read(line.as_bytes());
        }
        for line in pragma_lines {
            RequestControl::read_pragma(line.as_bytes(), &mut pragma);
        }
        control.finish(!cache_control.is_empty(), pragma);
        control
    }

    #[test]
    fn a_response_s_directives_are_read_whatever_their_case_and_spacing() {
        let control = response(&[
            "Public, MAX-AGE=60 ,s-maxage=30",
            "stale-while-revalidate=5",
        ]);
        assert!(control.public);
        assert_eq!(control.max_age, Some(60));
        assert_eq!(control.s_maxage, Some(30));
        assert_eq!(control.stale_while_revalidate, Some(5));
        assert!(!control.no_store && !control.private && !control.no_cache);
        assert!(
            control.forbids_stale(),
            "s-maxage forbids stale in a shared cache"
        );
    }

    #[test]
    fn qualified_no_cache_and_private_read_as_their_unqualified_forms() {
        let control = response(&[r#"no-cache="Set-Cookie, X-Token", private="Authorization""#]);
        assert!(control.no_cache);
        assert!(control.private);
        assert_eq!(control.max_age, None);
    }

    #[test]
    fn a_comma_inside_quotes_does_not_end_a_directive() {
        let control = response(&[r#"private="a,max-age=99", max-age=5"#]);
        assert_eq!(control.max_age, Some(5));
    }

    #[test]
    fn malformed_or_conflicting_max_age_reads_as_stale() {
        assert_eq!(response(&["max-age=abc"]).max_age, Some(0));
        assert_eq!(response(&["max-age"]).max_age, Some(0));
        assert_eq!(response(&["max-age=-5"]).max_age, Some(0));
        assert_eq!(response(&["max-age=60", "max-age=120"]).max_age, Some(0));
        assert_eq!(response(&["max-age=60, max-age=60"]).max_age, Some(60));
        assert_eq!(response(&[r#"max-age="60""#]).max_age, Some(60));
    }

    #[test]
    fn huge_delta_seconds_are_capped_at_two_to_the_31() {
        assert_eq!(
            response(&["max-age=99999999999999999999999"]).max_age,
            Some(1 << 31)
        );
    }

    #[test]
    fn unknown_directives_and_empty_elements_are_ignored() {
        let control = response(&[",, foo=bar, immutable ,, no-store"]);
        assert!(control.no_store);
        assert!(control.present);
    }

    #[test]
    fn a_request_s_directives() {
        let control = request(&["max-age=10, max-stale, min-fresh=3, only-if-cached"], &[]);
        assert_eq!(control.max_age, Some(10));
        assert_eq!(control.max_stale, Some(1 << 31));
        assert_eq!(control.min_fresh, Some(3));
        assert!(control.only_if_cached);
        assert!(!control.no_cache);
    }

    #[test]
    fn pragma_no_cache_counts_only_without_cache_control() {
        assert!(request(&[], &["no-cache"]).no_cache);
        assert!(!request(&["max-age=5"], &["no-cache"]).no_cache);
        assert!(!request(&[], &["x-other"]).no_cache);
    }
}
