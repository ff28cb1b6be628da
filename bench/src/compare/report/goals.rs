//! The targets herdsman is held to against its peers (issue 4), each evaluated from this run's
//! medians — never written in by hand: CPU per request, requests/s and p99 at every load and
//! worker count, throughput with idle connections open, and memory per idle connection.

use std::fmt::Write as _;

use super::idle::{IdleSweep, REQUESTS_PER_SEC, RSS_PER_CONNECTION};
use super::{Extract, Session};
use crate::kit::markdown::{thousands, worker_count};

/// herdsman's CPU per request must be at most this share of each peer's…
pub const CPU_SHARE: f64 = 0.85;
/// …with this many workers and connections.
pub const CPU_WORKERS: u32 = 1;
pub const CPU_CONNECTIONS: u32 = 50;
/// Requests/s with the most idle connections open, as a share of requests/s with none.
pub const IDLE_THROUGHPUT_SHARE: f64 = 0.95;
/// Resident memory per idle client connection, in bytes.
pub const RSS_PER_IDLE_LIMIT: f64 = 1024.0;
/// The peers herdsman is measured against, by row label.
const PEERS: [&str; 2] = ["haproxy", "nginx"];
/// The peer whose memory per idle connection herdsman must not exceed.
const RSS_PEER: &str = "nginx";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    NotMet,
    /// A row or a case the target needs was not run (or failed).
    NotMeasured,
}

/// One target: what it asks, what was measured, and whether that meets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    pub target: String,
    pub measured: String,
    pub verdict: Verdict,
}

fn goal(target: String, measured: String, met: Option<bool>) -> Goal {
    let verdict = match met {
        Some(true) => Verdict::Met,
        Some(false) => Verdict::NotMet,
        None => Verdict::NotMeasured,
    };
    Goal {
        target,
        measured,
        verdict,
    }
}

const CPU: Extract = |r| r.cpu_us_per_request;
const RPS: Extract = |r| r.wrk.requests_per_sec;
const P99: Extract = |r| r.wrk.p99_us;

/// Every target, for every herdsman row (and, for idle throughput, every proxy).
pub fn evaluate(s: &Session) -> Vec<Goal> {
    let mut goals = Vec::new();
    for herdsman in &s.herdsman_labels {
        goals.extend(cpu_goals(s, herdsman));
        for &workers in &s.workers {
            for &c in &s.connections {
                goals.push(speed_goal(s, herdsman, workers, c, "requests/s ≥", RPS));
                goals.push(speed_goal(s, herdsman, workers, c, "p99 latency ≤", P99));
            }
        }
    }
    if let Some(sweep) = &s.idle {
        for label in &sweep.labels {
            goals.push(idle_throughput_goal(sweep, label));
        }
        for herdsman in &s.herdsman_labels {
            goals.extend(idle_memory_goals(sweep, herdsman));
        }
    }
    goals
}

fn cpu_goals(s: &Session, herdsman: &str) -> Vec<Goal> {
    let (w, c) = (CPU_WORKERS, CPU_CONNECTIONS);
    PEERS
        .iter()
        .map(|peer| {
            let target = format!(
                "{herdsman}: CPU-µs per request ≤ {CPU_SHARE} × {peer}'s ({}, c={c})",
                worker_count(w)
            );
            match (s.median(herdsman, w, c, CPU), s.median(peer, w, c, CPU)) {
                (Some(h), Some(p)) => goal(
                    target,
                    format!("{h:.2} vs {p:.2}: {:.2} ×", h / p),
                    Some(h <= CPU_SHARE * p),
                ),
                _ => goal(
                    target,
                    format!(
                        "not measured (needs both rows at {}, c={c})",
                        worker_count(w)
                    ),
                    None,
                ),
            }
        })
        .collect()
}

/// herdsman's median against every peer's: `≥` each (requests/s) or `≤` each (latency).
fn speed_goal(
    s: &Session,
    herdsman: &str,
    workers: u32,
    c: u32,
    relation: &str,
    value: Extract,
) -> Goal {
    let higher_is_better = relation.ends_with('≥');
    let target = format!(
        "{herdsman}: {relation} HAProxy's and nginx's ({}, c={c})",
        worker_count(workers)
    );
    let format = |v: f64| {
        if higher_is_better {
            thousands(v)
        } else {
            format!("{v:.0} µs")
        }
    };
    let peers: Vec<(&str, Option<f64>)> = PEERS
        .iter()
        .map(|&p| (p, s.median(p, workers, c, value)))
        .collect();
    let Some(h) = s.median(herdsman, workers, c, value) else {
        return goal(target, "not measured".into(), None);
    };
    let shown: Vec<String> = peers
        .iter()
        .map(|(p, v)| format!("{} ({p})", v.map_or("not measured".into(), format)))
        .collect();
    let measured = format!("{} vs {}", format(h), shown.join(", "));
    let met = peers
        .iter()
        .map(|(_, v)| v.map(|p| if higher_is_better { h >= p } else { h <= p }))
        .collect::<Option<Vec<bool>>>()
        .map(|each| each.iter().all(|&m| m));
    goal(target, measured, met)
}

/// "dropped 12 idle connections; 1 run failed", or "" when every run held every connection.
fn dropped_note(sweep: &IdleSweep, label: &str, idle: u32) -> String {
    let (dropped, failed) = sweep.dropped(label, idle);
    let mut notes = Vec::new();
    if dropped > 0 {
        notes.push(format!("dropped {dropped} idle connection(s)"));
    }
    if failed > 0 {
        notes.push(format!("{failed} run(s) failed"));
    }
    if notes.is_empty() {
        String::new()
    } else {
        format!("; {}", notes.join("; "))
    }
}

fn idle_throughput_goal(sweep: &IdleSweep, label: &str) -> Goal {
    let Some(largest) = sweep.largest() else {
        return goal(
            format!("{label}: requests/s with idle connections open ≥ {IDLE_THROUGHPUT_SHARE} × with none"),
            "not measured (no idle count above 0)".into(),
            None,
        );
    };
    let target = format!(
        "{label}: requests/s with {} idle connections ≥ {:.0}% of with none ({})",
        thousands(f64::from(largest)),
        IDLE_THROUGHPUT_SHARE * 100.0,
        worker_count(sweep.workers)
    );
    let note = dropped_note(sweep, label, largest);
    match (
        sweep.median(label, largest, REQUESTS_PER_SEC),
        sweep.median(label, 0, REQUESTS_PER_SEC),
    ) {
        (Some(with), Some(none)) => goal(
            target,
            format!(
                "{} vs {}: {:.1}%{note}",
                thousands(with),
                thousands(none),
                with / none * 100.0
            ),
            Some(note.is_empty() && with >= IDLE_THROUGHPUT_SHARE * none),
        ),
        _ => goal(target, format!("not measured{note}"), None),
    }
}

fn idle_memory_goals(sweep: &IdleSweep, herdsman: &str) -> Vec<Goal> {
    let Some(largest) = sweep.largest() else {
        return Vec::new();
    };
    let count = thousands(f64::from(largest));
    let note = dropped_note(sweep, herdsman, largest);
    let own = sweep.median(herdsman, largest, RSS_PER_CONNECTION);
    let peer = sweep.median(RSS_PEER, largest, RSS_PER_CONNECTION);
    let bytes = |v: Option<f64>| v.map_or("not measured".into(), |b| format!("{b:.0} bytes"));
    vec![
        goal(
            format!("{herdsman}: RSS per idle connection ≤ 1 KiB ({count} idle)"),
            format!("{}{note}", bytes(own)),
            own.map(|b| note.is_empty() && b <= RSS_PER_IDLE_LIMIT),
        ),
        goal(
            format!("{herdsman}: RSS per idle connection ≤ {RSS_PEER}'s ({count} idle)"),
            format!("{} vs {} ({RSS_PEER}){note}", bytes(own), bytes(peer)),
            own.zip(peer).map(|(h, n)| note.is_empty() && h <= n),
        ),
    ]
}

fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Met => "met",
        Verdict::NotMet => "NOT MET",
        Verdict::NotMeasured => "not measured",
    }
}

/// "met 9 of 14, not met 3, not measured 2".
pub fn tally(goals: &[Goal]) -> String {
    let count = |v| goals.iter().filter(|g| g.verdict == v).count();
    format!(
        "met {} of {}, not met {}, not measured {}",
        count(Verdict::Met),
        goals.len(),
        count(Verdict::NotMet),
        count(Verdict::NotMeasured)
    )
}

/// The targets section of the results file.
pub fn write(md: &mut String, goals: &[Goal]) {
    let _ = writeln!(md, "## Targets\n");
    let _ = writeln!(
        md,
        "Each computed from this run's medians (the tables below give the spread over rounds): \
         {}.\n",
        tally(goals)
    );
    let _ = writeln!(md, "| target | measured | met? |\n|---|---|---|");
    for g in goals {
        let verdict = match g.verdict {
            Verdict::NotMet => format!("**{}**", verdict_word(g.verdict)),
            _ => verdict_word(g.verdict).to_string(),
        };
        let _ = writeln!(md, "| {} | {} | {verdict} |", g.target, g.measured);
    }
    let _ = writeln!(md);
}

/// The targets as plain lines, for the terminal.
pub fn summary(goals: &[Goal]) -> String {
    let mut text = format!("targets: {}\n", tally(goals));
    for g in goals {
        let _ = writeln!(
            text,
            "  {:<12} {} — {}",
            verdict_word(g.verdict),
            g.target,
            g.measured
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::super::idle::tests::idle_run;
    use super::super::tests::run;
    use super::super::Run;
    use super::*;

    fn at(c: u32, r: Run) -> Run {
        Run {
            connections: c,
            ..r
        }
    }

    fn session(runs: Vec<Run>) -> Session {
        Session {
            rounds: 1,
            workers: vec![1],
            connections: vec![50],
            labels: vec!["herdsman".into(), "haproxy".into(), "nginx".into()],
            herdsman_labels: vec!["herdsman".into()],
            peer_labels: vec!["haproxy".into(), "nginx".into()],
            runs,
            ..Session::default()
        }
    }

    fn find<'a>(goals: &'a [Goal], start: &str) -> &'a Goal {
        goals
            .iter()
            .find(|g| g.target.starts_with(start))
            .unwrap_or_else(|| panic!("no goal {start:?} in {goals:#?}"))
    }

    #[test]
    fn cpu_is_held_to_085_of_each_peer() {
        let goals = evaluate(&session(vec![
            run(1, "herdsman", 12.0, 60_000.0),
            run(1, "haproxy", 15.0, 55_000.0),
            run(1, "nginx", 14.0, 56_000.0),
        ]));
        let haproxy = find(&goals, "herdsman: CPU-µs per request ≤ 0.85 × haproxy's");
        assert_eq!(haproxy.verdict, Verdict::Met); // 12 ≤ 12.75
        assert_eq!(haproxy.measured, "12.00 vs 15.00: 0.80 ×");
        let nginx = find(&goals, "herdsman: CPU-µs per request ≤ 0.85 × nginx's");
        assert_eq!(nginx.verdict, Verdict::NotMet); // 12 > 11.9
    }

    #[test]
    fn speed_must_beat_both_peers_at_every_load() {
        let goals = evaluate(&Session {
            connections: vec![50, 200],
            ..session(vec![
                run(1, "herdsman", 12.0, 60_000.0),
                run(1, "haproxy", 15.0, 55_000.0),
                run(1, "nginx", 14.0, 61_000.0),
                at(200, run(1, "herdsman", 12.0, 60_000.0)),
                at(200, run(1, "haproxy", 15.0, 55_000.0)),
            ])
        });
        let c50 = find(
            &goals,
            "herdsman: requests/s ≥ HAProxy's and nginx's (1 worker, c=50)",
        );
        assert_eq!(c50.verdict, Verdict::NotMet);
        assert_eq!(c50.measured, "60,000 vs 55,000 (haproxy), 61,000 (nginx)");
        let c200 = find(
            &goals,
            "herdsman: requests/s ≥ HAProxy's and nginx's (1 worker, c=200)",
        );
        assert_eq!(c200.verdict, Verdict::NotMeasured); // nginx did not run at c=200
        let p99 = find(
            &goals,
            "herdsman: p99 latency ≤ HAProxy's and nginx's (1 worker, c=50)",
        );
        assert_eq!(p99.verdict, Verdict::Met); // all equal
    }

    #[test]
    fn cpu_needs_one_worker_and_fifty_connections() {
        let goals = evaluate(&Session {
            workers: vec![2],
            ..session(Vec::new())
        });
        let cpu = find(&goals, "herdsman: CPU-µs per request ≤ 0.85 × haproxy's");
        assert_eq!(cpu.verdict, Verdict::NotMeasured);
    }

    fn sweep(runs: Vec<super::super::idle::IdleRun>) -> IdleSweep {
        IdleSweep {
            counts: vec![0, 1000, 15_000],
            workers: 1,
            labels: vec!["herdsman".into(), "nginx".into()],
            runs,
            ..IdleSweep::default()
        }
    }

    #[test]
    fn idle_throughput_and_memory_are_judged_at_the_largest_count() {
        let goals = evaluate(&Session {
            idle: Some(sweep(vec![
                idle_run("herdsman", 0, 0, 50_000.0),
                idle_run("herdsman", 15_000, 9_000, 48_000.0), // 614 bytes each
                idle_run("nginx", 0, 0, 50_000.0),
                idle_run("nginx", 15_000, 12_000, 46_000.0), // 819 bytes each
            ])),
            ..session(Vec::new())
        });
        let herdsman = find(&goals, "herdsman: requests/s with 15,000 idle");
        assert_eq!(herdsman.verdict, Verdict::Met);
        assert_eq!(herdsman.measured, "48,000 vs 50,000: 96.0%");
        assert_eq!(
            find(&goals, "nginx: requests/s with 15,000 idle").verdict,
            Verdict::NotMet
        );
        let kib = find(&goals, "herdsman: RSS per idle connection ≤ 1 KiB");
        assert_eq!(
            (kib.verdict, kib.measured.as_str()),
            (Verdict::Met, "614 bytes")
        );
        let vs_nginx = find(&goals, "herdsman: RSS per idle connection ≤ nginx's");
        assert_eq!(vs_nginx.verdict, Verdict::Met);
        assert_eq!(vs_nginx.measured, "614 bytes vs 819 bytes (nginx)");
    }

    #[test]
    fn dropped_idle_connections_fail_the_idle_targets() {
        let dropped = super::super::idle::IdleRun {
            closed: 4,
            ..idle_run("herdsman", 15_000, 9_000, 50_000.0)
        };
        let goals = evaluate(&Session {
            idle: Some(sweep(vec![idle_run("herdsman", 0, 0, 50_000.0), dropped])),
            ..session(Vec::new())
        });
        let throughput = find(&goals, "herdsman: requests/s with 15,000 idle");
        assert_eq!(throughput.verdict, Verdict::NotMet);
        assert!(throughput
            .measured
            .ends_with("; dropped 4 idle connection(s)"));
        let kib = find(&goals, "herdsman: RSS per idle connection ≤ 1 KiB");
        assert_eq!(kib.verdict, Verdict::NotMet);
        // nginx has no run at all: its own throughput target and the comparison say so.
        let vs_nginx = find(&goals, "herdsman: RSS per idle connection ≤ nginx's");
        assert_eq!(vs_nginx.verdict, Verdict::NotMeasured);
    }

    #[test]
    fn the_section_tallies_the_verdicts() {
        let goals = vec![
            goal("a".into(), "1".into(), Some(true)),
            goal("b".into(), "2".into(), Some(false)),
            goal("c".into(), "3".into(), None),
        ];
        let mut md = String::new();
        write(&mut md, &goals);
        assert!(md.contains("met 1 of 3, not met 1, not measured 1"));
        assert!(md.contains("| b | 2 | **NOT MET** |"));
        assert!(summary(&goals).contains("not measured c — 3"));
    }
}
