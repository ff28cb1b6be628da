//! The targets herdsman is held to against its peers (issues 4 and 50), each evaluated from this
//! run's medians — never written in by hand: those of the main comparison (`load`: CPU per
//! request, requests/s, p99, requests lost and server connections opened, per server, worker count
//! and load), throughput with idle connections open, and memory per idle connection.
//!
//! Layout:
//! - `load` — the main comparison's targets for one herdsman row

mod load;

use std::fmt::Write as _;

use super::idle::{IdleSweep, REQUESTS_PER_SEC, RSS_PER_CONNECTION};
use super::Session;
use crate::kit::markdown::{thousands, worker_count};

/// Requests/s with the most idle connections open, as a share of requests/s with none.
pub const IDLE_THROUGHPUT_SHARE: f64 = 0.95;
/// Resident memory per idle client connection, in bytes.
pub const RSS_PER_IDLE_LIMIT: f64 = 1024.0;
/// The peer whose memory per idle connection herdsman must not exceed.
const RSS_PEER: &str = "nginx";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    NotMet,
    /// A row or a case the target needs was not run (or failed).
    NotMeasured,
}

/// One target: whose it is, what it asks, what was measured, and whether that meets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    /// The row held to it: a herdsman row, or (idle throughput) any proxy's.
    pub subject: String,
    pub target: String,
    pub measured: String,
    pub verdict: Verdict,
}

fn goal(subject: &str, target: String, measured: String, met: Option<bool>) -> Goal {
    let verdict = match met {
        Some(true) => Verdict::Met,
        Some(false) => Verdict::NotMet,
        None => Verdict::NotMeasured,
    };
    Goal {
        subject: subject.to_string(),
        target,
        measured,
        verdict,
    }
}

/// Every target, for every herdsman row (and, for idle throughput, every proxy).
pub fn evaluate(s: &Session) -> Vec<Goal> {
    let mut goals = Vec::new();
    for herdsman in &s.herdsman_labels {
        goals.extend(load::goals(s, herdsman));
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
            label,
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
            label,
            target,
            format!(
                "{} vs {}: {:.1}%{note}",
                thousands(with),
                thousands(none),
                with / none * 100.0
            ),
            Some(note.is_empty() && with >= IDLE_THROUGHPUT_SHARE * none),
        ),
        _ => goal(label, target, format!("not measured{note}"), None),
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
            herdsman,
            format!("{herdsman}: RSS per idle connection ≤ 1 KiB ({count} idle)"),
            format!("{}{note}", bytes(own)),
            own.map(|b| note.is_empty() && b <= RSS_PER_IDLE_LIMIT),
        ),
        goal(
            herdsman,
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

/// The rows held to targets, in the order their first target comes, each with its targets.
fn by_subject(goals: &[Goal]) -> Vec<(&str, Vec<Goal>)> {
    let mut subjects: Vec<(&str, Vec<Goal>)> = Vec::new();
    for g in goals {
        match subjects.iter_mut().find(|(s, _)| *s == g.subject) {
            Some((_, own)) => own.push(g.clone()),
            None => subjects.push((&g.subject, vec![g.clone()])),
        }
    }
    subjects
}

/// The targets section of the results file: the tally, then a table per row held to targets (so
/// that a before and an after build read side by side).
pub fn write(md: &mut String, goals: &[Goal]) {
    let _ = writeln!(md, "## Targets\n");
    let _ = writeln!(
        md,
        "Each computed from this run's medians (the tables below give the spread over rounds): \
         {}.\n",
        tally(goals)
    );
    for (subject, own) in by_subject(goals) {
        let _ = writeln!(md, "### Targets of {subject}: {}\n", tally(&own));
        let _ = writeln!(md, "| target | measured | met? |\n|---|---|---|");
        for g in &own {
            let verdict = match g.verdict {
                Verdict::NotMet => format!("**{}**", verdict_word(g.verdict)),
                _ => verdict_word(g.verdict).to_string(),
            };
            let _ = writeln!(md, "| {} | {} | {verdict} |", g.target, g.measured);
        }
        let _ = writeln!(md);
    }
}

/// The targets as plain lines, for the terminal: a tally per row, then every target.
pub fn summary(goals: &[Goal]) -> String {
    let mut text = format!("targets: {}\n", tally(goals));
    for (subject, own) in by_subject(goals) {
        let _ = writeln!(text, "  {subject}: {}", tally(&own));
    }
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
pub(super) mod tests {
    use super::super::idle::tests::idle_run;
    use super::super::Run;
    use super::*;
    use crate::kit::servers::ServerKind;

    /// One round, one worker, c=50, in front of the own backend, herdsman and both peers.
    pub fn session(runs: Vec<Run>) -> Session {
        Session {
            rounds: 1,
            servers: vec![ServerKind::Own],
            workers: vec![1],
            connections: vec![50],
            labels: vec!["herdsman".into(), "haproxy".into(), "nginx".into()],
            herdsman_labels: vec!["herdsman".into()],
            peer_labels: vec!["haproxy".into(), "nginx".into()],
            runs,
            ..Session::default()
        }
    }

    pub fn find<'a>(goals: &'a [Goal], start: &str) -> &'a Goal {
        goals
            .iter()
            .find(|g| g.target.starts_with(start))
            .unwrap_or_else(|| panic!("no goal {start:?} in {goals:#?}"))
    }

    #[test]
    fn every_herdsman_row_is_held_to_the_targets() {
        let goals = evaluate(&Session {
            herdsman_labels: vec!["before".into(), "after".into()],
            ..session(Vec::new())
        });
        let before = goals.iter().filter(|g| g.subject == "before").count();
        let after = goals.iter().filter(|g| g.subject == "after").count();
        assert_eq!((before, after), (40, 40));
        assert!(find(&goals, "after: server connections opened per request").subject == "after");
        let mut md = String::new();
        write(&mut md, &goals);
        let before_at = md.find("### Targets of before: met 0 of 40").unwrap();
        let after_at = md.find("### Targets of after: met 0 of 40").unwrap();
        assert!(before_at < after_at, "{md}");
        assert!(summary(&goals).contains("  after: met 0 of 40, not met 0, not measured 40\n"));
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
            goal("x", "a".into(), "1".into(), Some(true)),
            goal("x", "b".into(), "2".into(), Some(false)),
            goal("y", "c".into(), "3".into(), None),
        ];
        let mut md = String::new();
        write(&mut md, &goals);
        assert!(md.contains("met 1 of 3, not met 1, not measured 1"));
        assert!(md.contains("### Targets of x: met 1 of 2, not met 1, not measured 0\n"));
        assert!(md.contains("| b | 2 | **NOT MET** |"));
        assert!(summary(&goals).contains("not measured c — 3"));
    }
}
