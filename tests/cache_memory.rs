//! The cache's memory budget holds in the process's memory, not only in its own count: the
//! herdsman binary (a separate process, so its RSS is herdsman's alone) is offered three times
//! its `[cache] memory` in distinct objects, and its peak RSS grows by no more than the budget
//! and the overhead the README states.

mod common;

use std::time::Duration;

use common::*;

const MIB: u64 = 1024 * 1024;
const BUDGET: u64 = 32 * MIB;
/// What the README states beyond the budget: the store's map and frequency sketch, the
/// allocator's slack for freed objects, the workers' buffers.
const OVERHEAD: u64 = 24 * MIB;
const OBJECT: usize = 8 * 1024;
const OBJECTS: usize = 12_000;

#[test]
fn the_cache_holds_its_memory_budget_in_rss() {
    let server = Mock::start(|exchange| {
        let body = vec![b'o'; OBJECT];
        exchange.respond(200, &[("Cache-Control", "max-age=600")], &body)?;
        Ok(Flow::KeepAlive)
    });
    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let toml = Setup::new()
        .server("s1", server.addr)
        .toml(&addr.to_string());
    let toml = format!("{toml}\n[pool.cache]\n\n[cache]\nmemory = \"32MiB\"\n");
    let path = write_temp("cache-memory.toml", &toml);
    let child = run_binary_with(&path);
    assert!(wait_listening(addr, Duration::from_secs(10)));
    let pid = child.0.id();
    let mut warm = Conn::connect(addr);
    for n in 0..50 {
        let response = warm.roundtrip(&get_request(&format!("/warm/{n}"), ""));
        assert_eq!(response.body.len(), OBJECT);
    }
    let baseline = peak_rss_kib(pid) * 1024;
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            std::thread::spawn(move || {
                let mut conn = Conn::connect(addr);
                for n in (thread..OBJECTS).step_by(4) {
                    let response = conn.roundtrip(&get_request(&format!("/o/{n}"), ""));
                    assert_eq!(response.body.len(), OBJECT);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let offered = (OBJECTS * OBJECT) as u64;
    let grown = (peak_rss_kib(pid) * 1024).saturating_sub(baseline);
    eprintln!(
        "offered {} MiB of objects to a {} MiB cache: peak RSS grew {:.1} MiB",
        offered / MIB,
        BUDGET / MIB,
        grown as f64 / MIB as f64
    );
    assert!(offered > 2 * BUDGET, "the test offers more than the budget");
    assert!(
        grown <= BUDGET + OVERHEAD,
        "peak RSS grew {} MiB, over the budget ({} MiB) and the stated overhead ({} MiB)",
        grown / MIB,
        BUDGET / MIB,
        OVERHEAD / MIB
    );
    // Still a cache: the last objects offered are hits.
    assert!(server.heads().len() >= OBJECTS);
    let before = server.heads().len();
    let mut conn = Conn::connect(addr);
    for n in OBJECTS - 20..OBJECTS {
        conn.roundtrip(&get_request(&format!("/o/{n}"), ""));
    }
    assert!(
        server.heads().len() - before < 20,
        "recent objects are kept: {} of 20 went to the server",
        server.heads().len() - before
    );
}
