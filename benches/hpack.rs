//! The HPACK codec's costs (`http2::hpack`): `cargo bench --bench hpack` prints the Huffman
//! decoder's speed on the values a browser sends, the decoding of a browser's request block
//! (the first on a connection, its fields then inserted, and a repeat that indexes them), a
//! response's encoding with raw values and with Huffman ones (time and bytes), and the decoder
//! table's memory once it holds a browser's request.
//!
//! One thread; each figure the median of 7 repetitions of 0.2 s.

use std::hint::black_box;
use std::time::{Duration, Instant};

use herdsman::http2::hpack::{self, huffman, write_integer, Decoder};

const REPETITIONS: usize = 7;
const REPETITION_TIME: Duration = Duration::from_millis(200);

/// A browser's request (Chrome 124's fields for a page's script), by static name index.
const REQUEST: [(usize, &str, &str); 12] = [
    (2, ":method", "GET"),
    (1, ":authority", "www.example.com"),
    (7, ":scheme", "https"),
    (4, ":path", "/static/js/app.3f9c2a1b.js?v=12"),
    (0, "sec-ch-ua", "\"Chromium\";v=\"124\", \"Google Chrome\";v=\"124\", \"Not-A.Brand\";v=\"99\""),
    (0, "sec-ch-ua-mobile", "?0"),
    (58, "user-agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36"),
    (19, "accept", "*/*"),
    (51, "referer", "https://www.example.com/products/shoes?page=2"),
    (16, "accept-encoding", "gzip, deflate, br, zstd"),
    (17, "accept-language", "en-US,en;q=0.9"),
    (32, "cookie", "_ga=GA1.2.1234567890.1700000000; session=9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
];

/// A response herdsman relays (an HTML page from an application server).
const RESPONSE: [(&str, &str); 9] = [
    ("content-type", "text/html; charset=utf-8"),
    ("content-length", "48213"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    (
        "cache-control",
        "private, no-cache, no-store, max-age=0, must-revalidate",
    ),
    ("etag", "W/\"bc2d-18f3a6c1e2b\""),
    ("vary", "Accept-Encoding"),
    (
        "set-cookie",
        "sid=Xk3v9QpL2mNc8RtY; Path=/; HttpOnly; Secure; SameSite=Lax",
    ),
    ("x-request-id", "3f2b9c1e-7a4d-4e8f-9b6a-2c1d0e5f4a3b"),
    ("server", "nginx"),
];

fn main() {
    huffman_decoding();
    request_decoding();
    response_encoding();
}

/// Nanoseconds per call of `work`, the median of the repetitions.
fn nanos_per_call(mut work: impl FnMut() -> usize) -> f64 {
    let mut medians: Vec<f64> = (0..REPETITIONS)
        .map(|_| {
            let (start, mut calls, mut sink) = (Instant::now(), 0u64, 0);
            while start.elapsed() < REPETITION_TIME {
                for _ in 0..100 {
                    sink += work();
                }
                calls += 100;
            }
            black_box(sink);
            start.elapsed().as_nanos() as f64 / calls as f64
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    medians[REPETITIONS / 2]
}

fn huffman_decoding() {
    let values: Vec<Vec<u8>> = REQUEST
        .iter()
        .map(|(_, _, value)| {
            let mut coded = Vec::new();
            huffman::encode(&mut coded, value.as_bytes());
            coded
        })
        .collect();
    let (coded, plain): (usize, usize) = (
        values.iter().map(Vec::len).sum(),
        REQUEST.iter().map(|(_, _, value)| value.len()).sum(),
    );
    let mut out = Vec::new();
    let ns = nanos_per_call(|| {
        out.clear();
        for value in &values {
            huffman::decode(black_box(value), &mut out).unwrap();
        }
        out.len()
    });
    println!(
        "Huffman decoding, a browser request's {plain} value bytes ({coded} coded): \
         {ns:.0} ns, {:.2} ns a decoded byte, {:.0} MB/s",
        ns / plain as f64,
        plain as f64 * 1e3 / ns
    );
}

/// The request as a browser's first block on a connection: literals with incremental indexing,
/// Huffman values; and its repeat, the same fields indexed from the table (a new `:path`).
fn request_blocks() -> (Vec<u8>, Vec<u8>) {
    let mut first = Vec::new();
    for (index, name, value) in REQUEST {
        write_integer(&mut first, 0x40, 6, index);
        if index == 0 {
            write_integer(&mut first, 0, 7, name.len());
            first.extend_from_slice(name.as_bytes());
        }
        write_integer(&mut first, 0x80, 7, huffman::encoded_len(value.as_bytes()));
        huffman::encode(&mut first, value.as_bytes());
    }
    let mut repeat = Vec::new();
    for (i, (_, name, _)) in REQUEST.iter().enumerate() {
        if *name == ":path" {
            let path = b"/static/css/site.8e1d.css";
            write_integer(&mut repeat, 0x40, 6, 4);
            write_integer(&mut repeat, 0x80, 7, huffman::encoded_len(path));
            huffman::encode(&mut repeat, path);
        } else {
            // Entry i of 12 is now at 62 + (11 - i), then one more for the new :path before it.
            let shift = usize::from(i < 3);
            write_integer(&mut repeat, 0x80, 7, 62 + REQUEST.len() - 1 - i + 1 - shift);
        }
    }
    (first, repeat)
}

fn request_decoding() {
    let (first, repeat) = request_blocks();
    let mut scratch = Vec::new();
    let mut count = |decoder: &mut Decoder, block: &[u8]| {
        let mut bytes = 0;
        decoder
            .decode(block, &mut scratch, |name, value| {
                bytes += name.len() + value.len();
                Ok::<(), ()>(())
            })
            .unwrap();
        bytes
    };
    let fresh = Decoder::new(4096);
    let first_ns = nanos_per_call(|| count(&mut fresh.clone(), &first));
    let mut warm = fresh.clone();
    count(&mut warm, &first);
    let heap = warm.heap_bytes();
    let repeat_ns = nanos_per_call(|| count(&mut warm.clone(), &repeat));
    let mut parked = warm.clone();
    parked.shrink_to_fit();
    println!(
        "A browser request of {} fields: the first block ({} bytes) {first_ns:.0} ns, a repeat \
         ({} bytes) {repeat_ns:.0} ns (each with a table clone: {:.0} ns)",
        REQUEST.len(),
        first.len(),
        repeat.len(),
        nanos_per_call(|| warm.clone().table_size()),
    );
    println!(
        "Its table: {} bytes of size, heap {heap} bytes, {} after shrink_to_fit",
        warm.table_size(),
        parked.heap_bytes()
    );
}

fn response_encoding() {
    type Encode = fn(&mut Vec<u8>, &[u8], &[u8]);
    let ways: [(&str, Encode); 2] = [
        ("raw values", hpack::encode_field),
        ("Huffman values", hpack::encode_field_huffman),
    ];
    let mut out = Vec::with_capacity(1024);
    for (how, encode) in ways {
        let ns = nanos_per_call(|| {
            out.clear();
            hpack::encode_status(&mut out, 200);
            for (name, value) in RESPONSE {
                encode(
                    &mut out,
                    black_box(name.as_bytes()),
                    black_box(value.as_bytes()),
                );
            }
            out.len()
        });
        println!(
            "A response of {} fields, {how}: {} bytes, {ns:.0} ns",
            RESPONSE.len() + 1,
            out.len()
        );
    }
}
