//! The ratios of a section (one worker count, one server): each herdsman row ÷ each peer, each
//! intake mode ÷ the same build's reuseport row, and each later herdsman build ÷ the first (the
//! before/after of a change), each paired round by round.

use std::fmt::Write as _;

use super::{section_name, write_head, Cell, Extract, Session};
use crate::kit::servers::ServerKind;

/// Ratios printed for each pair of rows.
const RATIOS: &[(&str, Extract)] = &[
    ("CPU-µs per request", |r| r.cpu_us_per_request),
    ("User CPU-µs per request", |r| r.user_us_per_request),
    ("Requests/s", |r| r.wrk.requests_per_sec),
];

/// Every ratio table of one section.
pub fn write(md: &mut String, s: &Session, workers: u32, server: ServerKind) {
    let section = section_name(workers, server);
    let _ = writeln!(md, "### Ratios: herdsman ÷ peer, {section}\n");
    if s.herdsman_labels.is_empty() || s.peer_labels.is_empty() {
        let _ = writeln!(
            md,
            "No ratio: herdsman and at least one peer must both have been measured.\n"
        );
    } else {
        let _ = writeln!(
            md,
            "The ratio of the medians, and in brackets the range of the ratio taken round by round \
             (each round runs both side by side). Below 1.00 means herdsman uses less CPU per request \
             or serves fewer requests/s.\n"
        );
        let pairs: Vec<(String, String)> = s
            .herdsman_labels
            .iter()
            .flat_map(|h| s.peer_labels.iter().map(move |p| (h.clone(), p.clone())))
            .collect();
        write_table(md, s, (workers, server), &pairs, 2);
    }
    if !s.build_pairs.is_empty() {
        let _ = writeln!(
            md,
            "### Ratios: herdsman build ÷ the first build, {section}\n\n\
             Each later --herdsman-bin against the first, same run: the ratio of the medians, and \
             in brackets the range of the ratio taken round by round. For CPU-µs per request below \
             1.00 is cheaper than the first build; for requests/s above 1.00 is faster.\n"
        );
        write_table(md, s, (workers, server), &s.build_pairs, 3);
    }
    if s.intake_modes.len() > 1 {
        write_intake(md, s, workers, server);
    }
}

/// Each intake mode ÷ the same build's `reuseport` row, when several modes were measured.
fn write_intake(md: &mut String, s: &Session, workers: u32, server: ServerKind) {
    let _ = writeln!(
        md,
        "### Ratios: intake mode ÷ reuseport, {}\n",
        section_name(workers, server)
    );
    if s.intake_pairs.is_empty() {
        let _ = writeln!(
            md,
            "No ratio: `reuseport` was not among the intake modes measured ({}).\n",
            s.intake_modes.join(", ")
        );
        return;
    }
    let _ = writeln!(
        md,
        "Each herdsman intake mode against `reuseport` (one SO_REUSEPORT socket per worker), same \
         binary, same run: the ratio of the medians, and in brackets the range of the ratio taken \
         round by round. For CPU-µs per request below 1.00 is cheaper than reuseport; for \
         requests/s above 1.00 is faster.\n"
    );
    write_table(md, s, (workers, server), &s.intake_pairs, 3);
}

/// One row per figure in RATIOS and (numerator, denominator) pair, one column per connection count.
/// `decimals`: 2 for the peer comparison, 3 where a few percent decide (intake modes, builds).
fn write_table(
    md: &mut String,
    s: &Session,
    (workers, server): (u32, ServerKind),
    pairs: &[(String, String)],
    decimals: usize,
) {
    write_head(
        md,
        &s.connections,
        ("| figure | ratio |", "|---|---|"),
        |c| format!(" c={c} |"),
        "---:|",
    );
    for (name, value) in RATIOS {
        for (numerator, denominator) in pairs {
            let _ = write!(md, "| {name} | {numerator} ÷ {denominator} |");
            for &connections in &s.connections {
                let pair = (numerator.as_str(), denominator.as_str());
                let cell = Cell {
                    server,
                    workers,
                    connections,
                };
                let ratio = s.paired(pair, cell, *value);
                match (ratio.of_medians, ratio.per_round()) {
                    (Some(of_medians), Some(r)) => {
                        let _ = write!(
                            md,
                            " **{of_medians:.decimals$}** ({:.decimals$}–{:.decimals$}) |",
                            r.min, r.max
                        );
                    }
                    _ => {
                        let _ = write!(md, " — |");
                    }
                }
            }
            let _ = writeln!(md);
        }
    }
    let _ = writeln!(md);
}
