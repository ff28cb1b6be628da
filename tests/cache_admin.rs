//! The cache's purges through the admin API (`/api/cache/…`), against herdsman with a cached
//! pool in front of a server that counts its requests: what a purge, a ban and a tag purge take
//! out is fetched again, what they do not is still answered from the cache, and each says how
//! many responses went; a refused call says why; a purge still reaches the store after a reload.

mod admin_support;
mod common;

use admin_support::{body_of, caching_server, requests_for, Running};
use common::*;

const GZIP: &str = "Accept-Encoding: gzip\r\n";
const BR: &str = "Accept-Encoding: br\r\n";

fn cached(server: &Mock) -> Running {
    Running::start_with(
        Setup::new().admin().server("s1", server.addr),
        "[pool.cache]\n",
    )
}

/// GETs `target` for `test.local` and asserts whether the server was asked for it.
fn fetch(herdsman: &Running, server: &Mock, target: &str, extra: &str, from_server: bool) {
    let before = requests_for(server, target);
    body_of(herdsman.web, "test.local", target, extra);
    let asked = requests_for(server, target) - before;
    let expected = usize::from(from_server);
    assert_eq!(
        asked, expected,
        "{target} {extra:?}: the server was asked {asked} times"
    );
}

#[test]
fn a_purged_url_goes_with_all_its_variants_and_nothing_else() {
    let server = caching_server();
    let herdsman = cached(&server);
    for extra in [GZIP, BR, ""] {
        fetch(&herdsman, &server, "/a?x=1", extra, true);
        fetch(&herdsman, &server, "/a?x=1", extra, false);
    }
    fetch(&herdsman, &server, "/a?x=10", "", true);
    fetch(&herdsman, &server, "/a/b", "", true);

    // Only https named: the responses were fetched over http.
    let (status, json) = herdsman.api(
        "POST",
        "/api/cache/purge",
        Some(r#"{"url":"https://test.local/a?x=1"}"#),
    );
    assert_eq!((status, json["purged"].as_u64()), (200, Some(0)), "{json}");
    let (status, json) = herdsman.api(
        "POST",
        "/api/cache/purge",
        Some(r#"{"url":"TEST.local/a?x=1"}"#),
    );
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["purged"], 3, "three variants: {json}");
    assert_eq!(json["pools"], serde_json::json!(["app"]), "{json}");
    for extra in [GZIP, BR, ""] {
        fetch(&herdsman, &server, "/a?x=1", extra, true);
    }
    // Neither another query nor a longer path is the same URL.
    fetch(&herdsman, &server, "/a?x=10", "", false);
    fetch(&herdsman, &server, "/a/b", "", false);
}

#[test]
fn a_ban_takes_a_host_s_paths_under_a_prefix() {
    let server = caching_server();
    let herdsman = cached(&server);
    for target in ["/img/1", "/img/2?s=3", "/imgs", "/doc"] {
        fetch(&herdsman, &server, target, "", true);
    }
    let elsewhere = body_of(herdsman.web, "other.example", "/img/1", "");
    let (status, json) = herdsman.api(
        "POST",
        "/api/cache/ban",
        Some(r#"{"host":"test.local","path_prefix":"/img/"}"#),
    );
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["purged"], 2, "{json}");
    fetch(&herdsman, &server, "/img/1", "", true);
    fetch(&herdsman, &server, "/img/2?s=3", "", true);
    fetch(&herdsman, &server, "/imgs", "", false);
    fetch(&herdsman, &server, "/doc", "", false);
    assert_eq!(
        body_of(herdsman.web, "other.example", "/img/1", ""),
        elsewhere,
        "another host's response stays"
    );
    // Without a prefix, the whole host.
    let (status, json) = herdsman.api("POST", "/api/cache/ban", Some(r#"{"host":"test.local"}"#));
    assert_eq!((status, json["purged"].as_u64()), (200, Some(4)), "{json}");
}

#[test]
fn a_tag_purge_takes_every_response_carrying_the_tag() {
    let server = caching_server();
    let herdsman = cached(&server);
    for target in ["/t/red/1", "/t/red/2", "/t/blue/1", "/c/red/3", "/plain"] {
        fetch(&herdsman, &server, target, "", true);
    }
    fetch(&herdsman, &server, "/t/red/1", GZIP, true);
    let (status, json) = herdsman.api("POST", "/api/cache/purge-tag", Some(r#"{"tag":"red"}"#));
    assert_eq!(status, 200, "{json}");
    assert_eq!(
        json["purged"], 4,
        "Surrogate-Key and Cache-Tag alike: {json}"
    );
    for target in ["/t/red/1", "/t/red/2", "/c/red/3"] {
        fetch(&herdsman, &server, target, "", true);
    }
    fetch(&herdsman, &server, "/t/blue/1", "", false);
    fetch(&herdsman, &server, "/plain", "", false);
    let (_, json) = herdsman.api("POST", "/api/cache/purge-tag", Some(r#"{"tag":"all"}"#));
    assert_eq!(json["purged"], 1, "{json}");
    let (_, json) = herdsman.api("POST", "/api/cache/purge-tag", Some(r#"{"tag":"nobody"}"#));
    assert_eq!(json["purged"], 0, "{json}");
}

#[test]
fn refused_calls_say_why() {
    let server = caching_server();
    let herdsman = cached(&server);
    for (path, body, status, expected) in [
        ("/api/cache/purge", "", 400, "the body is empty"),
        (
            "/api/cache/purge",
            r#"{"url":"test.local"}"#,
            400,
            "has no path",
        ),
        ("/api/cache/purge", r#"{"url":"ftp://h/a"}"#, 400, "scheme"),
        (
            "/api/cache/purge",
            r#"{"url":"http://h/a b"}"#,
            400,
            "a space",
        ),
        ("/api/cache/purge", r#"{"url":7}"#, 400, "send a string"),
        (
            "/api/cache/purge",
            r#"{"path":"/a"}"#,
            400,
            r#"unknown field "path""#,
        ),
        (
            "/api/cache/purge",
            r#"{"url":"h/a","pool":"nope"}"#,
            404,
            r#"no pool named "nope""#,
        ),
        (
            "/api/cache/ban",
            r#"{"path_prefix":"/a"}"#,
            400,
            r#"the field "host" is missing"#,
        ),
        (
            "/api/cache/ban",
            r#"{"host":"h","path_prefix":"a"}"#,
            400,
            "starts with /",
        ),
        (
            "/api/cache/purge-tag",
            r#"{"tag":"a b"}"#,
            400,
            "is not one tag",
        ),
        (
            "/api/cache/purge-tag",
            r#"{"tag":""}"#,
            400,
            "is not one tag",
        ),
    ] {
        let (got, json) = herdsman.api("POST", path, Some(body));
        assert_eq!(got, status, "{path} {body}: {json}");
        let message = json["error"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{path} {body}: {message:?}");
    }
    let (status, json) = herdsman.api("GET", "/api/cache/purge", None);
    assert_eq!(status, 405, "{json}");

    // A herdsman whose pool does not cache has nothing to purge.
    let plain = Running::start(Setup::new().admin().server("s1", server.addr));
    let (status, json) = plain.api("POST", "/api/cache/purge-tag", Some(r#"{"tag":"a"}"#));
    assert_eq!(status, 409, "{json}");
    assert!(
        json["error"].as_str().unwrap().contains("[pool.cache]"),
        "{json}"
    );
}

#[test]
fn a_purge_reaches_the_cache_a_reload_kept() {
    let server = caching_server();
    let other = Mock::named("other");
    let herdsman = cached(&server);
    fetch(&herdsman, &server, "/kept", "", true);
    // A reload that leaves the cache's config alone keeps the store.
    herdsman.reconfigure(|text| {
        assert!(text.contains("]\n[pool.cache]"), "{text}");
        text.replace(
            "]\n[pool.cache]",
            &format!(
                "  {{ name = \"s2\", addr = \"{}\", weight = 0 }},\n]\n[pool.cache]",
                other.addr
            ),
        )
    });
    fetch(&herdsman, &server, "/kept", "", false);
    let (status, json) = herdsman.api(
        "POST",
        "/api/cache/purge",
        Some(r#"{"url":"test.local/kept"}"#),
    );
    assert_eq!((status, json["purged"].as_u64()), (200, Some(1)), "{json}");
    fetch(&herdsman, &server, "/kept", "", true);
}
