//! Whether a request meets a route's `when`: a walk of the compiled condition over the parsed
//! head (method, header fields, query, cookies) and the client's address. No allocation: each
//! test reads the head where it lies, regexes were compiled at load.

use std::net::IpAddr;

use crate::config::condition::{Condition, FieldTest};
use crate::http1::Request;

/// Whether `request`, from `client`, meets `condition`.
pub fn holds(condition: &Condition, request: &Request<'_, '_>, client: IpAddr) -> bool {
    match condition {
        Condition::Method(methods) => methods
            .iter()
            .any(|method| &**method == request.method_text),
        Condition::Header(name, test) => passes(test, request.header(name)),
        Condition::Query(name, test) => passes(test, request.query_parameter(name)),
        Condition::Cookie(name, test) => passes(test, request.cookie(name)),
        Condition::Client(networks) => networks.contains(client),
        Condition::All(all) => all.iter().all(|each| holds(each, request, client)),
        Condition::Any(any) => any.iter().any(|each| holds(each, request, client)),
        Condition::Not(inner) => !holds(inner, request, client),
    }
}

/// Whether a field's value (`None`: the field is absent) passes `test`; an absent field passes
/// only `present = false`.
fn passes(test: &FieldTest, value: Option<&[u8]>) -> bool {
    match (test, value) {
        (FieldTest::Present(present), value) => *present == value.is_some(),
        (_, None) => false,
        (FieldTest::Equals(expected), Some(value)) => **expected == *value,
        (FieldTest::Prefix(prefix), Some(value)) => value.starts_with(prefix),
        (FieldTest::Matches(pattern), Some(value)) => pattern.0.is_match(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cidr::AddressSet;
    use crate::config::condition::Pattern;
    use crate::http1::{header_slots, parse_request};

    fn meets(condition: &Condition, head: &str, client: &str) -> bool {
        let mut headers = header_slots();
        let text = format!("{head}\r\n\r\n");
        let request = parse_request(text.as_bytes(), &mut headers, 8192)
            .unwrap()
            .unwrap();
        holds(condition, &request, client.parse().unwrap())
    }

    #[test]
    fn each_test_reads_its_part_of_the_request() {
        let get = "GET /a?v=2.1 HTTP/1.1\r\nHost: h\r\nX-Beta: yes\r\nCookie: s=abc";
        let post = "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0";
        let header = |test| Condition::Header("x-beta".into(), test);
        let regex = |text| FieldTest::Matches(Pattern(regex::bytes::Regex::new(text).unwrap()));
        let cases = [
            (
                Condition::Method(["GET".into(), "HEAD".into()].into()),
                true,
                false,
            ),
            (header(FieldTest::Present(true)), true, false),
            (header(FieldTest::Present(false)), false, true),
            (header(FieldTest::Equals((*b"yes").into())), true, false),
            (header(FieldTest::Prefix((*b"y").into())), true, false),
            (header(regex("^y.s$")), true, false),
            (header(regex("^no")), false, false),
            (
                Condition::Query("v".into(), FieldTest::Prefix((*b"2.").into())),
                true,
                false,
            ),
            (
                Condition::Cookie("s".into(), FieldTest::Equals((*b"abc").into())),
                true,
                false,
            ),
            (
                Condition::Cookie("S".into(), FieldTest::Present(true)),
                false,
                false,
            ),
            (
                Condition::Client(AddressSet::parse(["10.0.0.0/8"]).unwrap()),
                true,
                true,
            ),
        ];
        for (condition, on_get, on_post) in cases {
            assert_eq!(meets(&condition, get, "10.1.1.1"), on_get, "{condition:?}");
            assert_eq!(
                meets(&condition, post, "10.1.1.1"),
                on_post,
                "{condition:?}"
            );
        }
        let office = Condition::Client(AddressSet::parse(["10.0.0.0/8"]).unwrap());
        assert!(!meets(&office, get, "192.0.2.1"));
    }

    #[test]
    fn all_any_and_not_combine() {
        let get = "GET / HTTP/1.1\r\nHost: h";
        let method = |name: &str| Condition::Method([name.into()].into());
        let all = Condition::All([method("GET"), method("POST")].into());
        let any = Condition::Any([method("GET"), method("POST")].into());
        assert!(!meets(&all, get, "::1"));
        assert!(meets(&any, get, "::1"));
        assert!(meets(&Condition::Not(Box::new(all)), get, "::1"));
        assert!(!meets(&Condition::Not(Box::new(any)), get, "::1"));
    }
}
