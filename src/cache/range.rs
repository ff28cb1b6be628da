//! Range requests answered from a complete stored object (RFC 9110 §14): one byte range gives
//! a 206 with that part, a range past the end a 416; several ranges, a range in another unit,
//! or an `If-Range` the object does not match get the whole object, as a server may answer.

use super::freshness::http_date;
use super::object::Object;

/// What part of a stored body a request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Whole,
    /// Bytes `from..=to` of the body.
    Bytes {
        from: u64,
        to: u64,
    },
    /// The range starts past the body's end.
    Unsatisfiable,
}

/// The part of `object`'s body that a request with `range` (and `if_range`) asks for.
pub fn requested_part(range: &[u8], if_range: Option<&[u8]>, object: &Object) -> Part {
    if let Some(condition) = if_range {
        if !if_range_holds(condition.trim_ascii(), object) {
            return Part::Whole;
        }
    }
    let length = object.body.len() as u64;
    let Some(spec) = range.trim_ascii().strip_prefix(b"bytes=") else {
        return Part::Whole;
    };
    if spec.contains(&b',') {
        return Part::Whole;
    }
    let Some(dash) = spec.iter().position(|&byte| byte == b'-') else {
        return Part::Whole;
    };
    let (first, last) = (spec[..dash].trim_ascii(), spec[dash + 1..].trim_ascii());
    let number = |digits: &[u8]| -> Option<u64> {
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    match (first.is_empty(), last.is_empty()) {
        // `bytes=-N`: the last N bytes.
        (true, false) => match number(last) {
            Some(0) => Part::Unsatisfiable,
            Some(suffix) if length > 0 => Part::Bytes {
                from: length.saturating_sub(suffix),
                to: length - 1,
            },
            Some(_) => Part::Unsatisfiable,
            None => Part::Whole,
        },
        (false, _) => {
            let Some(from) = number(first) else {
                return Part::Whole;
            };
            let to = match last.is_empty() {
                true => u64::MAX,
                false => match number(last) {
                    Some(to) if to >= from => to,
                    _ => return Part::Whole,
                },
            };
            if from >= length {
                return Part::Unsatisfiable;
            }
            Part::Bytes {
                from,
                to: to.min(length - 1),
            }
        }
        (true, true) => Part::Whole,
    }
}

/// `If-Range` (RFC 9110 §13.1.5): an entity tag matches the object's strongly; a date matches
/// its `Last-Modified` exactly.
fn if_range_holds(condition: &[u8], object: &Object) -> bool {
    if condition.starts_with(b"\"") {
        return object
            .etag
            .as_deref()
            .is_some_and(|etag| etag == condition && !etag.starts_with(b"W/"));
    }
    if condition.starts_with(b"W/") {
        return false;
    }
    http_date(condition).is_some_and(|date| object.last_modified == Some(date))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object() -> Object {
        let mut object = Object::for_test(b"k", b"0123456789".to_vec());
        object.etag = Some((*b"\"v1\"").into());
        object
    }

    #[test]
    fn one_range_is_a_part_of_the_body() {
        let object = object();
        let part = |range: &str| requested_part(range.as_bytes(), None, &object);
        assert_eq!(part("bytes=2-4"), Part::Bytes { from: 2, to: 4 });
        assert_eq!(part("bytes=7-"), Part::Bytes { from: 7, to: 9 });
        assert_eq!(part("bytes=-3"), Part::Bytes { from: 7, to: 9 });
        assert_eq!(part("bytes=-30"), Part::Bytes { from: 0, to: 9 });
        assert_eq!(part("bytes=5-100"), Part::Bytes { from: 5, to: 9 });
        assert_eq!(part("bytes=10-"), Part::Unsatisfiable);
        assert_eq!(part("bytes=-0"), Part::Unsatisfiable);
        for whole in [
            "bytes=0-1,4-5",
            "items=0-1",
            "bytes=4-2",
            "bytes=x-1",
            "bytes=-",
        ] {
            assert_eq!(part(whole), Part::Whole, "{whole}");
        }
    }

    #[test]
    fn if_range_must_match_strongly() {
        let object = object();
        let part =
            |condition: &str| requested_part(b"bytes=0-0", Some(condition.as_bytes()), &object);
        assert_eq!(part("\"v1\""), Part::Bytes { from: 0, to: 0 });
        assert_eq!(part("\"v2\""), Part::Whole);
        assert_eq!(part("W/\"v1\""), Part::Whole);
        assert_eq!(part("Sun, 06 Nov 1994 08:49:37 GMT"), Part::Whole);
    }
}
