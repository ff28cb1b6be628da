//! End to end: `herdsman-bench h2-attacks --short`, so that the HTTP/2 attack benchmark cannot
//! rot. It builds herdsman's release binary and runs each of its twelve attacks (and connections
//! alone, at the attacks' pace) for 3 s beside 10 h2load clients, then each alone for 1 s. It
//! checks what a user would see: a row per attack with figures in every column; the legitimate
//! clients were served beside each; every flood's connections ended in GOAWAY
//! (ENHANCE_YOUR_CALM, or COMPRESSION_ERROR for the HPACK table size, RFC 7541 §4.2) and counted
//! as floods where herdsman counts them; a rapid reset of streams reset at once, and an HPACK
//! bomb, caused no request at the server; what each attacking connection cost herdsman is given
//! for the floods; a stream never read was reset (the short run's slow-reader window is 1 s) and a slow
//! reader above the minimum rate was not. How the figures compare with the baseline is for a
//! quiet machine's results file, not a pass or fail here.
//!
//! It puts load on the machine, so it takes /tmp/herdsman-bench.lock first, like every benchmark
//! on a shared machine (or runs under it when started by `flock` on it).

mod support;
use support::{row, run_short, table_starting, take_benchmark_lock, value};

#[test]
fn the_short_h2_attacks_run_has_every_attack_ended_as_it_should() {
    let _lock = take_benchmark_lock();
    let run = run_short("h2-attacks");
    let md = &run.md;
    assert!(md.contains("**Short run**"), "{md}");
    let table = table_starting(md, "| attack |");
    let baseline = row(&table, "none (baseline)");
    assert!(
        value(baseline[1].split(' ').next().unwrap()) > 0.0,
        "{baseline:?}"
    );
    let floods = [
        ("rapid reset", "GOAWAY ENHANCE_YOUR_CALM"),
        ("rapid reset after 5 ms", "GOAWAY ENHANCE_YOUR_CALM"),
        ("CONTINUATION flood", "GOAWAY ENHANCE_YOUR_CALM"),
        ("SETTINGS flood", "GOAWAY ENHANCE_YOUR_CALM"),
        ("PING flood", "GOAWAY ENHANCE_YOUR_CALM"),
        ("empty DATA flood", "GOAWAY ENHANCE_YOUR_CALM"),
        ("WINDOW_UPDATE flood", "GOAWAY ENHANCE_YOUR_CALM"),
        ("PRIORITY flood", "GOAWAY ENHANCE_YOUR_CALM"),
        (
            "HPACK table size over the limit",
            "GOAWAY COMPRESSION_ERROR",
        ),
        ("HPACK bomb", "GOAWAY ENHANCE_YOUR_CALM"),
    ];
    for (attack, ending) in floods {
        let cells = row(&table, attack);
        // "6,820 (6,820–6,820)": the requests/s, median (lowest–highest) over the rounds.
        let served = value(cells[1].split(' ').next().unwrap());
        assert!(served > 0.0, "{attack}: legit served: {cells:?}");
        let connections = value(&cells[6]);
        assert!(connections >= 1.0, "{attack}: {cells:?}");
        // Every connection but the last, which the end of the attack may cut short, ended so.
        let ended = cells[7]
            .split(", ")
            .find_map(|way| way.strip_prefix(&format!("{ending} ×")))
            .map_or(0.0, value);
        assert!(
            ended >= connections - 1.0 && ended >= 1.0,
            "{attack}: {} of {connections} ended in {ending}: {cells:?}",
            ended
        );
        if ending.ends_with("ENHANCE_YOUR_CALM") {
            assert!(
                value(&cells[11]) >= ended,
                "{attack}: floods counted: {cells:?}"
            );
        }
    }
    for attack in ["rapid reset", "HPACK bomb"] {
        let cells = row(&table, attack);
        assert_eq!(
            value(&cells[10]),
            0.0,
            "{attack}: server requests: {cells:?}"
        );
    }
    let alone = row(&table, "connections alone (no attack)");
    assert!(alone[7].contains("closed by the attacker"), "{alone:?}");
    let never_read = row(&table, "stream never read");
    assert!(never_read[7].contains("RST_STREAM"), "{never_read:?}");
    let slow = row(&table, "slow reader (20 KB/s)");
    assert!(slow[7].contains("open at the end"), "{slow:?}");
    // herdsman's CPU per attacking connection, from each attack alone: "325 µs".
    let cpu = table_starting(md, "| | herdsman |");
    let rapid = row(&cpu, "rapid reset");
    assert!(rapid[8].ends_with(" µs"), "{rapid:?}");
    std::fs::remove_dir_all(&run.dir).ok();
}
