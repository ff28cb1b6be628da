//! Response compression over real sockets: each algorithm decodes (with the same crates) to the
//! server's exact bytes, for raw requests, curl's `--compressed` and an HTTP/2 client; the
//! client's q-values and `identity`; the answers left as they were (small, encoded, ranged,
//! `no-transform`, HEAD, 304, types not listed, a route that turns it off); `Vary` added and the
//! ETag weakened; an event stream's first event decoded before the server sends the second; a
//! bad `[compression]` refused with key and line, at a check and at a reload.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use herdsman::stats::compression::Skipped;

/// The page the server answers with: 20 KiB of HTML that compresses well.
fn page() -> Vec<u8> {
    (0..400)
        .map(|i| format!("<p>line {i}: the quick brown fox jumps over the lazy dog</p>\n"))
        .collect::<String>()
        .into_bytes()
}

/// Answers by path, each as its name says; `/events` writes one event, waits for `gate`, then
/// the second.
fn backend(gate: Gate) -> Mock {
    Mock::start(move |ex| {
        let target = ex.head.target().to_string();
        let head_only = ex.head.method() == "HEAD";
        let html = [("Content-Type", "text/html; charset=utf-8")];
        match target.as_str() {
            "/page" | "/plain/page" => {
                let fields = [
                    ("Content-Type", "text/html"),
                    ("ETag", "\"v1\""),
                    ("Vary", "Cookie"),
                ];
                if ex.head.header("if-none-match") == Some("\"v1\"") {
                    ex.write(b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Type: text/html\r\n\r\n")?;
                } else if head_only {
                    let length = page().len();
                    ex.write(format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {length}\r\n\r\n").as_bytes())?;
                } else if ex.head.header("range").is_some() {
                    ex.write(b"HTTP/1.1 206 Partial Content\r\nContent-Type: text/html\r\nContent-Range: bytes 0-9/24000\r\nContent-Length: 10\r\n\r\n")?;
                    ex.write(&page()[..10])?;
                } else {
                    ex.respond(200, &fields, &page())?;
                }
            }
            "/chunked" => {
                ex.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")?;
                for piece in page().chunks(3000) {
                    ex.write(format!("{:x}\r\n", piece.len()).as_bytes())?;
                    ex.write(piece)?;
                    ex.write(b"\r\n")?;
                }
                ex.write(b"0\r\n\r\n")?;
            }
            "/small" => ex.respond(200, &html, b"<p>short</p>")?,
            "/encoded" => ex.respond(
                200,
                &[("Content-Type", "text/html"), ("Content-Encoding", "gzip")],
                &page(),
            )?,
            "/image" => ex.respond(200, &[("Content-Type", "image/png")], &page())?,
            "/no-transform" => ex.respond(
                200,
                &[
                    ("Content-Type", "text/html"),
                    ("Cache-Control", "public, no-transform"),
                ],
                &page(),
            )?,
            "/events" => {
                ex.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")?;
                let first = b"data: first\n\n";
                ex.write(format!("{:x}\r\n", first.len()).as_bytes())?;
                ex.write(first)?;
                ex.write(b"\r\n")?;
                if !gate.wait(Duration::from_secs(10)) {
                    return Ok(Flow::Close);
                }
                let second = b"data: second\n\n";
                ex.write(format!("{:x}\r\n", second.len()).as_bytes())?;
                ex.write(second)?;
                ex.write(b"\r\n0\r\n\r\n")?;
            }
            _ => ex.respond(404, &html, b"none")?,
        }
        Ok(Flow::KeepAlive)
    })
}

/// The config: `[compression]` enabled with `extra` keys, a listener taking h2c too, and a
/// route under `/plain/` that turns compression off.
fn config(backend: &Mock, extra: &str) -> String {
    format!(
        r#"workers = 1

[[listener]]
name = "web"
bind = "127.0.0.1:0"
pool = "app"
h2c = true

[compression]
enabled = true
{extra}

[[pool]]
name = "app"
servers = [{{ name = "a", addr = "{}" }}]

[[route]]
path_prefix = "/plain/"
pool = "app"
compression = {{ enabled = false }}
"#,
        backend.addr
    )
}

/// `bytes` decoded as `coding` (`zstd`, `br`, `gzip`) wrote them.
fn decoded(coding: &str, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "zstd" => zstd::stream::read::Decoder::new(bytes)
            .unwrap()
            .read_to_end(&mut out),
        "br" => brotli::Decompressor::new(bytes, 4096).read_to_end(&mut out),
        "gzip" => flate2::read::GzDecoder::new(bytes).read_to_end(&mut out),
        other => panic!("no such coding {other}"),
    }
    .unwrap_or_else(|e| panic!("{coding} does not decode: {e}"));
    out
}

/// GET (or `method`) `path` with `extra` fields on a new connection.
fn fetch(proxy: &Proxy, method: &str, path: &str, extra: &str) -> Response {
    let request =
        format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n");
    let mut conn = proxy.connect();
    conn.send(request.as_bytes());
    conn.read_response(method == "HEAD").expect("a response")
}

fn skipped(proxy: &Proxy, why: Skipped) -> u64 {
    proxy.server().stats().compression_report().skipped[why as usize]
}

#[test]
fn each_algorithm_decodes_to_the_servers_exact_bytes() {
    let server = backend(Gate::new());
    let proxy = Proxy::start(&config(&server, ""));
    for coding in ["zstd", "br", "gzip"] {
        for path in ["/page", "/chunked"] {
            let answer = fetch(
                &proxy,
                "GET",
                path,
                &format!("Accept-Encoding: {coding}\r\n"),
            );
            assert_eq!(answer.status(), 200);
            assert_eq!(answer.header("content-encoding"), Some(coding), "{path}");
            assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
            assert_eq!(answer.header("content-length"), None);
            assert!(
                answer.body.len() < page().len() / 4,
                "{coding} {path}: {}",
                answer.body.len()
            );
            assert_eq!(decoded(coding, &answer.body), page(), "{coding} {path}");
            let vary = answer.head.header_all("vary");
            assert!(vary.contains(&"Accept-Encoding"), "{vary:?}");
            if path == "/page" {
                assert!(vary.contains(&"Cookie"), "{vary:?}");
                assert_eq!(answer.header("etag"), Some("W/\"v1\""));
            }
        }
    }
    // Counted once each answer ended, which may be just after the client read its end.
    let counted = || proxy.server().stats().compression_report().compressed == [2, 2, 2];
    assert!(eventually(Duration::from_secs(5), counted));
    let report = proxy.server().stats().compression_report();
    assert_eq!(report.bytes_in, [2 * page().len() as u64; 3]);
    assert!(report
        .bytes_out
        .iter()
        .all(|&out| out > 0 && out < page().len() as u64));
}

#[test]
fn an_http10_client_gets_the_compressed_body_until_the_close() {
    let server = backend(Gate::new());
    let proxy = Proxy::start(&config(&server, ""));
    let mut conn = proxy.connect();
    conn.send(b"GET /chunked HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n");
    let answer = conn.response();
    assert_eq!(answer.header("content-encoding"), Some("gzip"));
    assert_eq!(answer.header("transfer-encoding"), None);
    assert_eq!(decoded("gzip", &answer.body), page());
}

#[test]
fn curl_and_an_http2_client_get_compressed_answers() {
    let server = backend(Gate::new());
    let proxy = Proxy::start(&config(&server, ""));
    let url = format!("http://{}/page", proxy.addr);
    let (status, body) = curl(&["--compressed"], &url, None);
    assert_eq!((status.as_str(), body), ("1.1 200", page()));
    // Over HTTP/2 the chunks become DATA frames; the coding is decoded here, not by curl.
    for coding in ["zstd", "br", "gzip"] {
        let accept = format!("Accept-Encoding: {coding}");
        let args = ["--http2-prior-knowledge", "-H", &accept];
        let (status, body) = curl(&args, &url, None);
        assert_eq!(status, "2 200");
        assert_eq!(decoded(coding, &body), page(), "{coding}");
    }
}

#[test]
fn q_values_and_identity_decide_and_the_server_order_breaks_ties() {
    let server = backend(Gate::new());
    let proxy = Proxy::start(&config(&server, ""));
    let coding = |accept: &str| {
        let answer = fetch(
            &proxy,
            "GET",
            "/page",
            &format!("Accept-Encoding: {accept}\r\n"),
        );
        let coding = answer.header("content-encoding").map(str::to_string);
        let body = match &coding {
            Some(coding) => decoded(coding, &answer.body),
            None => answer.body.clone(),
        };
        assert_eq!(body, page(), "{accept}");
        coding
    };
    assert_eq!(coding("gzip, deflate, br, zstd").as_deref(), Some("zstd"));
    assert_eq!(coding("gzip;q=0.5, br;q=0.9").as_deref(), Some("br"));
    assert_eq!(coding("identity;q=0, gzip").as_deref(), Some("gzip"));
    assert_eq!(coding("zstd;q=0, *").as_deref(), Some("br"));
    assert_eq!(coding("identity;q=1, gzip;q=0.1"), None);
    assert_eq!(coding("gzip;q=0, deflate"), None);
    let plain = fetch(&proxy, "GET", "/page", "");
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(
        plain.header("content-length"),
        Some(page().len().to_string().as_str())
    );
    assert_eq!(plain.header("etag"), Some("\"v1\""));
    assert_eq!(skipped(&proxy, Skipped::NotAccepted), 3);
    // The route's own order: gzip before the others.
    let proxy = Proxy::start(&config(&server, "algorithms = [\"gzip\", \"br\"]"));
    let answer = fetch(
        &proxy,
        "GET",
        "/page",
        "Accept-Encoding: zstd, br, gzip\r\n",
    );
    assert_eq!(answer.header("content-encoding"), Some("gzip"));
}

#[test]
fn answers_that_must_not_be_compressed_go_as_the_server_sent_them() {
    let server = backend(Gate::new());
    let proxy = Proxy::start(&config(&server, ""));
    let accept = "Accept-Encoding: gzip, br, zstd\r\n";
    let cases = [
        ("GET", "/small", "", Skipped::TooSmall),
        ("GET", "/encoded", "", Skipped::Encoded),
        ("GET", "/image", "", Skipped::Type),
        ("GET", "/no-transform", "", Skipped::NoTransform),
        ("GET", "/page", "Range: bytes=0-9\r\n", Skipped::Range),
        ("GET", "/page", "If-None-Match: \"v1\"\r\n", Skipped::Status),
        ("HEAD", "/page", "", Skipped::Head),
    ];
    for (method, path, extra, why) in cases {
        let answer = fetch(&proxy, method, path, &format!("{accept}{extra}"));
        let ours = answer
            .header("content-encoding")
            .filter(|c| *c != "gzip" || path != "/encoded");
        assert_eq!(ours, None, "{method} {path} {extra}");
        assert!(
            answer.head.header("vary").is_none_or(|v| v == "Cookie"),
            "{path}"
        );
        assert_eq!(skipped(&proxy, why), 1, "{why:?}");
        if method == "GET" && !extra.is_empty() {
            continue;
        }
        let expected = match path {
            "/small" => b"<p>short</p>".to_vec(),
            _ if method == "HEAD" => Vec::new(),
            _ => page(),
        };
        assert_eq!(answer.body, expected, "{method} {path}");
        if method == "GET" {
            assert_eq!(
                answer.header("content-length"),
                Some(expected.len().to_string().as_str())
            );
        }
    }
    assert_eq!(
        fetch(
            &proxy,
            "GET",
            "/page",
            "If-None-Match: \"v1\"\r\nAccept-Encoding: gzip\r\n"
        )
        .status(),
        304
    );
    // The route that turns it off.
    let answer = fetch(&proxy, "GET", "/plain/page", accept);
    assert_eq!(answer.header("content-encoding"), None);
    assert_eq!(answer.body, page());
}

#[test]
fn an_event_stream_gets_each_event_before_the_server_sends_the_next() {
    for coding in ["zstd", "br", "gzip"] {
        let gate = Gate::new();
        let server = backend(gate.clone());
        let proxy = Proxy::start(&config(&server, ""));
        let mut conn = proxy.connect();
        conn.send(
            format!("GET /events HTTP/1.1\r\nHost: t\r\nAccept-Encoding: {coding}\r\n\r\n")
                .as_bytes(),
        );
        let head = conn.response_head();
        assert_eq!(head.header("content-encoding"), Some(coding));
        let mut decoder = StreamDecoder::new(coding);
        // Chunk by chunk until the first event decodes: the server holds the second until then.
        while decoder.text().is_empty() {
            let size = String::from_utf8(conn.read_line().unwrap()).unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            assert_ne!(size, 0, "{coding}: the body ended before its first event");
            decoder.feed(&conn.read_exact_vec(size).unwrap());
            assert!(conn.read_line().unwrap().is_empty());
        }
        assert_eq!(decoder.text(), b"data: first\n\n", "{coding}");
        gate.open();
        let mut rest = Vec::new();
        conn.read_chunked_with(&mut |bytes| rest.extend_from_slice(bytes))
            .unwrap();
        decoder.feed(&rest);
        assert_eq!(
            decoder.text(),
            b"data: first\n\ndata: second\n\n",
            "{coding}"
        );
    }
}

/// A decoder fed compressed bytes as they come, holding what they decode to so far.
enum StreamDecoder {
    Zstd(zstd::stream::write::Decoder<'static, Vec<u8>>),
    Brotli(Box<brotli::DecompressorWriter<Vec<u8>>>),
    Gzip(Box<flate2::write::GzDecoder<Vec<u8>>>),
}

impl StreamDecoder {
    fn new(coding: &str) -> StreamDecoder {
        match coding {
            "zstd" => StreamDecoder::Zstd(zstd::stream::write::Decoder::new(Vec::new()).unwrap()),
            "br" => {
                StreamDecoder::Brotli(Box::new(brotli::DecompressorWriter::new(Vec::new(), 4096)))
            }
            _ => StreamDecoder::Gzip(Box::new(flate2::write::GzDecoder::new(Vec::new()))),
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        let writer: &mut dyn Write = match self {
            StreamDecoder::Zstd(decoder) => decoder,
            StreamDecoder::Brotli(decoder) => decoder.as_mut(),
            StreamDecoder::Gzip(decoder) => decoder.as_mut(),
        };
        writer
            .write_all(bytes)
            .and_then(|()| writer.flush())
            .unwrap();
    }

    fn text(&self) -> &[u8] {
        match self {
            StreamDecoder::Zstd(decoder) => decoder.get_ref(),
            StreamDecoder::Brotli(decoder) => decoder.get_ref(),
            StreamDecoder::Gzip(decoder) => decoder.get_ref(),
        }
    }
}

#[test]
fn a_bad_compression_table_is_refused_with_key_and_line_and_a_reload_keeps_the_old_one() {
    let server = backend(Gate::new());
    let bad = config(&server, "algorithms = [\"gzip\", \"lz4\"]");
    let line = bad[..bad.find("algorithms").unwrap()].matches('\n').count() + 1;
    let path = write_temp("compression-bad.toml", &bad);
    let (code, out) = run_binary(&["check", "-c", path.to_str().unwrap()]);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!(
            "line {line}: compression.algorithms = \"lz4\": not an algorithm"
        )),
        "{out}"
    );
    let proxy = Proxy::start_from_file(&config(&server, ""));
    let refused = proxy
        .reload_with(&bad)
        .expect_err("a bad algorithm is refused");
    assert!(
        refused.to_string().contains("compression.algorithms"),
        "{refused}"
    );
    let answer = fetch(&proxy, "GET", "/page", "Accept-Encoding: gzip\r\n");
    assert_eq!(answer.header("content-encoding"), Some("gzip"));
    let route_level = config(&server, "").replace("enabled = false }", "gzip_level = 10 }");
    let refused = proxy
        .reload_with(&route_level)
        .expect_err("level 10 is refused");
    assert!(
        refused
            .to_string()
            .contains("route[0].compression.gzip_level"),
        "{refused}"
    );
}
