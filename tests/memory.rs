//! Bounded memory: large bodies streamed through the herdsman binary (a separate process, so its
//! peak RSS is herdsman's alone) do not grow its memory by more than a few buffers.

mod common;

use std::time::Duration;

use common::*;

const MIB: u64 = 1024 * 1024;
const LEN: u64 = 1024 * MIB;
/// Allowed growth of peak RSS while moving LEN bytes each way. Buffering a body whole would need
/// at least LEN; a few relay buffers (64 KiB each) and allocator slack stay far under this.
const ALLOWED_GROWTH_KIB: u64 = 8 * 1024;

#[test]
fn large_bodies_pass_through_the_binary_in_bounded_memory() {
    let server = Mock::start(|ex| {
        match ex.head.target() {
            "/upload" => {
                let mut check = PatternCheck::new(21);
                ex.conn
                    .read_body_with(ex.head.request_framing(), &mut |p| check.feed(p))?;
                ex.respond(200, &[], check.report().as_bytes())?;
            }
            "/download" => {
                ex.read_body()?;
                ex.write(format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n").as_bytes())?;
                Pattern::new(22).write_in_pieces(LEN, 256 * 1024, &mut |p| ex.write(p))?;
            }
            _ => {
                ex.read_body()?;
                ex.respond(200, &[], b"small")?;
            }
        }
        Ok(Flow::KeepAlive)
    });
    let (child, addr) = Setup::new().server("a", server.addr).start_binary();
    let pid = child.0.id();

    let mut client = Conn::connect(addr);
    assert_eq!(client.roundtrip(&get_request("/", "")).body_text(), "small");
    let baseline = peak_rss_kib(pid);

    client.send(
        format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {LEN}\r\n\r\n").as_bytes(),
    );
    Pattern::new(21)
        .write_in_pieces(LEN, 256 * 1024, &mut |p| client.try_send(p))
        .unwrap_or_else(|e| panic!("uploading: {e}"));
    // The body is whole in a temporary file before the server hears of it (request buffering);
    // only then does the server read and check 1 GiB, which takes this debug build longer than
    // the usual 10 s.
    client.set_read_timeout(Duration::from_secs(120));
    let started = std::time::Instant::now();
    let response = client.response();
    eprintln!(
        "upload answered {:?} after its last byte",
        started.elapsed()
    );
    assert_eq!(
        response.body_text(),
        format!("{LEN} None"),
        "upload damaged"
    );

    client.send(&get_request("/download", ""));
    let head = client.response_head();
    assert_eq!(head.status(), 200);
    let mut check = PatternCheck::new(22);
    client
        .read_body_with(head.response_framing(false), &mut |p| check.feed(p))
        .unwrap_or_else(|e| panic!("download after {} bytes: {}", check.received, describe(&e)));
    assert_eq!(
        (check.received, check.mismatch),
        (LEN, None),
        "download damaged"
    );

    let peak = peak_rss_kib(pid);
    assert!(
        peak.saturating_sub(baseline) < ALLOWED_GROWTH_KIB,
        "peak RSS grew from {baseline} KiB to {peak} KiB while streaming {} MiB each way",
        LEN / MIB
    );
}
