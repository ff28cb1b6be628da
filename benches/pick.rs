//! The cost of choosing a server, by pool size: `cargo bench --bench pick` prints nanoseconds per
//! request for each algorithm over 10 to 10,000 servers — a pick, taking the slot
//! (`ActiveGuard::try_take`, which tells least-conn's tree) and, 50 requests later, releasing it,
//! so that 50 requests are always in flight as with wrk's 50 connections — beside the scan that
//! least-conn used before its tree (issue 24), on the same servers.
//!
//! A second table times the pick alone, with 50 requests held in flight on random servers; a
//! third, a new snapshot of a 10,000-server pool. `-- requests`, `-- picks` or `-- snapshots`
//! runs only that table.
//!
//! One thread, a snapshot built by the registry's own `Lineage` from a config of loopback
//! servers; the median of 7 repetitions of up to 400,000 requests or 0.2 s each.

use std::collections::{HashSet, VecDeque};
use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Instant;

use herdsman::transport::Moment;
use herdsman::upstream::snapshot::{ActiveGuard, Lineage, ListenerRules, Server, Snapshot};

const SIZES: [usize; 4] = [10, 100, 1_000, 10_000];
const IN_FLIGHT: usize = 50;
const REQUESTS: usize = 400_000;
const REPETITIONS: usize = 7;
/// A repetition stops after this long even if it has not made `REQUESTS` (the old scan over
/// 10,000 servers takes 75 µs a request).
const REPETITION_TIME: std::time::Duration = std::time::Duration::from_millis(200);

/// How a request's server is chosen.
type Choose = fn(&Snapshot, &mut fastrand::Rng) -> Option<usize>;

fn main() {
    let algorithms: [(&str, &str, Choose); 6] = [
        ("least-conn", "least-conn", balancer_pick),
        ("round-robin", "round-robin", balancer_pick),
        ("p2c", "p2c", balancer_pick),
        ("peak-ewma", "peak-ewma", balancer_pick),
        ("random", "random", balancer_pick),
        (
            "least-conn, the scan it replaced",
            "least-conn",
            |snapshot, rng| Some(scan_least_conn(&snapshot.pools[0].servers, rng)),
        ),
    ];
    println!("# Choosing a server: ns per request\n");
    println!(
        "One thread, {IN_FLIGHT} requests in flight, median of {REPETITIONS} repetitions of up to \
         {REQUESTS} requests or {} ms.\n",
        REPETITION_TIME.as_millis()
    );
    // `cargo bench --bench pick -- snapshots` runs only that table (any table's first word).
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |table: &str| only.is_empty() || only.iter().any(|word| word == table);
    if wanted("requests") {
        println!("## A pick, taking the slot, and releasing it {IN_FLIGHT} requests later\n");
        table(&algorithms, ns_per_request);
    }
    if wanted("picks") {
        println!("\n## The pick alone\n");
        table(&algorithms, ns_per_pick);
    }
    if !wanted("snapshots") {
        return;
    }
    println!("\n## A new snapshot of one pool of 10,000 servers (what every change to it costs)\n");
    println!("| algorithm | weights all 1 | weights 1 to 4 |\n|---|---|---|");
    for &(label, balance, _) in &algorithms[..4] {
        let ms = |weighted| {
            let config = config(balance, 10_000, weighted);
            median((0..REPETITIONS).map(|_| {
                let started = Instant::now();
                black_box(snapshot_of(&config));
                started.elapsed().as_secs_f64() * 1e3
            }))
        };
        println!("| {label} | {:.1} ms | {:.1} ms |", ms(false), ms(true));
    }
}

fn balancer_pick(snapshot: &Snapshot, rng: &mut fastrand::Rng) -> Option<usize> {
    // The request's start, which the exchange reads anyway and peak-ewma's probes compare with:
    // one reading for the whole run (no estimate is ever made here, so no probe is due).
    static STARTED: OnceLock<Moment> = OnceLock::new();
    let started = *STARTED.get_or_init(Moment::now);
    let pool = &snapshot.pools[0];
    // The key's hash is read only by `hash`, which is not in the table.
    pool.balancer.pick(&pool.servers, rng, started, || 0)
}

fn table(algorithms: &[(&str, &str, Choose)], measure: fn(&Snapshot, Choose) -> f64) {
    print!("| algorithm |");
    for size in SIZES {
        print!(" {size} servers |");
    }
    println!(" {} ÷ {} |", SIZES[SIZES.len() - 1], SIZES[0]);
    println!("|---|{}---|", "---|".repeat(SIZES.len()));
    for &(label, balance, choose) in algorithms {
        print!("| {label} |");
        let mut costs = Vec::new();
        for size in SIZES {
            let snapshot = snapshot(balance, size);
            let ns = median((0..REPETITIONS).map(|_| measure(&snapshot, choose)));
            costs.push(ns);
            print!(" {ns:.1} |");
        }
        println!(" {:.2} |", costs[costs.len() - 1] / costs[0]);
    }
}

fn ns_per_request(snapshot: &Snapshot, choose: Choose) -> f64 {
    let pool = &snapshot.pools[0];
    let mut rng = fastrand::Rng::with_seed(7);
    let mut in_flight: VecDeque<ActiveGuard<'_>> = VecDeque::with_capacity(IN_FLIGHT + 1);
    let started = Instant::now();
    let mut made = 0;
    while made < REQUESTS && (made % 1024 != 0 || started.elapsed() < REPETITION_TIME) {
        let index = choose(snapshot, &mut rng).expect("every server takes requests");
        in_flight.push_back(ActiveGuard::try_take(pool, black_box(index), 0).expect("no limit"));
        if in_flight.len() > IN_FLIGHT {
            in_flight.pop_front();
        }
        made += 1;
    }
    let elapsed = started.elapsed();
    drop(in_flight);
    elapsed.as_nanos() as f64 / made as f64
}

fn ns_per_pick(snapshot: &Snapshot, choose: Choose) -> f64 {
    let pool = &snapshot.pools[0];
    let mut rng = fastrand::Rng::with_seed(7);
    let servers = pool.servers.len();
    let _held: Vec<ActiveGuard<'_>> = (0..IN_FLIGHT)
        .map(|_| ActiveGuard::try_take(pool, rng.usize(..servers), 0).expect("no limit"))
        .collect();
    let started = Instant::now();
    let mut made = 0;
    while made < REQUESTS && (made % 1024 != 0 || started.elapsed() < REPETITION_TIME) {
        black_box(choose(snapshot, &mut rng));
        made += 1;
    }
    started.elapsed().as_nanos() as f64 / made as f64
}

/// least-conn as it was: every server compared, from a random start so that ties spread.
fn scan_least_conn(servers: &[Server], rng: &mut fastrand::Rng) -> usize {
    let lighter = |a: &Server, b: &Server| {
        u64::from(a.counters.active()) * u64::from(b.weight)
            < u64::from(b.counters.active()) * u64::from(a.weight)
    };
    let start = rng.usize(..servers.len());
    let mut best = start;
    for offset in 1..servers.len() {
        let candidate = (start + offset) % servers.len();
        if lighter(&servers[candidate], &servers[best]) {
            best = candidate;
        }
    }
    best
}

/// A snapshot of one pool of `size` servers of weight 1 on distinct loopback addresses.
fn snapshot(balance: &str, size: usize) -> Snapshot {
    snapshot_of(&config(balance, size, false))
}

/// One pool of `size` servers on distinct loopback addresses, of weight 1 or (`weighted`) 1 to 4.
fn config(balance: &str, size: usize, weighted: bool) -> herdsman::Config {
    let mut text = format!(
        "[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"app\"\n\n[[pool]]\nname = \"app\"\nbalance = \"{balance}\"\nservers = [\n"
    );
    for i in 0..size {
        text.push_str(&format!(
            "  {{ name = \"s{i}\", addr = \"127.0.{}.{}:8080\", weight = {} }},\n",
            i / 250,
            1 + i % 250,
            if weighted { 1 + i % 4 } else { 1 }
        ));
    }
    text.push_str("]\n");
    herdsman::Config::from_toml(&text, "pick bench").expect("a valid config")
}

fn snapshot_of(config: &herdsman::Config) -> Snapshot {
    Lineage::new()
        .next(
            config,
            &HashSet::new(),
            vec![0],
            vec![ListenerRules::of(&config.listeners[0])],
        )
        .expect("a snapshot")
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
