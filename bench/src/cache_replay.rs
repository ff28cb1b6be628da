//! `cache-replay`: the hit ratio of herdsman's cache store (TinyUFO: S3-FIFO with TinyLFU
//! admission) against plain LRU on a Zipf replay — the same requests, caches holding the same
//! number of objects of one size — and the store's reads per second from several threads
//! (issue 38). No proxy and no socket: the policy alone.

use std::fmt::Write as _;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use herdsman::cache::{Entry, Object, Store};

use crate::kit::environment;
use crate::kit::results::{write_results, RunFacts};

#[derive(Args)]
pub struct CacheReplayArgs {
    /// Requests replayed.
    #[arg(long, default_value_t = 1_000_000)]
    requests: usize,
    /// Distinct objects the requests are drawn from.
    #[arg(long, default_value_t = 100_000)]
    objects: usize,
    /// Zipf exponent of the objects' popularity.
    #[arg(long, default_value_t = 1.0)]
    zipf: f64,
    /// Cache sizes, as percentages of the objects, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.5,1,5,10")]
    sizes: Vec<f64>,
    /// Body bytes of every object.
    #[arg(long, default_value_t = 1024)]
    object_bytes: usize,
    /// Seed of the request sequence (the same seed, the same replay).
    #[arg(long, default_value_t = 38)]
    seed: u64,
    /// A short run (100,000 requests over 10,000 objects), written under target/ by default.
    #[arg(long)]
    short: bool,
    /// The results file. Default bench/results/cache-hit-ratio.md, or with --short
    /// target/herdsman-bench/cache-hit-ratio-short.md.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// One cache size's figures.
struct Row {
    percent: f64,
    capacity: usize,
    herdsman: f64,
    lru: f64,
}

pub fn run(mut args: CacheReplayArgs) -> anyhow::Result<()> {
    if args.short {
        args.requests = args.requests.min(100_000);
        args.objects = args.objects.min(10_000);
    }
    anyhow::ensure!(args.objects > 0 && args.requests > 0, "nothing to replay");
    let started = Instant::now();
    let mut facts = RunFacts::new(environment::machine_lines_without_herdsman(
        environment::busy_share(std::time::Duration::from_secs(1)),
    ));
    let trace = zipf_trace(args.objects, args.requests, args.zipf, args.seed);
    let mut rows = Vec::new();
    for &percent in &args.sizes {
        let capacity = ((args.objects as f64 * percent / 100.0).round() as usize).max(1);
        let herdsman = herdsman_hit_ratio(&trace, capacity, args.object_bytes);
        let lru = lru_hit_ratio(&trace, capacity);
        eprintln!(
            "{percent}% ({capacity} objects): herdsman {:.2}%, LRU {:.2}%",
            herdsman * 100.0,
            lru * 100.0
        );
        rows.push(Row {
            percent,
            capacity,
            herdsman,
            lru,
        });
    }
    let reads_per_thread = if args.short { 200_000 } else { 2_000_000 };
    let reads = parallel_reads(args.object_bytes, reads_per_thread);
    facts.end(started);
    let out = args.out.clone().unwrap_or_else(|| {
        if args.short {
            PathBuf::from("target/herdsman-bench/cache-hit-ratio-short.md")
        } else {
            PathBuf::from("bench/results/cache-hit-ratio.md")
        }
    });
    let table = table(&rows, &reads);
    write_results(
        "cache-replay",
        &out,
        &table,
        facts.elapsed,
        |_| anyhow::bail!("no plot for this one"),
        |_| render(&args, &facts, &table),
    )
}

/// `requests` object numbers drawn from Zipf(`exponent`) over `objects` (object 0 the most
/// popular), by inverse transform over the cumulative weights, with a seeded xorshift.
fn zipf_trace(objects: usize, requests: usize, exponent: f64, seed: u64) -> Vec<u32> {
    let mut cumulative = Vec::with_capacity(objects);
    let mut sum = 0.0;
    for rank in 1..=objects {
        sum += 1.0 / (rank as f64).powf(exponent);
        cumulative.push(sum);
    }
    let mut state = seed.max(1);
    (0..requests)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let point = (state >> 11) as f64 / (1u64 << 53) as f64 * sum;
            cumulative.partition_point(|&c| c < point).min(objects - 1) as u32
        })
        .collect()
}

fn key_of(object: u32) -> Vec<u8> {
    format!("http://replay.test/objects/{object}").into_bytes()
}

fn object(key: Vec<u8>, body_bytes: usize) -> Entry {
    let head = b"HTTP/1.1 200 OK\r\ncache-control: max-age=3600\r\n\r\n";
    Entry::Object(Object::fresh(&key, head, vec![b'.'; body_bytes], 3600))
}

/// herdsman's store with a memory budget that holds `capacity` objects: a miss stores the
/// object, as a proxied response would be.
fn herdsman_hit_ratio(trace: &[u32], capacity: usize, body_bytes: usize) -> f64 {
    let sample = object(key_of(u32::MAX), body_bytes);
    let store = Store::new(capacity as u64 * Store::counted_bytes(&sample));
    let mut hits = 0usize;
    for &requested in trace {
        let key = key_of(requested);
        if store.get(&key).is_some() {
            hits += 1;
        } else {
            store.put(Arc::new(object(key, body_bytes)));
        }
    }
    hits as f64 / trace.len() as f64
}

/// Plain LRU holding `capacity` objects (the `lru` crate).
fn lru_hit_ratio(trace: &[u32], capacity: usize) -> f64 {
    let mut cache = lru::LruCache::new(NonZeroUsize::new(capacity).expect("capacity ≥ 1"));
    let mut hits = 0usize;
    for &requested in trace {
        if cache.get(&requested).is_some() {
            hits += 1;
        } else {
            cache.put(requested, ());
        }
    }
    hits as f64 / trace.len() as f64
}

/// Hits a second from 1 and 2 threads reading 1,000 stored objects in turn, `reads` each
/// (every read a hit).
fn parallel_reads(body_bytes: usize, reads: usize) -> Vec<(usize, f64)> {
    let store = Arc::new(Store::new(64 << 20));
    let keys: Vec<Vec<u8>> = (0..1_000).map(key_of).collect();
    for key in &keys {
        store.put(Arc::new(object(key.clone(), body_bytes)));
    }
    let keys = Arc::new(keys);
    [1usize, 2]
        .into_iter()
        .map(|threads| {
            let started = Instant::now();
            let handles: Vec<_> = (0..threads)
                .map(|thread| {
                    let (store, keys) = (Arc::clone(&store), Arc::clone(&keys));
                    std::thread::spawn(move || {
                        let mut found = 0usize;
                        for n in 0..reads {
                            let key = &keys[(n * 7 + thread * 13) % keys.len()];
                            found += usize::from(store.get(key).is_some());
                        }
                        found
                    })
                })
                .collect();
            let found: usize = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
            let seconds = started.elapsed().as_secs_f64();
            assert!(found > 0, "the stored objects are found");
            (threads, found as f64 / seconds)
        })
        .collect()
}

fn table(rows: &[Row], reads: &[(usize, f64)]) -> String {
    let mut text = String::from(
        "| cache size (of the objects) | objects held | herdsman (TinyUFO) hit ratio | LRU hit ratio | herdsman − LRU |\n|---:|---:|---:|---:|---:|\n",
    );
    for row in rows {
        let _ = writeln!(
            text,
            "| {}% | {} | {:.2}% | {:.2}% | {:+.2} pp |",
            row.percent,
            row.capacity,
            row.herdsman * 100.0,
            row.lru * 100.0,
            (row.herdsman - row.lru) * 100.0
        );
    }
    text.push_str("\n| threads reading | hits a second (all threads) |\n|---:|---:|\n");
    for (threads, rate) in reads {
        let _ = writeln!(text, "| {threads} | {:.1} million |", rate / 1e6);
    }
    text
}

fn render(args: &CacheReplayArgs, facts: &RunFacts, table: &str) -> String {
    let mut md = String::from("# The cache's eviction and admission policy on a Zipf replay\n\n");
    let _ = writeln!(
        md,
        "{} requests drawn from Zipf({}) over {} objects (seed {}), replayed through herdsman's \
         cache store (`src/cache/store.rs`: TinyUFO, S3-FIFO eviction with TinyLFU admission) and \
         through plain LRU (the `lru` crate), each sized to hold the same number of objects of \
         {} body bytes. A miss stores the object, as a proxied response would be. Then the \
         store's reads a second from one and two threads, every read a hit (the lookup a cached \
         request makes, without the request).\n",
        args.requests, args.zipf, args.objects, args.seed, args.object_bytes
    );
    facts.write_markdown(&mut md);
    md.push_str("\n## Hit ratios\n\n");
    md.push_str(table);
    md
}
