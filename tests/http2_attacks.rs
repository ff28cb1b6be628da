//! HTTP/2 attacks from one connection, each written frame by frame over 127.0.0.1 against herdsman
//! in front of an in-process HTTP/1.1 mock: floods of frames that ask nothing (SETTINGS, PING,
//! PRIORITY, WINDOW_UPDATE, empty DATA), CONTINUATION without end, HPACK bombs, a rapid reset of
//! streams a server already works on, a stream never read and a slow reader. Each asserts what an
//! operator would see: the attacker's connection ends with the GOAWAY its attack calls for within
//! a bounded number of frames, `/metrics` counts it, the server saw nothing it should not have
//! (or saw its requests cancelled), and another client on another connection is served while it
//! lasts. curl must be installed (`scripts/test` installs it).

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;

/// herdsman with an admin API and `h2c = true` in front of `server`, `setup`'s settings and
/// `extra` (whole sections, such as `[http2]`) added.
fn start(server: &Mock, setup: Setup, extra: &str) -> Proxy {
    let text = setup
        .server("a", server.addr)
        .admin()
        .toml("127.0.0.1:0")
        .replacen("pool = \"app\"\n\n", "pool = \"app\"\nh2c = true\n\n", 1);
    Proxy::start(&format!("{text}\n{extra}"))
}

/// Asserts that the `/metrics` samples `name` with `label` come to `expected` within 2 s: a
/// connection's end is counted a moment after its GOAWAY goes.
fn assert_metric(proxy: &Proxy, name: &str, label: &str, expected: f64) {
    let counted = eventually(Duration::from_secs(2), || {
        metric(proxy, name, label) == expected
    });
    assert!(
        counted,
        "{name} {label}: {} where {expected} was expected",
        metric(proxy, name, label)
    );
}

/// Another client, on connections of its own, asking for `/` over and over (curl, HTTP/2 with
/// prior knowledge) until stopped, at least once after the stop: what it got each time.
struct Bystander {
    stop: Arc<AtomicBool>,
    asking: JoinHandle<Vec<(String, Vec<u8>)>>,
}

impl Bystander {
    fn start(proxy: &Proxy) -> Bystander {
        let addr = proxy.addr;
        let stop = Arc::new(AtomicBool::new(false));
        let asking = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                loop {
                    let stopped = stop.load(Ordering::SeqCst);
                    answers.push(h2c_get(addr, "/"));
                    if stopped {
                        return answers;
                    }
                }
            })
        };
        Bystander { stop, asking }
    }

    /// Stops it; asserts every answer it got was the server's.
    fn assert_served(self, body: &[u8]) {
        self.stop.store(true, Ordering::SeqCst);
        let answers = self.asking.join().expect("the other client");
        for (status, got) in &answers {
            assert!(
                status == "2 200" && got == body,
                "the other client got {status} and {} bytes",
                got.len()
            );
        }
    }
}

/// What every flood of frames that ask nothing must come to: GOAWAY ENHANCE_YOUR_CALM once the
/// budget (1,000 frames by default) is spent — within twice that — counted as a flood, nothing
/// for the server, and the other client served throughout. `opening` follows the preface.
fn assert_flood_ends_in_calm(opening: &[u8], frame: impl FnMut(usize) -> Vec<u8>) {
    let server = Mock::named("hello");
    let proxy = start(&server, Setup::new(), "");
    let bystander = Bystander::start(&proxy);
    let opening = [PREFACE_AND_SETTINGS, opening].concat();
    let attacked = attack(proxy.addr, &opening, frame, 20_000);
    bystander.assert_served(b"hello");
    assert_eq!(
        attacked.goaway,
        Some(ENHANCE_YOUR_CALM),
        "{} frames sent",
        attacked.frames_sent
    );
    assert!(
        attacked.frames_sent <= 2_000,
        "the budget of 1,000 let {} through",
        attacked.frames_sent
    );
    assert!(
        attacked.took < Duration::from_secs(3),
        "{:?}",
        attacked.took
    );
    assert_metric(&proxy, "herdsman_worker_http2_floods_total", "", 1.0);
    assert_metric(
        &proxy,
        "herdsman_worker_http2_goaways_sent_total",
        "code=\"ENHANCE_YOUR_CALM\"",
        1.0,
    );
    // Only the other client's requests reached the server.
    assert!(server.targets().iter().all(|t| t == "/"));
    assert!(server.heads().iter().all(|h| h
        .header("user-agent")
        .is_some_and(|ua| ua.starts_with("curl"))));
}

#[test]
fn a_settings_flood_gets_goaway_enhance_your_calm() {
    // Each SETTINGS (MAX_CONCURRENT_STREAMS 100) makes herdsman write an ACK.
    assert_flood_ends_in_calm(&[], |_| frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]));
}

#[test]
fn a_ping_flood_gets_goaway_enhance_your_calm_within_its_budget() {
    assert_flood_ends_in_calm(&[], |i| frame(PING, 0, 0, &(i as u64).to_be_bytes()));
}

#[test]
fn a_priority_flood_gets_goaway_enhance_your_calm() {
    // PRIORITY for ever new idle streams: each one state the server would keep.
    assert_flood_ends_in_calm(&[], |i| {
        frame(PRIORITY, 0, 2 * i as u32 + 1, &[0, 0, 0, 0, 16])
    });
}

#[test]
fn a_window_update_flood_gets_goaway_enhance_your_calm() {
    assert_flood_ends_in_calm(&[], |_| frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()));
}

#[test]
fn an_empty_data_flood_gets_goaway_enhance_your_calm() {
    // A POST whose body never comes: empty DATA frames without END_STREAM. herdsman reads a body
    // whole before it involves a server, so the server hears nothing of it.
    let post = [&[0x83u8][..], &GET_BLOCK[1..]].concat();
    let opening = frame(HEADERS, END_HEADERS, 1, &post);
    assert_flood_ends_in_calm(&opening, |_| frame(DATA, 0, 1, &[]));
}

/// An HPACK integer (RFC 7541 §5.1): `value` with an `n`-bit prefix, `flags` in the first byte's
/// other bits.
fn hpack_int(flags: u8, n: u32, value: usize, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

#[test]
fn a_continuation_flood_gets_goaway_enhance_your_calm_after_a_few_frames() {
    let server = Mock::named("hello");
    let proxy = start(&server, Setup::new(), "");
    let bystander = Bystander::start(&proxy);
    // A HEADERS without END_HEADERS whose last field's value says it is 1 MB long, then
    // CONTINUATION frames of 16 KiB that never end it (CVE-2024-27316's family): a server that
    // buffers until the end, or decodes every frame, is the victim.
    let mut block = GET_BLOCK.to_vec();
    block.extend_from_slice(&[0x40, 1, b'x']);
    hpack_int(0, 7, 1_000_000, &mut block);
    block.extend_from_slice(&[b'a'; 100]);
    let opening = [PREFACE_AND_SETTINGS, &frame(HEADERS, END_STREAM, 1, &block)].concat();
    let filler = vec![b'a'; 16_384];
    // The eighth frame passes the bound. From the ninth on the attacker waits 10 ms a frame, so
    // that a worker the machine's other work kept off the CPU for a few milliseconds (CI's, once:
    // 13 frames at one a millisecond) is not counted as frames herdsman took.
    let attacked = attack_frame_by_frame(
        proxy.addr,
        &opening,
        |i| {
            if i >= 8 {
                std::thread::sleep(Duration::from_millis(10));
            }
            frame(CONTINUATION, 0, 1, &filler)
        },
        1000,
    );
    bystander.assert_served(b"hello");
    assert_eq!(attacked.goaway, Some(ENHANCE_YOUR_CALM), "{attacked:?}");
    // Two header lists' worth (64 KiB each, in 16 KiB frames: 8): the attacker got no further,
    // some frames in flight aside.
    assert!(
        attacked.frames_sent <= 12,
        "{} CONTINUATION frames sent",
        attacked.frames_sent
    );
    assert_metric(&proxy, "herdsman_worker_http2_floods_total", "", 1.0);
    assert!(server.targets().iter().all(|t| t == "/"));
}

#[test]
fn a_dynamic_table_size_update_above_the_advertised_size_is_a_connection_error() {
    let server = Mock::named("hello");
    let proxy = start(&server, Setup::new(), "[http2]\nheader_table_size = 4096\n");
    // A table size update to 100,000 bytes, over the 4,096 herdsman advertised.
    let mut block = Vec::new();
    hpack_int(0x20, 5, 100_000, &mut block);
    block.extend_from_slice(GET_BLOCK);
    let opening = [
        PREFACE_AND_SETTINGS,
        &frame(HEADERS, END_STREAM | END_HEADERS, 1, &block),
    ]
    .concat();
    let attacked = attack(proxy.addr, &opening, |_| Vec::new(), 0);
    // RFC 7541 §4.2 and §6.3: a decoding error, the connection error COMPRESSION_ERROR.
    assert_eq!(attacked.goaway, Some(COMPRESSION_ERROR), "{attacked:?}");
    assert_metric(
        &proxy,
        "herdsman_worker_http2_goaways_sent_total",
        "code=\"COMPRESSION_ERROR\"",
        1.0,
    );
    assert!(server.heads().is_empty());
    assert_eq!(
        h2c_get(proxy.addr, "/"),
        ("2 200".into(), b"hello".to_vec())
    );
}

#[test]
fn an_hpack_bomb_gets_431_then_goaway_and_never_reaches_the_server() {
    let server = Mock::named("hello");
    let proxy = start(&server, Setup::new(), "");
    // One 4,000-byte field put in the dynamic table, then referred to by one byte each time: a
    // few bytes that decode to a header list far over the 64 KiB allowed.
    let mut first = GET_BLOCK.to_vec();
    first.extend_from_slice(&[0x40, 6]);
    first.extend_from_slice(b"x-bomb");
    hpack_int(0, 7, 4000, &mut first);
    first.extend_from_slice(&[b'a'; 4000]);
    // 21 copies: some 85 KB decoded, over the limit but under four times it: 431 for this stream.
    first.extend_from_slice(&[0xbe; 20]);
    // 100 copies: some 400 KB, over four times the limit: the connection ends.
    let mut second = GET_BLOCK.to_vec();
    second.extend_from_slice(&[0xbe; 100]);
    let mut conn = raw_connection(proxy.addr, true);
    conn.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &first))
        .unwrap();
    let mut frames = read_frames_until(&mut conn, |f| f.kind == HEADERS && f.stream == 1);
    let answer = frames.last().expect("an answer to stream 1");
    // `:status` (static index 8) with the value "431", a literal without indexing as herdsman's
    // encoder writes every field (it keeps no table).
    assert_eq!(
        answer.payload,
        [0x08, 0x03, b'4', b'3', b'1'],
        "431 expected: {answer:?}"
    );
    conn.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 3, &second))
        .unwrap();
    frames.extend(read_frames_until(&mut conn, |f| f.kind == GOAWAY));
    let goaway = frames.iter().find(|f| f.kind == GOAWAY).unwrap();
    assert_eq!(goaway.error_code(), Some(ENHANCE_YOUR_CALM));
    assert!(server.heads().is_empty(), "{:?}", server.targets());
    assert_metric(&proxy, "herdsman_worker_http2_floods_total", "", 1.0);
    assert_eq!(
        h2c_get(proxy.addr, "/"),
        ("2 200".into(), b"hello".to_vec())
    );
}

#[test]
fn a_rapid_reset_of_streams_a_server_works_on_cancels_them_there_and_runs_out_of_resets() {
    // A slow server: it reads the request, never answers, and notes how its connection ended.
    let reset_by_herdsman = Arc::new(AtomicUsize::new(0));
    let server = {
        let reset = Arc::clone(&reset_by_herdsman);
        Mock::start(move |ex| {
            ex.conn
                .stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut byte = [0u8; 1];
            if let Err(e) = ex.conn.stream.read(&mut byte) {
                if e.kind() == std::io::ErrorKind::ConnectionReset {
                    reset.fetch_add(1, Ordering::SeqCst);
                }
            }
            Ok(Flow::Close)
        })
    };
    let proxy = start(
        &server,
        Setup::new(),
        "[http2]\nreset_burst = 5\nresets_per_second = 0\n",
    );
    // Each stream opened, let reach the server, then reset: none is left pending in the h2
    // crate, so only the budget of resets can end this.
    let mut opened = 0;
    let attacked = attack_frame_by_frame(
        proxy.addr,
        PREFACE_AND_SETTINGS,
        |i| {
            let stream = i as u32 + 1;
            if i % 2 == 0 {
                opened += 1;
                frame(HEADERS, END_STREAM | END_HEADERS, stream, GET_BLOCK)
            } else {
                // Not asserted: once the budget is spent the GOAWAY may be on its way, and the
                // stream just opened never goes to the server (the counts below tell).
                let _ = server.wait_for_heads(opened, Duration::from_secs(2));
                frame(RST_STREAM, 0, stream - 1, &CANCEL.to_be_bytes())
            }
        },
        100,
    );
    assert_eq!(attacked.goaway, Some(ENHANCE_YOUR_CALM), "{attacked:?}");
    // Five resets allowed, the sixth ends it (a frame or two may be on their way).
    assert!(
        (12..=14).contains(&attacked.frames_sent),
        "{} frames sent",
        attacked.frames_sent
    );
    let reached = server.heads().len();
    assert!(
        (6..=7).contains(&reached),
        "{reached} requests reached the server"
    );
    // Each of them cancelled where it was: its server connection reset at once, not left to
    // answer into the void.
    assert!(
        eventually(Duration::from_secs(2), || {
            reset_by_herdsman.load(Ordering::SeqCst) == reached
        }),
        "{} of {reached} server connections reset",
        reset_by_herdsman.load(Ordering::SeqCst)
    );
    let by_client = "by=\"client\",code=\"CANCEL\"";
    assert!(eventually(Duration::from_secs(2), || {
        metric(&proxy, "herdsman_worker_http2_resets_total", by_client) >= 5.0
    }));
    assert_metric(&proxy, "herdsman_worker_http2_floods_total", "", 1.0);
}

/// A server that answers `/big` with `size` bytes, and says when it has written them all, and
/// anything else with `hello`.
fn big_answers(size: usize) -> (Mock, Arc<AtomicBool>) {
    let written = Arc::new(AtomicBool::new(false));
    let server = {
        let written = Arc::clone(&written);
        Mock::start(move |ex| {
            ex.read_body()?;
            if ex.head.target() != "/big" {
                ex.respond(200, &[], b"hello")?;
                return Ok(Flow::KeepAlive);
            }
            let body = vec![b'z'; size];
            ex.respond(200, &[], &body)?;
            written.store(true, Ordering::SeqCst);
            Ok(Flow::KeepAlive)
        })
    };
    (server, written)
}

/// The preface, SETTINGS with INITIAL_WINDOW_SIZE 0 (the client takes no byte of any response
/// until it says so), and a GET of `/big` on stream 1.
fn request_with_window_zero() -> Vec<u8> {
    let mut block = vec![0x82, 0x86];
    block.extend_from_slice(&[0x04, 4]);
    block.extend_from_slice(b"/big");
    block.extend_from_slice(&[0x01, 0x01, b'a']);
    [
        &PREFACE_AND_SETTINGS[..24],
        &frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]),
        &frame(HEADERS, END_STREAM | END_HEADERS, 1, &block),
    ]
    .concat()
}

#[test]
fn a_stream_never_read_is_reset_by_the_slow_reader_rule_and_holds_no_server() {
    let (server, written) = big_answers(2 << 20);
    let setup = Setup::new().buffering("response_min_rate_window", "\"1s\"");
    let proxy = start(&server, setup, "");
    let bystander = Bystander::start(&proxy);
    let mut conn = raw_connection(proxy.addr, false);
    conn.write_all(&request_with_window_zero()).unwrap();
    let asked = Instant::now();
    // The server is done at once: its answer waits in herdsman's spool (64 KiB in memory, the
    // rest in a file), not in the server.
    assert!(eventually(Duration::from_secs(2), || written.load(Ordering::SeqCst)));
    let memory = metric(&proxy, "herdsman_buffer_reserved_bytes", "where=\"memory\"");
    assert!(memory <= 65_536.0, "{memory} bytes of memory held");
    let frames = read_frames_until(&mut conn, |f| f.kind == RST_STREAM && f.stream == 1);
    let took = asked.elapsed();
    bystander.assert_served(b"hello");
    // A client that took nothing for `response_min_rate_window` loses its answer, as one over
    // HTTP/1.1 does: the stream is reset, the connection stays.
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "reset after {took:?}"
    );
    assert!(
        frames
            .iter()
            .all(|f| f.kind != DATA || f.payload.is_empty()),
        "DATA beyond a window of 0"
    );
    assert_metric(
        &proxy,
        "herdsman_worker_slow_response_readers_total",
        "",
        1.0,
    );
    // The connection is still served.
    let mut block = vec![0x82, 0x86, 0x84];
    block.extend_from_slice(&[0x01, 0x01, b'a']);
    conn.write_all(&frame(WINDOW_UPDATE, 0, 0, &(4u32 << 20).to_be_bytes()))
        .unwrap();
    conn.write_all(&frame(SETTINGS, 0, 0, &[0, 4, 0, 0x10, 0, 0]))
        .unwrap();
    conn.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 3, &block))
        .unwrap();
    let answer = read_frames_until(&mut conn, |f| {
        f.stream == 3 && f.flags & END_STREAM != 0 && (f.kind == DATA || f.kind == HEADERS)
    });
    assert!(answer.iter().all(|f| f.kind != RST_STREAM || f.stream != 3));
}

#[test]
fn a_slow_reader_is_fed_as_its_window_allows_from_a_bounded_spool() {
    let (server, written) = big_answers(2 << 20);
    let proxy = start(&server, Setup::new(), "");
    let bystander = Bystander::start(&proxy);
    let mut conn = raw_connection(proxy.addr, false);
    conn.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    conn.write_all(&request_with_window_zero()).unwrap();
    // 1,000 bytes of window every 50 ms (20 KB/s, above the 500 bytes/s minimum) for 1.5 s.
    let (mut granted, mut received) = (0usize, 0usize);
    let (mut bytes, mut frames) = (Vec::new(), Vec::new());
    let mut chunk = [0u8; 16384];
    for _ in 0..30 {
        for stream in [0, 1] {
            conn.write_all(&frame(WINDOW_UPDATE, 0, stream, &1000u32.to_be_bytes()))
                .unwrap();
        }
        granted += 1000;
        let until = Instant::now() + Duration::from_millis(50);
        while Instant::now() < until {
            match conn.read(&mut chunk) {
                Ok(0) => panic!("herdsman closed a slow reader's connection"),
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
                Err(e) if is_timeout(&e) => {}
                Err(e) => panic!("{e}"),
            }
        }
        let used = parse_frames(&bytes, &mut frames);
        bytes.drain(..used);
        received = frames
            .iter()
            .filter(|f| f.kind == DATA && f.stream == 1)
            .map(|f| f.payload.len())
            .sum();
        assert!(
            received <= granted,
            "{received} bytes sent for {granted} granted"
        );
    }
    bystander.assert_served(b"hello");
    assert!(
        received + 2000 >= granted,
        "only {received} of {granted} bytes granted sent"
    );
    assert!(frames
        .iter()
        .all(|f| f.kind != RST_STREAM && f.kind != GOAWAY));
    // The server was done long ago; herdsman holds the answer within its memory per response,
    // the rest in a file.
    assert!(written.load(Ordering::SeqCst));
    let memory = metric(&proxy, "herdsman_buffer_reserved_bytes", "where=\"memory\"");
    assert!(memory <= 65_536.0, "{memory} bytes of memory held");
    assert!(metric(&proxy, "herdsman_buffer_file_bytes", "") > 1_000_000.0);
}

#[test]
fn a_connection_gets_goaway_no_error_after_its_last_request() {
    let server = Mock::named("hello");
    let proxy = start(
        &server,
        Setup::new(),
        "[http2]\nmax_requests_per_connection = 3\n",
    );
    let mut conn = raw_connection(proxy.addr, true);
    let mut frames = Vec::new();
    for stream in [1, 3, 5] {
        conn.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, stream, GET_BLOCK))
            .unwrap();
        frames.extend(read_frames_until(&mut conn, |f| {
            f.stream == stream && f.flags & END_STREAM != 0
        }));
    }
    // The third answer came whole; then GOAWAY NO_ERROR and the close (the raw client does not
    // answer the PING of the graceful two steps, so the last GOAWAY follows a moment later).
    let started = Instant::now();
    let mut rest = Vec::new();
    conn.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let _ = conn.read_to_end(&mut rest);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    parse_frames(&rest, &mut frames);
    let goaways: Vec<&Frame> = frames.iter().filter(|f| f.kind == GOAWAY).collect();
    assert!(!goaways.is_empty(), "{frames:?}");
    assert!(goaways.iter().all(|g| g.error_code() == Some(NO_ERROR)));
    let last_stream = u32::from_be_bytes(goaways.last().unwrap().payload[..4].try_into().unwrap());
    assert_eq!(
        last_stream, 5,
        "the last GOAWAY names the last stream served"
    );
    assert_eq!(server.heads().len(), 3);
    assert_eq!(
        h2c_get(proxy.addr, "/"),
        ("2 200".into(), b"hello".to_vec())
    );
}

#[test]
fn the_new_http2_limits_are_advertised_and_refused_out_of_range_by_key_and_line() {
    let server = Mock::named("hello");
    let proxy = start(
        &server,
        Setup::new(),
        "[http2]\nmax_frame_size = 32768\nmax_header_list_size = 8192\nheader_table_size = 1024\n",
    );
    let mut conn = raw_connection(proxy.addr, true);
    let settings = read_frames_until(&mut conn, |f| f.kind == SETTINGS);
    let pairs: Vec<(u16, u32)> = settings
        .last()
        .unwrap()
        .payload
        .chunks(6)
        .map(|p| {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
            )
        })
        .collect();
    for expected in [(1, 1024), (5, 32768), (6, 8192)] {
        assert!(pairs.contains(&expected), "{expected:?} in {pairs:?}");
    }
    for (key, bad) in [
        ("max_requests_per_connection", "0"),
        ("max_frame_size", "1000"),
        ("max_header_list_size", "10"),
        ("header_table_size", "100000"),
        ("reset_burst", "0"),
        ("resets_per_second", "-1"),
    ] {
        let text = Setup::new().server("a", server.addr).toml("127.0.0.1:0")
            + &format!("\n[http2]\n{key} = {bad}\n");
        let error = format!(
            "{:?}",
            herdsman::Config::from_toml(&text, "test").unwrap_err()
        );
        assert!(error.contains(&format!("http2.{key}")), "{error}");
        assert!(error.contains("line: Some("), "{error}");
    }
}
