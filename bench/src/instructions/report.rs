//! What `instructions` prints: how it counted, each build's table (case, requests counted,
//! instructions, per request, budget, over or under), the builds' ratios when there are several,
//! and the cases far enough under their budgets that the budget could be lowered.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::budget::{self, Budget, ALLOWED_OVER};
use super::measure::{CaseRun, CONNECTIONS};
use crate::kit::markdown::thousands;

/// One build's counts.
#[derive(Debug, Clone)]
pub struct BuildRuns {
    pub label: String,
    pub binary: PathBuf,
    /// `herdsman --version`.
    pub version: String,
    pub runs: Vec<CaseRun>,
}

/// How the run counted, for the text above the tables.
pub struct Method {
    pub valgrind: String,
    pub wrk: String,
    pub warm_up: u32,
    pub seconds: u32,
    /// The nice value of wrk and the backend, when it could be raised.
    pub clients_nice: Option<i32>,
}

/// The whole printout, in Markdown.
pub fn markdown(method: &Method, builds: &[BuildRuns], budget: Option<&Budget>) -> String {
    let mut md = String::from("# herdsman's instructions per request\n\n");
    let _ = writeln!(
        md,
        "User-space instructions of every herdsman thread, counted by callgrind ({}) while {} \
         (`-t1 -c{CONNECTIONS}`) sent requests for {} s, after {} s of uncounted load in which \
         it made its connections (and TLS handshakes); wrk was paused while counting was turned \
         on and off, so no request is counted in part. On keep-alive connections wrk waits 1 ms \
         after each answer before the next request, so herdsman's read after answering always \
         finds nothing yet; new-connection sends `Connection: close`, and each request as soon \
         as its connection is made. wrk and the backend ran {}. One worker, the access log off \
         (but in keep-alive-access-log), no rules (but in keep-alive-rules: ten header rules and \
         a per-client rate limit never reached), herdsman's defaults otherwise. The kernel's work \
         is not counted.",
        method.valgrind,
        method.wrk,
        method.seconds,
        method.warm_up,
        method.clients_nice.map_or(
            "at the machine's usual priority (raising it was not permitted)".to_string(),
            |nice| format!("at nice {nice}, ahead of other work")
        )
    );
    match budget {
        Some(budget) => {
            let _ = writeln!(
                md,
                "Budgets from {}: a budgeted case fails `--check` when it counts more than {:.0}% \
                 over its budget.",
                budget.file.display(),
                ALLOWED_OVER * 100.0
            );
        }
        None => md.push_str("No budget file was read.\n"),
    }
    for build in builds {
        let _ = write!(
            md,
            "\n## {} ({}, {})\n\n\
             | case | requests counted | instructions | instructions per request | budget | over/under |\n\
             |---|---:|---:|---:|---:|---:|\n",
            build.label,
            build.binary.display(),
            build.version
        );
        for run in &build.runs {
            let allowed = budget.and_then(|b| b.of(run.case));
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                run.case,
                thousands(run.requests as f64),
                thousands(run.instructions as f64),
                thousands(run.per_request()),
                allowed.map_or("–".to_string(), |b| thousands(b as f64)),
                allowed.map_or("–".to_string(), |b| format!(
                    "{:+.1}%",
                    budget::over(run.per_request(), b) * 100.0
                )),
            );
        }
    }
    if builds.len() > 1 {
        write_ratios(&mut md, builds);
    }
    if let Some(budget) = budget {
        write_room(&mut md, builds, budget);
    }
    md
}

/// Each case's instructions per request in every build, and each build's ratio to the first.
fn write_ratios(md: &mut String, builds: &[BuildRuns]) {
    let first = &builds[0];
    let _ = write!(
        md,
        "\n## Instructions per request, build by build\n\n| case |"
    );
    for build in builds {
        let _ = write!(md, " {} |", build.label);
    }
    for build in &builds[1..] {
        let _ = write!(md, " {} ÷ {} |", build.label, first.label);
    }
    md.push_str("\n|---|");
    md.push_str(&"---:|".repeat(2 * builds.len() - 1));
    md.push('\n');
    for run in &first.runs {
        let _ = write!(md, "| {} |", run.case);
        let per_request: Vec<Option<f64>> = builds
            .iter()
            .map(|build| {
                build
                    .runs
                    .iter()
                    .find(|other| other.case == run.case)
                    .map(CaseRun::per_request)
            })
            .collect();
        for figure in &per_request {
            let _ = write!(md, " {} |", figure.map_or("–".to_string(), thousands));
        }
        for figure in &per_request[1..] {
            let ratio = figure.map_or("–".to_string(), |f| {
                format!("{:.3}", f / run.per_request())
            });
            let _ = write!(md, " {ratio} |");
        }
        md.push('\n');
    }
}

/// The budgeted cases counted more than `ALLOWED_OVER` under their budgets: the budget can come
/// down to hold what was gained.
fn write_room(md: &mut String, builds: &[BuildRuns], budget: &Budget) {
    let mut lines = Vec::new();
    for build in builds {
        for run in &build.runs {
            let Some(allowed) = budget.of(run.case) else {
                continue;
            };
            let over = budget::over(run.per_request(), allowed);
            if over < -ALLOWED_OVER {
                lines.push(format!(
                    "- {}, {}: {:.1}% under its budget of {allowed}; lower it to hold the gain",
                    build.label,
                    run.case,
                    -over * 100.0
                ));
            }
        }
    }
    if !lines.is_empty() {
        let _ = write!(md, "\n## Under budget\n\n{}\n", lines.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instructions::cases::Case;

    fn build(label: &str, per_request: &[(Case, u64)]) -> BuildRuns {
        BuildRuns {
            label: label.to_string(),
            binary: PathBuf::from(format!("/b/{label}")),
            version: "herdsman 0.1.0".to_string(),
            runs: per_request
                .iter()
                .map(|&(case, per)| CaseRun {
                    case,
                    requests: 10_000,
                    instructions: per * 10_000,
                    accepted: 0,
                })
                .collect(),
        }
    }

    fn method() -> Method {
        Method {
            valgrind: "valgrind-3.19.0".into(),
            wrk: "wrk 4.1.0".into(),
            warm_up: 3,
            seconds: 10,
            clients_nice: Some(-15),
        }
    }

    #[test]
    fn a_build_s_table_shows_each_case_against_its_budget() {
        let budget = Budget {
            file: PathBuf::from("bench/budget.toml"),
            per_request: vec![(Case::KeepAlive, 12_000), (Case::NewConnection, 14_000)],
        };
        let runs = [build(
            "herdsman",
            &[
                (Case::KeepAlive, 12_120),
                (Case::NewConnection, 13_000),
                (Case::KeepAliveAccessLog, 15_000),
            ],
        )];
        let md = markdown(&method(), &runs, Some(&budget));
        for line in [
            "| keep-alive | 10,000 | 121,200,000 | 12,120 | 12,000 | +1.0% |",
            "| new-connection | 10,000 | 130,000,000 | 13,000 | 14,000 | -7.1% |",
            "| keep-alive-access-log | 10,000 | 150,000,000 | 15,000 | – | – |",
            "- herdsman, new-connection: 7.1% under its budget of 14000; lower it",
            "Budgets from bench/budget.toml",
        ] {
            assert!(md.contains(line), "{line:?} missing from\n{md}");
        }
        assert!(!md.contains("build by build"), "{md}");
    }

    #[test]
    fn two_builds_get_their_ratios() {
        let runs = [
            build("old", &[(Case::KeepAlive, 12_000)]),
            build("new", &[(Case::KeepAlive, 11_400)]),
        ];
        let md = markdown(&method(), &runs, None);
        assert!(md.contains("## old (/b/old, herdsman 0.1.0)"), "{md}");
        assert!(
            md.contains("| case | old | new | new ÷ old |\n|---|---:|---:|---:|\n"),
            "{md}"
        );
        assert!(
            md.contains("| keep-alive | 12,000 | 11,400 | 0.950 |"),
            "{md}"
        );
        assert!(md.contains("No budget file was read."), "{md}");
    }
}
