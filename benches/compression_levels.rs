//! Which compression levels herdsman uses (issue 42): `cargo bench --bench compression_levels`
//! prints, for each algorithm and level, the CPU time per MiB of answer compressed and the size
//! out against the size in, on a corpus of herdsman's own text — the stats page (HTML with its
//! CSS and JavaScript), README.md and ARCHITECTURE.md (prose), and an API-like JSON document
//! made here — each compressed as herdsman does: fed in 64 KiB pieces (the body relay's read),
//! flushed after each, ended at the end. Also the memory one encoder holds (a counting
//! allocator: the bytes allocated and not freed after its first piece), which bounds a
//! connection's cost. Gzip is timed on both backends flate2 offers, zlib-rs (pure Rust) and
//! miniz_oxide (raw deflate, without the gzip header and trailer's few bytes). Each figure is
//! the median of `ROUNDS` runs on the thread's own CPU clock. `--short`: one round, a smaller
//! set of levels.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Counts the bytes allocated and not yet freed, to weigh an encoder.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const PIECE: usize = 64 * 1024;
const ROUNDS: usize = 5;

/// The thread's CPU time, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

// `json_document()`: the corpus's API answer, which `herdsman-bench rules` serves too.
include!("corpus/api_json.rs");

/// One algorithm at one level: compresses `data` piece by piece, flushing after each.
type Compressor = fn(&[u8], u32) -> Vec<u8>;

/// Feeds `data` to `encoder` piece by piece, flushing after each and taking its output (`take`),
/// then ends it (`finish`).
fn in_pieces<E: Write>(
    mut encoder: E,
    data: &[u8],
    take: fn(&mut E) -> &mut Vec<u8>,
    finish: fn(E) -> Vec<u8>,
) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in data.chunks(PIECE) {
        encoder.write_all(piece).unwrap();
        encoder.flush().unwrap();
        out.append(take(&mut encoder));
    }
    out.append(&mut finish(encoder));
    out
}

type Zstd = zstd::stream::write::Encoder<'static, Vec<u8>>;
type Brotli = brotli::CompressorWriter<Vec<u8>>;
type Gzip = flate2::write::GzEncoder<Vec<u8>>;

/// As `compress::Encoder` makes them: zstd's window 128 KiB, brotli's 256 KiB.
fn zstd_encoder(level: u32) -> Zstd {
    let mut encoder = Zstd::new(Vec::new(), level as i32).unwrap();
    encoder
        .set_parameter(zstd::stream::raw::CParameter::WindowLog(17))
        .unwrap();
    encoder
}

fn brotli_encoder(level: u32) -> Brotli {
    Brotli::new(Vec::new(), 4096, level, 18)
}

fn gzip_encoder(level: u32) -> Gzip {
    Gzip::new(Vec::new(), flate2::Compression::new(level))
}

fn zstd(data: &[u8], level: u32) -> Vec<u8> {
    in_pieces(zstd_encoder(level), data, Zstd::get_mut, |e| {
        e.finish().unwrap()
    })
}

fn brotli(data: &[u8], level: u32) -> Vec<u8> {
    in_pieces(
        brotli_encoder(level),
        data,
        Brotli::get_mut,
        Brotli::into_inner,
    )
}

fn gzip_zlib_rs(data: &[u8], level: u32) -> Vec<u8> {
    in_pieces(gzip_encoder(level), data, Gzip::get_mut, |e| {
        e.finish().unwrap()
    })
}

fn deflate_miniz(data: &[u8], level: u32) -> Vec<u8> {
    use miniz_oxide::deflate::core::{
        compress, create_comp_flags_from_zip_params, CompressorOxide, TDEFLFlush,
    };
    let mut compressor =
        CompressorOxide::new(create_comp_flags_from_zip_params(level as i32, -15, 0));
    let mut out = Vec::new();
    let mut buffer = vec![0u8; 2 * PIECE + 1024];
    let count = data.len().div_ceil(PIECE);
    for (i, piece) in data.chunks(PIECE).enumerate() {
        let flush = if i + 1 == count {
            TDEFLFlush::Finish
        } else {
            TDEFLFlush::Sync
        };
        let mut input = piece;
        loop {
            let (_, taken, made) = compress(&mut compressor, input, &mut buffer, flush);
            out.extend_from_slice(&buffer[..made]);
            input = &input[taken..];
            if input.is_empty() && made < buffer.len() {
                break;
            }
        }
    }
    out
}

/// (CPU ms per MiB, output bytes) of the median round.
fn measure(compressor: Compressor, level: u32, data: &[u8], rounds: usize) -> (f64, usize) {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..rounds {
        let start = thread_cpu_ns();
        size = compressor(data, level).len();
        times.push(thread_cpu_ns() - start);
    }
    times.sort_unstable();
    let ns = times[times.len() / 2] as f64;
    (ns / 1e6 / (data.len() as f64 / (1 << 20) as f64), size)
}

/// Bytes the encoder `make` gives holds once it compressed its first piece (its output taken
/// away).
fn held_after_piece<E: Write>(
    make: impl FnOnce() -> E,
    take: fn(&mut E) -> &mut Vec<u8>,
    piece: &[u8],
) -> isize {
    let before = LIVE.load(Ordering::Relaxed);
    let mut encoder = make();
    encoder.write_all(piece).unwrap();
    encoder.flush().unwrap();
    *take(&mut encoder) = Vec::new();
    LIVE.load(Ordering::Relaxed) - before
}

fn main() {
    let short = std::env::args().any(|arg| arg == "--short");
    let rounds = if short { 1 } else { ROUNDS };
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |path: &str| std::fs::read(format!("{root}/{path}")).unwrap();
    let corpus: Vec<(&str, Vec<u8>)> = vec![
        (
            "stats page (HTML, CSS, JS)",
            read("src/admin/stats_page.html"),
        ),
        (
            "README + ARCHITECTURE (prose)",
            [read("README.md"), read("ARCHITECTURE.md")].concat(),
        ),
        ("API JSON", json_document()),
    ];
    let all: Vec<u8> = corpus.iter().flat_map(|(_, bytes)| bytes.clone()).collect();
    let rows: Vec<(&str, Compressor, Vec<u32>)> = if short {
        vec![
            ("zstd", zstd as Compressor, vec![3]),
            ("br", brotli, vec![4]),
            ("gzip (zlib-rs)", gzip_zlib_rs, vec![5]),
        ]
    } else {
        vec![
            ("zstd", zstd as Compressor, vec![1, 2, 3, 4, 6, 9, 12]),
            ("br", brotli, vec![1, 2, 3, 4, 5, 6, 8, 11]),
            ("gzip (zlib-rs)", gzip_zlib_rs, vec![1, 2, 3, 4, 5, 6, 9]),
            ("deflate (miniz_oxide)", deflate_miniz, vec![1, 3, 5, 6, 9]),
        ]
    };
    println!(
        "corpus: {}",
        corpus
            .iter()
            .map(|(name, bytes)| format!("{name} {} KiB", bytes.len() / 1024))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!();
    // The API JSON is what `herdsman-bench rules` compresses through each proxy: its own CPU
    // column sets a level's cost there beside the corpus's.
    let (_, json) = corpus.last().expect("the corpus ends with the API JSON");
    print!("| algorithm | level | CPU ms/MiB (all) | ratio (all) | CPU ms/MiB: API JSON |");
    for (name, _) in &corpus {
        print!(" ratio: {name} |");
    }
    println!();
    print!("|---|---|---|---|---|");
    for _ in &corpus {
        print!("---|");
    }
    println!();
    for (name, compressor, levels) in rows {
        for level in levels {
            // Brotli 10 and 11 take seconds a MiB: one round is enough to see it.
            let rounds = if name == "br" && level >= 10 {
                1
            } else {
                rounds
            };
            let (ms, size) = measure(compressor, level, &all, rounds);
            let (json_ms, _) = measure(compressor, level, json, rounds);
            print!(
                "| {name} | {level} | {ms:.1} | {:.2} | {json_ms:.1} |",
                all.len() as f64 / size as f64
            );
            for (_, bytes) in &corpus {
                let size = compressor(bytes, level).len();
                print!(" {:.2} |", bytes.len() as f64 / size as f64);
            }
            println!();
        }
    }
    println!();
    println!("| encoder | level | bytes held after a 64 KiB piece |");
    println!("|---|---|---|");
    let piece = &all[..PIECE.min(all.len())];
    for (algorithm, level) in [("zstd", 3), ("br", 4), ("gzip", 5), ("gzip", 9)] {
        let held = match algorithm {
            "zstd" => held_after_piece(|| zstd_encoder(level), Zstd::get_mut, piece),
            "br" => held_after_piece(|| brotli_encoder(level), Brotli::get_mut, piece),
            _ => held_after_piece(|| gzip_encoder(level), Gzip::get_mut, piece),
        };
        println!("| {algorithm} | {level} | {} KiB |", held / 1024);
    }
}
